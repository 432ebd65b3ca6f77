//! `neqo-server --metrics`: the endpoint scraped during a transfer (the counts move), once
//! it is over (they agree with the JSON report), with what a scraper should not send, and
//! while slow clients hold it; an address it cannot listen on refuses the start.

mod common;

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use common::{http, scrape, url};
use neqo_bin::client::{self, ClientConfig};
use neqo_driver::TransportOptions;
use neqo_driver::tls::Trust;
use neqo_server_core::{ServerConfig, ServerHandle};

/// A hang guard, not a speed bound.
const DEADLINE: Duration = Duration::from_secs(60);

/// The sum over workers of `name`'s samples whose labels contain `with`.
fn sum(m: &HashMap<String, f64>, name: &str, with: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.split('{').next() == Some(name) && k.contains(with))
        .map(|(_, v)| v)
        .sum()
}

/// Polls `f` every 20 ms until it gives a value, for at most [`DEADLINE`] (a hang guard).
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn metrics_move_during_a_transfer_and_agree_with_the_report() {
    /// Client runs, one after another, of two connections each (the second resumes with the
    /// first's ticket).
    const RUNS: usize = 4;
    const CONNECTIONS: usize = 2 * RUNS;
    const BYTES: u64 = 1 << 20;
    let long = Duration::from_secs(120);
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        workers: 2,
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        transport: TransportOptions {
            idle_timeout: long,
            ..TransportOptions::default()
        },
        ..ServerConfig::default()
    })
    .expect("server starts");
    let metrics = server.metrics_addr().expect("the endpoint");
    let idle = scrape(metrics);
    assert_eq!(idle["neqo_server_connections_open"], 0.0);
    // After each run, the scrapes until one counts its responses: the counts move while the
    // server runs, by each run's events, however fast or slow the machine.
    let mut seen = Vec::new();
    for run in 1..=RUNS {
        let mut c = ClientConfig::new(url(server.addr(), &format!("/{BYTES}")), Trust::Insecure);
        c.connections = 2;
        c.concurrency = 1;
        c.sockets = 2;
        c.transport.idle_timeout = long;
        let r = client::run(c).expect("the downloads");
        assert_eq!(r.requests, 2);
        let want = (run as u64 * 2 * BYTES) as f64;
        seen.push(wait_for("the run's responses in a scrape", || {
            let got = sum(&scrape(metrics), "neqo_server_response_bytes_total", "");
            (got >= want).then_some(got)
        }));
    }
    seen.dedup();
    assert_eq!(
        seen.len(),
        RUNS,
        "the response bytes moved with each run: {seen:?}"
    );
    assert!(seen.is_sorted(), "a counter never goes down: {seen:?}");
    // Once every worker has published since the last response (bounded wait).
    let started = Instant::now();
    let settled = loop {
        let m = scrape(metrics);
        if sum(&m, "neqo_server_requests_total", "") >= CONNECTIONS as f64 {
            break m;
        }
        assert!(started.elapsed() < DEADLINE, "the requests never showed");
        std::thread::sleep(Duration::from_millis(100));
    };
    let answered = http(metrics, b"GET /other HTTP/1.1\r\n\r\n");
    assert!(answered.starts_with("HTTP/1.1 404"), "{answered}");
    let posted = http(metrics, b"POST /metrics HTTP/1.1\r\n\r\n");
    assert!(posted.starts_with("HTTP/1.1 405"), "{posted}");
    let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    huge.resize(10_000, b'a');
    let refused = http(metrics, &huge);
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");

    let r = server.stop().unwrap();
    for (name, with, want) in [
        ("neqo_server_requests_total", "", r.requests),
        ("neqo_server_response_bytes_total", "", r.bytes_sent),
        (
            "neqo_server_connections_accepted_total",
            "",
            r.driver.accepted,
        ),
        (
            "neqo_server_handshake_duration_seconds_count",
            "",
            r.admission.handshakes.count,
        ),
        (
            "neqo_server_tls_tickets_redeemed_total",
            "",
            r.tls.tickets_redeemed,
        ),
        (
            "neqo_server_datagrams_total",
            "direction=\"rx\"",
            r.socket.rx.datagrams,
        ),
        (
            "neqo_server_datagrams_total",
            "direction=\"tx\"",
            r.socket.tx.datagrams,
        ),
    ] {
        #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
        let want = want as f64;
        let got = sum(&settled, name, with);
        // The transfer's counts are all in; what came after (closes, ACKs) may not be.
        assert!(
            got <= want && (name.contains("datagrams") || got == want),
            "{name}{{{with}}}: scraped {got}, reported {want}"
        );
    }
    assert_eq!(r.admission.handshakes.count, CONNECTIONS as u64);
    // The client resumes its later connections with the server's tickets; the client role's
    // counters (certificates verified) are not the server's to publish.
    assert!(r.tls.tickets_redeemed > 0, "{:?}", r.tls);
    assert!(
        !settled.contains_key("neqo_server_tls_full_handshakes_total"),
        "a client-role counter published"
    );
    assert_eq!(r.requests, CONNECTIONS as u64);
    assert_eq!(r.bytes_sent, CONNECTIONS as u64 * BYTES);
}

#[test]
fn an_address_the_endpoint_cannot_listen_on_refuses_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        metrics: Some(taken.local_addr().unwrap()),
        ..ServerConfig::default()
    })
    .expect_err("refused");
    let addr = taken.local_addr().unwrap();
    assert!(
        matches!(&err, neqo_server_core::ServerError::Metrics { addr: a, .. } if *a == addr),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("the metrics endpoint {addr}: cannot listen")
    );
}

/// Slow clients that send part of a request head and hold: scrapes are answered whole while
/// they do (the endpoint accepts as clients come, and heads that never end cost it no turn),
/// and the server stops with them connected, closing each unanswered (by the stop, or at its
/// head time if that came first). How many slow clients a scrape gets through, and the cap
/// past which the oldest are shed, are the endpoint's unit tests'.
#[test]
fn slow_clients_block_neither_a_scrape_nor_the_exit() {
    use std::{
        io::{ErrorKind, Read as _, Write as _},
        net::TcpStream,
    };
    const SLOW: usize = 40;
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..ServerConfig::default()
    })
    .expect("server starts");
    let metrics = server.metrics_addr().expect("the endpoint");
    let slow: Vec<TcpStream> = (0..SLOW)
        .map(|_| {
            let mut s = TcpStream::connect(metrics).expect("loopback connects");
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
            s
        })
        .collect();
    for _ in 0..3 {
        let m = scrape(metrics);
        assert_eq!(m["neqo_server_connections_open"], 0.0);
    }
    // The server stops with the slow clients connected (a hang guard, not a speed bound).
    let stopping = std::thread::spawn(move || server.stop());
    let started = Instant::now();
    while !stopping.is_finished() {
        assert!(started.elapsed() < DEADLINE, "the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    stopping.join().unwrap().expect("a clean stop");
    for (i, mut s) in slow.into_iter().enumerate() {
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut buf = [0; 64];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset) => {}
            Ok(n) => panic!("slow client {i} answered: {:?}", &buf[..n]),
            Err(e) => panic!("slow client {i} still open after the stop: {e}"),
        }
    }
}
