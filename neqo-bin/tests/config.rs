//! Settings from a config file (`--config`), environment variables (`NEQO_SERVER_*`,
//! `NEQO_CLIENT_*`) and flags, in that order of precedence, for both binaries as real
//! processes over loopback; each kind of bad file refused at start, naming the file, the
//! line and the key, and each kind of file that is no config (a device, a FIFO, a huge one)
//! refused at once; lists in variables; `--check-config`.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

#[cfg(unix)]
use test_fixtures::Server;
use test_fixtures::{Measured, run};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
#[cfg(unix)]
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");

/// How long a server may take to say where it listens, and a command to finish.
const LIMIT: Duration = Duration::from_secs(60);

/// A new directory for one test.
fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neqo-config-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `neqo-server` with `args` and the variables `env` (and no other `NEQO_SERVER_*`).
fn server(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(SERVER);
    c.args(args).envs(env.iter().copied());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NEQO_SERVER_") && !env.iter().any(|(e, _)| k == *e) {
            c.env_remove(k);
        }
    }
    c
}

#[cfg(unix)]
fn start(cmd: &mut Command) -> Server {
    Server::start(cmd, LIMIT).unwrap_or_else(|e| panic!("server did not start: {e}"))
}

fn refused(cmd: &mut Command) -> String {
    refused_with(cmd).1
}

/// A refusal's exit code and stderr: not killed at the hang guard, nothing bound.
fn refused_with(cmd: &mut Command) -> (Option<i32>, String) {
    let out: Measured = run(cmd, LIMIT).unwrap();
    assert!(!out.killed, "hung: {}", out.stderr);
    assert!(!out.success(), "started: {}", out.stdout);
    assert!(
        !out.stdout.contains("listening"),
        "bound before refusing: {}",
        out.stdout
    );
    (out.code, out.stderr.trim_end().to_owned())
}

/// `neqo-client` with `args` and the variables `env` (and no other `NEQO_CLIENT_*`).
#[cfg(unix)]
fn client(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_neqo-client"));
    c.args(args).envs(env.iter().copied());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("NEQO_CLIENT_") && !env.iter().any(|(e, _)| k == *e) {
            c.env_remove(k);
        }
    }
    c
}

/// A client fetch of `/N` from `server` with `args`; its output.
#[cfg(unix)]
fn fetch(server: &Server, path: &str, args: &[&str], env: &[(&str, &str)]) -> Measured {
    let mut c = Command::new(CLIENT);
    c.arg(format!("https://{}{path}", server.addr()))
        .args(["--no-progress", "--idle-timeout", "60"])
        .args(args)
        .envs(env.iter().copied());
    run(&mut c, LIMIT).unwrap()
}

/// A server set up by its file alone serves what the file says: its root, byte-exact (and no
/// generated body), and the ALPNs it lists (here only `hq-interop`, so `perf` is refused).
#[cfg(unix)]
#[test]
fn a_server_runs_from_its_config_file() {
    let d = dir("file");
    let root = d.join("www");
    std::fs::create_dir(&root).unwrap();
    let body: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("page.bin"), &body).unwrap();
    let cfg = write(
        &d.join("server.toml"),
        &format!(
            "# neqo-server\nlisten = \"127.0.0.1:0\"\nroot = {root:?}\nalpn = [\"hq-interop\"]\n\
             workers = 1\n",
            root = root.to_str().unwrap()
        ),
    );
    let s = start(&mut server(&["--config", &cfg], &[]));
    let out_file = d.join("got.bin");
    let out = fetch(
        &s,
        "/page.bin",
        &["--insecure", "-o", out_file.to_str().unwrap()],
        &[],
    );
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(std::fs::read(&out_file).unwrap(), body);
    // A file server generates no `/N` body without `generate = true`.
    let out = fetch(&s, "/1000", &["--insecure"], &[]);
    assert!(
        !out.success() && out.stderr.contains("refused"),
        "{}",
        out.stderr
    );
    let out = fetch(&s, "/", &["--insecure", "--alpn", "perf"], &[]);
    assert!(!out.success(), "perf was not offered: {}", out.stderr);
    let stopped = s.stop().unwrap();
    assert!(!stopped.killed);
    let _ = std::fs::remove_dir_all(&d);
}

/// The same settings given as a file, as variables and as flags make the same server: the
/// same root served byte-exact, `/N` generated (`generate`), only `hq-interop` offered.
#[cfg(unix)]
#[test]
fn a_file_variables_and_flags_make_the_same_server() {
    let d = dir("three-ways");
    let root = d.join("www");
    std::fs::create_dir(&root).unwrap();
    let body: Vec<u8> = (0..50_001u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(root.join("f.bin"), &body).unwrap();
    let root = root.to_str().unwrap();
    let cfg = write(
        &d.join("s.toml"),
        &format!(
            "listen = \"127.0.0.1:0\"\nroot = {root:?}\ngenerate = true\nalpn = \
             [\"hq-interop\"]\nworkers = 1\n"
        ),
    );
    let env = [
        ("NEQO_SERVER_LISTEN", "127.0.0.1:0"),
        ("NEQO_SERVER_ROOT", root),
        ("NEQO_SERVER_GENERATE", "true"),
        ("NEQO_SERVER_ALPN", "hq-interop"),
        ("NEQO_SERVER_WORKERS", "1"),
    ];
    let flags = [
        "--listen",
        "127.0.0.1:0",
        "--root",
        root,
        "--generate",
        "--alpn",
        "hq-interop",
        "--workers",
        "1",
    ];
    for (how, mut cmd) in [
        ("file", server(&["--config", &cfg], &[])),
        ("variables", server(&[], &env)),
        ("flags", server(&flags, &[])),
    ] {
        let s = start(&mut cmd);
        let out_file = d.join(format!("{how}.bin"));
        let out = fetch(
            &s,
            "/f.bin",
            &["--insecure", "-o", out_file.to_str().unwrap()],
            &[],
        );
        assert!(out.success(), "{how}: {}", out.stderr);
        assert_eq!(std::fs::read(&out_file).unwrap(), body, "{how}");
        let out = fetch(&s, "/70000", &["--insecure"], &[]);
        assert!(out.success(), "{how}: generated: {}", out.stderr);
        let out = fetch(&s, "/", &["--insecure", "--alpn", "perf"], &[]);
        assert!(!out.success(), "{how}: perf offered");
        s.stop().unwrap();
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// The example configuration in deploy/ names only real settings with values of their
/// kinds: a server starts from it once the flags move what needs the host (port 443, the
/// certificate files, the state and web directories) to this test's own.
#[cfg(unix)]
#[test]
fn the_deploy_example_configuration_is_valid() {
    let d = dir("deploy");
    let root = d.join("www");
    std::fs::create_dir(&root).unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = write(&d.join("cert.pem"), &ck.cert.pem());
    let key = write(&d.join("key.pem"), &ck.signing_key.serialize_pem());
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/server.toml");
    let text = std::fs::read_to_string(example).unwrap();
    for key in [
        "listen",
        "root",
        "alpn",
        "tls-cert",
        "tls-key",
        "secret-file",
        "metrics",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{key} = "))),
            "{key} in the example"
        );
    }
    let s = start(&mut server(
        &[
            "--config",
            example,
            "--listen",
            "127.0.0.1:0",
            "--root",
            root.to_str().unwrap(),
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--secret-file",
            d.join("secret").to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
        ],
        &[],
    ));
    s.stop().unwrap();
    // A key the file names wrongly would have been refused before the flags were looked at.
    let bad = write(
        &d.join("bad.toml"),
        &text.replace("secret-file", "secret-fille"),
    );
    let e = refused(&mut server(
        &["--config", &bad, "--listen", "127.0.0.1:0"],
        &[],
    ));
    assert!(e.contains("unknown key `secret-fille`"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Flags over variables over the file: a bad worker count in a weaker place is never read
/// when a stronger one gives a good count, and is refused, named by where it came from, when
/// nothing overrides it.
#[cfg(unix)]
#[test]
fn flags_override_variables_which_override_the_file() {
    let d = dir("precedence");
    let cfg = write(
        &d.join("s.toml"),
        "listen = \"127.0.0.1:0\"\n\nworkers = 0\n",
    );
    let bad_env = [("NEQO_SERVER_WORKERS", "0")];
    let good_env = [("NEQO_SERVER_WORKERS", "1")];
    // The variable over the file.
    start(&mut server(&["--config", &cfg], &good_env))
        .stop()
        .unwrap();
    // The flag over both.
    start(&mut server(&["--config", &cfg, "--workers", "1"], &bad_env))
        .stop()
        .unwrap();
    // Each alone, named.
    assert_eq!(
        refused(&mut server(&["--config", &cfg], &[])),
        format!(
            "neqo-server: error: {cfg}:3: --workers 0: must be between 1 and 256 (one \
             connection-ID byte tells them apart)"
        )
    );
    assert_eq!(
        refused(&mut server(&["--config", &cfg], &bad_env)),
        "neqo-server: error: NEQO_SERVER_WORKERS: --workers 0: must be between 1 and 256 (one \
         connection-ID byte tells them apart)"
    );
    // The file named by a variable, and a switch set by one.
    let s = start(&mut server(
        &[],
        &[("NEQO_SERVER_CONFIG", &cfg), ("NEQO_SERVER_WORKERS", "1")],
    ));
    s.stop().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// Every kind of bad file is refused before anything binds, with the file, the line and the
/// key (or TOML's own position for a file that is not TOML).
#[test]
fn bad_files_are_refused_with_file_line_and_key() {
    let d = dir("bad");
    for (name, text, want) in [
        (
            "unknown",
            "listen = \"127.0.0.1:0\"\nworkrs = 2\n",
            ":2: unknown key `workrs`; the keys are the long flag names (see neqo-server --help)",
        ),
        (
            "type",
            "\n\nworkers = \"two\"\n",
            ":3: `workers` = \"two\": invalid value 'two' for '--workers <value>': invalid digit \
             found in string",
        ),
        (
            "choice",
            "retry = \"sometimes\"\n",
            ":1: `retry` = \"sometimes\": invalid value 'sometimes' for '--retry <value>'; \
             [possible values: auto, always, never]",
        ),
        (
            "switch",
            "keylog = \"yes\"\n",
            ":1: `keylog` is a switch: true or false",
        ),
        (
            "list",
            "workers = [1, 2]\n",
            ":1: `workers` takes one value, not a list",
        ),
        (
            "table",
            "[listen]\nport = 1\n",
            ":1: `listen`: a string, number or boolean",
        ),
        (
            "old name",
            "listen = \"127.0.0.1:0\"\nmax-mtu = 1000\n",
            ":2: --max-udp-payload 1000: must be between 1200 (what every QUIC path carries) \
             and 65527 bytes",
        ),
        (
            "help",
            "help = true\n",
            ":1: unknown key `help`; the keys are the long flag names (see neqo-server --help)",
        ),
        (
            "action",
            "check-config = true\n",
            ":1: unknown key `check-config`; the keys are the long flag names (see neqo-server \
             --help)",
        ),
    ] {
        let path = write(&d.join(format!("{name}.toml")), text);
        let e = refused(&mut server(&["--config", &path], &[]));
        assert_eq!(e, format!("neqo-server: error: {path}{want}"), "{name}");
    }
    let path = write(&d.join("syntax.toml"), "listen = [\n");
    let e = refused(&mut server(&["--config", &path], &[]));
    assert!(
        e.starts_with(&format!(
            "neqo-server: error: {path}: TOML parse error at line 1, column 11"
        )),
        "{e}"
    );
    let missing = d.join("missing.toml");
    let e = refused(&mut server(&["--config", missing.to_str().unwrap()], &[]));
    assert!(
        e.starts_with(&format!(
            "neqo-server: error: --config {}: cannot read it: ",
            missing.display()
        )),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// The client takes its settings the same way: `insecure` from a file or a variable lets it
/// fetch from a server with a self-signed certificate, which it refuses without.
#[cfg(unix)]
#[test]
fn a_client_takes_a_file_and_variables() {
    let d = dir("client");
    let s = start(&mut server(
        &["--listen", "127.0.0.1:0", "--workers", "1"],
        &[],
    ));
    let out = fetch(&s, "/1000", &[], &[]);
    assert!(!out.success(), "a self-signed certificate was trusted");
    let cfg = write(&d.join("c.toml"), "insecure = true\nrequests = 3\n");
    let json = d.join("c.json");
    let out = fetch(
        &s,
        "/1000",
        &["--config", &cfg, "--json", json.to_str().unwrap()],
        &[],
    );
    assert!(out.success(), "{}", out.stderr);
    let report = <neqo_report::ClientReport as neqo_report::Report>::read(&json).unwrap();
    assert_eq!((report.requests, report.bytes_received), (3, 3000));
    let out = fetch(&s, "/1000", &[], &[("NEQO_CLIENT_INSECURE", "true")]);
    assert!(out.success(), "{}", out.stderr);
    let bad = write(&d.join("bad.toml"), "insecure = true\nrequests = 0\n");
    let out = fetch(&s, "/1000", &["--config", &bad], &[]);
    assert!(!out.success());
    assert!(
        out.stderr.contains(&format!("{bad}:2: -n/--requests 0")),
        "{}",
        out.stderr
    );
    s.stop().unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// `-v` sets the log level whatever `RUST_LOG` says (a flag over a variable), up or down;
/// without it `RUST_LOG` rules. (Neither binary logs at `info` on a clean fetch, so debug
/// lines tell the levels apart.)
#[cfg(unix)]
#[test]
fn verbose_flags_set_the_log_level_over_rust_log() {
    let s = start(&mut server(
        &["--listen", "127.0.0.1:0", "--workers", "1"],
        &[],
    ));
    let debug_lines = |flags: &[&str], rust_log: &str| {
        let out = fetch(
            &s,
            "/1000",
            &[&["--insecure"], flags].concat(),
            &[("RUST_LOG", rust_log)],
        );
        assert!(out.success(), "{}", out.stderr);
        out.stderr.lines().filter(|l| l.contains(" DEBUG ")).count()
    };
    assert_eq!(debug_lines(&[], "error"), 0);
    assert!(
        debug_lines(&["-vv"], "error") > 0,
        "-vv over RUST_LOG=error"
    );
    assert!(debug_lines(&[], "debug") > 0, "RUST_LOG=debug");
    assert_eq!(debug_lines(&["-v"], "debug"), 0, "-v over RUST_LOG=debug");
    s.stop().unwrap();
}

/// Makes a FIFO at `path` (the `mkfifo` command: no unsafe code here).
#[cfg(unix)]
fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Every kind of file that is no config, or that others could change, is refused at once by
/// both binaries, the file named and what is wrong with it said: nothing is read from a device
/// (`/dev/zero` would fill the memory) or a FIFO (one with no writer would hang the start),
/// nothing past 1 MiB, no text that is not UTF-8, no loop of links, no nesting deeper than the
/// TOML parser's bound (an error, not a stack overflow), no file every user may write or (as
/// root, who can give one away) one of another user's. A link to a good file is followed.
#[cfg(unix)]
#[test]
fn files_that_are_no_config_are_refused_by_both_binaries() {
    use std::os::unix::fs::{PermissionsExt as _, chown, symlink};

    let d = dir("no-config");
    let at = |name: &str| d.join(name).to_str().unwrap().to_owned();
    let huge = write(&d.join("huge.toml"), &"# a comment\n".repeat(100_000));
    let fifo = at("fifo.toml");
    mkfifo(Path::new(&fifo));
    let directory = at("a-directory");
    std::fs::create_dir(&directory).unwrap();
    let (loop_a, loop_b) = (at("loop-a"), at("loop-b"));
    symlink(&loop_b, &loop_a).unwrap();
    symlink(&loop_a, &loop_b).unwrap();
    let latin1 = at("latin1.toml");
    std::fs::write(&latin1, b"workers = 1\nroot = \"caf\xe9\"\n").unwrap();
    let everyone = write(&d.join("everyone.toml"), "workers = 1\n");
    std::fs::set_permissions(&everyone, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut cases = vec![
        (
            huge.as_str(),
            "1200000 bytes; a config file holds at most 1048576 (1 MiB)",
        ),
        ("/dev/zero", "a character device, not a regular file"),
        (&fifo, "a FIFO (named pipe), not a regular file"),
        (&directory, "a directory, not a regular file"),
        (&loop_a, "cannot read it: symbolic links in a loop"),
        (
            &latin1,
            "not UTF-8: a byte that is no character at line 2, column 12 (byte 23); a config \
             file is UTF-8 text",
        ),
        (&everyone, "writable by every user (mode 0666)"),
    ];
    let theirs = write(&d.join("theirs.toml"), "workers = 1\n");
    if chown(&theirs, Some(4242), None).is_ok() {
        cases.push((
            &theirs,
            "owned by user 4242, neither this user (0) nor root",
        ));
    } else {
        eprintln!("not root: a file of another user's cannot be made to try the owner rule");
    }
    for (file, want) in &cases {
        let want = format!("--config {file}: {want}");
        let (code, e) = refused_with(&mut server(&["--config", file], &[]));
        assert_eq!(code, Some(1), "{e}");
        assert!(e.starts_with(&format!("neqo-server: error: {want}")), "{e}");
        let (code, e) = refused_with(&mut client(
            &["--config", file, "https://127.0.0.1:9/1"],
            &[],
        ));
        assert_eq!(code, Some(1), "{e}");
        assert!(e.starts_with(&format!("neqo-client: error: {want}")), "{e}");
    }
    // A file named by a variable: the variable named too.
    let (_, e) = refused_with(&mut server(&[], &[("NEQO_SERVER_CONFIG", "/dev/zero")]));
    assert!(
        e.starts_with(
            "neqo-server: error: NEQO_SERVER_CONFIG: --config /dev/zero: a character device"
        ),
        "{e}"
    );
    let (_, e) = refused_with(&mut client(
        &["https://127.0.0.1:9/1"],
        &[("NEQO_CLIENT_CONFIG", &fifo)],
    ));
    assert!(
        e.starts_with(&format!(
            "neqo-client: error: NEQO_CLIENT_CONFIG: --config {fifo}: a FIFO"
        )),
        "{e}"
    );
    // A megabyte of `[`: the parser's depth bound, said in one short line (not the line quoted).
    let deep = write(
        &d.join("deep.toml"),
        &format!("a = {}\n", "[".repeat((1 << 20) - 5)),
    );
    for (what, mut cmd) in [
        ("server", server(&["--config", &deep], &[])),
        (
            "client",
            client(&["--config", &deep, "https://127.0.0.1:9/1"], &[]),
        ),
    ] {
        let (code, e) = refused_with(&mut cmd);
        assert_eq!(code, Some(1), "{what}: {e}");
        assert!(
            e.contains(&format!("{deep}: TOML parse error at line 1, column "))
                && e.contains("cannot recurse further")
                && e.len() < 300,
            "{what}: {e}"
        );
    }
    // A link to a good file is followed.
    let good = write(
        &d.join("good.toml"),
        "listen = \"127.0.0.1:0\"\nworkers = 1\n",
    );
    let link = at("link.toml");
    symlink(&good, &link).unwrap();
    start(&mut server(&["--config", &link], &[]))
        .stop()
        .unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// `--check-config` checks what a start checks before it binds, binds and creates nothing,
/// and says in one line that the settings are valid, where they came from and what a start
/// would create (exit 0); or what is wrong, located as a start locates it (exit 1).
#[cfg(unix)]
#[test]
fn check_config_checks_without_binding_or_creating() {
    use std::os::unix::fs::PermissionsExt as _;

    let d = dir("check");
    let root = d.join("www");
    std::fs::create_dir(&root).unwrap();
    let (a, b) = (
        rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap(),
        rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap(),
    );
    let cert = write(&d.join("cert.pem"), &a.cert.pem());
    let key = write(&d.join("key.pem"), &a.signing_key.serialize_pem());
    let other_key = write(&d.join("other.pem"), &b.signing_key.serialize_pem());
    // Held here: a check that bound it would fail.
    let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let cfg = write(
        &d.join("s.toml"),
        &format!(
            "listen = \"{}\"\nroot = {root:?}\ntls-cert = {cert:?}\ntls-key = {key:?}\n",
            held.local_addr().unwrap()
        ),
    );
    let (secret, log, qlog) = (d.join("secret"), d.join("access.log"), d.join("qlog"));
    let (secret_s, log_s) = (secret.to_str().unwrap(), log.to_str().unwrap());
    let qlog_s = qlog.join("run").to_str().unwrap().to_owned();
    let check = |extra: &[&str], env: &[(&str, &str)]| {
        let flags = [
            &[
                "--check-config",
                "--config",
                &cfg,
                "--secret-file",
                secret_s,
                "--access-log",
                log_s,
                "--qlog-dir",
                &qlog_s,
            ][..],
            extra,
        ]
        .concat();
        run(&mut server(&flags, env), LIMIT).unwrap()
    };
    let out = check(&[], &[("NEQO_SERVER_WORKERS", "2")]);
    assert!(out.success(), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "neqo-server: the settings are valid (4 from {cfg}, 1 from variables, 3 from flags, \
             the rest defaults); --qlog-dir {qlog_s} would be created; --access-log {log_s} \
             would be created; --secret-file {secret_s} would be created\n"
        )
    );
    assert!(
        !secret.exists() && !log.exists() && !qlog.exists(),
        "created"
    );
    // The file named by its variable is no setting of its own.
    let out = run(
        &mut server(
            &["--check-config"],
            &[("NEQO_SERVER_CONFIG", &cfg), ("NEQO_SERVER_WORKERS", "2")],
        ),
        LIMIT,
    )
    .unwrap();
    assert_eq!(
        out.stdout,
        format!(
            "neqo-server: the settings are valid (4 from {cfg}, 1 from variables, 0 from flags, \
             the rest defaults)\n"
        ),
        "{}",
        out.stderr
    );

    // Refused as at start, located alike, creating nothing.
    let refused = |extra: &[&str], env: &[(&str, &str)]| {
        let out = check(extra, env);
        assert_eq!(out.code, Some(1), "{extra:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
        assert!(!log.exists() && !qlog.exists(), "created");
        out.stderr.trim_end().to_owned()
    };
    let workers = "--workers 0: must be between 1 and 256 (one connection-ID byte tells them \
                   apart)";
    assert_eq!(
        refused(&[], &[("NEQO_SERVER_WORKERS", "0")]),
        format!("neqo-server: error: NEQO_SERVER_WORKERS: {workers}")
    );
    let zero = write(&d.join("zero.toml"), "\nworkers = 0\n");
    let (code, e) = refused_with(&mut server(&["--check-config", "--config", &zero], &[]));
    assert_eq!(
        (code, e),
        (Some(1), format!("neqo-server: error: {zero}:2: {workers}"))
    );
    let e = refused(&["--root", d.join("none").to_str().unwrap()], &[]);
    assert!(e.starts_with("neqo-server: error: --root "), "{e}");
    assert!(e.contains("cannot serve from it"), "{e}");
    let e = refused(&["--tls-key", &other_key], &[]);
    assert!(
        e.contains(&format!(
            "--tls-cert {cert} --tls-key {other_key}: certificate and key do not fit together"
        )),
        "{e}"
    );
    let e = refused(&["--keylog"], &[]);
    assert!(e.contains("--keylog: SSLKEYLOGFILE is not set"), "{e}");
    let nowhere = d.join("no-such-dir").join("access.log");
    let (_, e) = refused_with(&mut server(
        &[
            "--check-config",
            "--config",
            &cfg,
            "--access-log",
            nowhere.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(
        e.contains(&format!(
            "--access-log {}: no directory {} to write it in",
            nowhere.display(),
            d.join("no-such-dir").display()
        )),
        "{e}"
    );
    let nowhere = d.join("no-such-dir").join("secret");
    let (_, e) = refused_with(&mut server(
        &[
            "--check-config",
            "--config",
            &cfg,
            "--secret-file",
            nowhere.to_str().unwrap(),
        ],
        &[],
    ));
    assert!(
        e.contains(&format!(
            "--secret-file {}: no directory {} to write it in",
            nowhere.display(),
            d.join("no-such-dir").display()
        )),
        "{e}"
    );
    // An existing secret file is read and checked, as at start: one others may read is refused.
    let random: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(97) ^ 0x5a).collect();
    std::fs::write(&secret, &random).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = refused(&[], &[]);
    assert!(
        e.starts_with(&format!("neqo-server: error: --secret-file {secret_s}")),
        "{e}"
    );
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = check(&[], &[]);
    assert!(out.success(), "{}", out.stderr);
    assert!(!out.stdout.contains("--secret-file"), "{}", out.stdout);
    let _ = std::fs::remove_dir_all(&d);
}

/// A repeatable flag's variable holds a comma-separated list: two listen addresses, two
/// certificate pairs. A flag overrides the whole list, and the list overrides the file's; an
/// item that is no value of the flag is refused naming the variable (exit 2, as clap's usage
/// errors).
#[cfg(unix)]
#[test]
fn a_variable_of_a_repeatable_flag_is_a_list() {
    let d = dir("lists");
    let two = [("NEQO_SERVER_LISTEN", "127.0.0.1:0,127.0.0.1:0")];
    let s = start(&mut server(&["--workers", "1"], &two));
    assert_eq!(s.addrs().len(), 2, "{:?}", s.addrs());
    assert_ne!(s.addrs()[0], s.addrs()[1]);
    for addr in s.addrs() {
        let out = run(
            Command::new(CLIENT).args([
                &format!("https://{addr}/1000"),
                "--insecure",
                "--no-progress",
            ]),
            LIMIT,
        )
        .unwrap();
        assert!(out.success(), "{addr}: {}", out.stderr);
    }
    s.stop().unwrap();
    let s = start(&mut server(
        &["--workers", "1", "--listen", "127.0.0.1:0"],
        &two,
    ));
    assert_eq!(s.addrs().len(), 1, "the flag over the variable");
    s.stop().unwrap();
    let three = write(
        &d.join("three.toml"),
        "listen = [\"127.0.0.1:0\", \"127.0.0.1:0\", \"127.0.0.1:0\"]\nworkers = 1\n",
    );
    let s = start(&mut server(&["--config", &three], &two));
    assert_eq!(s.addrs().len(), 2, "the variable over the file");
    s.stop().unwrap();

    // Two certificate pairs, both served.
    let (a, b) = (
        rcgen::generate_simple_self_signed(vec!["a.example".into()]).unwrap(),
        rcgen::generate_simple_self_signed(vec!["b.example".into()]).unwrap(),
    );
    let certs = format!(
        "{},{}",
        write(&d.join("a.pem"), &a.cert.pem()),
        write(&d.join("b.pem"), &b.cert.pem())
    );
    let keys = format!(
        "{},{}",
        write(&d.join("a.key"), &a.signing_key.serialize_pem()),
        write(&d.join("b.key"), &b.signing_key.serialize_pem())
    );
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = start(&mut server(
        &[
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--metrics",
            &metrics.to_string(),
        ],
        &[
            ("NEQO_SERVER_TLS_CERT", &certs),
            ("NEQO_SERVER_TLS_KEY", &keys),
        ],
    ));
    assert_eq!(common::scrape(metrics)["neqo_server_tls_certificates"], 2.0);
    s.stop().unwrap();
    let e = refused(&mut server(
        &["--listen", "127.0.0.1:0"],
        &[
            ("NEQO_SERVER_TLS_CERT", &certs),
            ("NEQO_SERVER_TLS_KEY", keys.split(',').next().unwrap()),
        ],
    ));
    assert!(e.contains("--tls-cert given 2 times, --tls-key 1"), "{e}");

    let (code, e) = refused_with(&mut server(
        &["--workers", "1"],
        &[("NEQO_SERVER_LISTEN", "127.0.0.1:0,localhost")],
    ));
    assert_eq!(code, Some(2));
    assert_eq!(
        e,
        "neqo-server: error: NEQO_SERVER_LISTEN: invalid value 'localhost' for '--listen \
         <value>': invalid socket address syntax"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// A value a variable gives that the flag's parser refuses is refused naming the variable,
/// for both binaries, with clap's usage status 2; the same value on the command line is
/// clap's own error, and a flag that overrides the variable leaves it unread.
#[cfg(unix)]
#[test]
fn a_bad_value_of_a_variable_names_the_variable() {
    for (env, want) in [
        (
            ("NEQO_SERVER_WORKERS", "abc"),
            "neqo-server: error: NEQO_SERVER_WORKERS: invalid value 'abc' for '--workers \
             <WORKERS>': invalid digit found in string",
        ),
        (
            ("NEQO_SERVER_KEYLOG", "maybe"),
            "neqo-server: error: NEQO_SERVER_KEYLOG: invalid value 'maybe' for '--keylog'; \
             [possible values: true, false]",
        ),
        (
            ("NEQO_SERVER_TLS_CERT", "/etc/cert.pem"),
            "neqo-server: error: NEQO_SERVER_TLS_CERT: the following required arguments were \
             not provided: --tls-key <PEM>",
        ),
    ] {
        let (code, e) = refused_with(&mut server(&["--listen", "127.0.0.1:0"], &[env]));
        assert_eq!((code, e.as_str()), (Some(2), want));
    }
    let (code, e) = refused_with(&mut server(&["--workers", "abc"], &[]));
    assert_eq!(code, Some(2));
    assert!(
        e.starts_with("error: invalid value 'abc' for '--workers"),
        "{e}"
    );
    // The flag over the variable: the variable is not read.
    start(&mut server(
        &["--listen", "127.0.0.1:0", "--workers", "1"],
        &[("NEQO_SERVER_WORKERS", "abc")],
    ))
    .stop()
    .unwrap();

    let url = "https://127.0.0.1:9/1";
    for (env, want) in [
        (
            ("NEQO_CLIENT_REQUESTS", "abc"),
            "neqo-client: error: NEQO_CLIENT_REQUESTS: invalid value 'abc' for '--requests \
             <REQUESTS>': invalid digit found in string",
        ),
        (
            ("NEQO_CLIENT_CIPHER_SUITE", "aes128gcm,rc4"),
            "neqo-client: error: NEQO_CLIENT_CIPHER_SUITE: invalid value 'rc4' for \
             '--cipher-suite <CIPHER_SUITE>'; [possible values: aes128gcm, aes256gcm, chacha20]",
        ),
        (
            ("NEQO_CLIENT_INSECURE", "true"),
            "neqo-client: error: NEQO_CLIENT_INSECURE: the argument '--ca <CA>' cannot be used \
             with '--insecure'",
        ),
    ] {
        let (code, e) = refused_with(&mut client(&["--ca", "/etc/ca.pem", url], &[env]));
        assert_eq!((code, e.as_str()), (Some(2), want));
    }
}

/// The client's repeatable flag from its variable: a list of cipher suites, all offered.
#[cfg(unix)]
#[test]
fn a_client_takes_a_list_from_a_variable() {
    let s = start(&mut server(
        &["--listen", "127.0.0.1:0", "--workers", "1"],
        &[],
    ));
    let mut c = client(
        &[
            &format!("https://{}/1000", s.addr()),
            "--insecure",
            "--no-progress",
        ],
        &[("NEQO_CLIENT_CIPHER_SUITE", "chacha20,aes256gcm")],
    );
    let out = run(&mut c, LIMIT).unwrap();
    assert!(out.success(), "{}", out.stderr);
    s.stop().unwrap();
}
