//! Criterion groups `udp/recv` and `udp/send`: each mode side by side, throughput in
//! datagrams so criterion prints elem/s.

use std::time::{Duration, Instant};

use benches::udp::{Flood, RECV_DATAGRAM, SendFixture, SendVariant};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use neqo_udp::{Config, IoMode, Socket};

const RECV_PER_ITER: u64 = 20_000;
const SEND_PER_ITER: u64 = 32 * 1024;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn recv(c: &mut Criterion) {
    let mut group = c.benchmark_group("udp/recv");
    group.throughput(Throughput::Elements(RECV_PER_ITER));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));
    for senders in [1, 2, 4, 8] {
        for mode in [IoMode::Single, IoMode::Batched] {
            let rt = runtime();
            let socket = rt.block_on(async {
                Socket::bind(
                    "127.0.0.1:0".parse().unwrap(),
                    Config::default().with_mode(mode),
                )
                .unwrap()
            });
            // Bounded: the senders stop when the benchmark ends, and after 2 minutes anyway.
            let flood = Flood::start(
                socket.local_addr().unwrap(),
                senders,
                RECV_DATAGRAM,
                Duration::from_secs(120),
            );
            let mut batch = socket.recv_batch();
            group.bench_function(BenchmarkId::new(format!("{senders}-senders"), mode), |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let mut got = 0;
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while got < RECV_PER_ITER && Instant::now() < deadline {
                            match socket.recv(&mut batch) {
                                Ok(s) => {
                                    got += s.datagrams as u64;
                                    batch.datagrams().for_each(drop);
                                }
                                Err(_) => {
                                    let _ = tokio::time::timeout(
                                        Duration::from_millis(50),
                                        socket.readable(),
                                    )
                                    .await;
                                }
                            }
                        }
                    });
                });
            });
            let stats = socket.stats();
            println!(
                "udp/recv {senders}-senders/{mode}: {:.1} datagrams/syscall, {} kernel drops",
                stats.rx.datagrams_per_syscall(),
                stats.kernel_drops
            );
            flood.stop();
        }
    }
    group.finish();
}

fn send(c: &mut Criterion) {
    let mut group = c.benchmark_group("udp/send");
    group.throughput(Throughput::Elements(SEND_PER_ITER));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(500));
    for variant in SendVariant::ALL {
        let rt = runtime();
        let fixture = rt.block_on(async { SendFixture::new(variant) });
        group.bench_function(variant.key(), |b| {
            b.iter(|| rt.block_on(fixture.send(SEND_PER_ITER)));
        });
        println!(
            "udp/send {}: {:.1} datagrams/syscall",
            variant.key(),
            fixture.socket.stats().tx.datagrams_per_syscall()
        );
    }
    group.finish();
}

criterion_group!(benches, recv, send);
criterion_main!(benches);
