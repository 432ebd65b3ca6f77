//! Address validation and half-open connections: Retry as the policy says, spoofed Initials
//! that create no state, handshakes given up at their timeout, and keys that survive a
//! restart. Loopback only; every wait bounded.

use std::{
    net::{SocketAddr, UdpSocket},
    sync::Arc,
    time::{Duration, Instant},
};

use neqo_bin::client::{self, ClientConfig};
use neqo_driver::{
    TransportOptions,
    tls::{self, Trust},
};
use neqo_protocols::ALPN_HQ;
use neqo_server_core::{Limits, RetryPolicy, ServerConfig, ServerHandle, ServerKeys};
use quinn_proto::{ClientConfig as QuicClientConfig, EndpointConfig};

/// A hang guard, never a speed check.
const DEADLINE: Duration = Duration::from_secs(60);

/// The idle and handshake timeouts where a test is not about them: longer than it runs, so
/// that a handshake left half-open stays so, and a loaded machine never reaches them.
const LONG: Duration = Duration::from_secs(120);

/// The default limits, but a handshake timeout of [`LONG`].
fn limits() -> Limits {
    Limits {
        handshake_timeout: LONG,
        ..Limits::default()
    }
}

/// A server with `limits` and an idle timeout of [`LONG`].
fn server(limits: Limits) -> ServerHandle {
    ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        limits,
        transport: TransportOptions {
            idle_timeout: LONG,
            ..TransportOptions::default()
        },
        ..ServerConfig::default()
    })
    .expect("server starts")
}

fn download(server: &ServerHandle, len: u64) -> client::ClientReport {
    let url = url::Url::parse(&format!("https://{}/{len}", server.addr())).unwrap();
    let mut c = ClientConfig::new(url, Trust::Certs(server.certificate().to_vec()));
    c.transport.idle_timeout = LONG;
    client::run(c).expect("download")
}

/// What came back to one client Initial that is never followed up: the first datagram's
/// first byte (long header type bits), or `None` if nothing came within [`DEADLINE`]. The
/// Initial offers an idle timeout of [`LONG`], so the server's connection, if it takes one,
/// ends at the server's own timeouts.
fn lone_initial(server: SocketAddr) -> Option<u8> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut endpoint =
        quinn_proto::Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
    let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ).unwrap();
    let mut config = QuicClientConfig::new(crypto);
    let transport = TransportOptions {
        idle_timeout: LONG,
        ..TransportOptions::default()
    }
    .transport("lone")
    .unwrap();
    config.transport_config(Arc::new(transport));
    let now = Instant::now();
    let (_, mut conn) = endpoint.connect(now, config, server, "localhost").unwrap();
    let mut buf = Vec::new();
    let t = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
    socket.send_to(&buf[..t.size], server).unwrap();
    let mut answer = [0u8; 2048];
    socket.recv(&mut answer).ok().map(|_| answer[0])
}

/// A long-header packet's type: Retry is 3 in QUIC v1.
fn is_retry(first: u8) -> bool {
    first & 0x80 != 0 && (first >> 4) & 0x03 == 3
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let limit = Instant::now() + DEADLINE;
    while !f() {
        assert!(Instant::now() < limit, "{what}: not within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--retry always`: a real client goes through the Retry and downloads; Initials that never
/// answer it (as from spoofed addresses) leave no connection behind.
#[test]
fn retry_always_validates_and_spoofed_initials_create_no_state() {
    let s = server(Limits {
        retry: RetryPolicy::Always,
        ..limits()
    });
    for _ in 0..50 {
        let answer = lone_initial(s.addr()).expect("an answer");
        assert!(is_retry(answer), "a Retry, not {answer:#x}");
    }
    assert_eq!(s.open_connections(), 0, "no state for unanswered Retries");
    let report = download(&s, 100_000);
    assert_eq!(report.bytes_received, 100_000);
    let r = s.stop().unwrap();
    assert_eq!(r.driver.retries, 51, "{}", r.summary());
    assert_eq!(
        r.driver.accepted,
        1,
        "only the real client: {}",
        r.summary()
    );
    assert_eq!(r.admission.peak_half_open, 1);
}

/// `--retry auto`: Initials are accepted until the half-open ones reach the threshold, then
/// answered with Retries; a real client still gets through (with its token) and downloads.
/// The lone handshakes stay half-open throughout (a handshake timeout of [`LONG`]).
#[test]
fn retry_auto_starts_once_handshakes_pile_up() {
    let s = server(Limits {
        retry_half_open: 3,
        ..limits()
    });
    let answers: Vec<bool> = (0..10)
        .map(|_| is_retry(lone_initial(s.addr()).expect("an answer")))
        .collect();
    assert_eq!(&answers[..3], &[false; 3], "{answers:?}");
    assert_eq!(&answers[3..], &[true; 7], "{answers:?}");
    assert_eq!(s.open_connections(), 3, "only the first three hold state");
    assert_eq!(download(&s, 100_000).bytes_received, 100_000);
    let r = s.stop().unwrap();
    assert_eq!(r.admission.peak_half_open, 4, "{}", r.summary());
    assert_eq!(
        r.driver.retries,
        8,
        "7 lone ones and the client's: {}",
        r.summary()
    );
}

/// `--retry never` and a half-open cap of 2: past it new connections are refused, with no
/// state. (A handshake timeout of [`LONG`]: the two stay half-open whatever the machine's
/// speed; that the slots serve again once the handshakes are given up is
/// `policy_tests::admission`, in virtual time.)
#[test]
fn half_open_cap_refuses_past_it() {
    let s = server(Limits {
        retry: RetryPolicy::Never,
        max_half_open: 2,
        ..limits()
    });
    for _ in 0..2 {
        let answer = lone_initial(s.addr()).expect("an answer");
        assert!(!is_retry(answer));
    }
    assert_eq!(s.open_connections(), 2);
    // The third is refused: an Initial with CONNECTION_REFUSED, and no state.
    assert!(lone_initial(s.addr()).is_some());
    assert_eq!(s.open_connections(), 2);
    let r = s.stop().unwrap();
    assert_eq!(r.admission.refused_half_open, 1, "{}", r.summary());
    assert_eq!(r.admission.peak_half_open, 2, "{}", r.summary());
    assert_eq!(r.admission.handshake_timeouts, 0, "{}", r.summary());
}

/// A handshake that never completes is closed at its (short) handshake timeout, not at the
/// idle timeout ([`LONG`], beyond the wait's guard), and counted so.
#[test]
fn a_handshake_never_completed_is_given_up_at_its_timeout() {
    let s = server(Limits {
        retry: RetryPolicy::Never,
        handshake_timeout: Duration::from_millis(300),
        ..Limits::default()
    });
    for _ in 0..2 {
        let answer = lone_initial(s.addr()).expect("an answer");
        assert!(!is_retry(answer));
    }
    wait_for("the half-open connections are closed", || {
        s.open_connections() == 0
    });
    let r = s.stop().unwrap();
    assert_eq!(r.admission.handshake_timeouts, 2, "{}", r.summary());
    assert_eq!(r.admission.half_open, 0);
}

/// Keys from one secret: a Retry token sealed by one server validates at another with the
/// same secret (as after a restart), and not at one with another secret.
#[test]
fn retry_tokens_survive_a_restart_with_the_same_secret() {
    let secret = [42u8; 32];
    let config = |keys: ServerKeys| ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        limits: Limits {
            retry: RetryPolicy::Always,
            ..limits()
        },
        keys,
        ..ServerConfig::default()
    };
    let first = ServerHandle::start(config(ServerKeys::from_secret(&secret))).unwrap();
    let same = ServerHandle::start(config(ServerKeys::from_secret(&secret))).unwrap();
    let other = ServerHandle::start(config(ServerKeys::from_secret(&[7u8; 32]))).unwrap();
    // The client's second Initial (with the token) goes to another server than its first.
    for (to, accepted) in [(&same, 1), (&other, 0)] {
        // The token binds the client's address: the Initial goes out from the same one.
        let (from, initial) = initial_answering_retry(first.addr());
        assert!(send_from(from, &initial, to.addr()).is_some(), "an answer");
        // The server counted its connections before it answered.
        assert_eq!(to.open_connections(), accepted, "server {}", to.addr());
    }
    first.stop().unwrap();
    same.stop().unwrap();
    other.stop().unwrap();
}

/// A client's Initial that answers `server`'s Retry: the address it was sent from, and the
/// datagram.
fn initial_answering_retry(server: SocketAddr) -> (SocketAddr, Vec<u8>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut endpoint =
        quinn_proto::Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
    let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ).unwrap();
    let now = Instant::now();
    let (ch, mut conn) = endpoint
        .connect(now, QuicClientConfig::new(crypto), server, "localhost")
        .unwrap();
    let mut buf = Vec::new();
    let t = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
    socket.send_to(&buf[..t.size], server).unwrap();
    let mut answer = vec![0u8; 2048];
    let n = socket.recv(&mut answer).unwrap();
    assert!(is_retry(answer[0]));
    let mut response = Vec::new();
    let event = endpoint.handle(now, server, None, None, answer[..n].into(), &mut response);
    match event {
        Some(quinn_proto::DatagramEvent::ConnectionEvent(c, e)) => {
            assert_eq!(c, ch);
            conn.handle_event(e);
        }
        _ => panic!("the Retry was not taken for this connection"),
    }
    buf.clear();
    let t = conn
        .poll_transmit(now, 1, &mut buf)
        .expect("an Initial with the token");
    (socket.local_addr().unwrap(), buf[..t.size].to_vec())
}

/// Sends `datagram` from `from` to `to` (rebinding that address) and waits (up to
/// [`DEADLINE`]) for an answer.
fn send_from(from: SocketAddr, datagram: &[u8], to: SocketAddr) -> Option<u8> {
    let socket = UdpSocket::bind(from).unwrap();
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    socket.send_to(datagram, to).unwrap();
    let mut answer = [0u8; 2048];
    socket.recv(&mut answer).ok().map(|_| answer[0])
}

/// A server restarted with the same `--key-file` (Unix: it is killed with SIGKILL).
#[cfg(unix)]
mod restart {
    use neqo_driver::{Application, Driver, run_client};

    use super::*;

    /// A client whose connection stays open (keep-alive) and reports how it ended.
    struct Waiter {
        remote: SocketAddr,
        started: bool,
        tx: std::sync::mpsc::Sender<Result<(), quinn_proto::ConnectionError>>,
        lost: bool,
    }

    impl Application for Waiter {
        fn event(
            &mut self,
            _: quinn_proto::ConnectionHandle,
            _: &mut quinn_proto::Connection,
            event: quinn_proto::Event,
            _: Instant,
        ) {
            match event {
                quinn_proto::Event::Connected => {
                    let _ = self.tx.send(Ok(()));
                }
                quinn_proto::Event::ConnectionLost { reason } => {
                    self.lost = true;
                    let _ = self.tx.send(Err(reason));
                }
                _ => {}
            }
        }

        fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
            if !self.started {
                self.started = true;
                let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ).unwrap();
                let mut config = QuicClientConfig::new(crypto);
                let mut transport = TransportOptions {
                    idle_timeout: Duration::from_secs(600),
                    ..TransportOptions::default()
                }
                .transport("waiter")
                .unwrap();
                transport.keep_alive_interval(Some(Duration::from_millis(50)));
                config.transport_config(Arc::new(transport));
                driver
                    .connect(0, config, self.remote, "localhost", now)
                    .unwrap();
            }
            None
        }

        fn done(&self) -> bool {
            self.lost
        }
    }

    /// `--key-file`: a server killed outright (no CONNECTION_CLOSE) and started again with the
    /// same file answers the old clients' packets with stateless resets they recognise, so they
    /// learn at once that their connection is gone instead of waiting out their idle timeout
    /// (600 s on both ends: however long the restart takes, only a reset ends it within the
    /// test's guard). A server with a new random key would send resets nobody recognises.
    #[test]
    fn a_restarted_server_with_the_key_file_resets_old_connections() {
        use std::process::Command;

        const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
        let dir = std::env::temp_dir().join(format!("neqo-admission-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("server.key");
        let key = key.to_str().unwrap();
        let start = |listen: &str| {
            test_fixtures::Server::start(
                Command::new(SERVER).args([
                    "--listen",
                    listen,
                    "--key-file",
                    key,
                    "--idle-timeout",
                    "600",
                    "--handshake-timeout",
                    "120",
                ]),
                DEADLINE,
            )
            .unwrap_or_else(|e| panic!("server did not start: {e}"))
        };
        let first = start("127.0.0.1:0");
        let addr = first.addr();
        let (tx, rx) = std::sync::mpsc::channel();
        let client = std::thread::spawn(move || {
            let mut app = Waiter {
                remote: addr,
                started: false,
                tx,
                lost: false,
            };
            run_client(&mut app, "127.0.0.1:0".parse().unwrap(), 1).unwrap();
        });
        assert!(rx.recv_timeout(DEADLINE).unwrap().is_ok(), "connected");
        let pid = first.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-KILL", &pid])
                .status()
                .unwrap()
                .success()
        );
        drop(first);
        let second = start(&addr.to_string());
        let ended = rx.recv_timeout(DEADLINE).expect("the connection ended");
        assert!(
            matches!(ended, Err(quinn_proto::ConnectionError::Reset)),
            "{ended:?}"
        );
        client.join().unwrap();
        drop(second);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
