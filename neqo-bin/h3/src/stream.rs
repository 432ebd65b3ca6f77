//! One stream as the mailbox carries it: what `h3` asked of each direction and what the peer
//! did to it, and the carrying of `h3`'s writes to quinn-proto (reading is [`super::reader`]'s).

use std::task::Waker;

use bytes::{Buf as _, Bytes};
use h3::{error::Code, quic::WriteBuf};
use neqo_driver::IdSet;
use quinn_proto::{Connection, Dir, FinishError, Side, StreamId, WriteError};

use super::{
    guard::Guard,
    mailbox::code,
    reader::{Holding, Inbound},
};

/// One stream's two directions, as far as the mailbox carries them.
pub(super) struct Stream {
    /// Read from quinn-proto, not yet taken by `h3`.
    pub(super) inbound: Inbound,
    /// The peer finished (`Some(None)`) or reset (`Some(Some(code))`) its side; `h3` is told
    /// once `recv` is empty.
    pub(super) recv_end: Option<Option<u64>>,
    /// Nothing more to read: the end was taken, or `h3` stopped it, or it is send-only.
    pub(super) recv_done: bool,
    pub(super) recv_waker: Option<Waker>,
    /// `STOP_SENDING` asked by `h3`, not yet carried.
    pub(super) stop: Option<u64>,
    /// A frame `h3` handed over, not yet all written to quinn-proto.
    pub(super) writing: Option<WriteBuf<Bytes>>,
    /// `h3` asked to finish, once `writing` is out.
    pub(super) finish: bool,
    /// `RESET_STREAM` asked by `h3`, not yet carried.
    pub(super) reset: Option<u64>,
    /// The peer stopped this side (`STOP_SENDING`) with this code.
    pub(super) stopped: Option<u64>,
    /// Nothing more to send: finished, reset, stopped, or it is receive-only.
    pub(super) send_done: bool,
    pub(super) send_waker: Option<Waker>,
    /// Handles `h3` holds (0 to 2; 0 also before it takes the stream).
    pub(super) handles: u8,
}

impl Stream {
    /// Stream `id`, opened here (`local`) or by the peer.
    pub(super) fn new(id: StreamId, local: bool) -> Self {
        let dir = id.dir();
        Self {
            inbound: Inbound::new(match dir {
                Dir::Bi => Guard::bidi(),
                Dir::Uni if !local && id.initiator() == Side::Client => Guard::client_uni(),
                Dir::Uni => Guard::uni(),
            }),
            recv_end: None,
            // A unidirectional stream has only the initiator's sending side.
            recv_done: dir == Dir::Uni && local,
            recv_waker: None,
            stop: None,
            writing: None,
            finish: false,
            reset: None,
            stopped: None,
            send_done: dir == Dir::Uni && !local,
            send_waker: None,
            handles: 0,
        }
    }

    /// Drops what is held for `h3`: the stream will not be read further.
    pub(super) fn forget(&mut self, holding: &mut Holding, dirty: &mut IdSet<StreamId>) {
        self.inbound.forget(holding, dirty);
    }

    pub(super) fn wake(&mut self) {
        if let Some(w) = self.recv_waker.take() {
            w.wake();
        }
        if let Some(w) = self.send_waker.take() {
            w.wake();
        }
    }

    /// Carries `h3`'s writes on `id` (this stream); returns whether it finished the stream
    /// now.
    pub(super) fn carry_writes(&mut self, conn: &mut Connection, id: StreamId) -> bool {
        let s = self;
        if s.send_done {
            return false;
        }
        let mut out = conn.send_stream(id);
        if let Some(c) = s.reset.take() {
            let _ = out.reset(code(c));
            s.writing = None;
            s.send_done = true;
            s.wake();
            return false;
        }
        let mut stopped = None;
        let mut finished = false;
        if let Some(w) = &mut s.writing {
            while w.has_remaining() {
                match out.write(w.chunk()) {
                    Ok(n) => w.advance(n),
                    Err(WriteError::Blocked) => break,
                    Err(WriteError::Stopped(c)) => {
                        stopped = Some(c.into_inner());
                        break;
                    }
                    Err(WriteError::ClosedStream) => {
                        stopped = Some(Code::H3_REQUEST_CANCELLED.value());
                        break;
                    }
                }
            }
            if stopped.is_none() && !w.has_remaining() {
                s.writing = None;
                if let Some(waker) = s.send_waker.take() {
                    waker.wake();
                }
            }
        }
        if stopped.is_none() && s.writing.is_none() && s.finish {
            match out.finish() {
                Ok(()) | Err(FinishError::ClosedStream) => {
                    finished = true;
                    s.send_done = true;
                    if let Some(waker) = s.send_waker.take() {
                        waker.wake();
                    }
                }
                Err(FinishError::Stopped(c)) => stopped = Some(c.into_inner()),
            }
        }
        if let Some(c) = stopped {
            // As for the Stopped event, which may not have been taken in yet.
            let _ = out.reset(code(c));
            s.stopped = Some(c);
            s.writing = None;
            s.send_done = true;
            if let Some(waker) = s.send_waker.take() {
                waker.wake();
            }
        }
        finished
    }
}
