//! Criterion group `transfer`: QUIC transfers through the `neqo-bin` driver on 127.0.0.1, the
//! server and the client in this process on their own threads and current-thread runtimes.
//!
//! - `1-conn/1-100mb-resp (aka. Download)`: one connection, one 100 MiB response.
//! - `1-conn/10_000-parallel-1b-resp (aka. RPS)`: one connection, 10 000 parallel requests of
//!   a 1-byte response (100 streams at a time, the server's stream limit).
//! - `100-seq-conn/1-1b-resp (aka. HPS)`: 100 sequential connections, one 1-byte request each.
//! - `1-conn/1-100mb-req (aka. Upload)`: one connection, 100 MiB uploaded with `perf`.
//! - `100-conn/1-1mb-resp`: 100 connections at once from one client (over 16 local
//!   sockets), one 1 MiB response each.
//!
//! Each runs in I/O mode `batched` and `single`, pacing on; Download, Upload and 100-conn also with
//! pacing off (`batched-unpaced`, `single-unpaced`); Download and RPS also over HTTP/3
//! (`batched-h3`: the same requests with ALPN `h3`, beside `hq-interop`; `batched-h3-service`:
//! answered by the library's service path, the `Files` service on the h3 crate). One server per benchmark function. After
//! each, a line gives the mean datagrams per syscall of both sides in both directions, the
//! kernel drops, lost packets, and the process CPU time per MiB, request or connection.
//!
//! Download also runs as `tcp+tls`: the baseline QUIC is weighed against, the same 100 MiB
//! response over TLS 1.3 (rustls, AES-128-GCM) over kernel TCP (`benches::tcp_tls`, blocking,
//! one thread per side); its line gives the process CPU time per MiB.

use std::time::Duration;

use benches::transfer::{Fixture, Scenario, TCP_TLS, TcpTlsFixture, Unit};
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};

fn transfer(c: &mut Criterion) {
    // As in the binaries: warnings to stderr, and quinn-proto's spans filtered out at their
    // call sites (without a subscriber each one still goes through `tracing`'s log fallback).
    neqo_bin::cli::init_logging();
    let mut group = c.benchmark_group("transfer");
    // One run takes 0.02 s to 1 s: flat sampling takes `sample_size` samples of equally many
    // runs. About 2.5 minutes in all on 2 cores.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    for scenario in Scenario::ALL {
        let workload = scenario.full();
        group.throughput(match scenario.unit(workload) {
            Unit::Bytes(b) => Throughput::Bytes(b),
            Unit::Elements(n) => Throughput::Elements(n),
        });
        group.measurement_time(Duration::from_secs(match scenario {
            Scenario::Download | Scenario::Upload | Scenario::ManyConn => 10,
            Scenario::Rps | Scenario::Hps => 5,
        }));
        for variant in scenario.variants() {
            let mut fixture = Fixture::start(scenario, workload, variant)
                .unwrap_or_else(|e| panic!("starting the server: {e:#}"));
            group.bench_function(BenchmarkId::new(scenario.name(), variant.label()), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| fixture.run().unwrap_or_else(|e| panic!("{e}")))
                        .sum()
                });
            });
            let summary = fixture
                .finish()
                .unwrap_or_else(|e| panic!("the server failed: {e:#}"));
            // Nothing ran when a command-line filter skipped this benchmark.
            if summary.runs > 0 {
                println!("{}", summary.line());
            }
        }
        if scenario == Scenario::Download {
            let mut fixture = TcpTlsFixture::start(workload.bytes)
                .unwrap_or_else(|e| panic!("starting the TCP+TLS server: {e:#}"));
            group.bench_function(BenchmarkId::new(scenario.name(), TCP_TLS), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| fixture.run().unwrap_or_else(|e| panic!("{e}")))
                        .sum()
                });
            });
            if fixture.runs() > 0 {
                println!("{}", fixture.finish());
            }
        }
    }
    group.finish();
}

criterion_group!(benches, transfer);
criterion_main!(benches);
