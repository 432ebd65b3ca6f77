//! The client as a load generator: many connections at once from one process, spread over
//! several local sockets, at a bounded rate, each request verified and timed.

use std::{net::SocketAddr, time::Duration};

use neqo_bin::client::{self, ClientConfig};
use neqo_driver::tls::Trust;
use neqo_server_core::{ServerConfig, ServerHandle};

/// The idle and handshake timeouts of both ends: many connections at once on a loaded
/// machine wait their turns longer than the defaults (5 s for a handshake, 10 s idle).
const LONG: Duration = Duration::from_secs(120);

fn server_with(f: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        ..ServerConfig::default()
    };
    cfg.transport.idle_timeout = LONG;
    cfg.limits.handshake_timeout = LONG;
    f(&mut cfg);
    ServerHandle::start(cfg).expect("server starts")
}

fn load(server: &ServerHandle, path: &str, f: impl FnOnce(&mut ClientConfig)) -> ClientConfig {
    let addr: SocketAddr = server.addr();
    let mut c = ClientConfig::new(
        url::Url::parse(&format!("https://{addr}{path}")).unwrap(),
        Trust::Certs(server.certificate().to_vec()),
    );
    c.transport.idle_timeout = LONG;
    f(&mut c);
    c
}

#[test]
fn concurrent_connections_over_several_sockets_all_verified() {
    const BODY: u64 = 200_000;
    let s = server_with(|_| {});
    let r = client::run(load(&s, &format!("/{BODY}"), |c| {
        c.connections = 24;
        c.concurrency = 8;
        c.sockets = 4;
        c.requests = 3;
        c.parallel = true;
    }))
    .expect("every request succeeds");
    assert_eq!(r.connections, 24);
    assert_eq!(r.requests, 72);
    assert_eq!(r.failed_requests, 0);
    assert_eq!(
        r.bytes_received,
        72 * BODY,
        "every body byte-exact (verified)"
    );
    assert_eq!(r.concurrency, 8);
    assert_eq!(r.peak_concurrency, 8, "eight at once, never more");
    assert_eq!(
        r.sockets_used, 4,
        "the connections spread over every socket"
    );
    let h = r.handshake_ms.expect("handshakes timed");
    assert_eq!(h.count, 24);
    assert!(h.p50 > 0.0 && h.p50 <= h.p90 && h.p90 <= h.p99 && h.p99 <= h.max);
    let l = r.request_ms.expect("requests timed");
    assert_eq!(l.count, 72);
    assert!(l.p50 > 0.0 && l.p99 <= l.max);
    let f = r.connection_gbps.expect("per-connection rates");
    assert_eq!(f.count, 24);
    assert!(f.min > 0.0 && f.min <= f.median && f.median <= f.max);
    assert!(r.requests_per_second > 0.0);
    let sr = s.stop().unwrap();
    assert_eq!(sr.requests, 72);
    assert_eq!(sr.driver.accepted, 24);
    assert!(
        sr.driver.peak_connections >= 8,
        "the server had {} connections at once at most",
        sr.driver.peak_connections
    );
}

#[test]
fn one_at_a_time_by_default() {
    let s = server_with(|_| {});
    let r = client::run(load(&s, "/1000", |c| c.connections = 5)).expect("all succeed");
    assert_eq!((r.connections, r.requests), (5, 5));
    assert_eq!(r.peak_concurrency, 1);
    assert_eq!(r.sockets_used, 1);
    assert_eq!(r.handshake_ms.map(|h| h.count), Some(5));
    s.stop().unwrap();
}

#[test]
fn a_rate_spaces_the_connections_out() {
    let s = server_with(|_| {});
    // 10 connections at 40 per second: the last opens 9/40 s after the first, however fast
    // the machine, so the run cannot take less.
    let r = client::run(load(&s, "/1", |c| {
        c.connections = 10;
        c.concurrency = 10;
        c.rate = Some(40.0);
    }))
    .expect("all succeed");
    assert_eq!(r.connections, 10);
    assert!(r.seconds >= 9.0 / 40.0, "{} s", r.seconds);
    s.stop().unwrap();
}

#[test]
fn refused_connections_fail_the_run_and_the_others_finish() {
    // Two connections at most: of eight opened at once, some are refused.
    let s = server_with(|c| c.limits.max_connections = Some(2));
    let r = client::run_report(load(&s, "/100000", |c| {
        c.connections = 8;
        c.concurrency = 8;
        c.sockets = 8;
    }))
    .expect("the run itself completes");
    assert!(r.failed_requests >= 1, "{r:?}");
    assert!(
        r.errors.iter().any(|e| e.contains("refused")),
        "{:?}",
        r.errors
    );
    assert!(r.requests >= 2, "the admitted connections finish: {r:?}");
    assert_eq!(
        r.bytes_received,
        r.requests * 100_000,
        "completed requests are whole"
    );
    assert_eq!(
        r.requests + r.failed_requests,
        8,
        "every request accounted for"
    );
    s.stop().unwrap();
}
