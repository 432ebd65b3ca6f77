//! Reading a connection's streams for `h3`: each through its
//! [`Guard`](super::guard::Guard), cut into the pieces `h3` takes, within what the connection
//! may hold ([`Holding`]).

use std::collections::HashSet;

use bytes::Bytes;
use h3::error::Code;
use quinn_proto::{Connection, ReadError, StreamId};

use super::{
    guard::{Cut, Take, Violation},
    mailbox::{Stream, code},
};

/// The most a stream holds read from quinn-proto and not yet taken by `h3`: more waits in
/// quinn-proto, under its flow control.
pub const RECV_HELD: usize = 64 * 1024;

/// A stream is read again once it holds no more than this. Topping it up as `h3` takes a
/// piece would read as little as the piece (a DATA frame's 5-byte header), and the stream
/// would go on in pieces that small: a client saving a body a piece at a time ran at a third
/// of its speed.
pub(super) const REFILL_AT: usize = RECV_HELD / 2;

/// Bytes read for `h3`, and whether taking them gives `h3` all it waits for: a frame's end,
/// a whole header, DATA (see [`Take`]).
#[derive(Debug)]
pub(super) struct Piece {
    pub(super) bytes: Bytes,
    pub(super) completes: bool,
}

/// What the mailbox and `h3` hold of a connection's received data, and the most they may.
#[derive(Debug, Default)]
pub(super) struct Holding {
    /// Bytes read ahead of `h3`, and bytes `h3` took of frames it does not have all of yet.
    pub(super) bytes: usize,
    pub(super) limit: Option<usize>,
    /// The most `bytes` has been.
    pub(super) peak: usize,
    /// Streams left unread because the limit was reached: read again once there is room.
    pub(super) starved: Vec<StreamId>,
    /// Where the guard cuts a chunk: kept between reads so that reading allocates nothing.
    cuts: Vec<Cut>,
}

impl Holding {
    pub(super) fn room(&self) -> usize {
        self.limit
            .map_or(usize::MAX, |l| l.saturating_sub(self.bytes))
    }

    /// `n` bytes are no longer held: streams left unread for want of room are read again.
    pub(super) fn release(&mut self, n: usize, dirty: &mut HashSet<StreamId>) {
        self.bytes -= n;
        if n > 0 && self.room() > 0 {
            dirty.extend(self.starved.drain(..));
        }
    }
}

/// Reads streams for `h3` within the connection's [`Holding`].
pub(super) struct Reader<'a> {
    pub(super) holding: &'a mut Holding,
    pub(super) dirty: &'a mut HashSet<StreamId>,
    pub(super) close: &'a mut Option<(u64, Bytes)>,
}

impl Reader<'_> {
    pub(super) fn receive(&mut self, conn: &mut Connection, id: StreamId, s: &mut Stream) {
        if s.recv_done {
            return;
        }
        if let Some(c) = s.stop.take() {
            let _ = conn.recv_stream(id).stop(code(c));
            s.forget(self.holding, self.dirty);
            s.recv_done = true;
            return;
        }
        if s.recv_end.is_some() || s.recv_held > REFILL_AT {
            return;
        }
        if self.holding.room() == 0 {
            self.holding.starved.push(id);
            return;
        }
        let mut input = conn.recv_stream(id);
        let Ok(mut chunks) = input.read(true) else {
            // Gone from quinn-proto (the connection is closing): as a reset.
            s.recv_end = Some(Some(Code::H3_REQUEST_CANCELLED.value()));
            s.wake();
            return;
        };
        let before = s.recv_held;
        let mut violation = None;
        let mut cuts = std::mem::take(&mut self.holding.cuts);
        loop {
            let max = (RECV_HELD - s.recv_held).min(self.holding.room());
            if max == 0 {
                if s.recv_held <= REFILL_AT {
                    self.holding.starved.push(id);
                }
                break;
            }
            match chunks.next(max) {
                Ok(Some(mut c)) => {
                    cuts.clear();
                    if let Err(v) = s.guard.scan(&c.bytes, &mut cuts) {
                        violation = Some(v);
                        break;
                    }
                    for cut in &cuts {
                        let bytes = c.bytes.split_to(cut.len);
                        if cut.take == Take::Discard {
                            continue;
                        }
                        s.recv_held += cut.len;
                        self.holding.bytes += cut.len;
                        self.holding.peak = self.holding.peak.max(self.holding.bytes);
                        s.recv.push_back(Piece {
                            bytes,
                            completes: cut.take == Take::Complete,
                        });
                    }
                }
                Ok(None) => {
                    s.recv_end = Some(None);
                    break;
                }
                Err(ReadError::Reset(c)) => {
                    s.recv_end = Some(Some(c.into_inner()));
                    break;
                }
                Err(ReadError::Blocked) => break,
            }
        }
        let _ = chunks.finalize();
        self.holding.cuts = cuts;
        match violation {
            Some(Violation::Stream(c)) => {
                // Both sides end with the error; `h3` hears it from either.
                let _ = conn.recv_stream(id).stop(code(c));
                if !s.send_done {
                    let _ = conn.send_stream(id).reset(code(c));
                    s.send_done = true;
                    s.writing = None;
                    s.stopped = Some(c);
                }
                s.forget(self.holding, self.dirty);
                s.recv_end = Some(Some(c));
                s.wake();
                return;
            }
            Some(Violation::Connection(c, reason)) => {
                if self.close.is_none() {
                    *self.close = Some((c, Bytes::from_static(reason.as_bytes())));
                }
                return;
            }
            None => {}
        }
        if (s.recv_held > before || s.recv_end.is_some())
            && let Some(w) = s.recv_waker.take()
        {
            w.wake();
        }
    }
}
