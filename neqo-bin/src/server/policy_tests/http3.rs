//! HTTP/3 requests against a worker as the server builds it: files under the root with their
//! media types, `/N`, `HEAD`, and the error statuses, every body byte-exact; requests the
//! client cancels; the report counts them.

use std::{path::PathBuf, sync::Arc, time::Instant};

use quinn_proto::EndpointConfig;

use super::{ONE_WAY, SERVER, ServerConfig, TURNS, client, prepare, worker};
use crate::{
    driver::{
        Driver,
        testing::{Behaviour, Network},
    },
    h3::{
        test_client::{self, Cancel, Client, Got},
        tests::pattern_body,
    },
    server::ServerReport,
    tls::{ALPN_H3, ALPN_HQ},
};

/// A root with a page, an image and a large file; removed when dropped.
struct Root(PathBuf);

impl Root {
    fn new(files: &[(&str, &[u8])]) -> Self {
        let dir = std::env::temp_dir().join(format!("neqo-h3-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in files {
            std::fs::write(dir.join(name), body).unwrap();
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
/// is done (bounded); returns the worker's report and the client.
fn exchange(config: ServerConfig, mut c: Client) -> (ServerReport, Client) {
    let start = Instant::now();
    let net = Network::new(5, start).with_one_way(ONE_WAY);
    let (shared, _) = prepare(config).unwrap();
    let (mut server, mut app) = worker::parts(
        0,
        vec![net.path(SERVER, Behaviour::default())],
        &shared,
        start,
    );
    let mut client_driver = Driver::with_datapaths(
        vec![net.path(client(2, 5000), Behaviour::default())],
        EndpointConfig::default(),
        None,
        true,
    );
    // The file reads run on tokio's blocking pool, in real time: when nothing is due in
    // virtual time, the loop waits for them (bounded).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let mut waits = 0;
    let mut ended = false;
    for _ in 0..TURNS {
        let s = net.turn(&mut server, &mut app).unwrap();
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
        if !queued && far && waits < 20 {
            waits += 1;
            std::thread::sleep(std::time::Duration::from_millis(2));
            continue;
        }
        waits = 0;
        assert!(
            net.advance(&[s.deadline, t.deadline], queued),
            "stalled, with no file read to wait for"
        );
    }
    assert!(ended, "the client ended");
    assert_eq!(c.lost, None, "closed by the client");
    (app.report, c)
}

#[test]
fn files_generated_bodies_and_error_statuses_over_http3() {
    let page = b"<!doctype html><title>t</title><img src=img.png>".to_vec();
    let image: Vec<u8> = (0..100_003u32).map(|i| (i * 7 % 256) as u8).collect();
    let big = vec![b'x'; 3_000_000];
    let body_bytes = (page.len() + image.len() + 100_000) as u64;
    let root = Root::new(&[
        ("index.html", &page),
        ("img.png", &image),
        ("big.bin", &big),
    ]);
    let config = ServerConfig {
        listen: vec![SERVER],
        root: Some(root.0.clone()),
        alpns: vec![ALPN_H3.into(), ALPN_HQ.into()],
        ..ServerConfig::default()
    };
    let c = Client::new(
        SERVER,
        test_client::config(),
        &[
            ("GET", "/index.html"),
            ("GET", "/img.png"),
            ("HEAD", "/big.bin"),
            ("GET", "/100000"),
            ("GET", "/missing.html"),
            ("GET", "//etc/passwd"),
            ("GET", "/../index.html"),
            ("POST", "/index.html"),
        ],
    );
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
        Got::ok("GET", "/index.html", page, Some("text/html; charset=utf-8")),
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
        Got::status("GET", "/../index.html", 404),
        Got::status("POST", "/index.html", 405),
    ];
    want.sort_by_key(|g| (g.path.clone(), g.method.clone()));
    assert_eq!(answers, want);
    let h = report.http3;
    assert_eq!(
        (h.responses, h.error_statuses, h.cancelled),
        (4, 4, 0),
        "{h:?}"
    );
    assert_eq!(report.requests, 4);
    assert_eq!(report.refused_requests, 4);
    assert_eq!(h.body_bytes, body_bytes);
    // `--stats` and `--metrics` carry HTTP/3's share.
    let summary = report.summary();
    assert!(
        summary.contains(&format!(
            "requests 4 refused 4, sent {body_bytes} B, received 0 B, lost packets 0, HTTP/3 responses 4 error statuses 4 cancelled 0 body {body_bytes} B\n"
        )),
        "{summary}"
    );
    let board = crate::server::metrics::Board::new(1, Arc::default());
    board.publish(0, report.clone());
    let text = board.render();
    for line in [
        "neqo_server_http3_responses_total{worker=\"0\"} 4".to_owned(),
        "neqo_server_http3_error_statuses_total{worker=\"0\"} 4".to_owned(),
        "neqo_server_http3_cancelled_total{worker=\"0\"} 0".to_owned(),
        format!("neqo_server_http3_body_bytes_total{{worker=\"0\"}} {body_bytes}"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
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
        test_client::config_with_stream_window(WINDOW),
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
