//! Streaming writer for one msquic stream with send buffering disabled.
//!
//! msquic keeps pointers to the application's buffers until `SEND_COMPLETE`,
//! so every send is a heap-allocated [`Chunk`] whose address is the send
//! context.  Generated bodies point straight into the static pattern, so even
//! huge responses need no per-request memory.  The sender keeps at least
//! msquic's ideal send buffer size in flight.
//!
//! `StreamSend` on a worker thread may deliver a (cancelled) `SEND_COMPLETE`
//! inline, re-entering the stream callback; all state touched by that path is
//! in `Cell`s and the `RefCell` is never borrowed across an msquic call.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::fs::File;
use std::io::Read;

use msquic::ffi::{self, HQUIC, QUIC_BUFFER};
use neqo_protocols::pattern;

use super::raw;

/// Size of each send of generated data.
const PATTERN_CHUNK: u64 = pattern::CHUNK as u64;
/// Size of each file read / send.
const FILE_CHUNK: usize = 64 * 1024;
/// Minimum bytes kept in flight for generated data (it costs no memory).
const PATTERN_MIN_WINDOW: u64 = 4 * 1024 * 1024;
/// Minimum bytes kept in flight for owned data (file contents).
const OWNED_MIN_WINDOW: u64 = 256 * 1024;

/// What follows the optional prefix on the wire.
#[derive(Debug)]
pub(crate) enum Body {
    /// Nothing.
    Empty,
    /// `len` generated pattern bytes, pattern offsets starting at 0.
    Pattern { len: u64 },
    /// The contents of a file (`len` bytes).
    File { file: File, len: u64 },
}

#[derive(Debug)]
struct State {
    prefix: Option<Vec<u8>>,
    body: Body,
    /// Body bytes already handed to msquic.
    body_sent: u64,
    fin_queued: bool,
}

/// One in-flight send; its address is the msquic send context.
struct Chunk {
    buf: QUIC_BUFFER,
    /// Keeps owned data alive; static pattern data needs nothing.
    _owned: Option<Vec<u8>>,
}

enum Next {
    Data {
        data: Data,
        last: bool,
    },
    /// Nothing (more) to send: just FIN.
    Fin,
}

enum Data {
    Static(&'static [u8]),
    Owned(Vec<u8>),
}

/// Sends `prefix` then `body`, then FIN.
#[derive(Debug)]
pub(crate) struct BodySender {
    state: RefCell<State>,
    inflight: Cell<u64>,
    ideal: Cell<u64>,
    pumping: Cell<bool>,
    min_window: u64,
    /// Total bytes (prefix + body) handed to msquic.
    queued: Cell<u64>,
}

impl BodySender {
    pub(crate) fn new(prefix: Option<Vec<u8>>, body: Body) -> Self {
        let min_window = match body {
            Body::File { .. } => OWNED_MIN_WINDOW,
            Body::Empty | Body::Pattern { .. } => PATTERN_MIN_WINDOW,
        };
        Self {
            min_window,
            state: RefCell::new(State {
                prefix,
                body,
                body_sent: 0,
                fin_queued: false,
            }),
            inflight: Cell::new(0),
            ideal: Cell::new(0),
            pumping: Cell::new(false),
            queued: Cell::new(0),
        }
    }

    /// Total bytes handed to msquic so far.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.get()
    }

    /// Updates the ideal send buffer size reported by msquic.
    pub(crate) fn set_ideal(&self, bytes: u64) {
        self.ideal.set(bytes);
    }

    fn window(&self) -> u64 {
        self.ideal.get().max(self.min_window)
    }

    /// Handles `SEND_COMPLETE` for a context produced by this sender.
    ///
    /// # Safety
    /// `context` must be a send context passed to msquic by [`Self::pump`]
    /// whose completion has not been handled yet.
    pub(crate) unsafe fn complete(&self, context: *mut c_void) {
        // SAFETY: per the contract, `context` came from `Box::into_raw` in `send`.
        let chunk = unsafe { Box::from_raw(context.cast::<Chunk>()) };
        self.inflight
            .set(self.inflight.get() - u64::from(chunk.buf.Length));
    }

    /// Queues as much as the window allows.  Re-entrant calls are no-ops.
    ///
    /// # Safety
    /// `stream` must be the live stream this sender belongs to, and this
    /// sender must stay at a stable address until all sends complete.
    pub(crate) unsafe fn pump(&self, stream: HQUIC) -> Result<(), String> {
        if self.pumping.replace(true) {
            return Ok(());
        }
        let result = self.pump_inner(stream);
        self.pumping.set(false);
        result
    }

    fn pump_inner(&self, stream: HQUIC) -> Result<(), String> {
        loop {
            if self.inflight.get() >= self.window() {
                return Ok(());
            }
            let next = {
                let mut st = self.state.borrow_mut();
                if st.fin_queued {
                    return Ok(());
                }
                let next = st.next()?;
                st.fin_queued = match &next {
                    Next::Fin => true,
                    Next::Data { last, .. } => *last,
                };
                next
            };
            match next {
                Next::Fin => {
                    // SAFETY: the stream is live per `pump`'s contract.
                    return unsafe { raw::stream_shutdown(stream, raw::SHUTDOWN_GRACEFUL, 0) };
                }
                Next::Data { data, last } => {
                    // SAFETY: the stream is live per `pump`'s contract.
                    unsafe { self.send(stream, data, last)? };
                }
            }
        }
    }

    /// # Safety
    /// `stream` must be live.
    unsafe fn send(&self, stream: HQUIC, data: Data, last: bool) -> Result<(), String> {
        let (ptr, len, owned) = match data {
            Data::Static(s) => (s.as_ptr(), s.len(), None),
            Data::Owned(v) => (v.as_ptr(), v.len(), Some(v)),
        };
        let len32 = u32::try_from(len).expect("chunks are small");
        let chunk = Box::into_raw(Box::new(Chunk {
            buf: QUIC_BUFFER {
                Length: len32,
                Buffer: ptr.cast_mut(),
            },
            _owned: owned,
        }));
        self.inflight.set(self.inflight.get() + u64::from(len32));
        let flags = if last {
            ffi::QUIC_SEND_FLAGS_QUIC_SEND_FLAG_FIN
        } else {
            ffi::QUIC_SEND_FLAGS_QUIC_SEND_FLAG_NONE
        };
        let f = raw::api().StreamSend.expect("StreamSend");
        // SAFETY: `chunk` (and the data it points to) stays alive until the
        // matching SEND_COMPLETE frees it in `complete`.
        let status = unsafe { f(stream, &raw const (*chunk).buf, 1, flags, chunk.cast()) };
        if raw::succeeded(status) {
            self.queued.set(self.queued.get() + u64::from(len32));
            Ok(())
        } else {
            self.inflight.set(self.inflight.get() - u64::from(len32));
            // SAFETY: msquic did not take the send, so we still own the chunk.
            drop(unsafe { Box::from_raw(chunk) });
            Err(format!("StreamSend failed: {}", raw::status_name(status)))
        }
    }
}

impl State {
    fn body_remaining(&self) -> u64 {
        match &self.body {
            Body::Empty => 0,
            Body::Pattern { len } | Body::File { len, .. } => len - self.body_sent,
        }
    }

    fn next(&mut self) -> Result<Next, String> {
        if let Some(prefix) = self.prefix.take() {
            let last = self.body_remaining() == 0;
            return Ok(Next::Data {
                data: Data::Owned(prefix),
                last,
            });
        }
        let remaining = self.body_remaining();
        if remaining == 0 {
            return Ok(Next::Fin);
        }
        let data = match &mut self.body {
            Body::Empty => unreachable!("empty body has nothing remaining"),
            Body::Pattern { .. } => {
                Data::Static(pattern::slice(self.body_sent, remaining.min(PATTERN_CHUNK)))
            }
            Body::File { file, .. } => {
                let n = usize::try_from(remaining.min(FILE_CHUNK as u64)).expect("small");
                let mut buf = vec![0; n];
                file.read_exact(&mut buf)
                    .map_err(|e| format!("reading file: {e}"))?;
                Data::Owned(buf)
            }
        };
        let n = match &data {
            Data::Static(s) => s.len(),
            Data::Owned(v) => v.len(),
        };
        self.body_sent += n as u64;
        Ok(Next::Data {
            data,
            last: self.body_remaining() == 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pieces of a generated body follow the pattern from wherever the body has got to,
    /// one chunk at most each, and the last one ends the body.
    #[test]
    fn pattern_pieces_follow_offsets() {
        for offset in [0u64, 1, 255, 256, 1000, u64::from(u32::MAX) + 7] {
            for len in [1, 600, 3 * PATTERN_CHUNK + 7] {
                let mut state = State {
                    prefix: None,
                    body: Body::Pattern { len: offset + len },
                    body_sent: offset,
                    fin_queued: false,
                };
                let mut at = offset;
                loop {
                    let Next::Data {
                        data: Data::Static(piece),
                        last,
                    } = state.next().unwrap()
                    else {
                        panic!("{offset} + {len}: not a pattern piece");
                    };
                    assert!(piece.len() as u64 <= PATTERN_CHUNK);
                    for (i, b) in piece.iter().enumerate() {
                        assert_eq!(*b, pattern::byte_at(at + i as u64), "{at} + {i}");
                    }
                    at += piece.len() as u64;
                    assert_eq!(last, at == offset + len, "{offset} + {len}");
                    if last {
                        break;
                    }
                }
                assert!(matches!(state.next(), Ok(Next::Fin)));
            }
        }
    }
}
