//! `neqo-client --alpn h3` against `neqo-server --alpn h3`: generated bodies verified byte by
//! byte over several connections, one after another and in parallel; a file saved with `-o`
//! and one request's body on stdout, byte-exact; a missing file fails the run with its
//! status; POSTs counted by the server and the count checked by the client. Real processes
//! over loopback.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use neqo_report::{ClientReport, Report, ServerReport};
use test_fixtures::Server;

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");
const LIMIT: Duration = Duration::from_secs(60);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neqo-h3-client-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn server(root: &Path) -> Server {
    Server::start(
        Command::new(SERVER)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--alpn",
                "h3,hq-interop",
                "--generate",
                "--root",
            ])
            .arg(root),
        LIMIT,
    )
    .unwrap_or_else(|e| panic!("server did not start: {e}"))
}

/// Runs the client with `args`; returns (success, stdout, stderr).
fn client(args: &[&str]) -> (bool, Vec<u8>, String) {
    let out = Command::new(CLIENT)
        .args(["--insecure", "--no-progress", "--alpn", "h3"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn report<T: Report>(path: &Path) -> T {
    T::read(path).unwrap_or_else(|e| panic!("{e}"))
}

/// The client's reports of a successful run with `args`, its requests one after another and
/// then all at once (`--parallel`).
fn in_turn_and_in_parallel(dir: &Path, args: &[&str]) -> Vec<ClientReport> {
    [false, true]
        .into_iter()
        .map(|parallel| {
            let json = dir.join(format!("client-{parallel}.json"));
            let mut a = args.to_vec();
            a.extend(["--json", json.to_str().unwrap()]);
            if parallel {
                a.push("--parallel");
            }
            let (ok, _, err) = client(&a);
            assert!(ok, "{err}");
            report(&json)
        })
        .collect()
}

#[test]
fn generated_bodies_over_several_connections_in_turn_and_in_parallel() {
    let dir = scratch("generated");
    let s = server(&dir);
    let url = format!("https://{}/1000000", s.addr());
    for r in in_turn_and_in_parallel(&dir, &[&url, "-n", "3", "--connections", "2"]) {
        assert_eq!(r.requests, 6, "{r:?}");
        assert_eq!(r.failed_requests, 0, "{r:?}");
        assert_eq!(r.bytes_received, 6_000_000, "{r:?}");
        assert_eq!(r.connections, 2, "{r:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_is_saved_and_one_body_goes_to_stdout() {
    let dir = scratch("files");
    let body: Vec<u8> = (0..200_003u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(dir.join("data.bin"), &body).unwrap();
    let s = server(&dir);
    let url = format!("https://{}/data.bin", s.addr());
    let saved = dir.join("saved.bin");
    let (ok, out, err) = client(&[&url, "-o", saved.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.is_empty());
    assert_eq!(std::fs::read(&saved).unwrap(), body);
    let (ok, out, err) = client(&[&url, "--quiet"]);
    assert!(ok, "{err}");
    assert_eq!(out, body, "the body on stdout, as curl");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_fails_the_run_with_its_status() {
    let dir = scratch("missing");
    let s = server(&dir);
    let (ok, out, err) = client(&[&format!("https://{}/nothing.html", s.addr())]);
    assert!(!ok, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("/nothing.html: status 404"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--upload N`: each request a POST of N pattern bytes, which the server counts and answers
/// with their number; the client checks the answer. One after another and in parallel, and
/// the answer saved with `-o`.
#[test]
fn posts_are_counted_by_the_server_and_checked_by_the_client() {
    let dir = scratch("posts");
    let s = server(&dir);
    let url = format!("https://{}/upload", s.addr());
    for r in in_turn_and_in_parallel(&dir, &[&url, "-n", "3", "--upload", "3000001"]) {
        assert_eq!(r.requests, 3, "{r:?}");
        assert_eq!(r.failed_requests, 0, "{r:?}");
        assert_eq!(r.bytes_sent, 9_000_003, "{r:?}");
        assert_eq!(r.bytes_received, 3 * 7, "3 x \"3000001\": {r:?}");
    }
    let saved = dir.join("answer.txt");
    let (ok, _, err) = client(&[&url, "--upload", "12345", "-o", saved.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&saved).unwrap(), b"12345");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--cancel-after 1M`: each response longer than a mebibyte is given up on once that much
/// arrived (STOP_SENDING), the shorter ones complete, and the connection goes on to the next
/// request; the cancelled ones do not fail the run, and the server counts them cancelled.
#[test]
fn responses_past_cancel_after_are_given_up_and_the_connection_goes_on() {
    let dir = scratch("cancel");
    let json = dir.join("server.json");
    let s = Server::start(
        Command::new(SERVER).args([
            "--listen",
            "127.0.0.1:0",
            "--alpn",
            "h3",
            "--json",
            json.to_str().unwrap(),
        ]),
        LIMIT,
    )
    .unwrap();
    let (small, big) = (
        format!("https://{}/100000", s.addr()),
        format!("https://{}/300000000", s.addr()),
    );
    let client_json = dir.join("client.json");
    let (ok, _, err) = client(&[
        &small,
        &big,
        "-n",
        "3",
        "--cancel-after",
        "1M",
        "--json",
        client_json.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let r: ClientReport = report(&client_json);
    assert_eq!(
        (r.requests, r.cancelled_requests, r.failed_requests),
        (3, 3, 0),
        "{r:?}"
    );
    let received = r.bytes_received;
    assert!(
        (3 * 100_000 + 3 * (1 << 20)..3 * 100_000 + 3 * 300_000_000).contains(&received),
        "{received}"
    );
    assert!(s.stop().unwrap().success());
    let sr: ServerReport = report(&json);
    assert_eq!(sr.http3.responses, 3, "{sr:?}");
    assert_eq!(sr.http3.cancelled, 3, "{sr:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The HTTP/3 responses a server's metrics endpoint at `addr` counts (0 until its workers
/// have published).
fn h3_responses(addr: std::net::SocketAddr) -> u64 {
    common::scrape(addr)
        .iter()
        .filter(|(k, _)| k.starts_with("neqo_server_http3_responses_total"))
        .map(|(_, v)| v)
        .sum::<f64>() as u64
}

/// A server shutting down under HTTP/3 load: its GOAWAY lets each connection's request under
/// way finish, the later ones are rejected unprocessed (the client counts them apart: none
/// fails), and the server stops cleanly. The stop comes once responses are flowing (its
/// metrics say so); each connection asks for 100 000 responses of 100 kB, far more than any
/// machine answers before it.
#[test]
fn a_drain_under_load_rejects_the_later_requests_and_fails_none() {
    use neqo_bin::client::{self, ClientConfig};
    use neqo_driver::{DriverConfig, TransportOptions, tls::Trust};
    use neqo_protocols::ALPN_H3;
    use neqo_server_core::{ServerConfig, ServerHandle};
    const CONNECTIONS: usize = 4;
    const REQUESTS: usize = 100_000;
    // The drain ends once the requests under way are done: a long one cuts none of them on
    // a loaded machine, and costs a fast one nothing. The idle timeouts too are beyond reach.
    let long = Duration::from_secs(120);
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        alpns: vec![ALPN_H3.into()],
        driver: DriverConfig::default().with_drain(long),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        transport: TransportOptions {
            idle_timeout: long,
            ..TransportOptions::default()
        },
        ..ServerConfig::default()
    })
    .expect("server starts");
    let mut c = ClientConfig::new(
        format!("https://{}/100000", server.addr()).parse().unwrap(),
        Trust::Certs(server.certificate().to_vec()),
    );
    c.alpn = ALPN_H3.into();
    c.requests = REQUESTS;
    c.connections = CONNECTIONS;
    c.concurrency = CONNECTIONS;
    c.transport.idle_timeout = long;
    let client = std::thread::spawn(move || client::run_report(c));
    let metrics = server.metrics_addr().unwrap();
    let started = std::time::Instant::now();
    while h3_responses(metrics) < CONNECTIONS as u64 {
        assert!(started.elapsed() < LIMIT, "no responses");
        std::thread::sleep(Duration::from_millis(50));
    }
    let sr = server.stop().expect("a clean stop");
    let r = client.join().unwrap().expect("a report");
    let total = (CONNECTIONS * REQUESTS) as u64;
    assert_eq!(r.failed_requests, 0, "{:?}", r.errors);
    assert!(r.rejected_requests > 0, "{}", r.line());
    assert_eq!(r.requests + r.rejected_requests, total, "{}", r.line());
    assert_eq!(
        r.errors.len(),
        1,
        "one message for the rejections: {:?}",
        r.errors
    );
    assert!(r.errors[0].contains("GOAWAY"), "{:?}", r.errors);
    assert_eq!(sr.http3.responses, r.requests, "{sr:?}");
    let _ = std::fs::remove_dir_all(scratch("drain"));
}
