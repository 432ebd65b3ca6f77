//! `neqo-client --alpn h3` against HTTP/3 servers that are not ours: a scripted aioquic server
//! whose responses break what sloppy clients assume (empty DATA frames between the body's
//! pieces, a body shorter or longer than its content-length, a 103 Early Hints before the 200),
//! and ngtcp2's server (`gtlsserver`), which allows the three unidirectional streams RFC 9114
//! asks for and no more, over IPv6 with the address as the URL's host. Real processes over
//! loopback; bodies compared byte for byte.
//!
//! Needs aioquic (PyPI) and `gtlsserver` (Debian's ngtcp2-server), which `.ci/run` installs;
//! without them a test says `skipped:`, except under CI (`CI` set), where that is a failure.

use std::{
    net::{Ipv6Addr, SocketAddr, UdpSocket},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use neqo_report::{ClientReport, Report as _};
use test_fixtures::Server;

const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");
const LIMIT: Duration = Duration::from_secs(60);
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/peers/h3_script_server.py"
);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neqo-h3-peers-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether a peer is there; if not, the test is skipped, or under CI fails.
fn present(what: &str, there: bool) -> bool {
    if !there {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what} is missing (.ci/run installs it)"
        );
        eprintln!("skipped: no {what}");
    }
    there
}

/// A certificate for localhost, 127.0.0.1 and ::1, and its key, as PEM files in `dir`.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let names = ["localhost", "127.0.0.1", "::1"]
        .map(str::to_owned)
        .to_vec();
    let ck = rcgen::generate_simple_self_signed(names).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

/// What a client run did: its exit, its report and its standard error.
struct Run {
    ok: bool,
    report: ClientReport,
    stderr: String,
}

/// Runs the client over HTTP/3 trusting `cert`, with `args`.
fn client(dir: &Path, cert: &Path, args: &[&str]) -> Run {
    let json = dir.join("client.json");
    let _ = std::fs::remove_file(&json);
    let out = Command::new(CLIENT)
        .args(["--no-progress", "--alpn", "h3", "--ca"])
        .arg(cert)
        .arg("--json")
        .arg(&json)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run {
        ok: out.status.success(),
        report: ClientReport::read(&json).unwrap_or_else(|e| panic!("{e}")),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn aioquic_server(dir: &Path) -> Option<(Server, PathBuf)> {
    let have = Command::new("python3")
        .args(["-c", "import aioquic"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present("aioquic (python3 -m pip install aioquic)", have) {
        return None;
    }
    let (cert, key) = certificate(dir);
    let server = Server::start(
        Command::new("python3")
            .arg(SCRIPT)
            .arg("--cert")
            .arg(&cert)
            .arg("--key")
            .arg(&key),
        LIMIT,
    )
    .unwrap_or_else(|e| panic!("aioquic server: {e}"));
    Some((server, cert))
}

#[test]
fn aioquic_responses_with_empty_data_frames_and_early_hints_arrive_whole() {
    let dir = scratch("aioquic-whole");
    let Some((server, cert)) = aioquic_server(&dir) else {
        return;
    };
    for (path, want) in [
        ("/empty-data", &b"hello world!"[..]),
        ("/early-hints", b"hints"),
        ("/ok", b"ok"),
    ] {
        let out = dir.join("body");
        let url = format!("https://localhost:{}{path}", server.addr().port());
        let run = client(&dir, &cert, &[&url, "-o", out.to_str().unwrap()]);
        assert!(run.ok, "{path}: {}", run.stderr);
        assert_eq!(std::fs::read(&out).unwrap(), want, "{path}");
        assert_eq!(run.report.requests, 1, "{path}");
        assert_eq!(run.report.bytes_received, want.len() as u64, "{path}");
    }
}

#[test]
fn aioquic_bodies_that_are_not_their_content_length_fail_the_run() {
    let dir = scratch("aioquic-length");
    let Some((server, cert)) = aioquic_server(&dir) else {
        return;
    };
    for (path, why) in [
        ("/short", "a body shorter than its content-length"),
        ("/long", "a body longer than its content-length"),
        ("/missing", "status 404"),
    ] {
        let url = format!("https://localhost:{}{path}", server.addr().port());
        let run = client(&dir, &cert, &[&url]);
        assert!(!run.ok, "{path}: a non-zero exit");
        assert_eq!(run.report.failed_requests, 1, "{path}");
        assert_eq!(run.report.requests, 0, "{path}");
        assert!(
            run.report.errors.iter().any(|e| e.contains(why)),
            "{path}: {:?}",
            run.report.errors
        );
    }
}

/// `gtlsserver`, killed when dropped.
struct Ngtcp2(Child);

impl Drop for Ngtcp2 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a UDP socket is bound to `port` on IPv6 (`/proc/net/udp6`).
fn bound_udp6(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/udp6").unwrap_or_default();
    let want = format!(":{port:04X} ");
    table.lines().skip(1).any(|l| {
        l.split_whitespace()
            .nth(1)
            .is_some_and(|local| format!("{local} ").ends_with(&want))
    })
}

/// `gtlsserver` on [::1] serving `root`, once its socket is bound.
fn ngtcp2_server(root: &Path, cert: &Path, key: &Path) -> Option<(Ngtcp2, u16)> {
    // Debian puts it in /usr/sbin, which a user's PATH may not hold.
    let program = ["gtlsserver", "/usr/sbin/gtlsserver"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--help")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        });
    if !present("gtlsserver (Debian's ngtcp2-server)", program.is_some()) {
        return None;
    }
    let program = program?;
    // It takes a port, not 0: one the kernel just handed out and took back.
    let port = UdpSocket::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, 0)))
        .and_then(|s| s.local_addr())
        .unwrap()
        .port();
    let child = Command::new(program)
        .arg("-q")
        .arg("-d")
        .arg(root)
        .args(["::1", &port.to_string()])
        .arg(key)
        .arg(cert)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Ngtcp2(child);
    // Bounded: a server that never binds fails the test rather than hanging it.
    for _ in 0..1200 {
        if bound_udp6(port) {
            return Some((server, port));
        }
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("gtlsserver ended before binding [::1]:{port}: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("gtlsserver did not bind [::1]:{port}");
}

#[test]
fn ngtcp2_over_ipv6_takes_requests_one_after_another_and_at_once() {
    let dir = scratch("ngtcp2");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let body: Vec<u8> = (0..150_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("file.bin"), &body).unwrap();
    let (cert, key) = certificate(&dir);
    let Some((_server, port)) = ngtcp2_server(&root, &cert, &key) else {
        return;
    };
    let url = format!("https://[::1]:{port}/file.bin");
    for parallel in [false, true] {
        let saved = dir.join(format!("saved-{parallel}"));
        let mut args = vec![
            url.as_str(),
            "-n",
            "3",
            "--output-dir",
            saved.to_str().unwrap(),
        ];
        if parallel {
            args.push("--parallel");
        }
        let run = client(&dir, &cert, &args);
        assert!(run.ok, "parallel {parallel}: {}", run.stderr);
        assert_eq!(run.report.requests, 3, "parallel {parallel}");
        assert_eq!(run.report.connections, 1, "parallel {parallel}");
        assert_eq!(run.report.bytes_received, 3 * body.len() as u64);
        assert_eq!(std::fs::read(saved.join("file.bin")).unwrap(), body);
    }
}
