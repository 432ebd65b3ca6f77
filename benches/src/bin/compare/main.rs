//! Client/server transfer comparison: each pair runs as two processes over loopback, `--runs`
//! times (each run goes through every pair in turn, so that what else the machine does at a
//! time weighs on all pairs alike), and the results print as the markdown table QUIC projects
//! post on pull requests.
//!
//! Beside the QUIC pairs, the last row is the baseline users weigh QUIC against: TLS 1.3 over
//! kernel TCP (`tcp-tls client` against `tcp-tls server`, rustls with ring, the same cipher
//! suite, request, byte pattern and verification as the QUIC pairs). After the table, the
//! ratio of neqo <-> neqo's CPU per GB (both sides) to TCP+TLS's.
//!
//! `cargo run --release -p benches --bin compare -- [pairs] [--runs N] [--bytes B]
//! [--mtu LINK_MTU] [--no-build]` (the pairs are the default: `compare --runs 3` is `compare
//! pairs --runs 3`)
//!
//! `compare curve [--concurrency 1,10,100,1000] [--workers 1,2] [--io batched,single]` runs the
//! many-connection curve instead (`curve.rs`): the same load from `neqo-client --concurrency C`
//! against neqo-server (at each worker count and I/O mode) and the msquic server, server CPU
//! per GB, Gbit/s, latency and memory for each C.
//!
//! `compare stacks [--processes 1,64]` measures the server's cost with clients of other stacks
//! instead (`stacks.rs`): C processes of quinn's client and of the msquic peer's, one
//! connection each, against neqo-server and the msquic server (`--server-arg ARG`, repeatable,
//! adds to neqo-server's command line: `--server-arg --ack-every=32`).
//!
//! `compare h3-servers` compares HTTP/3 servers instead (`servers.rs`): neqo-server and Caddy,
//! with neqo-client's and ngtcp2's clients: a large download's server CPU per GB and 10 000
//! GETs' server CPU per request.
//!
//! Each mode takes `--runs`, `--bytes` and `--no-build`; only its own options besides.
//!
//! It builds the peers it needs first (`neqo-client`/`neqo-server` from neqo-bin,
//! `msquic-peer` with its `msquic` feature, and `tcp-tls` from benches) and says which pairs
//! it skipped and why.
//!
//! Datagrams per syscall are shown in the data direction: the server's TX (from
//! `neqo-server --json`, written when it stops; msquic's server reports none, so "-") and the
//! client's RX (from the client's `--json`). Peak RSS is each process's `ru_maxrss`; CPU per
//! GB is each process's user + system time over the bytes transferred (10^9 bytes a GB).

use std::{path::PathBuf, process::ExitCode};

use benches::args::{self, number_in};
use clap::{Parser, Subcommand, builder::RangedU64ValueParser};
use neqo_report::{ReadError, Report};

mod curve;
mod netns;
mod pairs;
mod servers;
mod stacks;
mod table;

use pairs::BUILD_TCP_TLS;
use table::table;
use test_fixtures::{BUILD_MSQUIC_PEER, BUILD_NEQO_BINS, cargo_build, release_binary};

#[derive(Debug, Parser)]
#[command(
    name = "compare",
    about = "Client/server transfers side by side, as separate processes: neqo, the msquic peer \
             and TCP+TLS (the default, `pairs`), or one of the other comparisons",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    mode: Option<Mode>,
    /// The pairs' options, for `compare` without a mode.
    #[command(flatten)]
    pairs: PairsArgs,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Every client/server pair (neqo, msquic, each way; TCP+TLS last), one download each,
    /// as a markdown table. The default.
    Pairs(PairsArgs),
    /// The many-connection curve: `neqo-client --concurrency C` against neqo-server and the
    /// msquic server, for each C.
    Curve(CurveArgs),
    /// The server's cost with clients of other stacks (quinn's and msquic's), C processes of
    /// one connection each, against neqo-server and the msquic server.
    Stacks(StacksArgs),
    /// HTTP/3 servers with the same clients: neqo-server against Caddy.
    H3Servers(H3ServersArgs),
}

#[derive(Debug, clap::Args)]
struct PairsArgs {
    /// Runs; each goes through every pair in turn.
    #[arg(long, default_value_t = 5, value_parser = runs())]
    runs: usize,
    /// Bytes each pair downloads per run.
    #[arg(long, default_value_t = 134_217_728, value_parser = args::positive::<u64>)]
    bytes: u64,
    /// Run the pairs in a network namespace whose loopback has this MTU (root needed).
    #[arg(
        long,
        value_name = "LINK_MTU",
        value_parser = clap::value_parser!(u32).range(
            i64::from(*netns::MTU_RANGE.start())..=i64::from(*netns::MTU_RANGE.end())
        )
    )]
    mtu: Option<u32>,
    /// Use the binaries in target/release as they are.
    #[arg(long)]
    no_build: bool,
}

#[derive(Debug, clap::Args)]
struct CurveArgs {
    /// The curve's concurrencies: connections at once, comma separated.
    #[arg(long, value_name = "C1,C2,...", value_delimiter = ',',
          default_value = CURVE_LEVELS, value_parser = number_in::<u64>(1..=MAX_LEVEL))]
    concurrency: Vec<u64>,
    /// neqo-server's worker counts, comma separated (default: neqo-server's own).
    #[arg(long, value_name = "W1,W2,...", value_delimiter = ',',
          value_parser = number_in::<usize>(1..=256))]
    workers: Vec<usize>,
    /// neqo-server's I/O modes, comma separated: batched, single.
    #[arg(long, value_name = "M1,M2,...", value_delimiter = ',', default_value = "batched",
          value_parser = io_mode)]
    io: Vec<&'static str>,
    /// Runs at each concurrency; each goes through every server in turn; medians.
    #[arg(long, default_value_t = 3, value_parser = runs())]
    runs: usize,
    /// Bytes downloaded in all at each concurrency per run (at least 1 MiB per connection).
    #[arg(long, default_value_t = 256 << 20, value_parser = args::positive::<u64>)]
    bytes: u64,
    /// Use the binaries in target/release as they are.
    #[arg(long)]
    no_build: bool,
}

#[derive(Debug, clap::Args)]
struct StacksArgs {
    /// Counts of client processes, one connection each, comma separated.
    #[arg(long, value_name = "C1,C2,...", value_delimiter = ',', default_value = "1,64",
          value_parser = number_in::<u64>(1..=stacks::MAX_PROCESSES))]
    processes: Vec<u64>,
    /// One more argument for neqo-server (repeatable): `--server-arg --ack-every=32`.
    #[arg(long = "server-arg", value_name = "ARG", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Runs; each goes through every count, shape, stack and server in turn; medians.
    #[arg(long, default_value_t = 3, value_parser = runs())]
    runs: usize,
    /// Bytes the client processes download in all per run.
    #[arg(long, default_value_t = 256 << 20, value_parser = args::positive::<u64>)]
    bytes: u64,
    /// Use the binaries in target/release as they are.
    #[arg(long)]
    no_build: bool,
}

#[derive(Debug, clap::Args)]
struct H3ServersArgs {
    /// Runs; each goes through every server and client in turn; medians.
    #[arg(long, default_value_t = 3, value_parser = runs())]
    runs: usize,
    /// Bytes of the large download.
    #[arg(long, default_value_t = 256 << 20, value_parser = args::positive::<u64>)]
    bytes: u64,
    /// Use the binaries in target/release as they are.
    #[arg(long)]
    no_build: bool,
}

impl Mode {
    const fn build(&self) -> bool {
        let no_build = match self {
            Self::Pairs(a) => a.no_build,
            Self::Curve(a) => a.no_build,
            Self::Stacks(a) => a.no_build,
            Self::H3Servers(a) => a.no_build,
        };
        !no_build
    }
}

/// `--runs`: 1 to 1000.
fn runs() -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(1..=1000)
}

/// The curve's concurrencies unless `--concurrency` says otherwise.
const CURVE_LEVELS: &str = "1,10,100,1000";
/// Most connections the curve opens at once (neqo-client's own limit).
const MAX_LEVEL: u64 = 100_000;

/// An item of `--io batched,single`: one of neqo-server's I/O modes.
fn io_mode(m: &str) -> Result<&'static str, String> {
    match m.trim() {
        "batched" => Ok("batched"),
        "single" => Ok("single"),
        other => Err(format!("expected batched or single each, got {other:?}")),
    }
}

struct Peers {
    /// Why msquic pairs cannot run, if they cannot.
    msquic_missing: Option<String>,
    neqo_missing: Option<String>,
    /// Why the TCP+TLS baseline cannot run, if it cannot.
    tcp_tls_missing: Option<String>,
}

fn prepare(build: bool) -> Peers {
    let mut neqo_missing = None;
    let mut msquic_missing = None;
    let mut tcp_tls_missing = None;
    if build {
        eprintln!("building neqo-client and neqo-server (release)...");
        if let Err(e) = cargo_build(BUILD_NEQO_BINS) {
            neqo_missing = Some(e);
        }
        eprintln!("building msquic-peer (release, builds msquic with cmake the first time)...");
        if let Err(e) = cargo_build(BUILD_MSQUIC_PEER) {
            msquic_missing = Some(e);
        }
        eprintln!("building tcp-tls (release)...");
        if let Err(e) = cargo_build(BUILD_TCP_TLS) {
            tcp_tls_missing = Some(e);
        }
    }
    let missing = |bin: &str| {
        let path = release_binary(bin);
        (!path.exists()).then(|| format!("{} not found", path.display()))
    };
    if neqo_missing.is_none() {
        neqo_missing = missing("neqo-client").or_else(|| missing("neqo-server"));
    }
    if msquic_missing.is_none() {
        msquic_missing = missing("msquic-peer");
    }
    if tcp_tls_missing.is_none() {
        tcp_tls_missing = missing("tcp-tls");
    }
    Peers {
        msquic_missing,
        neqo_missing,
        tcp_tls_missing,
    }
}

/// neqo's path MTU arguments: in a namespace with a link MTU (`--mtu`), none: its default
/// follows the route, so the sending side gets what the link carries; on the host's loopback
/// `--max-mtu 1472`, the UDP payload of a 1500-byte IPv4 path, which is what the msquic peer
/// sends there (msquic's `MaximumMtu` 1500; its server's `--json` reports it) and what
/// a 1500-byte path gives TCP+TLS too (segments of 1448 bytes with timestamps), where the default would
/// follow loopback's route to 8972-byte datagrams: the pairs, the curve and the stacks compare
/// at equal sizes.
fn neqo_mtu_args() -> &'static [&'static str] {
    if netns::active() {
        &[]
    } else {
        &["--max-mtu", "1472"]
    }
}

/// A JSON report, removed once read (or when dropped unread), so that no run can see an
/// earlier run's file.
struct JsonFile(PathBuf);

impl JsonFile {
    fn new(pair: usize, run: usize, side: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "compare-{}-{pair}-{run}-{side}.json",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        Self(path)
    }

    /// The report, or why there is none of type `T`.
    fn take<T: Report>(&self) -> Result<T, ReadError> {
        let report = T::read(&self.0);
        let _ = std::fs::remove_file(&self.0);
        report
    }
}

impl Drop for JsonFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mode = cli.mode.unwrap_or(Mode::Pairs(cli.pairs));
    let build = mode.build();
    let peers = prepare(build);
    let failed = match mode {
        Mode::H3Servers(a) => servers::h3_servers(&peers, a.bytes, a.runs),
        Mode::Stacks(a) => stacks::stacks(
            &peers,
            (&a.processes, &a.server_args),
            a.bytes,
            a.runs,
            build,
        ),
        Mode::Curve(a) => {
            // No `--workers`: one neqo-server at its own default.
            let workers: Vec<Option<usize>> = if a.workers.is_empty() {
                vec![None]
            } else {
                a.workers.into_iter().map(Some).collect()
            };
            curve::curve(&peers, &a.concurrency, (&workers, &a.io), a.bytes, a.runs)
        }
        Mode::Pairs(a) => return pairs_table(&peers, &a),
    };
    if failed > 0 {
        eprintln!("compare: {failed} point(s) failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The pairs' table, in a network namespace of its own with `--mtu`.
fn pairs_table(peers: &Peers, a: &PairsArgs) -> ExitCode {
    let _link = match a.mtu.map(netns::Link::create).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::from(2);
        }
    };
    let (out, failed) = table(peers, a.runs, a.bytes);
    if let Some(mtu) = a.mtu {
        println!(
            "Every pair in a network namespace whose loopback has a {mtu}-byte MTU; neqo's sides at their defaults (the sending side's path MTU discovery follows the route, up to what the link carries).\n"
        );
    }
    println!("{out}");
    if failed > 0 {
        eprintln!("compare: {failed} pair(s) failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use test_fixtures::Impl;

    use super::*;
    use crate::{
        pairs::{NEQO_H3, PAIRS, Pair, missing},
        table::COLUMNS,
    };

    fn peers(neqo: bool, msquic: bool, tcp_tls: bool) -> Peers {
        let why = |there: bool, what: &str| (!there).then(|| format!("no {what}"));
        Peers {
            neqo_missing: why(neqo, "neqo"),
            msquic_missing: why(msquic, "msquic"),
            tcp_tls_missing: why(tcp_tls, "tcp-tls"),
        }
    }

    #[test]
    fn the_reference_comes_first_and_the_baseline_last() {
        assert!(PAIRS[0].is_neqo_reference());
        assert_eq!(PAIRS.iter().filter(|p| p.is_neqo_reference()).count(), 1);
        assert!(matches!(PAIRS.last(), Some(Pair::TcpTls)));
        assert_eq!(
            Pair::TcpTls.label(),
            "| tcp+tls | tcp+tls | kernel TCP | - |"
        );
        assert!(!Pair::TcpTls.uses(Impl::Neqo) && !Pair::TcpTls.neqo_server());
        assert_eq!(NEQO_H3.label(), "| neqo (h3) | neqo (h3) | batched | on |");
        assert_eq!(
            PAIRS
                .iter()
                .filter(|p| matches!(p, Pair::Quic { h3: true, .. }))
                .count(),
            1
        );
    }

    #[test]
    fn each_pair_is_skipped_for_what_it_needs() {
        let only_tcp = peers(false, false, true);
        for pair in PAIRS {
            assert_eq!(
                missing(&only_tcp, pair).is_none(),
                matches!(pair, Pair::TcpTls),
                "{pair:?}"
            );
        }
        let no_tcp = peers(true, true, false);
        for pair in PAIRS {
            assert_eq!(
                missing(&no_tcp, pair).as_deref(),
                matches!(pair, Pair::TcpTls).then_some("no tcp-tls"),
                "{pair:?}"
            );
        }
        let no_msquic = peers(true, false, true);
        assert_eq!(
            PAIRS
                .iter()
                .filter(|p| missing(&no_msquic, p).is_some())
                .count(),
            PAIRS.iter().filter(|p| p.uses(Impl::Msquic)).count()
        );
    }

    #[test]
    fn curve_io_modes_parse() {
        assert_eq!(io_mode("batched"), Ok("batched"));
        assert_eq!(io_mode(" single "), Ok("single"));
        // io_uring was removed (docs/records/io_uring.md).
        assert!(io_mode("uring").unwrap_err().contains("\"uring\""));
        assert!(io_mode("fast").unwrap_err().contains("\"fast\""));
        assert!(io_mode("").is_err());
        let curve = |args: &[&str]| match Cli::try_parse_from(args) {
            Ok(Cli {
                mode: Some(Mode::Curve(a)),
                ..
            }) => Ok(a.io),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.kind()),
        };
        assert_eq!(curve(&["compare", "curve"]), Ok(vec!["batched"]));
        let Ok(Cli {
            mode: Some(Mode::Curve(c)),
            ..
        }) = Cli::try_parse_from(["compare", "curve"])
        else {
            panic!("curve")
        };
        assert_eq!(c.concurrency, [1, 10, 100, 1000]);
        assert!(c.workers.is_empty());
        assert_eq!(
            curve(&["compare", "curve", "--io", "batched,single"]),
            Ok(vec!["batched", "single"])
        );
        assert_eq!(
            curve(&["compare", "curve", "--io", "batched,fast"]),
            Err(clap::error::ErrorKind::ValueValidation)
        );
    }

    #[test]
    fn the_pairs_are_the_default_and_each_mode_takes_only_its_options() {
        use clap::{CommandFactory as _, error::ErrorKind};

        Cli::command().debug_assert();

        let parse = |args: &[&str]| Cli::try_parse_from(args).map_err(|e| e.kind());
        let Ok(Cli {
            mode: None,
            pairs: default,
        }) = parse(&["compare", "--runs", "3", "--mtu", "9000"])
        else {
            panic!("no mode: the pairs")
        };
        assert_eq!((default.runs, default.bytes), (3, 134_217_728));
        assert_eq!(default.mtu, Some(9000));
        assert!(matches!(
            parse(&["compare", "pairs", "--no-build"]),
            Ok(Cli {
                mode: Some(Mode::Pairs(PairsArgs { no_build: true, .. })),
                ..
            })
        ));
        let Ok(Cli {
            mode: Some(Mode::Stacks(s)),
            ..
        }) = parse(&["compare", "stacks", "--server-arg", "--ack-every=32"])
        else {
            panic!("stacks")
        };
        assert_eq!(
            (s.processes, s.server_args),
            (vec![1, 64], vec!["--ack-every=32".to_owned()])
        );
        assert_eq!(
            parse(&["compare", "--runs", "3", "curve"]).err(),
            Some(ErrorKind::ArgumentConflict),
            "the pairs' options are not a mode's"
        );
        for refused in [
            &["compare", "curve", "--mtu", "9000"][..],
            &["compare", "--concurrency", "1"],
            &["compare", "pairs", "--workers", "2"],
            &["compare", "h3-servers", "--processes", "1"],
            &["compare", "stacks", "--io", "single"],
            &["compare", "curve", "--server-arg", "x"],
        ] {
            assert_eq!(
                parse(refused).err(),
                Some(ErrorKind::UnknownArgument),
                "{refused:?}"
            );
        }
        for invalid in [
            &["compare", "--runs", "0"][..],
            &["compare", "--bytes", "0"],
            &["compare", "--mtu", "1000"],
            &["compare", "curve", "--concurrency", "1,100001"],
            &["compare", "curve", "--workers", "0"],
            &["compare", "stacks", "--processes", "257"],
        ] {
            assert_eq!(
                parse(invalid).err(),
                Some(ErrorKind::ValueValidation),
                "{invalid:?}"
            );
        }
    }

    #[test]
    fn with_nothing_to_run_the_table_lists_every_pair_skipped() {
        let (out, failed) = table(&peers(false, false, false), 1, 1000);
        assert_eq!(failed, 0);
        let lines: Vec<&str> = out.lines().collect();
        let header = lines.iter().find(|l| l.starts_with("| Client")).unwrap();
        let rule = lines.iter().find(|l| l.starts_with("|---")).unwrap();
        assert_eq!(header.matches('|').count(), rule.matches('|').count());
        assert_eq!(header.matches('|').count(), 4 + COLUMNS.len() + 1);
        assert!(out.contains("- tcp+tls -> tcp+tls: no tcp-tls"), "{out}");
        assert!(
            out.contains("- neqo -> neqo (batched, pacing on): no neqo"),
            "{out}"
        );
        assert_eq!(out.matches("\n- ").count(), PAIRS.len(), "{out}");
        assert!(
            !out.contains("x TCP+TLS's CPU"),
            "no ratio without rows: {out}"
        );
    }
}
