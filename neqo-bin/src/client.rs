//! The `hq-interop` and `perf` client.

use std::{
    collections::VecDeque,
    io::{IsTerminal as _, Write as _},
    net::{SocketAddr, ToSocketAddrs as _},
    ops::ControlFlow,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use quinn_proto::{
    ConnectionError, ConnectionHandle, Dir, Event, StreamEvent, StreamId, TransportErrorCode,
};
use url::Url;

use crate::{
    body::{self, PumpError, ReadEnd, Source},
    driver::{Application, Driver},
    idmap::IdMap,
    pattern,
    tls::{self, ALPN_HQ, ALPN_PERF, TransportOptions, Trust},
};

/// What a client does.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `https://HOST:PORT/PATH`; all must name the same server.
    pub urls: Vec<Url>,
    /// Requests per URL and connection.
    pub requests: usize,
    /// All requests at once (up to the peer's stream limit) instead of one after another.
    pub parallel: bool,
    /// Sequential connections, each doing every request.
    pub connections: usize,
    /// `hq-interop` or `perf`.
    pub alpn: String,
    /// perf: bytes to ask the server for, per request.
    pub download: u64,
    /// perf: bytes to send the server, per request.
    pub upload: u64,
    /// Save bodies here instead of verifying and discarding them.
    pub output_dir: Option<PathBuf>,
    /// Whom to trust.
    pub trust: Trust,
    /// Idle timeout, congestion control, qlog.
    pub transport: TransportOptions,
    /// Socket configuration.
    pub socket: neqo_udp::Config,
    /// The driver paces.
    pub pacing: bool,
    /// What the driver's pacer waits on.
    pub pacing_timer: crate::pacer::PacingTimer,
    /// Show a progress bar on a terminal (for transfers longer than a second).
    pub progress: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            requests: 1,
            parallel: false,
            connections: 1,
            alpn: ALPN_HQ.to_owned(),
            download: 0,
            upload: 0,
            output_dir: None,
            trust: Trust::Nobody,
            transport: TransportOptions::default(),
            socket: neqo_udp::Config::default(),
            pacing: true,
            pacing_timer: crate::pacer::PacingTimer::default(),
            progress: false,
        }
    }
}

impl ClientConfig {
    /// A config for `url` trusting `certs` (e.g. an in-process server's).
    #[must_use]
    pub fn new(url: Url, trust: Trust) -> Self {
        Self {
            urls: vec![url],
            trust,
            ..Self::default()
        }
    }
}

/// What a client did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClientReport {
    /// Response body bytes received.
    pub bytes_received: u64,
    /// Request bytes sent (request lines, perf headers and uploads).
    pub bytes_sent: u64,
    /// Requests completed and verified.
    pub requests: u64,
    /// Requests that failed.
    pub failed_requests: u64,
    /// Connections completed.
    pub connections: u64,
    /// From the first connect to the last FIN.
    pub seconds: f64,
    /// (received + sent) bits per second / 1e9 over `seconds`.
    pub gbps: f64,
    /// Datagrams per receive syscall.
    pub rx_datagrams_per_syscall: f64,
    /// Datagrams per send syscall.
    pub tx_datagrams_per_syscall: f64,
    /// Kernel drops on the client's socket.
    pub kernel_drops: u64,
    /// Packets the client's connections declared lost.
    pub lost_packets: u64,
    /// Whether the driver paced.
    pub pacing: bool,
    /// The I/O mode.
    pub io: String,
    /// Driver counters (transmits, pacing waits, wake-ups).
    pub driver: crate::driver::DriverCounters,
    /// What went wrong, one message each.
    pub errors: Vec<String>,
    /// Socket statistics.
    #[serde(skip)]
    pub socket: neqo_udp::Stats,
}

impl ClientReport {
    /// A short human summary.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{} requests ({} failed) on {} connections: received {} B, sent {} B in {:.3} s = {:.3} Gbit/s; datagrams/syscall rx {:.2} tx {:.2}; kernel drops {}; lost packets {}",
            self.requests,
            self.failed_requests,
            self.connections,
            self.bytes_received,
            self.bytes_sent,
            self.seconds,
            self.gbps,
            self.rx_datagrams_per_syscall,
            self.tx_datagrams_per_syscall,
            self.kernel_drops,
            self.lost_packets
        )
    }
}

/// Runs a client to completion on a new current-thread runtime.
///
/// # Errors
/// Bad configuration, a socket failure, or any failed request (the message lists them).
pub fn run(config: ClientConfig) -> anyhow::Result<ClientReport> {
    let report = run_report(config)?;
    if let Some(first) = report.errors.first() {
        bail!(
            "{first}{}",
            if report.errors.len() > 1 {
                format!(" (and {} more errors)", report.errors.len() - 1)
            } else {
                String::new()
            }
        );
    }
    Ok(report)
}

/// Runs a client to completion on a new current-thread runtime; failed requests are listed
/// in the report rather than returned as an error.
///
/// # Errors
/// Bad configuration or a socket failure.
pub fn run_report(config: ClientConfig) -> anyhow::Result<ClientReport> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run_async(config))
}

/// The server a URL names: address and TLS server name.
///
/// # Errors
/// Not `https://`, no host, no port, or a host that does not resolve.
pub fn resolve(url: &Url) -> anyhow::Result<(SocketAddr, String)> {
    if url.scheme() != "https" {
        bail!("bad URL {url}: scheme must be https");
    }
    let port = url.port().unwrap_or(443);
    let (host, name) = match url.host() {
        Some(url::Host::Domain(d)) => (d.to_owned(), d.to_owned()),
        Some(url::Host::Ipv4(a)) => (a.to_string(), a.to_string()),
        Some(url::Host::Ipv6(a)) => (a.to_string(), a.to_string()),
        None => bail!("bad URL {url}: no host"),
    };
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .with_context(|| format!("bad URL {url}: cannot resolve {host}"))?
        .next()
        .with_context(|| format!("bad URL {url}: {host} has no address"))?;
    Ok((addr, name))
}

/// Runs a client on the current runtime.
///
/// # Errors
/// As [`run_report`].
pub async fn run_async(config: ClientConfig) -> anyhow::Result<ClientReport> {
    let Some(first) = config.urls.first() else {
        bail!("no URL given");
    };
    let (remote, server_name) = resolve(first)?;
    for u in &config.urls[1..] {
        let (r, _) = resolve(u)?;
        if r != remote {
            bail!("all URLs must name the same server: {u} is not at {remote}");
        }
    }
    if config.alpn != ALPN_HQ && config.alpn != ALPN_PERF {
        bail!(
            "unknown ALPN {:?} (expected {ALPN_HQ} or {ALPN_PERF})",
            config.alpn
        );
    }
    if let Some(dir) = &config.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let crypto = tls::client_crypto(&config.trust, &config.alpn)?;
    let local: SocketAddr = if remote.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = neqo_udp::Socket::bind(local, config.socket.clone())?;
    let mut driver =
        Driver::new(vec![socket], None, config.pacing).with_pacing_timer(config.pacing_timer);
    let perf = config.alpn == ALPN_PERF;
    let mut requests = Vec::new();
    for u in &config.urls {
        for _ in 0..config.requests {
            requests.push(u.path().to_owned());
        }
    }
    let expected_total = if perf {
        Some(config.download * requests.len() as u64 * config.connections as u64)
    } else {
        requests
            .iter()
            .map(|p| pattern::generated_len(p))
            .sum::<Option<u64>>()
            .map(|n| n * config.connections as u64)
    };
    let progress = (config.progress && std::io::stderr().is_terminal()).then(|| {
        let pb = indicatif::ProgressBar::with_draw_target(
            expected_total,
            indicatif::ProgressDrawTarget::hidden(),
        );
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec}",
        ) {
            pb.set_style(style);
        }
        pb
    });
    let mut app = ClientApp {
        remote,
        server_name,
        crypto,
        perf,
        requests,
        config,
        started: 0,
        current: None,
        queue: VecDeque::new(),
        streams: IdMap::default(),
        report: ClientReport::default(),
        first_connect: None,
        last_fin: None,
        failed: false,
        progress,
        progress_shown: false,
    };
    driver.run(&mut app, std::future::pending()).await?;
    let mut report = app.report;
    if let Some(ch) = app.current.take()
        && let Some(conn) = driver.connection(ch)
    {
        report.lost_packets += conn.stats().path.lost_packets;
    }
    if let Some(pb) = &app.progress {
        pb.finish_and_clear();
    }
    let s = driver.socket_stats();
    report.socket = s;
    report.rx_datagrams_per_syscall = s.rx.datagrams_per_syscall();
    report.tx_datagrams_per_syscall = s.tx.datagrams_per_syscall();
    report.kernel_drops = s.kernel_drops;
    report.pacing = driver.pacing();
    report.driver = driver.counters();
    report.io = app.config.socket.mode.to_string();
    if let (Some(a), Some(b)) = (app.first_connect, app.last_fin) {
        report.seconds = b.saturating_duration_since(a).as_secs_f64();
    }
    if report.seconds > 0.0 {
        #[expect(clippy::cast_precision_loss, reason = "a rate")]
        let bits = (report.bytes_received + report.bytes_sent) as f64 * 8.0;
        report.gbps = bits / report.seconds / 1e9;
    }
    Ok(report)
}

#[derive(Debug)]
struct Request {
    path: String,
    /// Body length to verify against, when verifying.
    expected: Option<u64>,
    received: u64,
    pattern_ok: bool,
    file: Option<std::io::BufWriter<std::fs::File>>,
    source: Option<Source>,
}

struct ClientApp {
    remote: SocketAddr,
    server_name: String,
    crypto: Arc<quinn_proto::crypto::rustls::QuicClientConfig>,
    perf: bool,
    requests: Vec<String>,
    config: ClientConfig,
    /// Connections opened so far.
    started: usize,
    current: Option<ConnectionHandle>,
    queue: VecDeque<usize>,
    streams: IdMap<StreamId, Request>,
    report: ClientReport,
    first_connect: Option<Instant>,
    last_fin: Option<Instant>,
    failed: bool,
    progress: Option<indicatif::ProgressBar>,
    progress_shown: bool,
}

impl ClientApp {
    fn fail(&mut self, msg: String) {
        self.report.errors.push(msg);
    }

    fn open_streams(&mut self, conn: &mut quinn_proto::Connection) {
        let limit = if self.config.parallel { usize::MAX } else { 1 };
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
            let path = self.requests[r].clone();
            let (source, expected) = if self.perf {
                (
                    Source::pattern(
                        Some(Bytes::copy_from_slice(&self.config.download.to_be_bytes())),
                        self.config.upload,
                    ),
                    Some(self.config.download),
                )
            } else {
                (
                    Source::pattern(Some(Bytes::from(format!("GET {path}\r\n"))), 0),
                    if self.config.output_dir.is_some() {
                        None
                    } else {
                        pattern::generated_len(&path)
                    },
                )
            };
            let file = match &self.config.output_dir {
                Some(dir) if !self.perf => {
                    let name = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or("index");
                    match std::fs::File::create(dir.join(name)) {
                        Ok(f) => Some(std::io::BufWriter::new(f)),
                        Err(e) => {
                            self.fail(format!("{path}: cannot create output file: {e}"));
                            None
                        }
                    }
                }
                _ => None,
            };
            self.streams.insert(
                id,
                Request {
                    path,
                    expected,
                    received: 0,
                    pattern_ok: true,
                    file,
                    source: Some(source),
                },
            );
            self.pump(conn, id);
        }
    }

    fn pump(&mut self, conn: &mut quinn_proto::Connection, id: StreamId) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        let Some(src) = req.source.as_mut() else {
            return;
        };
        let before = src.written;
        let result = src.pump(&mut conn.send_stream(id));
        self.report.bytes_sent += src.written - before;
        match result {
            Ok(crate::body::Pumped::Finished) => req.source = None,
            Ok(crate::body::Pumped::Blocked) => {}
            Err(PumpError::Closed | PumpError::File(_)) => {
                // The server stopped the request; its reset says why when we read.
                req.source = None;
            }
        }
    }

    fn read(&mut self, conn: &mut quinn_proto::Connection, id: StreamId, now: Instant) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        let mut write_err = None;
        let bytes_received = &mut self.report.bytes_received;
        let end = body::read_stream(conn, id, |chunk| {
            let len = chunk.bytes.len() as u64;
            if req.expected.is_some()
                && (chunk.offset != req.received || !pattern::verify(chunk.offset, &chunk.bytes))
            {
                req.pattern_ok = false;
            }
            if let Some(f) = &mut req.file
                && let Err(e) = f.write_all(&chunk.bytes)
            {
                write_err = Some(e);
            }
            req.received += len;
            *bytes_received += len;
            ControlFlow::Continue(())
        });
        if let Some(e) = write_err {
            let path = req.path.clone();
            self.finish_request(
                conn,
                id,
                now,
                Some(format!("{path}: writing the body: {e}")),
            );
        } else if let ReadEnd::Reset(code) = end {
            let path = req.path.clone();
            self.finish_request(
                conn,
                id,
                now,
                Some(format!(
                    "{path}: the server reset the stream (error code {code})"
                )),
            );
        } else if end == ReadEnd::Fin {
            let mut err = None;
            if let Some(n) = req.expected {
                if req.received < n {
                    err = Some(format!(
                        "{}: short body: {} of {n} bytes",
                        req.path, req.received
                    ));
                } else if req.received > n {
                    err = Some(format!(
                        "{}: long body: {} bytes, expected {n}",
                        req.path, req.received
                    ));
                } else if !req.pattern_ok {
                    err = Some(format!(
                        "{}: body differs from the generated pattern",
                        req.path
                    ));
                }
            }
            if let Some(f) = &mut req.file
                && let Err(e) = f.flush()
            {
                err = Some(format!("{}: writing the body: {e}", req.path));
            }
            self.finish_request(conn, id, now, err);
        }
    }

    fn finish_request(
        &mut self,
        conn: &mut quinn_proto::Connection,
        id: StreamId,
        now: Instant,
        error: Option<String>,
    ) {
        self.streams.remove(&id);
        self.last_fin = Some(now);
        if let Some(e) = error {
            self.report.failed_requests += 1;
            self.fail(e);
        } else {
            self.report.requests += 1;
        }
        self.open_streams(conn);
        if self.queue.is_empty() && self.streams.is_empty() {
            self.report.connections += 1;
            self.report.lost_packets += conn.stats().path.lost_packets;
            conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
            self.current = None;
        }
    }

    fn describe(&self, reason: &ConnectionError) -> String {
        let remote = self.remote;
        match reason {
            ConnectionError::TimedOut => format!(
                "no answer from {remote} within the idle timeout ({:?})",
                self.config.transport.idle_timeout
            ),
            ConnectionError::TransportError(e) if e.to_string().contains("certificate") => format!(
                "handshake with {remote} failed: the server's certificate is not trusted ({e}); pass --insecure to skip verification or --ca PEM to trust its issuer"
            ),
            ConnectionError::TransportError(e) => format!("connection to {remote} failed: {e}"),
            ConnectionError::ConnectionClosed(c)
                if c.error_code == TransportErrorCode::crypto(120) =>
            {
                format!(
                    "{remote} does not offer ALPN {:?} (no_application_protocol)",
                    self.config.alpn
                )
            }
            ConnectionError::ConnectionClosed(c)
                if c.error_code == TransportErrorCode::CONNECTION_REFUSED =>
            {
                format!(
                    "{remote} refused the connection (CONNECTION_REFUSED: too many connections?)"
                )
            }
            ConnectionError::ConnectionClosed(c) => format!("{remote} closed the connection: {c}"),
            other => format!("connection to {remote} failed: {other}"),
        }
    }
}

impl Application for ClientApp {
    fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        event: Event,
        now: Instant,
    ) {
        if self.current != Some(ch) {
            return;
        }
        match event {
            Event::Connected => self.open_streams(conn),
            Event::Stream(StreamEvent::Available { dir: Dir::Bi }) => self.open_streams(conn),
            Event::Stream(StreamEvent::Readable { id }) => self.read(conn, id, now),
            Event::Stream(StreamEvent::Writable { id }) => self.pump(conn, id),
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = conn.streams().accept(dir) {
                    let _ = conn.recv_stream(id).stop(0u32.into());
                }
            }
            Event::ConnectionLost { reason } => {
                let msg = self.describe(&reason);
                let outstanding = (self.queue.len() + self.streams.len()) as u64;
                self.report.failed_requests += outstanding;
                self.report.lost_packets += conn.stats().path.lost_packets;
                self.fail(msg);
                self.failed = true;
                self.current = None;
                self.queue.clear();
                self.streams.clear();
            }
            Event::Stream(_)
            | Event::HandshakeDataReady
            | Event::DatagramReceived
            | Event::DatagramsUnblocked => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if self.current.is_none() && !self.failed && self.started < self.config.connections {
            self.started += 1;
            let mut cc = quinn_proto::ClientConfig::new(self.crypto.clone());
            let label = tls::qlog_label("client");
            match self.config.transport.transport(&label) {
                Ok(t) => {
                    cc.transport_config(Arc::new(t));
                }
                Err(e) => {
                    self.fail(format!("{e:#}"));
                    self.failed = true;
                    return None;
                }
            }
            match driver.connect(0, cc, self.remote, &self.server_name) {
                Ok(ch) => {
                    self.first_connect.get_or_insert(now);
                    self.current = Some(ch);
                    self.queue = (0..self.requests.len()).collect();
                    if self.queue.is_empty() {
                        self.fail("no request to make".to_owned());
                        self.failed = true;
                    }
                }
                Err(e) => {
                    self.fail(format!("cannot connect to {}: {e}", self.remote));
                    self.failed = true;
                }
            }
        }
        let pb = self.progress.as_ref()?;
        pb.set_position(self.report.bytes_received);
        if !self.progress_shown
            && self
                .first_connect
                .is_some_and(|t| now.saturating_duration_since(t) > Duration::from_secs(1))
        {
            pb.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            self.progress_shown = true;
        }
        Some(now + Duration::from_millis(100))
    }

    fn done(&self) -> bool {
        self.failed || (self.current.is_none() && self.started >= self.config.connections)
    }
}
