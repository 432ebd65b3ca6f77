//! One saved body (`--output-dir`, `-o`, standard output) on its way out.
//!
//! Bytes read from the stream collect in a buffer; once it holds a [`CHUNK`] (or, at the FIN,
//! whatever is left) all of it becomes one write job on the blocking pool. While that write is
//! in flight the next buffer collects up to [`HOLD`], so the caller goes on reading the stream
//! and quinn-proto does not pile up thousands of received packets (past 2048 it copies them
//! all into one buffer); only when [`Output::room`] is 0 does the caller stop reading, so a
//! slow disk holds the server back through flow control. The two buffers take turns and are
//! kept, not allocated per write.

use std::{
    fs::File,
    io::{self, Write as _},
    path::PathBuf,
};

/// Where one body goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Sink {
    /// A file, created (truncated) by the first write.
    File(PathBuf),
    /// Standard output (a copy of its descriptor, so that the write jobs own what they use).
    Stdout,
}

impl Sink {
    pub(super) fn open(&self) -> io::Result<File> {
        match self {
            Self::File(path) => File::create(path),
            Self::Stdout => stdout(),
        }
    }
}

impl std::fmt::Display for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => path.display().fmt(f),
            Self::Stdout => f.write_str("standard output"),
        }
    }
}

#[cfg(unix)]
fn stdout() -> io::Result<File> {
    use std::os::fd::AsFd as _;
    Ok(File::from(io::stdout().as_fd().try_clone_to_owned()?))
}

#[cfg(windows)]
fn stdout() -> io::Result<File> {
    use std::os::windows::io::AsHandle as _;
    Ok(File::from(io::stdout().as_handle().try_clone_to_owned()?))
}

#[cfg(not(any(unix, windows)))]
fn stdout() -> io::Result<File> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no standard output to write a body to on this platform",
    ))
}

use neqo_driver::Jobs;
use neqo_protocols::pattern::CHUNK;
use quinn_proto::{ConnectionHandle, StreamId};

/// A write job's result for one request.
#[derive(Debug)]
pub(super) struct WriteDone {
    /// The connection the request was made on.
    pub(super) connection: ConnectionHandle,
    pub(super) id: StreamId,
    /// Tells its request from an earlier one with the same connection handle and stream id.
    pub(super) token: u64,
    pub(super) result: io::Result<Written>,
}

/// What a write job gives back: the file for the next write (`None` after the last) and its
/// buffer, emptied, for the one after.
#[derive(Debug)]
pub(super) struct Written {
    file: Option<File>,
    buffer: Vec<u8>,
}

/// The most a saved body collects while a write is in flight: what a write that takes a
/// while (a disk's flush, a busy blocking pool) lets the stream deliver meanwhile. With a
/// write in flight a body holds at most twice this.
pub(super) const HOLD: usize = 16 * CHUNK;

#[derive(Debug)]
pub(super) struct Output {
    sink: Sink,
    /// `None` before the first write and while a write is in flight.
    file: Option<File>,
    /// Received, not yet handed to a write.
    buf: Vec<u8>,
    /// The other buffer, back from the last write, emptied (`None` while it is in flight).
    spare: Option<Vec<u8>>,
    writing: bool,
    /// The file exists (created by the first write).
    created: bool,
    /// The stream's FIN was read: nothing more will be pushed.
    fin: bool,
}

impl Output {
    pub(super) fn new(sink: Sink) -> Self {
        Self {
            sink,
            file: None,
            buf: Vec::new(),
            spare: None,
            writing: false,
            created: false,
            fin: false,
        }
    }

    /// Where the body goes.
    pub(super) const fn sink(&self) -> &Sink {
        &self.sink
    }

    /// How many more stream bytes may be taken now.
    pub(super) fn room(&self) -> usize {
        HOLD.saturating_sub(self.buf.len())
    }

    /// Takes stream bytes (at most [`room`](Self::room) in all).
    pub(super) fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The stream's FIN was read.
    pub(super) const fn end(&mut self) {
        self.fin = true;
    }

    /// Starts the next write on `writes` if one is due, tagged with its request; returns
    /// whether it did.
    pub(super) fn start_write(
        &mut self,
        writes: &Jobs<WriteDone>,
        connection: ConnectionHandle,
        id: StreamId,
        token: u64,
    ) -> bool {
        let Some(job) = self.next_write() else {
            return false;
        };
        writes.spawn(move || WriteDone {
            connection,
            id,
            token,
            result: job(),
        });
        true
    }

    /// The next write job, if one is due: none while one is in flight; all that is buffered
    /// once it is a [`CHUNK`] or more, or at the FIN what is left (creating the file even for
    /// an empty body). The last write closes the file in the job, off the driver thread.
    pub(super) fn next_write(
        &mut self,
    ) -> Option<impl FnOnce() -> io::Result<Written> + Send + 'static> {
        let due = self.buf.len() >= CHUNK || (self.fin && (!self.buf.is_empty() || !self.created));
        if self.writing || !due {
            return None;
        }
        self.writing = true;
        let mut data = std::mem::replace(&mut self.buf, self.spare.take().unwrap_or_default());
        let last = self.fin;
        let (file, sink) = (self.file.take(), self.sink.clone());
        Some(move || {
            let file = write_chunk(file, || sink.open(), &data)?;
            data.clear();
            Ok(Written {
                file: (!last).then_some(file),
                buffer: data,
            })
        })
    }

    /// A write job finished.
    pub(super) fn written(&mut self, done: Written) {
        self.file = done.file;
        self.spare = Some(done.buffer);
        self.writing = false;
        self.created = true;
    }

    /// Everything received is written.
    pub(super) fn done(&self) -> bool {
        self.fin && self.created && !self.writing && self.buf.is_empty()
    }
}

/// Writes `data` to `file`, or to the file `open` makes first when `file` is `None`;
/// returns the file for the next chunk. Blocking; run it with [`Jobs`].
///
/// # Errors
/// Opening or writing failed (no space, permissions, a directory in the way, a closed pipe).
pub fn write_chunk(
    file: Option<File>,
    open: impl FnOnce() -> io::Result<File>,
    data: &[u8],
) -> io::Result<File> {
    let mut file = match file {
        Some(f) => f,
        None => open()?,
    };
    file.write_all(data)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("neqo-bin-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn writes_create_then_append_and_fail_cleanly() {
        let dir = scratch("write");
        let path = dir.join("out");
        let f = write_chunk(None, || File::create(&path), b"hello, ").unwrap();
        let _f = write_chunk(Some(f), || unreachable!(), b"world").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello, world");
        std::fs::create_dir(dir.join("in-the-way")).unwrap();
        assert!(write_chunk(None, || File::create(dir.join("in-the-way")), b"x").is_err());
        #[cfg(target_os = "linux")]
        {
            let full = write_chunk(None, || File::create("/dev/full"), b"x").unwrap_err();
            assert_eq!(full.raw_os_error(), Some(libc::ENOSPC));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_write_in_flight_while_the_next_buffer_collects_up_to_the_hold() {
        let dir = std::env::temp_dir().join(format!("neqo-bin-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut out = Output::new(Sink::File(dir.join("body")));
        out.push(&vec![1; CHUNK - 1]);
        assert!(out.next_write().is_none(), "nothing due below a chunk");
        out.push(&[1]);
        let job = out.next_write().expect("a chunk is written");
        assert_eq!(
            out.room(),
            HOLD,
            "the next buffer collects while the chunk is written"
        );
        out.push(&vec![2; HOLD]);
        assert_eq!(out.room(), 0, "the hold is full: the caller reads no more");
        assert!(out.next_write().is_none(), "one write at a time");
        let first = job().unwrap();
        assert_eq!(first.buffer.len(), 0);
        let first_buffer = first.buffer.as_ptr();
        out.written(first);
        let job = out.next_write().expect("all that collected, in one write");
        assert_eq!(out.room(), HOLD);
        assert_eq!(
            out.buf.as_ptr(),
            first_buffer,
            "the first buffer is used again"
        );
        out.written(job().unwrap());
        out.push(b"tail");
        out.end();
        assert!(!out.done());
        let job = out.next_write().expect("the rest at the FIN");
        out.written(job().unwrap());
        assert!(out.done());
        let mut expected = vec![1; CHUNK];
        expected.extend(vec![2; HOLD]);
        expected.extend(b"tail");
        assert_eq!(std::fs::read(dir.join("body")).unwrap(), expected);

        let mut empty = Output::new(Sink::File(dir.join("empty")));
        empty.end();
        let job = empty
            .next_write()
            .expect("an empty body still makes a file");
        empty.written(job().unwrap());
        assert!(empty.done());
        assert_eq!(std::fs::read(dir.join("empty")).unwrap(), b"");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
