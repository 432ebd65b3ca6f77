//! `neqo-server` and `neqo-client` as real processes over loopback: transfers, JSON reports,
//! clean shutdown and the command-line errors.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");

/// A server process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(args: &[&str]) -> Self {
        Self::try_start(args)
            .unwrap_or_else(|(line, stderr)| panic!("server did not start: {line:?} {stderr}"))
    }

    fn try_start(args: &[&str]) -> Result<Self, (String, String)> {
        let mut child = Command::new(SERVER)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        match line.trim().strip_prefix("neqo-server listening on ") {
            Some(addr) => Ok(Self {
                addr: addr.split(", ").next().unwrap().to_owned(),
                child,
            }),
            None => {
                let out = child.wait_with_output().unwrap();
                Err((line, String::from_utf8_lossy(&out.stderr).into_owned()))
            }
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    fn terminate(mut self) -> Output {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(i32::try_from(self.child.id()).unwrap(), libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "server ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
        let child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        child.wait_with_output().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(args: &[&str]) -> Output {
    Command::new(CLIENT)
        .args(["--no-progress", "--idle-timeout", "5"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
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

#[test]
fn download_with_json_reports_and_clean_shutdown() {
    let server_json = tmp("server.json");
    let server = Server::start(&["--stats", "--json", server_json.to_str().unwrap()]);
    let json = tmp("client.json");
    let out = client(&[
        &server.url("/10000000"),
        "--insecure",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
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
        &server.url("/1000000"),
        "--insecure",
        "--pacing-timer",
        "tokio",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v = read_json(&json);
    assert_eq!(v["driver"]["pacing_timer"], "tokio", "{v}");
    assert_eq!(v["bytes_received"], 1_000_000);
    let out = client(&[&server.url("/1"), "--insecure", "--pacing-timer", "hpet"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--pacing-timer"), "{}", stderr(&out));

    let out = server.terminate();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("exit stats"), "{}", stderr(&out));
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
    let mut child = Command::new(SERVER)
        .args(["--listen", "[::1]:0", "--io", "single", "--no-pacing"])
        .args([
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
    let server = Server {
        addr: line
            .trim()
            .strip_prefix("neqo-server listening on ")
            .expect("listening")
            .to_owned(),
        child,
    };
    assert!(server.addr.starts_with("[::1]"), "{}", server.addr);
    let out = client(&[
        &server.url("/"),
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
    assert!(out.status.success(), "{}", stderr(&out));
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
        assert!(!out.status.success());
        assert!(stderr(&out).contains("bad URL"), "{u}: {}", stderr(&out));
    }
}

#[test]
fn port_in_use_fails() {
    let first = Server::start(&[]);
    let out = Command::new(SERVER)
        .args(["--listen", &first.addr])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&first.addr), "{}", stderr(&out));
    assert!(
        stderr(&out).to_lowercase().contains("in use"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn missing_cert_or_root_fails() {
    let out = Command::new(SERVER)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--cert",
            "/nonexistent/cert.pem",
            "--key",
            "/nonexistent/key.pem",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("/nonexistent/cert.pem"),
        "{}",
        stderr(&out)
    );
    let out = Command::new(SERVER)
        .args(["--listen", "127.0.0.1:0", "--root", "/nonexistent/root"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--root"), "{}", stderr(&out));
}

#[test]
fn untrusted_certificate_and_wrong_alpn_fail() {
    let server = Server::start(&["--alpn", "hq-interop"]);
    let out = client(&[&server.url("/10")]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--insecure"), "{}", stderr(&out));
    let out = client(&[
        &server.url("/"),
        "--insecure",
        "--alpn",
        "perf",
        "--download",
        "10",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("ALPN"), "{}", stderr(&out));
    let out = client(&[&server.url("/"), "--insecure", "--alpn", "h3"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("ALPN"), "{}", stderr(&out));
}

#[test]
fn refused_path_fails_the_client_and_the_server_goes_on() {
    let server = Server::start(&["--root", std::env::temp_dir().to_str().unwrap()]);
    let out = client(&[&server.url("//etc/passwd"), "--insecure"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("reset"), "{}", stderr(&out));
    let out = client(&[
        &server.url("/1000"),
        &server.url("/2000"),
        "--insecure",
        "-n",
        "3",
        "--parallel",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = server.terminate();
    assert!(stderr(&out).contains("refusing"), "{}", stderr(&out));
}

#[test]
fn sslkeylogfile_is_honoured() {
    let server = Server::start(&[]);
    let keylog = tmp("keys.log");
    let _ = std::fs::remove_file(&keylog);
    let out = Command::new(CLIENT)
        .args([&server.url("/100"), "--insecure", "--no-progress"])
        .env("SSLKEYLOGFILE", &keylog)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&keylog).unwrap();
    assert!(text.contains("CLIENT_HANDSHAKE_TRAFFIC_SECRET"), "{text}");
}
