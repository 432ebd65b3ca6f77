//! A child's output stream, drained on its own thread so that the child never blocks on a full
//! pipe, keeping the last [`CAPTURE_LIMIT`] bytes: the end is where a failure says why.

use std::{
    io::{self, Read},
    sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc},
    thread,
    time::{Duration, Instant},
};

/// How much of each of a child's output streams [`crate::Measured`] keeps: the last 1 MiB.
pub const CAPTURE_LIMIT: usize = 1 << 20;

/// Lines longer than this reach the line callback in pieces.
const MAX_LINE: usize = 64 << 10;

/// How often [`Capture::text`] looks again while the stream has neither ended nor drained.
const RECHECK: Duration = Duration::from_millis(5);

/// The last [`CAPTURE_LIMIT`] bytes of a stream.
#[derive(Debug, Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.0.extend_from_slice(data);
        // Trim only once twice the limit has piled up, so that each byte moves at most once.
        if self.0.len() > 2 * CAPTURE_LIMIT {
            let excess = self.0.len() - CAPTURE_LIMIT;
            self.0.drain(..excess);
        }
    }

    fn text(&self) -> String {
        let start = self.0.len().saturating_sub(CAPTURE_LIMIT);
        String::from_utf8_lossy(&self.0[start..]).into_owned()
    }
}

/// One stream being drained.
#[derive(Debug)]
pub(crate) struct Capture {
    /// On a pipe whose queue can be read, each read and the push of what it returned happen
    /// under this lock, so that what is not in the tail is still queued in the pipe.
    shared: Arc<Mutex<Tail>>,
    /// Disconnected once the stream has ended.
    ended: mpsc::Receiver<()>,
    /// A duplicate of the pipe's read end, to ask how much is queued in it (Unix).
    #[cfg(unix)]
    pipe: Option<std::os::fd::OwnedFd>,
}

impl Capture {
    /// Drains `pipe` on a new thread; `on_line` sees each line, without its line ending, as it
    /// arrives.
    pub(crate) fn start(
        pipe: impl Read + Send + 'static,
        on_line: impl FnMut(&str) + Send + 'static,
    ) -> Self {
        let shared = Arc::new(Mutex::new(Tail::default()));
        let (ended_tx, ended) = mpsc::channel::<()>();
        let writer = Arc::clone(&shared);
        thread::spawn(move || {
            let _ended = ended_tx;
            drain(pipe, &writer, None::<fn()>, on_line);
        });
        Self {
            shared,
            ended,
            #[cfg(unix)]
            pipe: None,
        }
    }

    /// [`start`](Self::start) on a pipe whose queue can be read, so that [`text`](Self::text)
    /// knows when it holds everything written so far even while a grandchild keeps the pipe
    /// open.
    #[cfg(unix)]
    pub(crate) fn start_pipe(
        pipe: impl Read + std::os::fd::AsFd + Send + 'static,
        on_line: impl FnMut(&str) + Send + 'static,
    ) -> Self {
        use std::os::fd::AsRawFd as _;
        let Ok(dup) = pipe.as_fd().try_clone_to_owned() else {
            return Self::start(pipe, on_line);
        };
        let shared = Arc::new(Mutex::new(Tail::default()));
        let (ended_tx, ended) = mpsc::channel::<()>();
        let writer = Arc::clone(&shared);
        thread::spawn(move || {
            let _ended = ended_tx;
            // Open as long as `drain` holds `pipe`, and it waits only while it does.
            let fd = pipe.as_fd().as_raw_fd();
            drain(pipe, &writer, Some(|| wait_readable(fd)), on_line);
        });
        Self {
            shared,
            ended,
            pipe: Some(dup),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tail> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the stream has held so far, without waiting.
    pub(crate) fn so_far(&self) -> String {
        self.lock().text()
    }

    /// What the stream held once its writer has gone: waits for its end or, on a pipe whose
    /// queue can be read, until the draining thread has taken in everything queued (a
    /// grandchild that inherited the pipe may keep it open long after the child itself has
    /// gone), for at most `guard`, a hang guard: a draining thread that lags behind on a
    /// loaded machine is waited for.
    pub(crate) fn text(&self, guard: Duration) -> String {
        let until = Instant::now() + guard;
        loop {
            if !matches!(
                self.ended.recv_timeout(RECHECK),
                Err(mpsc::RecvTimeoutError::Timeout)
            ) {
                break;
            }
            let tail = self.lock();
            if self.queued() == Some(0) || Instant::now() >= until {
                return tail.text();
            }
        }
        self.so_far()
    }

    /// Bytes in the pipe not yet read, where that can be asked (under the lock: then
    /// everything read is in the tail).
    #[cfg(unix)]
    fn queued(&self) -> Option<usize> {
        use std::os::fd::AsRawFd as _;
        let fd = self.pipe.as_ref()?.as_raw_fd();
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int through the pointer, to `n`, a live local; `fd` is
        // open for as long as `self.pipe` lives.
        let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &raw mut n) };
        (rc == 0).then(|| usize::try_from(n).ok()).flatten()
    }

    #[cfg(not(unix))]
    #[allow(clippy::unused_self, reason = "the Unix version reads the pipe")]
    const fn queued(&self) -> Option<usize> {
        None
    }
}

/// Reads `pipe` to its end into `tail`, and hands `on_line` each line (long ones in pieces of
/// [`MAX_LINE`]) once it is there. With `wait_readable` (which blocks until a read would
/// not), each read and its push happen under the lock.
fn drain(
    mut pipe: impl Read,
    tail: &Mutex<Tail>,
    mut wait_readable: Option<impl FnMut()>,
    mut on_line: impl FnMut(&str),
) {
    let lock = || tail.lock().unwrap_or_else(PoisonError::into_inner);
    let mut buf = vec![0u8; MAX_LINE];
    let mut line: Vec<u8> = Vec::new();
    let mut emit = |line: &mut Vec<u8>| {
        on_line(String::from_utf8_lossy(line).trim_end_matches(['\n', '\r']));
        line.clear();
    };
    loop {
        let read = if let Some(wait) = wait_readable.as_mut() {
            wait();
            let mut t = lock();
            let read = pipe.read(&mut buf);
            if let Ok(n) = read {
                t.push(&buf[..n]);
            }
            read
        } else {
            let read = pipe.read(&mut buf);
            if let Ok(n) = read {
                lock().push(&buf[..n]);
            }
            read
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        for &b in &buf[..n] {
            line.push(b);
            if b == b'\n' || line.len() == MAX_LINE {
                emit(&mut line);
            }
        }
    }
    if !line.is_empty() {
        emit(&mut line);
    }
}

/// Blocks until a read of `fd` would not: data, its end, or an error to report.
#[cfg(unix)]
fn wait_readable(fd: std::os::fd::RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes one pollfd, `p`, a live local; `fd` is the pipe that the
    // caller, the draining thread, holds open.
    while unsafe { libc::poll(&raw mut p, 1, -1) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes() {
        let mut tail = Tail::default();
        for k in 0..3 * CAPTURE_LIMIT / 1000 + 1 {
            let chunk = format!("{:0999}\n", k % 10);
            tail.push(chunk.as_bytes());
        }
        let text = tail.text();
        assert_eq!(text.len(), CAPTURE_LIMIT);
        let last = 3 * CAPTURE_LIMIT / 1000;
        assert!(
            text.ends_with(&format!("{:0999}\n", last % 10)),
            "the end is kept"
        );
    }

    #[test]
    fn lines_reach_the_callback_and_the_text() {
        let (tx, rx) = mpsc::channel();
        let input: &[u8] = b"first\r\nsecond\nno newline";
        let capture = Capture::start(input, move |l| tx.send(l.to_owned()).unwrap());
        assert_eq!(
            capture.text(Duration::from_secs(10)),
            "first\r\nsecond\nno newline"
        );
        assert_eq!(
            rx.iter().collect::<Vec<_>>(),
            ["first", "second", "no newline"]
        );
    }

    #[test]
    fn long_lines_arrive_in_pieces() {
        let piece = MAX_LINE;
        let (tx, rx) = mpsc::channel();
        let capture = Capture::start(std::io::Cursor::new(vec![b'x'; 3 * piece]), move |l| {
            tx.send(l.len()).unwrap();
        });
        assert_eq!(capture.text(Duration::from_secs(10)).len(), 3 * piece);
        assert_eq!(rx.iter().collect::<Vec<_>>(), [piece; 3]);
    }
}
