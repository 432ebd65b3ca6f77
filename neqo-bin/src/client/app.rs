//! The client's [`Application`]: opens `connections` connections, at most `concurrency` at a
//! time (and, with a `rate`, no faster than that), hands each connection's events to its
//! requests (`requests`), and at the end adds up handshake times, request latencies and each
//! connection's throughput into the report.

use std::{
    net::SocketAddr,
    sync::Arc,
    task::{Context, Poll},
    time::{Duration, Instant},
};

use neqo_driver::{Application, Driver, IdMap, tls::counters::CountingClient};
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, StreamEvent};

use super::{
    ClientConfig, ClientReport, load,
    progress::Progress,
    report,
    requests::{Open, Shared},
};

pub(super) struct ClientApp {
    remote: SocketAddr,
    server_name: String,
    crypto: Arc<quinn_proto::crypto::rustls::QuicClientConfig>,
    /// Local sockets (driver paths) the connections are spread over.
    sockets: usize,
    shared: Shared,
    open: IdMap<ConnectionHandle, Open>,
    /// Connections that ended while responses, all arrived, were still being saved: kept
    /// apart (a new connection may get the same handle) until their writes are done.
    saving: Vec<Open>,
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
        authority: Option<String>,
        requests: Vec<String>,
        config: ClientConfig,
        progress: Option<Progress>,
    ) -> Self {
        Self {
            remote,
            server_name,
            crypto,
            sockets: sockets.max(1),
            shared: Shared::new(perf, authority, requests, config),
            open: IdMap::default(),
            saving: Vec::new(),
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
        if report.rejected_requests > 0 {
            // Not failed, but not done either: the run says so once.
            report.errors.push(format!(
                "{} requests rejected by the server's GOAWAY (not processed: safe to retry)",
                report.rejected_requests
            ));
        }
        report.alpn.clone_from(&s.config.alpn);
        report.concurrency = s.config.concurrency;
        report.handshake_ms = s.handshakes.percentiles();
        report.request_ms = s.latencies.percentiles();
        report.connection_gbps = load::spread(&s.connection_gbps);
        report::fill(&mut report, driver, io, self.first_connect, s.last_fin);
        report
    }

    /// The driver was shut down (Ctrl-C) and has closed the connections: what was still to
    /// do failed.
    pub(super) fn interrupted(&mut self) {
        let outstanding: usize = self
            .open
            .values()
            .chain(&self.saving)
            .map(Open::outstanding)
            .sum::<usize>();
        let not_started = self.unopened();
        let s = &mut self.shared;
        s.report.failed_requests += (outstanding + not_started) as u64;
        s.fail(format!(
            "interrupted: {} requests cancelled, the connections closed",
            outstanding + not_started
        ));
        self.failed = true;
        self.open.clear();
        self.saving.clear();
    }

    /// Connections open, of either kind.
    fn open_count(&self) -> usize {
        self.open.len() + self.saving.len()
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
            if self.open_count() >= concurrency {
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
        let label = neqo_driver::qlog_label("client");
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
        match driver.connect(path, cc, self.remote, &self.server_name, now) {
            Ok(ch) => {
                self.first_connect.get_or_insert(now);
                let open_now = self.open.len();
                s.report.peak_concurrency = s.report.peak_concurrency.max(open_now + 1);
                let mut open = Open::new(s, now);
                driver.update(ch, |conn| open.started(s, conn, now));
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
        if self.open.get(&ch).is_some_and(Open::gone) {
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
                    open.zero_rtt_rejected(s, conn, now);
                }
                if open.is_h3() {
                    open.h3_event(s, ch, conn, &event, now);
                } else {
                    open.open_streams(s, conn, now);
                }
            }
            Event::Stream(_) if open.is_h3() => open.h3_event(s, ch, conn, &event, now),
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
                open.stopped(id);
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
                let (failed, saving) = open.lost(s, closed_gracefully(&reason));
                if failed > 0 {
                    s.report.failed_requests += failed as u64;
                    s.fail(msg);
                    self.failed = true;
                }
                if let Some(open) = self.open.remove(&ch)
                    && saving
                {
                    self.saving.push(open);
                }
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
            let s = &mut self.shared;
            if let Some(open) = self.saving.iter_mut().find(|o| o.owns(&done)) {
                // Its connection is gone: the response had all arrived.
                open.write_done_lost(s, done, now);
                self.saving.retain(|o| !o.gone());
            } else if let Some(open) = self.open.get_mut(&ch) {
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
        self.open_count() == 0 && (self.failed || self.started >= self.shared.config.connections)
    }
}

/// Whether the server closed the connection with `H3_NO_ERROR`, as after its GOAWAY once
/// it has answered what it took.
fn closed_gracefully(reason: &quinn_proto::ConnectionError) -> bool {
    matches!(reason, quinn_proto::ConnectionError::ApplicationClosed(c)
        if c.error_code.into_inner() == neqo_h3::frame::code::NO_ERROR)
}
