//! `neqo-server --access-log`: a line per request over hq-interop, HTTP/3 and perf, answered
//! or refused, in both formats, written by the time the server has exited.
#![cfg(unix)]

use std::{path::Path, process::Command, time::Duration};

use test_fixtures::{Measured, Server, run};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");

/// A hang guard, not a speed bound.
const LIMIT: Duration = Duration::from_secs(60);

fn fetch(server: &Server, alpn: &str, paths: &[&str], extra: &[&str]) -> Measured {
    let urls: Vec<String> = paths
        .iter()
        .map(|p| format!("https://{}{p}", server.addr()))
        .collect();
    run(
        Command::new(CLIENT)
            .args(&urls)
            .args(["--insecure", "--no-progress", "--alpn", alpn])
            .args(extra),
        LIMIT,
    )
    .unwrap()
}

/// Serves one of each kind of request with the log in `format`; the log's lines.
fn logged(dir: &Path, format: &str) -> Vec<String> {
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("page.html"), b"<p>hi</p>").unwrap();
    let log = dir.join(format!("access-{format}.log"));
    let server = Server::start(
        Command::new(SERVER).args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "2",
            "--alpn",
            "h3,hq-interop,perf",
            "--root",
            root.to_str().unwrap(),
            "--generate",
            "--access-log",
            log.to_str().unwrap(),
            "--access-log-format",
            format,
        ]),
        LIMIT,
    )
    .expect("server starts");
    // hq-interop: a generated body and a file answered, a missing file refused.
    let out = fetch(
        &server,
        "hq-interop",
        &["/1000", "/page.html", "/nothing"],
        &[],
    );
    assert_eq!(out.code, Some(1), "one refused: {}", out.stderr);
    // HTTP/3: a file, a generated body, a missing file (404).
    let out = fetch(&server, "h3", &["/page.html", "/2000", "/nothing"], &[]);
    assert_eq!(out.code, Some(1), "one 404: {}", out.stderr);
    // perf: one download.
    let out = fetch(&server, "perf", &["/"], &["--download", "3000"]);
    assert!(out.success(), "{}", out.stderr);
    let stopped = server.stop().unwrap();
    assert!(!stopped.killed);
    assert!(!stopped.stderr.contains("dropped"), "{}", stopped.stderr);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

fn dir(test: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("neqo-access-log-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_line_per_request_in_the_common_format() {
    let d = dir("common");
    let lines = logged(&d, "common");
    assert_eq!(lines.len(), 7, "{lines:#?}");
    // What follows the time, per request, in any order.
    let mut tails: Vec<String> = lines
        .iter()
        .map(|l| {
            assert!(l.starts_with("127.0.0.1:"), "{l}");
            let (_, tail) = l.split_once("] ").unwrap_or_else(|| panic!("{l}"));
            // Drop the duration, which varies: `... BYTES SECONDS OUTCOME`.
            let words: Vec<&str> = tail.rsplitn(3, ' ').collect();
            assert!(words[1].parse::<f64>().is_ok(), "seconds in {l}");
            format!("{} {}", words[2], words[0])
        })
        .collect();
    tails.sort();
    let mut want = vec![
        "\"- - perf\" - 3000 answered",
        "\"GET /1000 hq-interop\" - 1000 answered",
        "\"GET /2000 h3\" 200 2000 answered",
        "\"GET /nothing h3\" 404 0 answered",
        "\"GET /nothing hq-interop\" - 0 reset:0x10",
        "\"GET /page.html h3\" 200 9 answered",
        "\"GET /page.html hq-interop\" - 9 answered",
    ];
    want.sort_unstable();
    assert_eq!(tails, want);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_json_object_per_request() {
    let d = dir("json");
    let lines = logged(&d, "json");
    assert_eq!(lines.len(), 7, "{lines:#?}");
    let mut got: Vec<(String, String, String, Option<u64>, u64, String)> = lines
        .iter()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(v["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{l}");
            assert!(
                v["peer"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("127.0.0.1:")),
                "{l}"
            );
            assert!(v["duration_s"].as_f64().is_some_and(|s| s >= 0.0), "{l}");
            (
                v["alpn"].as_str().unwrap().to_owned(),
                v["method"].as_str().unwrap().to_owned(),
                v["path"].as_str().unwrap().to_owned(),
                v["status"].as_u64(),
                v["bytes"].as_u64().unwrap(),
                v["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    got.sort();
    let row = |alpn: &str, method: &str, path: &str, status: Option<u64>, bytes, outcome: &str| {
        (
            alpn.to_owned(),
            method.to_owned(),
            path.to_owned(),
            status,
            bytes,
            outcome.to_owned(),
        )
    };
    let mut want = vec![
        row("h3", "GET", "/2000", Some(200), 2000, "answered"),
        row("h3", "GET", "/nothing", Some(404), 0, "answered"),
        row("h3", "GET", "/page.html", Some(200), 9, "answered"),
        row("hq-interop", "GET", "/1000", None, 1000, "answered"),
        row("hq-interop", "GET", "/nothing", None, 0, "reset"),
        row("hq-interop", "GET", "/page.html", None, 9, "answered"),
        row("perf", "-", "-", None, 3000, "answered"),
    ];
    want.sort();
    assert_eq!(got, want);
    let _ = std::fs::remove_dir_all(&d);
}

/// A log that cannot be opened is refused at start; the format alone is refused by clap.
#[test]
fn a_log_that_cannot_be_opened_is_refused_at_start() {
    let out = run(
        Command::new(SERVER).args([
            "--listen",
            "127.0.0.1:0",
            "--access-log",
            "/nonexistent/dir/access.log",
        ]),
        LIMIT,
    )
    .unwrap();
    assert!(!out.success() && !out.stdout.contains("listening"));
    assert!(
        out.stderr
            .contains("--access-log /nonexistent/dir/access.log: cannot open it"),
        "{}",
        out.stderr
    );
    let out = run(
        Command::new(SERVER).args(["--listen", "127.0.0.1:0", "--access-log-format", "json"]),
        LIMIT,
    )
    .unwrap();
    assert!(
        !out.success() && out.stderr.contains("--access-log"),
        "{}",
        out.stderr
    );
}

/// After logrotate moves the log away, SIGHUP opens it anew: lines before go to the moved
/// file, lines after to the new one, none lost; a server on its self-signed certificate
/// reports no refused certificate reload for it.
#[test]
fn sighup_opens_the_log_again_after_a_rotation() {
    let d = dir("rotate");
    let log = d.join("access.log");
    let rotated = d.join("access.log.1");
    let mut server = Server::start(
        Command::new(SERVER).args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--access-log",
            log.to_str().unwrap(),
        ]),
        LIMIT,
    )
    .expect("server starts");
    assert!(fetch(&server, "hq-interop", &["/1000"], &[]).success());
    std::fs::rename(&log, &rotated).unwrap();
    reopen(&mut server, &log);
    assert!(fetch(&server, "hq-interop", &["/2000"], &[]).success());
    let stopped = server.stop().unwrap();
    assert!(!stopped.killed);
    assert!(
        stopped.stderr.contains("SIGHUP: access log") && stopped.stderr.contains("opened again"),
        "{}",
        stopped.stderr
    );
    assert!(
        !stopped.stderr.contains("certificates not reloaded"),
        "{}",
        stopped.stderr
    );
    let before = std::fs::read_to_string(&rotated).unwrap();
    let after = std::fs::read_to_string(&log).unwrap();
    assert_eq!(before.lines().count(), 1, "{before}");
    assert!(before.contains("\"GET /1000 hq-interop\""), "{before}");
    assert_eq!(after.lines().count(), 1, "{after}");
    assert!(after.contains("\"GET /2000 hq-interop\""), "{after}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A log on a device that refuses every write (`/dev/full`, ENOSPC, as a full disk does):
/// the server serves on, counts the lines it could not write, says so when it starts failing
/// and when it writes again; a SIGHUP after the log's path is pointed at a real file again
/// switches to it, and the lines after are written there. None of it is fatal at exit.
#[cfg(target_os = "linux")]
#[test]
fn a_log_on_a_full_disk_counts_its_drops_and_a_reopen_resumes_it() {
    let d = dir("full");
    let log = d.join("access.log");
    std::os::unix::fs::symlink("/dev/full", &log).unwrap();
    let mut server = Server::start(
        Command::new(SERVER)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--workers",
                "1",
                "--access-log",
                log.to_str().unwrap(),
            ])
            // Its warnings are what this test reads, whatever the caller's RUST_LOG.
            .env("RUST_LOG", "warn"),
        LIMIT,
    )
    .expect("server starts");
    for p in ["/1000", "/1001", "/1002"] {
        assert!(fetch(&server, "hq-interop", &[p], &[]).success());
    }
    // The path a real file again: SIGHUP opens (creates) it.
    std::fs::remove_file(&log).unwrap();
    reopen(&mut server, &log);
    for p in ["/2000", "/2001"] {
        assert!(fetch(&server, "hq-interop", &[p], &[]).success());
    }
    let stopped = server.stop().unwrap();
    assert!(!stopped.killed);
    assert!(stopped.success(), "{}", stopped.stderr);
    let err = &stopped.stderr;
    assert!(
        err.contains("access log: writing failed") && err.contains("No space left on device"),
        "{err}"
    );
    assert!(
        err.contains("SIGHUP: access log") && err.contains("opened again"),
        "{err}"
    );
    assert!(
        err.contains("access log: writing again after 3 lines dropped"),
        "{err}"
    );
    assert!(
        err.contains(
            "neqo-server: the access log dropped 3 of 5 lines (3 as writing failed: No space \
             left on device"
        ),
        "{err}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let paths: Vec<&str> = text
        .lines()
        .map(|l| l.split('"').nth(1).unwrap_or_else(|| panic!("{l}")))
        .collect();
    assert_eq!(
        paths,
        ["GET /2000 hq-interop", "GET /2001 hq-interop"],
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// SIGHUP, then waits until the server has opened (created) `log` again: when it takes the
/// signal, with a hang guard of a minute.
fn reopen(server: &mut Server, log: &Path) {
    server.hangup().expect("SIGHUP");
    for _ in 0..2400 {
        if log.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the log was not opened again");
}
