//! quiche on neqo-udp's socket against `neqo-server` (in process, on loopback): a handshake and
//! an 8 MiB download, byte-exact, with batches visible in the socket's counters (GRO runs of
//! the server's GSO sends arriving several datagrams per receive syscall).

use std::time::Duration;

use neqo_server_core::{ServerConfig, ServerHandle};

#[test]
fn quiche_downloads_from_neqo_server_over_neqo_udp() {
    const BYTES: u64 = 8 << 20;
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        ..ServerConfig::default()
    })
    .expect("server starts");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = rt
        .block_on(quiche_peer::get(
            server.addr(),
            &format!("/{BYTES}"),
            neqo_udp::Config::default(),
            // A hang guard, not a speed bound.
            Duration::from_secs(60),
        ))
        .expect("the download");
    println!(
        "quiche over neqo-udp: {} bytes in {:.3?}; datagrams per syscall rx {:.2} tx {:.2}",
        got.bytes,
        got.elapsed,
        got.socket.rx.datagrams_per_syscall(),
        got.socket.tx.datagrams_per_syscall()
    );
    assert_eq!(got.bytes, BYTES);
    assert!(got.pattern_ok, "the generated body, byte for byte");
    assert!(
        got.socket.rx.datagrams_per_syscall() > 1.0,
        "receives carried batches: {}",
        got.socket
    );
    assert!(
        got.socket.rx.offload_segments > 0,
        "GRO runs: {}",
        got.socket
    );
    let report = server.stop().unwrap();
    assert_eq!(report.requests, 1);
    assert_eq!(report.bytes_sent, BYTES);
}
