//! `quinn-load`, the load client of another stack, against a quinn server in this test on
//! 127.0.0.1 that answers `/N` whole, with one byte changed, or short: the client takes
//! only the whole body, and its report says what it verified.

use std::{net::SocketAddr, process::Command, time::Duration};

use neqo_driver::tls::{Identity, server_crypto};
use neqo_protocols::{ALPN_HQ, hq, pattern};
use neqo_report::{QuinnLoadReport, Report as _};
use test_fixtures::{Measured, run};

/// What the test server does to each body.
#[derive(Debug, Clone, Copy)]
enum Body {
    Whole,
    /// The byte at this offset changed.
    Changed(u64),
    /// This many bytes fewer.
    Short(u64),
}

/// Serves `GET /N` with `body` on a thread of its own; its address.
fn serve(body: Body) -> SocketAddr {
    let identity = Identity::self_signed().unwrap();
    let crypto = server_crypto(&identity, &[ALPN_HQ.to_owned()]).unwrap();
    let config = quinn::ServerConfig::with_crypto(crypto);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let endpoint = quinn::Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
            tx.send(endpoint.local_addr().unwrap()).unwrap();
            while let Some(incoming) = endpoint.accept().await {
                tokio::spawn(async move {
                    let Ok(conn) = incoming.await else { return };
                    while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                        let request = recv.read_to_end(1024).await.unwrap();
                        let Ok(hq::Target::Generated(n)) = hq::parse_request(&request) else {
                            let _ = send.reset(1u32.into());
                            continue;
                        };
                        let len = match body {
                            Body::Short(k) => n - k,
                            _ => n,
                        };
                        let mut at = 0;
                        while at < len {
                            let mut chunk = pattern::chunk(at, len - at).to_vec();
                            if let Body::Changed(i) = body
                                && (at..at + chunk.len() as u64).contains(&i)
                            {
                                chunk[usize::try_from(i - at).unwrap()] ^= 1;
                            }
                            send.write_all(&chunk).await.unwrap();
                            at += chunk.len() as u64;
                        }
                        send.finish().unwrap();
                    }
                });
            }
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

fn load(addr: SocketAddr, path: &str, n: u64, json: Option<&std::path::Path>) -> Measured {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quinn-load"));
    cmd.arg(format!("https://{addr}{path}"))
        .args(["-n", &n.to_string()]);
    if let Some(j) = json {
        cmd.arg("--json").arg(j);
    }
    run(&mut cmd, Duration::from_secs(60)).unwrap()
}

#[test]
fn whole_bodies_are_taken_and_reported() {
    let addr = serve(Body::Whole);
    let json = std::env::temp_dir().join(format!("quinn-load-{}.json", std::process::id()));
    let m = load(addr, "/300000", 3, Some(&json));
    assert!(m.success(), "{m:?}");
    let report = QuinnLoadReport::read(&json);
    let _ = std::fs::remove_file(&json);
    let report = report.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.requests, 3);
    assert_eq!(report.bytes_received, 900_000);
    assert!(report.datagrams_received > 600, "{report:?}");
    assert_eq!(report.error, None);
}

#[test]
fn a_changed_byte_fails_the_run() {
    let addr = serve(Body::Changed(123_456));
    let m = load(addr, "/200000", 1, None);
    assert_eq!(m.code, Some(1), "{m:?}");
    assert!(
        m.stderr.contains("byte 123456 differs from the pattern"),
        "{}",
        m.stderr
    );
}

#[test]
fn a_short_body_fails_the_run() {
    let addr = serve(Body::Short(1));
    let m = load(addr, "/70000", 2, None);
    assert_eq!(m.code, Some(1), "{m:?}");
    assert!(m.stderr.contains("69999 bytes of 70000"), "{}", m.stderr);
}

#[test]
fn only_ip_literals_and_n_paths_are_taken() {
    for (url, why) in [
        (
            "https://localhost:4433/10",
            "the host must be an IP address",
        ),
        ("https://127.0.0.1:4433/index.html", "the path must be /N"),
        ("http://127.0.0.1:4433/10", "only https URLs"),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_quinn-load"));
        let m = run(cmd.arg(url), Duration::from_secs(20)).unwrap();
        assert_eq!(m.code, Some(1), "{url}: {m:?}");
        assert!(m.stderr.contains(why), "{url}: {}", m.stderr);
    }
}
