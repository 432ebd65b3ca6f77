//! The interop matrix: neqo-client against the msquic server and the msquic client against
//! neqo-server, for each test case, over IPv4 and IPv6, in batched and single I/O mode, with
//! pacing on and off (the last three apply to the neqo side). Prints a pass/fail table and
//! exits non-zero on any failure.
//!
//! `cargo run --release -p test-fixtures --bin interop -- [--no-build] [--quick]`
//!
//! With `--cases all` or `--cases handshake,retry,...`, the QUIC Interop Runner's test cases
//! instead, neqo <-> neqo and neqo <-> msquic: one row each in `cases.rs`, run by `runner.rs`.

mod cases;
mod runner;

use std::{
    collections::BTreeMap,
    process::{Command, ExitCode},
    time::Duration,
};

use test_fixtures::{
    BUILD_MSQUIC_PEER, BUILD_NEQO_BINS, BUILD_RELAY, Server, cargo_build, release_binary, run,
};

/// The binaries it runs, all from the release build.
const BINARIES: [&str; 4] = ["neqo-client", "neqo-server", "msquic-peer", "neqo-relay"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Case {
    Handshake,
    Download,
    Parallel,
    Upload,
    Sequential,
}

impl Case {
    const ALL: [Self; 5] = [
        Self::Handshake,
        Self::Download,
        Self::Parallel,
        Self::Upload,
        Self::Sequential,
    ];

    const fn name(self) -> &'static str {
        match self {
            Self::Handshake => "handshake + 1-byte request",
            Self::Download => "10 MiB download, verified",
            Self::Parallel => "100 parallel requests, 1 connection",
            Self::Upload => "10 MiB perf upload",
            Self::Sequential => "20 sequential connections",
        }
    }

    /// Path and extra client arguments (common to both clients).
    fn client_args(self) -> (String, Vec<&'static str>) {
        match self {
            Self::Handshake => ("/1".into(), vec!["--alpn", "hq-interop"]),
            Self::Download => (format!("/{}", 10 << 20), vec!["--alpn", "hq-interop"]),
            Self::Parallel => (
                "/1".into(),
                vec!["--alpn", "hq-interop", "-n", "100", "--parallel"],
            ),
            Self::Upload => (
                "/".into(),
                vec!["--alpn", "perf", "--upload", "10485760", "--download", "0"],
            ),
            Self::Sequential => (
                "/1".into(),
                vec!["--alpn", "hq-interop", "--connections", "20"],
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Direction {
    NeqoToMsquic,
    MsquicToNeqo,
}

impl Direction {
    const fn name(self) -> &'static str {
        match self {
            Self::NeqoToMsquic => "neqo-client -> msquic server",
            Self::MsquicToNeqo => "msquic client -> neqo-server",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Variant {
    v6: bool,
    io: &'static str,
    pacing: bool,
}

impl Variant {
    fn label(&self) -> String {
        format!(
            "{} {} pacing-{}",
            if self.v6 { "IPv6" } else { "IPv4" },
            self.io,
            if self.pacing { "on" } else { "off" }
        )
    }
}

fn variants(quick: bool) -> Vec<Variant> {
    let mut v = Vec::new();
    for v6 in [false, true] {
        for io in ["batched", "single"] {
            for pacing in [true, false] {
                if !quick || (io == "batched" && pacing) {
                    v.push(Variant { v6, io, pacing });
                }
            }
        }
    }
    v
}

fn neqo_flags(c: &mut Command, v: &Variant) {
    c.args(["--io", v.io]);
    if !v.pacing {
        c.arg("--no-pacing");
    }
}

fn server_command(d: Direction, v: &Variant) -> Command {
    let listen = if v.v6 { "[::1]:0" } else { "127.0.0.1:0" };
    match d {
        Direction::NeqoToMsquic => {
            let mut c = Command::new(release_binary("msquic-peer"));
            c.args(["server", "--listen", listen]);
            c
        }
        Direction::MsquicToNeqo => {
            let mut c = Command::new(release_binary("neqo-server"));
            c.args(["--listen", listen]);
            neqo_flags(&mut c, v);
            c
        }
    }
}

fn client_command(d: Direction, v: &Variant, port: u16, case: Case) -> Command {
    let host = if v.v6 { "[::1]" } else { "127.0.0.1" };
    let (path, args) = case.client_args();
    let url = format!("https://{host}:{port}{path}");
    match d {
        Direction::NeqoToMsquic => {
            let mut c = Command::new(release_binary("neqo-client"));
            c.arg(&url).arg("--insecure").args(&args);
            neqo_flags(&mut c, v);
            c
        }
        Direction::MsquicToNeqo => {
            let mut c = Command::new(release_binary("msquic-peer"));
            c.args(["client", &url, "--insecure"]).args(&args);
            c
        }
    }
}

fn main() -> ExitCode {
    let mut build = true;
    let mut quick = false;
    let mut cases: Option<Vec<&'static cases::Case>> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-build" => build = false,
            "--quick" => quick = true,
            "--cases" => {
                let Some(list) = args.next() else {
                    eprintln!("interop: --cases needs a list (or all)");
                    return ExitCode::from(2);
                };
                match cases::Case::parse_list(&list) {
                    Ok(list) => cases = Some(list),
                    Err(e) => {
                        eprintln!("interop: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            "-h" | "--help" => {
                println!(
                    "usage: interop [--no-build] [--quick] [--cases all|CASE,...]\n  --quick: IPv4 and IPv6, batched with pacing only\n  --cases: the interop runner's cases instead of the matrix: {}",
                    cases::Case::names()
                );
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("interop: unknown argument {other:?} (try --help)");
                return ExitCode::from(2);
            }
        }
    }
    if build {
        eprintln!("building neqo-client, neqo-server, msquic-peer and neqo-relay (release)...");
        for args in [BUILD_NEQO_BINS, BUILD_MSQUIC_PEER, BUILD_RELAY] {
            if let Err(e) = cargo_build(args) {
                eprintln!("interop: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    for bin in BINARIES.map(release_binary) {
        if !bin.exists() {
            eprintln!(
                "interop: {} not found (build it, or drop --no-build)",
                bin.display()
            );
            return ExitCode::FAILURE;
        }
    }
    if let Some(cases) = cases {
        return if runner::main(&cases) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let variants = variants(quick);
    // (case, direction) -> (passed, failures)
    let mut results: BTreeMap<(Case, Direction), (usize, Vec<String>)> = BTreeMap::new();
    for d in [Direction::NeqoToMsquic, Direction::MsquicToNeqo] {
        for v in &variants {
            let server = match Server::start(&mut server_command(d, v), Duration::from_secs(20)) {
                Ok(s) => s,
                Err(e) => {
                    for case in Case::ALL {
                        results
                            .entry((case, d))
                            .or_default()
                            .1
                            .push(format!("{}: server: {e}", v.label()));
                    }
                    continue;
                }
            };
            for case in Case::ALL {
                let mut cmd = client_command(d, v, server.addr().port(), case);
                let outcome = run(&mut cmd, Duration::from_secs(60));
                let entry = results.entry((case, d)).or_default();
                match outcome {
                    Ok(m) if m.success() => {
                        entry.0 += 1;
                        eprintln!("pass  {} | {} | {}", case.name(), d.name(), v.label());
                    }
                    Ok(m) => {
                        let why = format!(
                            "{}: {}",
                            m.ending(),
                            m.last_stderr_line().unwrap_or("no message")
                        );
                        eprintln!(
                            "FAIL  {} | {} | {}: {why}",
                            case.name(),
                            d.name(),
                            v.label()
                        );
                        entry.1.push(format!("{}: {why}", v.label()));
                    }
                    Err(e) => entry.1.push(format!("{}: {e}", v.label())),
                }
            }
            if let Err(e) = server.stop() {
                eprintln!("interop: stopping server: {e}");
            }
        }
    }
    let total = variants.len();
    println!(
        "\nInterop matrix ({total} variants per cell: {}):\n",
        variants
            .iter()
            .map(Variant::label)
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| test | {} | {} |",
        Direction::NeqoToMsquic.name(),
        Direction::MsquicToNeqo.name()
    );
    println!("|---|---|---|");
    let mut failures = Vec::new();
    for case in Case::ALL {
        let cell = |d: Direction| {
            let (passed, failed) = results.get(&(case, d)).cloned().unwrap_or_default();
            if failed.is_empty() && passed == total {
                format!("pass {passed}/{total}")
            } else {
                format!("**FAIL** {passed}/{total}")
            }
        };
        println!(
            "| {} | {} | {} |",
            case.name(),
            cell(Direction::NeqoToMsquic),
            cell(Direction::MsquicToNeqo)
        );
        for d in [Direction::NeqoToMsquic, Direction::MsquicToNeqo] {
            if let Some((_, f)) = results.get(&(case, d)) {
                failures.extend(
                    f.iter()
                        .map(|f| format!("{} / {}: {f}", case.name(), d.name())),
                );
            }
        }
    }
    if failures.is_empty() {
        println!("\nall passed");
        ExitCode::SUCCESS
    } else {
        println!("\nFailures:");
        for f in &failures {
            println!("- {f}");
        }
        ExitCode::FAILURE
    }
}
