//! Command lines of `neqo-server` and `neqo-client` (also run by `neqo-loopback`).

use std::{
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::{Context as _, bail};
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
    /// Datagrams per receive syscall and messages per send syscall (1 to 128).
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
    /// Idle timeout in seconds (0.001 to 86400).
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    pub idle_timeout: f64,
    /// Write one qlog file per connection here (created at start; must be writable).
    #[arg(long)]
    pub qlog_dir: Option<PathBuf>,
    /// Print statistics (the server: periodically and on exit).
    #[arg(long)]
    pub stats: bool,
    /// Write a JSON report to this file on exit (checked for writing at start).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

mod checks;

use checks::check_positive;
pub use checks::{
    MAX_IDLE_TIMEOUT, MAX_REQUESTS, MAX_STATS_INTERVAL, MAX_STREAM_BYTES, MIN_IDLE_TIMEOUT,
    MIN_STATS_INTERVAL, SUPPORTED_ALPNS, check_alpn, check_batch_size, check_seconds,
    check_stream_bytes, check_writable_dir, check_writable_file,
};

fn parse_io(s: &str) -> Result<IoMode, String> {
    s.parse()
}

impl IoArgs {
    /// Refuses settings that cannot work: the values first, then `--qlog-dir` (created here)
    /// and `--json`.
    ///
    /// # Errors
    /// The first bad setting, naming its flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        check_batch_size(self.batch_size)?;
        self.idle_timeout()?;
        if let Some(dir) = &self.qlog_dir {
            check_writable_dir("--qlog-dir", dir)?;
        }
        if let Some(path) = &self.json {
            check_writable_file("--json", path)?;
        }
        Ok(())
    }

    fn idle_timeout(&self) -> anyhow::Result<Duration> {
        check_seconds(
            "--idle-timeout",
            self.idle_timeout,
            MIN_IDLE_TIMEOUT,
            MAX_IDLE_TIMEOUT,
        )
    }

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
    /// An idle timeout out of range.
    pub fn transport(&self) -> anyhow::Result<TransportOptions> {
        Ok(TransportOptions {
            idle_timeout: self.idle_timeout()?,
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
    /// ALPN to offer (repeatable or comma-separated): hq-interop, perf.
    #[arg(long, value_delimiter = ',', default_values_t = [ALPN_HQ.to_owned(), ALPN_PERF.to_owned()])]
    pub alpn: Vec<String>,
    /// Refuse connections beyond this many (CONNECTION_REFUSED); at least 1.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Seconds between periodic --stats lines (0.1 to 86400; default 5); needs --stats.
    #[arg(long, allow_negative_numbers = true)]
    pub stats_interval: Option<f64>,
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
    /// Requests per URL (at least 1; at most 1000000 per connection, all URLs together).
    #[arg(short = 'n', long, default_value_t = 1)]
    pub requests: usize,
    /// All requests at once on one connection (up to the peer's stream limit).
    #[arg(long)]
    pub parallel: bool,
    /// Sequential connections, each making every request (at least 1).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// `hq-interop` or `perf`.
    #[arg(long, default_value = ALPN_HQ)]
    pub alpn: String,
    /// perf: bytes to download per request (K/M/G suffixes; at most 2^62-1).
    #[arg(long, value_parser = parse_size, default_value = "0")]
    pub download: u64,
    /// perf: bytes to upload per request (K/M/G suffixes; at most 2^62-1).
    #[arg(long, value_parser = parse_size, default_value = "0")]
    pub upload: u64,
    /// hq-interop: save bodies here (`/N` bodies are verified either way).
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

/// The default `--stats-interval`, in seconds.
const DEFAULT_STATS_INTERVAL: f64 = 5.0;

impl ServerArgs {
    /// Refuses settings that cannot work (see [`IoArgs::validate`], which this runs last).
    ///
    /// # Errors
    /// The first bad setting, naming its flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.alpn.is_empty() {
            bail!(
                "--alpn: none given (supported: {})",
                SUPPORTED_ALPNS.join(", ")
            );
        }
        for a in &self.alpn {
            check_alpn("--alpn", a)?;
        }
        if let Some(n) = self.max_connections {
            check_positive("--max-connections", n)?;
        }
        if let Some(s) = self.stats_interval
            && !self.io.stats
        {
            bail!("--stats-interval {s}: only with --stats");
        }
        self.stats_interval()?;
        self.io.validate()
    }

    fn stats_interval(&self) -> anyhow::Result<Duration> {
        check_seconds(
            "--stats-interval",
            self.stats_interval.unwrap_or(DEFAULT_STATS_INTERVAL),
            MIN_STATS_INTERVAL,
            MAX_STATS_INTERVAL,
        )
    }

    /// `--alpn` without repeats, in the order given.
    fn alpns(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for a in &self.alpn {
            if !v.contains(a) {
                v.push(a.clone());
            }
        }
        v
    }
}

impl ClientArgs {
    /// Refuses settings that cannot work (see [`IoArgs::validate`]; `--output-dir` is created
    /// last).
    ///
    /// # Errors
    /// The first bad setting, naming its flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        check_alpn("--alpn", &self.alpn)?;
        check_positive("-n/--requests", self.requests)?;
        check_positive("--connections", self.connections)?;
        let total = self.requests.saturating_mul(self.urls.len());
        if total > MAX_REQUESTS {
            bail!(
                "-n/--requests {}: {total} requests per connection ({} URL{}), at most {MAX_REQUESTS}",
                self.requests,
                self.urls.len(),
                if self.urls.len() == 1 { "" } else { "s" }
            );
        }
        check_stream_bytes("--download", self.download)?;
        check_stream_bytes("--upload", self.upload)?;
        let perf = self.alpn == ALPN_PERF;
        if !perf {
            for (flag, n) in [("--download", self.download), ("--upload", self.upload)] {
                if n != 0 {
                    bail!("{flag} {n}: only with --alpn {ALPN_PERF}");
                }
            }
        }
        if perf && let Some(dir) = &self.output_dir {
            bail!(
                "--output-dir {}: only with --alpn {ALPN_HQ} (perf bodies are not saved)",
                dir.display()
            );
        }
        self.io.validate()?;
        if let Some(dir) = &self.output_dir {
            check_writable_dir("--output-dir", dir)?;
        }
        Ok(())
    }
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
    args.validate()?;
    let identity = match (&args.cert, &args.key) {
        (Some(c), Some(k)) => Some(Identity::from_pem_files(c, k)?),
        _ => None,
    };
    let interval = args.stats_interval()?;
    let config = ServerConfig {
        listen: args.listen.clone(),
        root: args.root.clone(),
        identity,
        alpns: args.alpns(),
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
    args.validate()?;
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
    // Ctrl-C (or SIGTERM) cancels what is still open and closes the connection.
    let report = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async { client::run_until(config, shutdown_signal()?).await })?;
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
    use super::{
        checks::tests::{refused, tmp},
        *,
    };

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("50M"), Ok(50 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
    }

    fn server(args: &[&str]) -> anyhow::Result<()> {
        use clap::Parser as _;
        ServerArgs::try_parse_from(["neqo-server"].iter().chain(args))?.validate()
    }

    fn client(args: &[&str]) -> anyhow::Result<()> {
        use clap::Parser as _;
        ClientArgs::try_parse_from(["neqo-client", "https://127.0.0.1:9/1"].iter().chain(args))?
            .validate()
    }

    #[test]
    fn server_settings() {
        assert!(server(&[]).is_ok());
        for ok in [
            &["--idle-timeout", "0.5"][..],
            &["--alpn", "perf,perf,hq-interop"],
            &["--max-connections", "1"],
            &["--stats", "--stats-interval", "0.1"],
            &["--stats", "--stats-interval", "86400"],
            &["--batch-size", "128"],
        ] {
            assert!(server(ok).is_ok(), "{ok:?}: {:?}", server(ok));
        }
        for (args, flag) in [
            (&["--idle-timeout", "0"][..], "--idle-timeout 0"),
            (&["--idle-timeout", "-1"], "--idle-timeout -1"),
            (&["--idle-timeout", "NaN"], "--idle-timeout NaN"),
            (&["--idle-timeout", "inf"], "--idle-timeout inf"),
            (&["--alpn", "h3"], "--alpn \"h3\""),
            (&["--alpn", ""], "--alpn \"\""),
            (&["--alpn", "perf,"], "--alpn \"\""),
            (&["--max-connections", "0"], "--max-connections 0"),
            (&["--stats", "--stats-interval", "0"], "--stats-interval 0"),
            (
                &["--stats", "--stats-interval", "0.09"],
                "--stats-interval 0.09",
            ),
            (
                &["--stats", "--stats-interval", "-1"],
                "--stats-interval -1",
            ),
            (
                &["--stats", "--stats-interval", "inf"],
                "--stats-interval inf",
            ),
            (
                &["--stats-interval", "1"],
                "--stats-interval 1: only with --stats",
            ),
            (&["--batch-size", "0"], "--batch-size 0"),
            (&["--batch-size", "129"], "--batch-size 129"),
        ] {
            refused(server(args), flag);
        }
    }

    #[test]
    fn server_alpns_deduplicated() {
        use clap::Parser as _;
        let a = ServerArgs::try_parse_from(["s", "--alpn", "perf,hq-interop", "--alpn", "perf"])
            .unwrap();
        assert_eq!(a.alpns(), ["perf", "hq-interop"]);
    }

    #[test]
    fn client_settings() {
        assert!(client(&[]).is_ok());
        let max = MAX_STREAM_BYTES.to_string();
        for ok in [
            &["-n", "1000000"][..],
            &["--connections", "1"],
            &["--alpn", "perf", "--download", &max, "--upload", &max],
            &["--alpn", "perf", "--download", "0", "--upload", "0"],
            &["--download", "0"],
            &["--idle-timeout", "86400", "--batch-size", "1"],
        ] {
            assert!(client(ok).is_ok(), "{ok:?}: {:?}", client(ok));
        }
        let over = (MAX_STREAM_BYTES + 1).to_string();
        for (args, flag) in [
            (&["--connections", "0"][..], "--connections 0"),
            (&["-n", "0"], "-n/--requests 0"),
            (&["--requests", "0"], "-n/--requests 0"),
            (&["-n", "1000001"], "-n/--requests 1000001"),
            (&["--alpn", "h3"], "--alpn \"h3\""),
            (&["--alpn", ""], "--alpn \"\""),
            (&["--download", "1"], "--download 1: only with --alpn perf"),
            (&["--upload", "1K"], "--upload 1024: only with --alpn perf"),
            (&["--alpn", "perf", "--download", &over], "--download "),
            (&["--alpn", "perf", "--upload", &over], "--upload "),
            (&["--alpn", "perf", "--output-dir", "x"], "--output-dir x"),
            (&["--idle-timeout", "86401"], "--idle-timeout 86401"),
            (&["--batch-size", "1000"], "--batch-size 1000"),
        ] {
            refused(client(args), flag);
        }
        // -n counts per URL: two URLs halve it.
        use clap::Parser as _;
        let two = |n: &str| {
            ClientArgs::try_parse_from(["c", "https://a:1/", "https://a:1/x", "-n", n])
                .unwrap()
                .validate()
        };
        assert!(two("500000").is_ok());
        refused(two("500001"), "-n/--requests 500001");
    }

    /// Values are checked before anything is created: a refused setting leaves no directory.
    #[test]
    fn values_before_paths() {
        let dir = tmp("not-created");
        let d = dir.to_str().unwrap();
        refused(
            server(&["--qlog-dir", d, "--idle-timeout", "0"]),
            "--idle-timeout",
        );
        refused(
            client(&["--output-dir", d, "--connections", "0"]),
            "--connections",
        );
        refused(
            client(&["--output-dir", d, "--batch-size", "0"]),
            "--batch-size",
        );
        assert!(!dir.exists());
    }
}
