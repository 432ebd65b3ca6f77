//! Prints what batching buys at the UDP level, measured side by side in one run.
//!
//! `cargo run --release -p benches --bin udp-bench -- [--window-ms MS] [--senders 1,2,4,8]`

use std::time::Duration;

use benches::{
    args::{number_in, positive},
    udp::{self, RECV_DATAGRAM, SEND_DATAGRAM, SendVariant},
};
use clap::Parser;
use neqo_udp::IoMode;

#[derive(Debug, Parser)]
#[command(
    name = "udp-bench",
    about = "What batching buys at the UDP level, measured side by side in one run"
)]
struct Args {
    /// Milliseconds each measurement runs.
    #[arg(long = "window-ms", value_name = "MS", default_value_t = 1000,
          value_parser = positive::<u64>)]
    window_ms: u64,
    /// Counts of sender threads the receive side is measured with, comma separated.
    #[arg(long, value_name = "N1,N2,...", value_delimiter = ',', default_value = "1,2,4,8",
          value_parser = number_in::<usize>(1..=64))]
    senders: Vec<usize>,
}

fn main() {
    let args = Args::parse();
    let window = Duration::from_millis(args.window_ms);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "UDP over loopback, {} ms windows, {cores} cores shared by senders and receiver.\n",
        window.as_millis()
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
        let single = udp::measure_recv(IoMode::Single, n, window);
        let batched = udp::measure_recv(IoMode::Batched, n, window);
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
        let r = udp::measure_send(v, window);
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
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::Args;

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
        let a = Args::try_parse_from(["udp-bench"]).unwrap();
        assert_eq!((a.window_ms, a.senders), (1000, vec![1, 2, 4, 8]));
        let a = Args::try_parse_from(["udp-bench", "--senders", "1, 2"]).unwrap();
        assert_eq!(a.senders, [1, 2]);
        for refused in [
            &["--senders", "0"][..],
            &["--senders", "65"],
            &["--window-ms", "0"],
        ] {
            assert!(
                Args::try_parse_from(std::iter::once("udp-bench").chain(refused.iter().copied()))
                    .is_err(),
                "{refused:?}"
            );
        }
    }
}
