//! The `hq-interop`, `perf` and HTTP/3 client.
//!
//! - [`run`], [`run_report`], [`run_async`]: a client run to completion.
//! - `app`: the [`Application`](neqo_driver::Application): connections opened at the
//!   concurrency and rate asked for, their events routed, the report added up.
//! - `requests`: one connection's requests, made, read, verified and saved (HTTP/3's through
//!   neqo-h3's `ClientSession`).
//! - `keys`: the early key update (`--key-update`).
//! - `output`: `--output-dir` bodies, written off the driver thread ([`neqo_driver::Jobs`]).
//! - `load`: the load report's latency percentiles and throughput spread; `progress`: the
//!   progress bar.
//! - [`ClientReport`]: what it did.

mod app;
mod keys;
mod load;
mod output;
mod progress;
mod report;
mod requests;

use std::{net::SocketAddr, path::PathBuf};

use anyhow::{Context as _, bail};
use url::Url;

use self::{app::ClientApp, progress::Progress};
use neqo_driver::{
    Driver, DriverConfig, TransportOptions,
    tls::{self, Trust},
};
use neqo_protocols::{
    ALPN_H3, ALPN_HQ, ALPN_PERF,
    hq::{self, Target},
};
pub use neqo_report::{ClientReport, Percentiles, Spread};

/// What a client does.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `https://HOST:PORT/PATH`; all must name the same server.
    pub urls: Vec<Url>,
    /// Requests per URL and connection.
    pub requests: usize,
    /// All requests at once (up to the peer's stream limit) instead of one after another.
    pub parallel: bool,
    /// Connections, each doing every request.
    pub connections: usize,
    /// Connections open at once, at most (1: one after another).
    pub concurrency: usize,
    /// New connections per second, at most (`None`: as fast as `concurrency` allows).
    pub rate: Option<f64>,
    /// Local sockets (ports) the connections are spread over, round robin, so that a server
    /// sees them as coming from different clients.
    pub sockets: usize,
    /// `hq-interop`, `perf` or `h3`.
    pub alpn: String,
    /// perf: bytes to ask the server for, per request.
    pub download: u64,
    /// perf: bytes to send the server, per request.
    pub upload: u64,
    /// Where response bodies go (hq-interop); `/N` bodies are verified against the pattern
    /// whether saved or not.
    pub save: Save,
    /// Whom to trust.
    pub trust: Trust,
    /// Idle timeout, congestion control, qlog.
    pub transport: TransportOptions,
    /// Socket configuration. A client's default ([`client_socket`]) takes GRO runs without
    /// a copy.
    pub socket: neqo_udp::Config,
    /// How the driver paces.
    pub driver: DriverConfig,
    /// Show a progress bar on a terminal (for transfers longer than a second).
    pub progress: bool,
    /// The TLS 1.3 cipher suites to offer, in order.
    pub cipher_suites: Vec<tls::CipherSuite>,
    /// Update the keys of each connection once, as soon as the handshake is confirmed and a
    /// response has begun to arrive (`client::keys`).
    pub key_update: bool,
    /// h3: give up on each response once this many of its body bytes have arrived
    /// (`STOP_SENDING` with `H3_REQUEST_CANCELLED`, as a browser leaving a page does): the
    /// request counts as cancelled, not failed.
    pub cancel_after: Option<u64>,
}

/// Where response bodies go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Save {
    /// Nowhere.
    #[default]
    Nothing,
    /// Each into this directory (created if missing), named after its path
    /// ([`hq::output_name`]): the first request for each name.
    Dir(PathBuf),
    /// The first request's body into this file.
    File(PathBuf),
    /// The first request's body to standard output.
    Stdout,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            requests: 1,
            parallel: false,
            connections: 1,
            concurrency: 1,
            rate: None,
            sockets: 1,
            alpn: ALPN_HQ.to_owned(),
            download: 0,
            upload: 0,
            save: Save::Nothing,
            trust: Trust::Nobody,
            transport: TransportOptions {
                keep_alive: Some(neqo_driver::CLIENT_KEEP_ALIVE),
                ..TransportOptions::default()
            },
            socket: client_socket(neqo_udp::Config::default()),
            driver: DriverConfig::default(),
            progress: false,
            cipher_suites: tls::CipherSuite::ALL.to_vec(),
            key_update: false,
            cancel_after: None,
        }
    }
}

/// `socket` as a client's: received GRO runs shared without a copy
/// ([`neqo_udp::RecvBuffers::SharedRuns`]). A client talks to a server it chose, over a few
/// connections, so what a hostile server could make it pin is one process's worth; a bulk
/// download spares a copy of every byte. (A server copies: `docs/records/performance.md`.)
#[must_use]
pub fn client_socket(socket: neqo_udp::Config) -> neqo_udp::Config {
    socket.with_recv_buffers(neqo_udp::RecvBuffers::SharedRuns)
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

/// The server a URL names: address and TLS server name. Resolves names asynchronously, so it
/// never blocks the thread.
///
/// # Errors
/// Not `https://`, no host, or a host that does not resolve.
pub async fn resolve(url: &Url) -> anyhow::Result<(SocketAddr, String)> {
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
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
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
    run_until(config, std::future::pending()).await
}

/// As [`run_async`], but once `stop` completes (Ctrl-C in `neqo-client`) the requests still
/// open are cancelled: the connection is closed, its close sent, and the report counts them
/// as failed with an "interrupted" error.
///
/// # Errors
/// As [`run_report`].
pub async fn run_until(
    mut config: ClientConfig,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<ClientReport> {
    let Some(first) = config.urls.first() else {
        bail!("no URL given");
    };
    let (remote, server_name) = resolve(first).await?;
    for u in &config.urls[1..] {
        let (r, _) = resolve(u).await?;
        if r != remote {
            bail!("all URLs must name the same server: {u} is not at {remote}");
        }
    }
    if ![ALPN_HQ, ALPN_PERF, ALPN_H3].contains(&config.alpn.as_str()) {
        bail!(
            "unknown ALPN {:?} (expected {ALPN_HQ}, {ALPN_PERF} or {ALPN_H3})",
            config.alpn
        );
    }
    if config.alpn == ALPN_H3 {
        config.transport.uni_streams = neqo_h3::UNI_STREAMS;
    }
    if let Save::Dir(dir) = config.save.clone() {
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))
        })
        .await??;
    }
    let crypto = tls::client_crypto_with(&config.trust, &config.alpn, &config.cipher_suites)?;
    // A client that only downloads sends little but ACKs, and quinn-proto probes whenever a
    // connection has nothing else to send: following the route would cost it a whole search
    // (docs/records/path-mtu.md) for nothing. One that uploads follows the route, as the server does.
    let max_mtu = config
        .transport
        .max_mtu
        .or((config.upload == 0).then_some(neqo_driver::DEFAULT_MTU_BOUND));
    config.transport.mtu_upper_bound = neqo_driver::mtu_bound(Some(remote), max_mtu);
    let local: SocketAddr = if remote.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    if config.concurrency == 0 || config.sockets == 0 || config.connections == 0 {
        bail!("connections, concurrency and sockets must be at least 1");
    }
    if let Some(rate) = config.rate
        && !(rate.is_finite() && rate > 0.0)
    {
        bail!("a connection rate must be positive, not {rate}");
    }
    let mut sockets = Vec::with_capacity(config.sockets);
    for _ in 0..config.sockets {
        sockets.push(neqo_udp::Socket::bind(local, config.socket.clone())?);
    }
    let mut driver = Driver::client(sockets, config.driver);
    let perf = config.alpn == ALPN_PERF;
    let h3 = config.alpn == ALPN_H3;
    let mut requests = Vec::new();
    for u in &config.urls {
        // HTTP/3 asks for the path with its query; the others' requests name a file.
        let path = if h3 {
            &u[url::Position::BeforePath..url::Position::AfterQuery]
        } else {
            u.path()
        };
        for _ in 0..config.requests {
            requests.push(path.to_owned());
        }
    }
    // The URL's host as it is written (an IPv6 literal in brackets) and its port.
    let authority = h3.then(|| {
        format!(
            "{}:{}",
            first.host_str().unwrap_or_default(),
            first.port().unwrap_or(443)
        )
    });
    let expected_total = if perf {
        Some(config.download * requests.len() as u64 * config.connections as u64)
    } else {
        requests
            .iter()
            .map(|p| match hq::target(p) {
                Ok(Target::Generated(n)) => Some(n),
                _ => None,
            })
            .sum::<Option<u64>>()
            .map(|n| n * config.connections as u64)
    };
    let progress = Progress::new(config.progress, expected_total);
    let io = config.socket.mode().to_string();
    let mut app = ClientApp::new(
        remote,
        server_name,
        crypto,
        config.sockets,
        perf,
        authority,
        requests,
        config,
        progress,
    );
    let interrupted = std::cell::Cell::new(false);
    let stop = async {
        stop.await;
        interrupted.set(true);
    };
    driver.run(&mut app, stop).await?;
    if interrupted.get() {
        app.interrupted();
    }
    Ok(app.finish(&mut driver, io))
}
