//! The `tcp-tls` binaries on 127.0.0.1: byte-exact downloads, a client that refuses every
//! body that is not exactly the pattern (served by a TLS server in this test, built with the
//! same library code), and a server that refuses malformed requests and goes on serving.

use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, TcpListener, TcpStream},
    path::PathBuf,
    process::Command,
    sync::Arc,
    thread,
    time::Duration,
};

use neqo_driver::tls::{self, CipherSuite, Identity, Trust};
use neqo_protocols::{hq, pattern};
use neqo_report::{Report as _, TcpTlsReport};
use rustls::{ClientConnection, ServerConnection, StreamOwned, pki_types::ServerName};
use test_fixtures::{Measured, Server, run};

const LIMIT: Duration = Duration::from_secs(60);

fn tcp_tls() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcp-tls"))
}

fn start_server(extra: &[&str]) -> Server {
    let mut cmd = tcp_tls();
    cmd.args(["server", "--listen", "127.0.0.1:0"]).args(extra);
    Server::start(&mut cmd, LIMIT).unwrap()
}

/// Stops the server. On Unix, SIGTERM ends it cleanly once its connections have ended, with
/// its summary as the last line of stderr; elsewhere it is killed and says nothing more.
fn stop(server: Server) -> Measured {
    let m = server.stop().unwrap();
    #[cfg(unix)]
    {
        assert!(m.success(), "SIGTERM ends it cleanly: {m:?}");
        assert!(
            m.last_stderr_line()
                .is_some_and(|l| l.starts_with("tcp-tls server: stopping: served ")),
            "{m:?}"
        );
    }
    m
}

/// Whether the summary of `m` (a stopped server) says `what`; always true where the server
/// is killed and prints none.
fn summary_says(m: &Measured, what: &str) -> bool {
    !cfg!(unix) || m.stderr.contains(what)
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tcp-tls-test-{}-{name}", std::process::id()))
}

/// Runs the client binary for `url`'s path on `port`.
fn client(port: u16, path: &str, extra: &[&str]) -> Measured {
    let url = format!("https://127.0.0.1:{port}{path}");
    run(tcp_tls().args(["client", &url]).args(extra), LIMIT).unwrap()
}

#[test]
fn an_odd_size_arrives_byte_exact() {
    const SIZE: u64 = (3 << 20) + 7;
    let server = start_server(&[]);
    let json = temp("odd.json");
    let json_arg = json.to_str().unwrap();
    let m = client(
        server.addr().port(),
        &format!("/{SIZE}"),
        &["--insecure", "--json", json_arg],
    );
    assert!(m.success(), "{m:?}");
    assert!(
        m.stdout.contains(&format!("received {SIZE} B")),
        "{}",
        m.stdout
    );
    let report = TcpTlsReport::read(&json);
    let _ = std::fs::remove_file(&json);
    let report = report.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.bytes_received, SIZE);
    assert_eq!(report.bytes_sent, format!("GET /{SIZE}\r\n").len() as u64);
    assert_eq!(report.cipher_suite, "TLS13_AES_128_GCM_SHA256");
    assert!(report.gbps > 0.0, "{report:?}");
    let s = stop(server);
    assert!(
        summary_says(&s, &format!("served 1 ({SIZE} bytes), refused 0, failed 0")),
        "{}",
        s.stderr
    );
}

#[test]
fn the_certificate_is_verified_against_the_given_ca() {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let (cert, key) = (temp("cert.pem"), temp("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let other = temp("other.pem");
    let other_ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(&other, other_ck.cert.pem()).unwrap();
    let server = start_server(&[
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    let port = server.addr().port();
    let m = client(port, "/100000", &["--ca", cert.to_str().unwrap()]);
    assert!(m.success(), "{m:?}");
    let m = client(port, "/100000", &["--ca", other.to_str().unwrap()]);
    assert!(!m.success(), "{m:?}");
    assert!(
        m.last_stderr_line().unwrap().contains("TLS handshake"),
        "{m:?}"
    );
    for f in [cert, key, other] {
        let _ = std::fs::remove_file(f);
    }
    stop(server);
}

/// What the fake server does wrong.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Nothing wrong: the whole body, then `close_notify`.
    None,
    /// Flips body byte `at`.
    Corrupt(usize),
    /// Sends one byte less, then `close_notify`.
    Short,
    /// Sends one byte more.
    Long,
    /// Sends the whole body, then closes TCP without `close_notify`.
    NoCloseNotify,
    /// Sends half the body, then closes TCP without `close_notify`.
    Truncated,
}

/// A one-connection TLS server answering the request with `size` bytes, wrong as `fault`
/// says.
fn faulty_server(size: usize, fault: Fault) -> (u16, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config =
        tls::stream_server_config(&Identity::self_signed().unwrap(), &CipherSuite::ALL).unwrap();
    let t = thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        let mut tls = StreamOwned::new(ServerConnection::new(config).unwrap(), tcp);
        let mut request = Vec::new();
        let mut byte = [0];
        while !request.ends_with(b"\n") {
            tls.read_exact(&mut byte).unwrap();
            request.push(byte[0]);
        }
        assert_eq!(request, hq::request(&format!("/{size}")).as_bytes());
        let len = match fault {
            Fault::Short => size - 1,
            Fault::Long => size + 1,
            Fault::Truncated => size / 2,
            Fault::None | Fault::Corrupt(_) | Fault::NoCloseNotify => size,
        };
        let mut body: Vec<u8> = (0..len as u64).map(pattern::byte_at).collect();
        if let Fault::Corrupt(at) = fault {
            body[at] ^= 0x40;
        }
        // The client may hang up as soon as it sees what is wrong.
        let _ = tls.write_all(&body).and_then(|()| tls.flush());
        if !matches!(fault, Fault::NoCloseNotify | Fault::Truncated) {
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
        let _ = tls.sock.shutdown(Shutdown::Write);
        // Until the client has read it all and gone.
        let _ = tls.sock.read_to_end(&mut Vec::new());
    });
    (port, t)
}

#[test]
fn a_body_that_is_not_exactly_the_pattern_fails_the_client() {
    const SIZE: usize = 100_007;
    for (fault, expect) in [
        (Fault::Corrupt(0), "body byte 0 differs from the pattern"),
        (
            Fault::Corrupt(70_001),
            "body byte 70001 differs from the pattern",
        ),
        (
            Fault::Corrupt(SIZE - 1),
            "body byte 100006 differs from the pattern",
        ),
        (Fault::Short, "body ended after 100006 of 100007 bytes"),
        (Fault::Long, "body longer than the 100007 bytes asked for"),
        (
            Fault::NoCloseNotify,
            "connection closed without close_notify after 100007 body bytes",
        ),
        (
            Fault::Truncated,
            "connection closed without close_notify after 50003 body bytes",
        ),
    ] {
        let (port, server) = faulty_server(SIZE, fault);
        let m = client(port, &format!("/{SIZE}"), &["--insecure"]);
        server.join().unwrap();
        assert!(!m.success(), "{fault:?}: {m:?}");
        assert_eq!(m.code, Some(1), "{fault:?}: {m:?}");
        let line = m.last_stderr_line().unwrap();
        assert!(line.contains(expect), "{fault:?}: {line}");
        assert!(m.stdout.is_empty(), "{fault:?}: no success line: {m:?}");
    }
    // The same fake server, doing nothing wrong, satisfies the client: the faults are what
    // fail it.
    let (port, server) = faulty_server(SIZE, Fault::None);
    let m = client(port, &format!("/{SIZE}"), &["--insecure"]);
    server.join().unwrap();
    assert!(m.success(), "{m:?}");
}

/// A TLS client that sends `request` (raw), then `close_notify` if `close`, and reads what
/// comes back.
fn raw_request(port: u16, request: &[u8], close: bool) -> std::io::Result<Vec<u8>> {
    let config = tls::stream_client_config(&Trust::Insecure, &CipherSuite::ALL).unwrap();
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let conn = ClientConnection::new(config, name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(LIMIT))?;
    let mut tls = StreamOwned::new(conn, tcp);
    tls.write_all(request)?;
    if close {
        tls.conn.send_close_notify();
    }
    tls.flush()?;
    let mut body = Vec::new();
    tls.read_to_end(&mut body).map(|_| body)
}

#[test]
fn malformed_requests_are_refused_and_the_server_goes_on() {
    let server = start_server(&[]);
    let port = server.addr().port();
    let too_long = format!("GET /{}", "1".repeat(hq::MAX_REQUEST));
    for (request, why) in [
        (&b"PUT /10\r\n"[..], "not a GET request"),
        (
            b"GET /index.html\r\n",
            "\"/index.html\": only /N is served here",
        ),
        (b"GET /99999999999999999999999\r\n", "size out of range"),
        (b"GET /\xff\r\n", "request is not UTF-8"),
        (too_long.as_bytes(), "request longer than 8192 bytes"),
    ] {
        let e = raw_request(port, request, false).expect_err(why);
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{why}: {e}");
        // The client binary sees the same as a reset.
        let m = client(port, "/10", &["--insecure"]);
        assert!(m.success(), "{why}: the next client is served: {m:?}");
    }
    // Not TLS at all: the handshake fails (logged, counted as failed).
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain.write_all(b"GET /10\r\n\r\n").unwrap();
    let _ = plain.read_to_end(&mut Vec::new());
    // A request that ends with close_notify instead of a newline is still a request.
    let body = raw_request(port, b"GET /300", true).unwrap();
    assert!(pattern::verify(0, &body) && body.len() == 300, "{body:?}");
    let m = client(port, "/10", &["--insecure"]);
    assert!(m.success(), "{m:?}");
    let s = stop(server);
    for why in [
        "refused: not a GET request",
        "refused: \"/index.html\": only /N is served here",
        "refused: size out of range",
        "refused: request is not UTF-8",
        "refused: request longer than 8192 bytes",
        "failed: received corrupt message",
    ] {
        assert!(s.stderr.contains(why), "{why}: {}", s.stderr);
    }
    assert!(
        summary_says(&s, "served 7 (360 bytes), refused 5, failed 1"),
        "{}",
        s.stderr
    );
}

#[test]
fn bad_command_lines_are_refused_at_start() {
    for (args, expect) in [
        (
            &["server", "--listen", "nope"][..],
            "invalid socket address",
        ),
        (&["server", "--max-connections", "0"], "--max-connections"),
        (&["server", "--request-timeout", "0"], "--request-timeout"),
        (&["server", "--cert", "/nonexistent.pem"], "--key"),
        (
            &[
                "client",
                "https://127.0.0.1:1/99999999999999999999999",
                "--insecure",
            ],
            "size out of range",
        ),
        (
            &["client", "https://127.0.0.1:1/abc", "--insecure"],
            "must be /N",
        ),
        (
            &["client", "http://127.0.0.1:1/10", "--insecure"],
            "https://",
        ),
        (&["client", "https://127.0.0.1:1/10"], "no trust anchor"),
        (&["client", "not a url", "--insecure"], "invalid value"),
    ] {
        let m = run(tcp_tls().args(args), LIMIT).unwrap();
        assert!(!m.success(), "{args:?}: {m:?}");
        assert!(m.stderr.contains(expect), "{args:?}: {}", m.stderr);
        assert!(m.stdout.is_empty(), "{args:?}: {m:?}");
    }
    // Nothing listens on port 1: the client says so and fails.
    let m = client(1, "/10", &["--insecure"]);
    assert_eq!(m.code, Some(1), "{m:?}");
    assert!(m.last_stderr_line().unwrap().contains("connect"), "{m:?}");
}

#[test]
fn the_in_process_server_and_client_agree() {
    let server = benches::tcp_tls::ServerHandle::start().unwrap();
    let config = server.client_config(&[CipherSuite::Aes128gcm]).unwrap();
    let d = benches::tcp_tls::download(
        server.addr(),
        ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
        12_345,
        Arc::clone(&config),
    )
    .unwrap();
    assert_eq!(d.bytes_received, 12_345);
    let c = server.stop();
    assert_eq!(c.served.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn connections_over_the_limit_are_reset_and_the_slot_comes_back() {
    let server = start_server(&["--max-connections", "1"]);
    let port = server.addr().port();
    // Holds the one slot: connected, no handshake yet.
    let held = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let m = client(port, "/10", &["--insecure"]);
    assert_eq!(m.code, Some(1), "{m:?}");
    assert!(m.last_stderr_line().unwrap().contains("reset"), "{m:?}");
    drop(held);
    // The held connection's thread ends once it sees the close; then the slot is free.
    let served = (0..600).any(|_| {
        let ok = client(port, "/10", &["--insecure"]).success();
        if !ok {
            thread::sleep(Duration::from_millis(50));
        }
        ok
    });
    assert!(served, "the slot never came back");
    let s = stop(server);
    assert!(
        s.stderr.contains("refused: 1 connections open already"),
        "{}",
        s.stderr
    );
}

/// A client that trickles its handshake in a byte at a time, each byte well within any one
/// read's patience, is cut off at the request deadline all the same, and the server serves
/// the next client.
#[test]
fn a_trickled_handshake_is_cut_off_at_the_request_deadline() {
    let server = start_server(&["--request-timeout", "1"]);
    let port = server.addr().port();
    // The start of a TLS handshake record, then one byte of its body every 50 ms: no read
    // ever waits long, the record never completes.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(&[0x16, 0x03, 0x01, 0x40, 0x00]).unwrap();
    let cut = (0..1200).any(|_| {
        thread::sleep(Duration::from_millis(50));
        slow.write_all(&[0]).is_err()
    });
    assert!(cut, "the server kept a trickling client for a minute");
    // The next client has the same 1 s for its handshake and request: on a loaded machine
    // it may miss it too, and is refused the same way; it is tried again until it is served
    // (bounded), each refusal counted.
    let mut missed = 0;
    while !client(port, "/10", &["--insecure"]).success() {
        missed += 1;
        assert!(missed < 100, "the server served no one after the trickler");
    }
    let s = stop(server);
    assert!(
        s.stderr.contains("refused: no complete request within 1s"),
        "{}",
        s.stderr
    );
    assert!(
        summary_says(&s, &format!("served 1 (10 bytes), refused {}", 1 + missed)),
        "{}",
        s.stderr
    );
}
