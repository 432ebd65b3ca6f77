//! `neqo-server`'s certificates: read from `--tls-cert`/`--tls-key` pairs, checked at start,
//! and replaced on SIGHUP while a transfer goes on over the old one; a refused reload (a key
//! of another certificate) keeps the old one served. The choice by SNI among several is
//! neqo-driver's `tls::certificates` tests.
#![cfg(unix)]

mod common;

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use common::scrape;
use test_fixtures::{Measured, Server, run};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");

/// A hang guard, not a speed bound.
const LIMIT: Duration = Duration::from_secs(120);

/// A certificate for localhost and 127.0.0.1 and its key, as PEM.
struct Pem {
    cert: String,
    key: String,
}

fn new_pem() -> Pem {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    Pem {
        cert: ck.cert.pem(),
        key: ck.signing_key.serialize_pem(),
    }
}

fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neqo-reload-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn put(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A fetch of `path` trusting only the certificate in `ca`.
fn fetch(server: &Server, path: &str, ca: &str) -> Measured {
    run(
        Command::new(CLIENT).args([
            &format!("https://{}{path}", server.addr()),
            "--no-progress",
            "--idle-timeout",
            "5",
            "--ca",
            ca,
        ]),
        LIMIT,
    )
    .unwrap()
}

/// A free TCP port on loopback for the metrics endpoint.
fn metrics_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn replacements(m: &HashMap<String, f64>, result: &str) -> f64 {
    m.get(&format!(
        "neqo_server_tls_certificate_replacements_total{{result=\"{result}\"}}"
    ))
    .copied()
    .unwrap_or(f64::NAN)
}

/// Scrapes until `done` holds, at most `tries` times, a quarter second apart.
fn scrape_until(
    addr: SocketAddr,
    what: &str,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    for _ in 0..400 {
        let m = scrape(addr);
        if done(&m) {
            return m;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("never: {what}");
}

fn hangup(server: &Server) {
    let ok = Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP");
}

#[test]
fn sighup_replaces_the_certificate_and_a_refused_reload_keeps_the_old() {
    let d = dir("sighup");
    let (a, b, c) = (new_pem(), new_pem(), new_pem());
    let (cert, key) = (d.join("cert.pem"), d.join("key.pem"));
    put(&cert, &a.cert);
    put(&key, &a.key);
    let ca_a = put(&d.join("a.pem"), &a.cert);
    let ca_b = put(&d.join("b.pem"), &b.cert);
    let ca_c = put(&d.join("c.pem"), &c.cert);
    let metrics = metrics_addr();
    let server = Server::start(
        Command::new(SERVER).args([
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--metrics",
            &metrics.to_string(),
        ]),
        LIMIT,
    )
    .expect("server starts");
    assert!(fetch(&server, "/1000", &ca_a).success());
    assert!(
        !fetch(&server, "/1000", &ca_b).success(),
        "b not served yet"
    );

    // B replaces A while a download over A goes on; the download ends whole (the client
    // checks every byte of /N).
    put(&cert, &b.cert);
    put(&key, &b.key);
    let ongoing = {
        let (server_addr, ca_a) = (server.addr(), ca_a.clone());
        std::thread::spawn(move || {
            run(
                Command::new(CLIENT).args([
                    &format!("https://{server_addr}/4000000000"),
                    "--no-progress",
                    "--ca",
                    &ca_a,
                ]),
                LIMIT,
            )
            .unwrap()
        })
    };
    scrape_until(metrics, "the download's connection open", |m| {
        m["neqo_server_connections_open"] == 1.0
    });
    hangup(&server);
    let m = scrape_until(metrics, "the reload", |m| replacements(m, "done") == 1.0);
    assert_eq!(
        m["neqo_server_connections_open"], 1.0,
        "the download ended before the reload: make it longer"
    );
    let out = ongoing.join().unwrap();
    assert!(
        out.success(),
        "the download over the old certificate: {}",
        out.stderr
    );
    assert!(fetch(&server, "/1000", &ca_b).success());
    assert!(
        !fetch(&server, "/1000", &ca_a).success(),
        "a no longer served"
    );

    // C's certificate with B's key: refused, B still served.
    put(&cert, &c.cert);
    hangup(&server);
    let m = scrape_until(metrics, "the refusal", |m| {
        replacements(m, "refused") == 1.0
    });
    assert_eq!(replacements(&m, "done"), 1.0);
    assert_eq!(m["neqo_server_tls_certificates"], 1.0);
    assert!(fetch(&server, "/1000", &ca_b).success(), "b kept");
    assert!(!fetch(&server, "/1000", &ca_c).success());

    let out = server.stop().unwrap();
    assert!(!out.killed);
    assert!(
        out.stderr
            .contains("neqo-server: SIGHUP: serving 1 certificate(s) read again"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(
            "neqo-server: SIGHUP: certificates not reloaded, still serving the old: --tls-cert"
        ),
        "{}",
        out.stderr
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Pairs that cannot work are refused at start: a count that differs, a key of another
/// certificate, naming the files.
#[test]
fn certificate_pairs_are_checked_at_start() {
    let d = dir("start");
    let (a, b) = (new_pem(), new_pem());
    let cert_a = put(&d.join("a.pem"), &a.cert);
    let key_b = put(&d.join("b.key"), &b.key);
    let key_a = put(&d.join("a.key"), &a.key);
    let refused = |args: &[&str]| {
        let out = run(
            Command::new(SERVER)
                .args(["--listen", "127.0.0.1:0"])
                .args(args),
            LIMIT,
        )
        .unwrap();
        assert!(!out.success() && !out.stdout.contains("listening"));
        out.stderr
    };
    let e = refused(&["--tls-cert", &cert_a, "--tls-key", &key_b]);
    assert!(
        e.contains(&format!(
            "neqo-server: error: --tls-cert {cert_a} --tls-key {key_b}: certificate and key do \
             not fit together"
        )),
        "{e}"
    );
    let e = refused(&[
        "--tls-cert",
        &cert_a,
        "--tls-key",
        &key_a,
        "--tls-cert",
        &cert_a,
    ]);
    assert!(
        e.contains("--tls-cert given 2 times, --tls-key 1: each certificate needs its key"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
