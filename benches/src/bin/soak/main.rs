//! `soak`: `neqo-server` (two workers, a key file, a root, its metrics endpoint, `hq-interop`,
//! `perf` and `h3`, default flags otherwise) under a mixed load for `--minutes M`, seeded:
//! downloads and uploads of varied sizes (`hq-interop` and `perf`), files saved and compared,
//! connection churn with resumption and 0-RTT, clients through a relay that loses, reorders
//! and rebinds, slow readers (stopped for most of every second), requests cancelled by the
//! client and reset by the server, clients killed mid-transfer; over HTTP/3, page-like bursts
//! (a page and 30 files at once on one connection), large downloads, POST uploads, responses
//! given up on mid-body, the impairing relay, and a server of its own shut down under load
//! (GOAWAY: none fails, each request answered or rejected, a clean exit); and every so often
//! a burst of Initials from many spoofed sources and of garbage. Every body is verified.
//!
//! Each second it samples the server: RSS, CPU, descriptors, threads (from `/proc`), open and
//! half-open connections, receive windows granted, kernel drops, requests, datagrams and
//! syscalls each way (from `--metrics`). When the load stops it waits for the server to go
//! back to idle: no connection open or half-open, no window granted, the descriptors and
//! threads it had before the load.
//!
//! Its report (stdout, and in `--out`: `samples.csv`, `soak.png`, `report.txt`): jobs by kind
//! and how they ended, each failure explained by the fault it suffered or not (a bug);
//! requests and bytes verified; the slopes of RSS, descriptors and open connections per hour
//! after warm-up; the state at the end. Exits non-zero on an unexplained failure, on state
//! left once the load stopped, or on a server that did not exit cleanly.
//!
//! With `--h3-service` the servers answer h3 through the library's service path (neqo-server
//! `--h3-service`: the `Files` service on the h3 crate) instead of the built-in HTTP/3, under
//! the same load and checks.
//!
//! `cargo run --release -p benches --bin soak -- [--minutes 30] [--seed 1] [--clients 6]
//! [--out target/soak] [--no-build] [--h3-service]`
//!
//! Linux only (it reads `/proc`); loopback only: the server, the relays and the spoofed
//! sources are on 127.0.0.0/8.

#[cfg(target_os = "linux")]
mod jobs;
#[cfg(target_os = "linux")]
mod plot;
#[cfg(target_os = "linux")]
mod sample;

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    match linux::main() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("soak: samples the server from /proc, so it runs on Linux only");
}

#[cfg(target_os = "linux")]
mod linux {
    use std::{
        collections::BTreeMap,
        fmt::Write as _,
        net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener},
        path::PathBuf,
        process::Command,
        sync::{
            Arc, Mutex,
            atomic::{AtomicBool, Ordering},
        },
        time::{Duration, Instant},
    };

    use anyhow::{Context as _, bail};
    use clap::{Parser, builder::RangedU64ValueParser};
    use rand::{Rng as _, SeedableRng as _, rngs::StdRng};
    use test_fixtures::{BUILD_NEQO_BINS, BUILD_RELAY, Server, cargo_build, release_binary};

    use super::{
        jobs::{FILES, Finished, Job, Kind, Verdict, file_byte},
        plot,
        sample::{self, Sample},
    };

    /// The server's idle timeout (its default): a killed client's connection is gone after it.
    const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
    /// The idle samples before the load, for the baseline.
    const BASELINE: Duration = Duration::from_secs(3);
    /// How long running jobs get to end once the load stops.
    const WIND_DOWN: Duration = Duration::from_secs(200);

    #[derive(Debug, Parser)]
    #[command(
        name = "soak",
        about = "neqo-server under a seeded mixed load with faults and attack bursts, sampled each \
                 second; fails on an unexplained failure or state left"
    )]
    struct Args {
        /// Minutes of load, 0.5 to 600.
        #[arg(long, default_value_t = 30.0, value_parser = minutes)]
        minutes: f64,
        /// Seed of the load's random choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Client processes at once, 1 to 32.
        #[arg(long, default_value_t = 6,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..=32))]
        clients: usize,
        /// Where the report, samples, plot and the jobs' files go (emptied first).
        #[arg(long, value_name = "DIR", default_value = "target/soak")]
        out: PathBuf,
        /// Use the binaries in target/release as they are.
        #[arg(long)]
        no_build: bool,
        /// Serve h3 through the library's service path (`neqo-server --h3-service`): the
        /// soak's server and the servers its drain jobs shut down.
        #[arg(long)]
        h3_service: bool,
        /// Only jobs of these kinds (repeatable or comma-separated; the report's names with
        /// dashes: `hq-drain`, `h3-page`, ...), in their mix's proportions: to look at one.
        #[arg(long, value_delimiter = ',', value_parser = kind)]
        only: Vec<Kind>,
    }

    /// `--only`: a kind by its name, dashes for spaces.
    fn kind(v: &str) -> Result<Kind, String> {
        Kind::MIX
            .iter()
            .map(|m| m.0)
            .find(|k| k.name().replace(' ', "-") == v)
            .ok_or_else(|| {
                let names: Vec<String> = Kind::MIX
                    .iter()
                    .map(|m| m.0.name().replace(' ', "-"))
                    .collect();
                format!("{v}: not a kind of job ({})", names.join(", "))
            })
    }

    /// `--minutes`: 0.5 to 600.
    fn minutes(v: &str) -> Result<f64, String> {
        v.parse()
            .ok()
            .filter(|m| (0.5..=600.0).contains(m))
            .ok_or_else(|| format!("expected 0.5 to 600 minutes, got {v}"))
    }

    /// A free TCP port on 127.0.0.1 for the metrics endpoint.
    fn free_port() -> anyhow::Result<u16> {
        Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
    }

    /// A kind from the mix (of the kinds in `only`, if any).
    fn draw(rng: &mut StdRng, only: &[Kind]) -> Kind {
        let mix = || {
            Kind::MIX
                .iter()
                .filter(|m| only.is_empty() || only.contains(&m.0))
        };
        let total: u32 = mix().map(|m| m.1).sum();
        let mut x = rng.random_range(0..total);
        for &(kind, w) in mix() {
            if x < w {
                return kind;
            }
            x -= w;
        }
        Kind::Download
    }

    /// A burst at `server` on a thread of its own, from sources other than the clients':
    /// spoofed Initials and garbage from 127.0.0.2, then an aimed flood from 127.0.1.1 (the
    /// `aim` bench's attack): the source ports that reach one worker, learned from the
    /// worker byte of the server's connection IDs, flood it with real Initials as fast as a
    /// thread sends, for at most `AIMED_FOR` and `AIMED_LIMIT` datagrams, so that the worker
    /// falls behind its socket and sheds. Returns the datagrams sent.
    fn burst(server: SocketAddr, seed: u64) -> std::thread::JoinHandle<anyhow::Result<u64>> {
        const AIMED_FOR: Duration = Duration::from_secs(2);
        const AIMED_LIMIT: u64 = 500_000;
        std::thread::spawn(move || {
            let spoofed = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
            let initials = benches::attack::initials(2000, server)?;
            benches::attack::send_paced(&initials, server, 4000, 200, spoofed)?;
            let garbage = benches::attack::garbage(2000, &mut StdRng::seed_from_u64(seed));
            benches::attack::send_paced(&garbage, server, 4000, 200, spoofed)?;
            let attacker = IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1));
            // The worker byte follows the connection ID's first byte; two workers.
            let learned = benches::attack::learn_workers(attacker, server, 32, 1, 2)?;
            let target = learned.first().map(|l| l.1);
            let aimed: Vec<_> = learned
                .into_iter()
                .filter_map(|(s, w)| (Some(w) == target).then_some(s))
                .collect();
            if aimed.is_empty() {
                bail!("the aimed flood learned no source port: no probe got a reply");
            }
            let stop = AtomicBool::new(false);
            let deadline = Instant::now() + AIMED_FOR;
            let flood =
                benches::attack::blast(&initials, &aimed, server, AIMED_LIMIT, &stop, deadline);
            Ok((initials.len() + garbage.len()) as u64 + flood)
        })
    }

    /// Moves the jobs that ended (after delivering the faults now due) to `finished`.
    fn reap(running: &mut Vec<Job>, finished: &mut Vec<Finished>) {
        running.retain_mut(|j| match j.poll() {
            Some(f) => {
                finished.push(f);
                false
            }
            None => true,
        });
    }

    /// Per kind: runs, ok, explained failures, unexplained failures.
    #[derive(Default)]
    struct Tally {
        runs: u64,
        ok: u64,
        explained: BTreeMap<String, u64>,
        unexplained: Vec<String>,
    }

    pub fn main() -> anyhow::Result<bool> {
        let a = Args::parse();
        if !a.no_build {
            eprintln!("soak: building neqo-server, neqo-client and neqo-relay (release)...");
            cargo_build(BUILD_NEQO_BINS).map_err(anyhow::Error::msg)?;
            cargo_build(BUILD_RELAY).map_err(anyhow::Error::msg)?;
        }
        let _ = std::fs::remove_dir_all(&a.out);
        let www = a.out.join("www");
        std::fs::create_dir_all(&www)?;
        for (name, size) in FILES {
            std::fs::write(
                www.join(name),
                (0..size).map(file_byte).collect::<Vec<u8>>(),
            )?;
        }
        let jobs_dir = a.out.join("jobs");
        let metrics: SocketAddr = (Ipv4Addr::LOCALHOST, free_port()?).into();
        let server = Server::start(
            Command::new(release_binary("neqo-server"))
                .args([
                    "--listen",
                    "127.0.0.1:0",
                    "--workers",
                    "2",
                    "--alpn",
                    "hq-interop,perf,h3",
                    "--key-file",
                ])
                .arg(a.out.join("server.key"))
                .arg("--root")
                .arg(&www)
                .arg("--generate")
                // Every request logged, as a production server would: the log's writer under
                // the soak's load, and its lines checked at the end.
                .arg("--access-log")
                .arg(a.out.join("access.log"))
                .args(["--metrics", &metrics.to_string(), "--json"])
                .arg(a.out.join("server.json"))
                .args(a.h3_service.then_some("--h3-service")),
            Duration::from_secs(30),
        )
        .map_err(|e| anyhow::anyhow!("neqo-server: {e}"))?;
        let addr = server.addr();
        let pid = server.id();
        let started = Instant::now();
        let duration = Duration::from_secs_f64(a.minutes * 60.0);
        eprintln!(
            "soak: neqo-server (pid {pid}) on {addr}, metrics on {metrics}; {} min of load from {} clients at once, seed {}",
            a.minutes, a.clients, a.seed
        );

        // The sampler: one sample a second, tagged with the phase.
        let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
        let phase = Arc::new(Mutex::new("idle"));
        let done = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (samples, phase, done) = (samples.clone(), phase.clone(), done.clone());
            std::thread::spawn(move || {
                let mut next = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    let p = *phase
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let s = sample::take(pid, metrics, started.elapsed().as_secs_f64(), p);
                    samples
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(s);
                    next += Duration::from_secs(1);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            })
        };
        let snapshot = || {
            samples
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        };
        std::thread::sleep(BASELINE);
        let idle = snapshot()
            .last()
            .cloned()
            .filter(|s| s.scraped)
            .context("the server's metrics endpoint did not answer")?;

        // The load.
        *phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = "load";
        let mut rng = StdRng::seed_from_u64(a.seed);
        let burst_every = (duration / 8).clamp(Duration::from_secs(15), Duration::from_secs(180));
        let mut next_burst = Instant::now() + burst_every;
        let mut bursts = Vec::new();
        let mut running: Vec<Job> = Vec::new();
        let mut finished: Vec<Finished> = Vec::new();
        let mut n = 0u64;
        let load_start = Instant::now();
        while load_start.elapsed() < duration {
            while running.len() < a.clients {
                n += 1;
                running.push(Job::start(
                    draw(&mut rng, &a.only),
                    n,
                    (addr, a.h3_service),
                    &jobs_dir,
                    &mut rng,
                )?);
            }
            if Instant::now() >= next_burst {
                bursts.push(burst(addr, rng.random()));
                next_burst += burst_every;
            }
            reap(&mut running, &mut finished);
            std::thread::sleep(Duration::from_millis(20));
        }
        let load_end = started.elapsed().as_secs_f64();
        let wind_down = Instant::now();
        while !running.is_empty() && wind_down.elapsed() < WIND_DOWN {
            reap(&mut running, &mut finished);
            std::thread::sleep(Duration::from_millis(20));
        }
        let hung = running.len();
        drop(running);
        let mut attack_datagrams = 0;
        for b in bursts {
            match b.join() {
                Ok(Ok(sent)) => attack_datagrams += sent,
                Ok(Err(e)) => bail!("an attack burst failed: {e}"),
                Err(_) => bail!("an attack burst panicked"),
            }
        }

        // Back to idle: every connection closed (a killed client's at the idle timeout), no
        // window granted, the descriptors and threads of before.
        *phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = "drain";
        let drain_start = Instant::now();
        let drain_limit = 2 * IDLE_TIMEOUT + Duration::from_secs(10);
        let back_to_idle = |s: &Sample| {
            s.scraped
                && s.open == 0
                && s.half_open == 0
                && s.windows == 0
                && s.fds <= idle.fds
                && s.threads <= idle.threads
        };
        let mut drained_after = None;
        while drain_start.elapsed() < drain_limit {
            std::thread::sleep(Duration::from_secs(1));
            if snapshot().last().is_some_and(back_to_idle) {
                drained_after = Some(drain_start.elapsed());
                break;
            }
        }
        // A few more samples at rest.
        std::thread::sleep(Duration::from_secs(3));
        done.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        let samples = snapshot();
        let stopped = server.stop().context("stopping the server")?;

        // The report.
        let mut tally: BTreeMap<Kind, Tally> = BTreeMap::new();
        let (mut requests, mut bytes) = (0, 0);
        for f in &finished {
            let t = tally.entry(f.kind).or_default();
            t.runs += 1;
            requests += f.requests;
            bytes += f.bytes;
            match &f.verdict {
                Verdict::Ok => t.ok += 1,
                Verdict::Explained(why) => *t.explained.entry(why.clone()).or_default() += 1,
                Verdict::Unexplained(why) => t.unexplained.push(why.clone()),
            }
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "soak: {} min at seed {}, {} clients at once, against neqo-server --workers 2 (pid {pid})",
            a.minutes, a.seed, a.clients
        );
        let _ = writeln!(
            out,
            "\n| job | runs | ok | failed, explained | failed, unexplained |\n|---|---:|---:|---|---:|"
        );
        let mut unexplained = Vec::new();
        for (kind, t) in &tally {
            let explained: Vec<String> = t
                .explained
                .iter()
                .map(|(w, c)| format!("{c} {w}"))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                kind.name(),
                t.runs,
                t.ok,
                if explained.is_empty() {
                    "0".into()
                } else {
                    explained.join("; ")
                },
                t.unexplained.len()
            );
            unexplained.extend(
                t.unexplained
                    .iter()
                    .map(|w| format!("{}: {w}", kind.name())),
            );
        }
        let initials_shed = samples.iter().map(|s| s.initials_shed).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "\n{requests} requests completed and verified, {bytes} B verified; {} attack datagrams in bursts every {:?} (spoofed Initials and garbage from 127.0.0.2, an aimed Initial flood from 127.0.1.1), {} Initials shed; {hung} jobs hung",
            attack_datagrams, burst_every, initials_shed
        );
        for u in unexplained.iter().take(20) {
            let _ = writeln!(out, "unexplained: {u}");
        }

        // Leaks: slopes after warm-up (the first fifth of the load, at least 10 s).
        let warm = (load_end / 5.0).max(10.0).min(load_end);
        let loaded: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.phase == "load" && s.t >= warm)
            .collect();
        let per_hour = |f: &dyn Fn(&Sample) -> f64| {
            let points: Vec<(f64, f64)> = loaded.iter().map(|s| (s.t, f(s))).collect();
            sample::slope(&points).map_or("-".to_owned(), |v| format!("{:+.1}", v * 3600.0))
        };
        let peak = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let last = samples.last().cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "\nafter warm-up ({warm:.0} s), per hour: RSS {} MiB, descriptors {}, open connections {}",
            per_hour(&|s| s.rss_kib as f64 / 1024.0),
            per_hour(&|s| s.fds as f64),
            per_hour(&|s| s.open as f64)
        );
        let _ = writeln!(
            out,
            "RSS: {:.1} MiB idle, {:.1} MiB peak, {:.1} MiB at the end; descriptors {} idle, {} at the end; threads {} idle, {} at the end",
            idle.rss_kib as f64 / 1024.0,
            peak as f64 / 1024.0,
            last.rss_kib as f64 / 1024.0,
            idle.fds,
            last.fds,
            idle.threads,
            last.threads
        );
        let _ = writeln!(
            out,
            "the server's CPU: {:.1} s in all; kernel drops {}; requests answered {}",
            last.cpu_s, last.kernel_drops, last.requests
        );
        match drained_after {
            Some(d) => {
                let _ = writeln!(
                    out,
                    "back to idle {:.0} s after the load stopped (no connection open or half-open, no window granted, the descriptors and threads of before)",
                    d.as_secs_f64()
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "NOT back to idle {drain_limit:?} after the load stopped: open {} half-open {} windows {} B descriptors {} threads {}",
                    last.open, last.half_open, last.windows, last.fds, last.threads
                );
            }
        }
        // Every request handler ran to its end: a panic caught costs a request, not the
        // server, but under the soak's load it is a bug all the same.
        // (The counter only grows; the last samples may find the endpoint gone.)
        let panics = samples.iter().map(|s| s.app_panics).max().unwrap_or(0);
        let no_panics = panics == 0;
        if !no_panics {
            let _ = writeln!(out, "PANICS caught in the server's services: {panics}");
        }
        let clean_exit = stopped.success() && !stopped.killed;
        if !clean_exit {
            let _ = writeln!(out, "the server did not exit cleanly: {}", stopped.ending());
        }
        // The access log kept up: a line for every request, none dropped by a writer behind.
        let log = std::fs::read_to_string(a.out.join("access.log")).unwrap_or_default();
        let answered = log.lines().filter(|l| l.ends_with(" answered")).count();
        let log_kept_up = !stopped.stderr.contains("the access log dropped");
        let _ = writeln!(
            out,
            "access log: {} lines, {answered} answered{}",
            log.lines().count(),
            if log_kept_up {
                String::new()
            } else {
                format!(", LINES DROPPED: {}", stopped.ending())
            }
        );

        let csv: String = std::iter::once(Sample::CSV_HEADER.to_owned())
            .chain(samples.iter().map(Sample::csv))
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(a.out.join("samples.csv"), csv + "\n")?;
        match plot::write(&samples, load_end, &a.out.join("soak.png")) {
            Ok(()) => {
                let _ = writeln!(out, "plot: {}", a.out.join("soak.png").display());
            }
            Err(e) => {
                let _ = writeln!(out, "no plot: {e}");
            }
        }
        std::fs::write(a.out.join("report.txt"), &out)?;
        print!("{out}");
        let pass = unexplained.is_empty()
            && hung == 0
            && drained_after.is_some()
            && clean_exit
            && no_panics
            && log_kept_up;
        println!("verdict: {}", if pass { "pass" } else { "FAIL" });
        Ok(pass)
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
