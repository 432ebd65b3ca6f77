//! One HTTP/3 connection: its control streams ([`control`](super::control), the client's in
//! [`peer`](super::peer)), its requests as they arrive ([`request`](super::request)) and their
//! responses, and its GOAWAY.
//!
//! A request's entry lives from its stream's opening until its response is acknowledged (or
//! the stream is cancelled), so that a shutdown can wait for the responses under way; a
//! request body the response does not need is then refused with `STOP_SENDING`
//! (`H3_NO_ERROR`, RFC 9114 section 4.1).

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Instant, SystemTime},
};

use bytes::Bytes;
use neqo_driver::{IdMap, Jobs};
use neqo_h3::{
    control::{Role, goaway},
    frame::{Violation, code},
    qpack::Decoder,
    session::{OwnControl, PeerUni},
};
use neqo_protocols::body;
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, Side, StreamEvent, StreamId, VarInt};

use super::{
    Http3Counters, MAX_FIELD_SECTION,
    request::{Arrived, Incoming},
    respond::{self, FileDone, Got, Plan, Response},
};
use crate::{
    access_log::{AccessLog, Outcome, Record},
    disk::Root,
    resets::Resets,
};

mod responses;

/// What a worker's connections share.
pub(super) struct Shared<'a> {
    pub(super) ch: ConnectionHandle,
    pub(super) root: Option<&'a Arc<Root>>,
    pub(super) generate: bool,
    pub(super) log: Option<&'a AccessLog>,
    pub(super) files: &'a Jobs<FileDone>,
    pub(super) counters: &'a mut Http3Counters,
    pub(super) next_token: &'a mut u64,
    /// The resets a shutdown sent, until acknowledged.
    pub(super) resets: &'a mut Resets,
}

impl Shared<'_> {
    /// Runs `job` for request `id` (`token`) off the driver thread; its result comes back
    /// through [`Session::file_done`].
    fn spawn(&self, id: StreamId, token: u64, job: impl FnOnce() -> Got + Send + 'static) {
        let ch = self.ch;
        self.files.spawn(move || FileDone {
            ch,
            id,
            token,
            got: job(),
        });
    }
}

#[derive(Debug)]
struct Request {
    token: u64,
    incoming: Incoming,
    response: Response,
    /// When its stream opened, and the status it is answered with: for the access log.
    started: Instant,
    status: Option<u16>,
}

/// One connection's HTTP/3 state.
#[derive(Debug)]
pub(super) struct Session {
    control: OwnControl,
    peer: PeerUni,
    requests: IdMap<StreamId, Request>,
    decoder: Decoder,
    /// The lowest request stream ID not yet opened.
    next_request: u64,
    /// Once the GOAWAY is sent: the first request ID not processed.
    goaway: Option<u64>,
    /// Once a violation closed the connection: events are ignored.
    closed: bool,
    /// The client's address when last seen, for the access log.
    address: Option<SocketAddr>,
    #[cfg(test)]
    peak_held: usize,
}

impl Default for Session {
    fn default() -> Self {
        Self {
            control: OwnControl::default(),
            peer: PeerUni::new(Role::Server),
            requests: IdMap::default(),
            decoder: Decoder::default(),
            next_request: 0,
            goaway: None,
            closed: false,
            address: None,
            #[cfg(test)]
            peak_held: 0,
        }
    }
}

impl Session {
    /// Opens the server's control stream.
    pub(super) fn start(&mut self, conn: &mut Connection, now: Instant) {
        self.address = Some(conn.remote_address());
        let r = self.control.start(conn, MAX_FIELD_SECTION);
        self.settle(conn, r, None, now);
    }

    /// Requests whose response is not yet acknowledged, streams of the client's it keeps.
    #[cfg(test)]
    pub(super) fn kept(&self) -> (usize, usize) {
        (self.requests.len(), self.peer.streams())
    }

    /// Bytes it holds for frames not yet whole.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.peer.held()
            + self
                .requests
                .values()
                .map(|r| r.incoming.held())
                .sum::<usize>()
    }

    /// The most it held at once.
    #[cfg(test)]
    pub(super) fn peak_held(&self) -> usize {
        self.peak_held
    }

    /// Whether it sent its GOAWAY and every request it let in is answered and acknowledged,
    /// or it is closed already.
    pub(super) fn settled(&self) -> bool {
        self.closed || (self.goaway.is_some() && self.control.flushed() && self.requests.is_empty())
    }

    /// Sends GOAWAY (RFC 9114 section 5.2): the requests opened so far finish, later ones are
    /// rejected.
    pub(super) fn go_away(&mut self, conn: &mut Connection, now: Instant) {
        if self.goaway.is_some() || self.closed {
            return;
        }
        self.goaway = Some(self.next_request);
        let r = self.control.send(conn, &goaway(self.next_request));
        self.settle(conn, r, None, now);
    }

    /// Whether it keeps no request (closed, or each response acknowledged or cut).
    pub(super) fn idle(&self) -> bool {
        self.closed || self.requests.is_empty()
    }

    /// The shutdown's drain period is over: every request whose response is not
    /// acknowledged is reset with `H3_REQUEST_CANCELLED`, which tells the client it may have been
    /// processed (RFC 9114 section 4.1.1; never `H3_REQUEST_REJECTED`, "safe to retry"),
    /// and counted and logged. Returns how many.
    pub(super) fn cut(&mut self, conn: &mut Connection, shared: &mut Shared<'_>) -> usize {
        if self.closed {
            return 0;
        }
        // Responses all written but not yet acknowledged too: quinn-proto would hold the
        // connection's close behind their data in a full congestion window.
        let under_way: Vec<StreamId> = self.requests.keys().copied().collect();
        let n = under_way.len();
        for id in under_way {
            if let Some(req) = self.requests.remove(&id) {
                if !matches!(req.response, Response::Sent { .. }) {
                    shared.counters.cancelled += 1;
                }
                self.log(shared.log, &req, Outcome::Shutdown);
            }
            body::cancel(conn, id, varint(code::REQUEST_CANCELLED));
            shared.resets.sent(shared.ch, id);
        }
        n
    }

    /// The connection is gone: what it had under way was cancelled.
    pub(super) fn gone(&mut self, counters: &mut Http3Counters, log: Option<&AccessLog>) {
        for req in self.requests.values() {
            if !matches!(req.response, Response::Sent { .. }) {
                counters.cancelled += 1;
            }
            self.log(log, req, Outcome::ConnectionLost);
        }
        self.requests.clear();
    }

    /// Logs how `req` ended, if there is a log.
    fn log(&self, log: Option<&AccessLog>, req: &Request, outcome: Outcome) {
        let (Some(log), Some(peer)) = (log, self.address) else {
            return;
        };
        let (method, path) = req
            .incoming
            .head
            .as_ref()
            .map_or(("-", "-"), |h| (h.method.as_str(), h.path.as_str()));
        let bytes = match &req.response {
            Response::Sending {
                source, framing, ..
            } => source.written.saturating_sub(*framing),
            Response::Sent { bytes, .. } => *bytes,
            _ => 0,
        };
        log.log(Record {
            time: SystemTime::now(),
            peer,
            alpn: neqo_protocols::ALPN_H3.into(),
            method: method.to_owned(),
            path: path.to_owned(),
            status: req.status,
            bytes,
            duration: req.started.elapsed(),
            outcome,
        });
    }

    /// One of the connection's events.
    pub(super) fn event(
        &mut self,
        conn: &mut Connection,
        event: &Event,
        shared: &mut Shared<'_>,
        now: Instant,
    ) {
        if self.closed {
            return;
        }
        let Event::Stream(e) = event else {
            return;
        };
        let (r, stream) = match *e {
            StreamEvent::Opened { dir } => (self.opened(conn, dir, shared), None),
            StreamEvent::Readable { id } if id.dir() == Dir::Uni => {
                (self.peer.read(conn, id), None)
            }
            StreamEvent::Readable { id } => (self.read(conn, id, shared), Some(id)),
            StreamEvent::Writable { id } if self.control.is(id) => (self.control.flush(conn), None),
            StreamEvent::Writable { id } => (self.pump(conn, id, shared), Some(id)),
            StreamEvent::Available { dir: Dir::Uni } => (self.control.flush(conn), None),
            StreamEvent::Finished { id } => {
                self.acknowledged(conn, id, shared);
                (Ok(()), None)
            }
            StreamEvent::Stopped { id, .. } if self.control.is(id) => (
                Err(Violation::Connection(
                    code::CLOSED_CRITICAL_STREAM,
                    "control stream stopped",
                )),
                None,
            ),
            StreamEvent::Stopped { id, error_code } => {
                self.cancelled(conn, id, error_code, shared, true);
                (Ok(()), None)
            }
            StreamEvent::Available { dir: Dir::Bi } => (Ok(()), None),
        };
        self.settle(conn, r, stream.map(|id| (id, &mut *shared)), now);
        #[cfg(test)]
        {
            self.peak_held = self.peak_held.max(self.held());
        }
    }

    /// Acts on a violation: the stream's or the connection's end.
    fn settle(
        &mut self,
        conn: &mut Connection,
        r: Result<(), Violation>,
        stream: Option<(StreamId, &mut Shared<'_>)>,
        now: Instant,
    ) {
        match r {
            Ok(()) => {}
            Err(Violation::Stream(c)) => {
                if let Some((id, shared)) = stream {
                    tracing::debug!("HTTP/3 stream {id} reset: {c:#x}");
                    self.cancelled(conn, id, varint(c), shared, false);
                }
            }
            Err(Violation::Connection(c, why)) => {
                tracing::debug!("HTTP/3 connection closed: {why} ({c:#x})");
                self.closed = true;
                conn.close(now, varint(c), Bytes::from_static(why.as_bytes()));
            }
        }
    }

    /// The client opened streams in `dir`.
    fn opened(
        &mut self,
        conn: &mut Connection,
        dir: Dir,
        shared: &mut Shared<'_>,
    ) -> Result<(), Violation> {
        if dir == Dir::Uni {
            return self.peer.accept(conn);
        }
        while let Some(id) = conn.streams().accept(dir) {
            debug_assert_eq!(id.initiator(), Side::Client);
            self.next_request = self.next_request.max(u64::from(id) + 4);
            // RFC 9114 section 5.2: past the GOAWAY's ID, not processed, so the client may
            // retry it elsewhere.
            if self.goaway.is_some_and(|first| u64::from(id) >= first) {
                shared.counters.rejected += 1;
                let unread = Request {
                    token: 0,
                    incoming: Incoming::new(),
                    response: Response::None,
                    started: Instant::now(),
                    status: None,
                };
                self.log(shared.log, &unread, Outcome::Rejected);
                body::cancel(conn, id, varint(code::REQUEST_REJECTED));
                continue;
            }
            *shared.next_token += 1;
            let request = Request {
                token: *shared.next_token,
                incoming: Incoming::new(),
                response: Response::None,
                started: Instant::now(),
                status: None,
            };
            self.requests.insert(id, request);
            match self.read(conn, id, shared) {
                Err(Violation::Stream(c)) => self.cancelled(conn, id, varint(c), shared, false),
                Err(v) => return Err(v),
                Ok(()) => {}
            }
        }
        Ok(())
    }

    /// Reads request `id`; answers once what it needs has arrived.
    fn read(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        shared: &mut Shared<'_>,
    ) -> Result<(), Violation> {
        let Some(req) = self.requests.get_mut(&id) else {
            return Ok(());
        };
        let arrived = req.incoming.read(conn, id, &mut self.decoder)?;
        let Arrived {
            head,
            too_large,
            fin,
            reset,
        } = arrived;
        if let Some(code) = reset {
            self.cancelled(conn, id, code, shared, true);
            return Ok(());
        }
        if !matches!(req.response, Response::None) {
            return Ok(());
        }
        let plan = if too_large {
            Plan::Status(431)
        } else if let Some(h) = req.incoming.head.as_ref().filter(|_| head || fin) {
            match respond::plan(h, shared.root.map(Arc::as_ref), shared.generate) {
                Plan::Upload if !fin => return Ok(()),
                plan => plan,
            }
        } else {
            return Ok(());
        };
        self.answer(conn, id, plan, shared)
    }

    /// Request `id` ends without its response: the client cancelled it (with `code`), or it
    /// broke the rules of its stream.
    fn cancelled(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        code: VarInt,
        shared: &mut Shared<'_>,
        by_client: bool,
    ) {
        if let Some(req) = self.requests.remove(&id) {
            if !matches!(req.response, Response::Sent { .. }) {
                shared.counters.cancelled += 1;
            }
            let code = code.into_inner();
            let outcome = if by_client {
                Outcome::Cancelled(code)
            } else {
                Outcome::Reset(code)
            };
            self.log(shared.log, &req, outcome);
        }
        body::cancel(conn, id, code);
    }
}

fn varint(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::MAX)
}
