//! Retry and resumption on a server of two workers: a Retry token and a session ticket are
//! good whichever worker the client reaches. One test in this file: the TLS counters are
//! process-wide, both sides' together.

use neqo_bin::client::{self, ClientConfig};
use neqo_driver::tls::{Trust, counters};
use neqo_server_core::{Limits, RetryPolicy, ServerConfig, ServerHandle};

#[test]
fn retry_tokens_and_session_tickets_are_good_on_every_worker() {
    // A new connection's Initials pick their worker by the kernel's hash of its 4-tuple: with
    // a socket (a source port) per connection, both workers take some but once in 2^23 runs.
    const CONNECTIONS: u64 = 24;
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        workers: 2,
        limits: Limits {
            retry: RetryPolicy::Always,
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .expect("server starts");
    let mut config = ClientConfig::new(
        url::Url::parse(&format!("https://{}/100000", server.addr())).unwrap(),
        Trust::Certs(server.certificate().to_vec()),
    );
    config.connections = CONNECTIONS as usize;
    config.sockets = CONNECTIONS as usize;
    let report = client::run(config).expect("every connection completes");
    let sr = server.stop().unwrap();
    assert_eq!(report.connections, CONNECTIONS);
    assert_eq!(report.bytes_received, CONNECTIONS * 100_000);
    let accepted: Vec<u64> = sr.workers.iter().map(|w| w.accepted).collect();
    assert!(
        accepted.len() == 2 && accepted.iter().all(|&a| a > 0),
        "both workers took connections: {accepted:?}"
    );
    let tls = counters::snapshot();
    assert_eq!(sr.driver.retries, CONNECTIONS, "a Retry per connection");
    assert_eq!(tls.retries_accepted, CONNECTIONS, "every token accepted");
    // Only the first connection verified a certificate: every later one resumed with a
    // ticket of an earlier one, whichever worker issued it.
    assert_eq!(tls.full_handshakes, 1);
    assert_eq!(tls.tickets_redeemed, CONNECTIONS - 1);
    assert_eq!(
        tls.zero_rtt_accepted,
        CONNECTIONS - 1,
        "0-RTT on every resumption"
    );
}
