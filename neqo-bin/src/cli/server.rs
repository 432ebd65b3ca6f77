//! `neqo-server`'s command line.

use std::{io::Write as _, net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::bail;
use neqo_driver::tls::{self, Identity};
use neqo_protocols::{ALPN_HQ, ALPN_PERF};
use neqo_server_core::{
    Budget, DRAIN_TIMEOUT, Limits, MAX_DRAIN_TIMEOUT, MAX_WORKERS, Server, ServerConfig, ServerId,
    ServerKeys, Steering,
};

use super::{
    IoArgs, MAX_STATS_INTERVAL, MIN_IDLE_TIMEOUT, MIN_STATS_INTERVAL, RetryPolicyArg,
    SUPPORTED_ALPNS, SteeringArg, check_alpn, check_count, check_positive, check_seconds,
    parse_size, shutdown_signal, write_json,
};

/// `neqo-server` flags.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "neqo-server",
    version,
    about = "QUIC server of hq-interop, HTTP/3 and perf on batched UDP I/O"
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
    /// ALPN to offer (repeatable or comma-separated): hq-interop, perf, h3 (HTTP/3: GET and
    /// HEAD of files under --root and of /N; a POST is answered with its body's length).
    #[arg(long, value_delimiter = ',', default_values_t = [ALPN_HQ.to_owned(), ALPN_PERF.to_owned()])]
    pub alpn: Vec<String>,
    /// Refuse connections beyond this many, half-open ones included (CONNECTION_REFUSED); at
    /// least 1.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Address validation: `auto` sends a Retry to new clients once --retry-half-open
    /// handshakes are in progress or more than --retry-rate new connections arrive a second;
    /// `always`; `never`.
    #[arg(long, value_enum, default_value_t = RetryPolicyArg::Auto)]
    pub retry: RetryPolicyArg,
    /// `--retry auto`: Retry from this many handshakes in progress on (at least 1).
    #[arg(long, default_value_t = Limits::default().retry_half_open)]
    pub retry_half_open: usize,
    /// `--retry auto`: Retry while more new connections than this arrive a second.
    #[arg(long, default_value_t = Limits::default().retry_rate)]
    pub retry_rate: u32,
    /// Refuse new connections while this many handshakes are in progress (at least 1).
    #[arg(long, default_value_t = Limits::default().max_half_open)]
    pub max_half_open: usize,
    /// Close a connection whose handshake has not completed after this many seconds (at most
    /// the idle timeout; default 5, or the idle timeout if shorter).
    #[arg(long, allow_negative_numbers = true)]
    pub handshake_timeout: Option<f64>,
    /// A file with the secret (32 to 4096 bytes) the stateless-reset and Retry-token keys are
    /// derived from, created with 32 random bytes if missing: a restarted server (or another
    /// one serving the address) with the same file has the same keys. On Unix it must be a
    /// regular file with one link, not a symbolic link, owned by this user, with mode 0600 or
    /// stricter, in a directory only this user (or root) can write (whoever reads or
    /// replaces it can forge the server's resets and Retry tokens); its contents must look
    /// random (not one repeated byte, nor too few distinct values). Others are refused.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// The most received data all connections together may make the server hold (K/M/G; at
    /// least 1M): every connection's receive window comes out of it, from 64 KiB to 64 MiB,
    /// and a connection that cannot get 64 KiB is refused.
    #[arg(long, value_parser = parse_size, default_value = "1G")]
    pub recv_budget: u64,
    /// Seconds between periodic --stats lines (0.1 to 86400; default 5); needs --stats.
    #[arg(long, allow_negative_numbers = true)]
    pub stats_interval: Option<f64>,
    /// Worker threads, datagrams steered to them by connection ID (1 to 256; default: the
    /// cores available, on Linux; 1 elsewhere, where only --steering channel is available).
    #[arg(long)]
    pub workers: Option<usize>,
    /// How datagrams reach the workers: `bpf`, a socket per worker and the kernel's steering
    /// program (Linux; refuse to start without it); `channel`, one socket read by a
    /// dispatcher thread that hands datagrams to the workers over bounded channels; `auto`,
    /// bpf where the program attaches, else channel.
    #[arg(long, value_enum, default_value_t = SteeringArg::Auto)]
    pub steering: SteeringArg,
    /// QUIC-LB server ID (1 to 11 bytes in hex, e.g. 0a1b): every connection ID carries it,
    /// in the clear, so that a QUIC-LB load balancer routes the connection to this server.
    #[arg(long)]
    pub server_id: Option<String>,
    /// At shutdown (SIGINT, SIGTERM), HTTP/3 connections send GOAWAY and finish the requests
    /// they accepted for at most this many seconds (0 to 600; 0: close every connection at
    /// once), then everything is closed.
    #[arg(long, allow_negative_numbers = true)]
    pub drain_timeout: Option<f64>,
    /// Retire each connection ID and give the client a new one after this many seconds
    /// (0.1 to 86400; default: never).
    #[arg(long, allow_negative_numbers = true)]
    pub cid_lifetime: Option<f64>,
    /// Serve the counters for Prometheus (OpenMetrics text, `GET /metrics`) on this TCP
    /// address, e.g. 127.0.0.1:9464; each worker's at most a second old.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Write the TLS secrets to the file SSLKEYLOGFILE names, for a packet capture to be
    /// decrypted (Wireshark); without this flag the variable is ignored.
    #[arg(long)]
    pub keylog: bool,
    #[command(flatten)]
    pub io: IoArgs,
}

/// The default `--stats-interval`, in seconds.
const DEFAULT_STATS_INTERVAL: f64 = 5.0;

/// The default `--workers`: a worker per available core where the kernel steers datagrams to
/// workers (Linux), else one: elsewhere a dispatcher thread would hand them over, which costs
/// more per datagram (measured in `docs/server.md`), so more workers are asked for.
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
                "--recv-budget {}: must be at least 1M (1048576 bytes)",
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
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("neqo-server: error: {e:#}");
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
        limits: args.limits()?,
        budget: args.budget(),
        keys: match &args.key_file {
            Some(path) => ServerKeys::load_or_create(path)?,
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
        write_json(path, &crate::report::server_report(report))?;
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
