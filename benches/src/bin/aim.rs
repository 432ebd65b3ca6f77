//! `aim`: an Initial flood aimed at one worker by an attacker that first learns the steering.
//! The server's connection IDs carry the worker byte in the clear, and Initials go by the
//! kernel's 4-tuple hash, so an attacker on 127.0.1.1 probes source ports (one real Initial
//! each, the worker read from the reply's ID), keeps the ports steered to worker 0 and floods
//! real Initials from them as fast as it can send. Meanwhile an ordinary client on 127.0.2.1
//! makes handshakes spread over the flood, each from a new port, landing on either worker. For each
//! server setting: each worker's CPU and kernel drops during the flood, the flood's rate, and
//! the ordinary handshakes' times by worker, beside the same client against the idle server.
//!
//! `cargo run --release -p benches --bin aim -- [--seconds 8] [--handshakes 40]`
//!
//! Loopback only (127.0.0.0/8): the server is its own child on 127.0.0.1. Bounded: the flood
//! stops after `--seconds` or `--limit` datagrams, each handshake after 10 s.

#[cfg(target_os = "linux")]
fn main() -> anyhow::Result<()> {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("aim: reads each worker's CPU from /proc, so it runs on Linux only");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::{
        net::{IpAddr, Ipv4Addr, SocketAddr},
        process::Command,
        sync::atomic::{AtomicBool, Ordering},
        time::{Duration, Instant},
    };

    use anyhow::bail;
    use benches::attack::{self, Handshake};
    use clap::Parser;
    use neqo_report::{Report as _, ServerReport};
    use test_fixtures::{BUILD_NEQO_BINS, Server, cargo_build, release_binary};

    /// The server settings compared, one row each; every row has two workers.
    const SETTINGS: [&[&str]; 3] = [&[], &["--retry", "always"], &["--steering", "channel"]];

    /// Where the attacker and the ordinary client send from: loopback addresses in different
    /// /24s, so that the server's per-prefix shares tell them apart.
    const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1));
    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 2, 1));

    /// The worker byte's place in the server's connection IDs without `--server-id`.
    const WORKER_OFFSET: usize = 1;
    const WORKERS: usize = 2;

    /// A hang guard per handshake, never a speed check.
    const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

    #[derive(Parser)]
    #[command(about = "An Initial flood aimed at one worker through the learned steering")]
    struct Args {
        /// Longest flood per setting, in seconds.
        #[arg(long, default_value_t = 8)]
        seconds: u64,
        /// Most datagrams a flood sends.
        #[arg(long, default_value_t = 5_000_000)]
        limit: u64,
        /// Ordinary handshakes during the flood (and as many against the idle server).
        #[arg(long, default_value_t = 40)]
        handshakes: usize,
        /// Source ports the attacker probes.
        #[arg(long, default_value_t = 64)]
        probes: usize,
        /// Distinct Initials the flood cycles through.
        #[arg(long, default_value_t = 20_000)]
        initials: usize,
        /// Use the release binaries as they are.
        #[arg(long)]
        no_build: bool,
    }

    /// Handshake times by worker, and failures.
    #[derive(Default)]
    struct Seen {
        by_worker: [Vec<Duration>; WORKERS],
        failed: usize,
    }

    impl Seen {
        fn add(&mut self, r: anyhow::Result<Handshake>) {
            match r {
                Ok(Handshake {
                    took,
                    worker: Some(w),
                }) if w < WORKERS => self.by_worker[w].push(took),
                _ => self.failed += 1,
            }
        }

        /// "p50 / p90 (n)" of a worker's handshakes, in ms.
        fn show(&mut self, worker: usize) -> String {
            let v = &mut self.by_worker[worker];
            if v.is_empty() {
                return "-".into();
            }
            v.sort();
            let at = |q: f64| {
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss,
                    reason = "a rank"
                )]
                let i = ((v.len() - 1) as f64 * q).round() as usize;
                v[i].as_secs_f64() * 1000.0
            };
            format!("{:.1} / {:.1} ({})", at(0.5), at(0.9), v.len())
        }
    }

    /// `n` handshakes one after another, the i-th started no sooner than `i * every` from now.
    fn handshakes(server: SocketAddr, n: usize, every: Duration) -> Seen {
        let mut seen = Seen::default();
        let start = Instant::now();
        for i in 0..n {
            let due = start + every * u32::try_from(i).unwrap_or(u32::MAX);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            seen.add(attack::handshake(
                CLIENT,
                server,
                WORKER_OFFSET,
                WORKERS,
                HANDSHAKE_DEADLINE,
            ));
        }
        seen
    }

    fn worker_cpu(pid: u32) -> [f64; WORKERS] {
        let t = benches::procfs::thread_cpu_seconds(pid);
        std::array::from_fn(|i| {
            t.get(&format!("neqo-server-{i}"))
                .copied()
                .unwrap_or_default()
        })
    }

    pub(super) fn main() -> anyhow::Result<()> {
        let args = Args::parse();
        if args.seconds < 2 || args.handshakes == 0 || args.probes == 0 || args.initials == 0 {
            bail!("--seconds must be at least 2; --handshakes, --probes and --initials positive");
        }
        if !args.no_build {
            cargo_build(BUILD_NEQO_BINS).map_err(anyhow::Error::msg)?;
        }
        let datagrams = attack::initials(args.initials, "127.0.0.1:443".parse()?)?;
        println!(
            "Aimed Initial flood: {ATTACKER} learns which of {} source ports reach worker 0 of \
             2 and floods real Initials from those (at most {} s); {} ordinary handshakes from \
             {CLIENT}, new port each. Attacker, client and server share this machine's cores.\n",
            args.probes, args.seconds, args.handshakes
        );
        println!(
            "| server flags | flood [kdatagrams/s] | worker 0 CPU [s] | worker 1 CPU [s] | drops w0 / w1 | shed w0 / w1 | idle: w0 / w1 handshake p50 / p90 [ms] (n) | flood: w0 | flood: w1 | failed |"
        );
        println!("|---|---:|---:|---:|---:|---:|---|---|---|---:|");
        for extra in SETTINGS {
            let json = std::env::temp_dir().join(format!("aim-{}.json", std::process::id()));
            let server = Server::start(
                Command::new(release_binary("neqo-server"))
                    .args(["--listen", "127.0.0.1:0", "--workers", "2", "--json"])
                    .arg(&json)
                    .args(extra),
                Duration::from_secs(20),
            )?;
            let addr = server.addr();
            let mut idle = handshakes(addr, args.handshakes, Duration::ZERO);
            let learned =
                attack::learn_workers(ATTACKER, addr, args.probes, WORKER_OFFSET, WORKERS)?;
            let aimed: Vec<_> = learned
                .into_iter()
                .filter_map(|(s, w)| (w == 0).then_some(s))
                .collect();
            if aimed.is_empty() {
                bail!("no probe reached worker 0");
            }
            let stop = AtomicBool::new(false);
            let cpu_before = worker_cpu(server.id());
            let started = Instant::now();
            let (sent, mut during) = std::thread::scope(|s| {
                let flood = s.spawn(|| {
                    attack::blast(
                        &datagrams,
                        &aimed,
                        addr,
                        args.limit,
                        &stop,
                        started + Duration::from_secs(args.seconds),
                    )
                });
                // Spread over the flood after its first half second.
                std::thread::sleep(Duration::from_millis(500));
                let spread = Duration::from_millis(args.seconds * 1000 - 500) * 9 / 10;
                let every = spread / u32::try_from(args.handshakes).unwrap_or(u32::MAX);
                let seen = handshakes(addr, args.handshakes, every);
                stop.store(true, Ordering::Relaxed);
                (flood.join().expect("flood thread"), seen)
            });
            let flood_secs = started.elapsed().as_secs_f64();
            let cpu_after = worker_cpu(server.id());
            let _ = server.stop()?;
            let report = ServerReport::read(&json);
            let _ = std::fs::remove_file(&json);
            let report = report?;
            let [w0, w1] = &report.workers[..] else {
                bail!(
                    "{}: {} workers reported, not 2",
                    json.display(),
                    report.workers.len()
                );
            };
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            let rate = sent as f64 / flood_secs / 1000.0;
            println!(
                "| {} | {rate:.0} | {:.2} | {:.2} | {} / {} | {} / {} | {} / {} | {} | {} | {} |",
                if extra.is_empty() {
                    "(defaults)".to_owned()
                } else {
                    extra.join(" ")
                },
                cpu_after[0] - cpu_before[0],
                cpu_after[1] - cpu_before[1],
                w0.kernel_drops + w0.dispatch_dropped,
                w1.kernel_drops + w1.dispatch_dropped,
                w0.initials_shed,
                w1.initials_shed,
                idle.show(0),
                idle.show(1),
                during.show(0),
                during.show(1),
                during.failed + idle.failed,
            );
        }
        Ok(())
    }
}
