//! The client's [`Application`]: opens `connections` connections, at most `concurrency` at a
//! time (and, with a `rate`, no faster than that), makes every request on each, verifies
//! `/N` and perf bodies, saves `--output-dir` bodies off the driver thread, and records
//! handshake times, request latencies and each connection's throughput.

use std::{
    collections::{HashSet, VecDeque},
    net::SocketAddr,
    ops::ControlFlow,
    path::PathBuf,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, StreamEvent, StreamId};

use super::{
    ClientConfig, ClientReport,
    keys::KeyUpdate,
    load::{self, Latencies},
    output::{Output, WriteDone},
    progress::Progress,
    report,
};
use crate::{
    body::{self, Pumped, ReadEnd, Source},
    disk::Jobs,
    driver::{Application, Driver},
    hq::{self, Target},
    idmap::IdMap,
    pattern, perf, tls,
    tls_counters::CountingClient,
};

#[derive(Debug)]
struct Request {
    /// Tells this request from an earlier one with the same connection handle and stream
    /// id, so that a late write result is not taken for it.
    token: u64,
    path: String,
    /// When its stream was opened: its latency runs from here to the last byte verified and
    /// written.
    opened: Instant,
    /// Body length to verify against, when verifying.
    expected: Option<u64>,
    received: u64,
    pattern_ok: bool,
    /// The response's FIN was read.
    fin: bool,
    output: Option<Output>,
    source: Option<Source>,
}

impl Request {
    /// Starts the next write of its output if one is due; returns whether it did.
    fn start_write(
        &mut self,
        writes: &Jobs<WriteDone>,
        ch: ConnectionHandle,
        id: StreamId,
    ) -> bool {
        let token = self.token;
        self.output
            .as_mut()
            .is_some_and(|o| o.start_write(writes, ch, id, token))
    }
}

/// What all connections share: what to ask, where to save, what was seen.
struct Shared {
    perf: bool,
    requests: Vec<String>,
    config: ClientConfig,
    report: ClientReport,
    handshakes: Latencies,
    latencies: Latencies,
    /// Each finished connection's Gbit/s, from its connect to its last response.
    connection_gbps: Vec<f64>,
    last_fin: Option<Instant>,
    writes: Jobs<WriteDone>,
    /// Output files some request saves to: one request each.
    saved: HashSet<PathBuf>,
    next_token: u64,
}

impl Shared {
    fn fail(&mut self, msg: String) {
        self.report.errors.push(msg);
    }
}

/// One open connection's requests.
struct Open {
    /// When it was opened.
    opened: Instant,
    /// Requests not yet made (indices into [`Shared::requests`]).
    queue: VecDeque<usize>,
    streams: IdMap<StreamId, Request>,
    /// Request and response bytes moved on it.
    bytes: u64,
    /// All its requests are done and it is closed.
    closed: bool,
    key_update: KeyUpdate,
}

impl Open {
    fn outstanding(&self) -> usize {
        self.queue.len() + self.streams.len()
    }

    /// The server refused our 0-RTT: quinn-proto dropped the streams opened in it, so their
    /// requests (none can have completed, no response comes before the handshake) are made
    /// again.
    fn zero_rtt_rejected(&mut self, s: &mut Shared) {
        for (_, req) in self.streams.drain() {
            if let Some(out) = &req.output {
                s.saved.remove(out.path());
            }
        }
        self.queue = (0..s.requests.len()).collect();
    }

    fn open_streams(&mut self, s: &mut Shared, conn: &mut Connection, now: Instant) {
        let limit = if s.config.parallel { usize::MAX } else { 1 };
        while self.streams.len() < limit
            && let Some(&r) = self.queue.front()
        {
            let Some(id) = conn.streams().open(Dir::Bi) else {
                if self.streams.is_empty() {
                    // Out of stream credit with every request answered: the server frees its
                    // streams (and grants new ones) when our ACK of the responses arrives,
                    // which quinn-proto may hold back for max_ack_delay (25 ms) per window of
                    // requests. A PING sends that ACK now.
                    conn.ping();
                }
                break;
            };
            self.queue.pop_front();
            let path = s.requests[r].clone();
            let (source, expected) = if s.perf {
                let header = perf::request_header(s.config.download);
                (
                    Source::pattern(Some(Bytes::copy_from_slice(&header)), s.config.upload),
                    Some(s.config.download),
                )
            } else {
                let expected = match hq::target(&path) {
                    Ok(Target::Generated(n)) => Some(n),
                    _ => None,
                };
                (
                    Source::pattern(Some(Bytes::from(hq::request(&path))), 0),
                    expected,
                )
            };
            let output = match &s.config.output_dir {
                Some(dir) if !s.perf => {
                    let target = dir.join(hq::output_name(&path));
                    s.saved.insert(target.clone()).then(|| Output::new(target))
                }
                _ => None,
            };
            s.next_token += 1;
            self.streams.insert(
                id,
                Request {
                    token: s.next_token,
                    path,
                    opened: now,
                    expected,
                    received: 0,
                    pattern_ok: true,
                    fin: false,
                    output,
                    source: Some(source),
                },
            );
            self.pump(s, conn, id);
        }
    }

    fn pump(&mut self, s: &mut Shared, conn: &mut Connection, id: StreamId) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        let Some(src) = req.source.as_mut() else {
            return;
        };
        let before = src.written;
        let result = src.pump(&mut conn.send_stream(id));
        let sent = src.written - before;
        s.report.bytes_sent += sent;
        self.bytes += sent;
        match result {
            Ok(Pumped::Blocked | Pumped::Starved) => {}
            // Closed: the server stopped the request; its reset says why when we read.
            Ok(Pumped::Finished) | Err(_) => req.source = None,
        }
    }

    /// Reads the response (no more than its output can take), starts due writes, and
    /// completes the request when all is read, verified and written.
    fn read(
        &mut self,
        s: &mut Shared,
        ch: ConnectionHandle,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
    ) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        while !req.fin {
            let max = req.output.as_ref().map_or(usize::MAX, Output::room);
            let mut read = 0;
            let end = body::read_stream_up_to(conn, id, max, |chunk| {
                let len = chunk.bytes.len() as u64;
                if req.expected.is_some()
                    && (chunk.offset != req.received
                        || !pattern::verify(chunk.offset, &chunk.bytes))
                {
                    req.pattern_ok = false;
                }
                if let Some(out) = &mut req.output {
                    out.push(&chunk.bytes);
                }
                req.received += len;
                read += len;
                ControlFlow::Continue(())
            });
            s.report.bytes_received += read;
            self.bytes += read;
            match end {
                ReadEnd::Reset(code) => {
                    // Nothing more of the request is wanted either (a perf upload may still
                    // be going).
                    let _ = conn.send_stream(id).reset(code);
                    let name = hq::code_name(code.into_inner())
                        .map_or_else(String::new, |n| format!(", {n}"));
                    let msg = format!(
                        "{}: the server reset the stream (error code {code}{name})",
                        req.path
                    );
                    self.finish_request(s, conn, id, now, Some(msg));
                    return;
                }
                ReadEnd::Fin => {
                    req.fin = true;
                    if let Some(out) = &mut req.output {
                        out.end();
                    }
                }
                ReadEnd::Blocked => break,
                // The output is full: write it and read on, unless a write is in flight.
                ReadEnd::Stopped => {
                    if !req.start_write(&s.writes, ch, id) {
                        break;
                    }
                }
            }
        }
        req.start_write(&s.writes, ch, id);
        if req.fin && req.output.as_ref().is_none_or(Output::done) {
            let error = req
                .expected
                .and_then(|n| report::body_error(&req.path, n, req.received, req.pattern_ok));
            self.finish_request(s, conn, id, now, error);
        }
    }

    /// A write job finished: go on reading, or fail the request.
    fn write_done(&mut self, s: &mut Shared, conn: &mut Connection, done: WriteDone, now: Instant) {
        let Some(req) = self
            .streams
            .get_mut(&done.id)
            .filter(|r| r.token == done.token)
        else {
            return;
        };
        let Some(out) = &mut req.output else {
            return;
        };
        match done.result {
            Ok(file) => {
                out.written(file);
                self.read(s, done.connection, conn, done.id, now);
            }
            Err(e) => {
                let msg = format!(
                    "{}: cannot save the body to {}: {e}",
                    req.path,
                    out.path().display()
                );
                // Given up: the server need not send the rest, nor we.
                body::cancel(conn, done.id, 0u32.into());
                self.finish_request(s, conn, done.id, now, Some(msg));
            }
        }
    }

    /// A request is over: counted, its latency recorded if it succeeded; the next one opened,
    /// or the connection closed when none is left.
    fn finish_request(
        &mut self,
        s: &mut Shared,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
        error: Option<String>,
    ) {
        let Some(req) = self.streams.remove(&id) else {
            return;
        };
        s.last_fin = Some(now);
        if let Some(e) = error {
            s.report.failed_requests += 1;
            s.fail(e);
        } else {
            s.report.requests += 1;
            s.latencies
                .record(now.saturating_duration_since(req.opened));
        }
        self.open_streams(s, conn, now);
        if self.outstanding() == 0 {
            s.report.connections += 1;
            s.report.lost_packets += conn.stats().path.lost_packets;
            let seconds = now.saturating_duration_since(self.opened).as_secs_f64();
            if seconds > 0.0 {
                #[expect(clippy::cast_precision_loss, reason = "a rate")]
                s.connection_gbps
                    .push(self.bytes as f64 * 8.0 / seconds / 1e9);
            }
            conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
            self.closed = true;
        }
    }
}

pub(super) struct ClientApp {
    remote: SocketAddr,
    server_name: String,
    crypto: Arc<quinn_proto::crypto::rustls::QuicClientConfig>,
    /// Local sockets (driver paths) the connections are spread over.
    sockets: usize,
    shared: Shared,
    open: IdMap<ConnectionHandle, Open>,
    /// Connections opened so far.
    started: usize,
    first_connect: Option<Instant>,
    /// A connection failed: no more are opened.
    failed: bool,
    progress: Option<Progress>,
}

impl ClientApp {
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site, each argument named"
    )]
    pub(super) fn new(
        remote: SocketAddr,
        server_name: String,
        crypto: Arc<quinn_proto::crypto::rustls::QuicClientConfig>,
        sockets: usize,
        perf: bool,
        requests: Vec<String>,
        config: ClientConfig,
        progress: Option<Progress>,
    ) -> Self {
        Self {
            remote,
            server_name,
            crypto,
            sockets: sockets.max(1),
            shared: Shared {
                perf,
                requests,
                config,
                report: ClientReport::default(),
                handshakes: Latencies::default(),
                latencies: Latencies::default(),
                connection_gbps: Vec::new(),
                last_fin: None,
                writes: Jobs::default(),
                saved: HashSet::new(),
                next_token: 0,
            },
            open: IdMap::default(),
            started: 0,
            first_connect: None,
            failed: false,
            progress,
        }
    }

    /// The report, once the driver has returned.
    pub(super) fn finish(mut self, driver: &mut Driver, io: String) -> ClientReport {
        let s = &mut self.shared;
        for &ch in self.open.keys() {
            if let Some(conn) = driver.connection(ch) {
                s.report.lost_packets += conn.stats().path.lost_packets;
            }
        }
        if let Some(p) = &self.progress {
            p.finish();
        }
        let mut report = std::mem::take(&mut s.report);
        report.concurrency = s.config.concurrency;
        report.handshake_ms = s.handshakes.percentiles();
        report.request_ms = s.latencies.percentiles();
        report.connection_gbps = load::spread(&s.connection_gbps);
        report.fill(driver, io, self.first_connect, s.last_fin);
        report
    }

    /// The driver was shut down (Ctrl-C) and has closed the connections: what was still to
    /// do failed.
    pub(super) fn interrupted(&mut self) {
        let outstanding: usize = self.open.values().map(Open::outstanding).sum();
        let not_started = self.unopened();
        let s = &mut self.shared;
        s.report.failed_requests += (outstanding + not_started) as u64;
        s.fail(format!(
            "interrupted: {} requests cancelled, the connections closed",
            outstanding + not_started
        ));
        self.failed = true;
        self.open.clear();
    }

    /// Requests of the connections not yet opened.
    fn unopened(&self) -> usize {
        (self.shared.config.connections - self.started) * self.shared.requests.len()
    }

    /// Opens connections while fewer than `concurrency` are open and, with a rate, their
    /// time has come; returns when the next one is due.
    fn connect(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        let (connections, concurrency, rate) = {
            let c = &self.shared.config;
            (c.connections, c.concurrency, c.rate)
        };
        while !self.failed && self.started < connections {
            if self.open.len() >= concurrency {
                return None;
            }
            if let (Some(rate), Some(first)) = (rate, self.first_connect) {
                #[expect(clippy::cast_precision_loss, reason = "a schedule")]
                let due = first + Duration::from_secs_f64(self.started as f64 / rate);
                if due > now {
                    return Some(due);
                }
            }
            self.connect_one(driver, now);
        }
        None
    }

    fn connect_one(&mut self, driver: &mut Driver, now: Instant) {
        let path = self.started % self.sockets;
        self.started += 1;
        let s = &mut self.shared;
        // Counted: Retries, 0-RTT and key updates go into the report's `tls`.
        let mut cc = quinn_proto::ClientConfig::new(CountingClient::wrap(self.crypto.clone()));
        let label = tls::qlog_label("client");
        match s.config.transport.transport(&label) {
            Ok(t) => {
                cc.transport_config(Arc::new(t));
            }
            Err(e) => {
                s.fail(format!("{e:#}"));
                self.failed = true;
                return;
            }
        }
        match driver.connect(path, cc, self.remote, &self.server_name) {
            Ok(ch) => {
                self.first_connect.get_or_insert(now);
                s.report.peak_concurrency = s.report.peak_concurrency.max(self.open.len() + 1);
                let mut open = Open {
                    opened: now,
                    queue: (0..s.requests.len()).collect(),
                    streams: IdMap::default(),
                    bytes: 0,
                    closed: false,
                    key_update: KeyUpdate::new(s.config.key_update),
                };
                // A session ticket that allows 0-RTT: the requests go out in it, before the
                // handshake completes (and again after it, should the server refuse them).
                driver.update(ch, |conn| {
                    if conn.has_0rtt() {
                        open.open_streams(s, conn, now);
                    }
                });
                self.open.insert(ch, open);
            }
            Err(e) => {
                s.fail(format!("cannot connect to {}: {e}", self.remote));
                self.failed = true;
            }
        }
    }

    /// Drops a connection whose requests are all done.
    fn forget_if_closed(&mut self, ch: ConnectionHandle) {
        if self.open.get(&ch).is_some_and(|o| o.closed) {
            self.open.remove(&ch);
        }
    }
}

impl Application for ClientApp {
    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant) {
        let Some(open) = self.open.get_mut(&ch) else {
            return;
        };
        let s = &mut self.shared;
        match event {
            Event::Connected => {
                s.handshakes
                    .record(now.saturating_duration_since(open.opened));
                if conn.has_0rtt() && !conn.accepted_0rtt() {
                    open.zero_rtt_rejected(s);
                }
                open.open_streams(s, conn, now);
            }
            Event::Stream(StreamEvent::Available { dir: Dir::Bi }) => {
                open.open_streams(s, conn, now);
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                open.key_update.poll(conn);
                open.read(s, ch, conn, id, now);
            }
            Event::Stream(StreamEvent::Writable { id }) => open.pump(s, conn, id),
            Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                // RFC 9000 section 3.5: answered with RESET_STREAM if the request is still
                // being sent; the server's reset of the response says why, when we read it.
                let _ = conn.send_stream(id).reset(error_code);
                if let Some(req) = open.streams.get_mut(&id) {
                    req.source = None;
                }
            }
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = conn.streams().accept(dir) {
                    let _ = conn.recv_stream(id).stop(0u32.into());
                }
            }
            Event::ConnectionLost { reason } => {
                let msg = report::connection_error(
                    self.remote,
                    &s.config.alpn,
                    s.config.transport.idle_timeout,
                    &reason,
                );
                s.report.lost_packets += conn.stats().path.lost_packets;
                s.report.failed_requests += open.outstanding() as u64;
                s.fail(msg);
                self.failed = true;
                self.open.remove(&ch);
                return;
            }
            Event::Stream(_)
            | Event::HandshakeDataReady
            | Event::DatagramReceived
            | Event::DatagramsUnblocked => {}
        }
        self.forget_if_closed(ch);
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        while let Some(done) = self.shared.writes.take() {
            let ch = done.connection;
            if let Some(open) = self.open.get_mut(&ch) {
                let s = &mut self.shared;
                driver.update(ch, |conn| open.write_done(s, conn, done, now));
                self.forget_if_closed(ch);
            }
        }
        let next_connect = self.connect(driver, now);
        let bytes = self.shared.report.bytes_received;
        let next_progress = self
            .progress
            .as_mut()
            .map(|p| p.update(bytes, self.first_connect, now));
        match (next_connect, next_progress) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.shared.writes.poll_ready(cx)
    }

    fn done(&self) -> bool {
        self.open.is_empty() && (self.failed || self.started >= self.shared.config.connections)
    }
}
