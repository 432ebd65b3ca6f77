//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::{
    collections::HashMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    sync::mpsc,
    time::Duration,
};

/// `https://ADDR/PATH`.
pub fn url(addr: SocketAddr, path: &str) -> url::Url {
    url::Url::parse(&format!("https://{addr}{path}")).unwrap()
}

/// Runs `f` on its own thread and waits at most `deadline` for it: a hang guard.
pub fn with_deadline<T: Send + 'static>(
    what: &str,
    deadline: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(deadline) {
        Ok(v) => v,
        Err(e) => panic!("{what}: no result within {deadline:?} ({e})"),
    }
}

/// The raw answer to `request` from the TCP server at `addr` (a hang guard of a minute).
pub fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The samples of a scrape of `neqo-server --metrics` at `addr`: `name{labels}` to value.
pub fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    let answer = http(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "OpenMetrics ends so");
    if let Err(e) = test_fixtures::openmetrics::strict_parse(body) {
        panic!("not valid OpenMetrics: {e}\n{body}");
    }
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// Stops a `neqo-server` child (SIGTERM, bounded), checks that it exited cleanly, and reads
/// the JSON report it wrote to `json` (removed after).
pub fn stop_and_report(
    server: test_fixtures::Server,
    json: &std::path::Path,
) -> neqo_report::ServerReport {
    let stopped = server.stop().unwrap();
    assert!(
        stopped.success(),
        "{}: {}",
        stopped.ending(),
        stopped.stderr
    );
    let report = <neqo_report::ServerReport as neqo_report::Report>::read(json);
    let _ = std::fs::remove_file(json);
    report.unwrap_or_else(|e| panic!("{e}"))
}
