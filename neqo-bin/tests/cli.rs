//! `neqo-server` and `neqo-client` as real processes over loopback: transfers, JSON reports,
//! clean shutdown and the command-line errors.

#[cfg(unix)]
use std::os::unix::fs::PermissionsExt as _;
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use neqo_report::{ClientReport, Report};
#[cfg(unix)]
use neqo_report::{LoopbackRow, PacingTimer, ServerReport};
use test_fixtures::{Measured, Server, run};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");

/// How long a server may take to say where it listens, and a command to finish.
const LIMIT: Duration = Duration::from_secs(60);

/// `neqo-server --listen 127.0.0.1:0 ARGS...`, killed when dropped; unless `ARGS` set them,
/// with idle and handshake timeouts a loaded machine never reaches.
fn start_server(args: &[&str]) -> Server {
    let mut cmd = Command::new(SERVER);
    cmd.args(["--listen", "127.0.0.1:0"]);
    if !args.contains(&"--idle-timeout") {
        cmd.args(["--idle-timeout", "120", "--handshake-timeout", "120"]);
    }
    Server::start(cmd.args(args), LIMIT).unwrap_or_else(|e| panic!("server did not start: {e}"))
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

/// `neqo-client --no-progress ARGS...` run to its end, with an idle timeout a loaded machine
/// never reaches (the server's, 10 s by default, is what a connection gets).
fn client(args: &[&str]) -> Measured {
    run(
        Command::new(CLIENT)
            .args(["--no-progress", "--idle-timeout", "120"])
            .args(args),
        LIMIT,
    )
    .unwrap()
}

/// A JSON report a binary wrote, every field of its type present.
fn read_json<T: Report>(path: &Path) -> T {
    T::read(path).unwrap_or_else(|e| panic!("{e}"))
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
    let v: ClientReport = read_json(&json);
    assert_eq!(v.bytes_received, 10_000_000);
    assert_eq!((v.requests, v.connections), (1, 1), "{v:?}");
    assert!(v.gbps > 0.0 && v.rx_datagrams_per_syscall >= 1.0, "{v:?}");
    #[cfg(target_os = "linux")]
    assert_eq!(v.driver.pacing_timer, Some(PacingTimer::Precise), "{v:?}");

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
    let v: ClientReport = read_json(&json);
    assert_eq!(v.driver.pacing_timer, Some(PacingTimer::Tokio), "{v:?}");
    assert_eq!(v.bytes_received, 1_000_000);
    let out = client(&[&url(&server, "/1"), "--insecure", "--pacing-timer", "hpet"]);
    assert!(!out.success());
    assert!(out.stderr.contains("--pacing-timer"), "{}", out.stderr);

    let out = terminate(server);
    assert!(out.success(), "{}", out.stderr);
    assert!(out.stderr.contains("exit stats"), "{}", out.stderr);
    let s: ServerReport = read_json(&server_json);
    // Both downloads; the refused flag never reached it.
    assert_eq!(s.bytes_sent, 11_000_000);
    assert!(s.tx_datagrams_per_syscall >= 1.0, "{s:?}");
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
    let v: ClientReport = read_json(&json);
    assert_eq!(v.driver.pacing_timer, None, "no pacing: {v:?}");
}

/// `--io uring` (a mode until io_uring was removed, see docs/records/io_uring.md) is refused at start
/// by all three binaries, with a message naming the modes there are; `--help` lists them.
#[test]
fn io_uring_is_refused_naming_the_modes() {
    let loopback = env!("CARGO_BIN_EXE_neqo-loopback");
    let cases: [(&str, &[&str]); 4] = [
        (SERVER, &["--listen", "127.0.0.1:0", "--io", "uring"]),
        (
            CLIENT,
            &["https://127.0.0.1:9/1", "--insecure", "--io", "uring"],
        ),
        (
            CLIENT,
            &["https://127.0.0.1:9/1", "--insecure", "--io", "io_uring"],
        ),
        (loopback, &["--modes", "batched,uring", "--bytes", "1"]),
    ];
    for (exe, args) in cases {
        let out = run(Command::new(exe).args(args), LIMIT).unwrap();
        let what = format!("{exe} {args:?}: {}; stderr: {}", out.ending(), out.stderr);
        assert!(!out.killed, "{what}");
        assert!(matches!(out.code, Some(c) if c != 0), "{what}");
        assert!(out.stderr.contains("unknown I/O mode"), "{what}");
        assert!(out.stderr.contains("expected batched or single"), "{what}");
        assert!(!out.stdout.contains("listening"), "{what}");
    }
    for exe in [SERVER, CLIENT] {
        let help = run(Command::new(exe).arg("--help"), LIMIT).unwrap();
        assert!(help.stdout.contains("`batched`"), "{exe}: {}", help.stdout);
        assert!(help.stdout.contains("`single`"), "{exe}: {}", help.stdout);
        // ("uring" alone would also match "during".)
        assert!(
            !help.stdout.contains("`uring`") && !help.stdout.contains("io_uring"),
            "{exe}: {}",
            help.stdout
        );
    }
}

/// `neqo-loopback --json`: a row per mode, its figures those of the two reports it carries
/// whole.
#[cfg(unix)]
#[test]
fn loopback_reports_both_sides_per_mode() {
    let json = tmp("loopback.json");
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_neqo-loopback")).args([
            "--bytes",
            "2M",
            "--modes",
            "single,batched",
            "--json",
            json.to_str().unwrap(),
        ]),
        LIMIT,
    )
    .unwrap();
    assert!(out.success(), "{}: {}", out.ending(), out.stderr);
    let rows: Vec<LoopbackRow> = read_json(&json);
    let modes: Vec<&str> = rows.iter().map(|r| r.mode.as_str()).collect();
    assert_eq!(modes, ["single", "batched"]);
    for r in &rows {
        assert_eq!(r.bytes, 2 << 20, "{r:?}");
        assert_eq!(r.bytes, r.client.bytes_received, "{r:?}");
        assert_eq!(r.client.io, r.mode, "{r:?}");
        assert!(r.pacing && r.client.pacing, "{r:?}");
        assert_eq!(r.server.bytes_sent, r.bytes, "{r:?}");
        assert_eq!(
            r.server_path_mtu,
            u64::from(r.server.driver.max_path_mtu),
            "{r:?}"
        );
        assert_eq!(
            r.kernel_drops,
            r.client.kernel_drops + r.server.kernel_drops,
            "{r:?}"
        );
    }
    let _ = std::fs::remove_file(&json);
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
    let server = start_server(&[
        "--root",
        std::env::temp_dir().to_str().unwrap(),
        "--generate",
    ]);
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
    let server = start_server(&["--root", root.to_str().unwrap(), "--generate"]);
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

/// The client writes its TLS secrets where `SSLKEYLOGFILE` says.
#[test]
fn the_client_logs_tls_secrets_to_sslkeylogfile() {
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

/// Every setting that cannot work is refused at start: a non-zero exit on its own (no signal,
/// no deadline), one line on stderr naming the flag, and nothing bound, connected or created.
#[test]
fn bad_settings_are_refused_at_start() {
    let file = tmp("regular-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let below_file = file.join("qlog");
    let below_file = below_file.to_str().unwrap();
    let no_dir = tmp("no-such-dir").join("report.json");
    let no_dir = no_dir.to_str().unwrap();
    let long_alpn = "a".repeat(300);
    let short_key = tmp("short-key");
    std::fs::write(&short_key, [1u8; 16]).unwrap();
    // Owner-only, so that the size is what is refused, not the mode.
    #[cfg(unix)]
    std::fs::set_permissions(&short_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let short_key = short_key.to_str().unwrap();
    let max_plus_one = (neqo_udp::MAX_BATCH_SIZE + 1).to_string();
    let common: &[(&[&str], &str)] = &[
        (&["--idle-timeout", "0"], "--idle-timeout"),
        (&["--idle-timeout", "99999999999999"], "--idle-timeout"),
        (&["--idle-timeout", "-1"], "--idle-timeout"),
        (&["--idle-timeout", "NaN"], "--idle-timeout"),
        (&["--idle-timeout", "inf"], "--idle-timeout"),
        (&["--batch-size", "0"], "--batch-size"),
        (&["--batch-size", &max_plus_one], "--batch-size"),
        (&["--qlog-dir", below_file], "--qlog-dir"),
        (&["--json", no_dir], "--json"),
        (&["--alpn", "h2"], "--alpn"),
        (&["--alpn", ""], "--alpn"),
        (&["--alpn", &long_alpn], "--alpn"),
        (&["--max-udp-payload", "1199"], "--max-udp-payload"),
        (&["--max-udp-payload", "65528"], "--max-udp-payload"),
        (&["--max-udp-payload", "99999999999"], "--max-udp-payload"),
        (&["--socket-recv-buffer", "1000"], "--socket-recv-buffer"),
        (&["--socket-recv-buffer", "2G"], "--socket-recv-buffer"),
        // The old names still work, and are answered in the new.
        (&["--max-mtu", "1199"], "--max-udp-payload"),
        (&["--recv-buffer", "2G"], "--socket-recv-buffer"),
        (&["--ack-every", "0"], "--ack-every"),
        (&["--ack-every", "1001"], "--ack-every"),
    ];
    let server_only: &[(&[&str], &str)] = &[
        (&["--alpn", "hq-interop,h2"], "--alpn"),
        (&["--h3-service"], "--h3-service"),
        (&["--max-connections", "0"], "--max-connections"),
        (&["--stats", "--stats-interval", "0"], "--stats-interval"),
        (&["--stats", "--stats-interval", "-1"], "--stats-interval"),
        (&["--stats", "--stats-interval", "NaN"], "--stats-interval"),
        (&["--stats-interval", "1"], "--stats-interval"),
        (&["--handshake-timeout", "11"], "--handshake-timeout"),
        (&["--handshake-timeout", "0"], "--handshake-timeout"),
        (&["--max-half-open", "0"], "--max-half-open"),
        (&["--window-budget", "1000"], "--window-budget"),
        (&["--recv-budget", "1000"], "--window-budget"),
        (&["--retry-half-open", "0"], "--retry-half-open"),
        (&["--secret-file", short_key], "--secret-file"),
        (&["--secret-file", below_file], "--secret-file"),
        (&["--key-file", below_file], "--secret-file"),
        (&["--workers", "0"], "--workers"),
        (&["--workers", "257"], "--workers"),
        (&["--server-id", "zz"], "--server-id"),
        (&["--server-id", ""], "--server-id"),
        (&["--server-id", "000000000000000000000000"], "--server-id"),
        (&["--cid-lifetime", "0"], "--cid-lifetime"),
        (&["--cid-lifetime", "NaN"], "--cid-lifetime"),
        (&["--drain-timeout", "-1"], "--drain-timeout"),
        (&["--drain-timeout", "601"], "--drain-timeout"),
        (&["--drain-timeout", "inf"], "--drain-timeout"),
    ];
    let client_only: &[(&[&str], &str)] = &[
        (&["--connections", "0"], "--connections"),
        (&["--concurrency", "0"], "--concurrency"),
        (&["--rate", "0"], "--rate"),
        (&["--sockets", "2000"], "--sockets"),
        (&["-n", "0"], "--requests"),
        (&["--requests", "0"], "--requests"),
        (&["-n", "1000001"], "--requests"),
        (&["--download", "1M"], "--download"),
        (&["--alpn", "h3", "--download", "1M"], "--download"),
        (&["--upload", "1M"], "--upload"),
        (
            &["--alpn", "perf", "--upload", "5000000000000000000"],
            "--upload",
        ),
        (&["--alpn", "perf", "--output-dir", "out"], "--output-dir"),
        (&["--output-dir", below_file], "--output-dir"),
        (&["--keep-alive", "10"], "--keep-alive"),
        (&["--keep-alive", "-1"], "--keep-alive"),
        (&["--keep-alive", "0.001"], "--keep-alive"),
    ];
    let server = |args: &[&str]| {
        let mut c = Command::new(SERVER);
        c.args(["--listen", "127.0.0.1:0"]).args(args);
        c
    };
    // Port 9 (discard) on loopback: nothing is sent there unless a check is missing.
    let client = |args: &[&str]| {
        let mut c = Command::new(CLIENT);
        c.args(["https://127.0.0.1:9/1", "--insecure", "--no-progress"])
            .args(args);
        c
    };
    let cases = common
        .iter()
        .chain(server_only)
        .map(|(a, f)| ("neqo-server", server(a), a, f))
        .chain(
            common
                .iter()
                .chain(client_only)
                .map(|(a, f)| ("neqo-client", client(a), a, f)),
        );
    for (name, mut cmd, args, flag) in cases {
        let out = run(&mut cmd, LIMIT).unwrap();
        let what = format!("{name} {args:?}: {}; stderr: {}", out.ending(), out.stderr);
        assert!(!out.killed, "{what}");
        assert!(matches!(out.code, Some(c) if c != 0), "{what}");
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(lines.len(), 1, "{what}");
        assert!(lines[0].starts_with(&format!("{name}: error: ")), "{what}");
        assert!(lines[0].contains(flag), "{what}");
        assert!(!out.stdout.contains("listening"), "{what}");
    }
    assert!(!Path::new(no_dir).exists());
    assert!(file.is_file());
}

/// A refused setting leaves nothing behind: checked values come before the `--json` and
/// `--qlog-dir` checks, and the `--json` check writes nothing.
#[test]
fn refused_settings_create_no_files() {
    let json = tmp("refused.json");
    let qlog = tmp("refused-qlog");
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(&qlog);
    let out = server_run(&[
        "--listen",
        "127.0.0.1:0",
        "--idle-timeout",
        "0",
        "--json",
        json.to_str().unwrap(),
        "--qlog-dir",
        qlog.to_str().unwrap(),
    ]);
    assert!(!out.success() && !out.killed, "{}", out.ending());
    assert!(!json.exists() && !qlog.exists());
    let out = server_run(&[
        "--listen",
        "127.0.0.1:0",
        "--json",
        json.to_str().unwrap(),
        "--max-connections",
        "0",
    ]);
    assert!(!out.success() && !out.killed, "{}", out.ending());
    assert!(!json.exists());
}

/// A `--key-file` others can read, or a symbolic link (here to a good key file), is refused at
/// start with one line saying what to do: whoever knows the secret forges the server's resets
/// and Retry tokens.
#[cfg(unix)]
#[test]
fn unsafe_key_files_are_refused_at_start() {
    let good = tmp("good.key");
    let readable = tmp("readable.key");
    let link = tmp("link.key");
    for p in [&good, &readable, &link] {
        let _ = std::fs::remove_file(p);
    }
    // 32 distinct bytes: a secret of one repeated byte is refused for its contents.
    let secret: Vec<u8> = (0..32u8).collect();
    std::fs::write(&good, &secret).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&readable, &secret).unwrap();
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&good, &link).unwrap();
    for (path, why) in [
        (&readable, "mode 0644 lets other users read it; chmod 600"),
        (&link, "is a symbolic link; give the file itself"),
    ] {
        let path = path.to_str().unwrap();
        let out = server_run(&["--listen", "127.0.0.1:0", "--key-file", path]);
        let what = format!("{path}: {}; stderr: {}", out.ending(), out.stderr);
        assert!(!out.killed, "{what}");
        assert!(matches!(out.code, Some(c) if c != 0), "{what}");
        assert_eq!(
            out.stderr.trim_end(),
            format!("neqo-server: error: --secret-file {path}: {why}"),
            "{what}"
        );
        assert!(!out.stdout.contains("listening"), "{what}");
    }
    // The good file itself is accepted.
    terminate(start_server(&["--key-file", good.to_str().unwrap()]));
}

/// The smallest or largest accepted values work: a server with the largest idle and
/// handshake timeouts (a day: the smallest, a millisecond, would time out a connection that
/// waits its turn on a loaded machine; the unit tests parse it), one connection, one
/// datagram per syscall, a 0.1 s stats interval, a repeated ALPN and a qlog directory it
/// creates serves a client with the largest idle timeout and batch size.
#[test]
fn edge_settings_still_work() {
    let qlog = tmp("edge-qlog");
    let _ = std::fs::remove_dir_all(&qlog);
    let qlog_sub = qlog.join("sub");
    let server = start_server(&[
        "--idle-timeout",
        "86400",
        "--handshake-timeout",
        "86400",
        "--max-connections",
        "1",
        "--batch-size",
        "1",
        "--stats",
        "--stats-interval",
        "0.1",
        "--alpn",
        "hq-interop,hq-interop",
        "--qlog-dir",
        qlog_sub.to_str().unwrap(),
    ]);
    assert!(qlog_sub.is_dir(), "created at start");
    let json = tmp("edge-client.json");
    let max = neqo_udp::MAX_BATCH_SIZE.to_string();
    let out = run(
        Command::new(CLIENT).args([
            &url(&server, "/100000"),
            "--insecure",
            "--no-progress",
            "--idle-timeout",
            "86400",
            "--batch-size",
            &max,
            "-n",
            "1",
            "--connections",
            "1",
            "--json",
            json.to_str().unwrap(),
        ]),
        LIMIT,
    )
    .unwrap();
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(read_json::<ClientReport>(&json).bytes_received, 100_000);
    drop(server);
    let qlogs = std::fs::read_dir(&qlog_sub).unwrap().count();
    assert!(qlogs >= 1, "the server wrote its qlog");
}

/// The server writes TLS secrets only with `--keylog`: `SSLKEYLOGFILE` in its environment
/// alone writes nothing, with the flag the file gets the handshake's secrets, and the flag
/// without the variable is refused at start.
#[cfg(unix)]
#[test]
fn the_server_logs_tls_secrets_only_with_keylog() {
    let log = tmp("server-keys.log");
    for keylog in [false, true] {
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(SERVER);
        cmd.args(["--listen", "127.0.0.1:0"])
            .env("SSLKEYLOGFILE", &log);
        if keylog {
            cmd.arg("--keylog");
        }
        let server = Server::start(&mut cmd, LIMIT).expect("server starts");
        let out = run(
            Command::new(CLIENT)
                .args(["--no-progress", "--idle-timeout", "120", "--insecure"])
                .arg(url(&server, "/10"))
                .env_remove("SSLKEYLOGFILE"),
            LIMIT,
        )
        .unwrap();
        assert!(out.success(), "{}", out.stderr);
        let _ = terminate(server);
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            written.contains("CLIENT_HANDSHAKE_TRAFFIC_SECRET"),
            keylog,
            "--keylog {keylog}: {written:?}"
        );
    }
    let refused = run(
        Command::new(SERVER)
            .args(["--listen", "127.0.0.1:0", "--keylog"])
            .env_remove("SSLKEYLOGFILE"),
        LIMIT,
    )
    .unwrap();
    assert!(!refused.success());
    assert!(
        refused
            .stderr
            .contains("--keylog: SSLKEYLOGFILE is not set"),
        "{}",
        refused.stderr
    );
}
