//! The `h3` crate's stream handles ([`quic::SendStream`], [`quic::RecvStream`],
//! [`quic::BidiStream`]) on a connection's mailbox: each posts what `h3` asks of its stream
//! and takes what has arrived for it; the mailbox carries both to quinn-proto.

use std::{
    rc::Rc,
    task::{Context, Poll},
};

use bytes::Bytes;
use h3::{
    error::Code,
    quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, WriteBuf},
};
use quinn_proto::StreamId;

use super::{
    handles::stream_error,
    mailbox::{Shared, h3_id},
    stream::Stream,
};

/// Drops a handle on stream `id`: with its last handle gone, a side still open is ended as a
/// dropped quinn stream ends it (a send side finished; a receive side stopped, or, where its
/// end has arrived, done, with what `h3` left unread of it dropped).
fn release(mailbox: &Shared, id: StreamId, send: bool) {
    let mut m = mailbox.borrow_mut();
    let m = &mut *m;
    let Some(s) = m.streams.get_mut(&id) else {
        return;
    };
    s.handles = s.handles.saturating_sub(1);
    if send {
        if !s.send_done && s.reset.is_none() {
            s.finish = true;
        }
    } else if !s.recv_done && s.recv_end.is_some() {
        // The peer's side has ended (a GET's request, its FIN read with its HEADERS, or what
        // follows them that `h3` does not read): nothing is left to stop, and the stream
        // leaves once its sending side is done.
        s.recv_done = true;
        s.forget(&mut m.holding, &mut m.dirty);
    } else if !s.recv_done && s.stop.is_none() {
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
    pub(super) fn new(mailbox: &Shared, id: StreamId) -> Self {
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
    pub(super) fn new(mailbox: &Shared, id: StreamId) -> Self {
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
        let had_more = !s.inbound.wants_more();
        if let Some(piece) = s.inbound.take(&mut m.holding, &mut m.dirty) {
            // Read again once it is down to the refill mark, or has no whole piece left.
            if had_more && s.inbound.wants_more() || !s.inbound.has_pieces() {
                m.dirty.insert(self.0.id);
            }
            return Poll::Ready(Ok(Some(piece)));
        }
        if let Some(end) = s.recv_end
            && s.inbound.is_empty()
        {
            s.recv_done = true;
            s.forget(&mut m.holding, &mut m.dirty);
            m.dirty.insert(self.0.id);
            return Poll::Ready(match end {
                None => Ok(None),
                Some(c) => Err(StreamErrorIncoming::StreamTerminated { error_code: c }),
            });
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
    pub(super) fn new(mailbox: &Shared, id: StreamId) -> Self {
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
