//! The mailbox between `h3`'s stream handles ([`super::handles`]) and a quinn-proto connection
//! that the driver owns.
//!
//! The driver hands the application `&mut Connection` only inside its callbacks, while `h3`
//! reads and writes through stream handles from its futures. Between the two sits a
//! mailbox per connection ([`Mailbox`]): the handles post what `h3` wants (a frame to send, a
//! finish, a reset, a stream to open) and take what has arrived; [`Mailbox::on_event`] and
//! [`Mailbox::pump`], called with the connection, carry both across and wake the futures
//! that can go on. Each stream holds at most [`RECV_HELD`] bytes read ahead of `h3` and one
//! frame it has not yet handed to quinn-proto. What is read passes a guard that refuses
//! frames over [`FRAME_LIMIT`](super::guard::FRAME_LIMIT), so `h3` holds at most one such
//! frame per stream; and what the mailbox and `h3` hold of a connection's data together can
//! be capped ([`Mailbox::limit_held`]): a server counts it in the connection's window.

use std::{
    cell::{Cell, RefCell},
    collections::VecDeque,
    rc::Rc,
    task::Waker,
};

use neqo_driver::{IdMap, IdSet};

#[cfg(doc)]
use super::reader::RECV_HELD;
use super::{
    reader::{Holding, Reader},
    stream::Stream,
    waiters::Waiters,
};
use bytes::Bytes;
use h3::{
    error::Code,
    quic::{self, ConnectionErrorIncoming},
};
use quinn_proto::{Connection, ConnectionError, Dir, Event, StreamEvent, StreamId, VarInt};

pub(super) fn h3_id(id: StreamId) -> quic::StreamId {
    // Both are QUIC varints: below 2^62.
    quic::StreamId::try_from(VarInt::from(id).into_inner()).expect("a stream ID is a varint")
}

pub(super) fn code(v: u64) -> VarInt {
    VarInt::from_u64(v).unwrap_or(VarInt::MAX)
}

/// How the connection ended, as `h3` wants to hear it.
pub(super) fn lost(reason: &ConnectionError) -> ConnectionErrorIncoming {
    match reason {
        ConnectionError::ApplicationClosed(c) => ConnectionErrorIncoming::ApplicationClose {
            error_code: c.error_code.into_inner(),
        },
        ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        other => ConnectionErrorIncoming::Undefined(std::sync::Arc::new(other.clone())),
    }
}

/// An opener's place in [`Mailbox::open_waiters`].
#[derive(Debug, Default)]
pub(super) struct OpenWaiter {
    pub(super) waker: RefCell<Option<Waker>>,
    /// In the queue and not yet woken (an opener dropped meanwhile clears it).
    pub(super) queued: Cell<bool>,
}

/// A connection's streams as `h3` sees them, and what it asked of the connection.
#[derive(Default)]
pub struct Mailbox {
    pub(super) streams: IdMap<StreamId, Stream>,
    /// Streams with something for [`Mailbox::pump`] to carry.
    pub(super) dirty: IdSet<StreamId>,
    /// The ones a pump is carrying, kept for its allocation.
    pumping: Vec<StreamId>,
    pub(super) accepted_bi: VecDeque<StreamId>,
    pub(super) accepted_uni: VecDeque<StreamId>,
    /// The tasks waiting to accept a stream: one slot per waiter and direction.
    pub(super) accept_waiters: Waiters,
    /// Streams to open for `h3`, and the ones opened for it not yet taken.
    pub(super) want_bi: usize,
    pub(super) want_uni: usize,
    pub(super) opened_bi: VecDeque<StreamId>,
    pub(super) opened_uni: VecDeque<StreamId>,
    /// Openers waiting for a stream, in the order they asked: a stream opened wakes one,
    /// not all (with thousands of requests waiting for the peer's stream credit, waking
    /// all at each credit made the opening quadratic).
    pub(super) open_waiters: VecDeque<Rc<OpenWaiter>>,
    /// Openers wait for stream credit and data arrived since: acknowledge it now.
    ack_for_credit: bool,
    /// When the last PING for credit left.
    credit_ping: Option<std::time::Instant>,
    /// A close `h3` asked for, not yet carried.
    pub(super) close: Option<(u64, Bytes)>,
    pub(super) ended: Option<ConnectionErrorIncoming>,
    /// Streams finished whose data the peer has not all acknowledged yet.
    pub(super) unacked: IdSet<StreamId>,
    pub(super) holding: Holding,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("streams", &self.streams.len())
            .field("dirty", &self.dirty.len())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

/// The least time between two PINGs that acknowledge data while openers wait for credit.
const CREDIT_PING_EVERY: std::time::Duration = std::time::Duration::from_millis(1);

/// The shared handle on a [`Mailbox`].
pub type Shared = Rc<RefCell<Mailbox>>;

impl Mailbox {
    /// A mailbox for a new connection.
    #[must_use]
    pub fn new() -> Shared {
        Rc::default()
    }

    /// Streams the mailbox still keeps (a stream leaves once both sides are done and `h3`
    /// has dropped its handles).
    #[must_use]
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// What the connection's data held for `h3` costs: read from quinn-proto and not yet
    /// taken (each stream at most [`RECV_HELD`]), each piece counted with its record.
    #[must_use]
    pub const fn held(&self) -> usize {
        self.holding.bytes
    }

    /// The most [`Mailbox::held`] has been.
    #[must_use]
    pub const fn peak_held(&self) -> usize {
        self.holding.peak
    }

    /// Openers waiting for a stream.
    #[cfg(test)]
    pub(crate) fn open_waiters(&self) -> usize {
        self.open_waiters.len()
    }

    /// Tasks waiting to accept a stream (one per waiter and direction).
    #[cfg(test)]
    pub(crate) fn accept_waiters(&self) -> usize {
        self.accept_waiters.len()
    }

    /// Caps [`Mailbox::held`]: at `bytes`, no stream is read until `h3` takes some. A peer
    /// that leaves more unfinished frames than this on its streams stalls its own connection.
    /// A cap raised leaves room: the streams left unread are read again.
    pub fn limit_held(&mut self, bytes: usize) {
        self.holding.set_limit(bytes, &mut self.dirty);
    }

    /// Whether the connection has ended.
    #[must_use]
    pub const fn ended(&self) -> bool {
        self.ended.is_some()
    }

    /// Streams finished whose data the peer has not all acknowledged: a response that
    /// `h3` has handed over whole may still be lost with the connection until then.
    #[must_use]
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }

    /// Takes in a connection event.
    pub fn on_event(&mut self, conn: &mut Connection, event: &Event) {
        match event {
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = conn.streams().accept(*dir) {
                    self.streams.insert(id, Stream::new(id, false));
                    match dir {
                        Dir::Bi => self.accepted_bi.push_back(id),
                        Dir::Uni => self.accepted_uni.push_back(id),
                    }
                    self.dirty.insert(id);
                }
                self.accept_waiters.wake_all();
            }
            Event::Stream(StreamEvent::Readable { id } | StreamEvent::Writable { id }) => {
                self.dirty.insert(*id);
                // Data arrived while openers wait for the peer's stream credit: see `open`.
                self.ack_for_credit |= self.want_bi + self.want_uni > 0;
            }
            Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                // RFC 9000 section 3.5: a stopped stream is answered with RESET_STREAM,
                // carrying the peer's code. quinn-proto leaves that to the application, and
                // frees the stream (and gives its credit back) only once the reset is acked.
                let _ = conn.send_stream(*id).reset(*error_code);
                self.unacked.remove(id);
                if let Some(s) = self.streams.get_mut(id) {
                    s.stopped = Some(error_code.into_inner());
                    s.writing = None;
                    s.send_done = true;
                    s.wake();
                    self.dirty.insert(*id);
                }
            }
            Event::Stream(StreamEvent::Finished { id }) => {
                self.unacked.remove(id);
            }
            Event::Stream(StreamEvent::Available { .. }) => {
                // Opening is retried in the pump.
            }
            Event::ConnectionLost { reason } => self.end(lost(reason)),
            _ => {}
        }
    }

    fn end(&mut self, why: ConnectionErrorIncoming) {
        if self.ended.is_none() {
            self.ended = Some(why);
        }
        self.unacked.clear();
        for s in self.streams.values_mut() {
            s.wake();
        }
        self.accept_waiters.wake_all();
        while self.wake_opener() {}
    }

    /// Wakes the longest-waiting opener still waiting; returns whether there was one.
    pub(super) fn wake_opener(&mut self) -> bool {
        while let Some(w) = self.open_waiters.pop_front() {
            if w.queued.replace(false)
                && let Some(waker) = w.waker.take()
            {
                waker.wake();
                return true;
            }
        }
        false
    }

    /// `h3` closes the connection. The first close is the one sent: `h3` closes with its
    /// error and then again, with `H3_NO_ERROR`, as its connection is dropped.
    pub(super) fn ask_close(&mut self, code: Code, reason: &[u8]) {
        if self.close.is_none() && self.ended.is_none() {
            self.close = Some((code.value(), Bytes::copy_from_slice(reason)));
        }
    }

    /// Whether [`Mailbox::pump`] has something to carry. Streams `h3` waits to open are not
    /// counted: they open when the peer's limits allow, which an event says.
    #[must_use]
    pub fn has_work(&self) -> bool {
        !self.dirty.is_empty() || self.close.is_some()
    }

    /// Whether `h3` waits for streams to be opened.
    #[must_use]
    pub const fn wants_streams(&self) -> bool {
        self.ended.is_none() && self.want_bi + self.want_uni > 0
    }

    /// Carries what `h3` asked for to the connection and what arrived to `h3`.
    pub fn pump(&mut self, conn: &mut Connection, now: std::time::Instant) {
        self.carry_close(conn, now);
        if self.ended.is_none() {
            self.open(conn, now);
        }
        let mut pumping = std::mem::take(&mut self.pumping);
        pumping.extend(self.dirty.drain());
        for &id in &pumping {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            if s.carry_writes(conn, id) {
                self.unacked.insert(id);
            }
            let mut reader = Reader {
                holding: &mut self.holding,
                dirty: &mut self.dirty,
                close: &mut self.close,
            };
            reader.receive(conn, id, s);
            if s.recv_done && s.send_done && s.handles == 0 {
                s.forget(&mut self.holding, &mut self.dirty);
                self.streams.remove(&id);
            }
        }
        pumping.clear();
        self.pumping = pumping;
        // A connection error the guard found.
        self.carry_close(conn, now);
    }

    fn carry_close(&mut self, conn: &mut Connection, now: std::time::Instant) {
        if let Some((c, reason)) = self.close.take() {
            conn.close(now, code(c), reason);
            self.end(ConnectionErrorIncoming::ApplicationClose { error_code: c });
        }
    }

    fn open(&mut self, conn: &mut Connection, now: std::time::Instant) {
        let mut opened = 0;
        for (dir, want, queue) in [
            (Dir::Bi, &mut self.want_bi, &mut self.opened_bi),
            (Dir::Uni, &mut self.want_uni, &mut self.opened_uni),
        ] {
            while *want > 0 {
                let Some(id) = conn.streams().open(dir) else {
                    break;
                };
                *want -= 1;
                self.streams.insert(id, Stream::new(id, true));
                queue.push_back(id);
                opened += 1;
            }
        }
        for _ in 0..opened {
            if !self.wake_opener() {
                break;
            }
        }
        // Still short of credit, with responses just arrived: the peer gives credit back once
        // it knows our streams' ends arrived (quinn-proto frees a stream when its FIN is
        // acknowledged), and with nothing else to send we would acknowledge them only after
        // our ACK delay, 25 ms: a client with more requests than the peer's stream limit moved
        // a round of them per 25 ms (100 000 at once took 28 s, not 2.5). A PING carries the
        // ACK now, at most one a millisecond (each costs the peer a packet to take in).
        if self.ack_for_credit
            && self.want_bi + self.want_uni > 0
            && self
                .credit_ping
                .is_none_or(|at| now.saturating_duration_since(at) >= CREDIT_PING_EVERY)
        {
            self.ack_for_credit = false;
            self.credit_ping = Some(now);
            conn.ping();
        }
    }
}
