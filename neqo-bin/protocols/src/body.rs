//! Streaming a body into a QUIC send stream chunk by chunk, and reading one out of a receive
//! stream the same way.

use std::ops::ControlFlow;

use bytes::Bytes;
use quinn_proto::{Chunk, Connection, ReadError, SendStream, StreamId, VarInt, WriteError};

use crate::pattern;

/// What a stream still has to send: an optional prefix, then generated pattern bytes or chunks
/// fed in from elsewhere (a file read off the driver thread), then FIN.
#[derive(Debug)]
pub struct Source {
    /// Sent first (a request line, a perf length header, an HTTP/3 response's framing).
    prefix: Option<Bytes>,
    body: Body,
    /// Bytes handed to the stream so far.
    pub written: u64,
}

#[derive(Debug)]
enum Body {
    /// Pattern bytes: `offset` of `len` sent.
    Pattern { offset: u64, len: u64 },
    /// Chunks given to [`Source::feed`]: the one not yet (fully) written, and whether the last
    /// one has been fed.
    Fed { pending: Option<Bytes>, last: bool },
}

/// The result of [`Source::pump`].
#[derive(Debug, PartialEq, Eq)]
pub enum Pumped {
    /// Everything is written and the stream finished.
    Finished,
    /// The stream's buffer is full; wait for a `Writable` event.
    Blocked,
    /// A fed source has written all it was given: [`feed`](Source::feed) it more.
    Starved,
}

/// The peer stopped the stream or the connection closed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamClosed;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Prefix,
    Pattern,
    Fed,
}

impl Source {
    /// `prefix`, then `len` pattern bytes.
    #[must_use]
    pub const fn pattern(prefix: Option<Bytes>, len: u64) -> Self {
        Self {
            prefix,
            body: Body::Pattern { offset: 0, len },
            written: 0,
        }
    }

    /// `prefix`, then a body whose chunks come through [`feed`](Self::feed).
    #[must_use]
    pub const fn fed(prefix: Option<Bytes>) -> Self {
        Self {
            prefix,
            body: Body::Fed {
                pending: None,
                last: false,
            },
            written: 0,
        }
    }

    /// Gives a fed source its next chunk (only after [`Pumped::Starved`]); `is_last` when none
    /// will follow. Does nothing to a pattern source.
    pub fn feed(&mut self, chunk: Bytes, is_last: bool) {
        if let Body::Fed { pending, last } = &mut self.body {
            debug_assert!(pending.is_none() && !*last, "fed while not starved");
            *pending = (!chunk.is_empty()).then_some(chunk);
            *last = is_last;
        }
    }

    /// The next chunk to write and where it came from; `Err` when there is none now.
    fn next_chunk(&mut self) -> Result<(Bytes, Origin), Option<Pumped>> {
        if let Some(p) = self.prefix.take() {
            return Ok((p, Origin::Prefix));
        }
        match &mut self.body {
            Body::Pattern { offset, len } if *offset < *len => {
                Ok((pattern::chunk(*offset, *len - *offset), Origin::Pattern))
            }
            Body::Fed { pending, last } => match pending.take() {
                Some(p) => Ok((p, Origin::Fed)),
                None if !*last => Err(Some(Pumped::Starved)),
                None => Err(None),
            },
            Body::Pattern { .. } => Err(None),
        }
    }

    /// Writes as much as the stream takes; finishes the stream when all is written.
    ///
    /// # Errors
    /// The stream is stopped or gone.
    pub fn pump(&mut self, stream: &mut SendStream<'_>) -> Result<Pumped, StreamClosed> {
        loop {
            let (chunk, origin) = match self.next_chunk() {
                Ok(c) => c,
                Err(Some(wait)) => return Ok(wait),
                Err(None) => {
                    stream.finish().map_err(|_| StreamClosed)?;
                    return Ok(Pumped::Finished);
                }
            };
            let total = chunk.len();
            let mut chunks = [chunk];
            // Only a write that says Blocked registers the stream for a Writable event: a
            // partial write (cut at the connection's flow-control limit or send window) does
            // not, so the loop writes again until quinn-proto says Blocked.
            let (written, blocked) = match stream.write_chunks(&mut chunks) {
                Ok(w) => (w.bytes, false),
                Err(WriteError::Blocked) => (0, true),
                Err(WriteError::Stopped(_) | WriteError::ClosedStream) => {
                    return Err(StreamClosed);
                }
            };
            self.written += written as u64;
            // write_chunks advanced the chunk past what it took.
            let [rest] = chunks;
            match (origin, &mut self.body) {
                (Origin::Prefix, _) if written < total => self.prefix = Some(rest),
                (Origin::Pattern, Body::Pattern { offset, .. }) => *offset += written as u64,
                (Origin::Fed, Body::Fed { pending, .. }) if written < total => {
                    *pending = Some(rest);
                }
                _ => {}
            }
            if blocked || (written == 0 && total > 0) {
                return Ok(Pumped::Blocked);
            }
        }
    }
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
    /// The caller's `on_chunk` asked to stop, or its byte limit was reached.
    Stopped,
}

/// Hands the readable chunks of stream `id`, in order and without copying, to `on_chunk`
/// until the stream blocks, ends or is reset, or `on_chunk` breaks; then releases flow-control
/// credit for what was read.
pub fn read_stream(
    conn: &mut Connection,
    id: StreamId,
    on_chunk: impl FnMut(Chunk) -> ControlFlow<()>,
) -> ReadEnd {
    read_stream_up_to(conn, id, usize::MAX, on_chunk)
}

/// As [`read_stream`], but hands over at most `max` bytes: what is not read stays in the stream
/// and holds the peer back by flow control (backpressure from a slow consumer).
pub fn read_stream_up_to(
    conn: &mut Connection,
    id: StreamId,
    max: usize,
    mut on_chunk: impl FnMut(Chunk) -> ControlFlow<()>,
) -> ReadEnd {
    if max == 0 {
        return ReadEnd::Stopped;
    }
    let mut rs = conn.recv_stream(id);
    let Ok(mut chunks) = rs.read(true) else {
        return ReadEnd::Blocked;
    };
    let mut left = max;
    let end = loop {
        if left == 0 {
            break ReadEnd::Stopped;
        }
        match chunks.next(left) {
            Ok(Some(chunk)) => {
                left -= chunk.bytes.len();
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

/// Closes both halves of a stream, whichever is still open: what we send with RESET_STREAM,
/// what we receive with STOP_SENDING, both with `code`. (An error means that half was
/// already closed.) RFC 9000 section 3.5 asks this of an endpoint that receives STOP_SENDING
/// or gives up on a stream; with both halves closed quinn-proto frees the stream, and the peer
/// gets its stream credit back.
pub fn cancel(conn: &mut Connection, id: StreamId, code: VarInt) {
    let _ = conn.send_stream(id).reset(code);
    let _ = conn.recv_stream(id).stop(code);
}
