//! The `hq-interop` and `perf` server.

use std::{
    future::Future,
    net::SocketAddr,
    ops::ControlFlow,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use bytes::BytesMut;
use quinn_proto::{ConnectionHandle, Dir, Event, StreamEvent, StreamId, VarInt};
use rustls::pki_types::CertificateDer;

use crate::{
    body::{self, PumpError, Pumped, ReadEnd, Source},
    driver::{Admission, Application, Driver, DriverCounters},
    idmap::IdMap,
    pattern,
    tls::{self, ALPN_HQ, ALPN_PERF, Identity, TransportOptions},
};

/// Stream error code for a request the server will not serve (HTTP/0.9 has no status).
pub const REFUSED: VarInt = VarInt::from_u32(0x10);

/// Longest `hq-interop` request accepted.
const MAX_REQUEST: usize = 8 * 1024;

/// What a server does.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to bind, one socket each.
    pub listen: Vec<SocketAddr>,
    /// Files to serve; `/N` paths without such a file are generated.
    pub root: Option<PathBuf>,
    /// Certificate and key; self-signed for localhost when `None`.
    pub identity: Option<Identity>,
    /// ALPNs offered.
    pub alpns: Vec<String>,
    /// More connections than this are refused.
    pub max_connections: Option<usize>,
    /// Idle timeout, congestion control, qlog.
    pub transport: TransportOptions,
    /// Socket configuration.
    pub socket: neqo_udp::Config,
    /// The driver paces.
    pub pacing: bool,
    /// What the driver's pacer waits on.
    pub pacing_timer: crate::pacer::PacingTimer,
    /// Print stats to stderr this often.
    pub stats_interval: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec![SocketAddr::from(([0u16; 8], 4433))],
            root: None,
            identity: None,
            alpns: vec![ALPN_HQ.to_owned(), ALPN_PERF.to_owned()],
            max_connections: None,
            transport: TransportOptions::default(),
            socket: neqo_udp::Config::default(),
            pacing: true,
            pacing_timer: crate::pacer::PacingTimer::default(),
            stats_interval: None,
        }
    }
}

/// What a server did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ServerReport {
    /// Requests answered completely.
    pub requests: u64,
    /// Requests refused (bad path, escape, unknown file).
    pub refused_requests: u64,
    /// Response bytes written.
    pub bytes_sent: u64,
    /// Request bytes read (perf uploads included).
    pub bytes_received: u64,
    /// Datagrams per receive syscall.
    pub rx_datagrams_per_syscall: f64,
    /// Datagrams per send syscall.
    pub tx_datagrams_per_syscall: f64,
    /// Kernel drops on the server's sockets.
    pub kernel_drops: u64,
    /// Packets the server's connections declared lost (drained ones and live ones at exit).
    pub lost_packets: u64,
    /// Driver counters (connections accepted and refused, transmits, pacing waits).
    pub driver: DriverCounters,
    /// Connections open (accepted, not yet drained) when the report was made. The server's
    /// per-connection state lives no longer than the driver's connection, so 0 means none.
    pub open_connections: u64,
    /// Socket statistics.
    #[serde(skip)]
    pub socket: neqo_udp::Stats,
}

impl ServerReport {
    /// One line for humans.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "connections accepted {} refused {} open-at-exit {}, requests {} refused {}, sent {} B, received {} B, lost packets {}\n{}",
            self.driver.accepted,
            self.driver.refused,
            self.driver.accepted.saturating_sub(self.driver.drained),
            self.requests,
            self.refused_requests,
            self.bytes_sent,
            self.bytes_received,
            self.lost_packets,
            self.socket
        )
    }
}

/// A bound server, ready to [`run`](Self::run).
#[expect(missing_debug_implementations, reason = "the driver is not Debug")]
pub struct Server {
    driver: Driver,
    app: ServerApp,
    certificate: Vec<CertificateDer<'static>>,
}

impl Server {
    /// Binds every listen address. Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// A bind failure (port in use), a missing root, a bad certificate or key.
    pub fn bind(config: ServerConfig) -> anyhow::Result<Self> {
        let root = match &config.root {
            Some(r) => Some(
                r.canonicalize()
                    .with_context(|| format!("--root {}: cannot open", r.display()))?,
            ),
            None => None,
        };
        if let Some(r) = &root
            && !r.is_dir()
        {
            anyhow::bail!("--root {}: not a directory", r.display());
        }
        let identity = match config.identity.clone() {
            Some(i) => i,
            None => Identity::self_signed()?,
        };
        if config.alpns.is_empty() {
            anyhow::bail!("no ALPN to offer");
        }
        let crypto = tls::server_crypto(&identity, &config.alpns)?;
        let mut server_config = quinn_proto::ServerConfig::with_crypto(crypto.clone());
        // Per-connection qlog streams are made at admission; the shared config has none.
        let shared = TransportOptions {
            qlog_dir: None,
            ..config.transport.clone()
        };
        server_config.transport_config(Arc::new(shared.transport("server")?));
        let mut sockets = Vec::new();
        for addr in &config.listen {
            sockets.push(neqo_udp::Socket::bind(*addr, config.socket.clone())?);
        }
        let driver = Driver::new(sockets, Some(Arc::new(server_config)), config.pacing)
            .with_pacing_timer(config.pacing_timer);
        let now = Instant::now();
        Ok(Self {
            driver,
            app: ServerApp {
                root,
                crypto,
                config,
                conns: IdMap::default(),
                report: ServerReport::default(),
                next_stats: now,
                started: now,
                open: Arc::default(),
            },
            certificate: identity.chain,
        })
    }

    /// The bound addresses (the real ports when binding port 0).
    #[must_use]
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.driver.local_addrs()
    }

    /// The certificate chain served.
    #[must_use]
    pub fn certificate(&self) -> &[CertificateDer<'static>] {
        &self.certificate
    }

    /// Serves until `shutdown` completes.
    ///
    /// # Errors
    /// A socket failure.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<ServerReport> {
        self.driver.run(&mut self.app, shutdown).await?;
        let mut report = self.app.report.clone();
        let mut live_lost = 0;
        for (_, conn) in self.driver.connections() {
            live_lost += conn.stats().path.lost_packets;
        }
        fill_report(&mut report, &self.driver, live_lost);
        Ok(report)
    }
}

fn fill_report(report: &mut ServerReport, driver: &Driver, live_lost: u64) {
    let s = driver.socket_stats();
    report.socket = s;
    report.rx_datagrams_per_syscall = s.rx.datagrams_per_syscall();
    report.tx_datagrams_per_syscall = s.tx.datagrams_per_syscall();
    report.kernel_drops = s.kernel_drops;
    report.driver = driver.counters();
    report.open_connections = driver.open_connections() as u64;
    report.lost_packets = report.driver.lost_packets + live_lost;
}

/// A server on its own thread with its own current-thread runtime, for tests and benches.
#[derive(Debug)]
pub struct ServerHandle {
    addrs: Vec<SocketAddr>,
    certificate: Vec<CertificateDer<'static>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<ServerReport>>>,
    open: Arc<AtomicUsize>,
}

impl ServerHandle {
    /// Binds and starts serving; returns once the sockets are bound.
    ///
    /// # Errors
    /// As [`Server::bind`].
    pub fn start(config: ServerConfig) -> anyhow::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("neqo-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let server = match Server::bind(config) {
                        Ok(s) => s,
                        Err(e) => {
                            let msg = format!("{e:#}");
                            let _ = ready_tx.send(Err(e));
                            anyhow::bail!(msg);
                        }
                    };
                    let _ = ready_tx.send(Ok((
                        server.local_addrs(),
                        server.certificate().to_vec(),
                        Arc::clone(&server.app.open),
                    )));
                    server
                        .run(async move {
                            let _ = stopped.await;
                        })
                        .await
                })
            })?;
        match ready_rx.recv() {
            Ok(Ok((addrs, certificate, open))) => Ok(Self {
                addrs,
                certificate,
                stop: Some(stop),
                thread: Some(thread),
                open,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(anyhow::anyhow!("server thread died")),
            },
        }
    }

    /// The first bound address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every bound address.
    #[must_use]
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The server's certificate chain (to trust it in a client).
    #[must_use]
    pub fn certificate(&self) -> &[CertificateDer<'static>] {
        &self.certificate
    }

    /// Connections open now (accepted, not yet drained; per-connection state included), as
    /// of the server's last turn.
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Stops the server and returns its report.
    ///
    /// # Errors
    /// What the server failed with.
    pub fn stop(mut self) -> anyhow::Result<ServerReport> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> anyhow::Result<ServerReport> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(anyhow::anyhow!("server thread panicked")),
            None => Ok(ServerReport::default()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Hq,
    Perf,
}

#[derive(Debug)]
struct StreamState {
    request: BytesMut,
    perf_header: [u8; 8],
    perf_header_len: usize,
    source: Option<Source>,
}

#[derive(Debug, Default)]
struct ConnState {
    proto: Option<Proto>,
    streams: IdMap<StreamId, StreamState>,
}

struct ServerApp {
    root: Option<PathBuf>,
    crypto: Arc<quinn_proto::crypto::rustls::QuicServerConfig>,
    config: ServerConfig,
    conns: IdMap<ConnectionHandle, ConnState>,
    report: ServerReport,
    next_stats: Instant,
    started: Instant,
    /// [`Driver::open_connections`] after every turn, for [`ServerHandle::open_connections`].
    open: Arc<AtomicUsize>,
}

impl Application for ServerApp {
    fn admit(&mut self, open: usize, remote: SocketAddr) -> Admission {
        if self.config.max_connections.is_some_and(|max| open >= max) {
            tracing::info!("refusing connection from {remote}: {open} open");
            return Admission::Refuse;
        }
        if self.config.transport.qlog_dir.is_some() {
            let label = tls::qlog_label("server");
            match self.config.transport.transport(&label) {
                Ok(t) => {
                    let mut sc = quinn_proto::ServerConfig::with_crypto(self.crypto.clone());
                    sc.transport_config(Arc::new(t));
                    return Admission::Accept(Some(Arc::new(sc)));
                }
                Err(e) => tracing::warn!("qlog: {e:#}"),
            }
        }
        Admission::Accept(None)
    }

    fn accepted(&mut self, ch: ConnectionHandle, _conn: &mut quinn_proto::Connection) {
        self.conns.insert(ch, ConnState::default());
    }

    fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        event: Event,
        _now: Instant,
    ) {
        let Some(state) = self.conns.get_mut(&ch) else {
            return;
        };
        match event {
            Event::Connected => {
                state.proto = match tls::negotiated_alpn(conn).as_deref() {
                    Some(ALPN_HQ) => Some(Proto::Hq),
                    Some(ALPN_PERF) => Some(Proto::Perf),
                    _ => None,
                };
            }
            Event::ConnectionLost { reason } => {
                tracing::debug!("connection {ch:?} lost: {reason}");
                self.conns.remove(&ch);
            }
            Event::Stream(StreamEvent::Opened { dir }) => {
                let mut opened = Vec::new();
                while let Some(id) = conn.streams().accept(dir) {
                    if dir == Dir::Uni {
                        let _ = conn.recv_stream(id).stop(0u32.into());
                    } else {
                        state.streams.insert(
                            id,
                            StreamState {
                                request: BytesMut::new(),
                                perf_header: [0; 8],
                                perf_header_len: 0,
                                source: None,
                            },
                        );
                        opened.push(id);
                    }
                }
                for id in opened {
                    self.read(ch, conn, id);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => self.read(ch, conn, id),
            Event::Stream(StreamEvent::Writable { id }) => self.pump(ch, conn, id),
            Event::Stream(StreamEvent::Finished { id } | StreamEvent::Stopped { id, .. }) => {
                state.streams.remove(&id);
            }
            Event::Stream(StreamEvent::Available { .. })
            | Event::HandshakeDataReady
            | Event::DatagramReceived
            | Event::DatagramsUnblocked => {}
        }
    }

    fn drained(&mut self, ch: ConnectionHandle, _conn: &quinn_proto::Connection) {
        self.conns.remove(&ch);
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        self.open
            .store(driver.open_connections(), Ordering::Relaxed);
        let interval = self.config.stats_interval?;
        if now >= self.next_stats {
            if self.started != now {
                let mut r = self.report.clone();
                fill_report(&mut r, driver, 0);
                eprintln!(
                    "neqo-server stats: open connections {}; {}",
                    driver.open_connections(),
                    r.summary()
                );
            }
            self.next_stats = now + interval;
        }
        Some(self.next_stats)
    }
}

impl ServerApp {
    fn read(&mut self, ch: ConnectionHandle, conn: &mut quinn_proto::Connection, id: StreamId) {
        let Some(cs) = self.conns.get_mut(&ch) else {
            return;
        };
        let proto = match cs.proto {
            Some(p) => p,
            None => match tls::negotiated_alpn(conn).as_deref() {
                Some(ALPN_PERF) => Proto::Perf,
                _ => Proto::Hq,
            },
        };
        let Some(st) = cs.streams.get_mut(&id) else {
            return;
        };
        if st.source.is_some() {
            return;
        }
        let mut too_long = false;
        let bytes_received = &mut self.report.bytes_received;
        let end = body::read_stream(conn, id, |chunk| {
            *bytes_received += chunk.bytes.len() as u64;
            match proto {
                Proto::Hq => {
                    if st.request.len() + chunk.bytes.len() > MAX_REQUEST {
                        too_long = true;
                        return ControlFlow::Break(());
                    }
                    st.request.extend_from_slice(&chunk.bytes);
                }
                Proto::Perf => {
                    let need = 8 - st.perf_header_len;
                    let take = need.min(chunk.bytes.len());
                    st.perf_header[st.perf_header_len..st.perf_header_len + take]
                        .copy_from_slice(&chunk.bytes[..take]);
                    st.perf_header_len += take;
                }
            }
            ControlFlow::Continue(())
        });
        if matches!(end, ReadEnd::Reset(_)) {
            cs.streams.remove(&id);
            return;
        }
        if too_long {
            tracing::warn!("refusing request on stream {id}: longer than {MAX_REQUEST} bytes");
            self.refuse(ch, conn, id);
            return;
        }
        if end != ReadEnd::Fin {
            return;
        }
        let source = match proto {
            Proto::Perf => {
                if st.perf_header_len < 8 {
                    tracing::warn!("perf stream {id} ended before its 8-byte length");
                    None
                } else {
                    Some(Source::pattern(None, u64::from_be_bytes(st.perf_header)))
                }
            }
            Proto::Hq => match parse_request(&st.request) {
                Ok(path) => match resolve(self.root.as_deref(), path) {
                    Ok(src) => Some(src),
                    Err(why) => {
                        tracing::warn!("refusing request for {path:?}: {why}");
                        None
                    }
                },
                Err(why) => {
                    tracing::warn!("refusing request on stream {id}: {why}");
                    None
                }
            },
        };
        match source {
            Some(src) => {
                st.source = Some(src);
                self.pump(ch, conn, id);
            }
            None => self.refuse(ch, conn, id),
        }
    }

    fn refuse(&mut self, ch: ConnectionHandle, conn: &mut quinn_proto::Connection, id: StreamId) {
        self.report.refused_requests += 1;
        let _ = conn.send_stream(id).reset(REFUSED);
        let _ = conn.recv_stream(id).stop(REFUSED);
        if let Some(cs) = self.conns.get_mut(&ch) {
            cs.streams.remove(&id);
        }
    }

    fn pump(&mut self, ch: ConnectionHandle, conn: &mut quinn_proto::Connection, id: StreamId) {
        let Some(cs) = self.conns.get_mut(&ch) else {
            return;
        };
        let Some(src) = cs.streams.get_mut(&id).and_then(|s| s.source.as_mut()) else {
            return;
        };
        let before = src.written;
        let result = src.pump(&mut conn.send_stream(id));
        self.report.bytes_sent += src.written - before;
        match result {
            Ok(Pumped::Blocked) => {}
            Ok(Pumped::Finished) => {
                self.report.requests += 1;
                cs.streams.remove(&id);
            }
            Err(PumpError::Closed) => {
                cs.streams.remove(&id);
            }
            Err(PumpError::File(e)) => {
                tracing::warn!("reading the file for stream {id}: {e}");
                self.refuse(ch, conn, id);
            }
        }
    }
}

/// The path of `GET /PATH` (CRLF, LF or nothing after it).
fn parse_request(request: &[u8]) -> Result<&str, &'static str> {
    let text = std::str::from_utf8(request).map_err(|_| "request is not UTF-8")?;
    let line = text.lines().next().unwrap_or("");
    let mut words = line.split_ascii_whitespace();
    if words.next() != Some("GET") {
        return Err("not a GET request");
    }
    let path = words.next().ok_or("no path")?;
    if !path.starts_with('/') {
        return Err("path does not start with /");
    }
    Ok(path)
}

/// What to send for `path`: a file under `root`, else generated bytes for `/N`.
fn resolve(root: Option<&Path>, path: &str) -> Result<Source, &'static str> {
    let rel = &path[1..];
    if let Some(root) = root
        && !rel.is_empty()
    {
        if rel.starts_with('/')
            || rel.contains('\\')
            || rel.contains('\0')
            || rel.split('/').any(|c| c == ".." || c == ".")
        {
            return Err("path escapes the root");
        }
        let candidate = root.join(rel);
        if candidate.symlink_metadata().is_ok() {
            let real = candidate
                .canonicalize()
                .map_err(|_| "dangling link or unreadable path")?;
            if !real.starts_with(root) {
                return Err("path escapes the root (symbolic link)");
            }
            if real.is_file() {
                let file = std::fs::File::open(&real).map_err(|_| "cannot open file")?;
                return Ok(Source::file(file));
            }
            return Err("not a file");
        }
    }
    match pattern::generated_len(path) {
        Some(n) => Ok(Source::pattern(None, n)),
        None => Err("not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(parse_request(b"GET /10\r\n"), Ok("/10"));
        assert_eq!(parse_request(b"GET /a/b HTTP/0.9\r\n"), Ok("/a/b"));
        assert!(parse_request(b"PUT /10\r\n").is_err());
        assert!(parse_request(b"GET 10\r\n").is_err());
    }

    #[test]
    fn escapes_are_refused() {
        let dir = std::env::temp_dir().canonicalize().unwrap();
        assert!(resolve(Some(&dir), "/../etc/passwd").is_err());
        assert!(resolve(Some(&dir), "//etc/passwd").is_err());
        assert!(resolve(Some(&dir), "/a/../../x").is_err());
        assert!(resolve(None, "/12").is_ok());
        assert!(resolve(None, "/nope").is_err());
    }
}
