//! The server's HTTP/3 connections (ALPN `h3`): each an [`Engine`](crate::h3::Engine) whose tasks are the `h3`
//! crate's server connection and one task per request. A request is `GET` or `HEAD` of `/N`
//! (N generated pattern bytes) or of a file under the root, under the same naming rules as
//! `hq-interop` ([`hq::target`], [`hq::open`]), or a `POST`, whose body is counted and
//! answered with its length; files are read off the driver thread, one chunk in flight per
//! request, so a slow reader holds the file back through flow control.
//!
//! At shutdown each connection sends GOAWAY (RFC 9114 section 5.2) naming the first request
//! it will not process: the requests accepted before it finish, later ones are rejected
//! (`H3_REQUEST_REJECTED`), and the driver closes with `H3_NO_ERROR` once every response is
//! acknowledged or its drain period ends.

mod respond;
mod shutdown;

use std::{
    cell::{Cell, RefCell},
    rc::Rc,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use h3::error::Code;
use quinn_proto::{Connection, ConnectionHandle, Event, VarInt};
use shutdown::{Counted, Shutdown};

use crate::{
    driver::Driver,
    h3::{connections::Connections, handles::H3Connection, tasks::Spawner},
    hq,
};

/// The largest request header section taken (`SETTINGS_MAX_FIELD_SECTION_SIZE`, RFC 9114
/// section 4.2.2): the same bound as an `hq-interop` request line.
pub const MAX_FIELD_SECTION: u64 = hq::MAX_REQUEST as u64;

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

type Counters = Rc<RefCell<Http3Counters>>;

/// What a worker's HTTP/3 connections keep ([`Http3::kept`]), for tests of what is freed.
#[cfg(test)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kept {
    pub(super) connections: usize,
    /// Streams the mailboxes keep.
    pub(super) streams: usize,
    /// What the mailboxes hold for `h3`.
    pub(super) held: usize,
    /// Tasks not finished.
    pub(super) tasks: usize,
    /// Tasks waiting to accept a stream.
    pub(super) accept_waiters: usize,
    /// Tasks waiting for the shutdown.
    pub(super) shutdown_waiters: usize,
    /// The most streams one connection left unread at once for want of room.
    pub(super) peak_starved: usize,
}

/// The HTTP/3 connections of one worker.
#[derive(Debug)]
pub(super) struct Http3 {
    root: Option<Arc<crate::disk::Root>>,
    conns: Connections<()>,
    /// The counts already added to the report's totals.
    reported: Http3Counters,
    counters: Counters,
    shutdown: Rc<Shutdown>,
}

impl Http3 {
    /// HTTP/3 connections serving files under `root`, if any.
    pub(super) fn new(root: Option<Arc<crate::disk::Root>>) -> Self {
        Self {
            root,
            conns: Connections::default(),
            counters: Counters::default(),
            reported: Http3Counters::default(),
            shutdown: Rc::default(),
        }
    }

    /// The server shuts down: every connection sends GOAWAY. Returns whether there are
    /// connections to let finish.
    pub(super) fn shut_down(&mut self) -> bool {
        self.shutdown.start();
        !self.conns.is_empty()
    }

    /// After [`shut_down`](Self::shut_down): every connection has announced it and answered
    /// the requests it let finish.
    pub(super) fn settled(&self) -> bool {
        // A response handed over whole is lost with the connection until the client has
        // acknowledged it.
        self.shutdown.settled() && self.conns.iter().all(|(_, e, ())| e.unacked() == 0)
    }

    /// The most bytes one of its connections held for `h3` at once.
    #[cfg(test)]
    pub(super) fn peak_held(&self) -> usize {
        self.conns
            .iter()
            .map(|(_, e, ())| e.peak_held())
            .max()
            .unwrap_or(0)
    }

    /// What its connections and tasks keep, summed over the connections.
    #[cfg(test)]
    pub(super) fn kept(&self) -> Kept {
        let mut k = Kept {
            connections: self.conns.len(),
            shutdown_waiters: self.shutdown.waiting(),
            ..Kept::default()
        };
        for (_, e, ()) in self.conns.iter() {
            k.streams += e.streams();
            k.held += e.held();
            k.tasks += e.tasks();
            k.accept_waiters += e.accept_waiters();
            k.peak_starved = k.peak_starved.max(e.peak_starved());
        }
        k
    }

    /// Whether `ch` is one of its connections.
    pub(super) fn serves(&self, ch: ConnectionHandle) -> bool {
        self.conns.contains(ch)
    }

    /// `ch` negotiated `h3`: its streams are HTTP/3 from now on.
    ///
    /// With a `window` from the receive budget, quinn-proto is given half of it and what
    /// the mailbox and `h3` hold may take the other half, so that the connection holds no
    /// more than an `hq-interop` one with that window.
    pub(super) fn start(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        window: Option<u64>,
        now: Instant,
    ) {
        let mut engine = self.conns.engine(ch);
        if let Some(w) = window {
            conn.set_receive_window(VarInt::from_u64(w / 2).unwrap_or(VarInt::MAX));
            engine.limit_held(usize::try_from(w / 2).unwrap_or(usize::MAX));
        }
        let spawner = engine.spawner();
        spawner.spawn(serve(
            engine.transport(),
            spawner.clone(),
            self.root.clone(),
            Rc::clone(&self.counters),
            Rc::clone(&self.shutdown),
        ));
        engine.drive(conn, now);
        self.conns.insert(ch, engine, ());
    }

    /// `ch`'s window from the receive budget grew to `window` (its handshake completed):
    /// split as at [`start`](Self::start).
    pub(super) fn widen(&mut self, ch: ConnectionHandle, conn: &mut Connection, window: u64) {
        if let Some((engine, ())) = self.conns.get_mut(ch) {
            conn.set_receive_window(VarInt::from_u64(window / 2).unwrap_or(VarInt::MAX));
            engine.limit_held(usize::try_from(window / 2).unwrap_or(usize::MAX));
        }
    }

    /// An event of one of its connections.
    pub(super) fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) {
        self.conns.on_event(ch, conn, event, now);
    }

    /// `ch` is lost or drained.
    pub(super) fn gone(&mut self, ch: ConnectionHandle) {
        self.conns.remove(ch);
    }

    /// Drives the connections whose tasks were woken off the thread or that have work left;
    /// returns whether one still has.
    pub(super) fn poll(&mut self, driver: &mut Driver, now: Instant) -> bool {
        for ch in self.conns.due([]) {
            self.conns.drive(driver, ch, now);
        }
        self.conns.busy()
    }

    /// Whether a task was woken off the thread (the driver's wait polls this).
    pub(super) fn poll_wake(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.conns.poll_wake(cx)
    }

    /// Brings `report` up to date: its `http3` counts, and its totals by what came since.
    pub(super) fn report(&mut self, report: &mut super::ServerReport) {
        let now = *self.counters.borrow();
        let was = self.reported;
        report.requests += now.responses - was.responses;
        report.refused_requests += now.error_statuses - was.error_statuses;
        report.bytes_sent += now.body_bytes - was.body_bytes;
        report.bytes_received += now.uploaded_bytes - was.uploaded_bytes;
        report.http3 = now;
        self.reported = now;
    }
}

/// A connection: `h3`'s server side, a task per request; at shutdown, its GOAWAY.
async fn serve(
    transport: H3Connection,
    spawner: Spawner,
    root: Option<Arc<crate::disk::Root>>,
    counters: Counters,
    shutdown: Rc<Shutdown>,
) {
    let built = h3::server::builder()
        .max_field_section_size(MAX_FIELD_SECTION)
        .build::<_, Bytes>(transport)
        .await;
    let Ok(mut conn) = built else {
        return;
    };
    let mut unannounced = Some(Counted::new(&shutdown, |s| &s.unannounced));
    // Requests accepted: quinn-proto hands `h3` the client's bidirectional streams in order
    // (IDs 0, 4, 8, ...), so the next one's ID is four times this.
    let mut accepted_requests = 0u64;
    // The GOAWAY's ID once sent: the first request not processed.
    let goaway: Rc<Cell<Option<u64>>> = Rc::default();
    // One wait for the shutdown for the connection's life, polled again at each wake-up.
    let started = shutdown.started();
    tokio::pin!(started);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut started, if unannounced.is_some() => {
                // `h3` announces the stream after its last accepted (it adds the count
                // given) but would still accept that one: those are refused below.
                goaway.set(Some(4 * accepted_requests));
                let _ = conn.shutdown(1).await;
                unannounced = None;
                continue;
            }
            accepted = conn.accept() => accepted,
        };
        let Ok(Some(resolver)) = accepted else {
            break;
        };
        accepted_requests += 1;
        let (root, counters, goaway) = (root.clone(), Rc::clone(&counters), Rc::clone(&goaway));
        // Counted from its acceptance, before its task first runs.
        let answering = Counted::new(&shutdown, |s| &s.requests);
        spawner.spawn(async move {
            let _answering = answering;
            let Ok((request, mut stream)) = resolver.resolve_request().await else {
                counters.borrow_mut().cancelled += 1;
                return;
            };
            // RFC 9114 section 5.2: a request at or beyond the GOAWAY's ID is not processed,
            // so the client may retry it elsewhere.
            if goaway
                .get()
                .is_some_and(|first| stream.id().into_inner() >= first)
            {
                counters.borrow_mut().rejected += 1;
                stream.stop_sending(Code::H3_REQUEST_REJECTED);
                stream.stop_stream(Code::H3_REQUEST_REJECTED);
                return;
            }
            match respond::respond(&request, &mut stream, root.as_deref(), &counters).await {
                Ok(true) => counters.borrow_mut().responses += 1,
                Ok(false) => {}
                Err(respond::Failed::Stream) => counters.borrow_mut().cancelled += 1,
                Err(respond::Failed::File) => {
                    counters.borrow_mut().cancelled += 1;
                    stream.stop_stream(Code::H3_INTERNAL_ERROR);
                }
            }
        });
    }
}
