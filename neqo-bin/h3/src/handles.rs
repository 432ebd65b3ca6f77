//! The `h3` crate's connection traits ([`quic::Connection`], [`quic::OpenStreams`]) over a
//! connection's [`Mailbox`](super::mailbox::Mailbox): accepting the peer's streams and
//! opening ours; the streams' own handles are in [`super::streams`].

use std::{
    rc::Rc,
    task::{Context, Poll},
};

use bytes::Bytes;
use h3::{
    error::Code,
    quic::{self, ConnectionErrorIncoming, StreamErrorIncoming},
};
use quinn_proto::{Dir, StreamId};

use super::{
    mailbox::{OpenWaiter, Shared},
    streams::{BidiStream, RecvStream, SendStream},
    waiters::Slot,
};

/// A connection as `h3` drives it.
#[derive(Debug)]
pub struct H3Connection {
    mailbox: Shared,
    /// Its own opener: one that asked for a stream must be the one polled again.
    opener: Opener,
    /// Its places among the tasks waiting to accept a unidirectional and a bidirectional
    /// stream.
    accept_uni: Slot,
    accept_bi: Slot,
}

impl H3Connection {
    /// `h3`'s view of the connection whose events and pumps go through `mailbox`.
    #[must_use]
    pub fn new(mailbox: Shared) -> Self {
        Self {
            opener: Opener::new(&mailbox),
            mailbox,
            accept_uni: Slot::default(),
            accept_bi: Slot::default(),
        }
    }

    /// Accepts the next stream the peer opened in `dir`, or waits for one.
    fn poll_accept(
        &mut self,
        dir: Dir,
        cx: &mut Context<'_>,
    ) -> Poll<Result<StreamId, ConnectionErrorIncoming>> {
        let mut m = self.mailbox.borrow_mut();
        let m = &mut *m;
        let (queue, slot) = match dir {
            Dir::Uni => (&mut m.accepted_uni, &mut self.accept_uni),
            Dir::Bi => (&mut m.accepted_bi, &mut self.accept_bi),
        };
        if let Some(id) = queue.pop_front() {
            return Poll::Ready(Ok(id));
        }
        if let Some(why) = &m.ended {
            return Poll::Ready(Err(why.clone()));
        }
        m.accept_waiters.wait(slot, cx.waker());
        Poll::Pending
    }
}

impl Drop for H3Connection {
    fn drop(&mut self) {
        let mut m = self.mailbox.borrow_mut();
        m.accept_waiters.leave(&mut self.accept_uni);
        m.accept_waiters.leave(&mut self.accept_bi);
    }
}

pub(super) fn stream_error(why: &ConnectionErrorIncoming) -> StreamErrorIncoming {
    StreamErrorIncoming::ConnectionErrorIncoming {
        connection_error: why.clone(),
    }
}

impl quic::Connection<Bytes> for H3Connection {
    type RecvStream = RecvStream;
    type OpenStreams = Opener;

    fn poll_accept_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        self.poll_accept(Dir::Uni, cx)
            .map_ok(|id| RecvStream::new(&self.mailbox, id))
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        self.poll_accept(Dir::Bi, cx)
            .map_ok(|id| BidiStream::new(&self.mailbox, id))
    }

    fn opener(&self) -> Self::OpenStreams {
        Opener::new(&self.mailbox)
    }
}

impl quic::OpenStreams<Bytes> for H3Connection {
    type BidiStream = BidiStream;
    type SendStream = SendStream;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        self.opener.poll_open_bidi(cx)
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        self.opener.poll_open_send(cx)
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        self.mailbox.borrow_mut().ask_close(code, reason);
    }
}

/// Opens streams for `h3`.
#[derive(Debug)]
pub struct Opener {
    mailbox: Shared,
    /// A stream asked for and not yet taken (so that a repeated poll asks once).
    asked_bi: bool,
    asked_uni: bool,
    /// Its place in the mailbox's queue of openers waiting for a stream.
    waiter: Rc<OpenWaiter>,
}

impl Opener {
    fn new(mailbox: &Shared) -> Self {
        Self {
            mailbox: Rc::clone(mailbox),
            asked_bi: false,
            asked_uni: false,
            waiter: Rc::default(),
        }
    }

    fn poll_open(
        &mut self,
        dir: Dir,
        cx: &mut Context<'_>,
    ) -> Poll<Result<StreamId, StreamErrorIncoming>> {
        let mut m = self.mailbox.borrow_mut();
        let (queue, asked) = match dir {
            Dir::Bi => (&mut m.opened_bi, &mut self.asked_bi),
            Dir::Uni => (&mut m.opened_uni, &mut self.asked_uni),
        };
        if *asked && let Some(id) = queue.pop_front() {
            *asked = false;
            if self.waiter.queued.replace(false) {
                // Served without being woken: its place in the queue goes too.
                m.open_waiters.retain(|w| !Rc::ptr_eq(w, &self.waiter));
            }
            // A stream left over (its waiter took another, or was dropped): the next one.
            if !m.opened_bi.is_empty() || !m.opened_uni.is_empty() {
                m.wake_opener();
            }
            return Poll::Ready(Ok(id));
        }
        if let Some(why) = &m.ended {
            return Poll::Ready(Err(stream_error(why)));
        }
        if !*asked {
            *asked = true;
            match dir {
                Dir::Bi => m.want_bi += 1,
                Dir::Uni => m.want_uni += 1,
            }
        }
        *self.waiter.waker.borrow_mut() = Some(cx.waker().clone());
        if !self.waiter.queued.replace(true) {
            m.open_waiters.push_back(Rc::clone(&self.waiter));
        }
        Poll::Pending
    }
}

impl Clone for Opener {
    fn clone(&self) -> Self {
        Self::new(&self.mailbox)
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        // A stream asked for and not taken: ask for one less, or leave the opened one unused
        // (finished at once, so that it does not hold the peer's stream credit).
        let mut m = self.mailbox.borrow_mut();
        if self.waiter.queued.replace(false) {
            m.open_waiters.retain(|w| !Rc::ptr_eq(w, &self.waiter));
        }
        // Woken for a stream it will not take now: the next waiter takes it.
        if !m.opened_bi.is_empty() || !m.opened_uni.is_empty() {
            m.wake_opener();
        }
        for (asked, dir) in [(self.asked_bi, Dir::Bi), (self.asked_uni, Dir::Uni)] {
            if !asked {
                continue;
            }
            let want = match dir {
                Dir::Bi => &mut m.want_bi,
                Dir::Uni => &mut m.want_uni,
            };
            if *want > 0 {
                *want -= 1;
            }
        }
    }
}

impl quic::OpenStreams<Bytes> for Opener {
    type BidiStream = BidiStream;
    type SendStream = SendStream;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        self.poll_open(Dir::Bi, cx)
            .map_ok(|id| BidiStream::new(&self.mailbox, id))
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        self.poll_open(Dir::Uni, cx)
            .map_ok(|id| SendStream::new(&self.mailbox, id))
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        self.mailbox.borrow_mut().ask_close(code, reason);
    }
}
