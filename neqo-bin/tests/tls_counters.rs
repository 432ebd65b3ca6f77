//! The TLS counters of the JSON reports, with a server and a client in this process: the
//! counters are process-wide (each binary runs one side), so this file holds one test, and
//! each count is both sides' together.

use neqo_bin::client::{self, ClientConfig};
use neqo_driver::tls::{CipherSuite, Trust, counters};
use neqo_server_core::{Limits, RetryPolicy, ServerConfig, ServerHandle};

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
    let tls = counters::snapshot();
    assert_eq!(
        report.tls,
        neqo_bin::report::tls_counters(tls),
        "the client's report carries the counts"
    );
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
    // A forced update per connection, each answered: four key generations at least.
    // quinn-proto also updates on its own, after a random 10 to 1000 packets of a key phase,
    // and ignores a forced update while it keeps the previous keys (three PTOs): on a short
    // transfer that can take the whole of the second connection's, so one forced update is
    // all the client may get (3 runs in 40 here). Never none, never more than one each.
    assert!((1..=2).contains(&tls.key_updates_forced), "{tls:?}");
    assert!(tls.key_updates >= 4, "{tls:?}");
}
