//! The server's [`Application`]: admits new connections (the admission gate, the receive
//! budget), gives each accepted one its receive window, hands stream events to its requests
//! (`requests`), gives up handshakes that take too long, and prints stats at an interval.

use std::{
    net::SocketAddr,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use neqo_driver::{Admission, Application, Driver, tls};
use quinn_proto::{Connection, ConnectionHandle, Event, Incoming, StreamEvent, VarInt};

use super::{
    ServerConfig, ServerReport,
    admission::{ClientSource, Decision, Gate},
    apps::{App, Services, Sessions},
    budget::{NoWindow, Windows},
    configs::ConnectionConfigs,
    http3::Http3,
    initial_shed::InitialShed,
    metrics::{Board, PUBLISH_EVERY},
    requests::Requests,
    worker::Shared,
};

/// One worker's application: its share of the limits, its connections' requests, its report.
pub(super) struct ServerApp {
    /// The worker this runs on, for its log lines.
    worker: usize,
    gate: Gate,
    shed: InitialShed,
    windows: Windows,
    configs: ConnectionConfigs,
    config: ServerConfig,
    requests: Requests,
    http3: Http3,
    /// Connections your HTTP/3 services answer.
    services: Services,
    /// Connections of your raw-QUIC applications.
    sessions: Sessions,
    pub(super) report: ServerReport,
    /// Once the shutdown has begun ([`Application::shutdown`], or a cut without a drain).
    shut: bool,
    /// Once the shutdown has cut what was under way ([`Application::cut`]).
    cutting: bool,
    next_stats: Instant,
    started: Instant,
    /// With a metrics endpoint: where to publish the report, and when next.
    board: Option<(Arc<Board>, Instant)>,
}

impl ServerApp {
    /// Worker `worker`'s application on what every worker starts from; `config` is the
    /// worker's share of the limits ([`ServerConfig::worker_share`]).
    pub(super) fn new(worker: usize, shared: &Shared, config: ServerConfig, now: Instant) -> Self {
        let root = shared.root.clone();
        Self {
            worker,
            gate: Gate::new(worker, config.limits, shared.ledger.clone()),
            shed: InitialShed::new(config.keys.cid_generator(&shared.layout, worker)),
            windows: Windows::new(config.budget),
            configs: ConnectionConfigs::new(
                shared.server_config.clone(),
                config.transport.clone(),
                &config.listen,
            ),
            config,
            requests: Requests::new(
                root.clone(),
                shared.config.generate,
                shared.config.access_log.clone(),
            ),
            http3: Http3::new(
                root,
                shared.config.generate,
                shared.config.access_log.clone(),
            ),
            services: Services::new(shared.config.access_log.clone()),
            sessions: Sessions::default(),
            report: ServerReport::default(),
            shut: false,
            cutting: false,
            next_stats: now,
            started: now,
            board: shared.board.clone().map(|b| (b, now)),
        }
    }
}

impl ServerApp {
    /// `ch`'s handshake completed: it proved its address, and gets its window from the
    /// budget.
    fn confirmed(&mut self, ch: ConnectionHandle, conn: &mut Connection, now: Instant) {
        self.gate.connected(ch, now);
        let Some(window) = self.windows.confirmed(ch) else {
            return;
        };
        conn.set_receive_window(VarInt::from_u64(window).unwrap_or(VarInt::MAX));
    }

    /// `ch`'s handshake chose its ALPN (before any stream could open): a connection of one of
    /// your applications, or of the built-in HTTP/3, leaves the built-in `hq-interop` and
    /// `perf` (which every connection starts in) for it.
    fn route(&mut self, ch: ConnectionHandle, conn: &mut Connection, now: Instant) {
        let Some(alpn) = tls::negotiated_alpn(conn) else {
            return;
        };
        let window = self.windows.window(ch);
        match self.config.apps.get(&alpn) {
            Some(App::Http3(service)) => {
                self.requests.gone(ch);
                let service = service.clone();
                self.services.start(ch, conn, (service, &alpn), window, now);
            }
            Some(App::Quic(app)) => {
                self.requests.gone(ch);
                let app = app.clone();
                self.sessions.start(ch, conn, app.as_ref(), now);
            }
            None if alpn == neqo_protocols::ALPN_H3 => {
                self.requests.gone(ch);
                self.http3.start(ch, conn, window, now);
            }
            None => {}
        }
    }
}

#[cfg(test)]
impl ServerApp {
    /// The most bytes one HTTP/3 connection (the built-in's or a service's) held for frames
    /// not yet whole at once.
    pub(super) fn h3_peak_held(&self) -> usize {
        self.http3.peak_held().max(self.services.peak_held())
    }

    /// What the HTTP/3 connections keep.
    pub(super) fn h3_kept(&self) -> super::http3::Kept {
        self.http3.kept()
    }

    /// Requests under way and tasks running on the service connections.
    pub(super) fn services_kept(&self) -> (usize, usize) {
        self.services.kept()
    }

    /// Raw-QUIC sessions held.
    pub(super) fn sessions(&self) -> usize {
        self.sessions.len()
    }
}

impl Application for ServerApp {
    fn screen_initial(&mut self, source: SocketAddr, dcid: &[u8], now: Instant) -> bool {
        self.shed.keep(source, dcid, now)
    }

    fn admit(&mut self, open: usize, incoming: &Incoming, now: Instant) -> Admission {
        let remote = incoming.remote_address();
        let source = ClientSource::of(remote);
        match self
            .gate
            .admit(source, incoming.remote_address_validated(), now)
        {
            Decision::Accept => {}
            Decision::Retry => return Admission::Retry,
            why @ (Decision::RefuseHalfOpen | Decision::RefuseFull) => {
                tracing::info!(
                    "refusing connection from {remote}: {why:?}, {open} open on worker {}",
                    self.worker
                );
                return Admission::Refuse;
            }
        }
        let window = match self.windows.reserve(source) {
            Ok(window) => window,
            Err(why) => {
                tracing::info!("refusing connection from {remote}: receive budget, {why:?}");
                match why {
                    NoWindow::Spent => self.report.refused_budget += 1,
                    NoWindow::SourceShare => self.report.refused_source_share += 1,
                }
                return Admission::Refuse;
            }
        };
        tracing::trace!("connection from {remote}: a window of {window} B");
        Admission::Accept(self.configs.for_peer(remote))
    }

    fn accepted(&mut self, ch: ConnectionHandle, conn: &mut Connection, now: Instant) {
        self.gate
            .accepted(ch, ClientSource::of(conn.remote_address()), now);
        // Its window is the small one every connection is told (0-RTT requires that the
        // next connection is told no less) until its handshake completes: `confirmed`.
        self.windows.accepted(ch);
        self.requests.accepted(ch, conn);
    }

    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant) {
        match &event {
            Event::Connected => self.confirmed(ch, conn, now),
            Event::ConnectionLost { reason } => {
                tracing::debug!("connection {ch:?} lost: {reason}");
                self.gate.gone(ch);
            }
            // The ALPN is known once the client's hello is read, before any stream (0-RTT
            // ones included) is opened.
            Event::HandshakeDataReady if self.requests.serves(ch) => {
                self.route(ch, conn, now);
                return;
            }
            _ => {}
        }
        if self.http3.serves(ch) {
            self.http3.event(ch, conn, &event, now);
            return;
        }
        if self.services.serves(ch) {
            self.services.event(ch, conn, &event, now);
            return;
        }
        if self.sessions.serves(ch) {
            self.sessions.event(ch, conn, &event, now);
            return;
        }
        if !self.requests.serves(ch) {
            return;
        }
        let report = &mut self.report;
        match event {
            Event::ConnectionLost { .. } => self.requests.gone(ch),
            Event::Stream(StreamEvent::Opened { dir }) => {
                self.requests.opened(ch, conn, dir, report);
            }
            Event::Stream(StreamEvent::Readable { id }) => self.requests.read(ch, conn, id, report),
            Event::Stream(StreamEvent::Writable { id }) => self.requests.pump(ch, conn, id, report),
            Event::Stream(StreamEvent::Finished { id }) => self.requests.finished(ch, id),
            Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                self.requests.stopped(ch, conn, id, error_code);
            }
            Event::Stream(StreamEvent::Available { .. })
            | Event::Connected
            | Event::HandshakeDataReady
            | Event::DatagramReceived
            | Event::DatagramsUnblocked => {}
        }
    }

    fn drained(&mut self, ch: ConnectionHandle, _conn: &Connection) {
        self.gate.drained(ch);
        self.windows.released(ch);
        self.requests.gone(ch);
        self.http3.gone(ch);
        self.services.gone(ch);
        self.sessions.gone(ch);
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        #[cfg(test)]
        super::worker::tests::maybe_panic(self.worker);
        while let Some(done) = self.requests.take_file_done() {
            let (requests, report) = (&mut self.requests, &mut self.report);
            driver.update(done.ch, |conn| requests.file_done(conn, done, report));
        }
        if self.gate.next_expiry(now).is_some_and(|t| t <= now) {
            for ch in self.gate.expired(now) {
                tracing::debug!("connection {ch:?}: handshake given up (timed out or evicted)");
                driver.update(ch, |conn| {
                    conn.close(
                        now,
                        0u32.into(),
                        bytes::Bytes::from_static(b"handshake given up"),
                    );
                });
            }
        }
        self.requests.poll_resets(driver);
        self.http3.poll(driver, now);
        self.http3.report(&mut self.report);
        self.services.poll(driver, now);
        self.services.report(&mut self.report);
        self.sessions.poll(driver, now);
        self.sessions.report(&mut self.report);
        self.report.admission = self.gate.counters();
        self.report.receive_budget = self.config.budget.bytes;
        self.report.receive_windows = self.windows.granted_bytes();
        let mut expiry = self.gate.next_expiry(now);
        if self.services.busy() {
            expiry = Some(now);
        }
        if let Some((board, next)) = &mut self.board {
            if now >= *next {
                let mut r = self.report.clone();
                r.fill(driver, 0);
                board.publish(self.worker, r);
                *next = now + PUBLISH_EVERY;
            }
            expiry = Some(expiry.map_or(*next, |e| e.min(*next)));
        }
        let Some(interval) = self.config.stats_interval else {
            return expiry;
        };
        if now >= self.next_stats {
            if self.started != now {
                let mut r = self.report.clone();
                r.fill(driver, 0);
                eprintln!(
                    "neqo-server stats, worker {}: open connections {}; {}",
                    self.worker,
                    driver.open_connections(),
                    r.summary()
                );
            }
            self.next_stats = now + interval;
        }
        Some(expiry.map_or(self.next_stats, |e| e.min(self.next_stats)))
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.http3.poll_wake(cx).is_ready()
            || self.services.poll_wake(cx).is_ready()
            || self.sessions.poll_wake(cx).is_ready()
        {
            return Poll::Ready(());
        }
        self.requests.poll_files(cx)
    }

    /// HTTP/3 connections (the built-in server's and your services') send GOAWAY and finish
    /// the requests they accepted; raw-QUIC sessions do what their protocol can; `hq-interop`
    /// and `perf`, which have no way to say the server is going, finish the requests under
    /// way and refuse new ones unread.
    fn shutdown(&mut self, driver: &mut Driver, now: Instant) -> bool {
        self.shut = true;
        let http3 = self.http3.shut_down(driver, now);
        let services = self.services.shut_down();
        let sessions = self.sessions.shut_down(driver, now);
        let hq = self.requests.shut_down();
        http3 || services || sessions || hq
    }

    fn settled(&self) -> bool {
        let hq = self.requests.settled();
        if self.cutting {
            // What was cut has been told, and what was sent before is acknowledged.
            return hq && self.http3.idle();
        }
        hq && self.http3.settled() && self.services.settled() && self.sessions.settled()
    }

    /// Resets the built-in's requests under way (`hq-interop`, `perf`, HTTP/3) so that
    /// their clients know them cut; your services' requests end with their connections.
    /// Each is counted ([`ServerReport::cut_at_shutdown`]) and logged.
    fn cut(&mut self, driver: &mut Driver, now: Instant) -> bool {
        // Without a drain period the requests that come while the cuts go out are refused
        // as after any shutdown (HTTP/3's GOAWAY).
        if !self.shut {
            self.shutdown(driver, now);
        }
        self.cutting = true;
        let cut = self.http3.cut(driver) + self.requests.cut(driver) + self.services.cut();
        self.http3.report(&mut self.report);
        self.report.cut_at_shutdown += cut as u64;
        if cut > 0 {
            tracing::warn!(
                "shutdown: worker {} cut {cut} requests under way",
                self.worker
            );
        }
        !self.settled()
    }

    fn close_reason(&self, ch: ConnectionHandle) -> (VarInt, &'static [u8]) {
        if let Some(reason) = self.sessions.close_reason(ch) {
            return reason;
        }
        let code = if self.http3.serves(ch) || self.services.serves(ch) {
            super::http3::NO_ERROR
        } else {
            0
        };
        (VarInt::from_u64(code).unwrap_or(VarInt::MAX), b"shutdown")
    }
}
