//! Command lines of `neqo-server` and `neqo-client` (also run by `neqo-loopback`).

use std::{
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::Context as _;
use neqo_udp::IoMode;

use crate::{
    client::{self, ClientConfig},
    server::{Server, ServerConfig},
    tls::{ALPN_HQ, ALPN_PERF, CongestionControl, Identity, TransportOptions, Trust},
};

/// I/O, pacing and transport flags both binaries take.
#[derive(Debug, Clone, clap::Args)]
pub struct IoArgs {
    /// Let the driver send whatever congestion control allows at once (see the README, "Pacing").
    #[arg(long)]
    pub no_pacing: bool,
    /// What the pacer waits on: `precise` (a timerfd on Linux, tokio's timers elsewhere) or
    /// `tokio` (tokio's 1 ms timer grid, as on other platforms).
    #[arg(long, value_enum, default_value_t = crate::pacer::PacingTimer::Precise)]
    pub pacing_timer: crate::pacer::PacingTimer,
    /// Datagrams per receive syscall and messages per send syscall.
    #[arg(long, default_value_t = neqo_udp::DEFAULT_BATCH_SIZE)]
    pub batch_size: usize,
    /// `batched` (recvmmsg/sendmmsg with GSO/GRO) or `single` (one datagram per syscall).
    #[arg(long, default_value = "batched", value_parser = parse_io)]
    pub io: IoMode,
    /// Do not use UDP GSO.
    #[arg(long)]
    pub no_gso: bool,
    /// Do not use UDP GRO.
    #[arg(long)]
    pub no_gro: bool,
    /// Congestion controller.
    #[arg(long, value_enum, default_value_t = CongestionControl::Cubic)]
    pub cc: CongestionControl,
    /// Idle timeout in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub idle_timeout: f64,
    /// Write one qlog file per connection here.
    #[arg(long)]
    pub qlog_dir: Option<PathBuf>,
    /// Print statistics (the server: periodically and on exit).
    #[arg(long)]
    pub stats: bool,
    /// Write a JSON report to this file on exit.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn parse_io(s: &str) -> Result<IoMode, String> {
    s.parse()
}

impl IoArgs {
    /// The socket configuration.
    #[must_use]
    pub fn socket(&self) -> neqo_udp::Config {
        neqo_udp::Config {
            batch_size: self.batch_size,
            gso: !self.no_gso,
            gro: !self.no_gro,
            mode: self.io,
            ..neqo_udp::Config::default()
        }
    }

    /// Transport options.
    ///
    /// # Errors
    /// A negative or absurd idle timeout.
    pub fn transport(&self) -> anyhow::Result<TransportOptions> {
        let idle = Duration::try_from_secs_f64(self.idle_timeout)
            .map_err(|_| anyhow::anyhow!("bad --idle-timeout {}", self.idle_timeout))?;
        Ok(TransportOptions {
            idle_timeout: idle,
            cc: self.cc,
            qlog_dir: self.qlog_dir.clone(),
        })
    }
}

/// A byte count: digits with an optional K, M, G (powers of 1024) suffix (`1G`, `50M`).
///
/// # Errors
/// Anything else.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("bad size {s:?} (expected e.g. 1000, 64K, 50M, 1G)"))
}

/// `neqo-server` flags.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "neqo-server",
    about = "QUIC hq-interop and perf server on batched UDP I/O"
)]
pub struct ServerArgs {
    /// Address to listen on (repeatable); `[::]` is dual-stack.
    #[arg(long, default_value = "[::]:4433")]
    pub listen: Vec<SocketAddr>,
    /// Serve files from this directory (`/N`, digits only, is always generated).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// PEM certificate chain (with --key); else a self-signed one for localhost.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key (with --cert).
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// ALPN to offer (repeatable or comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [ALPN_HQ.to_owned(), ALPN_PERF.to_owned()])]
    pub alpn: Vec<String>,
    /// Refuse connections beyond this many (CONNECTION_REFUSED).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Seconds between periodic --stats lines.
    #[arg(long, default_value_t = 5.0)]
    pub stats_interval: f64,
    #[command(flatten)]
    pub io: IoArgs,
}

/// `neqo-client` flags.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "neqo-client",
    about = "QUIC hq-interop and perf client on batched UDP I/O"
)]
pub struct ClientArgs {
    /// https://HOST:PORT/PATH (`/N` asks for N generated bytes).
    #[arg(required = true)]
    pub urls: Vec<String>,
    /// Requests per URL.
    #[arg(short = 'n', long, default_value_t = 1)]
    pub requests: usize,
    /// All requests at once on one connection (up to the peer's stream limit).
    #[arg(long)]
    pub parallel: bool,
    /// Sequential connections, each making every request.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// `hq-interop` or `perf`.
    #[arg(long, default_value = ALPN_HQ)]
    pub alpn: String,
    /// perf: bytes to download per request (K/M/G suffixes).
    #[arg(long, value_parser = parse_size, default_value = "0")]
    pub download: u64,
    /// perf: bytes to upload per request (K/M/G suffixes).
    #[arg(long, value_parser = parse_size, default_value = "0")]
    pub upload: u64,
    /// Save bodies here (`/N` bodies are verified either way).
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Do not verify the server's certificate.
    #[arg(long, conflicts_with = "ca")]
    pub insecure: bool,
    /// Trust certificates issued by this PEM CA (or this self-signed certificate).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    #[command(flatten)]
    pub io: IoArgs,
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Logs to stderr, `RUST_LOG` or warnings by default.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Runs `neqo-server` until SIGINT or SIGTERM.
#[must_use]
pub fn server_main(args: ServerArgs) -> ExitCode {
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("neqo-server: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServerArgs) -> anyhow::Result<()> {
    let identity = match (&args.cert, &args.key) {
        (Some(c), Some(k)) => Some(Identity::from_pem_files(c, k)?),
        _ => None,
    };
    let interval = Duration::try_from_secs_f64(args.stats_interval)
        .map_err(|_| anyhow::anyhow!("bad --stats-interval"))?;
    let config = ServerConfig {
        listen: args.listen.clone(),
        root: args.root.clone(),
        identity,
        alpns: args.alpn.clone(),
        max_connections: args.max_connections,
        transport: args.io.transport()?,
        socket: args.io.socket(),
        pacing: !args.io.no_pacing,
        pacing_timer: args.io.pacing_timer,
        stats_interval: args.io.stats.then_some(interval),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(async move {
        let server = Server::bind(config)?;
        let addrs: Vec<String> = server
            .local_addrs()
            .iter()
            .map(ToString::to_string)
            .collect();
        println!("neqo-server listening on {}", addrs.join(", "));
        let _ = std::io::stdout().flush();
        server.run(shutdown_signal()?).await
    })?;
    if args.io.stats {
        eprintln!("neqo-server exit stats: {}", report.summary());
    }
    if let Some(path) = &args.io.json {
        write_json(path, &report)?;
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM; elsewhere on Ctrl-C, the only stop request there is.
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

/// Runs `neqo-client`; non-zero when any request failed.
#[must_use]
pub fn client_main(args: ClientArgs) -> ExitCode {
    match fetch(&args) {
        Ok(report) if report.errors.is_empty() => ExitCode::SUCCESS,
        Ok(report) => {
            for e in &report.errors {
                eprintln!("neqo-client: error: {e}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("neqo-client: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn fetch(args: &ClientArgs) -> anyhow::Result<client::ClientReport> {
    let mut urls = Vec::new();
    for u in &args.urls {
        urls.push(url::Url::parse(u).map_err(|e| anyhow::anyhow!("bad URL {u:?}: {e}"))?);
    }
    let trust = if args.insecure {
        Trust::Insecure
    } else if let Some(ca) = &args.ca {
        Trust::Certs(crate::tls::read_certs(ca)?)
    } else {
        Trust::Nobody
    };
    let config = ClientConfig {
        urls,
        requests: args.requests,
        parallel: args.parallel,
        connections: args.connections,
        alpn: args.alpn.clone(),
        download: args.download,
        upload: args.upload,
        output_dir: args.output_dir.clone(),
        trust,
        transport: args.io.transport()?,
        socket: args.io.socket(),
        pacing: !args.io.no_pacing,
        pacing_timer: args.io.pacing_timer,
        progress: !args.no_progress,
    };
    let report = client::run_report(config)?;
    if args.io.stats {
        eprintln!("neqo-client: {}\n{}", report.summary(), report.socket);
    }
    if let Some(path) = &args.io.json {
        write_json(path, &report)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("50M"), Ok(50 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
    }
}
