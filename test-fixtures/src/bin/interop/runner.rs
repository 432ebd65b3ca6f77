//! The QUIC Interop Runner's test cases, run here: neqo through `run_endpoint.sh` (the
//! script the runner's container runs), the msquic peer through its command line, the
//! network-shaped cases through `neqo-relay`. What each case serves, how the endpoints and
//! the network are set up and what is checked afterwards (the files byte-exact, and the
//! property it is about, read from the endpoints' JSON reports and the relay's counts) is
//! its row of the table in `cases.rs`.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use test_fixtures::{Impl, Measured, Server, StartError, release_binary, run};

use crate::cases::{Case, Evidence, RelayCounts, Reports, content};

/// The script the runner's container runs, from the source tree.
pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/run_endpoint.sh");

/// The exit code for a case an endpoint does not support.
const UNSUPPORTED: i32 = 127;

/// Client and server.
pub const PAIRS: [(Impl, Impl); 3] = [
    (Impl::Neqo, Impl::Neqo),
    (Impl::Neqo, Impl::Msquic),
    (Impl::Msquic, Impl::Neqo),
];

/// How a case ended for one pair.
#[derive(Debug, Clone)]
pub enum Outcome {
    Pass(String),
    Fail(String),
    /// An endpoint exited 127.
    Unsupported(String),
    /// The msquic peer has no setting for what the case needs.
    NotApplicable(&'static str),
}

impl Outcome {
    const fn cell(&self) -> &'static str {
        match self {
            Self::Pass(_) => "pass",
            Self::Fail(_) => "**FAIL**",
            Self::Unsupported(_) => "unsupported (127)",
            Self::NotApplicable(_) => "n/a",
        }
    }
}

/// A self-signed certificate for the server (`cert.pem`, `priv.key`) in `dir`, made with
/// the `openssl` command as the runner's own setup does; `big` adds 300 names to it (about
/// 9 KB), as the runner's long chain for `amplificationlimit` makes the first flight large.
///
/// # Errors
/// When openssl is missing or fails.
pub fn make_certs(dir: &Path, big: bool) -> Result<(), String> {
    let mut names = "subjectAltName=DNS:server,DNS:localhost,IP:127.0.0.1,IP:::1".to_owned();
    if big {
        for i in 0..300 {
            let _ = write!(names, ",DNS:name-{i:04}.amplification.example");
        }
    }
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let m = run(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=server",
                "-addext",
                &names,
                "-keyout",
            ])
            .arg(dir.join("priv.key"))
            .arg("-out")
            .arg(dir.join("cert.pem")),
        Duration::from_secs(30),
    )
    .map_err(|e| format!("openssl: {e}"))?;
    if m.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl: {}: {}",
            m.ending(),
            m.last_stderr_line().unwrap_or("no message")
        ))
    }
}

/// One run's directories.
struct Dirs {
    root: PathBuf,
    www: PathBuf,
    downloads: PathBuf,
    reports: PathBuf,
    qlog: PathBuf,
    certs: PathBuf,
}

impl Dirs {
    fn new(
        base: &Path,
        case: &Case,
        client: Impl,
        server: Impl,
        certs: &Path,
    ) -> Result<Self, String> {
        let root = base.join(format!("{}-{}-{}", case.name, client.name(), server.name()));
        let d = Self {
            www: root.join("www"),
            downloads: root.join("downloads"),
            reports: root.join("reports"),
            qlog: root.join("qlog"),
            certs: certs.to_path_buf(),
            root,
        };
        for p in [&d.www, &d.downloads, &d.reports, &d.qlog] {
            fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        Ok(d)
    }

    /// The runner's environment for `run_endpoint.sh`.
    fn env(&self, cmd: &mut Command, role: &str, case: &Case) {
        cmd.env("ROLE", role)
            .env("TESTCASE", case.name)
            .env("WWW", &self.www)
            .env("DOWNLOADS", &self.downloads)
            .env("CERTS", &self.certs)
            .env("REPORTS", &self.reports)
            .env("QLOGDIR", &self.qlog)
            .env("SSLKEYLOGFILE", self.root.join(format!("keys-{role}.log")))
            .env(
                "NEQO_BIN",
                release_binary("neqo-server")
                    .parent()
                    .unwrap_or_else(|| Path::new(".")),
            );
    }
}

fn script(dirs: &Dirs, role: &str, case: &Case) -> Command {
    let mut c = Command::new("bash");
    c.arg(SCRIPT);
    dirs.env(&mut c, role, case);
    c
}

fn server_command(dirs: &Dirs, case: &Case, server: Impl) -> Command {
    match server {
        Impl::Neqo => {
            let mut c = script(dirs, "server", case);
            c.env("PORT", "0");
            c
        }
        Impl::Msquic => {
            let mut c = Command::new(release_binary("msquic-peer"));
            // As run_endpoint.sh's idle and handshake timeouts, for the same reason.
            let timeout = case.timeout_s.to_string();
            c.args(["server", "--alpn", "hq-interop", "--idle-timeout"])
                .args([&timeout, "--handshake-timeout", &timeout, "--listen"])
                .arg(if case.v6 { "[::1]:0" } else { "127.0.0.1:0" })
                .arg("--cert")
                .arg(dirs.certs.join("cert.pem"))
                .arg("--key")
                .arg(dirs.certs.join("priv.key"))
                .arg("--root")
                .arg(&dirs.www)
                .args(case.msquic.server_args);
            c
        }
    }
}

/// The client's run: one command, or one per URL where the case wants one connection each.
fn client_commands(dirs: &Dirs, case: &Case, client: Impl, urls: &[String]) -> Vec<Command> {
    match client {
        Impl::Neqo => {
            let mut c = script(dirs, "client", case);
            c.env("REQUESTS", urls.join(" "));
            vec![c]
        }
        Impl::Msquic => {
            let one = |urls: &[String], n: usize| {
                let mut c = Command::new(release_binary("msquic-peer"));
                // As run_endpoint.sh's idle and handshake timeouts.
                let timeout = case.timeout_s.to_string();
                c.arg("client")
                    .args(urls)
                    .args(["--insecure", "--idle-timeout", &timeout])
                    .args(["--handshake-timeout", &timeout, "--output-dir"])
                    .arg(&dirs.downloads)
                    .arg("--json")
                    .arg(dirs.reports.join(format!("client-{n}.json")))
                    .args(case.msquic.client_args);
                c
            };
            if case.msquic.process_per_file {
                urls.iter()
                    .enumerate()
                    .map(|(i, u)| one(std::slice::from_ref(u), i + 1))
                    .collect()
            } else {
                vec![one(urls, 1)]
            }
        }
    }
}

/// Whether an msquic client process failed its handshake with its own TLS stack's
/// `internal_error` (see [`crate::cases::Msquic::retry_alert_80`]).
fn msquic_tls_alert_80(m: &Measured) -> bool {
    !m.success()
        && m.last_stderr_line()
            .is_some_and(|l| l.contains("handshake failed: TLS alert 80"))
}

fn failed(what: &str, m: &Measured) -> String {
    format!(
        "{what}: {}: {}",
        m.ending(),
        m.last_stderr_line().unwrap_or("no message")
    )
}

/// Runs `case` with `client` against `server`.
pub fn run_case(
    base: &Path,
    certs: &Path,
    case: &'static Case,
    client: Impl,
    server: Impl,
) -> Outcome {
    for (who, is_client) in [(client, true), (server, false)] {
        if who == Impl::Msquic
            && let Some(why) = case.msquic_cannot(is_client)
        {
            return Outcome::NotApplicable(why);
        }
    }
    let files = case.files();
    let dirs = match Dirs::new(base, case, client, server, certs) {
        Ok(d) => d,
        Err(e) => return Outcome::Fail(e),
    };
    for (name, len) in &files {
        if let Err(e) = fs::write(dirs.www.join(name), content(name, *len)) {
            return Outcome::Fail(format!("writing {name}: {e}"));
        }
    }
    let srv = match Server::start(
        &mut server_command(&dirs, case, server),
        Duration::from_secs(20),
    ) {
        Ok(s) => s,
        Err(StartError::Exited(m)) if m.code == Some(UNSUPPORTED) => {
            return Outcome::Unsupported(format!("server: {}", m.last_stderr_line().unwrap_or("")));
        }
        Err(e) => return Outcome::Fail(format!("server: {e}")),
    };
    let port = srv.addr().port();
    let direct = if case.v6 {
        format!("[::1]:{port}")
    } else {
        format!("127.0.0.1:{port}")
    };
    let relay = match case.relay {
        None => None,
        Some(args) => {
            let mut c = Command::new(release_binary("neqo-relay"));
            c.args(["--listen", "127.0.0.1:0", "--upstream", &direct])
                .args(args);
            match Server::start(&mut c, Duration::from_secs(20)) {
                Ok(r) => Some(r),
                Err(e) => {
                    let _ = srv.stop();
                    return Outcome::Fail(format!("relay: {e}"));
                }
            }
        }
    };
    let target = relay.as_ref().map_or(direct, |r| r.addr().to_string());
    let urls: Vec<String> = files
        .iter()
        .map(|(name, _)| format!("https://{target}/{name}"))
        .collect();
    let mut client_error = None;
    let mut unsupported = None;
    let mut retried = 0;
    let commands = client_commands(&dirs, case, client, &urls).len();
    for i in 0..commands {
        let mut cmd = client_commands(&dirs, case, client, &urls).swap_remove(i);
        let mut outcome = run(&mut cmd, case.limit);
        if let Ok(m) = &outcome
            && client == Impl::Msquic
            && case.msquic.retry_alert_80
            && msquic_tls_alert_80(m)
        {
            retried += 1;
            let mut again = client_commands(&dirs, case, client, &urls).swap_remove(i);
            outcome = run(&mut again, case.limit);
        }
        match outcome {
            Ok(m) if m.success() => {}
            Ok(m) if m.code == Some(UNSUPPORTED) => {
                unsupported = Some(m.last_stderr_line().unwrap_or("").to_owned());
                break;
            }
            Ok(m) => {
                client_error = Some(failed("client", &m));
                break;
            }
            Err(e) => {
                client_error = Some(format!("client: {e}"));
                break;
            }
        }
    }
    // The server first: the relay holds the client's last datagrams (its ACKs, its
    // CONNECTION_CLOSE) for its delay, and stopped first it would drop them, leaving the
    // server to wait out its drain period for a client that has gone.
    let server_out = srv.stop();
    let relay_out = relay.map(|r| r.stop());
    if let Some(why) = unsupported {
        return Outcome::Unsupported(format!("client: {why}"));
    }
    if let Some(e) = client_error {
        return Outcome::Fail(e);
    }
    let relay_stdout = match relay_out {
        Some(Ok(m)) => Some(m.stdout),
        Some(Err(e)) => return Outcome::Fail(format!("relay: {e}")),
        None => None,
    };
    if let Err(e) = server_out {
        return Outcome::Fail(format!("stopping the server: {e}"));
    }
    let reports = match Reports::read(&dirs.reports, client, server) {
        Ok(r) => r,
        Err(e) => return Outcome::Fail(format!("{e} (kept in {})", dirs.root.display())),
    };
    let evidence = Evidence {
        downloads: &dirs.downloads,
        reports,
        relay: relay_stdout
            .as_deref()
            .map(RelayCounts::parse)
            .unwrap_or_default(),
        server,
    };
    match case.verify(&evidence) {
        Ok(mut detail) => {
            let _ = fs::remove_dir_all(&dirs.root);
            if retried > 0 {
                let _ = write!(
                    detail,
                    "; msquic client processes retried after its TLS internal_error: {retried}"
                );
            }
            Outcome::Pass(detail)
        }
        Err(e) => Outcome::Fail(format!("{} (kept in {})", e.what, dirs.root.display())),
    }
}

/// Runs `cases` for every pair and prints the table; returns whether nothing failed.
pub fn main(cases: &[&'static Case]) -> bool {
    let base = std::env::temp_dir().join(format!("neqo-interop-{}", std::process::id()));
    let certs = base.join("certs");
    let big_certs = base.join("big-certs");
    for (dir, big) in [(&certs, false), (&big_certs, true)] {
        if let Err(e) = make_certs(dir, big) {
            eprintln!("interop: {e}");
            return false;
        }
    }
    let mut results: BTreeMap<(usize, (Impl, Impl)), Outcome> = BTreeMap::new();
    for (i, &case) in cases.iter().enumerate() {
        let certs = if case.big_cert { &big_certs } else { &certs };
        // The pairs of a case at once: each has its own server, relay, ports and
        // directories, and most of a case's time is waiting out probe timeouts (the
        // handshake cases' backed-off PTOs), not CPU. Reported in the table's order.
        let runs: Vec<(Outcome, f64)> = std::thread::scope(|scope| {
            let handles: Vec<_> = PAIRS
                .map(|pair| {
                    let base = &base;
                    scope.spawn(move || {
                        let started = std::time::Instant::now();
                        let outcome = run_case(base, certs, case, pair.0, pair.1);
                        (outcome, started.elapsed().as_secs_f64())
                    })
                })
                .into_iter()
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        (Outcome::Fail("the case's thread panicked".into()), 0.0)
                    })
                })
                .collect()
        });
        for (pair, (outcome, seconds)) in PAIRS.into_iter().zip(runs) {
            let why = match &outcome {
                Outcome::Pass(d) | Outcome::Fail(d) | Outcome::Unsupported(d) => d.as_str(),
                Outcome::NotApplicable(d) => d,
            };
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            eprintln!(
                "{:<18} {} -> {}: {} in {seconds:.1} s{why}",
                case.name,
                pair.0.name(),
                pair.1.name(),
                outcome.cell(),
            );
            results.insert((i, pair), outcome);
        }
    }
    println!("\n| case | neqo -> neqo | neqo -> msquic | msquic -> neqo |");
    println!("|---|---|---|---|");
    let mut ok = true;
    for (i, case) in cases.iter().enumerate() {
        let cells: Vec<&str> = PAIRS
            .iter()
            .map(|p| results.get(&(i, *p)).map_or("-", Outcome::cell))
            .collect();
        println!("| {} | {} |", case.name, cells.join(" | "));
    }
    for ((i, pair), o) in &results {
        if let Outcome::Fail(why) = o {
            ok = false;
            println!(
                "- FAIL {} {} -> {}: {why}",
                cases[*i].name,
                pair.0.name(),
                pair.1.name()
            );
        }
    }
    if ok {
        let _ = fs::remove_dir_all(&base);
    }
    ok
}
