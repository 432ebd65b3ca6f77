//! `compare stacks`: the server's cost where other stacks' clients meet it. For each count
//! C of client processes, C processes of one client stack (quinn's, as `quinn-load`, and
//! the msquic peer's client), one connection each as users' clients are, download `--bytes`
//! in all, every byte verified, in each of two shapes ([`Shape`]): 1 MiB requests one after
//! another (at least one each), and one download of each process's share. The servers
//! ([`Party`]): the msquic server at msquic's defaults (but for what `msquic-peer`'s settings
//! name), and neqo-server twice, at the msquic server's datagram size and at its own defaults
//! (on loopback its path MTU follows the route to 8972 bytes). Per stack, C, shape and
//! server: the server's CPU seconds per GB (its process's user + system time over the bytes
//! served), the aggregate Gbit/s, and the largest datagram the server sent, from its own
//! report; the clients share the cores with the server. From both servers' reports, what the
//! load cost per GB: datagrams received (nearly all ACKs) and packets lost; from neqo-server's
//! also send syscalls and wake-ups (socket and timer).

use std::{process::Command, time::Duration};

use neqo_report::{MsquicServerReport, ServerReport, TransferFigures};
use test_fixtures::{Measured, Server, cargo_build, release_binary, run};

use super::JsonFile;

mod table;

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
    const ALL: [Self; 2] = [Self::Quinn, Self::Msquic];

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

/// A server and how it is set up. The msquic server runs once per point, at msquic's
/// defaults; neqo-server twice, since its default datagram size on loopback is not msquic's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Party {
    /// neqo-server at the msquic server's datagram size ([`super::neqo_mtu_args`]).
    NeqoEqual,
    /// neqo-server at its own defaults.
    NeqoDefaults,
    Msquic,
}

impl Party {
    /// The servers a run measures: both neqo setups, unless `--server-arg` names
    /// `--max-mtu` itself, which then replaces both.
    fn all(neqo_args: &[String]) -> Vec<Self> {
        if names_mtu(neqo_args) {
            vec![Self::NeqoEqual, Self::Msquic]
        } else {
            vec![Self::NeqoEqual, Self::NeqoDefaults, Self::Msquic]
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Self::NeqoEqual | Self::NeqoDefaults => "neqo-server",
            Self::Msquic => "msquic",
        }
    }
}

fn names_mtu(neqo_args: &[String]) -> bool {
    neqo_args.iter().any(|a| a.starts_with("--max-mtu"))
}

/// neqo-server's arguments beyond its listen address and report, as `party`: the
/// `--server-arg`s, after [`super::neqo_mtu_args`] at equal sizes unless they name
/// `--max-mtu` themselves.
fn neqo_server_args(party: Party, neqo_args: &[String]) -> Vec<&str> {
    let pinned = if party == Party::NeqoEqual && !names_mtu(neqo_args) {
        super::neqo_mtu_args()
    } else {
        &[]
    };
    pinned
        .iter()
        .copied()
        .chain(neqo_args.iter().map(String::as_str))
        .collect()
}

fn server_command(party: Party, json: &JsonFile, neqo_args: &[String]) -> Command {
    match party {
        Party::NeqoEqual | Party::NeqoDefaults => {
            let mut c = Command::new(release_binary("neqo-server"));
            c.args(["--listen", "127.0.0.1:0", "--alpn", "hq-interop", "--json"])
                .arg(&json.0)
                .args(neqo_server_args(party, neqo_args));
            c
        }
        Party::Msquic => {
            let mut c = Command::new(release_binary("msquic-peer"));
            c.args([
                "server",
                "--listen",
                "127.0.0.1:0",
                "--alpn",
                "hq-interop",
                "--json",
            ])
            .arg(&json.0);
            c
        }
    }
}

/// One run's figures at one point: the server's CPU per GB, the aggregate rate, the
/// largest datagram it sent, and thousands per GB of what its report counts ([`Count`]).
#[derive(Debug, Default)]
struct Point {
    cpu_s_per_gb: Vec<f64>,
    gbps: Vec<f64>,
    /// UDP datagrams the kernel dropped for a full receive buffer, anywhere on the machine
    /// (nearly all at the clients: the server's buffers are large), thousands per GB.
    drops_k_per_gb: Vec<f64>,
    /// The largest UDP payload the server's connections reached.
    max_datagram: u64,
    counts_k_per_gb: [Vec<f64>; Count::ALL.len()],
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

/// What the servers' reports count that the load drives.
#[derive(Debug, Clone, Copy)]
enum Count {
    /// Datagrams received (msquic: packets, which are the same for ACKs).
    Received,
    Lost,
    /// neqo-server only.
    SendSyscalls,
    /// neqo-server only: socket and timer wake-ups.
    Wakes,
}

impl Count {
    const ALL: [Self; 4] = [Self::Received, Self::Lost, Self::SendSyscalls, Self::Wakes];

    const fn label(self) -> &'static str {
        match self {
            Self::Received => "datagrams received",
            Self::Lost => "packets lost",
            Self::SendSyscalls => "send syscalls",
            Self::Wakes => "wake-ups",
        }
    }
}

/// What a server said of a run: its largest datagram and its [`Count`]s (`None` where it
/// does not count that).
struct Said {
    max_datagram: u64,
    counts: [Option<u64>; Count::ALL.len()],
}

impl From<ServerReport> for Said {
    fn from(r: ServerReport) -> Self {
        Self {
            max_datagram: u64::from(r.driver.max_path_mtu),
            counts: Count::ALL.map(|c| {
                Some(match c {
                    Count::Received => r.socket.rx.datagrams,
                    Count::Lost => r.driver.lost_packets,
                    Count::SendSyscalls => r.socket.tx.syscalls,
                    Count::Wakes => r.driver.io_wakes + r.driver.timer_wakes,
                })
            }),
        }
    }
}

impl From<MsquicServerReport> for Said {
    fn from(r: MsquicServerReport) -> Self {
        Self {
            max_datagram: r.max_udp_payload,
            counts: Count::ALL.map(|c| match c {
                Count::Received => Some(r.packets_received),
                Count::Lost => Some(r.lost_packets),
                Count::SendSyscalls | Count::Wakes => None,
            }),
        }
    }
}

/// Runs `c` processes of `stack` against `party`, each fetching `requests` of `size` bytes.
fn one_run(
    stack: Stack,
    (party, neqo_args): (Party, &[String]),
    (c, size, requests): (u64, u64, u64),
    (index, run_no): (usize, usize),
    point: &mut Point,
) -> Result<(), String> {
    let server_json = JsonFile::new(index, run_no, "stacks-server");
    let srv = Server::start(
        &mut server_command(party, &server_json, neqo_args),
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
    let said: Said = match party {
        Party::NeqoEqual | Party::NeqoDefaults => {
            server_json.take::<ServerReport>().map(Said::from)
        }
        Party::Msquic => server_json.take::<MsquicServerReport>().map(Said::from),
    }
    .map_err(|e| format!("server: {e}"))?;
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let gb = total as f64 / 1e9;
    point.cpu_s_per_gb.push(srv.cpu().as_secs_f64() / gb);
    point.gbps.push(gb * 8.0 / wall.as_secs_f64());
    if let Some(d) = drops {
        #[expect(clippy::cast_precision_loss, reason = "a rate")]
        point.drops_k_per_gb.push(d as f64 / gb / 1000.0);
    }
    point.max_datagram = point.max_datagram.max(said.max_datagram);
    for (count, v) in said.counts.iter().zip(&mut point.counts_k_per_gb) {
        if let Some(count) = count {
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            v.push(*count as f64 / gb / 1000.0);
        }
    }
    Ok(())
}

/// A point's place: the client stack, the column (C and shape), the server.
type Key = (Stack, (u64, Shape), Party);

/// Measures and prints the table; returns the points that failed.
pub(super) fn stacks(
    peers: &super::Peers,
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
    let parties = Party::all(neqo_args);
    let mut points: Vec<(Key, Point)> = Vec::new();
    let columns: Vec<(u64, Shape)> = processes
        .iter()
        .flat_map(|&c| Shape::ALL.map(|shape| (c, shape)))
        .collect();
    let mut failed = 0;
    for run_no in 0..runs {
        for &(c, shape) in &columns {
            let (size, requests) = shape.split(bytes / c);
            for stack in Stack::ALL {
                for &party in &parties {
                    let key = (stack, (c, shape), party);
                    let index = match points.iter().position(|(k, _)| *k == key) {
                        Some(i) => i,
                        None => {
                            points.push((key, Point::default()));
                            points.len() - 1
                        }
                    };
                    eprintln!(
                        "run {}/{runs}: {c} {} client(s), {}, against {} {}...",
                        run_no + 1,
                        stack.name(),
                        shape.label(),
                        party.name(),
                        neqo_server_args(party, neqo_args).join(" ")
                    );
                    if let Err(e) = one_run(
                        stack,
                        (party, neqo_args),
                        (c, size, requests),
                        (index, run_no),
                        &mut points[index].1,
                    ) {
                        eprintln!(
                            "compare stacks: {c} {} against {}: {e}",
                            stack.name(),
                            party.name()
                        );
                        failed += 1;
                    }
                }
            }
        }
    }
    println!(
        "{}",
        table::render(&points, &columns, &parties, (bytes, runs), neqo_args)
    );
    failed
}

#[cfg(test)]
mod tests {
    use super::{Party, neqo_server_args};

    #[test]
    fn equal_sizes_pin_the_mtu_unless_the_arguments_name_it() {
        // On the host's loopback (no `--mtu` namespace in a test).
        assert_eq!(
            neqo_server_args(Party::NeqoEqual, &[]),
            ["--max-mtu", "1472"]
        );
        assert!(neqo_server_args(Party::NeqoDefaults, &[]).is_empty());
        let ack = ["--ack-every".to_owned(), "32".to_owned()];
        assert_eq!(
            neqo_server_args(Party::NeqoEqual, &ack),
            ["--max-mtu", "1472", "--ack-every", "32"]
        );
        assert_eq!(
            neqo_server_args(Party::NeqoDefaults, &ack),
            ["--ack-every", "32"]
        );
        let mtu = ["--max-mtu=8972".to_owned()];
        assert_eq!(neqo_server_args(Party::NeqoEqual, &mtu), ["--max-mtu=8972"]);
        // The arguments' size replaces both setups.
        assert_eq!(Party::all(&mtu), [Party::NeqoEqual, Party::Msquic]);
        assert_eq!(
            Party::all(&ack),
            [Party::NeqoEqual, Party::NeqoDefaults, Party::Msquic]
        );
    }
}
