//! The `h3` crate's `quic` traits over a quinn-proto connection that the driver owns.
//!
//! The driver hands the application `&mut Connection` only inside its callbacks, while `h3`
//! reads and writes through stream handles from its futures. Between the two sits a
//! mailbox per connection ([`Mailbox`]): the handles post what `h3` wants (a frame to send, a
//! finish, a reset, a stream to open) and take what has arrived; [`Mailbox::on_event`] and
//! [`Mailbox::pump`], called with the connection, carry both across and wake the futures
//! that can go on. Each stream holds at most [`RECV_HELD`] bytes read ahead of `h3` and one
//! frame it has not yet handed to quinn-proto, so the mailbox adds a bounded amount per
//! stream to what quinn-proto's flow control already bounds.

use std::{
    cell::RefCell,
    collections::{HashMap, HashSet, VecDeque},
    rc::Rc,
    task::{Context, Poll, Waker},
};

use bytes::{Buf as _, Bytes};
use h3::{
    error::Code,
    quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, WriteBuf},
};
use quinn_proto::{
    Connection, ConnectionError, Dir, Event, FinishError, ReadError, StreamEvent, StreamId, VarInt,
    WriteError,
};

/// The most a stream holds read from quinn-proto and not yet taken by `h3`: more waits in
/// quinn-proto, under its flow control.
pub const RECV_HELD: usize = 64 * 1024;

fn h3_id(id: StreamId) -> quic::StreamId {
    // Both are QUIC varints: below 2^62.
    quic::StreamId::try_from(VarInt::from(id).into_inner()).expect("a stream ID is a varint")
}

fn code(v: u64) -> VarInt {
    VarInt::from_u64(v).unwrap_or(VarInt::MAX)
}

/// How the connection ended, as `h3` wants to hear it.
fn lost(reason: &ConnectionError) -> ConnectionErrorIncoming {
    match reason {
        ConnectionError::ApplicationClosed(c) => ConnectionErrorIncoming::ApplicationClose {
            error_code: c.error_code.into_inner(),
        },
        ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        other => ConnectionErrorIncoming::Undefined(std::sync::Arc::new(other.clone())),
    }
}

/// One stream's two directions, as far as the mailbox carries them.
#[derive(Default)]
struct Stream {
    /// Read from quinn-proto, not yet taken.
    recv: VecDeque<Bytes>,
    recv_held: usize,
    /// The peer finished (`Some(None)`) or reset (`Some(Some(code))`) its side; `h3` is told
    /// once `recv` is empty.
    recv_end: Option<Option<u64>>,
    /// Nothing more to read: the end was taken, or `h3` stopped it, or it is send-only.
    recv_done: bool,
    recv_waker: Option<Waker>,
    /// `STOP_SENDING` asked by `h3`, not yet carried.
    stop: Option<u64>,
    /// A frame `h3` handed over, not yet all written to quinn-proto.
    writing: Option<WriteBuf<Bytes>>,
    /// `h3` asked to finish, once `writing` is out.
    finish: bool,
    /// `RESET_STREAM` asked by `h3`, not yet carried.
    reset: Option<u64>,
    /// The peer stopped this side (`STOP_SENDING`) with this code.
    stopped: Option<u64>,
    /// Nothing more to send: finished, reset, stopped, or it is receive-only.
    send_done: bool,
    send_waker: Option<Waker>,
    /// Handles `h3` holds (0 to 2; 0 also before it takes the stream).
    handles: u8,
}

impl Stream {
    fn new(dir: Dir, local: bool) -> Self {
        Self {
            // A unidirectional stream has only the initiator's sending side.
            recv_done: dir == Dir::Uni && local,
            send_done: dir == Dir::Uni && !local,
            ..Self::default()
        }
    }

    fn wake(&mut self) {
        if let Some(w) = self.recv_waker.take() {
            w.wake();
        }
        if let Some(w) = self.send_waker.take() {
            w.wake();
        }
    }
}

/// A connection's streams as `h3` sees them, and what it asked of the connection.
#[derive(Default)]
pub struct Mailbox {
    streams: HashMap<StreamId, Stream>,
    /// Streams with something for [`Mailbox::pump`] to carry.
    dirty: HashSet<StreamId>,
    accepted_bi: VecDeque<StreamId>,
    accepted_uni: VecDeque<StreamId>,
    accept_wakers: Vec<Waker>,
    /// Streams to open for `h3`, and the ones opened for it not yet taken.
    want_bi: usize,
    want_uni: usize,
    opened_bi: VecDeque<StreamId>,
    opened_uni: VecDeque<StreamId>,
    open_wakers: Vec<Waker>,
    /// A close `h3` asked for, not yet carried.
    close: Option<(u64, Bytes)>,
    ended: Option<ConnectionErrorIncoming>,
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

    /// Whether the connection has ended.
    #[must_use]
    pub const fn ended(&self) -> bool {
        self.ended.is_some()
    }

    /// Takes in a connection event.
    pub fn on_event(&mut self, conn: &mut Connection, event: &Event) {
        match event {
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = conn.streams().accept(*dir) {
                    self.streams.insert(id, Stream::new(*dir, false));
                    match dir {
                        Dir::Bi => self.accepted_bi.push_back(id),
                        Dir::Uni => self.accepted_uni.push_back(id),
                    }
                    self.dirty.insert(id);
                }
                for w in self.accept_wakers.drain(..) {
                    w.wake();
                }
            }
            Event::Stream(StreamEvent::Readable { id } | StreamEvent::Writable { id }) => {
                self.dirty.insert(*id);
            }
            Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                if let Some(s) = self.streams.get_mut(id) {
                    s.stopped = Some(error_code.into_inner());
                    s.writing = None;
                    s.send_done = true;
                    s.wake();
                    self.dirty.insert(*id);
                }
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
        for s in self.streams.values_mut() {
            s.wake();
        }
        for w in self
            .accept_wakers
            .drain(..)
            .chain(self.open_wakers.drain(..))
        {
            w.wake();
        }
    }

    /// `h3` closes the connection. The first close is the one sent: `h3` closes with its
    /// error and then again, with `H3_NO_ERROR`, as its connection is dropped.
    fn ask_close(&mut self, code: Code, reason: &[u8]) {
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
        if let Some((c, reason)) = self.close.take() {
            conn.close(now, code(c), reason);
            self.end(ConnectionErrorIncoming::ApplicationClose { error_code: c });
        }
        if self.ended.is_none() {
            self.open(conn);
        }
        for id in std::mem::take(&mut self.dirty) {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            Self::send(conn, id, s);
            Self::receive(conn, id, s);
            if s.recv_done && s.send_done && s.handles == 0 {
                self.streams.remove(&id);
            }
        }
    }

    fn open(&mut self, conn: &mut Connection) {
        let mut opened = false;
        for (dir, want, queue) in [
            (Dir::Bi, &mut self.want_bi, &mut self.opened_bi),
            (Dir::Uni, &mut self.want_uni, &mut self.opened_uni),
        ] {
            while *want > 0 {
                let Some(id) = conn.streams().open(dir) else {
                    break;
                };
                *want -= 1;
                self.streams.insert(id, Stream::new(dir, true));
                queue.push_back(id);
                opened = true;
            }
        }
        if opened {
            for w in self.open_wakers.drain(..) {
                w.wake();
            }
        }
    }

    fn send(conn: &mut Connection, id: StreamId, s: &mut Stream) {
        if s.send_done {
            return;
        }
        let mut out = conn.send_stream(id);
        if let Some(c) = s.reset.take() {
            let _ = out.reset(code(c));
            s.writing = None;
            s.send_done = true;
            s.wake();
            return;
        }
        let mut stopped = None;
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
                    s.send_done = true;
                    if let Some(waker) = s.send_waker.take() {
                        waker.wake();
                    }
                }
                Err(FinishError::Stopped(c)) => stopped = Some(c.into_inner()),
            }
        }
        if let Some(c) = stopped {
            s.stopped = Some(c);
            s.writing = None;
            s.send_done = true;
            if let Some(waker) = s.send_waker.take() {
                waker.wake();
            }
        }
    }

    fn receive(conn: &mut Connection, id: StreamId, s: &mut Stream) {
        if s.recv_done {
            return;
        }
        if let Some(c) = s.stop.take() {
            let _ = conn.recv_stream(id).stop(code(c));
            s.recv.clear();
            s.recv_held = 0;
            s.recv_done = true;
            return;
        }
        if s.recv_end.is_some() || s.recv_held >= RECV_HELD {
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
        loop {
            match chunks.next(RECV_HELD - s.recv_held) {
                Ok(Some(c)) => {
                    s.recv_held += c.bytes.len();
                    s.recv.push_back(c.bytes);
                    if s.recv_held >= RECV_HELD {
                        break;
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
        if (s.recv_held > before || s.recv_end.is_some())
            && let Some(w) = s.recv_waker.take()
        {
            w.wake();
        }
    }
}

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
            opener: Opener {
                mailbox: Rc::clone(&mailbox),
                asked_bi: false,
                asked_uni: false,
            },
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
        Opener {
            mailbox: Rc::clone(&self.mailbox),
            asked_bi: false,
            asked_uni: false,
        }
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
}

impl Opener {
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
        m.open_wakers.push(cx.waker().clone());
        Poll::Pending
    }
}

impl Clone for Opener {
    fn clone(&self) -> Self {
        Self {
            mailbox: Rc::clone(&self.mailbox),
            asked_bi: false,
            asked_uni: false,
        }
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        // A stream asked for and not taken: ask for one less, or leave the opened one unused
        // (finished at once, so that it does not hold the peer's stream credit).
        let mut m = self.mailbox.borrow_mut();
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

/// The sending side of a stream.
#[derive(Debug)]
pub struct SendStream {
    mailbox: Shared,
    id: StreamId,
}

impl SendStream {
    fn new(mailbox: &Shared, id: StreamId) -> Self {
        if let Some(s) = mailbox.borrow_mut().streams.get_mut(&id) {
            s.handles += 1;
        }
        Self {
            mailbox: Rc::clone(mailbox),
            id,
        }
    }
}

impl Drop for SendStream {
    fn drop(&mut self) {
        release(&self.mailbox, self.id, true);
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
        let mut m = self.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.id) else {
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
        let mut m = self.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.id) else {
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
        m.dirty.insert(self.id);
        Ok(())
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        let mut m = self.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.id) else {
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
            m.dirty.insert(self.id);
        }
        s.send_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn reset(&mut self, reset_code: u64) {
        let mut m = self.mailbox.borrow_mut();
        if let Some(s) = m.streams.get_mut(&self.id)
            && !s.send_done
        {
            s.reset = Some(reset_code);
        }
        m.dirty.insert(self.id);
    }

    fn send_id(&self) -> quic::StreamId {
        h3_id(self.id)
    }
}

/// The receiving side of a stream.
#[derive(Debug)]
pub struct RecvStream {
    mailbox: Shared,
    id: StreamId,
}

impl RecvStream {
    fn new(mailbox: &Shared, id: StreamId) -> Self {
        if let Some(s) = mailbox.borrow_mut().streams.get_mut(&id) {
            s.handles += 1;
        }
        Self {
            mailbox: Rc::clone(mailbox),
            id,
        }
    }
}

impl Drop for RecvStream {
    fn drop(&mut self) {
        release(&self.mailbox, self.id, false);
    }
}

impl quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Self::Buf>, StreamErrorIncoming>> {
        let mut m = self.mailbox.borrow_mut();
        let m = &mut *m;
        let Some(s) = m.streams.get_mut(&self.id) else {
            return Poll::Ready(Ok(None));
        };
        if let Some(b) = s.recv.pop_front() {
            let was_full = s.recv_held >= RECV_HELD;
            s.recv_held -= b.len();
            if was_full || s.recv.is_empty() {
                m.dirty.insert(self.id);
            }
            return Poll::Ready(Ok(Some(b)));
        }
        match s.recv_end {
            Some(None) => {
                s.recv_done = true;
                m.dirty.insert(self.id);
                return Poll::Ready(Ok(None));
            }
            Some(Some(c)) => {
                s.recv_done = true;
                m.dirty.insert(self.id);
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
        let mut m = self.mailbox.borrow_mut();
        if let Some(s) = m.streams.get_mut(&self.id)
            && !s.recv_done
        {
            s.stop = Some(error_code);
        }
        m.dirty.insert(self.id);
    }

    fn recv_id(&self) -> quic::StreamId {
        h3_id(self.id)
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
