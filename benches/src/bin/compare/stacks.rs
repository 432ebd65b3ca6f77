//! `compare stacks`: the server's cost where other stacks' clients meet it. For each count
//! C of client processes, C processes of one client stack (quinn's, as `quinn-load`, and
//! the msquic peer's client), one connection each as users' clients are, download `--bytes`
//! in all, every byte verified, in each of two shapes ([`Shape`]): 1 MiB requests one after
//! another (at least one each), and one download of each process's share; from neqo-server (its defaults but `--max-mtu 1452`, as `neqo_mtu_args` says why) and from
//! the msquic server in turn. Per stack, C and
//! server: the server's CPU seconds per GB (its process's user + system time over the bytes
//! served) and the aggregate Gbit/s; the clients share the cores with the server. For
//! neqo-server also what its report says the load cost it per GB: datagrams received (nearly
//! all ACKs), send syscalls, wake-ups (socket and timer), packets declared lost.

use std::{fmt::Write as _, process::Command, time::Duration};

use neqo_report::{ServerReport, TransferFigures};
use test_fixtures::{Impl, Measured, Server, cargo_build, release_binary, run};

use super::{JsonFile, Peers, curve::median};

/// `cargo build --release` arguments for `quinn-load`.
const BUILD_QUINN_LOAD: &[&str] = &["-p", "benches", "--bin", "quinn-load"];

/// The request size, as on the curve.
const REQUEST: u64 = 1 << 20;

/// How each client process takes its share of the bytes: a server's cost per byte depends
/// on it (a connection's slow start and its requests' ends are paid per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// [`REQUEST`]s one after another.
    Requests,
    /// One download of the whole share.
    One,
}

impl Shape {
    const ALL: [Self; 2] = [Self::Requests, Self::One];

    const fn label(self) -> &'static str {
        match self {
            Self::Requests => "1 MiB requests",
            Self::One => "one download",
        }
    }

    /// The request size and the requests for a share of `share` bytes.
    fn split(self, share: u64) -> (u64, u64) {
        match self {
            Self::Requests => (REQUEST, (share / REQUEST).max(1)),
            Self::One => (share.max(REQUEST), 1),
        }
    }
}

/// The most client processes at once.
pub(super) const MAX_PROCESSES: u64 = 256;

/// The client stacks measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stack {
    Quinn,
    Msquic,
}

impl Stack {
    const fn name(self) -> &'static str {
        match self {
            Self::Quinn => "quinn",
            Self::Msquic => "msquic",
        }
    }

    fn command(self, url: &str, requests: u64, json: &JsonFile) -> Command {
        let n = requests.to_string();
        match self {
            Self::Quinn => {
                let mut c = Command::new(release_binary("quinn-load"));
                c.args([url, "-n", &n, "--json"]).arg(&json.0);
                c
            }
            Self::Msquic => {
                let mut c = Command::new(release_binary("msquic-peer"));
                c.args(["client", url, "--insecure", "-n", &n]);
                c
            }
        }
    }
}

/// neqo-server's arguments beyond its listen address and report: `--server-arg`s, after
/// [`super::neqo_mtu_args`] unless they name `--max-mtu` themselves.
fn neqo_server_args(neqo_args: &[String]) -> Vec<&str> {
    let pin = !neqo_args.iter().any(|a| a.starts_with("--max-mtu"));
    let pinned = if pin { super::neqo_mtu_args() } else { &[] };
    pinned
        .iter()
        .copied()
        .chain(neqo_args.iter().map(String::as_str))
        .collect()
}

fn server_command(server: Impl, json: &JsonFile, neqo_args: &[String]) -> Command {
    match server {
        Impl::Neqo => {
            let mut c = Command::new(release_binary("neqo-server"));
            c.args(["--listen", "127.0.0.1:0", "--alpn", "hq-interop", "--json"])
                .arg(&json.0)
                .args(neqo_server_args(neqo_args));
            c
        }
        Impl::Msquic => {
            let mut c = Command::new(release_binary("msquic-peer"));
            c.args(["server", "--listen", "127.0.0.1:0", "--alpn", "hq-interop"]);
            c
        }
    }
}

/// One run's figures at one point: the server's CPU per GB and the aggregate rate, and
/// for neqo-server thousands per GB of what its report counts ([`COUNTS`]).
#[derive(Debug, Default)]
struct Point {
    cpu_s_per_gb: Vec<f64>,
    gbps: Vec<f64>,
    /// UDP datagrams the kernel dropped for a full receive buffer, anywhere on the machine
    /// (nearly all at the clients: the server's buffers are large), thousands per GB.
    drops_k_per_gb: Vec<f64>,
    counts_k_per_gb: [Vec<f64>; COUNTS.len()],
}

/// The kernel's count of UDP datagrams dropped for a full receive buffer (`RcvbufErrors` in
/// `/proc/net/snmp`), where there is one.
fn rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// One of the counts a neqo-server report holds.
type Count = fn(&ServerReport) -> u64;

/// What neqo-server's report counts that the load drives.
const COUNTS: [(&str, Count); 4] = [
    ("datagrams received", |r| r.socket.rx.datagrams),
    ("send syscalls", |r| r.socket.tx.syscalls),
    ("wake-ups", |r| r.driver.io_wakes + r.driver.timer_wakes),
    ("packets lost", |r| r.driver.lost_packets),
];

/// Runs `c` processes of `stack` against `server`, each fetching `requests` of `size` bytes.
fn one_run(
    stack: Stack,
    (server, neqo_args): (Impl, &[String]),
    (c, size, requests): (u64, u64, u64),
    (index, run_no): (usize, usize),
    point: &mut Point,
) -> Result<(), String> {
    let server_json = JsonFile::new(index, run_no, "stacks-server");
    let srv = Server::start(
        &mut server_command(server, &server_json, neqo_args),
        Duration::from_secs(20),
    )
    .map_err(|e| format!("server: {e}"))?;
    let url = format!("https://127.0.0.1:{}/{size}", srv.addr().port());
    let total = c * requests * size;
    let limit = Duration::from_secs(120 + total / 12_500_000);
    let jsons: Vec<JsonFile> = (0..c)
        .map(|i| JsonFile::new(index, run_no, &format!("stacks-{i}")))
        .collect();
    let drops_before = rcvbuf_errors();
    let start = std::time::Instant::now();
    let clients: Vec<std::io::Result<Measured>> = std::thread::scope(|s| {
        let handles: Vec<_> = jsons
            .iter()
            .map(|json| {
                let mut cmd = stack.command(&url, requests, json);
                s.spawn(move || run(&mut cmd, limit))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("panicked")))
            })
            .collect()
    });
    let wall = start.elapsed();
    let drops = rcvbuf_errors()
        .zip(drops_before)
        .map(|(a, b)| a.saturating_sub(b));
    let srv = srv.stop().map_err(|e| format!("server: {e}"))?;
    for (client, json) in clients.into_iter().zip(&jsons) {
        let client = client.map_err(|e| format!("client: {e}"))?;
        if !client.success() {
            let why = client.last_stderr_line().unwrap_or("no message");
            return Err(format!(
                "{} client: {}: {why}",
                stack.name(),
                client.ending()
            ));
        }
        // quinn-load says what it verified; the msquic peer's client exits 0 only when every
        // body was whole and matched.
        if stack == Stack::Quinn {
            let got = json
                .take::<TransferFigures>()
                .map_err(|e| format!("quinn client: {e}"))?
                .bytes_received;
            if got != requests * size {
                return Err(format!("quinn client: {got} bytes of {}", requests * size));
            }
        }
    }
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let gb = total as f64 / 1e9;
    point.cpu_s_per_gb.push(srv.cpu().as_secs_f64() / gb);
    point.gbps.push(gb * 8.0 / wall.as_secs_f64());
    if let Some(d) = drops {
        #[expect(clippy::cast_precision_loss, reason = "a rate")]
        point.drops_k_per_gb.push(d as f64 / gb / 1000.0);
    }
    if server == Impl::Neqo {
        let report = server_json
            .take::<ServerReport>()
            .map_err(|e| format!("server: {e}"))?;
        for ((_, count), v) in COUNTS.iter().zip(&mut point.counts_k_per_gb) {
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            v.push(count(&report) as f64 / gb / 1000.0);
        }
    }
    Ok(())
}

/// A point's place: the client stack, the column (C and shape), the server.
type Key = (Stack, (u64, Shape), Impl);

fn cell(p: Option<&Point>, f: fn(&Point) -> &Vec<f64>, digits: usize) -> String {
    p.and_then(|p| median(f(p)))
        .map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

/// Measures and prints the table; returns the points that failed.
pub(super) fn stacks(
    peers: &Peers,
    (processes, neqo_args): (&[u64], &[String]),
    bytes: u64,
    runs: usize,
    build: bool,
) -> usize {
    if let Some(why) = peers
        .neqo_missing
        .as_ref()
        .or(peers.msquic_missing.as_ref())
    {
        eprintln!("compare stacks: needs neqo-server and msquic-peer: {why}");
        return 1;
    }
    if build {
        eprintln!("building quinn-load (release)...");
        if let Err(e) = cargo_build(BUILD_QUINN_LOAD) {
            eprintln!("compare stacks: {e}");
            return 1;
        }
    }
    let stacks = [Stack::Quinn, Stack::Msquic];
    let servers = [Impl::Neqo, Impl::Msquic];
    let mut points: Vec<(Key, Point)> = Vec::new();
    let columns: Vec<(u64, Shape)> = processes
        .iter()
        .flat_map(|&c| Shape::ALL.map(|shape| (c, shape)))
        .collect();
    let mut failed = 0;
    for run_no in 0..runs {
        for &(c, shape) in &columns {
            let (size, requests) = shape.split(bytes / c);
            for stack in stacks {
                for server in servers {
                    let key = (stack, (c, shape), server);
                    let index = match points.iter().position(|(k, _)| *k == key) {
                        Some(i) => i,
                        None => {
                            points.push((key, Point::default()));
                            points.len() - 1
                        }
                    };
                    eprintln!(
                        "run {}/{runs}: {c} {} client(s), {}, against {}...",
                        run_no + 1,
                        stack.name(),
                        shape.label(),
                        server.name()
                    );
                    if let Err(e) = one_run(
                        stack,
                        (server, neqo_args),
                        (c, size, requests),
                        (index, run_no),
                        &mut points[index].1,
                    ) {
                        eprintln!(
                            "compare stacks: {c} {} against {}: {e}",
                            stack.name(),
                            server.name()
                        );
                        failed += 1;
                    }
                }
            }
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let find =
        |k: (Stack, (u64, Shape), Impl)| points.iter().find(|(key, _)| *key == k).map(|(_, p)| p);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Clients of other stacks: C client processes, one connection each, download {bytes} bytes in all, in 1 MiB requests (at least one each) or in one download each, from neqo-server ({}) and the msquic server on 127.0.0.1; {runs} run(s), medians; clients and server share {cores} cores.\n",
        match neqo_server_args(neqo_args).join(" ") {
            a if a.is_empty() => "defaults".to_owned(),
            a => format!("defaults but {a}"),
        }
    );
    for (title, f, digits) in [
        (
            "server CPU s/GB, neqo-server / msquic",
            (|p: &Point| &p.cpu_s_per_gb) as fn(&Point) -> &Vec<f64>,
            2,
        ),
        ("Gbit/s, neqo-server / msquic", |p: &Point| &p.gbps, 2),
        (
            "receive-buffer drops [k/GB], neqo-server / msquic",
            |p: &Point| &p.drops_k_per_gb,
            1,
        ),
    ] {
        let _ = write!(out, "| {title} |");
        for (c, shape) in &columns {
            let _ = write!(out, " C = {c}, {} |", shape.label());
        }
        let _ = write!(out, "\n|---|");
        for _ in &columns {
            let _ = write!(out, "---:|");
        }
        out.push('\n');
        for stack in stacks {
            let _ = write!(out, "| {} |", stack.name());
            for &col in &columns {
                let _ = write!(
                    out,
                    " {} / {} |",
                    cell(find((stack, col, Impl::Neqo)), f, digits),
                    cell(find((stack, col, Impl::Msquic)), f, digits)
                );
            }
            out.push('\n');
        }
        out.push('\n');
    }
    let _ = write!(out, "| neqo-server, per GB [thousands] |");
    for (c, shape) in &columns {
        for stack in stacks {
            let _ = write!(out, " {}, C = {c}, {} |", stack.name(), shape.label());
        }
    }
    let _ = write!(out, "\n|---|");
    for _ in 0..columns.len() * stacks.len() {
        let _ = write!(out, "---:|");
    }
    out.push('\n');
    for (i, (what, _)) in COUNTS.iter().enumerate() {
        let _ = write!(out, "| {what} |");
        for &col in &columns {
            for stack in stacks {
                let v = find((stack, col, Impl::Neqo)).and_then(|p| median(&p.counts_k_per_gb[i]));
                let _ = write!(
                    out,
                    " {} |",
                    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
                );
            }
        }
        out.push('\n');
    }
    println!("{out}");
    failed
}

#[cfg(test)]
mod tests {
    use super::neqo_server_args;

    #[test]
    fn the_server_is_pinned_to_1452_unless_the_arguments_say_otherwise() {
        // On the host's loopback (no `--mtu` namespace in a test).
        assert_eq!(neqo_server_args(&[]), ["--max-mtu", "1452"]);
        let ack = ["--ack-every".to_owned(), "32".to_owned()];
        assert_eq!(
            neqo_server_args(&ack),
            ["--max-mtu", "1452", "--ack-every", "32"]
        );
        let mtu = ["--max-mtu=8972".to_owned()];
        assert_eq!(neqo_server_args(&mtu), ["--max-mtu=8972"]);
    }
}
