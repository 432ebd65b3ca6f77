//! `neqo-relay`: a UDP impairment relay between QUIC clients and a server.
//!
//! ```text
//! neqo-relay --listen 127.0.0.1:4444 --upstream 127.0.0.1:4433 --delay 10 --loss 1%
//! ```

use std::{net::SocketAddr, process::ExitCode, sync::Mutex, time::Duration};

use clap::Parser;
use neqo_relay::{self as relay, Impairment, Rebind, RebindEvery, RelayConfig, RelayStats};

/// Forwards UDP datagrams between clients and one server, both ways, impairing them as asked.
/// Every impairment applies to each direction. Probabilities take `0.05` or `5%`.
#[derive(Debug, Parser)]
#[command(name = "neqo-relay", version)]
struct Args {
    /// Address clients send to.
    #[arg(long)]
    listen: SocketAddr,
    /// The server's address.
    #[arg(long)]
    upstream: SocketAddr,
    /// One-way delay, in milliseconds.
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    delay: f64,
    /// Extra random delay of up to this many milliseconds per datagram.
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    jitter: f64,
    /// Probability of dropping a datagram.
    #[arg(long, default_value = "0", value_parser = probability, value_name = "P")]
    loss: f64,
    /// Probability of holding a datagram back so that later ones overtake it.
    #[arg(long, default_value = "0", value_parser = probability, value_name = "P")]
    reorder: f64,
    /// Probability of delivering a datagram twice.
    #[arg(long, default_value = "0", value_parser = probability, value_name = "P")]
    duplicate: f64,
    /// Probability of flipping one bit of a datagram.
    #[arg(long, default_value = "0", value_parser = probability, value_name = "P")]
    corrupt: f64,
    /// Bottleneck rate in Mbit/s (default: unlimited).
    #[arg(long, value_name = "MBIT")]
    rate: Option<f64>,
    /// Datagrams the bottleneck queue holds before dropping.
    #[arg(long, default_value_t = 1000, value_name = "PACKETS")]
    queue: usize,
    /// RNG seed: the same seed and traffic replay the same impairments.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Drop everything, both ways, from AFTER ms after the first client datagram for FOR ms.
    #[arg(long, value_name = "AFTER:FOR", value_parser = blackhole)]
    blackhole: Option<(Duration, Duration)>,
    /// For MS ms after the first client datagram, drop the client's others and count what
    /// the server sends: the anti-amplification limit, measured.
    #[arg(long, value_name = "MS")]
    amplification_window: Option<u64>,
    /// Give each client a new upstream port every this many milliseconds (from the first
    /// client datagram), as a NAT rebinding.
    #[arg(long, value_name = "MS")]
    rebind_every: Option<u64>,
    /// Give each client a new upstream port at every N of its short-header (1-RTT)
    /// datagrams: a count of traffic, not of time, and never during a handshake.
    #[arg(long, value_name = "N", conflicts_with = "rebind_every")]
    rebind_after: Option<u64>,
    /// With --rebind-every or --rebind-after: a new address too (127.0.0.2 onwards; IPv4
    /// loopback servers).
    #[arg(long)]
    rebind_addr: bool,
    /// With --rebind-every or --rebind-after: rebind each client at most this many times.
    #[arg(long, value_name = "N")]
    rebind_limit: Option<u64>,
    /// Print the counts every this many seconds (0: only at exit).
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    stats_interval: u64,
}

fn probability(s: &str) -> Result<f64, String> {
    let (num, scale) = s.strip_suffix('%').map_or((s, 1.0), |n| (n, 100.0));
    let p = num
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("not a probability: {s:?} (use 0.05 or 5%)"))?
        / scale;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{s} is not between 0 and 1 (0% and 100%)"))
    }
}

fn blackhole(s: &str) -> Result<(Duration, Duration), String> {
    let parse = |v: &str| {
        v.trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("not AFTER:FOR in milliseconds: {s:?}"))
    };
    let (after, len) = s
        .split_once(':')
        .ok_or_else(|| format!("not AFTER:FOR in milliseconds: {s:?}"))?;
    Ok((parse(after)?, parse(len)?))
}

fn millis(ms: f64, name: &str) -> Result<Duration, String> {
    if ms.is_finite() && ms >= 0.0 {
        Ok(Duration::from_secs_f64(ms / 1000.0))
    } else {
        Err(format!(
            "--{name} must be a non-negative number of milliseconds"
        ))
    }
}

fn config(args: &Args) -> Result<RelayConfig, String> {
    let imp = Impairment {
        delay: millis(args.delay, "delay")?,
        jitter: millis(args.jitter, "jitter")?,
        loss: args.loss,
        reorder: args.reorder,
        duplicate: args.duplicate,
        corrupt: args.corrupt,
        rate_mbit: args.rate,
        queue: args.queue,
    };
    imp.validate()?;
    let every = match (args.rebind_every, args.rebind_after) {
        (Some(0), _) => return Err("--rebind-every must be at least 1 ms".to_owned()),
        (_, Some(0)) => return Err("--rebind-after must be at least 1 datagram".to_owned()),
        (Some(ms), _) => Some(RebindEvery::Interval(Duration::from_millis(ms))),
        (None, Some(n)) => Some(RebindEvery::Datagrams(n)),
        (None, None) if args.rebind_addr || args.rebind_limit.is_some() => {
            return Err(
                "--rebind-addr and --rebind-limit need --rebind-every or --rebind-after".to_owned(),
            );
        }
        (None, None) => None,
    };
    if args.rebind_limit == Some(0) {
        return Err("--rebind-limit must be at least 1 (leave out --rebind-* for none)".to_owned());
    }
    let rebind = every.map(|every| Rebind {
        every,
        addr: args.rebind_addr,
        limit: args.rebind_limit,
    });
    if args.rebind_addr
        && !matches!(args.upstream.ip(), std::net::IpAddr::V4(ip) if ip.is_loopback())
    {
        return Err("--rebind-addr needs an IPv4 loopback --upstream".to_owned());
    }
    Ok(RelayConfig {
        blackhole: args.blackhole,
        amplification_window: args.amplification_window.map(Duration::from_millis),
        rebind,
        ..RelayConfig::symmetric(args.listen, args.upstream, imp, args.seed)
    })
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("neqo-relay: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("neqo-relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stats = Mutex::new(RelayStats::default());
    let result = rt.block_on(async {
        let listen = neqo_udp::Socket::bind(config.listen, config.io.clone())?;
        println!("neqo-relay listening on {}, forwarding to {}", listen.local_addr()?, config.upstream);
        let interval = args.stats_interval;
        let relay = relay::run(listen, config, shutdown_signal(), &stats);
        if interval == 0 {
            relay.await
        } else {
            tokio::pin!(relay);
            let mut tick = tokio::time::interval(Duration::from_secs(interval));
            tick.tick().await;
            loop {
                tokio::select! {
                    r = &mut relay => break r,
                    _ = tick.tick() => println!("{}", *stats.lock().unwrap_or_else(std::sync::PoisonError::into_inner)),
                }
            }
        }
    });
    match result {
        Ok(s) => {
            println!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("neqo-relay: {e}");
            ExitCode::FAILURE
        }
    }
}
