//! The `hq-interop` and `perf` server.
//!
//! - [`Server`]: binds and runs on the caller's runtime; [`ServerHandle`] runs one on its own
//!   thread.
//! - `app`: the [`Application`](crate::driver::Application) answering requests, with files
//!   read off the driver thread ([`crate::disk`]).
//! - `admission`: which new connections are taken, retried or refused; half-open ones.
//! - `budget`: the receive windows, sized so that all together stay within a budget.
//! - `configs`: the server config of a connection with its own qlog stream.
//! - `keys`: the stateless-reset and Retry-token keys, from a secret file or random.
//! - [`ServerReport`]: what it did.

mod admission;
mod app;
mod budget;
mod configs;
mod handle;
mod keys;
mod report;

use std::{
    future::Future,
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use quinn_proto::VarInt;
use rustls::pki_types::CertificateDer;

use self::app::ServerApp;
pub use self::{
    admission::{AdmissionCounters, Limits, RetryPolicy},
    budget::{Budget, DEFAULT_BUDGET, MAX_WINDOW, MIN_WINDOW},
    handle::ServerHandle,
    keys::{MAX_SECRET, MIN_SECRET, ServerKeys},
    report::ServerReport,
};
use crate::{
    driver::Driver,
    hq,
    tls::{self, ALPN_HQ, ALPN_PERF, Identity, TransportOptions},
};

/// Stream error code for a request the server will not serve ([`hq::REFUSED`]).
pub const REFUSED: VarInt = VarInt::from_u32(hq::REFUSED as u32);

/// Stream error code for a malformed request ([`hq::BAD_REQUEST`]).
pub const BAD_REQUEST: VarInt = VarInt::from_u32(hq::BAD_REQUEST as u32);

/// What a server does.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to bind, one socket each.
    pub listen: Vec<SocketAddr>,
    /// Files to serve (any path but `/N`, which is always generated; see [`hq`]).
    pub root: Option<PathBuf>,
    /// Certificate and key; self-signed for localhost when `None`.
    pub identity: Option<Identity>,
    /// ALPNs offered.
    pub alpns: Vec<String>,
    /// Which connections are taken, retried or refused (see `admission`).
    pub limits: Limits,
    /// Stateless-reset and Retry-token keys.
    pub keys: ServerKeys,
    /// The receive windows of all connections together (see `budget`).
    pub budget: Budget,
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
            limits: Limits::default(),
            keys: ServerKeys::random(),
            budget: Budget::default(),
            transport: TransportOptions::default(),
            socket: neqo_udp::Config::default(),
            pacing: true,
            pacing_timer: crate::pacer::PacingTimer::default(),
            stats_interval: None,
        }
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
                hq::canonical_root(r)
                    .with_context(|| format!("--root {}: cannot serve from it", r.display()))?,
            ),
            None => None,
        };
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
            receive_window: MIN_WINDOW,
            ..config.transport.clone()
        };
        server_config.transport_config(Arc::new(shared.transport("server")?));
        server_config.token_key(config.keys.token.clone());
        let server_config = Arc::new(server_config);
        let mut sockets = Vec::new();
        for addr in &config.listen {
            sockets.push(neqo_udp::Socket::bind(*addr, config.socket.clone())?);
        }
        let endpoint = config.keys.endpoint_config();
        let driver = Driver::server(sockets, endpoint, server_config.clone(), config.pacing)
            .with_pacing_timer(config.pacing_timer);
        Ok(Self {
            driver,
            app: ServerApp::new(root, server_config, config, Instant::now()),
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
        report.fill(&self.driver, live_lost);
        Ok(report)
    }
}
