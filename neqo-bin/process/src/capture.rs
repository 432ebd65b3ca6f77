//! A child's output stream, drained on its own thread so that the child never blocks on a full
//! pipe, keeping the last [`CAPTURE_LIMIT`] bytes: the end is where a failure says why.

use std::{
    io::{BufRead as _, BufReader, Read},
    sync::{Arc, Mutex, PoisonError, mpsc},
    thread,
    time::Duration,
};

/// How much of each of a child's output streams [`crate::Measured`] keeps: the last 1 MiB.
pub const CAPTURE_LIMIT: usize = 1 << 20;

/// Lines longer than this reach the line callback in pieces.
const MAX_LINE: u64 = 64 << 10;

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
    tail: Arc<Mutex<Tail>>,
    /// Disconnected once the stream has ended.
    ended: mpsc::Receiver<()>,
}

impl Capture {
    /// Drains `pipe` on a new thread; `on_line` sees each line, without its line ending, as it
    /// arrives.
    pub(crate) fn start(
        pipe: impl Read + Send + 'static,
        mut on_line: impl FnMut(&str) + Send + 'static,
    ) -> Self {
        let tail = Arc::new(Mutex::new(Tail::default()));
        let (ended_tx, ended) = mpsc::channel::<()>();
        let writer = Arc::clone(&tail);
        thread::spawn(move || {
            let _ended = ended_tx;
            let mut reader = BufReader::new(pipe);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        writer
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(&line);
                        on_line(String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']));
                    }
                }
            }
        });
        Self { tail, ended }
    }

    /// What the stream has held so far, without waiting.
    pub(crate) fn so_far(&self) -> String {
        self.tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .text()
    }

    /// What the stream held, after waiting at most `grace` for its end: a grandchild that
    /// inherited the pipe may keep it open after the child itself has gone.
    pub(crate) fn text(&self, grace: Duration) -> String {
        let _ = self.ended.recv_timeout(grace);
        self.tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .text()
    }
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
        let piece = usize::try_from(MAX_LINE).unwrap();
        let (tx, rx) = mpsc::channel();
        let capture = Capture::start(std::io::Cursor::new(vec![b'x'; 3 * piece]), move |l| {
            tx.send(l.len()).unwrap();
        });
        assert_eq!(capture.text(Duration::from_secs(10)).len(), 3 * piece);
        assert_eq!(rx.iter().collect::<Vec<_>>(), [piece; 3]);
    }
}
