//! The server's HTTP/3 connections (ALPN `h3`): each an [`Engine`] whose tasks are the `h3`
//! crate's server connection and one task per request. A request is `GET` or `HEAD` of `/N`
//! (N generated pattern bytes) or of a file under the root, under the same naming rules as
//! `hq-interop` ([`hq::target`], [`hq::open`]); files are read off the driver thread, one
//! chunk in flight per request, so a slow reader holds the file back through flow control.
//!
//! At shutdown each connection sends GOAWAY (RFC 9114 section 5.2) naming the first request
//! it will not process: the requests accepted before it finish, later ones are rejected
//! (`H3_REQUEST_REJECTED`), and the driver closes with `H3_NO_ERROR` once every response is
//! acknowledged or its drain period ends.

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    future::poll_fn,
    path::Path,
    rc::Rc,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::Instant,
};

use bytes::Bytes;
use h3::{error::Code, server::RequestStream};
use http::{Method, Request, Response, StatusCode};
use quinn_proto::{Connection, ConnectionHandle, Event};

use crate::{
    disk,
    driver::Driver,
    h3::{
        Engine,
        handles::{BidiStream, H3Connection},
        tasks::{Notifier, Spawner},
    },
    hq::{self, Target},
    pattern,
};

/// The largest request header section taken (`SETTINGS_MAX_FIELD_SECTION_SIZE`, RFC 9114
/// section 4.2.2): the same bound as an `hq-interop` request line.
pub const MAX_FIELD_SECTION: u64 = hq::MAX_REQUEST as u64;

/// What the HTTP/3 requests did, for the server's report (which also counts them in its
/// totals: `requests`, `refused_requests`, `bytes_sent`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Http3Counters {
    /// Successful responses (200) sent whole.
    pub responses: u64,
    /// Body bytes sent.
    pub body_bytes: u64,
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
        self.error_statuses += other.error_statuses;
        self.cancelled += other.cancelled;
        self.rejected += other.rejected;
    }
}

type Counters = Rc<RefCell<Http3Counters>>;

/// A worker's shutdown as its HTTP/3 tasks see it, and what it waits for.
#[derive(Debug, Default)]
struct Shutdown {
    started: Cell<bool>,
    /// The connections' tasks waiting for it.
    waiting: RefCell<Vec<Waker>>,
    /// Connections serving requests that have not sent their GOAWAY.
    unannounced: Cell<usize>,
    /// Requests being answered.
    requests: Cell<usize>,
}

impl Shutdown {
    fn start(&self) {
        self.started.set(true);
        for w in self.waiting.borrow_mut().drain(..) {
            w.wake();
        }
    }

    async fn started(&self) {
        poll_fn(|cx| {
            if self.started.get() {
                return Poll::Ready(());
            }
            self.waiting.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await;
    }

    /// Every connection has sent GOAWAY and every request it let finish is answered.
    fn settled(&self) -> bool {
        self.started.get() && self.unannounced.get() == 0 && self.requests.get() == 0
    }
}

/// Counts one in a [`Shutdown`] counter while it lives (a dropped task counts out too).
struct Counted {
    shutdown: Rc<Shutdown>,
    counter: fn(&Shutdown) -> &Cell<usize>,
}

impl Counted {
    fn new(shutdown: &Rc<Shutdown>, counter: fn(&Shutdown) -> &Cell<usize>) -> Self {
        let c = counter(shutdown);
        c.set(c.get() + 1);
        Self {
            shutdown: Rc::clone(shutdown),
            counter,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let c = (self.counter)(&self.shutdown);
        c.set(c.get() - 1);
    }
}

/// The HTTP/3 connections of one worker.
#[derive(Debug)]
pub(super) struct Http3 {
    root: Option<Arc<Path>>,
    conns: HashMap<ConnectionHandle, Engine>,
    notifier: Arc<Notifier>,
    /// The counts already added to the report's totals.
    reported: Http3Counters,
    /// Connections whose engine stopped at its round limit with work left.
    again: Vec<ConnectionHandle>,
    counters: Counters,
    shutdown: Rc<Shutdown>,
}

impl Http3 {
    /// HTTP/3 connections serving files under `root` (canonical), if any.
    pub(super) fn new(root: Option<Arc<Path>>) -> Self {
        Self {
            root,
            conns: HashMap::new(),
            notifier: Notifier::new(),
            again: Vec::new(),
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
        self.shutdown.settled() && self.conns.values().all(|e| e.unacked() == 0)
    }

    /// Bytes its connections hold read ahead of `h3`, the most of any one connection.
    #[cfg(test)]
    pub(super) fn most_held(&self) -> usize {
        self.conns.values().map(Engine::held).max().unwrap_or(0)
    }

    /// Whether `ch` is one of its connections.
    pub(super) fn serves(&self, ch: ConnectionHandle) -> bool {
        self.conns.contains_key(&ch)
    }

    /// `ch` negotiated `h3`: its streams are HTTP/3 from now on.
    pub(super) fn start(&mut self, ch: ConnectionHandle, conn: &mut Connection, now: Instant) {
        let mut engine = Engine::notifying(Arc::clone(&self.notifier), ch.0 as u64);
        let spawner = engine.spawner();
        spawner.spawn(serve(
            engine.transport(),
            spawner.clone(),
            self.root.clone(),
            Rc::clone(&self.counters),
            Rc::clone(&self.shutdown),
        ));
        engine.drive(conn, now);
        self.conns.insert(ch, engine);
    }

    /// An event of one of its connections.
    pub(super) fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) {
        if let Some(e) = self.conns.get_mut(&ch) {
            e.on_event(conn, event, now);
            if e.pending() {
                self.again.push(ch);
            }
        }
    }

    /// `ch` is lost or drained.
    pub(super) fn gone(&mut self, ch: ConnectionHandle) {
        self.conns.remove(&ch);
    }

    /// Drives the connections whose tasks were woken off the thread or that have work left;
    /// returns whether one still has.
    pub(super) fn poll(&mut self, driver: &mut Driver, now: Instant) -> bool {
        let mut due: Vec<ConnectionHandle> = std::mem::take(&mut self.again);
        due.extend(
            self.notifier
                .take_ready()
                .into_iter()
                .map(|k| ConnectionHandle(usize::try_from(k).unwrap_or(usize::MAX))),
        );
        due.sort_unstable_by_key(|c| c.0);
        due.dedup();
        for ch in due {
            let Some(e) = self.conns.get_mut(&ch) else {
                continue;
            };
            driver.update(ch, |conn| e.drive(conn, now));
            if e.pending() {
                self.again.push(ch);
            }
        }
        !self.again.is_empty()
    }

    /// Whether a task was woken off the thread (the driver's wait polls this).
    pub(super) fn poll_wake(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.notifier.poll(cx)
    }

    /// Brings `report` up to date: its `http3` counts, and its totals by what came since.
    pub(super) fn report(&mut self, report: &mut super::ServerReport) {
        let now = *self.counters.borrow();
        let was = self.reported;
        report.requests += now.responses - was.responses;
        report.refused_requests += now.error_statuses - was.error_statuses;
        report.bytes_sent += now.body_bytes - was.body_bytes;
        report.http3 = now;
        self.reported = now;
    }
}

/// A connection: `h3`'s server side, a task per request; at shutdown, its GOAWAY.
async fn serve(
    transport: H3Connection,
    spawner: Spawner,
    root: Option<Arc<Path>>,
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
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.started(), if unannounced.is_some() => {
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
            match respond(&request, &mut stream, root.as_deref(), &counters).await {
                Ok(true) => counters.borrow_mut().responses += 1,
                Ok(false) => {}
                Err(Failed::Stream) => counters.borrow_mut().cancelled += 1,
                Err(Failed::File) => {
                    counters.borrow_mut().cancelled += 1;
                    stream.stop_stream(Code::H3_INTERNAL_ERROR);
                }
            }
        });
    }
}

/// The media type of a file, by its name's extension.
fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    match ext.to_ascii_lowercase().as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

type Stream = RequestStream<BidiStream, Bytes>;

async fn status_only(
    stream: &mut Stream,
    status: StatusCode,
    counters: &Counters,
) -> Result<bool, Failed> {
    counters.borrow_mut().error_statuses += 1;
    let response = Response::builder()
        .status(status)
        .header("content-length", 0)
        .body(())
        .unwrap_or_default();
    stream.send_response(response).await?;
    stream.finish().await?;
    Ok(false)
}

/// Answers `request`; `Ok(true)` for a whole 200 response, `Ok(false)` for an error status.
async fn respond(
    request: &Request<()>,
    stream: &mut Stream,
    root: Option<&Path>,
    counters: &Counters,
) -> Result<bool, Failed> {
    let head = match *request.method() {
        Method::GET => false,
        Method::HEAD => true,
        _ => return status_only(stream, StatusCode::METHOD_NOT_ALLOWED, counters).await,
    };
    let path = request.uri().path().to_owned();
    let target = match hq::target(&path) {
        Ok(t) => t,
        Err(_) => return status_only(stream, StatusCode::BAD_REQUEST, counters).await,
    };
    let (mut file, len, media) = match target {
        Target::Generated(n) => (None, n, "application/octet-stream"),
        Target::File(_) => {
            let (root, opened) = (root.map(Path::to_path_buf), path.clone());
            let open = tokio::task::spawn_blocking(move || hq::open(root.as_deref(), &opened));
            match open.await {
                Ok(Ok((f, len))) => (Some(Some(f)), len, content_type(&path)),
                Ok(Err(hq::Error::Io(e))) if e.kind() == std::io::ErrorKind::NotFound => {
                    return status_only(stream, StatusCode::NOT_FOUND, counters).await;
                }
                Ok(Err(hq::Error::Io(_))) | Err(_) => {
                    return status_only(stream, StatusCode::INTERNAL_SERVER_ERROR, counters).await;
                }
                // A path that breaks the naming rules, leaves the root, or is no file: as
                // if it were not there.
                Ok(Err(_)) => return status_only(stream, StatusCode::NOT_FOUND, counters).await,
            }
        }
    };
    let response = Response::builder()
        .status(StatusCode::OK)
        .header("content-length", len)
        .header("content-type", media)
        .body(())
        .unwrap_or_default();
    stream.send_response(response).await?;
    if head {
        stream.finish().await?;
        return Ok(true);
    }
    let mut sent = 0u64;
    while sent < len {
        let chunk = match &mut file {
            None => pattern::chunk(sent, len - sent),
            Some(f) => {
                let (f, remaining) = (f.take(), len - sent);
                let read = tokio::task::spawn_blocking(move || {
                    f.map_or_else(
                        || Err(std::io::Error::other("no file left to read")),
                        |f| disk::read_chunk(f, remaining),
                    )
                });
                match read.await {
                    Ok(Ok(c)) => {
                        file = Some(c.file);
                        c.data
                    }
                    // The body cannot be sent whole: a reset, so that no truncated body
                    // passes for complete.
                    _ => return Err(Failed::File),
                }
            }
        };
        sent += chunk.len() as u64;
        counters.borrow_mut().body_bytes += chunk.len() as u64;
        stream.send_data(chunk).await?;
    }
    stream.finish().await?;
    Ok(true)
}

/// Why a response was not sent whole.
#[derive(Debug)]
enum Failed {
    /// The stream or the connection failed (the client cancelled, the connection closed).
    Stream,
    /// The file could not be read to its end.
    File,
}

impl From<h3::error::StreamError> for Failed {
    fn from(_: h3::error::StreamError) -> Self {
        Self::Stream
    }
}
