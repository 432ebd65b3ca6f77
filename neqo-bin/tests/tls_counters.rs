//! The TLS counters of the JSON reports, with a server and a client in this process: the
//! counters are process-wide (each binary runs one side), so this file holds one test, and
//! each count is both sides' together.

use neqo_bin::{
    client::{self, ClientConfig},
    server::{Limits, RetryPolicy, ServerConfig, ServerHandle},
    tls::{CipherSuite, Trust},
    tls_counters,
};

#[test]
fn retry_resumption_zero_rtt_and_key_updates_are_counted() {
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        limits: Limits {
            retry: RetryPolicy::Always,
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .expect("server starts");
    let mut config = ClientConfig::new(
        url::Url::parse(&format!("https://{}/3000000", server.addr())).unwrap(),
        Trust::Certs(server.certificate().to_vec()),
    );
    config.connections = 2;
    config.key_update = true;
    config.cipher_suites = vec![CipherSuite::Chacha20];
    let report = client::run(config).expect("both connections complete");
    let server_report = server.stop().unwrap();
    assert_eq!(report.connections, 2);
    assert_eq!(report.bytes_received, 6_000_000);
    let tls = tls_counters::snapshot();
    assert_eq!(report.tls, tls, "the client's report carries the counts");
    assert_eq!(server_report.driver.retries, 2, "a Retry per connection");
    assert_eq!(tls.retries_accepted, 2);
    // The second connection resumed: its handshake verified no certificate, and the
    // server took its ticket.
    assert_eq!(tls.full_handshakes, 1);
    assert_eq!(tls.tickets_redeemed, 1);
    // It sent its requests in 0-RTT (the client counts keys to send them with, the
    // server its acceptance), and the server took them.
    assert_eq!(tls.zero_rtt_attempted, 2);
    assert_eq!(tls.zero_rtt_accepted, 1);
    // One forced update per connection, each answered: four key generations at least
    // (quinn-proto adds updates of its own).
    assert_eq!(tls.key_updates_forced, 2);
    assert!(tls.key_updates >= 4, "{tls:?}");
}
