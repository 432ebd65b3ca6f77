//! neqo-server's machinery as a library: a QUIC server on neqo-driver's endpoint driver that
//! serves your applications (an HTTP/3 [`Service`], or a protocol of your own on raw QUIC:
//! [`QuicApp`]) or its own `hq-interop`, HTTP/3 and `perf` from files under a root or
//! generated bodies.
//!
//! ```no_run
//! use neqo_server_core::{ResponseBody, Server, ServerConfig, service_fn};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let hello = service_fn(|_request| async {
//!     http::Response::new(ResponseBody::from("hello\n"))
//! });
//! let mut config = ServerConfig::http3(hello);
//! config.listen = vec!["127.0.0.1:4433".parse()?];
//! let server = Server::bind(config)?;
//! server.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(())
//! # }
//! ```
//!
//! - [`ServerConfig::http3`], [`ServerConfig::quic`], [`ServerConfig::serve`]: a server of
//!   your applications, each on its ALPN ([`App`]).
//! - [`Server`]: binds a [`ServerConfig`] and starts its workers, each on a thread of its
//!   own, then serves until told to stop; [`ServerHandle`] runs one on a thread for tests and
//!   benches.
//! - [`Limits`] and [`Budget`]: which connections are taken, retried or refused, and how
//!   much receive window all of them together may hold.
//! - [`ServerKeys`]: the stateless-reset, Retry-token and connection-ID keys, from a key file
//!   that outlives a restart, or random.
//! - [`Steering`] and [`ServerId`]: how datagrams reach the workers, and the QUIC-LB server
//!   ID a fleet's load balancer routes by.
//! - [`ServerError`]: why a server did not start or stopped; [`ServerReport`]: what it did.

// The modules, for those who work on them:
// access_log: a line per request, written off the workers' threads.
// apps: applications of your own (HTTP/3 services, raw-QUIC sessions), by ALPN.
// admission: which new connections are taken, retried or refused; half-open ones.
// app: the driver's Application: admission, receive windows, handshakes given up, stats.
// budget: the receive windows, sized so that all together stay within a budget.
// cid: the connection IDs: a QUIC-LB server ID and the worker that owns the connection.
// configs: the server config of a connection that needs its own (a qlog stream, the path
//   MTU bound of its peer's route).
// disk: files read off the driver thread.
// dispatch: channel steering: one socket read by a dispatcher thread that hands each
//   datagram to its worker over a bounded channel.
// http3: the server's own HTTP/3: frames, QPACK's static table, request heads, control
//   streams, each connection's requests and responses.
// initial_shed: Initials shed by prefix while a worker falls behind, before any crypto.
// keys: the keys, from a secret file or random.
// ledger: what the workers count together (connections open and half-open, per source, the
//   arrival rate).
// metrics: the Prometheus endpoint and its reference.
// prefixes: the address prefixes fair shares are counted by.
// requests: each connection's requests, read and answered.
// resets: the stream resets a shutdown sent, until the clients acknowledge them.
// served_thread: the thread each worker (and the dispatcher) runs on.
// steering: how datagrams reach the workers, and the listen sockets bound for it.
// worker: the workers, each a driver with its own sockets, and the running set of them.
mod access_log;
mod admission;
mod app;
mod apps;
mod budget;
mod cid;
mod configs;
mod disk;
mod dispatch;
mod error;
mod handle;
mod http3;
mod initial_shed;
mod keys;
mod ledger;
mod metrics;
#[cfg(test)]
mod policy_tests;
mod prefixes;
mod report;
mod requests;
mod resets;
mod served_thread;
mod steering;
mod worker;

use std::{future::Future, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use quinn_proto::VarInt;
use rustls::pki_types::CertificateDer;

pub use self::{
    access_log::{AccessLog, AccessLogFormat, Outcome, Record},
    admission::{AdmissionCounters, Limits, RetryPolicy},
    apps::{
        App, Apps, BoxError, Files, IntoResponse, QuicApp, QuicSession, RequestBody, ResponseBody,
        Service, ServiceFn, ServiceFuture, service_fn,
    },
    budget::{Budget, DEFAULT_BUDGET, MAX_WINDOW, MIN_WINDOW},
    cid::{MAX_SERVER_ID, MAX_WORKERS, ServerId, quic_lb_server_id},
    dispatch::{CHANNEL_CAPACITY, DispatchReport},
    error::{KeyFileError, KeyFileProblem, LayoutError, ServerError},
    handle::ServerHandle,
    keys::{MAX_SECRET, MIN_SECRET, ServerKeys},
    report::{ServerReport, WorkerSummary},
    steering::Steering,
};
use self::{cid::CidLayout, worker::Workers};
use neqo_driver::{
    DriverConfig, TransportOptions,
    tls::{self, Certificates, Identity},
};
use neqo_protocols::{ALPN_HQ, ALPN_PERF, hq};

/// Stream error code for a request the server will not serve ([`hq::REFUSED`]).
pub const REFUSED: VarInt = VarInt::from_u32(hq::REFUSED as u32);

/// Stream error code for a malformed request ([`hq::BAD_REQUEST`]).
pub const BAD_REQUEST: VarInt = VarInt::from_u32(hq::BAD_REQUEST as u32);

/// What a server does.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Addresses to bind, one socket each.
    pub listen: Vec<SocketAddr>,
    /// Files to serve (any path but `/N`; see [`hq`]).
    pub root: Option<PathBuf>,
    /// Answer `/N` (digits only) with N generated pattern bytes, as benchmarks ask; off, `/N`
    /// is not found. A file server that does not want to hand out any size of body to anyone
    /// turns it off.
    pub generate: bool,
    /// Where a line per request goes, if anywhere.
    pub access_log: Option<AccessLog>,
    /// The certificates served, chosen by SNI, which a handle kept elsewhere can replace
    /// while the server runs; a self-signed one for localhost when `None`.
    pub certificates: Option<Certificates>,
    /// ALPNs offered, in order of preference: each served by its application in
    /// [`apps`](Self::apps), or by the built-in file server (`hq-interop`, `perf`, `h3`).
    pub alpns: Vec<String>,
    /// Your applications, by ALPN ([`serve`](Self::serve) adds one and offers its ALPN).
    pub apps: Apps,
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
    /// How the workers' drivers pace, and how long a shutdown lets the requests under way
    /// finish while new ones are refused (HTTP/3 after its GOAWAY; by default
    /// [`DRAIN_TIMEOUT`]); what is left then is cut. A zero drain cuts at once.
    pub driver: DriverConfig,
    /// Print stats to stderr this often.
    pub stats_interval: Option<Duration>,
    /// Worker threads, each with its own runtime, driver, endpoint and sockets (1 to
    /// [`MAX_WORKERS`]).
    pub workers: usize,
    /// How datagrams reach the workers when there are several: the kernel's steering program
    /// (Linux), or a dispatcher thread and channels (see `dispatch`).
    pub steering: Steering,
    /// The QUIC-LB server ID every connection ID carries, for a load balancer in front of a
    /// fleet; without one, connection IDs say "unroutable" to such a balancer.
    pub server_id: Option<ServerId>,
    /// Each connection ID is retired and replaced after this long; `None`: kept for the
    /// connection's life.
    pub cid_lifetime: Option<Duration>,
    /// Serve the counters for Prometheus on this TCP address.
    pub metrics: Option<SocketAddr>,
    /// Whether the TLS secrets are written to the file `SSLKEYLOGFILE` names;
    /// never by default, whatever the environment says.
    pub secrets: tls::Secrets,
}

/// The default drain period of [`ServerConfig::driver`]: room for the downloads under way to
/// finish, well within the 90 s a service manager waits by default (systemd's
/// `TimeoutStopSec`) before it kills the process.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest drain a front end should take, in seconds.
pub const MAX_DRAIN_TIMEOUT: f64 = 600.0;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: vec![SocketAddr::from(([0u16; 8], 4433))],
            root: None,
            generate: true,
            access_log: None,
            certificates: None,
            alpns: vec![ALPN_HQ.to_owned(), ALPN_PERF.to_owned()],
            apps: Apps::default(),
            limits: Limits::default(),
            keys: ServerKeys::random(),
            budget: Budget::default(),
            transport: TransportOptions::default(),
            socket: neqo_udp::Config::default(),
            driver: DriverConfig::default().with_drain(DRAIN_TIMEOUT),
            stats_interval: None,
            workers: 1,
            steering: Steering::Auto,
            server_id: None,
            cid_lifetime: None,
            metrics: None,
            secrets: tls::Secrets::Kept,
        }
    }
}

impl ServerConfig {
    /// A server of `service` alone, over HTTP/3 (ALPN `h3`), with the defaults of every other
    /// setting (port 4433 on every address, a self-signed certificate for localhost: set
    /// [`listen`](Self::listen) and [`certificates`](Self::certificates)).
    #[must_use]
    pub fn http3(service: impl Service) -> Self {
        Self::none().serve(neqo_protocols::ALPN_H3, App::http3(service))
    }

    /// A server of `app` alone, on ALPN `alpn`.
    #[must_use]
    pub fn quic(alpn: &str, app: impl QuicApp) -> Self {
        Self::none().serve(alpn, App::quic(app))
    }

    /// The defaults, with nothing to serve.
    fn none() -> Self {
        Self {
            alpns: Vec::new(),
            generate: false,
            ..Self::default()
        }
    }

    /// Also serves `alpn` with `app` (in place of what served it), offered after the ALPNs
    /// offered already.
    #[must_use]
    pub fn serve(mut self, alpn: &str, app: App) -> Self {
        self.apps.insert(alpn, app);
        self
    }

    /// Checks this configuration as [`Server::bind`] does before it binds anything: the root,
    /// the certificates (a self-signed one made when there are none), the ALPNs and their
    /// applications, the worker count and server ID, `SSLKEYLOGFILE` for logged secrets, the
    /// transport settings. Nothing is bound, started or created; what only binding finds (an
    /// address in use, a steering program the kernel refuses, the metrics address) is not
    /// checked.
    ///
    /// # Errors
    /// What [`Server::bind`] would refuse of those.
    pub fn check(&self) -> Result<(), ServerError> {
        prepare(self.clone()).map(|_| ())
    }

    /// Whether a connection of `alpn` speaks HTTP/3: the built-in `h3` or a service.
    fn speaks_http3(&self, alpn: &str) -> bool {
        self.apps
            .get(alpn)
            .map_or(alpn == neqo_protocols::ALPN_H3, App::is_http3)
    }

    /// What one of `self.workers` workers gets of the limits: the receive budget split evenly
    /// (its floor kept for a worker's share of the connections). The connection and
    /// half-open limits and the arrival rate are counted over all workers instead
    /// (`ledger::Ledger`): new connections reach the workers by a hash of their addresses,
    /// evenly only when they come from many.
    fn worker_share(&self) -> Self {
        let n = self.workers.max(1) as u64;
        let mut share = self.clone();
        share.budget = Budget {
            bytes: self.budget.bytes / n,
            floor_connections: self.budget.floor_connections.div_ceil(n),
        };
        share
    }
}

/// The endpoint's bound for path MTU discovery ([`neqo_driver::mtu_bound`]), the smallest over its
/// listen addresses: a loopback address's within what loopback carries; an address that can
/// reach other hosts has the route of no one peer in particular, so `max_mtu` as given or
/// [`neqo_driver::DEFAULT_MTU_BOUND`], and each connection gets its peer's at admission
/// ([`configs::ConnectionConfigs`]).
fn listen_mtu_bound(listen: &[SocketAddr], max_mtu: Option<u16>) -> u16 {
    listen
        .iter()
        .map(|a| neqo_driver::mtu_bound(a.ip().is_loopback().then_some(*a), max_mtu))
        .min()
        .unwrap_or(neqo_driver::DEFAULT_MTU_BOUND)
}

/// What every worker of a server of `config` starts from, and the certificates it serves:
/// the checks a configuration must pass before anything binds (the root, the identity, the
/// ALPNs, the worker count).
fn prepare(mut config: ServerConfig) -> Result<(worker::Shared, Certificates), ServerError> {
    let root = match &config.root {
        Some(r) => Some(hq::canonical_root(r).map_err(|source| ServerError::Root {
            path: r.clone(),
            source,
        })?),
        None => None,
    };
    let certificates = match config.certificates.clone() {
        Some(c) => c,
        None => Certificates::new(&[Identity::self_signed()?])?,
    };
    // An application is offered, whether or not its ALPN was listed.
    for (alpn, _) in config.apps.iter() {
        if !config.alpns.iter().any(|a| a == alpn) {
            config.alpns.push(alpn.to_owned());
        }
    }
    if config.alpns.is_empty() {
        return Err(ServerError::NoAlpn);
    }
    // A connection of an ALPN the server has no application for would be served as
    // hq-interop: refused here instead.
    if let Some(a) = config.alpns.iter().find(|a| {
        config.apps.get(a).is_none()
            && ![ALPN_HQ, ALPN_PERF, neqo_protocols::ALPN_H3].contains(&a.as_str())
    }) {
        return Err(ServerError::UnknownAlpn(a.clone()));
    }
    let layout = CidLayout::new(config.server_id.clone(), config.workers)?;
    // One crypto config for all workers: one session store, so that a client resumes
    // (and sends 0-RTT) whichever worker it reaches.
    if config.secrets == tls::Secrets::Logged && std::env::var_os("SSLKEYLOGFILE").is_none() {
        return Err(ServerError::KeylogUnset);
    }
    let crypto = tls::server_crypto_with(&certificates, &config.alpns, config.secrets)?;
    let mut server_config = quinn_proto::ServerConfig::with_crypto(crypto);
    config.transport.mtu_upper_bound = listen_mtu_bound(&config.listen, config.transport.max_mtu);
    // HTTP/3's control and QPACK streams (RFC 9114 section 6.2): whatever the transport
    // options say, a server that speaks it lets the client open them.
    if config.alpns.iter().any(|a| config.speaks_http3(a)) {
        config.transport.uni_streams = config.transport.uni_streams.max(neqo_h3::UNI_STREAMS);
    }
    // Per-connection qlog streams are made at admission; the shared config has none.
    let shared = TransportOptions {
        qlog_dir: None,
        receive_window: MIN_WINDOW,
        ..config.transport.clone()
    };
    server_config.transport_config(Arc::new(shared.transport("server")?));
    server_config.token_key(config.keys.token.clone());
    let ledger = Arc::new(ledger::Ledger::default());
    let board = config.metrics.map(|_| {
        Arc::new(metrics::Board::new(
            config.workers,
            ledger.clone(),
            certificates.clone(),
            config.access_log.clone(),
        ))
    });
    let shared = worker::Shared {
        root: root.map(|r| Arc::new(crate::disk::Root::new(&r))),
        server_config: Arc::new(server_config),
        layout,
        ledger,
        config,
        board,
    };
    Ok((shared, certificates))
}

/// A bound server, ready to [`run`](Self::run): its workers are running, each on its own
/// thread, and answer from the moment `bind` returns.
#[derive(Debug)]
pub struct Server {
    workers: Workers,
    addrs: Vec<SocketAddr>,
    certificates: Certificates,
    /// Dropped after the workers: a scrape never finds them half gone.
    metrics: Option<metrics::MetricsServer>,
}

impl Server {
    /// Binds every listen address (with several workers, a socket per worker on each, steered
    /// by connection ID, or one socket read by a dispatcher: [`ServerConfig::steering`]) and
    /// starts the workers. Needs no runtime: each worker makes its own.
    ///
    /// # Errors
    /// A bind failure (port in use), a missing root, a bad certificate or key, a worker
    /// count that cannot work, [`Steering::Bpf`] where the steering program cannot be
    /// attached, a worker that failed to start.
    pub fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        let (shared, certificates) = prepare(config)?;
        // Refused at start, before anything else binds, if it cannot listen.
        let metrics = match (shared.config.metrics, &shared.board) {
            (Some(addr), Some(board)) => Some(metrics::MetricsServer::start(addr, board.clone())?),
            _ => None,
        };
        let sockets = steering::bind(
            &shared.config.listen,
            &shared.layout,
            shared.config.steering,
        )?;
        let addrs = sockets.addrs.clone();
        let workers = Workers::start(sockets, shared)?;
        Ok(Self {
            workers,
            addrs,
            certificates,
            metrics,
        })
    }

    /// The bound addresses (the real ports when binding port 0).
    #[must_use]
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.addrs.clone()
    }

    /// The certificate chain served to a client whose name no certificate fits (the first).
    #[must_use]
    pub fn certificate(&self) -> Vec<CertificateDer<'static>> {
        self.certificates.default_chain()
    }

    /// Where the metrics endpoint listens, with [`ServerConfig::metrics`].
    #[must_use]
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
            .as_ref()
            .map(metrics::MetricsServer::local_addr)
    }

    /// How datagrams reach the workers.
    #[must_use]
    pub fn steering(&self) -> &str {
        &self.workers.steering
    }

    /// A view of the connections open now over all workers, for
    /// [`ServerHandle::open_connections`].
    fn ledger(&self) -> Arc<ledger::Ledger> {
        self.workers.ledger.clone()
    }

    /// Serves until `shutdown` completes, then closes every connection and returns the
    /// workers' reports, added up (and each in [`ServerReport::workers`]).
    ///
    /// # Errors
    /// A worker that failed or panicked, at once (the others are stopped first): a server
    /// never goes on with fewer workers than it was started with, since datagrams steered to
    /// the missing one would be lost.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<ServerReport, ServerError> {
        self.workers.run(shutdown).await
    }
}
