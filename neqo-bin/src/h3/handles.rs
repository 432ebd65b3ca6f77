//! The `h3` crate's `quic` traits ([`quic::Connection`], [`quic::OpenStreams`], the stream
//! handles) over a connection's [`Mailbox`](super::mailbox::Mailbox): each handle posts what `h3` asks into the
//! mailbox and takes what has arrived from it; the mailbox carries both to quinn-proto.

use std::{
    rc::Rc,
    task::{Context, Poll},
};

use bytes::Bytes;
use h3::{
    error::Code,
    quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, WriteBuf},
};
use quinn_proto::{Dir, StreamId};

use super::mailbox::{OpenWaiter, RECV_HELD, Shared, Stream, h3_id};

/// A connection as `h3` drives it.
#[derive(Debug)]
pub struct H3Connection {
    mailbox: Shared,
    /// Its own opener: one that asked for a stream must be the one polled again.
    opener: Opener,
}

impl H3Connection {
    /// `h3`'s view of the connection whose events and pumps go through `mailbox`.
    #[must_use]
    pub fn new(mailbox: Shared) -> Self {
        Self {
            opener: Opener::new(&mailbox),
            mailbox,
        }
    }
}

fn stream_error(why: &ConnectionErrorIncoming) -> StreamErrorIncoming {
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
        let next = self.mailbox.borrow_mut().accepted_uni.pop_front();
        if let Some(id) = next {
            return Poll::Ready(Ok(RecvStream::new(&self.mailbox, id)));
        }
        let mut m = self.mailbox.borrow_mut();
        if let Some(why) = &m.ended {
            return Poll::Ready(Err(why.clone()));
        }
        m.accept_wakers.push(cx.waker().clone());
        Poll::Pending
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        let next = self.mailbox.borrow_mut().accepted_bi.pop_front();
        if let Some(id) = next {
            return Poll::Ready(Ok(BidiStream::new(&self.mailbox, id)));
        }
        let mut m = self.mailbox.borrow_mut();
        if let Some(why) = &m.ended {
            return Poll::Ready(Err(why.clone()));
        }
        m.accept_wakers.push(cx.waker().clone());
        Poll::Pending
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
            self.waiter.queued.set(false);
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
        self.waiter.queued.set(false);
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

/// Drops a handle on stream `id`: with its last handle gone, a side still open is ended as a
/// dropped quinn stream ends it (a receive side stopped, a send side finished).
fn release(mailbox: &Shared, id: StreamId, send: bool) {
    let mut m = mailbox.borrow_mut();
    let Some(s) = m.streams.get_mut(&id) else {
        return;
    };
    s.handles = s.handles.saturating_sub(1);
    if send {
        if !s.send_done && s.reset.is_none() {
            s.finish = true;
        }
    } else if !s.recv_done && s.stop.is_none() && s.recv_end.is_none() {
        s.stop = Some(Code::H3_NO_ERROR.value());
    }
    m.dirty.insert(id);
}

/// A handle's hold on one side of a stream: counted in the stream's handles while it lives.
#[derive(Debug)]
struct Held {
    mailbox: Shared,
    id: StreamId,
    send: bool,
}

impl Held {
    fn new(mailbox: &Shared, id: StreamId, send: bool) -> Self {
        if let Some(s) = mailbox.borrow_mut().streams.get_mut(&id) {
            s.handles += 1;
        }
        Self {
            mailbox: Rc::clone(mailbox),
            id,
            send,
        }
    }

    /// Posts `ask` for the pump to carry, unless its side is done already.
    fn ask(&self, ask: impl FnOnce(&mut Stream)) {
        let mut m = self.mailbox.borrow_mut();
        if let Some(s) = m.streams.get_mut(&self.id)
            && !(if self.send { s.send_done } else { s.recv_done })
        {
            ask(s);
        }
        m.dirty.insert(self.id);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        release(&self.mailbox, self.id, self.send);
    }
}

/// The sending side of a stream.
#[derive(Debug)]
pub struct SendStream(Held);

impl SendStream {
    fn new(mailbox: &Shared, id: StreamId) -> Self {
        Self(Held::new(mailbox, id, true))
    }
}

fn terminated(s: &Stream, ended: Option<&ConnectionErrorIncoming>) -> Option<StreamErrorIncoming> {
    if let Some(c) = s.stopped {
        return Some(StreamErrorIncoming::StreamTerminated { error_code: c });
    }
    ended.map(stream_error)
}

impl quic::SendStream<Bytes> for SendStream {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        let mut m = self.0.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.0.id) else {
            return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                error_code: Code::H3_REQUEST_CANCELLED.value(),
            }));
        };
        if let Some(e) = terminated(s, m.ended.as_ref()) {
            return Poll::Ready(Err(e));
        }
        if s.writing.is_none() {
            return Poll::Ready(Ok(()));
        }
        s.send_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        let mut m = self.0.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.0.id) else {
            return Err(StreamErrorIncoming::StreamTerminated {
                error_code: Code::H3_REQUEST_CANCELLED.value(),
            });
        };
        if let Some(e) = terminated(s, m.ended.as_ref()) {
            return Err(e);
        }
        if s.writing.is_some() || s.finish || s.send_done {
            // Only `h3` misusing the traits gets here.
            return Err(StreamErrorIncoming::ConnectionErrorIncoming {
                connection_error: ConnectionErrorIncoming::InternalError(
                    "send_data while a frame is still being written".into(),
                ),
            });
        }
        s.writing = Some(data.into());
        m.dirty.insert(self.0.id);
        Ok(())
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        let mut m = self.0.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.0.id) else {
            return Poll::Ready(Ok(()));
        };
        if let Some(e) = terminated(s, m.ended.as_ref()) {
            return Poll::Ready(Err(e));
        }
        if s.send_done {
            return Poll::Ready(Ok(()));
        }
        if !s.finish {
            s.finish = true;
            m.dirty.insert(self.0.id);
        }
        s.send_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn reset(&mut self, reset_code: u64) {
        self.0.ask(|s| s.reset = Some(reset_code));
    }

    fn send_id(&self) -> quic::StreamId {
        h3_id(self.0.id)
    }
}

/// The receiving side of a stream.
#[derive(Debug)]
pub struct RecvStream(Held);

impl RecvStream {
    fn new(mailbox: &Shared, id: StreamId) -> Self {
        Self(Held::new(mailbox, id, false))
    }
}

impl quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Self::Buf>, StreamErrorIncoming>> {
        let mut m = self.0.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.0.id) else {
            return Poll::Ready(Ok(None));
        };
        if let Some(b) = s.recv.pop_front() {
            let was_full = s.recv_held >= RECV_HELD;
            s.recv_held -= b.len();
            if was_full || s.recv.is_empty() {
                m.dirty.insert(self.0.id);
            }
            return Poll::Ready(Ok(Some(b)));
        }
        match s.recv_end {
            Some(None) => {
                s.recv_done = true;
                m.dirty.insert(self.0.id);
                return Poll::Ready(Ok(None));
            }
            Some(Some(c)) => {
                s.recv_done = true;
                m.dirty.insert(self.0.id);
                return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated { error_code: c }));
            }
            None => {}
        }
        if let Some(why) = &m.ended {
            return Poll::Ready(Err(stream_error(why)));
        }
        s.recv_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.0.ask(|s| s.stop = Some(error_code));
    }

    fn recv_id(&self) -> quic::StreamId {
        h3_id(self.0.id)
    }
}

/// Both sides of a bidirectional stream.
#[derive(Debug)]
pub struct BidiStream {
    send: SendStream,
    recv: RecvStream,
}

impl BidiStream {
    fn new(mailbox: &Shared, id: StreamId) -> Self {
        Self {
            send: SendStream::new(mailbox, id),
            recv: RecvStream::new(mailbox, id),
        }
    }
}

impl quic::BidiStream<Bytes> for BidiStream {
    type SendStream = SendStream;
    type RecvStream = RecvStream;

    fn split(self) -> (Self::SendStream, Self::RecvStream) {
        (self.send, self.recv)
    }
}

impl quic::SendStream<Bytes> for BidiStream {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code);
    }

    fn send_id(&self) -> quic::StreamId {
        self.send.send_id()
    }
}

impl quic::RecvStream for BidiStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Self::Buf>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code);
    }

    fn recv_id(&self) -> quic::StreamId {
        self.recv.recv_id()
    }
}
