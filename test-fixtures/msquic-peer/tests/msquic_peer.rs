//! msquic-peer client against msquic-peer server over loopback.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use test_fixtures::{Measured, run};

const BIN: &str = env!("CARGO_BIN_EXE_msquic-peer");

/// How long a server may take to say where it listens, and a command to finish.
const LIMIT: Duration = Duration::from_secs(60);

/// A running `msquic-peer server`, killed when dropped.
struct Server {
    server: test_fixtures::Server,
}

impl Server {
    /// Starts it and waits for one listening line per `--listen`.
    fn start(args: &[&str]) -> Self {
        let listeners = args.iter().filter(|a| **a == "--listen").count().max(1);
        let server = test_fixtures::Server::start_expecting(
            Command::new(BIN).arg("server").args(args),
            listeners,
            LIMIT,
        )
        .unwrap_or_else(|e| panic!("server {args:?} did not start: {e}"));
        Self { server }
    }

    fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    fn addrs(&self) -> &[SocketAddr] {
        self.server.addrs()
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr())
    }

    /// Sends SIGTERM and returns whether the server exited successfully.
    fn stop(self) -> bool {
        let m = self.server.stop().expect("server exits");
        eprintln!("server: {}\n{}", m.ending(), m.stderr);
        m.success()
    }
}

/// `msquic-peer ARGS...` run to its end.
fn peer(args: &[&str]) -> Measured {
    run(Command::new(BIN).args(args), LIMIT).expect("runs")
}

struct ClientRun {
    output: Measured,
    json: Option<serde_json::Value>,
}

impl ClientRun {
    fn success(&self) -> bool {
        self.output.success()
    }

    fn stderr(&self) -> &str {
        &self.output.stderr
    }

    fn field(&self, name: &str) -> &serde_json::Value {
        &self.json.as_ref().expect("json written")[name]
    }

    fn u64(&self, name: &str) -> u64 {
        self.field(name)
            .as_u64()
            .unwrap_or_else(|| panic!("{name} is not a number"))
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("msquic-peer-test-{tag}-{}", std::process::id()));
    drop(std::fs::remove_dir_all(&dir));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Runs `msquic-peer client --insecure --json FILE ARGS...`.
fn client(tag: &str, args: &[&str]) -> ClientRun {
    let dir = temp_dir(&format!("client-{tag}"));
    let json = dir.join("out.json");
    let output = run(
        Command::new(BIN)
            .arg("client")
            .arg("--insecure")
            .args(["--idle-timeout", "10"])
            .arg("--json")
            .arg(&json)
            .args(args),
        LIMIT,
    )
    .expect("client runs");
    let json = std::fs::read_to_string(&json)
        .ok()
        .map(|s| serde_json::from_str(&s).expect("valid json"));
    drop(std::fs::remove_dir_all(&dir));
    let run = ClientRun { output, json };
    eprintln!("client {args:?}:\n{}", run.stderr());
    run
}

#[test]
fn binary_runs_without_library_path() {
    let out = run(
        Command::new(BIN)
            .arg("--version")
            .env_remove("LD_LIBRARY_PATH"),
        LIMIT,
    )
    .expect("runs");
    assert!(out.success(), "{out:?}");
}

#[test]
fn locates_binary() {
    let found = test_fixtures::locate_binary("msquic-peer").expect("found");
    assert_eq!(
        found.canonicalize().unwrap(),
        Path::new(BIN).canonicalize().unwrap()
    );
}

#[test]
fn handshake_and_one_byte() {
    let server = Server::start(&["--listen", "127.0.0.1:0"]);
    assert_ne!(server.addr().port(), 0);
    let run = client("one", &[&server.url("/1")]);
    assert!(run.success());
    assert_eq!(run.u64("requests"), 1);
    assert_eq!(run.u64("connections"), 1);
    assert_eq!(run.u64("bytes_received"), 1);
    assert_eq!(run.u64("bytes_sent"), "GET /1\r\n".len() as u64);
    for key in [
        "seconds",
        "gbps",
        "rx_datagrams_per_syscall",
        "tx_datagrams_per_syscall",
    ] {
        assert!(run.field(key).is_number(), "{key}");
    }
    assert!(run.field("kernel_drops").is_null());
    assert!(run.field("lost_packets").is_u64());
    assert!(server.stop(), "server exits cleanly on SIGTERM");
}

#[test]
fn download_10_mib_verified() {
    let server = Server::start(&["--listen", "127.0.0.1:0"]);
    let run = client("download", &[&server.url("/10485760")]);
    assert!(run.success());
    assert_eq!(run.u64("bytes_received"), 10_485_760);
    assert_eq!(run.u64("requests"), 1);
}

#[test]
fn hundred_parallel_requests_on_one_connection() {
    let server = Server::start(&["--listen", "127.0.0.1:0"]);
    let run = client(
        "parallel",
        &["-n", "100", "--parallel", &server.url("/3000")],
    );
    assert!(run.success());
    assert_eq!(run.u64("requests"), 100);
    assert_eq!(run.u64("connections"), 1);
    assert_eq!(run.u64("bytes_received"), 300_000);
}

#[test]
fn perf_upload_10_mib() {
    let server = Server::start(&["--listen", "127.0.0.1:0", "--alpn", "perf"]);
    let run = client(
        "upload",
        &[
            "--alpn",
            "perf",
            "--upload",
            "10485760",
            "--download",
            "1000",
            &server.url("/"),
        ],
    );
    assert!(run.success());
    assert_eq!(run.u64("bytes_sent"), 10_485_760 + 8);
    assert_eq!(run.u64("bytes_received"), 1000);
    assert_eq!(run.u64("requests"), 1);
}

#[test]
fn twenty_sequential_connections() {
    let server = Server::start(&["--listen", "127.0.0.1:0"]);
    let run = client(
        "sequential",
        &["--connections", "20", "-n", "2", &server.url("/100")],
    );
    assert!(run.success());
    assert_eq!(run.u64("connections"), 20);
    assert_eq!(run.u64("requests"), 40);
    assert_eq!(run.u64("bytes_received"), 4000);
}

#[test]
fn ipv4_and_ipv6_listeners() {
    let server = Server::start(&["--listen", "127.0.0.1:0", "--listen", "[::1]:0"]);
    assert_eq!(server.addrs().len(), 2);
    assert!(server.addrs()[0].is_ipv4());
    assert!(server.addrs()[1].is_ipv6());
    for addr in server.addrs() {
        let url = format!("https://{addr}/65536");
        let run = client("dual", &["-n", "3", &url]);
        assert!(run.success(), "{addr}");
        assert_eq!(run.u64("bytes_received"), 3 * 65536);
    }
    for alpn in ["hq-interop", "perf"] {
        let url = format!("https://{}/", server.addrs()[1]);
        let run = client("dual-perf", &["--alpn", alpn, &url]);
        // hq "/" is refused without --root; perf ignores the path.
        assert_eq!(run.success(), alpn == "perf", "{alpn}");
    }
}

#[test]
fn wildcard_listener_is_dual_stack() {
    let server = Server::start(&["--listen", "[::]:0"]);
    let port = server.addr().port();
    for host in ["127.0.0.1", "[::1]", "localhost"] {
        let run = client("wildcard", &[&format!("https://{host}:{port}/1000")]);
        assert!(run.success(), "{host}");
        assert_eq!(run.u64("bytes_received"), 1000);
    }
}

#[test]
fn files_from_root_and_escapes_refused() {
    let dir = temp_dir("root");
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/page.txt"), b"hello from the root\n").unwrap();
    std::fs::write(dir.join("secret.txt"), b"secret").unwrap();
    std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("escape")).unwrap();
    let out_dir = dir.join("out");
    let server = Server::start(&["--listen", "127.0.0.1:0", "--root", root.to_str().unwrap()]);

    let run = client(
        "root-ok",
        &[
            "--output-dir",
            out_dir.to_str().unwrap(),
            &server.url("/sub/page.txt"),
            &server.url("/777"),
        ],
    );
    assert!(run.success());
    assert_eq!(
        std::fs::read(out_dir.join("page.txt")).unwrap(),
        b"hello from the root\n"
    );
    let generated = std::fs::read(out_dir.join("777")).unwrap();
    assert!(
        generated
            .iter()
            .enumerate()
            .all(|(k, b)| usize::from(*b) == k % 256)
    );
    assert_eq!(generated.len(), 777);

    for bad in ["/escape", "/missing.txt", "/sub"] {
        let run = client("root-bad", &[&server.url(bad)]);
        assert!(!run.success(), "{bad} must fail");
        assert!(run.stderr().contains("reset"), "{bad}: {}", run.stderr());
    }
    // The server keeps serving after refusing requests.
    assert!(client("root-after", &[&server.url("/10")]).success());
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_url_is_rejected() {
    for url in ["not a url", "http://127.0.0.1:4433/1", "https://:4433/1"] {
        let run = client("badurl", &[url]);
        assert_eq!(run.output.code, Some(2), "{url}");
        assert!(run.stderr().contains("invalid value"), "{url}");
    }
}

#[test]
fn options_of_the_other_protocol_are_rejected() {
    let run = client("hq-download", &["--download", "5", "https://127.0.0.1:1/1"]);
    assert_eq!(run.output.code, Some(1));
    assert!(run.stderr().contains("only supported with --alpn perf"));
    let run = client(
        "perf-output",
        &[
            "--alpn",
            "perf",
            "--output-dir",
            "/tmp",
            "https://127.0.0.1:1/",
        ],
    );
    assert_eq!(run.output.code, Some(1));
    assert!(
        run.stderr()
            .contains("only supported with --alpn hq-interop")
    );
}

#[test]
fn wrong_alpn_fails_handshake() {
    let server = Server::start(&["--listen", "127.0.0.1:0", "--alpn", "hq-interop"]);
    let run = client("alpn", &["--alpn", "perf", &server.url("/")]);
    assert!(!run.success());
    assert!(run.stderr().contains("ALPN"), "{}", run.stderr());
    assert!(run.json.is_none());
}

#[test]
fn nothing_listening_fails() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = client("refused", &[&format!("https://127.0.0.1:{port}/1")]);
    assert!(!run.success());
    assert!(
        run.stderr().contains("handshake failed"),
        "{}",
        run.stderr()
    );
}

#[test]
fn port_in_use_and_missing_cert_fail() {
    let server = Server::start(&["--listen", "127.0.0.1:0"]);
    let addr = server.addr().to_string();
    let out = peer(&["server", "--listen", &addr]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("cannot listen"));

    let out = peer(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--cert",
        "/nonexistent/cert.pem",
        "--key",
        "/nonexistent/key.pem",
    ]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("cannot read certificate"));
}

#[test]
fn certificate_from_pem_files() {
    let dir = temp_dir("pem");
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let server = Server::start(&[
        "--listen",
        "127.0.0.1:0",
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    let run = client("pem", &[&server.url("/4096")]);
    assert!(run.success());
    assert_eq!(run.u64("bytes_received"), 4096);
    drop(server);

    // A key that does not parse is reported at start-up.
    std::fs::write(&key, "not a key").unwrap();
    let out = peer(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("loading certificate"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--ca` trusts the server's own certificate (verified, not skipped); another CA, an unreadable
/// file and one without a certificate are refused with their reasons.
#[test]
fn ca_file_is_trusted_and_others_refused() {
    let dir = temp_dir("ca");
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let certified = rcgen::generate_simple_self_signed(names.clone()).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    let other = dir.join("other.pem");
    let stranger = rcgen::generate_simple_self_signed(names).unwrap();
    std::fs::write(&other, stranger.cert.pem()).unwrap();
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "no certificate here").unwrap();
    let server = Server::start(&[
        "--listen",
        "127.0.0.1:0",
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    let verified = |ca: &std::path::Path| {
        let url = server.url("/2000");
        peer(&[
            "client",
            &url,
            "--idle-timeout",
            "5",
            "--ca",
            ca.to_str().unwrap(),
        ])
    };
    let out = verified(&cert);
    assert!(out.success(), "{}", out.stderr);
    let out = verified(&other);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("certificate"));
    let out = verified(&not_pem);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("holds no PEM certificate"));
    let out = verified(&dir.join("missing.pem"));
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("cannot read CA certificate"));
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_certificate_is_rejected_without_insecure() {
    let server = Server::start(&["--listen", "127.0.0.1:0"]);
    let out = peer(&["client", &server.url("/1")]);
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("certificate"));
}

/// `server --json` sums what its connections did as each ended, and names the datagram size
/// msquic reached: the figure `compare stacks` sets beside neqo-server's.
#[test]
fn server_json_reports_its_connections() {
    use neqo_report::{MsquicServerReport, Report as _};

    let dir = temp_dir("server-json");
    let json = dir.join("server.json");
    let server = Server::start(&["--listen", "127.0.0.1:0", "--json", json.to_str().unwrap()]);
    let run = client(
        "server-json",
        &["--connections", "2", &server.url("/2000000")],
    );
    assert!(run.success());
    assert!(server.stop());
    let r = MsquicServerReport::read(&json).expect("the server wrote its report");
    assert_eq!(r.connections, 2);
    // Loopback carries msquic's default MaximumMtu (1500): IPv4 and UDP headers off it.
    assert_eq!(r.max_path_mtu, 1500);
    assert_eq!(r.max_udp_payload, 1500 - 28);
    // Both bodies went out, in datagrams no larger than that.
    assert!(r.bytes_sent >= 4_000_000, "{r:?}");
    assert!(r.bytes_sent <= r.packets_sent * r.max_udp_payload, "{r:?}");
    assert!(r.packets_received > 0, "{r:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
