//! The client's HTTP/3 connections (`--alpn h3`): each an [`Engine`](neqo_h3::Engine) whose tasks are the `h3`
//! crate's client connection and the requests, one after another or all at once
//! (`--parallel`). A response must be 200; a `/N` body is verified against the pattern byte
//! by byte and must be exactly N bytes; a saved body is written off the driver thread a
//! buffer at a time while the next fills, as `hq-interop`'s are, so a slow disk holds the
//! server back through flow control. With `--upload` each request is a `POST` whose answer
//! must be the count of its bytes; `--cancel-after` gives up on long responses; requests the
//! server refuses after its GOAWAY are counted apart.

use std::{
    cell::{Cell, RefCell},
    collections::HashSet,
    rc::Rc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use neqo_driver::Driver;
use neqo_protocols::hq;
use quinn_proto::{Connection, ConnectionHandle, Event};

use super::{Save, output::Sink};
use neqo_h3::{Connections, H3Connection, Opener, Spawner};

mod request;

use request::{Done, Failure, request};

/// What the requests did since the application last looked ([`Http3::take`]).
#[derive(Debug, Default)]
pub(super) struct Results {
    pub(super) requests: u64,
    pub(super) failed: u64,
    pub(super) bytes: u64,
    /// Request body bytes sent (`POST`s).
    pub(super) sent: u64,
    /// Refused unprocessed after the server's GOAWAY.
    pub(super) rejected: u64,
    /// Given up on by `--cancel-after`.
    pub(super) cancelled: u64,
    pub(super) latencies: Vec<Duration>,
    pub(super) errors: Vec<String>,
    pub(super) last_fin: Option<Instant>,
}

/// What every connection's tasks share.
struct Context {
    requests: Vec<String>,
    parallel: bool,
    authority: String,
    save: Save,
    /// Each request a `POST` of this many pattern bytes, when not 0.
    upload: u64,
    /// Give up on a response once this many of its body bytes have arrived.
    cancel_after: Option<u64>,
    /// Where some request saves its body: one request each.
    saved: RefCell<HashSet<Sink>>,
    /// The driver's clock at the current callback.
    now: Cell<Instant>,
    results: RefCell<Results>,
}

impl Context {
    fn fail(&self, msg: String) {
        let mut r = self.results.borrow_mut();
        r.failed += 1;
        r.errors.push(msg);
    }

    /// Where `path`'s body goes: the first request of each name (as for `hq-interop`).
    fn sink(&self, path: &str) -> Option<Sink> {
        let sink = match &self.save {
            Save::Dir(dir) => Sink::File(dir.join(hq::output_name(path))),
            Save::File(file) => Sink::File(file.clone()),
            Save::Stdout => Sink::Stdout,
            _ => return None,
        };
        self.saved.borrow_mut().insert(sink.clone()).then_some(sink)
    }
}

/// One connection's request state, shared with its tasks.
#[derive(Debug, Default)]
struct ConnState {
    /// Requests not yet answered or failed.
    outstanding: usize,
    /// Of those, the ones sent (their stream opened) and not yet answered.
    in_flight: usize,
    /// Request and response bytes, for its Gbit/s.
    bytes: u64,
    /// A request was refused unprocessed: the server is going away, so no more are sent
    /// (RFC 9114 section 5.2) and the rest count as refused.
    going_away: bool,
}

/// What the client keeps beside a connection's engine.
#[derive(Debug)]
struct Conn {
    opened: Instant,
    state: Rc<RefCell<ConnState>>,
    key_update: super::keys::KeyUpdate,
}

/// The client's HTTP/3 connections.
pub(super) struct Http3 {
    ctx: Rc<Context>,
    conns: Connections<Conn>,
}

impl std::fmt::Debug for Http3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Http3({} connections)", self.conns.len())
    }
}

impl Http3 {
    /// Connections that each make `requests` (paths) of `authority`, saving as `save` says.
    pub(super) fn new(
        requests: Vec<String>,
        parallel: bool,
        authority: String,
        save: Save,
        upload: u64,
        cancel_after: Option<u64>,
        now: Instant,
    ) -> Self {
        Self {
            ctx: Rc::new(Context {
                requests,
                parallel,
                authority,
                save,
                upload,
                cancel_after,
                saved: RefCell::default(),
                now: Cell::new(now),
                results: RefCell::default(),
            }),
            conns: Connections::default(),
        }
    }

    /// Connections open.
    pub(super) fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether `ch` is one of its connections.
    pub(super) fn serves(&self, ch: ConnectionHandle) -> bool {
        self.conns.contains(ch)
    }

    /// Requests still to answer on the open connections.
    pub(super) fn outstanding(&self) -> usize {
        self.conns
            .iter()
            .map(|(_, _, c)| c.state.borrow().outstanding)
            .sum()
    }

    /// `ch` was opened `now`: its requests start (in 0-RTT when its ticket allows).
    pub(super) fn connected(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        key_update: bool,
        now: Instant,
    ) {
        let mut engine = self.conns.engine(ch);
        let state = Rc::new(RefCell::new(ConnState {
            outstanding: self.ctx.requests.len(),
            in_flight: 0,
            bytes: 0,
            going_away: false,
        }));
        let spawner = engine.spawner();
        spawner.spawn(connection(
            engine.transport(),
            spawner.clone(),
            Rc::clone(&self.ctx),
            Rc::clone(&state),
        ));
        self.ctx.now.set(now);
        engine.drive(conn, now);
        self.conns.insert(
            ch,
            engine,
            Conn {
                opened: now,
                state,
                key_update: super::keys::KeyUpdate::new(key_update),
            },
        );
    }

    /// An event of `ch`; returns its handshake time when the event is its completion.
    pub(super) fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) -> Option<Duration> {
        let (_, c) = self.conns.get_mut(ch)?;
        if matches!(
            event,
            Event::Stream(quinn_proto::StreamEvent::Readable { .. })
        ) {
            c.key_update.poll(conn);
        }
        self.ctx.now.set(now);
        let c = self.conns.on_event(ch, conn, event, now)?;
        matches!(event, Event::Connected).then(|| now.saturating_duration_since(c.opened))
    }

    /// `ch` is lost: its requests not yet answered, and of those the ones sent.
    pub(super) fn lost(&mut self, ch: ConnectionHandle) -> (usize, usize) {
        self.conns.remove(ch).map_or((0, 0), |c| {
            let s = c.state.borrow();
            (s.outstanding, s.in_flight)
        })
    }

    /// Drives the woken connections; closes the ones whose requests are all done, each into
    /// `finished` (its Gbit/s, if it took any time, and its lost packets). Returns whether
    /// one has work left.
    pub(super) fn poll(
        &mut self,
        driver: &mut Driver,
        now: Instant,
        finished: &mut Vec<(Option<f64>, u64)>,
    ) -> bool {
        self.ctx.now.set(now);
        let done: Vec<ConnectionHandle> = self
            .conns
            .iter()
            .filter(|(_, _, c)| c.state.borrow().outstanding == 0)
            .map(|(ch, _, _)| ch)
            .collect();
        for ch in self.conns.due(done) {
            let Some((_, c)) = self.conns.drive(driver, ch, now) else {
                continue;
            };
            if c.state.borrow().outstanding > 0 {
                continue;
            }
            let seconds = now.saturating_duration_since(c.opened).as_secs_f64();
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            let gbps = (seconds > 0.0).then(|| c.state.borrow().bytes as f64 * 8.0 / seconds / 1e9);
            let lost = driver
                .update(ch, |conn| {
                    conn.close(now, 0x100u32.into(), Bytes::from_static(b"done"));
                    conn.stats().path.lost_packets
                })
                .unwrap_or(0);
            finished.push((gbps, lost));
            self.conns.remove(ch);
        }
        self.conns.busy()
    }

    /// For the driver's wait: a task was woken off the thread (a write finished).
    pub(super) fn poll_wake(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        self.conns.poll_wake(cx)
    }

    /// What the requests did since the last call.
    pub(super) fn take(&self) -> Results {
        std::mem::take(&mut *self.ctx.results.borrow_mut())
    }
}

/// Whether the server closed the connection with `H3_NO_ERROR`, as after its GOAWAY once
/// it has answered what it took.
pub(super) fn closed_gracefully(reason: &quinn_proto::ConnectionError) -> bool {
    matches!(reason, quinn_proto::ConnectionError::ApplicationClosed(c)
        if c.error_code.into_inner() == h3::error::Code::H3_NO_ERROR.value())
}

/// A connection: `h3`'s client side, then its requests.
async fn connection(
    transport: H3Connection,
    spawner: Spawner,
    ctx: Rc<Context>,
    state: Rc<RefCell<ConnState>>,
) {
    let (mut h3conn, send) = match h3::client::new(transport).await {
        Ok(c) => c,
        Err(e) => {
            let n = std::mem::take(&mut state.borrow_mut().outstanding);
            for _ in 0..n {
                ctx.fail(format!("HTTP/3 connection: {e}"));
            }
            return;
        }
    };
    // The connection's own work (its control stream, the peer's GOAWAY) goes on beside the
    // requests, until it closes.
    spawner.spawn(async move {
        let _ = std::future::poll_fn(|cx| h3conn.poll_close(cx)).await;
    });
    let paths = ctx.requests.clone();
    if ctx.parallel {
        for path in paths {
            let (send, ctx, state) = (send.clone(), Rc::clone(&ctx), Rc::clone(&state));
            spawner.spawn(async move { one(send, &ctx, &state, path).await });
        }
    } else {
        for path in paths {
            if state.borrow().going_away {
                // Not sent: refused as surely as if the server had said so.
                ctx.results.borrow_mut().rejected += 1;
                let mut s = state.borrow_mut();
                s.outstanding = s.outstanding.saturating_sub(1);
                continue;
            }
            one(send.clone(), &ctx, &state, path).await;
        }
    }
}

/// One request, counted.
async fn one(
    send: h3::client::SendRequest<Opener, Bytes>,
    ctx: &Context,
    state: &RefCell<ConnState>,
    path: String,
) {
    let started = ctx.now.get();
    let sent = Cell::new(false);
    let result = request(send, ctx, state, &path, &sent).await;
    if sent.get() {
        state.borrow_mut().in_flight -= 1;
    }
    let now = ctx.now.get();
    match result {
        Ok(Done::Whole) => {
            let mut r = ctx.results.borrow_mut();
            r.requests += 1;
            r.latencies.push(now.saturating_duration_since(started));
            r.last_fin = Some(now);
        }
        Ok(Done::Cancelled) => ctx.results.borrow_mut().cancelled += 1,
        Err(Failure::Rejected) => {
            ctx.results.borrow_mut().rejected += 1;
            state.borrow_mut().going_away = true;
        }
        Err(Failure::Other(e)) => ctx.fail(format!("{path}: {e}")),
    }
    let mut s = state.borrow_mut();
    s.outstanding = s.outstanding.saturating_sub(1);
}
