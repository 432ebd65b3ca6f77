//! The QUIC Interop Runner's test cases, run here: neqo through `run_endpoint.sh` (the
//! script the runner's container runs), the msquic peer through its command line, the
//! network-shaped cases through `neqo-relay`. Each case is checked as the runner checks it:
//! the files byte-exact, and the property it is about, read from the endpoints' JSON reports
//! and the relay's counts.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::Value;
use test_fixtures::{Impl, Measured, Server, StartError, release_binary, run};

/// Every case the runner knows, in its order.
pub const ALL: [&str; 22] = [
    "handshake",
    "transfer",
    "longrtt",
    "multiplexing",
    "chacha20",
    "retry",
    "resumption",
    "zerortt",
    "http3",
    "keyupdate",
    "ecn",
    "amplificationlimit",
    "blackhole",
    "handshakeloss",
    "transferloss",
    "handshakecorruption",
    "transfercorruption",
    "ipv6",
    "rebind-port",
    "rebind-addr",
    "v2",
    "connectionmigration",
];

/// The script the runner's container runs, from the source tree.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/run_endpoint.sh");

/// The datagram size quinn-proto uses during the handshake.
const INITIAL_MTU: u64 = 1200;

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

/// What a case needs.
struct Spec {
    /// Files served: name and size.
    files: Vec<(String, usize)>,
    /// `neqo-relay` arguments; `None` for a direct loopback path.
    relay: Option<Vec<&'static str>>,
    v6: bool,
    /// The server's certificate is the large one, larger than three client Initials.
    big_cert: bool,
    /// How long the client may take.
    limit: Duration,
}

/// The idle and handshake timeouts of both endpoints in `case`, in seconds, as
/// `run_endpoint.sh` sets them (it says why the handshake cases need five minutes).
fn endpoint_timeout(case: &str) -> &'static str {
    if matches!(case, "handshakeloss" | "handshakecorruption") {
        "300"
    } else {
        "60"
    }
}

fn files(prefix: &str, sizes: &[usize]) -> Vec<(String, usize)> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (format!("{prefix}-{i}"), n))
        .collect()
}

fn spec(case: &str) -> Spec {
    let mut s = Spec {
        files: files(case, &[1 << 20]),
        relay: None,
        v6: false,
        big_cert: false,
        limit: Duration::from_secs(60),
    };
    match case {
        "handshake" | "retry" => s.files = files(case, &[1024]),
        "transfer" => s.files = files(case, &[1 << 20, 3 << 20, 5 << 20]),
        "multiplexing" => {
            // More requests than either server's stream limit (neqo 100 at a time).
            s.files = (0..400)
                .map(|i| (format!("mux-{i}"), 32 + (i * 97) % 2000))
                .collect();
        }
        "resumption" | "zerortt" => s.files = files(case, &[1024, 10_000, 50_000]),
        // As the runner's: three files over one HTTP/3 connection.
        "http3" => s.files = files(case, &[5_000, 10_000, 500_000]),
        "keyupdate" => s.files = files(case, &[5 << 20]),
        "ipv6" => s.v6 = true,
        // The server's first flight (a ~9 KB certificate) is more than three times the
        // client's Initial, and the client's later datagrams are held back for 1.5 s: what
        // the server sends meanwhile is all an unvalidated address may get.
        "amplificationlimit" => {
            s.files = files(case, &[10_000]);
            s.big_cert = true;
            s.relay = Some(vec!["--amplification-window", "1500"]);
        }
        // The runner's 1.5 s round trip.
        "longrtt" => {
            s.files = files(case, &[100_000, 100_000]);
            s.relay = Some(vec!["--delay", "750"]);
        }
        // One connection per file, 30 % of the datagrams lost or corrupted, both ways.
        "handshakeloss" | "handshakecorruption" => {
            s.files = files(case, &[1024; 10]);
            let what = if case == "handshakeloss" {
                "--loss"
            } else {
                "--corrupt"
            };
            s.relay = Some(vec![what, "30%", "--delay", "5"]);
            // One connection may take the endpoints' whole timeout, the others the usual
            // few seconds each.
            s.limit = Duration::from_secs(600);
        }
        "transferloss" | "transfercorruption" => {
            s.files = files(case, &[2 << 20]);
            let what = if case == "transferloss" {
                "--loss"
            } else {
                "--corrupt"
            };
            s.relay = Some(vec![what, "2%", "--delay", "5"]);
            s.limit = Duration::from_secs(120);
        }
        // A 2 s outage early in a 2 s transfer at 20 Mbit/s.
        "blackhole" => {
            s.files = files(case, &[5 << 20]);
            s.relay = Some(vec![
                "--delay",
                "10",
                "--rate",
                "20",
                "--blackhole",
                "500:2000",
            ]);
            s.limit = Duration::from_secs(120);
        }
        // A 1.7 s transfer at 40 Mbit/s, the client's port (and address) changing once, at
        // its 50th short-header datagram: well within the transfer (a client acknowledges at
        // least every 25 ms, its max_ack_delay, while data arrives), and once whatever the
        // machine's speed. (msquic 2.5's server stops answering a connection after a few
        // port changes; a change every second, by the clock, made two or more on a loaded
        // machine and failed the case.)
        "rebind-port" | "rebind-addr" => {
            s.files = files(case, &[8 << 20]);
            let mut args = vec![
                "--delay",
                "10",
                "--rate",
                "40",
                "--rebind-after",
                "50",
                "--rebind-limit",
                "1",
            ];
            if case == "rebind-addr" {
                args.push("--rebind-addr");
            }
            s.relay = Some(args);
        }
        _ => {}
    }
    s
}

/// Why the msquic peer cannot take a role in `case`, if it cannot.
fn msquic_cannot(case: &str, client: bool) -> Option<&'static str> {
    match (case, client) {
        ("chacha20", true) => Some("msquic-peer's client cannot restrict its cipher suites"),
        ("keyupdate", true) => Some("msquic-peer's client has no key update option"),
        ("resumption" | "zerortt", true) => {
            Some("msquic-peer's client keeps no session ticket between connections")
        }
        ("http3", _) => Some("msquic-peer speaks hq-interop only: no HTTP/3"),
        ("rebind-addr", false) => Some(
            "msquic 2.5's server stops answering once the client's IP address changes (found here; see docs/records/interop.md)",
        ),
        _ => None,
    }
}

/// Bytes of file `name`: a fixed pseudo-random sequence (splitmix64 seeded by the name), so
/// that a shifted or mixed-up body does not compare equal.
fn content(name: &str, len: usize) -> Vec<u8> {
    let mut x = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
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
        case: &str,
        client: Impl,
        server: Impl,
        certs: &Path,
    ) -> Result<Self, String> {
        let root = base.join(format!("{case}-{}-{}", client.name(), server.name()));
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
    fn env(&self, cmd: &mut Command, role: &str, case: &str) {
        cmd.env("ROLE", role)
            .env("TESTCASE", case)
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

fn script(dirs: &Dirs, role: &str, case: &str) -> Command {
    let mut c = Command::new("bash");
    c.arg(SCRIPT);
    dirs.env(&mut c, role, case);
    c
}

fn server_command(dirs: &Dirs, case: &str, server: Impl, v6: bool) -> Command {
    match server {
        Impl::Neqo => {
            let mut c = script(dirs, "server", case);
            c.env("PORT", "0");
            c
        }
        Impl::Msquic => {
            let mut c = Command::new(release_binary("msquic-peer"));
            // As run_endpoint.sh's idle and handshake timeouts, for the same reason.
            let timeout = endpoint_timeout(case);
            c.args([
                "server",
                "--alpn",
                "hq-interop",
                "--idle-timeout",
                timeout,
                "--handshake-timeout",
                timeout,
                "--listen",
            ])
            .arg(if v6 { "[::1]:0" } else { "127.0.0.1:0" })
            .arg("--cert")
            .arg(dirs.certs.join("cert.pem"))
            .arg("--key")
            .arg(dirs.certs.join("priv.key"))
            .arg("--root")
            .arg(&dirs.www);
            if case == "retry" {
                c.arg("--retry-always");
            }
            c
        }
    }
}

/// The client's run: one command, or one per URL where the case wants one connection each.
fn client_commands(dirs: &Dirs, case: &str, client: Impl, urls: &[String]) -> Vec<Command> {
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
                let timeout = endpoint_timeout(case);
                c.arg("client")
                    .args(urls)
                    .args(["--insecure", "--idle-timeout", timeout])
                    .args(["--handshake-timeout", timeout, "--output-dir"])
                    .arg(&dirs.downloads)
                    .arg("--json")
                    .arg(dirs.reports.join(format!("client-{n}.json")));
                if matches!(case, "transfer" | "multiplexing") {
                    c.arg("--parallel");
                }
                c
            };
            if matches!(case, "handshakeloss" | "handshakecorruption") {
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

/// Whether an msquic client process of `handshakecorruption` failed its handshake with its
/// own TLS stack's `internal_error` (alert 80): it happens now and then, is not yet explained
/// (docs/records/interop.md has what is known), and the server's side shows nothing wrong,
/// so such a process gets one more try and the pass says so.
fn msquic_tls_internal_error(case: &str, client: Impl, m: &Measured) -> bool {
    case == "handshakecorruption"
        && client == Impl::Msquic
        && !m.success()
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

/// Reads a JSON report.
fn report(path: &Path) -> Result<Value, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `v[path...]` as a number (0 when absent).
fn num(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// What the relay's final report says, both ways.
#[derive(Debug, Default)]
struct RelayCounts {
    lost: u64,
    corrupted: u64,
    blackholed: u64,
    rebinds: u64,
    window_client_bytes: u64,
    window_server_bytes: u64,
}

fn relay_counts(stdout: &str) -> RelayCounts {
    let mut c = RelayCounts::default();
    for line in stdout.lines() {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        // | direction | received | forwarded | lost | queue drops | corrupted | ...
        if cols.len() > 6 && cols[1].contains("->") {
            c.lost += cols[4].parse::<u64>().unwrap_or(0);
            c.corrupted += cols[6].parse::<u64>().unwrap_or(0);
        }
        for part in line.split(';') {
            let mut words = part.split_whitespace();
            let slot = match words.next() {
                Some("blackholed") => &mut c.blackholed,
                Some("rebinds") => &mut c.rebinds,
                Some("window-client-bytes") => &mut c.window_client_bytes,
                Some("window-server-bytes") => &mut c.window_server_bytes,
                _ => continue,
            };
            *slot = words.next().and_then(|n| n.parse().ok()).unwrap_or(0);
        }
    }
    c
}

/// Runs `case` with `client` against `server`.
pub fn run_case(base: &Path, certs: &Path, case: &str, client: Impl, server: Impl) -> Outcome {
    for (who, is_client) in [(client, true), (server, false)] {
        if who == Impl::Msquic
            && let Some(why) = msquic_cannot(case, is_client)
        {
            return Outcome::NotApplicable(why);
        }
    }
    let spec = spec(case);
    let dirs = match Dirs::new(base, case, client, server, certs) {
        Ok(d) => d,
        Err(e) => return Outcome::Fail(e),
    };
    for (name, len) in &spec.files {
        if let Err(e) = fs::write(dirs.www.join(name), content(name, *len)) {
            return Outcome::Fail(format!("writing {name}: {e}"));
        }
    }
    let srv = match Server::start(
        &mut server_command(&dirs, case, server, spec.v6),
        Duration::from_secs(20),
    ) {
        Ok(s) => s,
        Err(StartError::Exited(m)) if m.code == Some(UNSUPPORTED) => {
            return Outcome::Unsupported(format!("server: {}", m.last_stderr_line().unwrap_or("")));
        }
        Err(e) => return Outcome::Fail(format!("server: {e}")),
    };
    let port = srv.addr().port();
    let direct = if spec.v6 {
        format!("[::1]:{port}")
    } else {
        format!("127.0.0.1:{port}")
    };
    let relay = match &spec.relay {
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
    let urls: Vec<String> = spec
        .files
        .iter()
        .map(|(name, _)| format!("https://{target}/{name}"))
        .collect();
    let mut client_error = None;
    let mut unsupported = None;
    let mut retried = 0;
    let commands = client_commands(&dirs, case, client, &urls).len();
    for i in 0..commands {
        let mut cmd = client_commands(&dirs, case, client, &urls).swap_remove(i);
        let mut outcome = run(&mut cmd, spec.limit);
        if let Ok(m) = &outcome
            && msquic_tls_internal_error(case, client, m)
        {
            retried += 1;
            let mut again = client_commands(&dirs, case, client, &urls).swap_remove(i);
            outcome = run(&mut again, spec.limit);
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
    let relay_out = relay.map(|r| r.stop());
    let server_out = srv.stop();
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
    // The files, byte for byte.
    for (name, len) in &spec.files {
        match fs::read(dirs.downloads.join(name)) {
            Ok(got) if got == content(name, *len) => {}
            Ok(got) => {
                return Outcome::Fail(format!(
                    "{name}: {} bytes differ from the {len} served",
                    got.len()
                ));
            }
            Err(e) => return Outcome::Fail(format!("{name} not downloaded: {e}")),
        }
    }
    match check(case, client, server, &dirs, relay_stdout.as_deref()) {
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
        Err(e) => Outcome::Fail(format!("{e} (kept in {})", dirs.root.display())),
    }
}

/// The JSON reports of the neqo side(s): the client's (each process's, added up where
/// numbers) and the server's.
struct Reports {
    clients: Vec<Value>,
    server: Option<Value>,
}

impl Reports {
    fn read(dirs: &Dirs, client: Impl, server: Impl) -> Result<Self, String> {
        let mut clients = Vec::new();
        if client == Impl::Neqo {
            for n in 1.. {
                let p = dirs.reports.join(format!("client-{n}.json"));
                if !p.exists() {
                    break;
                }
                clients.push(report(&p)?);
            }
            if clients.is_empty() {
                return Err("no client report".to_owned());
            }
        }
        let server = if server == Impl::Neqo {
            Some(report(&dirs.reports.join("server.json"))?)
        } else {
            None
        };
        Ok(Self { clients, server })
    }

    /// A client counter, summed over its processes (`None` for the msquic client).
    fn client(&self, path: &[&str]) -> Option<u64> {
        (!self.clients.is_empty()).then(|| self.clients.iter().map(|v| num(v, path)).sum())
    }

    fn server(&self, path: &[&str]) -> Option<u64> {
        self.server.as_ref().map(|v| num(v, path))
    }
}

/// Requires `what` of each neqo side that reports it.
fn require(
    detail: &mut String,
    side: &str,
    value: Option<u64>,
    ok: impl Fn(u64) -> bool,
    what: &str,
) -> Result<(), String> {
    if let Some(v) = value {
        if !ok(v) {
            return Err(format!("{side} {what}: {v}"));
        }
        let _ = write!(detail, "{side} {what} {v}; ");
    }
    Ok(())
}

/// The property `case` is about.
fn check(
    case: &str,
    client: Impl,
    server: Impl,
    dirs: &Dirs,
    relay: Option<&str>,
) -> Result<String, String> {
    let r = Reports::read(dirs, client, server)?;
    let mut d = String::new();
    let RelayCounts {
        lost,
        corrupted,
        blackholed,
        rebinds,
        window_client_bytes,
        window_server_bytes,
    } = relay.map(relay_counts).unwrap_or_default();
    match case {
        "handshake" => {
            require(
                &mut d,
                "client",
                r.client(&["connections"]),
                |n| n == 1,
                "connections",
            )?;
            require(
                &mut d,
                "server",
                r.server(&["driver", "accepted"]),
                |n| n == 1,
                "accepted",
            )?;
            require(
                &mut d,
                "server",
                r.server(&["driver", "retries"]),
                |n| n == 0,
                "retries",
            )?;
        }
        "http3" => {
            let alpns: Vec<&str> = r
                .clients
                .iter()
                .map(|v| v.get("alpn").and_then(Value::as_str).unwrap_or("none"))
                .collect();
            if alpns.iter().any(|a| *a != "h3") {
                return Err(format!("the client spoke {alpns:?}, not h3"));
            }
            require(
                &mut d,
                "client",
                r.client(&["connections"]),
                |n| n == 1,
                "connections",
            )?;
            let files = spec(case).files.len() as u64;
            require(
                &mut d,
                "server",
                r.server(&["http3", "responses"]),
                |n| n == files,
                "HTTP/3 responses",
            )?;
        }
        "retry" => {
            require(
                &mut d,
                "server",
                r.server(&["driver", "retries"]),
                |n| n >= 1,
                "retries sent",
            )?;
            require(
                &mut d,
                "client",
                r.client(&["tls", "retries_accepted"]),
                |n| n >= 1,
                "retries accepted",
            )?;
        }
        "resumption" => {
            require(
                &mut d,
                "client",
                r.client(&["connections"]),
                |n| n == 2,
                "connections",
            )?;
            require(
                &mut d,
                "client",
                r.client(&["tls", "full_handshakes"]),
                |n| n == 1,
                "full handshakes",
            )?;
            require(
                &mut d,
                "server",
                r.server(&["tls", "tickets_redeemed"]),
                |n| n >= 1,
                "tickets redeemed",
            )?;
        }
        "zerortt" => {
            require(
                &mut d,
                "client",
                r.client(&["tls", "zero_rtt_accepted"]),
                |n| n >= 1,
                "0-RTT accepted",
            )?;
            require(
                &mut d,
                "server",
                r.server(&["tls", "zero_rtt_attempted"]),
                |n| n >= 1,
                "0-RTT accepted",
            )?;
        }
        "keyupdate" => {
            require(
                &mut d,
                "client",
                r.client(&["tls", "key_updates_forced"]),
                |n| n >= 1,
                "key updates forced",
            )?;
            require(
                &mut d,
                "server",
                r.server(&["tls", "key_updates"]),
                |n| n >= 1,
                "key updates",
            )?;
        }
        "ecn" => {
            for (side, get) in [
                ("client", r.client(&["driver", "tx_ecn", "ect0"])),
                ("server", r.server(&["driver", "tx_ecn", "ect0"])),
            ] {
                require(&mut d, side, get, |n| n > 0, "sent ECT(0)")?;
            }
            // quinn-proto stops marking at the first ACK without (valid) ECN counts.
            for (side, get) in [
                ("client", r.client(&["driver", "tx_ecn", "not_ect"])),
                ("server", r.server(&["driver", "tx_ecn", "not_ect"])),
            ] {
                require(
                    &mut d,
                    side,
                    get,
                    |n| n == 0,
                    "sent unmarked (ACK_ECN missing)",
                )?;
            }
            for (side, get) in [
                ("client", r.client(&["driver", "rx_ecn", "ect0"])),
                ("server", r.server(&["driver", "rx_ecn", "ect0"])),
            ] {
                require(&mut d, side, get, |n| n > 0, "received ECT(0)")?;
            }
        }
        "handshakeloss" | "transferloss" => {
            if lost == 0 {
                return Err("the relay lost nothing".to_owned());
            }
            let _ = write!(d, "relay lost {lost}; ");
        }
        "handshakecorruption" | "transfercorruption" => {
            if corrupted == 0 {
                return Err("the relay corrupted nothing".to_owned());
            }
            let _ = write!(d, "relay corrupted {corrupted}; ");
        }
        "amplificationlimit" => {
            if window_client_bytes == 0 || window_server_bytes == 0 {
                return Err(format!(
                    "nothing crossed the window: client {window_client_bytes} B, server {window_server_bytes} B"
                ));
            }
            // RFC 9000 section 8.1: three times what it received. quinn-proto starts one
            // more full datagram (1200 B during the handshake) while any of that budget is
            // left (quinn issue 1082), so a neqo server may overshoot by less than one.
            let limit = 3 * window_client_bytes;
            let allowance = if server == Impl::Neqo { INITIAL_MTU } else { 0 };
            if window_server_bytes >= limit + allowance.max(1) {
                return Err(format!(
                    "the server sent {window_server_bytes} B for the client's {window_client_bytes} B before validating it"
                ));
            }
            let _ = write!(
                d,
                "server sent {window_server_bytes} B for {window_client_bytes} B unvalidated{}; ",
                if window_server_bytes > limit {
                    format!(
                        ", {} B over 3x: quinn-proto's one-datagram allowance",
                        window_server_bytes - limit
                    )
                } else {
                    String::new()
                }
            );
        }
        "blackhole" => {
            if blackholed == 0 {
                return Err("the blackhole swallowed nothing".to_owned());
            }
            let _ = write!(d, "relay blackholed {blackholed}; ");
        }
        "rebind-port" | "rebind-addr" => {
            if rebinds == 0 {
                return Err("the relay never rebound the client".to_owned());
            }
            let _ = write!(d, "relay rebinds {rebinds}; ");
            require(
                &mut d,
                "server",
                r.server(&["driver", "path_challenges"]),
                |n| n >= 1,
                "path challenges",
            )?;
        }
        _ => {}
    }
    Ok(d.trim_end_matches("; ").to_owned())
}

/// Runs `cases` for every pair and prints the table; returns whether nothing failed.
pub fn main(cases: &[String]) -> bool {
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
    for (i, case) in cases.iter().enumerate() {
        for pair in PAIRS {
            let started = std::time::Instant::now();
            let certs = if spec(case).big_cert {
                &big_certs
            } else {
                &certs
            };
            let outcome = run_case(&base, certs, case, pair.0, pair.1);
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
                "{:<18} {} -> {}: {} in {:.1} s{why}",
                case,
                pair.0.name(),
                pair.1.name(),
                outcome.cell(),
                started.elapsed().as_secs_f64()
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
        println!("| {case} | {} |", cells.join(" | "));
    }
    for ((i, pair), o) in &results {
        if let Outcome::Fail(why) = o {
            ok = false;
            println!(
                "- FAIL {} {} -> {}: {why}",
                cases[*i],
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
