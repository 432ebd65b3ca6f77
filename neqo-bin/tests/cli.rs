//! `neqo-server` and `neqo-client` as real processes over loopback: transfers, JSON reports,
//! clean shutdown and the command-line errors.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use test_fixtures::{Measured, Server, run};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");

/// How long a server may take to say where it listens, and a command to finish.
const LIMIT: Duration = Duration::from_secs(60);

/// `neqo-server --listen 127.0.0.1:0 ARGS...`, killed when dropped.
fn start_server(args: &[&str]) -> Server {
    Server::start(
        Command::new(SERVER)
            .args(["--listen", "127.0.0.1:0"])
            .args(args),
        LIMIT,
    )
    .unwrap_or_else(|e| panic!("server did not start: {e}"))
}

fn url(server: &Server, path: &str) -> String {
    format!("https://{}{path}", server.addr())
}

/// SIGTERM, then wait (bounded) for a clean exit.
#[cfg(unix)]
fn terminate(server: Server) -> Measured {
    let out = server.stop().unwrap();
    let grace = test_fixtures::STOP_GRACE;
    assert!(!out.killed, "server ignored SIGTERM for {grace:?}");
    out
}

/// `neqo-server ARGS...` run to its end: for arguments it must refuse.
fn server_run(args: &[&str]) -> Measured {
    run(Command::new(SERVER).args(args), LIMIT).unwrap()
}

fn client(args: &[&str]) -> Measured {
    run(
        Command::new(CLIENT)
            .args(["--no-progress", "--idle-timeout", "5"])
            .args(args),
        LIMIT,
    )
    .unwrap()
}

/// A JSON report a binary wrote.
fn read_json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neqo-bin-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// (Unix: the clean shutdown is on SIGTERM, which Windows has not.)
#[cfg(unix)]
#[test]
fn download_with_json_reports_and_clean_shutdown() {
    let server_json = tmp("server.json");
    let server = start_server(&["--stats", "--json", server_json.to_str().unwrap()]);
    let json = tmp("client.json");
    let out = client(&[
        &url(&server, "/10000000"),
        "--insecure",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.success(), "{}", out.stderr);
    let v = read_json(&json);
    for key in [
        "bytes_received",
        "bytes_sent",
        "requests",
        "connections",
        "seconds",
        "gbps",
        "rx_datagrams_per_syscall",
        "tx_datagrams_per_syscall",
        "kernel_drops",
        "lost_packets",
    ] {
        assert!(v.get(key).is_some(), "{key} missing in {v}");
    }
    assert_eq!(v["bytes_received"], 10_000_000);
    #[cfg(target_os = "linux")]
    assert_eq!(v["driver"]["pacing_timer"], "precise", "{v}");

    // The pacer on tokio's timers, as the JSON report says; a timer that does not exist is
    // refused by name.
    let out = client(&[
        &url(&server, "/1000000"),
        "--insecure",
        "--pacing-timer",
        "tokio",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.success(), "{}", out.stderr);
    let v = read_json(&json);
    assert_eq!(v["driver"]["pacing_timer"], "tokio", "{v}");
    assert_eq!(v["bytes_received"], 1_000_000);
    let out = client(&[&url(&server, "/1"), "--insecure", "--pacing-timer", "hpet"]);
    assert!(!out.success());
    assert!(out.stderr.contains("--pacing-timer"), "{}", out.stderr);

    let out = terminate(server);
    assert!(out.success(), "{}", out.stderr);
    assert!(out.stderr.contains("exit stats"), "{}", out.stderr);
    let s = read_json(&server_json);
    // Both downloads; the refused flag never reached it.
    assert_eq!(s["bytes_sent"], 11_000_000);
    assert!(s["tx_datagrams_per_syscall"].as_f64().unwrap() >= 1.0);
}

#[test]
fn ipv6_single_mode_no_pacing_perf_with_ca() {
    let json = tmp("ipv6-client.json");
    let cert = tmp("cert.pem");
    let key = tmp("key.pem");
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "::1".to_owned()]).unwrap();
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let server = Server::start(
        Command::new(SERVER)
            .args(["--listen", "[::1]:0", "--io", "single", "--no-pacing"])
            .args([
                "--cert",
                cert.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ]),
        LIMIT,
    )
    .expect("listening");
    assert!(
        server.addr().to_string().starts_with("[::1]"),
        "{}",
        server.addr()
    );
    let out = client(&[
        &url(&server, "/"),
        "--ca",
        cert.to_str().unwrap(),
        "--alpn",
        "perf",
        "--download",
        "2M",
        "--upload",
        "1M",
        "--io",
        "single",
        "--no-pacing",
        "-n",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.success(), "{}", out.stderr);
    let v = read_json(&json);
    assert_eq!(
        v["driver"]["pacing_timer"],
        serde_json::Value::Null,
        "no pacing: {v}"
    );
}

#[test]
fn bad_url_fails() {
    for u in ["not a url", "http://127.0.0.1:1/", "https:///x"] {
        let out = client(&[u, "--insecure"]);
        assert!(!out.success());
        assert!(out.stderr.contains("bad URL"), "{u}: {}", out.stderr);
    }
}

#[test]
fn port_in_use_fails() {
    let first = start_server(&[]);
    let addr = first.addr().to_string();
    let out = server_run(&["--listen", &addr]);
    assert!(!out.success());
    assert!(out.stderr.contains(&addr), "{}", out.stderr);
    assert!(
        out.stderr.to_lowercase().contains("in use"),
        "{}",
        out.stderr
    );
}

#[test]
fn missing_cert_or_root_fails() {
    let out = server_run(&[
        "--listen",
        "127.0.0.1:0",
        "--cert",
        "/nonexistent/cert.pem",
        "--key",
        "/nonexistent/key.pem",
    ]);
    assert!(!out.success());
    assert!(
        out.stderr.contains("/nonexistent/cert.pem"),
        "{}",
        out.stderr
    );
    let out = server_run(&["--listen", "127.0.0.1:0", "--root", "/nonexistent/root"]);
    assert!(!out.success());
    assert!(out.stderr.contains("--root"), "{}", out.stderr);
}

#[test]
fn untrusted_certificate_and_wrong_alpn_fail() {
    let server = start_server(&["--alpn", "hq-interop"]);
    let out = client(&[&url(&server, "/10")]);
    assert!(!out.success());
    assert!(out.stderr.contains("--insecure"), "{}", out.stderr);
    let out = client(&[
        &url(&server, "/"),
        "--insecure",
        "--alpn",
        "perf",
        "--download",
        "10",
    ]);
    assert!(!out.success());
    assert!(out.stderr.contains("ALPN"), "{}", out.stderr);
    let out = client(&[&url(&server, "/"), "--insecure", "--alpn", "h3"]);
    assert!(!out.success());
    assert!(out.stderr.contains("ALPN"), "{}", out.stderr);
}

#[cfg(unix)]
#[test]
fn refused_path_fails_the_client_and_the_server_goes_on() {
    let server = start_server(&["--root", std::env::temp_dir().to_str().unwrap()]);
    let out = client(&[&url(&server, "//etc/passwd"), "--insecure"]);
    assert!(!out.success());
    assert!(out.stderr.contains("reset"), "{}", out.stderr);
    let out = client(&[
        &url(&server, "/1000"),
        &url(&server, "/2000"),
        "--insecure",
        "-n",
        "3",
        "--parallel",
    ]);
    assert!(out.success(), "{}", out.stderr);
    let out = terminate(server);
    assert!(out.stderr.contains("refusing"), "{}", out.stderr);
}

/// Files under `--root` reach `--output-dir` byte-exact between the two binaries; `/N` is
/// generated even where a file named N exists.
#[test]
fn root_files_reach_the_output_dir_byte_exact() {
    let root = tmp("root");
    let out = tmp("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let big: Vec<u8> = (0..1_500_007u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("sub/big.bin"), &big).unwrap();
    std::fs::write(root.join("300"), b"not the body of /300").unwrap();
    let server = start_server(&["--root", root.to_str().unwrap()]);
    let output = client(&[
        &url(&server, "/sub/big.bin"),
        &url(&server, "/300"),
        "--insecure",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert!(output.success(), "{}", output.stderr);
    assert!(std::fs::read(out.join("big.bin")).unwrap() == big);
    let generated: Vec<u8> = (0..300u32).map(|k| (k % 256) as u8).collect();
    assert_eq!(std::fs::read(out.join("300")).unwrap(), generated);
}

#[test]
fn sslkeylogfile_is_honoured() {
    let server = start_server(&[]);
    let keylog = tmp("keys.log");
    let _ = std::fs::remove_file(&keylog);
    let out = run(
        Command::new(CLIENT)
            .args([&url(&server, "/100"), "--insecure", "--no-progress"])
            .env("SSLKEYLOGFILE", &keylog),
        LIMIT,
    )
    .unwrap();
    assert!(out.success(), "{}", out.stderr);
    let text = std::fs::read_to_string(&keylog).unwrap();
    assert!(text.contains("CLIENT_HANDSHAKE_TRAFFIC_SECRET"), "{text}");
}
