//! `neqo-server` stopped as a service manager stops it, with a download under way: SIGTERM
//! lets the download finish byte-exact and the server then exits cleanly; a drain period that
//! ends first cuts the download with a reset the client reports as cut (never as refused
//! unprocessed), and the access log and the report say so; a second SIGTERM ends the
//! process at once. The downloads pass a rate-limited relay, so that each is under way when
//! the signal comes (the relay's counts say so) and, for the cut, cannot finish within the
//! drain period whatever the machine's speed.
#![cfg(unix)]

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use neqo_relay::{Impairment, Relay, RelayConfig};
use neqo_report::{Report, ServerReport};
use test_fixtures::Server;

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");

/// A hang guard, not a speed bound.
const LIMIT: Duration = Duration::from_secs(120);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neqo-drain-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Polls `f` until it holds (bounded by [`LIMIT`]).
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let started = Instant::now();
    while !f() {
        assert!(started.elapsed() < LIMIT, "{what}: not within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A server (ALPN `alpn`, drain period `drain` seconds, access log and JSON report in
/// `dir`) behind a relay limited to `mbit`, a client downloading `/{len}` through it into
/// `dir/body`; returns once the response is flowing, with the relay's count of bytes towards
/// the client then below `len` (the download is under way).
struct Download {
    dir: PathBuf,
    len: u64,
    /// Taken by [`server_end`](Self::server_end).
    server: Option<Server>,
    relay: Relay,
    client: Child,
}

impl Download {
    fn start(name: &str, alpn: &str, drain: &str, mbit: f64, len: u64) -> Self {
        let dir = scratch(name);
        let server = Server::start(
            Command::new(SERVER).args([
                "--listen",
                "127.0.0.1:0",
                "--alpn",
                alpn,
                "--drain-timeout",
                drain,
                // Beyond reach of a loaded machine: the drain is what ends a connection.
                "--idle-timeout",
                "120",
                "--handshake-timeout",
                "120",
                "--access-log",
                dir.join("access.log").to_str().unwrap(),
                "--json",
                dir.join("server.json").to_str().unwrap(),
            ]),
            LIMIT,
        )
        .expect("server starts");
        let relay = Relay::start(RelayConfig::symmetric(
            "127.0.0.1:0".parse().unwrap(),
            server.addr(),
            Impairment {
                rate_mbit: Some(mbit),
                ..Impairment::default()
            },
            1,
        ))
        .expect("relay starts");
        let client = Command::new(CLIENT)
            .args([
                "--no-progress",
                "--insecure",
                "--idle-timeout",
                "60",
                "--alpn",
                alpn,
                "-o",
                dir.join("body").to_str().unwrap(),
                &format!("https://{}/{len}", relay.local_addr()),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("client starts");
        let d = Self {
            dir,
            len,
            server: Some(server),
            relay,
            client,
        };
        wait_until("the response flows", || {
            d.relay.stats().to_client.forwarded_bytes > 100_000
        });
        d
    }

    /// SIGTERM, once the download is shown to be under way; waits until the server says it
    /// is draining.
    fn terminate(&mut self) {
        let sent = self.relay.stats().to_client.forwarded_bytes;
        assert!(sent < self.len, "under way at the signal: {sent} B passed");
        let server = self.server.as_mut().unwrap();
        server.terminate().unwrap();
        wait_until("the server says it drains", || {
            server.stderr_so_far().contains("neqo-server: SIGTERM: ")
        });
    }

    /// The server's end (waited for, bounded).
    fn server_end(&mut self) -> test_fixtures::Measured {
        self.server.take().unwrap().wait(LIMIT).unwrap()
    }

    /// The client's exit status and stderr.
    fn client_end(&mut self) -> (bool, String) {
        let started = Instant::now();
        let status = loop {
            if let Some(s) = self.client.try_wait().unwrap() {
                break s;
            }
            assert!(started.elapsed() < LIMIT, "the client did not end");
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        use std::io::Read as _;
        self.client
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (status.success(), stderr)
    }

    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        let _ = self.client.kill();
        let _ = self.client.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SIGTERM in the middle of a download: the download finishes, byte-exact (the client checks
/// the pattern of every byte and the length), and then the server exits cleanly, its log
/// and report saying the request was answered and nothing cut.
#[test]
fn sigterm_lets_the_download_under_way_finish_then_the_server_exits() {
    const LEN: u64 = 128 << 20;
    let mut d = Download::start("finish", "hq-interop", "600", 200.0, LEN);
    d.terminate();
    let (ok, stderr) = d.client_end();
    assert!(ok, "{stderr}");
    assert_eq!(
        std::fs::metadata(d.dir.join("body")).unwrap().len(),
        LEN,
        "{stderr}"
    );
    let out = d.server_end();
    assert!(out.success() && !out.killed, "{}", out.stderr);
    let report = ServerReport::read(&d.dir.join("server.json")).unwrap();
    assert_eq!((report.requests, report.cut_at_shutdown), (1, 0));
    let log = d.access_log();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.trim_end().ends_with(" answered"), "{log}");
}

/// A drain period that ends before the download can (1 s of a 20 Mbit/s relay passes 2.5 MB
/// of the 64 MiB): the response is reset, the client fails with the server's reason (cut,
/// never "refused unprocessed" nor "safe to retry"), the server exits cleanly, logs the
/// request as cut at shutdown and counts it. Over `hq-interop` and HTTP/3.
#[test]
fn a_drain_period_that_ends_first_cuts_the_download_and_says_so() {
    const LEN: u64 = 64 << 20;
    for (alpn, reason) in [
        (
            "hq-interop",
            "cut: the server shut down before the response was whole",
        ),
        ("h3", "H3_REQUEST_CANCELLED"),
    ] {
        let mut d = Download::start(&format!("cut-{alpn}"), alpn, "1", 20.0, LEN);
        d.terminate();
        let (ok, stderr) = d.client_end();
        assert!(!ok, "{alpn}: the client must fail: {stderr}");
        assert!(stderr.contains(reason), "{alpn}: {stderr}");
        assert!(!stderr.contains("safe to retry"), "{alpn}: {stderr}");
        let out = d.server_end();
        assert!(out.success() && !out.killed, "{alpn}: {}", out.stderr);
        let report = ServerReport::read(&d.dir.join("server.json")).unwrap();
        assert_eq!(report.cut_at_shutdown, 1, "{alpn}");
        let log = d.access_log();
        assert_eq!(log.lines().count(), 1, "{alpn}: {log}");
        assert!(log.trim_end().ends_with(" shutdown"), "{alpn}: {log}");
    }
}

/// A second SIGTERM while the first's drain waits for a download ends the process at once,
/// with the status of a process the signal ended (143), however long the drain period.
#[test]
fn a_second_sigterm_ends_the_server_at_once() {
    let mut d = Download::start("twice", "hq-interop", "600", 20.0, 64 << 20);
    d.terminate();
    d.server.as_mut().unwrap().terminate().unwrap();
    let out = d.server_end();
    assert!(!out.killed, "{}", out.stderr);
    assert_eq!(out.code, Some(128 + 15), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("neqo-server: SIGTERM again: exiting at once"),
        "{}",
        out.stderr
    );
}
