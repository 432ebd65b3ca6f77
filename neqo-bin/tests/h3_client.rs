//! `neqo-client --alpn h3` against `neqo-server --alpn h3`: generated bodies verified byte by
//! byte over several connections, one after another and in parallel; a file saved with `-o`
//! and one request's body on stdout, byte-exact; a missing file fails the run with its
//! status. Real processes over loopback.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use test_fixtures::Server;

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");
const LIMIT: Duration = Duration::from_secs(60);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neqo-h3-client-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn server(root: &Path) -> Server {
    Server::start(
        Command::new(SERVER)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--alpn",
                "h3,hq-interop",
                "--root",
            ])
            .arg(root),
        LIMIT,
    )
    .unwrap_or_else(|e| panic!("server did not start: {e}"))
}

/// Runs the client with `args`; returns (success, stdout, stderr).
fn client(args: &[&str]) -> (bool, Vec<u8>, String) {
    let out = Command::new(CLIENT)
        .args(["--insecure", "--no-progress", "--alpn", "h3"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn generated_bodies_over_several_connections_in_turn_and_in_parallel() {
    let dir = scratch("generated");
    let s = server(&dir);
    let url = format!("https://{}/1000000", s.addr());
    for parallel in [false, true] {
        let json = dir.join(format!("client-{parallel}.json"));
        let mut args = vec![
            url.as_str(),
            "-n",
            "3",
            "--connections",
            "2",
            "--json",
            json.to_str().unwrap(),
        ];
        if parallel {
            args.push("--parallel");
        }
        let (ok, _, err) = client(&args);
        assert!(ok, "{err}");
        let r = report(&json);
        assert_eq!(r["requests"], 6, "{r}");
        assert_eq!(r["failed_requests"], 0, "{r}");
        assert_eq!(r["bytes_received"], 6_000_000, "{r}");
        assert_eq!(r["connections"], 2, "{r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_is_saved_and_one_body_goes_to_stdout() {
    let dir = scratch("files");
    let body: Vec<u8> = (0..200_003u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(dir.join("data.bin"), &body).unwrap();
    let s = server(&dir);
    let url = format!("https://{}/data.bin", s.addr());
    let saved = dir.join("saved.bin");
    let (ok, out, err) = client(&[&url, "-o", saved.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.is_empty());
    assert_eq!(std::fs::read(&saved).unwrap(), body);
    let (ok, out, err) = client(&[&url, "--quiet"]);
    assert!(ok, "{err}");
    assert_eq!(out, body, "the body on stdout, as curl");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_fails_the_run_with_its_status() {
    let dir = scratch("missing");
    let s = server(&dir);
    let (ok, out, err) = client(&[&format!("https://{}/nothing.html", s.addr())]);
    assert!(!ok, "{err}");
    assert!(out.is_empty());
    assert!(err.contains("/nothing.html: status 404"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
