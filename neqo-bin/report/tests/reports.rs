//! Every report survives its own round trip, the committed records still parse into their
//! type byte for byte, and a report without a field it must have is refused by name.

use std::path::{Path, PathBuf};

use neqo_report::{
    ClientReport, DispatchReport, FigureRecord, LoopbackRow, PacingTimer, Percentiles,
    QuinnLoadReport, ReadError, Report, ServerReport, Spread, Stats, TcpTlsReport, TransferFigures,
    WorkerSummary,
};

/// A report whose every part differs from its default, so that a field dropped or renamed on
/// the way shows.
fn client() -> ClientReport {
    let mut socket = Stats::default();
    socket.rx.datagrams = 1000;
    socket.rx.syscalls = 40;
    socket.tx.per_syscall[3] = 7;
    socket.kernel_drops = 2;
    let mut r = ClientReport {
        alpn: "h3".to_owned(),
        bytes_received: 1_000_000,
        bytes_sent: 12,
        requests: 3,
        failed_requests: 1,
        connections: 2,
        concurrency: 2,
        seconds: 0.5,
        gbps: 16.0,
        handshake_ms: Some(Percentiles {
            count: 2,
            p50: 1.5,
            p90: 2.0,
            p99: 2.5,
            max: 3.0,
        }),
        connection_gbps: Some(Spread {
            count: 2,
            min: 1.0,
            median: 1.5,
            max: 2.0,
        }),
        errors: vec!["one".to_owned()],
        socket,
        io: "batched".to_owned(),
        ..ClientReport::default()
    };
    r.driver.max_path_mtu = 8972;
    r.driver.pacing_timer = Some(PacingTimer::Tokio);
    r.driver.rx_ecn.ect0 = 5;
    r.tls.key_updates = 4;
    r
}

fn server() -> ServerReport {
    let mut r = ServerReport {
        requests: 3,
        bytes_sent: 1_000_000,
        tx_datagrams_per_syscall: 40.5,
        steering: "channel".to_owned(),
        dispatch: Some(DispatchReport {
            capacity: 1024,
            datagrams: vec![10, 20],
            dropped: vec![0, 1],
            by_source: 3,
            socket: Stats::default(),
        }),
        workers: vec![WorkerSummary {
            accepted: 1,
            initials_shed: 9,
            ..WorkerSummary::default()
        }],
        ..ServerReport::default()
    };
    r.admission.handshakes.buckets[12] = 1;
    r.admission.peak_half_open = 32;
    r.http3.cancelled = 2;
    r.driver.retries = 1;
    r.socket.tx.syscalls = 8;
    r
}

fn tcp_tls() -> TcpTlsReport {
    TcpTlsReport {
        bytes_received: 3_145_735,
        bytes_sent: 14,
        requests: 1,
        connections: 1,
        seconds: 0.01,
        gbps: 2.5,
        handshake_ms: 1.2,
        cipher_suite: "TLS13_AES_128_GCM_SHA256".to_owned(),
        tcp_mss: Some(65_483),
    }
}

fn quinn_load() -> QuinnLoadReport {
    QuinnLoadReport {
        requests: 3,
        bytes_received: 900_000,
        seconds: 0.1,
        datagrams_sent: 100,
        datagrams_received: 700,
        error: None,
    }
}

fn round_trip<T: Report + PartialEq + std::fmt::Debug>(report: &T) {
    let text = report.to_json().unwrap();
    assert!(text.ends_with("}\n") || text.ends_with("]\n"), "{text}");
    let back = T::from_json(&text, Path::new("t.json")).unwrap();
    assert_eq!(&back, report);
}

#[test]
fn every_report_round_trips() {
    round_trip(&client());
    round_trip(&ServerReport::default());
    round_trip(&server());
    round_trip(&vec![LoopbackRow {
        mode: "batched".to_owned(),
        pacing: true,
        bytes: 1_000_000,
        gbps: 8.0,
        server_path_mtu: 8972,
        client: client(),
        server: server(),
        ..LoopbackRow::default()
    }]);
    round_trip(&TransferFigures {
        bytes_received: 5,
        requests: 1,
        gbps: Some(1.0),
        rx_datagrams_per_syscall: None,
        tcp_mss: None,
    });
    round_trip(&tcp_tls());
    round_trip(&quinn_load());
    round_trip(&QuinnLoadReport {
        error: Some("refused".to_owned()),
        ..QuinnLoadReport::default()
    });
    round_trip(&FigureRecord {
        commit: "abc1234".to_owned(),
        cores: 2,
        output: "| a |\n|---|".to_owned(),
        ..FigureRecord::default()
    });
}

/// The names the readers go by are the JSON's: a report's keys as the other tools and the
/// docs know them.
#[test]
fn the_json_keeps_its_keys() {
    let v: serde_json::Value = serde_json::from_str(&client().to_json().unwrap()).unwrap();
    assert_eq!(v["driver"]["max_path_mtu"], 8972);
    assert_eq!(v["driver"]["pacing_timer"], "tokio");
    assert_eq!(v["socket"]["rx"]["datagrams"], 1000);
    assert_eq!(v["handshake_ms"]["p99"], 2.5);
    assert!(v["request_ms"].is_null());
    let v: serde_json::Value = serde_json::from_str(&server().to_json().unwrap()).unwrap();
    assert_eq!(v["admission"]["peak_half_open"], 32);
    assert_eq!(v["workers"][0]["initials_shed"], 9);
    assert_eq!(v["dispatch"]["dropped"][1], 1);
    assert_eq!(v["admission"]["handshakes"]["buckets"][12], 1);
}

fn results() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results")
}

/// Every committed record is a [`FigureRecord`], written exactly as its type writes it: the
/// shape `figures` reads is the one it wrote.
#[test]
fn the_committed_records_parse_byte_for_byte() {
    let mut seen = 0;
    for entry in std::fs::read_dir(results()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let record = FigureRecord::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            Some(record.name.as_str()),
            path.file_stem().and_then(|s| s.to_str()),
            "{}",
            path.display()
        );
        assert!(record.cores > 0, "{}", path.display());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(record.to_json().unwrap(), text, "{}", path.display());
        seen += 1;
    }
    assert!(seen > 0, "no records in {}", results().display());
}

#[test]
fn a_missing_field_is_an_error_naming_it() {
    let mut v: serde_json::Value = serde_json::from_str(&client().to_json().unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("bytes_received");
    let err = ClientReport::from_json(&v.to_string(), Path::new("client.json")).unwrap_err();
    assert!(matches!(err, ReadError::Parse { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("client.json"), "{msg}");
    assert!(msg.contains("neqo-client report"), "{msg}");
    assert!(msg.contains("missing field `bytes_received`"), "{msg}");

    let mut v: serde_json::Value = serde_json::from_str(&server().to_json().unwrap()).unwrap();
    v["driver"].as_object_mut().unwrap().remove("max_path_mtu");
    let msg = ServerReport::from_json(&v.to_string(), Path::new("s.json"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("missing field `max_path_mtu`"), "{msg}");

    // A figure that may be null must still be there: its absence is a malformed report.
    let mut v: serde_json::Value = serde_json::from_str(&client().to_json().unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("request_ms");
    let msg = ClientReport::from_json(&v.to_string(), Path::new("c.json"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("missing field `request_ms`"), "{msg}");
    let mut v: serde_json::Value = serde_json::from_str(&server().to_json().unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("dispatch");
    let msg = ServerReport::from_json(&v.to_string(), Path::new("s.json"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("missing field `dispatch`"), "{msg}");

    let msg = TransferFigures::from_json(r#"{"requests": 1}"#, Path::new("q.json"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("missing field `bytes_received`"), "{msg}");
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let path = Path::new("/nonexistent/neqo-report/client.json");
    let err = ClientReport::read(path).unwrap_err();
    assert!(matches!(err, ReadError::Io { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("/nonexistent/neqo-report/client.json")
    );
}

/// What the other stacks' clients write (the msquic peer's `null` where it has no figure,
/// `quinn-load` without a rate, `tcp-tls` without a socket count) reads as no figure, not as
/// 0.
#[test]
fn other_clients_transfer_figures() {
    let msquic = r#"{"alpn": "hq-interop", "bytes_received": 10, "requests": 1,
        "gbps": 2.5, "rx_datagrams_per_syscall": null, "kernel_drops": null}"#;
    let t = TransferFigures::from_json(msquic, Path::new("m.json")).unwrap();
    assert_eq!(t.positive_gbps(), Some(2.5));
    assert_eq!(t.positive_rx_datagrams_per_syscall(), None);
    let t =
        TransferFigures::from_json(&quinn_load().to_json().unwrap(), Path::new("q.json")).unwrap();
    assert_eq!((t.requests, t.bytes_received, t.gbps), (3, 900_000, None));
    let t = TransferFigures::from_json(&tcp_tls().to_json().unwrap(), Path::new("t.json")).unwrap();
    assert_eq!(t.positive_gbps(), Some(2.5));
    assert_eq!(t.rx_datagrams_per_syscall, None);
    let zero = r#"{"requests": 0, "bytes_received": 0, "gbps": 0.0}"#;
    let t = TransferFigures::from_json(zero, Path::new("z.json")).unwrap();
    assert_eq!(t.positive_gbps(), None);
    // A whole neqo-client report is one too.
    let t = TransferFigures::from_json(&client().to_json().unwrap(), Path::new("c.json")).unwrap();
    assert_eq!(t.bytes_received, 1_000_000);
}
