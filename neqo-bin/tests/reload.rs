//! `neqo-server`'s certificates: read from `--tls-cert`/`--tls-key` pairs, checked at start,
//! and replaced on SIGHUP while a transfer goes on over the old one; a refused reload (a key
//! of another certificate) keeps the old one served. The choice by SNI among several is
//! neqo-driver's `tls::certificates` tests. And SIGHUP itself: a reload that waits on a file
//! (a FIFO) is given up and SIGINT/SIGTERM still stop the server, SIGHUPs that come while one
//! runs fold into one more, a burst of them leaves a download whole, and a reload names the
//! settings that changed but apply only at a start.
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

/// Waits until the server's stderr holds `line` `times` times (a hang guard of [`LIMIT`]);
/// its stderr then.
fn wait_for(server: &Server, line: &str, times: usize) -> String {
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let err = server.stderr_so_far();
        if err.matches(line).count() >= times {
            return err;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never said {line:?} {times} time(s): {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `n` SIGHUPs at once: one `kill` with the server's pid `n` times.
fn hangups(server: &Server, n: usize) {
    let pid = server.id().to_string();
    let ok = Command::new("kill")
        .arg("-HUP")
        .args(std::iter::repeat_n(&pid, n))
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP x{n}");
}

/// The server's reload threads (the blocking pool's, named so), from /proc.
#[cfg(target_os = "linux")]
fn reload_threads(server: &Server) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", server.id()))
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "neqo-reload")
        })
        .count()
}

/// Makes a FIFO at `path` (the `mkfifo` command: no unsafe code here).
fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

/// A server from the config file `cfg` alone (which names its certificate).
fn from_config(cfg: &str, extra: &[&str]) -> Server {
    Server::start(
        Command::new(SERVER).args(["--config", cfg]).args(extra),
        LIMIT,
    )
    .expect("server starts")
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
    let mut server = Server::start(
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
    server.hangup().expect("SIGHUP");
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
    server.hangup().expect("SIGHUP");
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

/// A config that became a FIFO is refused on SIGHUP at once (opened without waiting for a
/// writer), the old certificate still served, and SIGTERM still stops the server cleanly.
#[test]
fn sighup_refuses_a_config_that_became_a_fifo_and_sigterm_still_stops() {
    let d = dir("fifo-config");
    let a = new_pem();
    let ca = put(&d.join("a.pem"), &a.cert);
    let key = put(&d.join("a.key"), &a.key);
    let cfg = d.join("s.toml");
    let cfg_s = put(
        &cfg,
        &format!("listen = \"127.0.0.1:0\"\nworkers = 1\ntls-cert = {ca:?}\ntls-key = {key:?}\n"),
    );
    let mut server = from_config(&cfg_s, &[]);
    assert!(fetch(&server, "/1000", &ca).success());
    std::fs::remove_file(&cfg).unwrap();
    mkfifo(&cfg);
    server.hangup().expect("SIGHUP");
    wait_for(
        &server,
        &format!(
            "neqo-server: SIGHUP: certificates not reloaded, still serving the old: --config \
             {cfg_s}: a FIFO (named pipe), not a regular file"
        ),
        1,
    );
    assert!(fetch(&server, "/1000", &ca).success(), "still serving");
    let out = server.stop().unwrap();
    assert!(!out.killed && out.success(), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// A reload that waits on a file (the certificate became a FIFO) is given up at its deadline,
/// the old certificate still served; the SIGHUPs that come meanwhile start no other thread
/// but fold into one more reload once it ends, which serves the new certificate; and SIGTERM
/// stops the server cleanly while a reload waits.
#[test]
fn a_reload_stuck_on_a_file_is_given_up_and_sighups_meanwhile_fold_into_one() {
    let d = dir("stuck");
    let (a, b) = (new_pem(), new_pem());
    let (cert, key, fifo) = (d.join("cert.pem"), d.join("key.pem"), d.join("cert.fifo"));
    let (cert_s, key_s) = (put(&cert, &a.cert), put(&key, &a.key));
    let ca_a = put(&d.join("a.pem"), &a.cert);
    let ca_b = put(&d.join("b.pem"), &b.cert);
    let cfg = put(
        &d.join("s.toml"),
        &format!(
            "listen = \"127.0.0.1:0\"\nworkers = 1\ntls-cert = {cert_s:?}\ntls-key = {key_s:?}\n"
        ),
    );
    let mut server = from_config(&cfg, &[]);
    assert!(fetch(&server, "/1000", &ca_a).success());
    let given_up = "neqo-server: SIGHUP: reload not done within 5 s (a file that blocks: a FIFO, \
                    a hung mount?), given up: still serving the old settings";

    std::fs::remove_file(&cert).unwrap();
    mkfifo(&cert);
    server.hangup().expect("SIGHUP");
    wait_for(&server, given_up, 1);
    assert!(fetch(&server, "/1000", &ca_a).success(), "a still served");
    #[cfg(target_os = "linux")]
    let before = reload_threads(&server);
    hangups(&server, 2000);
    wait_for(
        &server,
        "neqo-server: SIGHUP: the reload given up still waits on a file; the next follows once \
         it ends (a restart ends it)",
        1,
    );
    #[cfg(target_os = "linux")]
    {
        assert!(before >= 1, "the stuck reload's thread");
        assert!(
            reload_threads(&server) <= before,
            "SIGHUPs during a reload started threads"
        );
    }

    // The FIFO moved aside, B in place, and the stuck reader given A's certificate and an end:
    // its result is ignored, and the one reload folded after it serves B.
    std::fs::rename(&cert, &fifo).unwrap();
    put(&cert, &b.cert);
    put(&key, &b.key);
    std::fs::write(&fifo, &a.cert).unwrap();
    let err = wait_for(
        &server,
        "neqo-server: SIGHUP: serving 1 certificate(s) read again",
        1,
    );
    assert!(
        err.contains("neqo-server: SIGHUP: the reload given up has ended, its result ignored"),
        "{err}"
    );
    assert!(fetch(&server, "/1000", &ca_b).success(), "b served");
    assert!(!fetch(&server, "/1000", &ca_a).success(), "a replaced");

    // SIGTERM while a reload waits on a file.
    std::fs::remove_file(&cert).unwrap();
    mkfifo(&cert);
    server.hangup().expect("SIGHUP");
    wait_for(&server, given_up, 2);
    let out = server.stop().unwrap();
    assert!(!out.killed && out.success(), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// 2000 SIGHUPs at once during a download: the download ends whole (every byte of the file it
/// wrote checked), the server goes on serving, and SIGTERM then stops it cleanly.
#[test]
fn a_burst_of_sighups_during_a_download() {
    const BODY: u64 = 512 << 20;
    let d = dir("burst");
    let a = new_pem();
    let ca = put(&d.join("a.pem"), &a.cert);
    let key = put(&d.join("a.key"), &a.key);
    let log = d.join("access.log");
    let metrics = metrics_addr();
    let cfg = put(
        &d.join("s.toml"),
        &format!(
            "listen = \"127.0.0.1:0\"\nworkers = 1\ntls-cert = {ca:?}\ntls-key = {key:?}\n\
             access-log = {:?}\nmetrics = \"{metrics}\"\n",
            log.to_str().unwrap()
        ),
    );
    let server = from_config(&cfg, &[]);
    let body = d.join("body.bin");
    let download = {
        let (addr, ca, body) = (server.addr(), ca.clone(), body.clone());
        std::thread::spawn(move || {
            run(
                Command::new(CLIENT).args([
                    &format!("https://{addr}/{BODY}"),
                    "--no-progress",
                    "--ca",
                    &ca,
                    "-o",
                    body.to_str().unwrap(),
                ]),
                LIMIT,
            )
            .unwrap()
        })
    };
    scrape_until(metrics, "the download's connection open", |m| {
        m["neqo_server_connections_open"] == 1.0
    });
    for _ in 0..20 {
        hangups(&server, 100);
    }
    assert_eq!(
        scrape(metrics)["neqo_server_connections_open"],
        1.0,
        "the download ended before the burst did: make it longer"
    );
    let out = download.join().unwrap();
    assert!(out.success(), "the download: {}", out.stderr);
    let mut file = std::fs::File::open(&body).unwrap();
    let mut chunk = vec![0; 1 << 20];
    let mut offset = 0u64;
    loop {
        let n = std::io::Read::read(&mut file, &mut chunk).unwrap();
        if n == 0 {
            break;
        }
        assert!(
            neqo_protocols::pattern::verify(offset, &chunk[..n]),
            "a wrong byte in {offset}..{}",
            offset + n as u64
        );
        offset += n as u64;
    }
    assert_eq!(offset, BODY);
    wait_for(
        &server,
        "neqo-server: SIGHUP: serving 1 certificate(s) read again",
        1,
    );
    wait_for(
        &server,
        &format!(
            "neqo-server: SIGHUP: access log {} opened again",
            log.display()
        ),
        1,
    );
    assert!(
        fetch(&server, "/1000", &ca).success(),
        "serving after the burst"
    );
    let out = server.stop().unwrap();
    assert!(!out.killed && out.success(), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&d);
}

/// A reload applies the certificates and names every other setting that changed, which the
/// server keeps as it started with until a restart: a changed worker count, then a changed
/// address too; the server still answers where it listened.
#[test]
fn a_reload_names_the_settings_that_apply_only_at_a_start() {
    let d = dir("changed");
    let (a, b) = (new_pem(), new_pem());
    let ca_a = put(&d.join("a.pem"), &a.cert);
    let key_a = put(&d.join("a.key"), &a.key);
    let ca_b = put(&d.join("b.pem"), &b.cert);
    let key_b = put(&d.join("b.key"), &b.key);
    let cfg = d.join("s.toml");
    let config = |listen: &str, workers: usize, cert: &str, key: &str| {
        put(
            &cfg,
            &format!(
                "listen = \"{listen}\"\nworkers = {workers}\ntls-cert = {cert:?}\ntls-key = \
                 {key:?}\n"
            ),
        )
    };
    let mut server = from_config(&config("127.0.0.1:0", 1, &ca_a, &key_a), &[]);
    server.hangup().expect("SIGHUP");
    let err = wait_for(
        &server,
        "neqo-server: SIGHUP: serving 1 certificate(s) read again",
        1,
    );
    assert!(!err.contains("changed"), "nothing changed: {err}");

    config("127.0.0.1:0", 2, &ca_b, &key_b);
    server.hangup().expect("SIGHUP");
    let err = wait_for(
        &server,
        "neqo-server: SIGHUP: --workers changed: it applies at the next start",
        1,
    );
    assert_eq!(
        err.matches("serving 1 certificate(s) read again").count(),
        2
    );
    assert!(fetch(&server, "/1000", &ca_b).success(), "b applied");

    config("127.0.0.1:1", 2, &ca_b, &key_b);
    server.hangup().expect("SIGHUP");
    wait_for(
        &server,
        "neqo-server: SIGHUP: --listen, --workers changed: they apply at the next start",
        1,
    );
    assert!(
        fetch(&server, "/1000", &ca_b).success(),
        "still where it was"
    );
    let out = server.stop().unwrap();
    assert!(!out.killed && out.success(), "{}", out.stderr);
    assert!(!out.stderr.contains("--tls-"), "applied: {}", out.stderr);
    let _ = std::fs::remove_dir_all(&d);
}
