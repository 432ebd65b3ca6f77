//! Prints what batching buys at the UDP level, measured side by side in one run.
//!
//! `cargo run --release -p benches --bin udp-bench -- [--window-ms MS] [--senders 1,2,4,8]`

use std::{process::ExitCode, time::Duration};

use benches::udp::{self, RECV_DATAGRAM, SEND_DATAGRAM, SendVariant};
use neqo_udp::IoMode;

struct Args {
    window: Duration,
    senders: Vec<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        window: Duration::from_millis(1000),
        senders: vec![1, 2, 4, 8],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--window-ms" => {
                let v = value("--window-ms")?;
                let ms: u64 = v
                    .parse()
                    .map_err(|_| format!("--window-ms: not a number: {v}"))?;
                if ms == 0 {
                    return Err("--window-ms must be positive".into());
                }
                args.window = Duration::from_millis(ms);
            }
            "--senders" => {
                let v = value("--senders")?;
                args.senders = v
                    .split(',')
                    .map(|s| {
                        s.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|n| (1..=64).contains(n))
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        format!("--senders: expected a list like 1,2,4,8 (1..=64), got {v}")
                    })?;
            }
            "-h" | "--help" => {
                println!("usage: udp-bench [--window-ms MS] [--senders 1,2,4,8]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("udp-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "UDP over loopback, {} ms windows, {cores} cores shared by senders and receiver.\n",
        args.window.as_millis()
    );

    println!(
        "Receive: {RECV_DATAGRAM}-byte datagrams from N blocking sender threads to one socket"
    );
    println!(
        "| senders | single dgram/s | batched dgram/s | ratio | batched dgram/syscall | single drops | batched drops | single CPU ns/dgram | batched CPU ns/dgram |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut kv = Vec::new();
    for &n in &args.senders {
        let single = udp::measure_recv(IoMode::Single, n, args.window);
        let batched = udp::measure_recv(IoMode::Batched, n, args.window);
        let ratio = batched.datagrams_per_second() / single.datagrams_per_second().max(1.0);
        println!(
            "| {n} | {:.0} | {:.0} | {ratio:.2} | {:.1} | {} | {} | {:.0} | {:.0} |",
            single.datagrams_per_second(),
            batched.datagrams_per_second(),
            batched.datagrams_per_syscall(),
            single.kernel_drops,
            batched.kernel_drops,
            single.cpu_ns_per_datagram(),
            batched.cpu_ns_per_datagram(),
        );
        for r in [&single, &batched] {
            kv.push(format!(
                "udp_recv senders={n} mode={} datagrams_per_sec={:.0} datagrams_per_syscall={:.2} kernel_drops={} cpu_ns_per_datagram={:.1}",
                r.mode,
                r.datagrams_per_second(),
                r.datagrams_per_syscall(),
                r.kernel_drops,
                r.cpu_ns_per_datagram()
            ));
        }
        kv.push(format!(
            "udp_recv senders={n} batched_over_single={ratio:.3}"
        ));
    }

    println!(
        "\nSend: {SEND_DATAGRAM}-byte datagrams from one socket (receiver drains with GRO on another thread)"
    );
    println!(
        "| variant | dgram/syscall | dgram/s | Gbit/s | syscalls/s | CPU ns/dgram | vs sendmsg x1 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut base = None;
    for v in SendVariant::ALL {
        let r = udp::measure_send(v, args.window);
        let cpu = r.cpu_ns_per_datagram();
        let base_cpu = *base.get_or_insert(cpu);
        let gain = base_cpu / cpu.max(f64::MIN_POSITIVE);
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.0} | {cpu:.0} | {gain:.1}x less CPU |",
            v.name(),
            v.datagrams_per_call(),
            r.datagrams_per_second(),
            r.gbps(),
            r.syscalls_per_second(),
        );
        kv.push(format!(
            "udp_send variant={} datagrams_per_sec={:.0} gbps={:.3} syscalls_per_sec={:.0} cpu_ns_per_datagram={cpu:.1} cpu_gain={gain:.2}",
            v.key(),
            r.datagrams_per_second(),
            r.gbps(),
            r.syscalls_per_second(),
        ));
    }
    println!();
    for line in kv {
        println!("{line}");
    }
    ExitCode::SUCCESS
}
