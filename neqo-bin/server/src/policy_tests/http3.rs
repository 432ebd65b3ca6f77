//! HTTP/3 requests against a worker as the server builds it: files under the root with their
//! media types, `/N`, `HEAD`, and the error statuses, every body byte-exact; requests the
//! client cancels; the report counts them.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use neqo_driver::Driver;
use neqo_protocols::{ALPN_H3, ALPN_HQ};
use quinn_proto::{ConnectionError, VarInt};

use super::{SERVER, ServerApp, ServerConfig, TURNS};
use crate::ServerReport;
use neqo_h3::testing::{self, Cancel, Client, Got, pattern_body};

/// A root with a page, an image and a large file; removed when dropped.
struct Root(PathBuf);

impl Root {
    fn new(files: &[(&str, &[u8])]) -> Self {
        // One directory per root: the tests run in parallel.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("neqo-h3-root-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, body).unwrap();
        }
        Self(dir)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `c` against a worker built from `config` on the virtual network until the client
/// is done (bounded); returns the worker's report and the client, which must not have lost
/// its connection.
pub(super) fn exchange(config: ServerConfig, c: Client) -> (ServerReport, Client) {
    let (report, c) = exchange_with(config, c, |_, _, _| {});
    assert_eq!(c.lost, None, "closed by the client");
    (report, c)
}

/// As [`exchange`], calling `each_turn` with the server's driver and application after every
/// turn; the connection may end either way.
pub(super) fn exchange_with(
    config: ServerConfig,
    mut c: Client,
    mut each_turn: impl FnMut(&mut Driver, &mut ServerApp, Instant),
) -> (ServerReport, Client) {
    let (net, mut server, mut app, mut client_driver) = super::worker_and_client(config);
    // The file reads run on tokio's blocking pool, in real time: while the client waits for
    // an answer and nothing is due soon in virtual time, the loop waits for the server to be
    // woken by one (a long jump of the clock would time the connection out), for at most
    // `FILE_READ` of real time, a hang guard.
    const FILE_READ: std::time::Duration = std::time::Duration::from_secs(10);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let mut ended = false;
    for _ in 0..TURNS {
        let s = net.turn(&mut server, &mut app).unwrap();
        each_turn(&mut server, &mut app, net.now());
        let t = net.turn(&mut client_driver, &mut c).unwrap();
        if t.done {
            ended = true;
            break;
        }
        let queued = server.queued_datagrams() + client_driver.queued_datagrams() > 0;
        // A long jump of the clock while a file read may be in flight would time the
        // connection out in virtual time: give the blocking pool real time first (bounded).
        let next = [s.deadline, t.deadline, net.next_arrival()]
            .into_iter()
            .flatten()
            .min();
        let far = next.is_none_or(|n| n > net.now() + std::time::Duration::from_millis(50));
        if !queued && far && c.waiting() {
            let woken = runtime.block_on(tokio::time::timeout(
                FILE_READ,
                std::future::poll_fn(|cx| neqo_driver::Application::poll_wake(&mut app, cx)),
            ));
            if woken.is_ok() {
                continue;
            }
        }
        assert!(
            net.advance(&[s.deadline, t.deadline], queued),
            "stalled, with no file read to wait for"
        );
    }
    assert!(ended, "the client ended");
    // The server takes in what the client sent last (cancellations, its close) until the
    // connection is gone and its report is brought up to date.
    for _ in 0..TURNS {
        let s = net.turn(&mut server, &mut app).unwrap();
        if server.open_connections() == 0 {
            net.turn(&mut server, &mut app).unwrap();
            break;
        }
        if !net.advance(&[s.deadline], server.queued_datagrams() > 0) {
            break;
        }
    }
    (app.report, c)
}

#[test]
fn files_generated_bodies_and_error_statuses_over_http3() {
    files_generated_bodies_and_error_statuses(false);
}

/// The same requests answered by the `Files` service on the library's service path (h3's
/// HTTP/3): the same answers byte for byte, the same counts.
#[test]
fn the_files_service_answers_as_the_built_in_http3_does() {
    files_generated_bodies_and_error_statuses(true);
}

fn files_generated_bodies_and_error_statuses(via_service: bool) {
    let page = b"<!doctype html><title>t</title><img src=img.png>".to_vec();
    let image: Vec<u8> = (0..100_003u32).map(|i| (i * 7 % 256) as u8).collect();
    let big = vec![b'x'; 3_000_000];
    let spaced = b"a name with a space".to_vec();
    let sub = b"<!doctype html><title>sub</title>".to_vec();
    let body_bytes =
        (page.len() * 3 + image.len() + spaced.len() + sub.len() + 100_000 + "250000".len()) as u64;
    let root = Root::new(&[
        ("index.html", &page),
        ("img.png", &image),
        ("big.bin", &big),
        ("a b.txt", &spaced),
        ("sub/index.html", &sub),
    ]);
    let mut config = ServerConfig {
        listen: vec![SERVER],
        root: Some(root.0.clone()),
        alpns: vec![ALPN_H3.into(), ALPN_HQ.into()],
        ..ServerConfig::default()
    };
    if via_service {
        let files = crate::Files::new(&root.0).unwrap().generating(true);
        config.apps.insert(ALPN_H3, crate::App::http3(files));
    }
    let c = Client::new(
        SERVER,
        testing::config(),
        &[
            ("GET", "/index.html"),
            ("GET", "/img.png"),
            ("HEAD", "/big.bin"),
            ("GET", "/100000"),
            ("GET", "/missing.html"),
            ("GET", "//etc/passwd"),
            ("GET", "/../index.html"),
            ("DELETE", "/index.html"),
            ("POST", "/upload"),
            // The web rules: the query ignored, %-escapes decoded, `.` and empty names
            // dropped, a directory's index, a redirect to it, every way up refused.
            ("GET", "/index.html?v=1"),
            ("GET", "/./img.png/"),
            ("GET", "/a%20b.txt"),
            ("GET", "/"),
            ("GET", "/sub"),
            ("HEAD", "/sub?x=1"),
            ("GET", "//sub//"),
            ("GET", "/%2e%2e/index.html"),
            ("GET", "/sub%2Findex.html"),
        ],
    )
    .posting(250_000);
    let (report, c) = exchange(config, c);
    let answers: Vec<Got> = c.answers().into_iter().map(|g| g.unwrap()).collect();
    let mut head = Got::ok(
        "HEAD",
        "/big.bin",
        Vec::new(),
        Some("application/octet-stream"),
    );
    head.content_length = Some("3000000".into());
    let mut want = vec![
        Got::ok(
            "GET",
            "/index.html",
            page.clone(),
            Some("text/html; charset=utf-8"),
        ),
        Got::ok("GET", "/img.png", image, Some("image/png")),
        head,
        Got::ok(
            "GET",
            "/100000",
            pattern_body(100_000),
            Some("application/octet-stream"),
        ),
        Got::status("GET", "/missing.html", 404),
        Got::status("GET", "//etc/passwd", 404),
        Got::status("GET", "/../index.html", 400),
        Got::status("DELETE", "/index.html", 405),
        Got::ok(
            "GET",
            "/index.html?v=1",
            page.clone(),
            Some("text/html; charset=utf-8"),
        ),
        // A file asked for as a directory: its index, which is not there.
        Got::status("GET", "/./img.png/", 404),
        Got::ok(
            "GET",
            "/a%20b.txt",
            spaced,
            Some("text/plain; charset=utf-8"),
        ),
        Got::ok("GET", "/", page.clone(), Some("text/html; charset=utf-8")),
        Got::moved("GET", "/sub", "/sub/"),
        Got::moved("HEAD", "/sub?x=1", "/sub/?x=1"),
        Got::ok("GET", "//sub//", sub, Some("text/html; charset=utf-8")),
        Got::status("GET", "/%2e%2e/index.html", 400),
        Got::status("GET", "/sub%2Findex.html", 400),
        Got::ok(
            "POST",
            "/upload",
            b"250000".to_vec(),
            Some("text/plain; charset=utf-8"),
        ),
    ];
    want.sort_by_key(|g| (g.path.clone(), g.method.clone()));
    assert_eq!(answers, want);
    let h = report.http3;
    assert_eq!(
        (h.responses, h.error_statuses, h.cancelled, h.uploaded_bytes),
        (11, 7, 0, 250_000),
        "{h:?}"
    );
    assert_eq!(report.requests, 11);
    assert_eq!(report.refused_requests, 7);
    assert_eq!(report.bytes_received, 250_000);
    assert_eq!(h.body_bytes, body_bytes);
    // `--stats` and `--metrics` carry HTTP/3's share.
    let summary = report.summary();
    assert!(
        summary.contains(&format!(
            "requests 11 refused 7, sent {body_bytes} B, received 250000 B, lost packets 0, HTTP/3 responses 11 error statuses 7 cancelled 0 rejected 0 body {body_bytes} B\n"
        )),
        "{summary}"
    );
    let board =
        crate::metrics::Board::new(1, Arc::default(), crate::metrics::test_certificates(), None);
    board.publish(0, report.clone());
    let text = board.render();
    for line in [
        "neqo_server_http3_responses_total{worker=\"0\"} 11".to_owned(),
        "neqo_server_http3_error_statuses_total{worker=\"0\"} 7".to_owned(),
        "neqo_server_http3_cancelled_total{worker=\"0\"} 0".to_owned(),
        format!("neqo_server_http3_body_bytes_total{{worker=\"0\"}} {body_bytes}"),
        "neqo_server_http3_uploaded_bytes_total{worker=\"0\"} 250000".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

/// With generated bodies off, `/N` is not found (GET and HEAD alike) and the root's files are
/// served as before.
#[test]
fn generated_bodies_off_are_not_found_over_http3() {
    let page = b"<!doctype html><title>t</title>".to_vec();
    let root = Root::new(&[("index.html", &page)]);
    let config = ServerConfig {
        listen: vec![SERVER],
        root: Some(root.0.clone()),
        generate: false,
        alpns: vec![ALPN_H3.into()],
        ..ServerConfig::default()
    };
    let c = Client::new(
        SERVER,
        testing::config(),
        &[("GET", "/100000"), ("HEAD", "/5"), ("GET", "/index.html")],
    );
    let (report, c) = exchange(config, c);
    let mut answers: Vec<Got> = c.answers().into_iter().map(|g| g.unwrap()).collect();
    answers.sort_by_key(|g| (g.path.clone(), g.method.clone()));
    assert_eq!(
        answers,
        vec![
            Got::status("GET", "/100000", 404),
            Got::status("HEAD", "/5", 404),
            Got::ok(
                "GET",
                "/index.html",
                page.clone(),
                Some("text/html; charset=utf-8"),
            ),
        ]
    );
    assert_eq!(
        (report.http3.responses, report.http3.error_statuses),
        (1, 2)
    );
}

/// Requests the client cancels once their headers arrive, 250 on one connection for each way
/// (RFC 9114 section 4.1.1, `H3_REQUEST_CANCELLED`): the server must free every stream so that
/// its credit comes back. It allows 100 concurrent streams, so a server that left them open
/// would wedge the connection at the 101st. After them a request is served whole, and the
/// server counts the cancelled ones.
fn cancelled_requests_free_their_streams(how: Cancel) {
    const CANCELLED: usize = 250;
    const WINDOW: u32 = 64 << 10;
    // Larger than the client's stream receive window: no cancelled response can have been
    // sent whole before the cancel arrived.
    let big = "/1000000";
    let mut requests = vec![("GET", big); CANCELLED];
    requests.push(("GET", "/1000"));
    let config = ServerConfig {
        listen: vec![SERVER],
        alpns: vec![ALPN_H3.into()],
        ..ServerConfig::default()
    };
    let c = Client::new(
        SERVER,
        testing::config_with_stream_window(WINDOW),
        &requests,
    )
    .cancelling(how, CANCELLED);
    let (report, c) = exchange(config, c);
    let answers: Vec<Got> = c
        .answers()
        .into_iter()
        .map(|g| g.unwrap_or_else(|e| panic!("{how:?}: {e}")))
        .collect();
    let (cancelled, whole): (Vec<&Got>, Vec<&Got>) = answers.iter().partition(|g| g.path == big);
    assert_eq!(cancelled.len(), CANCELLED, "{how:?}");
    assert!(
        cancelled
            .iter()
            .all(|g| g.status == 200 && g.content_length.as_deref() == Some("1000000")),
        "{how:?}"
    );
    assert_eq!(
        whole,
        [&Got::ok(
            "GET",
            "/1000",
            pattern_body(1000),
            Some("application/octet-stream")
        )],
        "{how:?}"
    );
    let h = report.http3;
    assert_eq!(
        (h.responses, h.cancelled, h.error_statuses),
        (1, CANCELLED as u64, 0),
        "{how:?}: {h:?}"
    );
}

#[test]
fn requests_cancelled_with_stop_sending_free_their_streams() {
    cancelled_requests_free_their_streams(Cancel::StopSending);
}

#[test]
fn requests_cancelled_with_reset_stream_free_their_streams() {
    cancelled_requests_free_their_streams(Cancel::Reset);
}

#[test]
fn requests_cancelled_both_ways_free_their_streams() {
    cancelled_requests_free_their_streams(Cancel::Both);
}

/// The server shuts down (its driver's `shut_down`, as SIGTERM does) once a 3 MB response is
/// under way (handed to quinn-proto, which has not sent it all: the congestion window
/// holds it back): what it does with a drain period of `drain`.
fn shut_down_mid_response(drain: Duration) -> (ServerReport, Client) {
    const LEN: &str = "/3000000";
    let config = ServerConfig {
        listen: vec![SERVER],
        alpns: vec![ALPN_H3.into()],
        driver: neqo_driver::DriverConfig::default().with_drain(drain),
        ..ServerConfig::default()
    };
    let c = Client::new(SERVER, testing::config(), &[("GET", LEN)]).staying_open();
    let mut shut = false;
    let (report, c) = exchange_with(config, c, |server, app, now| {
        if !shut && app.report.http3.body_bytes > 0 {
            shut = true;
            server.shut_down(app, now).unwrap();
        }
    });
    assert!(shut, "the response started");
    (report, c)
}

/// RFC 9114 section 5.2: a shutting-down server sends GOAWAY and lets the requests it has
/// accepted finish: the response under way arrives whole, a later request is refused
/// unprocessed (H3_REQUEST_REJECTED), and once the response is acknowledged the server
/// closes the connection with H3_NO_ERROR.
#[test]
fn a_shutdown_lets_the_response_under_way_finish_then_closes_with_h3_no_error() {
    let (report, c) = shut_down_mid_response(Duration::from_secs(2));
    let got = c.got.borrow().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0],
        Ok(Got::ok(
            "GET",
            "/3000000",
            pattern_body(3_000_000),
            Some("application/octet-stream")
        ))
    );
    // Sent before the client read the GOAWAY (the virtual network's timing makes it so),
    // with the ID the GOAWAY named: refused unprocessed, as RFC 9114 section 5.2 says.
    // (`h3` alone would have served it: it accepts the ID it announces.)
    assert_eq!(got[1], Err("Remote reset: H3_REQUEST_REJECTED".to_owned()));
    match &c.lost {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code, VarInt::from_u32(0x100), "H3_NO_ERROR");
            assert_eq!(&close.reason[..], b"shutdown");
        }
        other => panic!("closed by the server with H3_NO_ERROR, not {other:?}"),
    }
    let h = report.http3;
    assert_eq!((h.responses, h.cancelled, h.rejected), (1, 0, 1), "{h:?}");
}

/// A drain period that ends before the response does (3 MB cannot go in 50 ms of the
/// virtual network's round trips) cuts it: the client gets its stream reset with
/// `H3_REQUEST_CANCELLED` (RFC 9114 section 4.1.1: it may have been processed, so it is not
/// one to retry as refused) before the close, and the report counts it as cut at shutdown;
/// only the request made after the GOAWAY is refused unprocessed.
#[test]
fn a_drain_period_that_ends_first_cuts_the_response_with_h3_request_cancelled() {
    let (report, c) = shut_down_mid_response(Duration::from_millis(50));
    let got = c.got.borrow().clone();
    assert_eq!(
        got,
        [
            Err("Remote reset: H3_REQUEST_CANCELLED".to_owned()),
            Err("Remote reset: H3_REQUEST_REJECTED".to_owned())
        ]
    );
    assert!(
        matches!(&c.lost, Some(ConnectionError::ApplicationClosed(close)) if close.error_code == VarInt::from_u32(0x100)),
        "{:?}",
        c.lost
    );
    // Counted as a response when quinn-proto took it whole (its window holds 3 MB); cut,
    // as the client saw it, since it was not acknowledged.
    let h = report.http3;
    assert_eq!((h.responses, h.cancelled, h.rejected), (1, 0, 1), "{h:?}");
    assert_eq!(report.cut_at_shutdown, 1);
}

/// With no drain period the same shutdown closes at once: the response is cut short (the
/// contrast that shows the drain is what lets it finish).
#[test]
fn a_shutdown_without_a_drain_period_closes_at_once() {
    let (_, c) = shut_down_mid_response(Duration::ZERO);
    let got = c.got.borrow().clone();
    assert!(
        matches!(got.as_slice(), [Err(_)] | [Err(_), Err(_)]),
        "{:?}",
        got.iter()
            .map(|g| g.as_ref().map(|g| g.body.len()))
            .collect::<Vec<_>>()
    );
    assert!(
        matches!(&c.lost, Some(ConnectionError::ApplicationClosed(close)) if close.error_code == VarInt::from_u32(0x100)),
        "{:?}",
        c.lost
    );
}
