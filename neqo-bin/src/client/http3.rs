//! The client's HTTP/3 connections (`--alpn h3`): each an [`Engine`](crate::h3::Engine) whose tasks are the `h3`
//! crate's client connection and the requests, one after another or all at once
//! (`--parallel`). A response must be 200; a `/N` body is verified against the pattern byte
//! by byte and must be exactly N bytes; a saved body is written off the driver thread a chunk
//! at a time, the next chunk read only once the last is written, so a slow disk holds the
//! server back through flow control.

use std::{
    cell::{Cell, RefCell},
    collections::HashSet,
    fs::File,
    io::Write as _,
    rc::Rc,
    time::{Duration, Instant},
};

use bytes::{Buf as _, Bytes};
use quinn_proto::{Connection, ConnectionHandle, Event};

use super::{Save, output::Sink};
use crate::{
    driver::Driver,
    h3::{
        connections::Connections,
        handles::{H3Connection, Opener},
        tasks::Spawner,
    },
    hq::{self, Target},
    pattern,
};

/// What the requests did since the application last looked ([`Http3::take`]).
#[derive(Debug, Default)]
pub(super) struct Results {
    pub(super) requests: u64,
    pub(super) failed: u64,
    pub(super) bytes: u64,
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
    /// Request and response bytes, for its Gbit/s.
    bytes: u64,
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
        now: Instant,
    ) -> Self {
        Self {
            ctx: Rc::new(Context {
                requests,
                parallel,
                authority,
                save,
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
            bytes: 0,
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

    /// `ch` is lost: its outstanding requests fail.
    pub(super) fn lost(&mut self, ch: ConnectionHandle) -> usize {
        self.conns
            .remove(ch)
            .map_or(0, |c| c.state.borrow().outstanding)
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
    let result = request(send, ctx, state, &path).await;
    let now = ctx.now.get();
    match result {
        Ok(()) => {
            let mut r = ctx.results.borrow_mut();
            r.requests += 1;
            r.latencies.push(now.saturating_duration_since(started));
            r.last_fin = Some(now);
        }
        Err(e) => ctx.fail(format!("{path}: {e}")),
    }
    let mut s = state.borrow_mut();
    s.outstanding = s.outstanding.saturating_sub(1);
}

async fn request(
    mut send: h3::client::SendRequest<Opener, Bytes>,
    ctx: &Context,
    state: &RefCell<ConnState>,
    path: &str,
) -> Result<(), String> {
    let expected = match hq::target(path) {
        Ok(Target::Generated(n)) => Some(n),
        _ => None,
    };
    let request = http::Request::get(format!("https://{}{path}", ctx.authority))
        .body(())
        .map_err(|e| format!("bad request: {e}"))?;
    let mut stream = send
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    stream.finish().await.map_err(|e| e.to_string())?;
    let response = stream.recv_response().await.map_err(|e| e.to_string())?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("status {}", response.status()));
    }
    let mut sink = ctx.sink(path).map(Writer::new);
    let mut got = 0u64;
    while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
        let data = chunk.copy_to_bytes(chunk.remaining());
        if let Some(n) = expected {
            if got + data.len() as u64 > n {
                return Err(format!("longer than the {n} bytes asked for"));
            }
            if let Some(at) = pattern::first_mismatch(got, &data) {
                return Err(format!("byte {at} is wrong"));
            }
        }
        got += data.len() as u64;
        state.borrow_mut().bytes += data.len() as u64;
        ctx.results.borrow_mut().bytes += data.len() as u64;
        if let Some(w) = &mut sink {
            w.write(data).await?;
        }
    }
    if let Some(n) = expected
        && got != n
    {
        return Err(format!("{got} of {n} bytes"));
    }
    if let Some(w) = sink {
        w.close().await?;
    }
    Ok(())
}

/// A saved body, written on tokio's blocking pool one chunk at a time.
struct Writer {
    sink: Sink,
    file: Option<File>,
}

impl Writer {
    const fn new(sink: Sink) -> Self {
        Self { sink, file: None }
    }

    async fn write(&mut self, data: Bytes) -> Result<(), String> {
        let (sink, file) = (self.sink.clone(), self.file.take());
        let written = tokio::task::spawn_blocking(move || {
            let mut f = match file {
                Some(f) => f,
                None => sink.open()?,
            };
            f.write_all(&data)?;
            Ok::<_, std::io::Error>(f)
        })
        .await;
        match written {
            Ok(Ok(f)) => {
                self.file = Some(f);
                Ok(())
            }
            Ok(Err(e)) => Err(format!("writing {}: {e}", self.sink)),
            Err(e) => Err(format!("writing {}: {e}", self.sink)),
        }
    }

    /// An empty body still makes its (empty) file.
    async fn close(self) -> Result<(), String> {
        if self.file.is_none() {
            let sink = self.sink.clone();
            tokio::task::spawn_blocking(move || sink.open().map(drop))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("writing {}: {e}", self.sink))?;
        }
        Ok(())
    }
}
