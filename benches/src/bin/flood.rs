//! `flood`: valid client Initials (real ClientHellos, random connection IDs, never followed
//! up, as from spoofed addresses) from many source ports on 127.0.0.1 against a `neqo-server`
//! it starts, while a real client downloads; for each server setting, what the server's memory
//! and CPU did and what the client saw, beside the same client against the idle server.
//!
//! `cargo run --release -p benches --bin flood -- [--rate 5000] [--count 20000] [--sources 500]`
//!
//! Loopback only: the server is its own child on 127.0.0.1. Bounded: `--count` Initials at
//! `--rate`, each run stops its server. Exits non-zero if the client fails against the
//! server's default flags, which promise that it gets through.

#[cfg(target_os = "linux")]
fn main() -> anyhow::Result<()> {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("flood: reads the server's memory from /proc, so it runs on Linux only");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::{
        net::SocketAddr,
        process::Command,
        time::{Duration, Instant},
    };

    use anyhow::bail;
    use benches::args::positive;
    use clap::{Parser, builder::RangedU64ValueParser};
    use neqo_report::{Report as _, ServerReport};
    use test_fixtures::{BUILD_NEQO_BINS, Server, cargo_build, release_binary};

    /// The server settings compared, one row each.
    const SETTINGS: [&[&str]; 2] = [&[], &["--retry", "never"]];

    /// The server's idle timeout (its default): half-open connections are gone after it.
    const IDLE: Duration = Duration::from_secs(10);

    #[derive(Debug, Parser)]
    #[command(
        name = "flood",
        about = "neqo-server under an Initial flood, with and without Retry, while a client \
                 downloads"
    )]
    struct Args {
        /// Initials sent per second.
        #[arg(long, default_value_t = 5000, value_parser = positive::<u32>)]
        rate: u32,
        /// Initials sent in all.
        #[arg(long, default_value_t = 20_000,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
        count: usize,
        /// Source ports the Initials come from.
        #[arg(long, default_value_t = 500, value_parser = positive::<usize>)]
        sources: usize,
        /// Use the binaries in target/release as they are.
        #[arg(long)]
        no_build: bool,
    }

    /// The resident set of process `pid` now, in MB.
    fn rss_mb(pid: u32) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "a size in MB")]
        let kib = benches::procfs::rss_kib(pid) as f64;
        kib / 1024.0
    }

    /// One download of 1 MB by `neqo-client`: its wall time in ms, or why it failed.
    fn client(addr: SocketAddr) -> Result<f64, String> {
        let started = Instant::now();
        let m = test_fixtures::run(
            Command::new(release_binary("neqo-client")).args([
                "--insecure",
                "--no-progress",
                &format!("https://{addr}/1000000"),
            ]),
            Duration::from_secs(30),
        )
        .map_err(|e| e.to_string())?;
        if m.success() {
            Ok(started.elapsed().as_secs_f64() * 1000.0)
        } else {
            Err(m.ending())
        }
    }

    pub(super) fn main() -> anyhow::Result<()> {
        let args = Args::parse();
        if !args.no_build {
            cargo_build(BUILD_NEQO_BINS).map_err(anyhow::Error::msg)?;
        }
        println!(
            "Initial flood: {} Initials at {}/s from {} source ports on 127.0.0.1; a 1 MB \
             download during it. Client, flood and server share this machine's cores.\n",
            args.count, args.rate, args.sources
        );
        println!(
            "| server flags | peak RSS [MB] | RSS after flood [MB] | resting RSS [MB] | server CPU [s] | Retries | accepted | client idle [ms] | client in flood [ms] |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let mut failures = Vec::new();
        for extra in SETTINGS {
            let json = std::env::temp_dir().join(format!("flood-{}.json", std::process::id()));
            let server = Server::start(
                Command::new(release_binary("neqo-server"))
                    .args(["--listen", "127.0.0.1:0", "--json"])
                    .arg(&json)
                    .args(extra),
                Duration::from_secs(20),
            )?;
            let addr = server.addr();
            let idle = client(addr);
            let datagrams = benches::attack::initials(args.count, addr)?;
            let (rate, sources) = (args.rate, args.sources);
            let flooder = std::thread::spawn(move || {
                benches::attack::send_paced(&datagrams, addr, rate, sources, addr.ip())
            });
            std::thread::sleep(Duration::from_secs(1));
            let during = client(addr);
            flooder.join().expect("flood thread")?;
            let after = rss_mb(server.id());
            std::thread::sleep(IDLE + Duration::from_secs(2));
            let resting = rss_mb(server.id());
            let m = server.stop()?;
            let report = ServerReport::read(&json);
            let _ = std::fs::remove_file(&json);
            let report = report?;
            let show = |r: &Result<f64, String>| match r {
                Ok(ms) => format!("{ms:.0}"),
                Err(e) => format!("failed: {e}"),
            };
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {} | {} | {} |",
                if extra.is_empty() {
                    "(defaults)".to_owned()
                } else {
                    extra.join(" ")
                },
                m.max_rss_kib as f64 / 1024.0,
                after,
                resting,
                m.cpu().as_secs_f64(),
                report.driver.retries,
                report.driver.accepted,
                show(&idle),
                show(&during)
            );
            // What the defaults promise: a real client gets through the flood.
            if extra.is_empty()
                && let Err(e) = idle.and(during)
            {
                failures.push(format!("with the default flags the client failed: {e}"));
            }
        }
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use clap::CommandFactory as _;

        use super::Args;

        #[test]
        fn the_command_line_is_well_formed() {
            Args::command().debug_assert();
        }
    }
}
