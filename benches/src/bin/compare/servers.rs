//! `compare h3-servers`: neqo-server against another HTTP/3 server users pick, Caddy (quic-go
//! inside), with the same clients: neqo-client (`--alpn h3`) and, where Debian's
//! `ngtcp2-client` is installed, ngtcp2's `gtlsclient`. Both servers serve one root (a file of
//! `--bytes`, 256 MiB by default, and a 1000-byte one) with the same certificate. For each
//! server and client: one download of the large file (Gbit/s as the client saw it, and the
//! server's CPU seconds per GB), then 10 000 GETs of the small file at once on one connection
//! (the server's CPU per request). neqo-server runs at its defaults (on loopback its datagrams
//! grow to 8972 bytes) and at `--max-mtu 1452`, the size the other servers send; Caddy at its
//! defaults with `protocols h3`. `--runs` runs (every server and client in turn each run),
//! medians.
//!
//! Caddy is `caddy` on the PATH or in Go's bin directory; where there is none and Go is
//! installed, it is built first (`go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9`,
//! from Go's module proxy). Where neither is possible its rows say why.

use std::{
    fmt::Write as _,
    net::{SocketAddr, UdpSocket},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use benches::procfs;
use test_fixtures::{Server, release_binary, run};

use super::{Peers, curve::median};

/// Caddy's version, as the issue that asked for it names it.
const CADDY: &str = "github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9";
/// Requests of the small file at once on one connection.
const GETS: u64 = 10_000;
/// The small file's size.
const SMALL: usize = 1000;
/// A run's hang guard, not a speed bound.
const LIMIT: Duration = Duration::from_secs(300);

/// The servers compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// neqo-server at its defaults.
    Neqo,
    /// neqo-server at `--max-mtu 1452`.
    Neqo1452,
    Caddy,
}

impl Kind {
    const ALL: [Self; 3] = [Self::Neqo, Self::Neqo1452, Self::Caddy];

    const fn label(self) -> &'static str {
        match self {
            Self::Neqo => "neqo-server (defaults: up to 8972 B)",
            Self::Neqo1452 => "neqo-server --max-mtu 1452",
            Self::Caddy => "Caddy 2.11.9 (quic-go)",
        }
    }
}

/// The clients, each against every server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Neqo,
    Ngtcp2,
}

impl Client {
    const ALL: [Self; 2] = [Self::Neqo, Self::Ngtcp2];

    const fn label(self) -> &'static str {
        match self {
            Self::Neqo => "neqo-client",
            Self::Ngtcp2 => "ngtcp2 gtlsclient",
        }
    }

    /// A command fetching `path` from `addr` `n` times (at once, on one connection).
    fn command(self, addr: SocketAddr, path: &str, n: u64) -> Command {
        let url = format!("https://{addr}{path}");
        match self {
            Self::Neqo => {
                let mut c = Command::new(release_binary("neqo-client"));
                c.args(["--insecure", "--no-progress", "--quiet", "--alpn", "h3"]);
                if n > 1 {
                    c.args(["--parallel", "-n", &n.to_string(), &url]);
                } else {
                    c.args([&url, "-o", "/dev/null"]);
                }
                c
            }
            Self::Ngtcp2 => {
                let mut c = Command::new("gtlsclient");
                c.args(["-q", "--exit-on-all-streams-close"])
                    .args(["-n", &n.to_string()])
                    .arg(addr.ip().to_string())
                    .arg(addr.port().to_string())
                    .arg(&url);
                c
            }
        }
    }

    /// Why it cannot run, if it cannot.
    fn missing(self, peers: &Peers) -> Option<String> {
        match self {
            Self::Neqo => peers.neqo_missing.clone(),
            Self::Ngtcp2 => on_path("gtlsclient")
                .is_none()
                .then(|| "no gtlsclient (Debian's ngtcp2-client)".to_owned()),
        }
    }
}

/// `name` on the PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// Caddy's binary: on the PATH, in Go's bin directory, or built there now; or why not.
fn caddy() -> Result<PathBuf, String> {
    if let Some(c) = on_path("caddy") {
        return Ok(c);
    }
    let go = on_path("go").ok_or("no caddy, and no Go to build it with")?;
    let gopath = Command::new(&go)
        .args(["env", "GOPATH"])
        .output()
        .map_err(|e| format!("go env GOPATH: {e}"))?;
    let bin = PathBuf::from(String::from_utf8_lossy(&gopath.stdout).trim())
        .join("bin")
        .join("caddy");
    if bin.is_file() {
        return Ok(bin);
    }
    eprintln!("building Caddy: go install {CADDY} ...");
    let status = Command::new(&go)
        .args(["install", CADDY])
        .status()
        .map_err(|e| format!("go install: {e}"))?;
    if status.success() && bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("go install {CADDY}: {status}"))
    }
}

/// The root both servers serve, its certificate and key; removed when dropped.
struct Site {
    dir: PathBuf,
}

impl Site {
    fn new(bytes: u64) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("compare-h3-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let www = dir.join("www");
        std::fs::create_dir_all(&www).map_err(|e| e.to_string())?;
        let site = Self { dir };
        write_pattern(&www.join("big"), bytes).map_err(|e| format!("the large file: {e}"))?;
        std::fs::write(www.join("small"), vec![b's'; SMALL]).map_err(|e| e.to_string())?;
        let made = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=localhost", "-addext"])
            .arg("subjectAltName=DNS:localhost,IP:127.0.0.1")
            .arg("-keyout")
            .arg(site.key())
            .arg("-out")
            .arg(site.cert())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("openssl: {e}"))?;
        if !made.success() {
            return Err(format!("openssl req: {made}"));
        }
        Ok(site)
    }

    fn www(&self) -> PathBuf {
        self.dir.join("www")
    }

    fn cert(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("key.pem")
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `bytes` of a repeating pattern into `path`, a MiB at a time.
fn write_pattern(path: &Path, bytes: u64) -> std::io::Result<()> {
    use std::io::Write as _;
    let block: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut left = bytes;
    while left > 0 {
        let n = left.min(block.len() as u64);
        f.write_all(&block[..usize::try_from(n).unwrap_or(block.len())])?;
        left -= n;
    }
    f.flush()
}

/// A server running: its process id, address, and how it ends.
enum Running {
    Neqo(Server),
    Caddy(Child, SocketAddr),
}

impl Running {
    fn start(kind: Kind, site: &Site, caddy: Option<&Path>) -> Result<Self, String> {
        match kind {
            Kind::Neqo | Kind::Neqo1452 => {
                let mut c = Command::new(release_binary("neqo-server"));
                c.args(["--listen", "127.0.0.1:0", "--alpn", "h3", "--root"])
                    .arg(site.www())
                    .arg("--cert")
                    .arg(site.cert())
                    .arg("--key")
                    .arg(site.key());
                if kind == Kind::Neqo1452 {
                    c.args(["--max-mtu", "1452"]);
                }
                Server::start(&mut c, Duration::from_secs(30))
                    .map(Self::Neqo)
                    .map_err(|e| format!("neqo-server: {e}"))
            }
            Kind::Caddy => {
                let caddy = caddy.ok_or("no caddy")?;
                // A free UDP port: Caddy has no "any port" that it then names.
                let port = UdpSocket::bind("127.0.0.1:0")
                    .and_then(|s| s.local_addr())
                    .map_err(|e| e.to_string())?
                    .port();
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let config = site.dir.join("Caddyfile");
                std::fs::write(
                    &config,
                    format!(
                        "{{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tservers {{\n\t\tprotocols h3\n\t}}\n}}\nhttps://{addr} {{\n\ttls {} {}\n\troot * {}\n\tfile_server\n}}\n",
                        site.cert().display(),
                        site.key().display(),
                        site.www().display()
                    ),
                )
                .map_err(|e| e.to_string())?;
                let child = Command::new(caddy)
                    .args(["run", "--adapter", "caddyfile", "--config"])
                    .arg(&config)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("caddy: {e}"))?;
                let running = Self::Caddy(child, addr);
                // Ready once it answers a request (bounded).
                let started = Instant::now();
                loop {
                    let m = run(
                        Client::Neqo
                            .command(addr, "/small", 1)
                            .args(["--idle-timeout", "1"]),
                        Duration::from_secs(10),
                    );
                    if m.is_ok_and(|m| m.success()) {
                        return Ok(running);
                    }
                    if started.elapsed() > Duration::from_secs(30) {
                        return Err("caddy did not answer within 30 s".to_owned());
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Self::Neqo(s) => s.id(),
            Self::Caddy(c, _) => c.id(),
        }
    }

    fn addr(&self) -> SocketAddr {
        match self {
            Self::Neqo(s) => s.addr(),
            Self::Caddy(_, a) => *a,
        }
    }

    fn stop(self) {
        match self {
            Self::Neqo(s) => drop(s.stop()),
            Self::Caddy(mut c, _) => {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// What one server and client did over the runs.
#[derive(Debug, Default)]
struct Point {
    gbps: Vec<f64>,
    cpu_per_gb: Vec<f64>,
    us_per_request: Vec<f64>,
}

/// One download and one burst of GETs by `client` from `server`; the server's CPU read from
/// `/proc` around each.
fn one_run(server: &Running, client: Client, bytes: u64, p: &mut Point) -> Result<(), String> {
    let (pid, addr) = (server.pid(), server.addr());
    let cpu = procfs::cpu_seconds(pid);
    let started = Instant::now();
    let m = run(&mut client.command(addr, "/big", 1), LIMIT).map_err(|e| e.to_string())?;
    let wall = started.elapsed().as_secs_f64();
    if !m.success() {
        return Err(format!("{}: the download: {}", client.label(), m.ending()));
    }
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let gb = bytes as f64 / 1e9;
    p.gbps.push(gb * 8.0 / wall);
    p.cpu_per_gb.push((procfs::cpu_seconds(pid) - cpu) / gb);
    let cpu = procfs::cpu_seconds(pid);
    let m = run(&mut client.command(addr, "/small", GETS), LIMIT).map_err(|e| e.to_string())?;
    if !m.success() {
        return Err(format!("{}: the GETs: {}", client.label(), m.ending()));
    }
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    p.us_per_request
        .push((procfs::cpu_seconds(pid) - cpu) * 1e6 / GETS as f64);
    Ok(())
}

/// Runs the comparison and prints its table; returns how many points failed.
pub(super) fn h3_servers(peers: &Peers, bytes: u64, runs: usize) -> usize {
    if let Some(why) = &peers.neqo_missing {
        eprintln!("compare: {why}");
        return 1;
    }
    let caddy = caddy();
    let site = match Site::new(bytes) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("compare: {e}");
            return 1;
        }
    };
    let mut points: Vec<(Kind, Client, Point, Option<String>)> = Vec::new();
    for kind in Kind::ALL {
        for client in Client::ALL {
            let why = client.missing(peers).or_else(|| match (&caddy, kind) {
                (Err(e), Kind::Caddy) => Some(e.clone()),
                _ => None,
            });
            points.push((kind, client, Point::default(), why));
        }
    }
    let mut failed = 0;
    for r in 0..runs {
        for kind in Kind::ALL {
            if points.iter().all(|p| p.0 != kind || p.3.is_some()) {
                continue;
            }
            let server = match Running::start(kind, &site, caddy.as_deref().ok()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("compare: run {}: {}: {e}", r + 1, kind.label());
                    failed += 1;
                    continue;
                }
            };
            for (k, client, point, why) in &mut points {
                if *k != kind || why.is_some() {
                    continue;
                }
                if let Err(e) = one_run(&server, *client, bytes, point) {
                    eprintln!("compare: run {}: {}: {e}", r + 1, kind.label());
                    failed += 1;
                }
            }
            server.stop();
        }
        eprintln!("compare: run {} of {runs} done", r + 1);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| server | client | download Gbit/s | server CPU s/GB | {GETS} GETs at once: server CPU µs/request |\n|---|---|---:|---:|---:|"
    );
    let cell = |v: &[f64], digits: usize| {
        median(v).map_or_else(|| "-".to_owned(), |m| format!("{m:.digits$}"))
    };
    for (kind, client, p, why) in &points {
        match why {
            Some(why) => {
                let _ = writeln!(
                    out,
                    "| {} | {} | skipped: {why} | | |",
                    kind.label(),
                    client.label()
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} |",
                    kind.label(),
                    client.label(),
                    cell(&p.gbps, 2),
                    cell(&p.cpu_per_gb, 2),
                    cell(&p.us_per_request, 0)
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "\nMedians of {runs} runs; one {bytes}-byte file per download, {GETS} GETs of a {SMALL}-byte file at once on one connection; each server's CPU (user + system) from /proc around each client run; client and server share the machine's cores."
    );
    println!("{out}");
    failed
}
