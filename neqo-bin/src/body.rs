//! Streaming a body into a QUIC send stream chunk by chunk, and reading one out of a receive
//! stream the same way.

use std::{fs::File, io::Read, ops::ControlFlow};

use bytes::Bytes;
use quinn_proto::{Chunk, Connection, ReadError, SendStream, StreamId, VarInt, WriteError};

use crate::pattern;

/// What a stream still has to send: an optional prefix, then generated pattern bytes or a
/// file's contents, then FIN.
#[derive(Debug, Default)]
pub struct Source {
    /// Sent first (a request line, a perf length header).
    prefix: Option<Bytes>,
    /// Pattern bytes already sent.
    offset: u64,
    /// Pattern bytes to send in all.
    len: u64,
    /// A file to send after the prefix, and a chunk read from it but not yet taken.
    file: Option<(File, Option<Bytes>)>,
    /// Bytes handed to the stream so far.
    pub written: u64,
}

/// The result of [`Source::pump`].
#[derive(Debug, PartialEq, Eq)]
pub enum Pumped {
    /// Everything is written and the stream finished.
    Finished,
    /// The stream's buffer is full; wait for a `Writable` event.
    Blocked,
}

impl Source {
    pub const fn pattern(prefix: Option<Bytes>, len: u64) -> Self {
        Self {
            prefix,
            offset: 0,
            len,
            file: None,
            written: 0,
        }
    }

    pub const fn file(file: File) -> Self {
        Self {
            prefix: None,
            offset: 0,
            len: 0,
            file: Some((file, None)),
            written: 0,
        }
    }

    /// Writes as much as the stream takes; finishes the stream when all is written.
    pub fn pump(&mut self, stream: &mut SendStream<'_>) -> Result<Pumped, PumpError> {
        loop {
            let (chunk, origin) = if let Some(p) = self.prefix.take() {
                (p, Origin::Prefix)
            } else if let Some((file, pending)) = &mut self.file {
                if let Some(p) = pending.take() {
                    (p, Origin::File)
                } else {
                    let mut buf = vec![0; pattern::CHUNK];
                    let n = file.read(&mut buf).map_err(PumpError::File)?;
                    if n == 0 {
                        self.file = None;
                        continue;
                    }
                    buf.truncate(n);
                    (Bytes::from(buf), Origin::File)
                }
            } else if self.offset < self.len {
                (
                    pattern::chunk(self.offset, self.len - self.offset),
                    Origin::Pattern,
                )
            } else {
                stream.finish().map_err(|_| PumpError::Closed)?;
                return Ok(Pumped::Finished);
            };
            let total = chunk.len();
            let mut chunks = [chunk];
            let written = match stream.write_chunks(&mut chunks) {
                Ok(w) => w.bytes,
                Err(WriteError::Blocked) => 0,
                Err(WriteError::Stopped(_) | WriteError::ClosedStream) => {
                    return Err(PumpError::Closed);
                }
            };
            self.written += written as u64;
            if written < total {
                // write_chunks advanced the chunk past what it took.
                let [rest] = chunks;
                match origin {
                    Origin::Prefix => self.prefix = Some(rest),
                    Origin::File => {
                        if let Some((_, pending)) = &mut self.file {
                            *pending = Some(rest);
                        }
                    }
                    Origin::Pattern => self.offset += written as u64,
                }
                return Ok(Pumped::Blocked);
            }
            if origin == Origin::Pattern {
                self.offset += written as u64;
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Prefix,
    File,
    Pattern,
}

/// Why a body could not be sent.
#[derive(Debug)]
pub enum PumpError {
    /// The peer stopped the stream or the connection closed it.
    Closed,
    /// Reading the file failed.
    File(std::io::Error),
}

/// Where reading a receive stream stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEnd {
    /// Nothing more is readable yet (or the stream is gone): wait for the next event.
    Blocked,
    /// The peer's FIN arrived: every byte has been handed over.
    Fin,
    /// The peer reset the stream with this code.
    Reset(VarInt),
    /// The caller's `on_chunk` asked to stop.
    Stopped,
}

/// Hands the readable chunks of stream `id`, in order and without copying, to `on_chunk`
/// until the stream blocks, ends or is reset, or `on_chunk` breaks; then releases flow-control
/// credit for what was read.
pub fn read_stream(
    conn: &mut Connection,
    id: StreamId,
    mut on_chunk: impl FnMut(Chunk) -> ControlFlow<()>,
) -> ReadEnd {
    let mut rs = conn.recv_stream(id);
    let Ok(mut chunks) = rs.read(true) else {
        return ReadEnd::Blocked;
    };
    let end = loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => {
                if on_chunk(chunk).is_break() {
                    break ReadEnd::Stopped;
                }
            }
            Ok(None) => break ReadEnd::Fin,
            Err(ReadError::Blocked) => break ReadEnd::Blocked,
            Err(ReadError::Reset(code)) => break ReadEnd::Reset(code),
        }
    };
    // Whether the peer should be told of new credit is decided by the driver's next poll.
    let _ = chunks.finalize();
    end
}
