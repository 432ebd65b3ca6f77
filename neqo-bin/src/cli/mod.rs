//! Command lines of `neqo-server` and `neqo-client` (also run by `neqo-loopback`).

use std::{
    io::IsTerminal as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use neqo_driver::{DriverConfig, TransportOptions};
use neqo_udp::IoMode;

/// `--help`'s groups, by purpose.
const LISTENING: &str = "Listening and TLS";
const LIMITS: &str = "Limits and abuse";
const FLEET: &str = "Workers and fleet";
const OBSERVABILITY: &str = "Observability";
/// Shown by `--help`, not by `-h`.
const TUNING: &str = "Tuning for benchmarks";

/// I/O, pacing and transport flags both binaries take.
#[derive(Debug, Clone, clap::Args)]
pub struct IoArgs {
    /// Let the driver send whatever congestion control allows at once (see docs/reference/pacing.md).
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    pub no_pacing: bool,
    /// What the pacer waits on: `precise` (a timerfd on Linux, tokio's timers elsewhere) or
    /// `tokio` (tokio's 1 ms timer grid, as on other platforms).
    #[arg(long, value_enum, default_value_t = PacingTimerArg::Precise, help_heading = TUNING, hide_short_help = true)]
    pub pacing_timer: PacingTimerArg,
    /// Datagrams per receive syscall and messages per send syscall (1 to 128).
    #[arg(long, default_value_t = neqo_udp::DEFAULT_BATCH_SIZE, help_heading = TUNING, hide_short_help = true)]
    pub batch_size: usize,
    /// `batched` (recvmmsg/sendmmsg with GSO/GRO) or `single` (one datagram per syscall).
    #[arg(long, default_value = "batched", value_parser = parse_io, help_heading = TUNING, hide_short_help = true)]
    pub io: IoMode,
    /// Do not use UDP GSO.
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    pub no_gso: bool,
    /// Do not use UDP GRO.
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    pub no_gro: bool,
    /// Congestion controller.
    #[arg(long, value_enum, default_value_t = CcArg::Cubic, help_heading = TUNING, hide_short_help = true)]
    pub cc: CcArg,
    /// Idle timeout in seconds (0.001 to 86400).
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true, help_heading = LIMITS)]
    pub idle_timeout: f64,
    /// The most UDP payload path MTU discovery probes for (1200 to 65527 bytes), within what
    /// the route to the peer carries: 65527 means as much as the route carries. Default: the
    /// route's, up to 8972 (a jumbo frame), on the side that sends the data (the server, and
    /// a client that uploads); 1452 on a client that only downloads and where the route is
    /// not known.
    #[arg(long = "max-udp-payload", visible_alias = "max-mtu", value_name = "BYTES", help_heading = TUNING, hide_short_help = true)]
    pub max_mtu: Option<u64>,
    /// Ask the peer to acknowledge every N ack-eliciting packets (1 to 1000; default: every
    /// second, as RFC 9000 has it) and at the latest after 2 ms, through the ACK frequency
    /// extension (peers without it ignore this): fewer ACKs for this side to process when it
    /// sends much (see docs/records/many-connections.md).
    #[arg(long, help_heading = TUNING, hide_short_help = true)]
    pub ack_every: Option<u64>,
    /// Each socket's receive buffer (K/M/G; 64K to 1G; default 4M): what the kernel holds for
    /// us while we are busy, past which it drops. Above `net.core.rmem_max` only with
    /// `CAP_NET_ADMIN` (root); otherwise the cap stands.
    #[arg(long = "socket-recv-buffer", visible_alias = "recv-buffer", value_name = "BYTES", value_parser = parse_size, help_heading = TUNING, hide_short_help = true)]
    pub recv_buffer: Option<u64>,
    /// Write one qlog file per connection here (created at start; must be writable).
    #[arg(long, help_heading = OBSERVABILITY)]
    pub qlog_dir: Option<PathBuf>,
    /// Print statistics (the server: periodically and on exit).
    #[arg(long, help_heading = OBSERVABILITY)]
    pub stats: bool,
    /// Write a JSON report to this file on exit (checked for writing at start).
    #[arg(long, help_heading = OBSERVABILITY)]
    pub json: Option<PathBuf>,
}

mod checks;
mod choices;
mod layers;
mod os;
pub use choices::{CcArg, CipherSuiteArg, PacingTimerArg, RetryPolicyArg, SteeringArg};
mod client;
mod server;

pub use checks::{
    MAX_IDLE_TIMEOUT, MAX_REQUESTS, MAX_STATS_INTERVAL, MAX_STREAM_BYTES, MIN_IDLE_TIMEOUT,
    MIN_STATS_INTERVAL, SUPPORTED_ALPNS, check_alpn, check_batch_size, check_seconds,
    check_stream_bytes, check_writable_dir, check_writable_file,
};
use checks::{
    check_count, check_dir_could_be_written, check_file_could_be_written, check_positive,
};
pub use client::{CLIENT_ENV_PREFIX, ClientArgs, client_from_env, client_main};
pub use server::{
    AccessLogFormatArg, ENV_PREFIX as SERVER_ENV_PREFIX, ServerArgs, server_from_env, server_main,
};

/// The most packets `--ack-every` may let a peer leave unacknowledged: beyond a few hundred
/// (a GSO run is at most 64) ACKs would only come from the 2 ms timer.
const MAX_ACK_EVERY: u64 = 1000;

fn parse_io(s: &str) -> Result<IoMode, neqo_udp::ParseIoModeError> {
    s.parse()
}

impl IoArgs {
    /// Refuses settings that cannot work: the values first, then `--qlog-dir` (created here)
    /// and `--json`.
    ///
    /// # Errors
    /// The first bad setting, naming its flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_values()?;
        self.make_paths()
    }

    /// The values' own checks, which touch nothing.
    fn validate_values(&self) -> anyhow::Result<()> {
        check_batch_size(self.batch_size)?;
        self.idle_timeout()?;
        self.max_mtu()?;
        self.ack_every()?;
        self.recv_buffer()?;
        Ok(())
    }

    /// Creates `--qlog-dir` and checks that `--json` can be written.
    fn make_paths(&self) -> anyhow::Result<()> {
        if let Some(dir) = &self.qlog_dir {
            check_writable_dir("--qlog-dir", dir)?;
        }
        if let Some(path) = &self.json {
            check_writable_file("--json", path)?;
        }
        Ok(())
    }

    /// The paths as [`make_paths`](Self::make_paths) would find them, creating nothing: notes
    /// of what a start would create.
    fn check_paths(&self) -> anyhow::Result<Vec<String>> {
        let mut notes = Vec::new();
        if let Some(dir) = &self.qlog_dir {
            notes.extend(check_dir_could_be_written("--qlog-dir", dir)?);
        }
        if let Some(path) = &self.json {
            notes.extend(check_file_could_be_written("--json", path)?);
        }
        Ok(notes)
    }

    fn recv_buffer(&self) -> anyhow::Result<usize> {
        const RANGE: std::ops::RangeInclusive<u64> = (64 << 10)..=(1 << 30);
        match self.recv_buffer {
            None => Ok(neqo_udp::DEFAULT_SOCKET_BUFFER),
            Some(b) if RANGE.contains(&b) => Ok(usize::try_from(b)?),
            Some(b) => anyhow::bail!("--socket-recv-buffer {b}: must be between 64K and 1G bytes"),
        }
    }

    fn ack_every(&self) -> anyhow::Result<Option<u32>> {
        match self.ack_every {
            None => Ok(None),
            Some(n @ 1..=MAX_ACK_EVERY) => Ok(Some(u32::try_from(n)?)),
            Some(n) => anyhow::bail!("--ack-every {n}: must be between 1 and {MAX_ACK_EVERY}"),
        }
    }

    fn max_mtu(&self) -> anyhow::Result<Option<u16>> {
        let Some(m) = self.max_mtu else {
            return Ok(None);
        };
        let (lo, hi) = (neqo_driver::MIN_MTU_BOUND, neqo_driver::MAX_MTU_BOUND);
        match u16::try_from(m) {
            Ok(m) if (lo..=hi).contains(&m) => Ok(Some(m)),
            _ => anyhow::bail!(
                "--max-udp-payload {m}: must be between {lo} (what every QUIC path carries) and {hi} bytes"
            ),
        }
    }

    pub(super) fn idle_timeout(&self) -> anyhow::Result<Duration> {
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
        neqo_udp::Config::default()
            .with_batch_size(self.batch_size)
            .with_gso(!self.no_gso)
            .with_gro(!self.no_gro)
            .with_mode(self.io)
            // Checked by `validate`.
            .with_recv_buffer_size(Some(
                self.recv_buffer()
                    .unwrap_or(neqo_udp::DEFAULT_SOCKET_BUFFER),
            ))
    }

    /// How the driver paces.
    #[must_use]
    pub fn driver(&self) -> DriverConfig {
        DriverConfig::default()
            .with_pacing(!self.no_pacing)
            .with_pacing_timer(self.pacing_timer.into())
    }

    /// Transport options.
    ///
    /// # Errors
    /// An idle timeout out of range.
    pub fn transport(&self) -> anyhow::Result<TransportOptions> {
        Ok(TransportOptions {
            idle_timeout: self.idle_timeout()?,
            max_mtu: self.max_mtu()?,
            ack_every: self.ack_every()?,
            cc: self.cc.into(),
            qlog_dir: self.qlog_dir.clone(),
            ..TransportOptions::default()
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

fn write_json(path: &Path, report: &impl neqo_report::Report) -> anyhow::Result<()> {
    std::fs::write(path, report.to_json()?).with_context(|| format!("writing {}", path.display()))
}

/// The binaries' allocator: mimalloc, where glibc's malloc and free were a quarter of the
/// server's CPU in a profile of small HTTP/3 requests (many small allocations a request,
/// most of them in the `h3` and `http` crates). Built with `no_thp`: asking for transparent
/// huge pages made every first touch of a 2 MiB region zero all of it, however little of it
/// a server's many small per-connection allocations used
/// (`docs/records/many-connections.md`, "The allocator's huge pages").
pub type Allocator = mimalloc::MiMalloc;

/// The [`Allocator`] each binary declares: `#[global_allocator] static A: Allocator = ALLOCATOR;`.
pub const ALLOCATOR: Allocator = mimalloc::MiMalloc;

/// Logs to stderr, `RUST_LOG` or warnings by default.
pub fn init_logging() {
    init_logging_at("warn");
}

/// Logging to stderr at `level` unless `RUST_LOG` says otherwise; in colour only on a
/// terminal, and never with `NO_COLOR` set (<https://no-color.org>).
pub fn init_logging_at(level: &str) {
    init_logging_verbose(0, level);
}

/// The log level `-v` given `count` times asks for: `info`, `debug`, then `trace`.
fn verbose_level(count: u8) -> &'static str {
    match count {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

/// Logging to stderr: with `-v` (`verbose` > 0) at its level, whatever `RUST_LOG` says (a flag
/// over a variable); else as `RUST_LOG` says, or at `level`.
fn init_logging_verbose(verbose: u8, level: &str) {
    let filter = if verbose > 0 {
        tracing_subscriber::EnvFilter::new(verbose_level(verbose))
    } else {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level))
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour(std::io::stderr().is_terminal()))
        .try_init();
}

/// Whether output to a terminal (`terminal`) may carry colour escapes: not with `NO_COLOR`
/// set to anything but the empty string.
#[must_use]
pub fn colour(terminal: bool) -> bool {
    terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Resolves on SIGINT or SIGTERM (elsewhere on Ctrl-C, the only stop request there is),
/// after `program` says on stderr which came and `first` (what the stop does now), if
/// given; a second such signal ends the process at once, with the status a shell gives a
/// process the signal killed (128 + its number). The handlers are installed here, inside
/// the runtime, not when the future is first polled: a signal that comes between this call
/// and that poll (a server that has said it listens) is not lost, nor does it kill the
/// process undrained.
fn shutdown_signal(
    program: &'static str,
    first: Option<String>,
) -> std::io::Result<impl Future<Output = ()>> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        tokio::spawn(async move {
            let mut next = async || {
                tokio::select! {
                    _ = interrupt.recv() => ("SIGINT", 128 + libc::SIGINT),
                    _ = term.recv() => ("SIGTERM", 128 + libc::SIGTERM),
                }
            };
            let (name, _) = next().await;
            if let Some(what) = &first {
                eprintln!("{program}: {name}: {what}");
            }
            let _ = tx.send(());
            let (name, status) = next().await;
            eprintln!("{program}: {name} again: exiting at once");
            std::process::exit(status);
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        if let Some(what) = &first {
            eprintln!("{program}: Ctrl-C: {what}");
        }
        let _ = tx.send(());
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("{program}: Ctrl-C again: exiting at once");
            std::process::exit(130);
        }
    });
    Ok(async move {
        let _ = rx.await;
    })
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
            &["--alpn", "hq-interop,h3", "--h3-service"],
            &["--max-connections", "1"],
            &["--stats", "--stats-interval", "0.1"],
            &["--stats", "--stats-interval", "86400"],
            &["--batch-size", "128"],
            &["--alpn", "h3,hq-interop"],
        ] {
            assert!(server(ok).is_ok(), "{ok:?}: {:?}", server(ok));
        }
        for (args, flag) in [
            (&["--idle-timeout", "0"][..], "--idle-timeout 0"),
            (&["--idle-timeout", "-1"], "--idle-timeout -1"),
            (&["--idle-timeout", "NaN"], "--idle-timeout NaN"),
            (&["--idle-timeout", "inf"], "--idle-timeout inf"),
            (&["--alpn", "h2"], "--alpn \"h2\""),
            (&["--alpn", ""], "--alpn \"\""),
            (&["--alpn", "perf,"], "--alpn \"\""),
            (&["--max-connections", "0"], "--max-connections 0"),
            (&["--h3-service"], "--h3-service: h3 is not among --alpn"),
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
            &[
                "--concurrency",
                "100000",
                "--sockets",
                "1024",
                "--rate",
                "1000000",
            ],
            &["--concurrency", "8", "--connections", "2", "--rate", "0.5"],
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
            (&["--concurrency", "0"], "--concurrency 0"),
            (&["--concurrency", "100001"], "--concurrency 100001"),
            (&["--sockets", "0"], "--sockets 0"),
            (&["--sockets", "1025"], "--sockets 1025"),
            (&["--rate", "0"], "--rate 0"),
            (&["--rate", "-1"], "--rate -1"),
            (&["--rate", "NaN"], "--rate NaN"),
            (&["--rate", "inf"], "--rate inf"),
            (&["--rate", "1000001"], "--rate 1000001"),
            (&["-n", "0"], "-n/--requests 0"),
            (&["--requests", "0"], "-n/--requests 0"),
            (&["-n", "1000001"], "-n/--requests 1000001"),
            (&["--alpn", "h2"], "--alpn \"h2\""),
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
