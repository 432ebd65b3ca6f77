//! `neqo-client`'s load generator against `msquic-peer server`: many connections at once from
//! one process, over several local sockets, every body verified.

use std::{process::Command, time::Duration};

use neqo_bin::client::{self, ClientConfig};
use neqo_driver::tls::Trust;

#[test]
fn concurrent_connections_against_msquic() {
    const BODY: u64 = 100_000;
    let server = test_fixtures::Server::start(
        Command::new(env!("CARGO_BIN_EXE_msquic-peer")).args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--alpn",
            "hq-interop",
        ]),
        Duration::from_secs(60),
    )
    .expect("server starts");
    let mut c = ClientConfig::new(
        url::Url::parse(&format!("https://{}/{BODY}", server.addr())).unwrap(),
        Trust::Insecure,
    );
    c.connections = 32;
    c.concurrency = 16;
    c.sockets = 4;
    c.requests = 4;
    c.parallel = true;
    let r = client::run(c);
    let stopped = server.stop().expect("server stops");
    let r = r.unwrap_or_else(|e| panic!("{e:#}\nserver: {}", stopped.stderr));
    assert_eq!((r.connections, r.requests, r.failed_requests), (32, 128, 0));
    assert_eq!(
        r.bytes_received,
        128 * BODY,
        "every body byte-exact (verified)"
    );
    assert_eq!(r.peak_concurrency, 16);
    assert_eq!(r.sockets_used, 4);
    assert_eq!(r.request_ms.map(|l| l.count), Some(128));
    assert!(stopped.success(), "{}", stopped.ending());
}
