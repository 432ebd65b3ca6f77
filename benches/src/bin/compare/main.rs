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
//! `cargo run --release -p benches --bin compare -- [--runs N] [--bytes B] [--no-build]`
//!
//! With `--curve [--concurrency 1,10,100,1000] [--workers 1,2] [--io batched,single]` it runs
//! the many-connection curve instead (`curve.rs`): the same load from `neqo-client
//! --concurrency C` against neqo-server (at each worker count and I/O mode) and the msquic
//! server, server CPU per GB, Gbit/s, latency and memory for each C.
//!
//! With `--stacks [--processes 1,64]` it measures the server's cost with clients of other
//! stacks instead (`stacks.rs`): C processes of quinn's client and of the msquic peer's, one
//! connection each, against neqo-server and the msquic server (`--server-arg ARG`, repeatable,
//! adds to neqo-server's command line: `--server-arg --ack-every=32`).
//!
//! With `--h3-servers` it compares HTTP/3 servers instead (`servers.rs`): neqo-server and
//! Caddy, with neqo-client's and ngtcp2's clients: a large download's server CPU per GB and
//! 10 000 GETs' server CPU per request.
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

mod curve;
mod netns;
mod pairs;
mod servers;
mod stacks;
mod table;

use pairs::BUILD_TCP_TLS;
use table::table;
use test_fixtures::{BUILD_MSQUIC_PEER, BUILD_NEQO_BINS, cargo_build, release_binary};

struct Args {
    runs: Option<usize>,
    bytes: Option<u64>,
    build: bool,
    /// The many-connection curve at these concurrencies, instead of the pairs.
    curve: Option<Vec<u64>>,
    /// The curve's neqo-server worker counts (`None`: its default).
    workers: Vec<Option<usize>>,
    /// The curve's neqo-server I/O modes.
    io: Vec<&'static str>,
    /// Run the pairs in a network namespace whose loopback has this MTU.
    mtu: Option<u32>,
    /// Clients of other stacks, at these counts of processes, instead of the pairs.
    stacks: Option<Vec<u64>>,
    /// More arguments for neqo-server in `--stacks` (`--server-arg`, repeatable).
    server_args: Vec<String>,
    /// neqo-server against Caddy over HTTP/3, instead of the pairs.
    h3_servers: bool,
}

/// The curve's concurrencies unless `--concurrency` says otherwise.
const CURVE_LEVELS: [u64; 4] = [1, 10, 100, 1000];
/// Most connections the curve opens at once (neqo-client's own limit).
const MAX_LEVEL: u64 = 100_000;

fn parse_levels(v: &str) -> Result<Vec<u64>, String> {
    v.split(',')
        .map(|c| {
            c.trim()
                .parse()
                .ok()
                .filter(|n| (1..=MAX_LEVEL).contains(n))
                .ok_or_else(|| format!("--concurrency: expected 1..={MAX_LEVEL} each, got {c:?}"))
        })
        .collect()
}

/// `--workers 1,2`: neqo-server's worker counts, 1 to 256 each.
fn parse_workers(v: &str) -> Result<Vec<Option<usize>>, String> {
    v.split(',')
        .map(|w| {
            w.trim()
                .parse()
                .ok()
                .filter(|n| (1..=256).contains(n))
                .map(Some)
                .ok_or_else(|| format!("--workers: expected 1..=256 each, got {w:?}"))
        })
        .collect()
}

/// `--io batched,single`: neqo-server's I/O modes on the curve.
fn parse_io_modes(v: &str) -> Result<Vec<&'static str>, String> {
    v.split(',')
        .map(|m| match m.trim() {
            "batched" => Ok("batched"),
            "single" => Ok("single"),
            other => Err(format!(
                "--io: expected batched or single each, got {other:?}"
            )),
        })
        .collect()
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        runs: None,
        bytes: None,
        build: true,
        curve: None,
        workers: vec![None],
        io: vec!["batched"],
        mtu: None,
        stacks: None,
        server_args: Vec::new(),
        h3_servers: false,
    };
    let mut levels = None;
    let mut workers = None;
    let mut io = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |n: &str| it.next().ok_or_else(|| format!("{n} needs a value"));
        match arg.as_str() {
            "--runs" => {
                let v = value("--runs")?;
                a.runs = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .map(Some)
                    .ok_or_else(|| format!("--runs: expected 1..=1000, got {v}"))?;
            }
            "--bytes" => {
                let v = value("--bytes")?;
                a.bytes = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(Some)
                    .ok_or_else(|| format!("--bytes: expected a positive number, got {v}"))?;
            }
            "--no-build" => a.build = false,
            "--mtu" => {
                let v = value("--mtu")?;
                a.mtu = v
                    .parse()
                    .ok()
                    .filter(|n| netns::MTU_RANGE.contains(n))
                    .map(Some)
                    .ok_or_else(|| {
                        let (lo, hi) = (netns::MTU_RANGE.start(), netns::MTU_RANGE.end());
                        format!("--mtu: expected a link MTU of {lo} to {hi} bytes, got {v}")
                    })?;
            }
            "--curve" => a.curve = Some(CURVE_LEVELS.to_vec()),
            "--h3-servers" => a.h3_servers = true,
            "--stacks" => a.stacks = Some(vec![1, 64]),
            "--server-arg" => a.server_args.push(value("--server-arg")?),
            "--processes" => {
                let v = value("--processes")?;
                a.stacks = Some(
                    v.split(',')
                        .map(|c| {
                            c.trim()
                                .parse()
                                .ok()
                                .filter(|n| (1..=stacks::MAX_PROCESSES).contains(n))
                                .ok_or_else(|| {
                                    format!(
                                        "--processes: expected 1..={} each, got {c:?}",
                                        stacks::MAX_PROCESSES
                                    )
                                })
                        })
                        .collect::<Result<_, _>>()?,
                );
            }
            "--concurrency" => levels = Some(parse_levels(&value("--concurrency")?)?),
            "--workers" => workers = Some(parse_workers(&value("--workers")?)?),
            "--io" => io = Some(parse_io_modes(&value("--io")?)?),
            "-h" | "--help" => {
                println!(
                    "usage: compare [--runs N] [--bytes B] [--mtu LINK_MTU] [--no-build]\n       compare --curve [--concurrency C1,C2,...] [--workers W1,W2,...] [--io M1,M2,...] [--runs N] [--bytes B] [--no-build]\n       compare --stacks [--processes C1,C2,...] [--server-arg ARG]... [--runs N] [--bytes B] [--no-build]\n       compare --h3-servers [--runs N] [--bytes B] [--no-build]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    match (levels, &mut a.curve) {
        (Some(l), Some(c)) => *c = l,
        (Some(_), None) => return Err("--concurrency: only with --curve".to_owned()),
        (None, _) => {}
    }
    if a.h3_servers && (a.stacks.is_some() || a.curve.is_some() || a.mtu.is_some()) {
        return Err("--h3-servers: not with --stacks, --curve or --mtu".to_owned());
    }
    if a.stacks.is_some() && (a.curve.is_some() || a.mtu.is_some()) {
        return Err("--stacks (or --processes): not with --curve or --mtu".to_owned());
    }
    if !a.server_args.is_empty() && a.stacks.is_none() {
        return Err("--server-arg: only with --stacks".to_owned());
    }
    if a.mtu.is_some() && a.curve.is_some() {
        return Err("--mtu: only for the pairs, not with --curve".to_owned());
    }
    match (workers, &a.curve) {
        (Some(w), Some(_)) => a.workers = w,
        (Some(_), None) => return Err("--workers: only with --curve".to_owned()),
        (None, _) => {}
    }
    match (io, &a.curve) {
        (Some(m), Some(_)) => a.io = m,
        (Some(_), None) => return Err("--io: only with --curve".to_owned()),
        (None, _) => {}
    }
    Ok(a)
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
/// `--max-mtu 1452`, Ethernet's, which the msquic peer and TCP+TLS's segments over a 1500-byte
/// path match, where the default would follow loopback's route to 8972-byte datagrams: the
/// pairs, the curve and the stacks compare at equal sizes.
fn neqo_mtu_args() -> &'static [&'static str] {
    if netns::active() {
        &[]
    } else {
        &["--max-mtu", "1452"]
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

    /// The report, or `Null` when there is none or it does not parse.
    fn take(&self) -> serde_json::Value {
        let value = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let _ = std::fs::remove_file(&self.0);
        value
    }
}

impl Drop for JsonFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A positive number at `key` (msquic reports `null` where it has no figure).
fn positive(report: &serde_json::Value, key: &str) -> Option<f64> {
    report
        .get(key)
        .and_then(serde_json::Value::as_f64)
        .filter(|v| v.is_finite() && *v > 0.0)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::from(2);
        }
    };
    let peers = prepare(args.build);
    if args.h3_servers {
        let failed = servers::h3_servers(
            &peers,
            args.bytes.unwrap_or(256 << 20),
            args.runs.unwrap_or(3),
        );
        if failed > 0 {
            eprintln!("compare: {failed} point(s) failed");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    if let Some(processes) = &args.stacks {
        let bytes = args.bytes.unwrap_or(256 << 20);
        let failed = stacks::stacks(
            &peers,
            (processes, &args.server_args),
            bytes,
            args.runs.unwrap_or(3),
            args.build,
        );
        if failed > 0 {
            eprintln!("compare: {failed} point(s) failed");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    if let Some(levels) = &args.curve {
        let bytes = args.bytes.unwrap_or(256 << 20);
        let failed = curve::curve(
            &peers,
            levels,
            (&args.workers, &args.io),
            bytes,
            args.runs.unwrap_or(3),
        );
        if failed > 0 {
            eprintln!("compare: {failed} point(s) failed");
            return ExitCode::FAILURE;
        }
        return ExitCode::SUCCESS;
    }
    let runs = args.runs.unwrap_or(5);
    let bytes = args.bytes.unwrap_or(134_217_728);
    let _link = match args.mtu.map(netns::Link::create).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("compare: {e}");
            return ExitCode::from(2);
        }
    };
    let (out, failed) = table(&peers, runs, bytes);
    if let Some(mtu) = args.mtu {
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
        assert_eq!(
            parse_io_modes("batched,single"),
            Ok(vec!["batched", "single"])
        );
        // io_uring was removed (docs/io_uring.md).
        assert!(parse_io_modes("uring").unwrap_err().contains("\"uring\""));
        assert_eq!(parse_io_modes(" single "), Ok(vec!["single"]));
        assert!(
            parse_io_modes("batched,fast")
                .unwrap_err()
                .contains("\"fast\"")
        );
        assert!(parse_io_modes("").is_err());
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
