//! The server's HTTP/3 (ALPN `h3`, RFC 9114), read and written straight on the connection's
//! streams as `hq-interop` is: no task per request, no copy of a body. A request is `GET`
//! or `HEAD` of `/N` (N generated pattern bytes) or of a file under the root, under the same
//! naming rules as `hq-interop` ([`hq::target`], [`hq::open`]), or a `POST`, whose body is
//! counted and answered with its length; small cached files are read at once, others off
//! the driver thread, one chunk in flight per request, so a slow reader holds the file back
//! through flow control.
//!
//! QPACK runs without a dynamic table (the server offers none), so a field section decodes on
//! its own and nothing is kept between requests. A connection holds at most a partial frame
//! header per stream and a HEADERS payload of at most `MAX_FIELD_SECTION` per request stream,
//! as `hq-interop` holds a request line: other frames are skipped or streamed.
//!
//! At shutdown each connection sends GOAWAY (RFC 9114 section 5.2) naming the first request
//! it will not process: the requests opened before it finish, later ones are rejected
//! (`H3_REQUEST_REJECTED`), and the driver closes with `H3_NO_ERROR` once every response is
//! acknowledged or its drain period ends.

mod control;
mod frames;
mod head;
mod peer;
mod qpack;
mod request;
mod respond;
mod session;

use std::{
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use quinn_proto::{Connection, ConnectionHandle, Event, VarInt};
use respond::FileDone;
use session::{Session, Shared};

use neqo_driver::{Driver, IdMap, Jobs};
use neqo_protocols::hq;

use crate::disk::Root;

/// The largest request header section taken (`SETTINGS_MAX_FIELD_SECTION_SIZE`, RFC 9114
/// section 4.2.2): the same bound as an `hq-interop` request line.
pub const MAX_FIELD_SECTION: u64 = hq::MAX_REQUEST as u64;

/// `H3_NO_ERROR`, the code a connection is closed with at shutdown.
pub const NO_ERROR: u64 = frames::code::NO_ERROR;

/// The unidirectional streams the server lets an HTTP/3 peer open at once: the control
/// stream and QPACK's two (RFC 9114 section 6.2, RFC 9204 section 4.2), and room for the
/// reserved types peers send to exercise the rule that unknown ones are ignored.
pub const UNI_STREAMS: u32 = 8;

/// What the HTTP/3 requests did, for the server's report (which also counts them in its
/// totals: `requests`, `refused_requests`, `bytes_sent`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Http3Counters {
    /// Successful responses (200) handed to the transport whole (a connection closed before
    /// the client acknowledged them may still cut one short).
    pub responses: u64,
    /// Body bytes sent.
    pub body_bytes: u64,
    /// Request body bytes received (`POST`).
    pub uploaded_bytes: u64,
    /// Requests answered with an error status (4xx, 5xx).
    pub error_statuses: u64,
    /// Requests that ended without a whole response: cancelled by the client, or a stream
    /// or connection error.
    pub cancelled: u64,
    /// Requests refused unprocessed after the server's GOAWAY (`H3_REQUEST_REJECTED`): the
    /// client may retry them elsewhere.
    pub rejected: u64,
}

impl Http3Counters {
    /// Adds `other`'s counts (workers' into the server's).
    pub fn add(&mut self, other: &Self) {
        self.responses += other.responses;
        self.body_bytes += other.body_bytes;
        self.uploaded_bytes += other.uploaded_bytes;
        self.error_statuses += other.error_statuses;
        self.cancelled += other.cancelled;
        self.rejected += other.rejected;
    }
}

/// What a worker's HTTP/3 connections keep ([`Http3::kept`]), for tests of what is freed.
#[cfg(test)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kept {
    pub(super) connections: usize,
    /// Requests whose response is not yet acknowledged.
    pub(super) requests: usize,
    /// The client's unidirectional streams.
    pub(super) uni_streams: usize,
    /// Bytes held for frames not yet whole.
    pub(super) held: usize,
}

/// The HTTP/3 connections of one worker.
#[derive(Debug)]
pub(super) struct Http3 {
    root: Option<Arc<Root>>,
    sessions: IdMap<ConnectionHandle, Session>,
    files: Jobs<FileDone>,
    /// The counts already added to the report's totals.
    reported: Http3Counters,
    counters: Http3Counters,
    next_token: u64,
    shutting_down: bool,
}

impl Http3 {
    /// HTTP/3 connections serving files under `root`, if any.
    pub(super) fn new(root: Option<Arc<Root>>) -> Self {
        Self {
            root,
            sessions: IdMap::default(),
            files: Jobs::default(),
            reported: Http3Counters::default(),
            counters: Http3Counters::default(),
            next_token: 0,
            shutting_down: false,
        }
    }

    /// The server shuts down: every connection sends GOAWAY. Returns whether there are
    /// connections to let finish.
    pub(super) fn shut_down(&mut self, driver: &mut Driver, now: Instant) -> bool {
        self.shutting_down = true;
        for (&ch, session) in &mut self.sessions {
            driver.update(ch, |conn| session.go_away(conn, now));
        }
        !self.sessions.is_empty()
    }

    /// After [`shut_down`](Self::shut_down): every connection has announced it and its
    /// requests' responses are acknowledged.
    pub(super) fn settled(&self) -> bool {
        self.shutting_down && self.sessions.values().all(Session::settled)
    }

    /// The most bytes one of its connections held at once.
    #[cfg(test)]
    pub(super) fn peak_held(&self) -> usize {
        self.sessions
            .values()
            .map(Session::peak_held)
            .max()
            .unwrap_or(0)
    }

    /// What its connections keep, summed.
    #[cfg(test)]
    pub(super) fn kept(&self) -> Kept {
        let mut k = Kept {
            connections: self.sessions.len(),
            ..Kept::default()
        };
        for s in self.sessions.values() {
            let (requests, uni) = s.kept();
            k.requests += requests;
            k.uni_streams += uni;
            k.held += s.held();
        }
        k
    }

    /// Whether `ch` is one of its connections.
    pub(super) fn serves(&self, ch: ConnectionHandle) -> bool {
        self.sessions.contains_key(&ch)
    }

    /// `ch` negotiated `h3`: its streams are HTTP/3 from now on, and it gets `window` from
    /// the receive budget, as any connection.
    pub(super) fn start(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        window: Option<u64>,
        now: Instant,
    ) {
        if let Some(w) = window {
            conn.set_receive_window(VarInt::from_u64(w).unwrap_or(VarInt::MAX));
        }
        let mut session = Session::default();
        session.start(conn, now);
        if self.shutting_down {
            session.go_away(conn, now);
        }
        self.sessions.insert(ch, session);
    }

    /// An event of one of its connections.
    pub(super) fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) {
        if let Some((session, mut shared)) = self.session(ch) {
            session.event(conn, event, &mut shared, now);
        }
    }

    /// `ch`'s session, and what the worker's sessions share.
    fn session(&mut self, ch: ConnectionHandle) -> Option<(&mut Session, Shared<'_>)> {
        let session = self.sessions.get_mut(&ch)?;
        let shared = Shared {
            ch,
            root: self.root.as_ref(),
            files: &self.files,
            counters: &mut self.counters,
            next_token: &mut self.next_token,
        };
        Some((session, shared))
    }

    /// `ch` is lost or drained.
    pub(super) fn gone(&mut self, ch: ConnectionHandle) {
        if let Some(mut s) = self.sessions.remove(&ch) {
            s.gone(&mut self.counters);
        }
    }

    /// Hands finished file jobs to their requests.
    pub(super) fn poll(&mut self, driver: &mut Driver, now: Instant) {
        while let Some(done) = self.files.take() {
            let ch = done.ch;
            if let Some((session, mut shared)) = self.session(ch) {
                driver.update(ch, |conn| session.file_done(conn, done, &mut shared, now));
            }
        }
    }

    /// Ready once a file job has finished (the driver's wait polls this).
    pub(super) fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.files.poll_ready(cx)
    }

    /// Brings `report` up to date: its `http3` counts, and its totals by what came since.
    pub(super) fn report(&mut self, report: &mut super::ServerReport) {
        let now = self.counters;
        let was = self.reported;
        report.requests += now.responses - was.responses;
        report.refused_requests += now.error_statuses - was.error_statuses;
        report.bytes_sent += now.body_bytes - was.body_bytes;
        report.bytes_received += now.uploaded_bytes - was.uploaded_bytes;
        report.http3 = now;
        self.reported = now;
    }
}
