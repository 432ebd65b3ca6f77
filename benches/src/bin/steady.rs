//! `steady`: what a server keeps of the requests it has answered. One `neqo-server` per
//! protocol (HTTP/3 and `hq-interop`; its defaults but `--alpn`, serving a root that holds a
//! 3-byte file) answers `--rounds` rounds, the protocols in turn: in each, `--connections`
//! connections at once, each asking for the file `--per-connection` times one after another.
//! After each round: the server's resident set and the CPU it spent per request that round.
//! Flat after the first round is the claim: the allocator keeps what the first load grew it
//! to, and anything kept per request would grow with every round.
//!
//! `cargo run --release -p benches --bin steady -- [--rounds 10] [--connections 100]
//! [--per-connection 1000] [--parallel] [--no-build]`
//!
//! Prints a markdown table (the `steady` figure). Linux only (it reads `/proc`); loopback
//! only. Exits non-zero when a request fails.

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    match linux::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("steady: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("steady: reads the servers' memory from /proc, so it runs on Linux only");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::{path::Path, process::Command, time::Duration};

    use anyhow::bail;
    use benches::procfs;
    use clap::Parser;
    use neqo_report::{ClientReport, Report as _};
    use test_fixtures::{BUILD_NEQO_BINS, Server, cargo_build, release_binary};

    /// The protocols compared, in the order of the table's columns.
    const ALPNS: [&str; 2] = ["h3", "hq-interop"];
    /// The file asked for, and its size.
    const FILE: (&str, usize) = ("f3", 3);
    /// A round's hang guard, not a speed bound.
    const ROUND_LIMIT: Duration = Duration::from_secs(600);

    #[derive(Debug, Parser)]
    #[command(
        about = "A server's memory and CPU per request over rounds of HTTP/3 and hq-interop requests"
    )]
    struct Args {
        /// Rounds, the protocols in turn.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100))]
        rounds: u64,
        /// Connections at once in a round.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1000))]
        connections: u64,
        /// Requests each connection makes, one after another.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        per_connection: u64,
        /// Each connection's requests all at once instead (`neqo-client --parallel`): with
        /// `--rounds 1 --connections 1 --per-connection 100000`, the server's CPU per request
        /// with nothing else but requests in it.
        #[arg(long)]
        parallel: bool,
        /// Use the binaries in target/release as they are.
        #[arg(long)]
        no_build: bool,
    }

    /// One protocol's server and what it did so far.
    struct Served {
        alpn: &'static str,
        server: Server,
        idle_kib: u64,
        /// After each round: resident KiB, and CPU seconds that round.
        rounds: Vec<(u64, f64)>,
        cpu_before: f64,
    }

    fn mib(kib: u64) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "a size in MiB")]
        let k = kib as f64;
        k / 1024.0
    }

    /// A round of `args` against `s`: every request answered, or an error.
    fn round(s: &mut Served, args: &Args, dir: &Path) -> anyhow::Result<()> {
        let json = dir.join(format!("client-{}.json", s.alpn));
        let url = format!("https://{}/{}", s.server.addr(), FILE.0);
        let m = test_fixtures::run(
            Command::new(release_binary("neqo-client"))
                .args(["--insecure", "--no-progress", "--quiet", "--alpn", s.alpn])
                .args(["--connections", &args.connections.to_string()])
                .args(["--concurrency", &args.connections.to_string()])
                .args(["-n", &args.per_connection.to_string(), "--json"])
                .arg(&json)
                .args(args.parallel.then_some("--parallel"))
                .arg(&url),
            ROUND_LIMIT,
        )?;
        if !m.success() {
            bail!("{} round: {}", s.alpn, m.ending());
        }
        let report = ClientReport::read(&json)?;
        let want = args.connections * args.per_connection;
        let (requests, failed) = (report.requests, report.failed_requests);
        if requests != want || failed != 0 {
            bail!("{}: {requests} of {want} requests, {failed} failed", s.alpn);
        }
        let pid = s.server.id();
        let cpu = procfs::cpu_seconds(pid);
        s.rounds.push((procfs::rss_kib(pid), cpu - s.cpu_before));
        s.cpu_before = cpu;
        Ok(())
    }

    pub fn main() -> anyhow::Result<()> {
        let args = Args::parse();
        if !args.no_build {
            eprintln!("steady: building neqo-server and neqo-client (release)...");
            cargo_build(BUILD_NEQO_BINS).map_err(anyhow::Error::msg)?;
        }
        let dir = std::env::temp_dir().join(format!("neqo-steady-{}", std::process::id()));
        let root = dir.join("www");
        std::fs::create_dir_all(&root)?;
        std::fs::write(root.join(FILE.0), vec![b'x'; FILE.1])?;
        let mut served = Vec::new();
        for alpn in ALPNS {
            let server = Server::start(
                Command::new(release_binary("neqo-server"))
                    .args(["--listen", "127.0.0.1:0", "--alpn", alpn, "--root"])
                    .arg(&root),
                Duration::from_secs(30),
            )
            .map_err(|e| anyhow::anyhow!("neqo-server --alpn {alpn}: {e}"))?;
            let pid = server.id();
            served.push(Served {
                alpn,
                idle_kib: procfs::rss_kib(pid),
                cpu_before: procfs::cpu_seconds(pid),
                server,
                rounds: Vec::new(),
            });
        }
        let per_round = args.connections * args.per_connection;
        for r in 1..=args.rounds {
            for s in &mut served {
                round(s, &args, &dir)?;
            }
            eprintln!("steady: round {r} of {} done", args.rounds);
        }
        let mut rows = Vec::new();
        for s in served {
            let m = s.server.stop()?;
            if !m.success() {
                bail!("neqo-server --alpn {}: {}", s.alpn, m.ending());
            }
            rows.push(Row {
                alpn: s.alpn,
                idle_kib: s.idle_kib,
                rounds: s.rounds,
            });
        }
        let _ = std::fs::remove_dir_all(&dir);
        print_table(&rows, per_round);
        Ok(())
    }

    /// A protocol's column: its server idle, then after each round.
    struct Row {
        alpn: &'static str,
        idle_kib: u64,
        rounds: Vec<(u64, f64)>,
    }

    fn print_table(rows: &[Row], per_round: u64) {
        let mut head = "| requests |".to_owned();
        let mut rule = "|---:|".to_owned();
        for r in rows {
            let alpn = r.alpn;
            head.push_str(&format!(" {alpn} RSS MiB | {alpn} server µs/request |"));
            rule.push_str("---:|---:|");
        }
        println!("{head}\n{rule}");
        let mut line = "| 0 (idle) |".to_owned();
        for r in rows {
            line.push_str(&format!(" {:.1} | |", mib(r.idle_kib)));
        }
        println!("{line}");
        let n = rows.iter().map(|r| r.rounds.len()).min().unwrap_or(0);
        for i in 0..n {
            let mut line = format!("| {} |", thousands(per_round * (i as u64 + 1)));
            for r in rows {
                let (kib, cpu) = r.rounds[i];
                #[expect(clippy::cast_precision_loss, reason = "a rate")]
                let us = cpu * 1e6 / per_round as f64;
                line.push_str(&format!(" {:.1} | {us:.0} |", mib(kib)));
            }
            println!("{line}");
        }
        println!();
        for r in rows {
            let (alpn, rounds) = (r.alpn, &r.rounds);
            let after: Vec<u64> = rounds.iter().skip(1).map(|r| r.0).collect();
            if let (Some(lo), Some(hi)) = (after.iter().min(), after.iter().max()) {
                println!(
                    "{alpn}: after the first {} requests, RSS between {:.1} and {:.1} MiB ({:+.1} MiB from the first round to the last)",
                    thousands(per_round),
                    mib(*lo),
                    mib(*hi),
                    mib(rounds[rounds.len() - 1].0) - mib(rounds[0].0)
                );
            }
        }
        if let [a, b] = rows {
            let total = |r: &[(u64, f64)]| r.iter().map(|x| x.1).sum::<f64>();
            println!(
                "server CPU per request, {} over {}: {:.2} (whole run)",
                a.alpn,
                b.alpn,
                total(&a.rounds) / total(&b.rounds)
            );
        }
    }
    /// `n` with thin spaces between thousands, as the docs write numbers.
    pub(super) fn thousands(n: u64) -> String {
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(' ');
            }
            out.push(c);
        }
        out
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn counts_are_written_in_thousands() {
        let t = super::linux::thousands;
        assert_eq!(
            [t(0), t(999), t(1000), t(100_000), t(1_000_000)],
            ["0", "999", "1 000", "100 000", "1 000 000"].map(String::from)
        );
    }
}
