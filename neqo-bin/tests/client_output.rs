//! `neqo-client` as people expect a client to behave: one request's body on stdout (as curl),
//! `-o FILE` / `-o -`, `--quiet`, a one-line summary on stderr, no colour escapes off a
//! terminal or with `NO_COLOR`, `--version` on every binary. Real processes over loopback.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use test_fixtures::Server;

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");
const LOOPBACK: &str = env!("CARGO_BIN_EXE_neqo-loopback");

/// How long a server may take to say where it listens, and a command to finish.
const LIMIT: Duration = Duration::from_secs(60);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neqo-bin-output-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A server on `root` with idle and handshake timeouts a loaded machine never reaches,
/// killed when dropped.
fn server(root: &Path) -> Server {
    Server::start(
        Command::new(SERVER).args([
            "--listen",
            "127.0.0.1:0",
            "--root",
            root.to_str().unwrap(),
            "--generate",
            "--idle-timeout",
            "120",
            "--handshake-timeout",
            "120",
        ]),
        LIMIT,
    )
    .unwrap_or_else(|e| panic!("server did not start: {e}"))
}

/// What a finished command left: its exit code, stdout (bytes) and stderr.
struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `cmd` with stdout and stderr into files of `dir` (a body may be large, a log long),
/// killed past [`LIMIT`].
fn run(cmd: &mut Command, dir: &Path) -> Ran {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("{cmd:?} did not end in {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code: status.code(),
        stdout: std::fs::read(out).unwrap(),
        stderr: std::fs::read_to_string(err).unwrap(),
    }
}

fn client(dir: &Path, args: &[&str]) -> Ran {
    run(
        Command::new(CLIENT)
            // As the server's: a loaded machine never reaches it.
            .args(["--insecure", "--idle-timeout", "120"])
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR"),
        dir,
    )
}

/// `n` bytes no two runs of which repeat soon: a misplaced chunk shows.
fn content(n: u32) -> Vec<u8> {
    (0..n)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// The body of the generated `/n`.
fn generated(n: u32) -> Vec<u8> {
    (0..n).map(|k| (k % 256) as u8).collect()
}

/// The one summary line, for `requests` requests of which `failed` failed, `bytes` received.
fn assert_summary(stderr: &str, requests: &str, failed: u64, bytes: u64) {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr:?}");
    let l = lines[0];
    assert!(
        l.starts_with(&format!(
            "neqo-client: {requests} ({failed} failed) on 1 connection: received {bytes} B in "
        )),
        "{l}"
    );
    assert!(l.ends_with("bit/s"), "{l}");
}

#[test]
fn one_request_writes_its_body_to_stdout_and_one_summary_line_to_stderr() {
    let dir = scratch("stdout");
    let body = content(300_007);
    std::fs::write(dir.join("page.bin"), &body).unwrap();
    let s = server(&dir);
    let out = client(&dir, &[&format!("https://{}/page.bin", s.addr())]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout == body, "the body byte-exact on stdout");
    assert_summary(&out.stderr, "1 request", 0, 300_007);

    // --quiet: the body and nothing else.
    let out = client(
        &dir,
        &[&format!("https://{}/page.bin", s.addr()), "--quiet"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout == body);
    assert_eq!(out.stderr, "", "quiet");

    // Quiet still says what went wrong.
    let out = client(&dir, &[&format!("https://{}/missing", s.addr()), "-q"]);
    assert_ne!(out.code, Some(0));
    assert!(out.stdout.is_empty());
    assert!(
        out.stderr.contains("neqo-client: error: /missing"),
        "{}",
        out.stderr
    );
}

#[test]
fn several_requests_write_no_body_to_stdout_and_the_summary_counts_them() {
    let dir = scratch("several");
    std::fs::write(dir.join("a"), content(1000)).unwrap();
    let s = server(&dir);
    let u = format!("https://{}/a", s.addr());
    let out = client(&dir, &[&u, &u]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "no bodies interleaved on stdout");
    assert_summary(&out.stderr, "2 requests", 0, 2000);
    let out = client(&dir, &[&u, "-n", "3"]);
    assert!(out.stdout.is_empty());
    assert_summary(&out.stderr, "3 requests", 0, 3000);
}

/// A generated `/N` body is checked, not shown, unless `-o` asks for it; `-o FILE` writes it
/// there and nothing to stdout.
#[test]
fn dash_o_writes_a_file_or_stdout_and_a_generated_body_is_shown_only_when_asked() {
    let dir = scratch("dash-o");
    let s = server(&dir);
    let u = format!("https://{}/5000", s.addr());
    let out = client(&dir, &[&u]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.is_empty());
    assert_summary(&out.stderr, "1 request", 0, 5000);

    let out = client(&dir, &[&u, "-o", "-"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout == generated(5000), "-o -: stdout");

    let file = dir.join("saved");
    let out = client(&dir, &[&u, "-o", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.is_empty());
    assert_eq!(std::fs::read(&file).unwrap(), generated(5000));
    // Again: truncated and rewritten, not appended.
    let out = client(
        &dir,
        &[
            &format!("https://{}/100", s.addr()),
            "--output",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read(&file).unwrap(), generated(100));
}

#[test]
fn output_settings_that_cannot_work_are_refused_at_start() {
    let dir = scratch("refused");
    let file = dir.join("never");
    let f = file.to_str().unwrap();
    // Nothing listens there: a refusal must come before any connection is tried.
    let u = "https://127.0.0.1:9/1000";
    let missing = dir.join("no/such/dir/file");
    for (args, says) in [
        (vec![u, "-o", f, "-n", "2"], "one request in all, not 2"),
        (vec![u, u, "-o", f], "one request in all, not 2"),
        (
            vec![u, "-o", f, "--connections", "3"],
            "one request in all, not 3",
        ),
        (vec![u, "-o", f, "--alpn", "perf"], "not with --alpn perf"),
        (vec![u, "-o", missing.to_str().unwrap()], "no directory"),
        (vec![u, "-o", dir.to_str().unwrap()], "a directory"),
        (
            vec![u, "-o", f, "--output-dir", dir.to_str().unwrap()],
            "cannot be used with",
        ),
    ] {
        let out = client(&dir, &args);
        // clap's usage errors exit 2, the client's own refusals 1.
        let code = if says == "cannot be used with" { 2 } else { 1 };
        assert_eq!(out.code, Some(code), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty());
        assert!(!file.exists(), "{args:?} made no file");
    }
}

/// Log lines carry colour escapes only on a terminal, and not with `NO_COLOR` set. The
/// terminal is a pseudo-terminal `script` (util-linux) makes.
#[cfg(target_os = "linux")]
#[test]
fn no_colour_escapes_off_a_terminal_or_with_no_color() {
    const ESC: &str = "\x1b[";
    let dir = scratch("colour");
    let s = server(&dir);
    let u = format!("https://{}/1000", s.addr());
    // Off a terminal (a file), with plenty to log.
    let out = run(
        Command::new(CLIENT)
            .args([&u, "--insecure"])
            .env("RUST_LOG", "debug")
            .env_remove("NO_COLOR"),
        &dir,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.lines().count() > 5, "it logged: {}", out.stderr);
    assert!(!out.stderr.contains(ESC), "{}", out.stderr);

    // On a terminal: in colour, unless NO_COLOR says not.
    let on_a_terminal = |no_color: Option<&str>| {
        let mut cmd = Command::new("script");
        cmd.args(["--quiet", "--return", "--command"])
            .arg(format!("{CLIENT} {u} --insecure --no-progress"))
            .arg("/dev/null")
            .env("RUST_LOG", "debug")
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = run(&mut cmd, &dir);
        assert_eq!(out.code, Some(0), "script: {}", out.stderr);
        // The terminal's output (the client's stderr among it) reaches script's stdout.
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(on_a_terminal(None).contains(ESC), "colour on a terminal");
    assert!(!on_a_terminal(Some("1")).contains(ESC), "NO_COLOR=1");
    assert!(
        on_a_terminal(Some("")).contains(ESC),
        "an empty NO_COLOR does not count"
    );
}

#[test]
fn every_binary_says_its_version() {
    let dir = scratch("version");
    for (bin, name) in [
        (SERVER, "neqo-server"),
        (CLIENT, "neqo-client"),
        (LOOPBACK, "neqo-loopback"),
    ] {
        let out = run(Command::new(bin).arg("--version"), &dir);
        assert_eq!(out.code, Some(0), "{name}: {}", out.stderr);
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}
