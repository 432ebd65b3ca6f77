//! `neqo-server`'s command line.

use std::{io::Write as _, net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Context as _, bail};
use neqo_driver::tls::{self, Certificates, Identity};
use neqo_protocols::{ALPN_HQ, ALPN_PERF};
use neqo_server_core::{
    Budget, DRAIN_TIMEOUT, LayoutError, Limits, MAX_DRAIN_TIMEOUT, MAX_WORKERS, Server,
    ServerConfig, ServerError, ServerId, ServerKeys, ServerReport, Steering,
};

use clap::CommandFactory as _;

use super::{
    FLEET, IoArgs, LIMITS, LISTENING, MAX_STATS_INTERVAL, MIN_IDLE_TIMEOUT, MIN_STATS_INTERVAL,
    OBSERVABILITY, RetryPolicyArg, SUPPORTED_ALPNS, SteeringArg, check_alpn, check_count,
    check_positive, check_seconds, init_logging_verbose, layers, parse_size, shutdown_signal,
    write_json,
};

/// `neqo-server` flags.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "neqo-server",
    version,
    about = "QUIC server of hq-interop, HTTP/3 and perf on batched UDP I/O"
)]
pub struct ServerArgs {
    /// Read settings from this TOML file: its keys are the long flag names (`listen =
    /// "[::]:443"`, `alpn = ["h3"]`, `keylog = true`). A flag overrides an environment
    /// variable (`NEQO_SERVER_LISTEN` for --listen), which overrides the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log more: -v info, -vv debug, -vvv trace (over RUST_LOG, which takes a full filter).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Address to listen on (repeatable); `[::]` is dual-stack.
    #[arg(long, default_value = "[::]:4433", help_heading = LISTENING)]
    pub listen: Vec<SocketAddr>,
    /// Serve files from this directory (`/N`, digits only, is always generated).
    #[arg(long, help_heading = LISTENING)]
    pub root: Option<PathBuf>,
    /// PEM certificate chain (with --tls-key); else a self-signed one for localhost.
    /// Repeatable: each client gets the first whose certificate names the server it asked
    /// for (SNI), else the first. SIGHUP reads the files again (and --config's settings of
    /// them), keeping the old ones if any is refused.
    #[arg(long = "tls-cert", visible_alias = "cert", value_name = "PEM", requires = "key", help_heading = LISTENING)]
    pub cert: Vec<PathBuf>,
    /// PEM private key of the certificate given at the same place (with --tls-cert).
    #[arg(long = "tls-key", visible_alias = "key", value_name = "PEM", requires = "cert", help_heading = LISTENING)]
    pub key: Vec<PathBuf>,
    /// ALPN to offer (repeatable or comma-separated): hq-interop, perf, h3 (HTTP/3: GET and
    /// HEAD of files under --root and of /N; a POST is answered with its body's length).
    #[arg(long, value_delimiter = ',', default_values_t = [ALPN_HQ.to_owned(), ALPN_PERF.to_owned()], help_heading = LISTENING)]
    pub alpn: Vec<String>,
    /// Refuse connections beyond this many, half-open ones included (CONNECTION_REFUSED); at
    /// least 1.
    #[arg(long, help_heading = LIMITS)]
    pub max_connections: Option<usize>,
    /// Address validation: `auto` sends a Retry to new clients once --retry-half-open
    /// handshakes are in progress or more than --retry-rate new connections arrive a second;
    /// `always`; `never`.
    #[arg(long, value_enum, default_value_t = RetryPolicyArg::Auto, help_heading = LIMITS)]
    pub retry: RetryPolicyArg,
    /// `--retry auto`: Retry from this many handshakes in progress on (at least 1).
    #[arg(long, default_value_t = Limits::default().retry_half_open, help_heading = LIMITS)]
    pub retry_half_open: usize,
    /// `--retry auto`: Retry while more new connections than this arrive a second.
    #[arg(long, default_value_t = Limits::default().retry_rate, help_heading = LIMITS)]
    pub retry_rate: u32,
    /// Refuse new connections while this many handshakes are in progress (at least 1).
    #[arg(long, default_value_t = Limits::default().max_half_open, help_heading = LIMITS)]
    pub max_half_open: usize,
    /// Close a connection whose handshake has not completed after this many seconds (at most
    /// the idle timeout; default 5, or the idle timeout if shorter).
    #[arg(long, allow_negative_numbers = true, help_heading = LIMITS)]
    pub handshake_timeout: Option<f64>,
    /// A file with the secret (32 to 4096 bytes) the stateless-reset and Retry-token keys are
    /// derived from, created with 32 random bytes if missing: a restarted server (or another
    /// one serving the address) with the same file has the same keys. On Unix it must be a
    /// regular file with one link, not a symbolic link, owned by this user, with mode 0600 or
    /// stricter, in a directory only this user (or root) can write (whoever reads or
    /// replaces it can forge the server's resets and Retry tokens); its contents must look
    /// random (not one repeated byte, nor too few distinct values). Others are refused.
    #[arg(long = "secret-file", visible_alias = "key-file", value_name = "FILE", help_heading = FLEET)]
    pub key_file: Option<PathBuf>,
    /// The most received data all connections together may make the server hold (K/M/G; at
    /// least 1M): every connection's receive window comes out of it, from 64 KiB to 64 MiB,
    /// and a connection that cannot get 64 KiB is refused.
    #[arg(long = "window-budget", visible_alias = "recv-budget", value_name = "BYTES", value_parser = parse_size, default_value = "1G", help_heading = LIMITS)]
    pub recv_budget: u64,
    /// Seconds between periodic --stats lines (0.1 to 86400; default 5); needs --stats.
    #[arg(long, allow_negative_numbers = true, help_heading = OBSERVABILITY)]
    pub stats_interval: Option<f64>,
    /// Worker threads, datagrams steered to them by connection ID (1 to 256; default: the
    /// cores available, on Linux; 1 elsewhere, where only --steering channel is available).
    #[arg(long, help_heading = FLEET)]
    pub workers: Option<usize>,
    /// How datagrams reach the workers: `bpf`, a socket per worker and the kernel's steering
    /// program (Linux; refuse to start without it); `channel`, one socket read by a
    /// dispatcher thread that hands datagrams to the workers over bounded channels; `auto`,
    /// bpf where the program attaches, else channel.
    #[arg(long, value_enum, default_value_t = SteeringArg::Auto, help_heading = FLEET)]
    pub steering: SteeringArg,
    /// QUIC-LB server ID (1 to 11 bytes in hex, e.g. 0a1b): every connection ID carries it,
    /// in the clear, so that a QUIC-LB load balancer routes the connection to this server.
    #[arg(long, help_heading = FLEET)]
    pub server_id: Option<String>,
    /// At shutdown (SIGINT, SIGTERM), HTTP/3 connections send GOAWAY and finish the requests
    /// they accepted for at most this many seconds (0 to 600; 0: close every connection at
    /// once), then everything is closed.
    #[arg(long, allow_negative_numbers = true, help_heading = FLEET)]
    pub drain_timeout: Option<f64>,
    /// Retire each connection ID and give the client a new one after this many seconds
    /// (0.1 to 86400; default: never).
    #[arg(long, allow_negative_numbers = true, help_heading = FLEET)]
    pub cid_lifetime: Option<f64>,
    /// Serve the counters for Prometheus (OpenMetrics text, `GET /metrics`) on this TCP
    /// address, e.g. 127.0.0.1:9464; each worker's at most a second old.
    #[arg(long, help_heading = OBSERVABILITY)]
    pub metrics: Option<SocketAddr>,
    /// Write the TLS secrets to the file SSLKEYLOGFILE names, for a packet capture to be
    /// decrypted (Wireshark); without this flag the variable is ignored.
    #[arg(long, help_heading = OBSERVABILITY)]
    pub keylog: bool,
    #[command(flatten)]
    pub io: IoArgs,
}

/// The default `--stats-interval`, in seconds.
const DEFAULT_STATS_INTERVAL: f64 = 5.0;

/// The default `--workers`: a worker per available core where the kernel steers datagrams to
/// workers (Linux), else one: elsewhere a dispatcher thread would hand them over, which costs
/// more per datagram (measured in `docs/records/server.md`), so more workers are asked for.
fn default_workers() -> usize {
    if cfg!(target_os = "linux") {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS))
    } else {
        1
    }
}

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
        check_positive("--retry-half-open", self.retry_half_open)?;
        check_positive("--max-half-open", self.max_half_open)?;
        if self.recv_budget < 1 << 20 {
            bail!(
                "--window-budget {}: must be at least 1M (1048576 bytes)",
                self.recv_budget
            );
        }
        self.io.idle_timeout()?;
        self.limits()?;
        if let Some(s) = self.stats_interval
            && !self.io.stats
        {
            bail!("--stats-interval {s}: only with --stats");
        }
        self.stats_interval()?;
        self.workers()?;
        self.cid_lifetime()?;
        self.server_id()?;
        self.io.validate()
    }

    /// `--workers`, or the default.
    fn workers(&self) -> anyhow::Result<usize> {
        let Some(n) = self.workers else {
            return Ok(default_workers());
        };
        check_count(
            "--workers",
            n,
            MAX_WORKERS,
            "one connection-ID byte tells them apart",
        )?;
        check_steering(self.steering.into(), n, cfg!(target_os = "linux"))?;
        Ok(n)
    }

    fn server_id(&self) -> anyhow::Result<Option<ServerId>> {
        self.server_id
            .as_deref()
            .map(|s| {
                s.parse()
                    .map_err(|e: String| anyhow::anyhow!("--server-id {s}: {e}"))
            })
            .transpose()
    }

    fn cid_lifetime(&self) -> anyhow::Result<Option<Duration>> {
        self.cid_lifetime
            .map(|s| check_seconds("--cid-lifetime", s, MIN_STATS_INTERVAL, MAX_STATS_INTERVAL))
            .transpose()
    }

    /// The receive budget; its floor kept for `--max-connections` connections if given.
    fn budget(&self) -> Budget {
        Budget {
            bytes: self.recv_budget,
            floor_connections: self
                .max_connections
                .map_or(Budget::default().floor_connections, |n| n as u64),
        }
    }

    /// The admission limits; the handshake timeout within the idle timeout.
    fn limits(&self) -> anyhow::Result<Limits> {
        let idle = self.io.idle_timeout()?;
        let handshake_timeout = match self.handshake_timeout {
            Some(secs) => check_seconds(
                "--handshake-timeout",
                secs,
                MIN_IDLE_TIMEOUT,
                idle.as_secs_f64(),
            )?,
            None => Limits::default().handshake_timeout.min(idle),
        };
        Ok(Limits {
            retry: self.retry.into(),
            retry_half_open: self.retry_half_open,
            retry_rate: self.retry_rate,
            max_half_open: self.max_half_open,
            max_connections: self.max_connections,
            handshake_timeout,
        })
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
    pub(super) fn alpns(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for a in &self.alpn {
            if !v.contains(a) {
                v.push(a.clone());
            }
        }
        v
    }
}

/// Runs `neqo-server` until SIGINT or SIGTERM.
#[must_use]
pub fn server_main(args: ServerArgs) -> ExitCode {
    let again = args.clone();
    finish(serve(args, Box::new(move || Ok(again.clone()))).map_err(|e| format!("{e:#}")))
}

/// `neqo-server`'s `main`: its settings from the flags, the environment (`NEQO_SERVER_*`) and
/// `--config`, logging as `-v` or `RUST_LOG` says; then [`server_main`].
#[must_use]
pub fn server_from_env() -> ExitCode {
    let cmd = layers::with_env(ServerArgs::command(), ENV_PREFIX);
    let parsed = match layers::parse::<ServerArgs>(&cmd, std::env::args_os().collect()) {
        Ok(parsed) => parsed,
        Err(layers::LayerError::Clap(e)) => e.exit(),
        Err(layers::LayerError::File(e)) => return finish(Err(format!("{e:#}"))),
    };
    init_logging_verbose(parsed.args.verbose, "warn");
    // The settings as at start: the same flags and variables, the file read again.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let reread: Reread = Box::new(
        move || match layers::parse::<ServerArgs>(&cmd, argv.clone()) {
            Ok(parsed) => Ok(parsed.args),
            Err(layers::LayerError::Clap(e)) => Err(anyhow::anyhow!("{}", e.render())),
            Err(layers::LayerError::File(e)) => Err(e),
        },
    );
    finish(serve(parsed.args.clone(), reread).map_err(|e| parsed.locate(format!("{e:#}"))))
}

/// The prefix of the variables that set `neqo-server`'s flags.
pub const ENV_PREFIX: &str = "NEQO_SERVER_";

/// Runs `run`, replacing the certificates on each SIGHUP with those of the settings read
/// again (Unix; elsewhere there is no SIGHUP), and saying on stderr what it did: a refused
/// reload leaves the certificates served as they were.
async fn reloading(
    run: impl Future<Output = Result<ServerReport, ServerError>>,
    certificates: &Certificates,
    reread: &Reread,
) -> Result<ServerReport, ServerError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangup = signal(SignalKind::hangup()).map_err(|source| ServerError::Io {
            what: "the SIGHUP handler",
            source,
        })?;
        tokio::pin!(run);
        loop {
            tokio::select! {
                report = &mut run => return report,
                Some(()) = hangup.recv() => {
                    let reloaded = certificates.reload(|| {
                        let ids = identities(&reread()?)?;
                        if ids.is_empty() {
                            bail!("no --tls-cert to serve (the self-signed one is not made again)");
                        }
                        Ok(ids)
                    });
                    match reloaded {
                        Ok(n) => eprintln!("neqo-server: SIGHUP: serving {n} certificate(s) read again"),
                        Err(e) => eprintln!(
                            "neqo-server: SIGHUP: certificates not reloaded, still serving the old: {e:#}"
                        ),
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (certificates, reread);
        run.await
    }
}

fn finish(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("neqo-server: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Refuses `--steering bpf` with several workers where there is no steering program (`linux`
/// false); the kernel's refusal of it on Linux is found when binding.
fn check_steering(steering: Steering, workers: usize, linux: bool) -> anyhow::Result<()> {
    if steering == Steering::Bpf && workers > 1 && !linux {
        bail!(
            "--steering bpf: the kernel's steering program needs Linux; use --steering auto or \
             channel, or --workers 1"
        );
    }
    Ok(())
}

/// The server's refusal in the words of the flag that set what it refused, its causes kept
/// (`{:#}` prints them).
fn flagged(e: ServerError) -> anyhow::Error {
    match e {
        ServerError::Root { path, source } => anyhow::Error::new(source)
            .context(format!("--root {}: cannot serve from it", path.display())),
        ServerError::Layout(LayoutError::Workers(_)) => anyhow::Error::new(e).context("--workers"),
        ServerError::Layout(LayoutError::ServerIdLength(_)) => {
            anyhow::Error::new(e).context("--server-id")
        }
        ServerError::KeylogUnset => anyhow::anyhow!(
            "--keylog: SSLKEYLOGFILE is not set (it names the file the secrets go to)"
        ),
        ServerError::Metrics { addr, source } => {
            anyhow::Error::new(source).context(format!("--metrics {addr}: cannot listen"))
        }
        ServerError::SteeringRefused { .. } => {
            anyhow::anyhow!("--steering bpf: {e}; use --steering auto or channel")
        }
        _ => anyhow::Error::new(e),
    }
}

/// The certificates and keys `--tls-cert` and `--tls-key` name, read and each key checked
/// against its certificate; none without them.
fn identities(args: &ServerArgs) -> anyhow::Result<Vec<Identity>> {
    if args.cert.len() != args.key.len() {
        bail!(
            "--tls-cert given {} times, --tls-key {}: each certificate needs its key",
            args.cert.len(),
            args.key.len()
        );
    }
    args.cert
        .iter()
        .zip(&args.key)
        .map(|(c, k)| {
            let at = || format!("--tls-cert {} --tls-key {}", c.display(), k.display());
            let identity = Identity::from_pem_files(c, k).with_context(at)?;
            Certificates::new(std::slice::from_ref(&identity)).with_context(at)?;
            Ok(identity)
        })
        .collect()
}

/// Where SIGHUP gets the certificates from: the settings read again, as at start.
type Reread = Box<dyn Fn() -> anyhow::Result<ServerArgs>>;

fn serve(args: ServerArgs, reread: Reread) -> anyhow::Result<()> {
    args.validate()?;
    let identities = identities(&args)?;
    let certificates = if identities.is_empty() {
        eprintln!(
            "neqo-server: warning: serving a self-signed certificate for localhost, which \
             clients must be told to trust; --tls-cert and --tls-key give one they trust"
        );
        Certificates::new(&[Identity::self_signed()?])?
    } else {
        Certificates::new(&identities)?
    };
    let interval = args.stats_interval()?;
    let config = ServerConfig {
        listen: args.listen.clone(),
        root: args.root.clone(),
        certificates: Some(certificates.clone()),
        alpns: args.alpns(),
        limits: args.limits()?,
        budget: args.budget(),
        keys: match &args.key_file {
            Some(path) => ServerKeys::load_or_create(path)
                .map_err(|e| anyhow::anyhow!("--secret-file {e}"))?,
            None => ServerKeys::random(),
        },
        transport: args.io.transport()?,
        socket: args.io.socket(),
        driver: args.io.driver().with_drain(match args.drain_timeout {
            Some(secs) => check_seconds("--drain-timeout", secs, 0.0, MAX_DRAIN_TIMEOUT)?,
            None => DRAIN_TIMEOUT,
        }),
        stats_interval: args.io.stats.then_some(interval),
        workers: args.workers()?,
        steering: args.steering.into(),
        server_id: args.server_id()?,
        cid_lifetime: args.cid_lifetime()?,
        metrics: args.metrics,
        secrets: if args.keylog {
            tls::Secrets::Logged
        } else {
            tls::Secrets::Kept
        },
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = rt.block_on(async move {
        let server = Server::bind(config).map_err(flagged)?;
        let addrs: Vec<String> = server
            .local_addrs()
            .iter()
            .map(ToString::to_string)
            .collect();
        println!("neqo-server listening on {}", addrs.join(", "));
        let _ = std::io::stdout().flush();
        let run = server.run(shutdown_signal()?);
        reloading(run, &certificates, &reread)
            .await
            .map_err(flagged)
    })?;
    if args.io.stats {
        eprintln!("neqo-server exit stats: {}", report.summary());
    }
    if let Some(path) = &args.io.json {
        write_json(path, &report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ServerArgs, clap::Error> {
        use clap::Parser as _;
        ServerArgs::try_parse_from(["neqo-server"].iter().chain(args))
    }

    #[test]
    fn steering_parses() {
        assert_eq!(
            parse(&[]).unwrap().steering,
            SteeringArg::Auto,
            "the default"
        );
        for (v, want) in [
            ("auto", SteeringArg::Auto),
            ("bpf", SteeringArg::Bpf),
            ("channel", SteeringArg::Channel),
        ] {
            let a = parse(&["--workers", "2", "--steering", v]).unwrap();
            assert_eq!(a.steering, want);
            // Here (Linux) every mode passes the start checks; a kernel that refuses the
            // program is found at bind.
            if cfg!(target_os = "linux") {
                a.validate().expect(v);
            }
        }
        for bad in ["ebpf", "", "BPF-only", "1"] {
            let e = parse(&["--steering", bad]).unwrap_err().to_string();
            assert!(e.contains("--steering"), "{bad:?}: {e}");
        }
    }

    /// `--help` groups the flags by purpose; `-h` leaves out the benchmark tuning; every
    /// setting has its variable.
    #[test]
    fn help_is_grouped_and_short_help_leaves_out_tuning() {
        let mut cmd = layers::with_env(ServerArgs::command(), ENV_PREFIX);
        let long = cmd.render_long_help().to_string();
        let short = cmd.render_help().to_string();
        let at = |text: &str, what: &str| text.find(what).unwrap_or_else(|| panic!("{what}"));
        for heading in [
            LISTENING,
            LIMITS,
            FLEET,
            OBSERVABILITY,
            super::super::TUNING,
        ] {
            at(&long, &format!("{heading}:"));
        }
        assert!(at(&long, LISTENING) < at(&long, LIMITS));
        assert!(at(&long, LIMITS) < at(&long, "--window-budget"));
        assert!(at(&long, FLEET) < at(&long, "--secret-file"));
        assert!(at(&long, super::super::TUNING) < at(&long, "--batch-size"));
        assert!(!short.contains(super::super::TUNING) && !short.contains("--batch-size"));
        assert!(short.contains("--listen") && short.contains("--metrics"));
        assert!(long.contains("[env: NEQO_SERVER_WINDOW_BUDGET="), "{long}");
        assert!(long.contains("[env: NEQO_SERVER_NO_PACING="), "{long}");
        assert!(!long.contains("NEQO_SERVER_HELP") && !long.contains("NEQO_SERVER_VERBOSE"));
    }

    /// Each refusal of a setting the library reports is told in the words of its flag, once,
    /// with the library's reason kept; the rest pass through as they are.
    #[test]
    fn server_refusals_name_their_flag() {
        let io = || std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address in use");
        let addr: SocketAddr = "127.0.0.1:9090".parse().unwrap();
        for (e, want) in [
            (
                ServerError::Root {
                    path: "/srv/none".into(),
                    source: io(),
                },
                "--root /srv/none: cannot serve from it: Address in use",
            ),
            (
                ServerError::Layout(LayoutError::Workers(0)),
                "--workers: 0 workers; 1 to 256 are possible",
            ),
            (
                ServerError::Layout(LayoutError::ServerIdLength(12)),
                "--server-id: a server ID of 12 bytes; 1 to 11 are possible",
            ),
            (
                ServerError::KeylogUnset,
                "--keylog: SSLKEYLOGFILE is not set",
            ),
            (
                ServerError::Metrics { addr, source: io() },
                "--metrics 127.0.0.1:9090: cannot listen: Address in use",
            ),
            (
                ServerError::SteeringRefused {
                    workers: 2,
                    addr,
                    reason: "the kernel said no".into(),
                },
                "--steering bpf: datagrams cannot be steered to 2 workers by connection ID on \
                 127.0.0.1:9090 (the kernel said no); use --steering auto or channel",
            ),
            (ServerError::NoAlpn, "no ALPN to offer"),
        ] {
            let m = format!("{:#}", flagged(e));
            assert!(m.starts_with(want), "{m}");
            assert_eq!(m.matches("--").count(), want.matches("--").count(), "{m}");
        }
    }

    #[test]
    fn steering_bpf_is_refused_only_where_it_cannot_work() {
        for steering in [Steering::Auto, Steering::Channel] {
            for linux in [true, false] {
                check_steering(steering, 4, linux).expect("a dispatcher works anywhere");
            }
        }
        check_steering(Steering::Bpf, 4, true).expect("Linux: the bind finds out");
        check_steering(Steering::Bpf, 1, false).expect("one worker needs no steering");
        let e = check_steering(Steering::Bpf, 2, false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--steering bpf: "), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
