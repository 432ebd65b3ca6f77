//! The QUIC Interop Runner's test cases as one table: each row says what the endpoints are
//! started with, what the network between them does and what is checked afterwards. The
//! runner (`runner.rs`) reads nothing about a case but its row.
//!
//! neqo runs through `run_endpoint.sh`, which chooses its arguments from `TESTCASE` (the
//! runner's container protocol); the msquic peer has no such script, so its arguments are
//! here.

use std::{fmt, fmt::Write as _, fs, path::Path, time::Duration};

use serde_json::Value;
use test_fixtures::Impl;

/// One test case.
#[derive(Debug)]
pub struct Case {
    /// The runner's name: `TESTCASE` for `run_endpoint.sh`, and what `--cases` takes.
    pub name: &'static str,
    /// What the server serves and the client requests.
    pub files: Files,
    /// `neqo-relay`'s arguments between client and server; `None`: the direct loopback path.
    pub relay: Option<&'static [&'static str]>,
    /// Over `::1` rather than `127.0.0.1`.
    pub v6: bool,
    /// The server's certificate is the large one, larger than three client Initials.
    pub big_cert: bool,
    /// Both endpoints' idle and handshake timeouts, in seconds, as `run_endpoint.sh` sets
    /// them for neqo (it says why the handshake cases need five minutes).
    pub timeout_s: u32,
    /// How long the client may take.
    pub limit: Duration,
    /// The msquic peer's part.
    pub msquic: Msquic,
    /// What must hold afterwards, checked in this order.
    pub checks: &'static [Check],
}

/// How the msquic peer takes part in a case.
#[derive(Debug)]
pub struct Msquic {
    /// Why its server cannot take part, if it cannot.
    pub server_cannot: Option<&'static str>,
    /// Why its client cannot take part, if it cannot.
    pub client_cannot: Option<&'static str>,
    /// Its server's arguments beyond the common ones.
    pub server_args: &'static [&'static str],
    /// Its client's arguments beyond the common ones.
    pub client_args: &'static [&'static str],
    /// One client process (so one connection) per file, as `run_endpoint.sh` does for neqo.
    pub process_per_file: bool,
    /// A client process that fails its handshake with its own TLS stack's `internal_error`
    /// (alert 80) gets one more try. It happens now and then under `handshakecorruption`, is
    /// not yet explained (docs/records/interop.md has what is known) and the server's side shows
    /// nothing wrong; the pass says how many were retried.
    pub retry_alert_80: bool,
}

/// The files of a case.
#[derive(Debug, Clone, Copy)]
pub enum Files {
    /// `<case>-<i>`, of these sizes.
    Sized(&'static [usize]),
    /// `<prefix>-<i>` for `i` below `count`, of `32 + (97 i mod 2000)` bytes: many sizes.
    Varied { prefix: &'static str, count: usize },
}

/// A side of the connection whose JSON report a check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
    /// The client's, then the server's.
    Both,
}

/// What a counter must be.
#[derive(Debug, Clone, Copy)]
pub enum Want {
    Eq(u64),
    AtLeast(u64),
    /// The number of files the case serves.
    OnePerFile,
}

/// What the relay must have done at least once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impairment {
    Lost,
    Corrupted,
    Blackholed,
    Rebound,
}

/// One property checked after a case's run.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// Every file was downloaded, byte for byte.
    FilesEqual,
    /// A counter of a neqo endpoint's JSON report, by its path (the client's summed over its
    /// processes). An msquic side writes no such report and is not checked.
    Counter(Side, &'static [&'static str], Want),
    /// Every neqo client process negotiated this ALPN.
    Alpn(&'static str),
    /// The relay did this to at least one datagram (or, `Rebound`, the client's address).
    Relay(Impairment),
    /// Before the client's address was validated the server sent at most three times what it
    /// received (RFC 9000 section 8.1), as the relay's window counted both.
    AmplificationLimit,
}

/// What most cases are: 1 MiB over the direct IPv4 path, the usual timeouts.
const BASE: Case = Case {
    name: "",
    files: Files::Sized(&[1 << 20]),
    relay: None,
    v6: false,
    big_cert: false,
    timeout_s: 60,
    limit: Duration::from_secs(60),
    msquic: MSQUIC,
    checks: &[Check::FilesEqual],
};

/// The msquic peer with nothing of its own for a case.
const MSQUIC: Msquic = Msquic {
    server_cannot: None,
    client_cannot: None,
    server_args: &[],
    client_args: &[],
    process_per_file: false,
    retry_alert_80: false,
};

const NO_TICKETS: &str = "msquic-peer's client keeps no session ticket between connections";
const NO_H3: &str = "msquic-peer speaks hq-interop only: no HTTP/3";

/// A 1.7 s transfer at 40 Mbit/s, the client's port (and address) changing once, at its 50th
/// short-header datagram: well within the transfer (a client acknowledges at least every
/// 25 ms, its max_ack_delay, while data arrives), and once whatever the machine's speed.
/// (msquic 2.5's server stops answering a connection after a few port changes; a change
/// every second, by the clock, made two or more on a loaded machine and failed the case.)
const REBIND_PORT: &[&str] = &[
    "--delay",
    "10",
    "--rate",
    "40",
    "--rebind-after",
    "50",
    "--rebind-limit",
    "1",
];
const REBIND_ADDR: &[&str] = &[
    "--delay",
    "10",
    "--rate",
    "40",
    "--rebind-after",
    "50",
    "--rebind-limit",
    "1",
    "--rebind-addr",
];
const REBIND_CHECKS: &[Check] = &[
    Check::FilesEqual,
    Check::Relay(Impairment::Rebound),
    Check::Counter(
        Side::Server,
        &["driver", "path_challenges"],
        Want::AtLeast(1),
    ),
];

/// Every case the runner knows, in its order.
pub const CASES: &[Case] = &[
    Case {
        name: "handshake",
        files: Files::Sized(&[1024]),
        checks: &[
            Check::FilesEqual,
            Check::Counter(Side::Client, &["connections"], Want::Eq(1)),
            Check::Counter(Side::Server, &["driver", "accepted"], Want::Eq(1)),
            Check::Counter(Side::Server, &["driver", "retries"], Want::Eq(0)),
        ],
        ..BASE
    },
    Case {
        name: "transfer",
        files: Files::Sized(&[1 << 20, 3 << 20, 5 << 20]),
        msquic: Msquic {
            client_args: &["--parallel"],
            ..MSQUIC
        },
        ..BASE
    },
    // The runner's 1.5 s round trip.
    Case {
        name: "longrtt",
        files: Files::Sized(&[100_000, 100_000]),
        relay: Some(&["--delay", "750"]),
        ..BASE
    },
    // More requests than either server's stream limit (neqo 100 at a time).
    Case {
        name: "multiplexing",
        files: Files::Varied {
            prefix: "mux",
            count: 400,
        },
        msquic: Msquic {
            client_args: &["--parallel"],
            ..MSQUIC
        },
        ..BASE
    },
    Case {
        name: "chacha20",
        msquic: Msquic {
            client_cannot: Some("msquic-peer's client cannot restrict its cipher suites"),
            ..MSQUIC
        },
        ..BASE
    },
    Case {
        name: "retry",
        files: Files::Sized(&[1024]),
        msquic: Msquic {
            server_args: &["--retry-always"],
            ..MSQUIC
        },
        checks: &[
            Check::FilesEqual,
            Check::Counter(Side::Server, &["driver", "retries"], Want::AtLeast(1)),
            Check::Counter(Side::Client, &["tls", "retries_accepted"], Want::AtLeast(1)),
        ],
        ..BASE
    },
    Case {
        name: "resumption",
        files: Files::Sized(&[1024, 10_000, 50_000]),
        msquic: Msquic {
            client_cannot: Some(NO_TICKETS),
            ..MSQUIC
        },
        checks: &[
            Check::FilesEqual,
            Check::Counter(Side::Client, &["connections"], Want::Eq(2)),
            Check::Counter(Side::Client, &["tls", "full_handshakes"], Want::Eq(1)),
            Check::Counter(Side::Server, &["tls", "tickets_redeemed"], Want::AtLeast(1)),
        ],
        ..BASE
    },
    Case {
        name: "zerortt",
        files: Files::Sized(&[1024, 10_000, 50_000]),
        msquic: Msquic {
            client_cannot: Some(NO_TICKETS),
            ..MSQUIC
        },
        checks: &[
            Check::FilesEqual,
            Check::Counter(
                Side::Client,
                &["tls", "zero_rtt_accepted"],
                Want::AtLeast(1),
            ),
            Check::Counter(
                Side::Server,
                &["tls", "zero_rtt_attempted"],
                Want::AtLeast(1),
            ),
        ],
        ..BASE
    },
    // As the runner's: three files over one HTTP/3 connection.
    Case {
        name: "http3",
        files: Files::Sized(&[5_000, 10_000, 500_000]),
        msquic: Msquic {
            server_cannot: Some(NO_H3),
            client_cannot: Some(NO_H3),
            ..MSQUIC
        },
        checks: &[
            Check::FilesEqual,
            Check::Alpn("h3"),
            Check::Counter(Side::Client, &["connections"], Want::Eq(1)),
            Check::Counter(Side::Server, &["http3", "responses"], Want::OnePerFile),
        ],
        ..BASE
    },
    Case {
        name: "keyupdate",
        files: Files::Sized(&[5 << 20]),
        msquic: Msquic {
            client_cannot: Some("msquic-peer's client has no key update option"),
            ..MSQUIC
        },
        checks: &[
            Check::FilesEqual,
            Check::Counter(
                Side::Client,
                &["tls", "key_updates_forced"],
                Want::AtLeast(1),
            ),
            Check::Counter(Side::Server, &["tls", "key_updates"], Want::AtLeast(1)),
        ],
        ..BASE
    },
    Case {
        name: "ecn",
        checks: &[
            Check::FilesEqual,
            Check::Counter(Side::Both, &["driver", "tx_ecn", "ect0"], Want::AtLeast(1)),
            // quinn-proto stops marking at the first ACK without (valid) ECN counts.
            Check::Counter(Side::Both, &["driver", "tx_ecn", "not_ect"], Want::Eq(0)),
            Check::Counter(Side::Both, &["driver", "rx_ecn", "ect0"], Want::AtLeast(1)),
        ],
        ..BASE
    },
    // The server's first flight (a ~9 KB certificate) is more than three times the client's
    // Initial, and the client's later datagrams are held back for 1.5 s: what the server
    // sends meanwhile is all an unvalidated address may get.
    Case {
        name: "amplificationlimit",
        files: Files::Sized(&[10_000]),
        big_cert: true,
        relay: Some(&["--amplification-window", "1500"]),
        checks: &[Check::FilesEqual, Check::AmplificationLimit],
        ..BASE
    },
    // A 2 s outage early in a 2 s transfer at 20 Mbit/s.
    Case {
        name: "blackhole",
        files: Files::Sized(&[5 << 20]),
        relay: Some(&["--delay", "10", "--rate", "20", "--blackhole", "500:2000"]),
        limit: Duration::from_secs(120),
        checks: &[Check::FilesEqual, Check::Relay(Impairment::Blackholed)],
        ..BASE
    },
    // One connection per file, 30 % of the datagrams lost (or corrupted, below) both ways.
    // One connection may take the endpoints' whole timeout, the others the usual few seconds
    // each.
    Case {
        name: "handshakeloss",
        files: Files::Sized(&[1024; 10]),
        relay: Some(&["--loss", "30%", "--delay", "5"]),
        timeout_s: 300,
        limit: Duration::from_secs(600),
        msquic: Msquic {
            process_per_file: true,
            ..MSQUIC
        },
        checks: &[Check::FilesEqual, Check::Relay(Impairment::Lost)],
        ..BASE
    },
    Case {
        name: "transferloss",
        files: Files::Sized(&[2 << 20]),
        relay: Some(&["--loss", "2%", "--delay", "5"]),
        limit: Duration::from_secs(120),
        checks: &[Check::FilesEqual, Check::Relay(Impairment::Lost)],
        ..BASE
    },
    Case {
        name: "handshakecorruption",
        files: Files::Sized(&[1024; 10]),
        relay: Some(&["--corrupt", "30%", "--delay", "5"]),
        timeout_s: 300,
        limit: Duration::from_secs(600),
        msquic: Msquic {
            process_per_file: true,
            retry_alert_80: true,
            ..MSQUIC
        },
        checks: &[Check::FilesEqual, Check::Relay(Impairment::Corrupted)],
        ..BASE
    },
    Case {
        name: "transfercorruption",
        files: Files::Sized(&[2 << 20]),
        relay: Some(&["--corrupt", "2%", "--delay", "5"]),
        limit: Duration::from_secs(120),
        checks: &[Check::FilesEqual, Check::Relay(Impairment::Corrupted)],
        ..BASE
    },
    Case {
        name: "ipv6",
        v6: true,
        ..BASE
    },
    Case {
        name: "rebind-port",
        files: Files::Sized(&[8 << 20]),
        relay: Some(REBIND_PORT),
        checks: REBIND_CHECKS,
        ..BASE
    },
    Case {
        name: "rebind-addr",
        files: Files::Sized(&[8 << 20]),
        relay: Some(REBIND_ADDR),
        msquic: Msquic {
            server_cannot: Some(
                "msquic 2.5's server stops answering once the client's IP address changes (found here; see docs/records/interop.md)",
            ),
            ..MSQUIC
        },
        checks: REBIND_CHECKS,
        ..BASE
    },
    // Neither endpoint supports these (they exit 127); run so that the table says so.
    Case { name: "v2", ..BASE },
    Case {
        name: "connectionmigration",
        ..BASE
    },
];

impl Case {
    /// The row named `name`.
    pub fn named(name: &str) -> Option<&'static Self> {
        CASES.iter().find(|c| c.name == name)
    }

    /// The cases' names, comma-separated.
    pub fn names() -> String {
        CASES.iter().map(|c| c.name).collect::<Vec<_>>().join(",")
    }

    /// `--cases`' value: `all`, or names separated by commas.
    ///
    /// # Errors
    /// An unknown name, with the known ones.
    pub fn parse_list(list: &str) -> Result<Vec<&'static Self>, String> {
        if list == "all" {
            return Ok(CASES.iter().collect());
        }
        list.split(',')
            .map(|name| {
                Self::named(name)
                    .ok_or_else(|| format!("unknown case {name:?}; the cases: {}", Self::names()))
            })
            .collect()
    }

    /// The files served: name and size.
    pub fn files(&self) -> Vec<(String, usize)> {
        match self.files {
            Files::Sized(sizes) => sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (format!("{}-{i}", self.name), n))
                .collect(),
            Files::Varied { prefix, count } => (0..count)
                .map(|i| (format!("{prefix}-{i}"), 32 + (i * 97) % 2000))
                .collect(),
        }
    }

    /// Why the msquic peer cannot take the client's (`client`) or the server's role.
    pub const fn msquic_cannot(&self, client: bool) -> Option<&'static str> {
        if client {
            self.msquic.client_cannot
        } else {
            self.msquic.server_cannot
        }
    }

    /// Runs the case's checks on what its run left; on success, what they saw.
    ///
    /// # Errors
    /// The first check that does not hold: the case and what differed.
    pub fn verify(&'static self, run: &Evidence<'_>) -> Result<String, Failure> {
        let mut seen = String::new();
        for check in self.checks {
            check
                .verify(self, run, &mut seen)
                .map_err(|what| Failure { case: self, what })?;
        }
        Ok(seen.trim_end_matches("; ").to_owned())
    }
}

/// A check that did not hold.
#[derive(Debug)]
pub struct Failure {
    pub case: &'static Case,
    /// What differed from what the check wants.
    pub what: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.case.name, self.what)
    }
}

/// What one run of a case left to check.
#[derive(Debug)]
pub struct Evidence<'a> {
    /// The client's downloads.
    pub downloads: &'a Path,
    pub reports: Reports,
    /// Zero where there was no relay.
    pub relay: RelayCounts,
    pub server: Impl,
}

/// The datagram size quinn-proto uses during the handshake.
const INITIAL_MTU: u64 = 1200;

impl Want {
    const fn holds(self, v: u64, files: u64) -> bool {
        match self {
            Self::Eq(n) => v == n,
            Self::AtLeast(n) => v >= n,
            Self::OnePerFile => v == files,
        }
    }

    fn describe(self, files: u64) -> String {
        match self {
            Self::Eq(n) => format!("wanted {n}"),
            Self::AtLeast(n) => format!("wanted at least {n}"),
            Self::OnePerFile => format!("wanted {files}, one per file"),
        }
    }
}

impl Impairment {
    const fn count(self, c: &RelayCounts) -> u64 {
        match self {
            Self::Lost => c.lost,
            Self::Corrupted => c.corrupted,
            Self::Blackholed => c.blackholed,
            Self::Rebound => c.rebinds,
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Self::Lost => "lost",
            Self::Corrupted => "corrupted",
            Self::Blackholed => "blackholed",
            Self::Rebound => "rebinds",
        }
    }

    const fn none(self) -> &'static str {
        match self {
            Self::Lost => "the relay lost nothing",
            Self::Corrupted => "the relay corrupted nothing",
            Self::Blackholed => "the blackhole swallowed nothing",
            Self::Rebound => "the relay never rebound the client",
        }
    }
}

impl Check {
    /// Whether it holds for `case`'s `run`; what it saw goes to `seen`.
    fn verify(self, case: &Case, run: &Evidence<'_>, seen: &mut String) -> Result<(), String> {
        match self {
            Self::FilesEqual => {
                for (name, len) in case.files() {
                    match fs::read(run.downloads.join(&name)) {
                        Ok(got) if got == content(&name, len) => {}
                        Ok(got) => {
                            return Err(format!(
                                "{name}: {} bytes differ from the {len} served",
                                got.len()
                            ));
                        }
                        Err(e) => return Err(format!("{name} not downloaded: {e}")),
                    }
                }
            }
            Self::Counter(side, path, want) => {
                let files = case.files().len() as u64;
                let client = matches!(side, Side::Client | Side::Both)
                    .then(|| ("client", run.reports.client(path)));
                let server = matches!(side, Side::Server | Side::Both)
                    .then(|| ("server", run.reports.server(path)));
                for (side, value) in [client, server].into_iter().flatten() {
                    let Some(v) = value else { continue };
                    let path = path.join(".");
                    if !want.holds(v, files) {
                        return Err(format!("{side} {path}: {v}, {}", want.describe(files)));
                    }
                    let _ = write!(seen, "{side} {path} {v}; ");
                }
            }
            Self::Alpn(want) => {
                let alpns: Vec<&str> = run
                    .reports
                    .clients
                    .iter()
                    .map(|v| v.get("alpn").and_then(Value::as_str).unwrap_or("none"))
                    .collect();
                if alpns.iter().any(|a| *a != want) {
                    return Err(format!("the client spoke {alpns:?}, not {want}"));
                }
            }
            Self::Relay(what) => {
                let n = what.count(&run.relay);
                if n == 0 {
                    return Err(what.none().to_owned());
                }
                let _ = write!(seen, "relay {} {n}; ", what.name());
            }
            Self::AmplificationLimit => {
                let RelayCounts {
                    window_client_bytes: client,
                    window_server_bytes: server,
                    ..
                } = run.relay;
                if client == 0 || server == 0 {
                    return Err(format!(
                        "nothing crossed the window: client {client} B, server {server} B"
                    ));
                }
                // Three times what it received. quinn-proto starts one more full datagram
                // (1200 B during the handshake) while any of that budget is left (quinn
                // issue 1082), so a neqo server may overshoot by less than one.
                let limit = 3 * client;
                let allowance = if run.server == Impl::Neqo {
                    INITIAL_MTU
                } else {
                    0
                };
                if server >= limit + allowance.max(1) {
                    return Err(format!(
                        "the server sent {server} B for the client's {client} B before validating it"
                    ));
                }
                let _ = write!(
                    seen,
                    "server sent {server} B for {client} B unvalidated{}; ",
                    if server > limit {
                        format!(
                            ", {} B over 3x: quinn-proto's one-datagram allowance",
                            server - limit
                        )
                    } else {
                        String::new()
                    }
                );
            }
        }
        Ok(())
    }
}

/// Bytes of file `name`: a fixed pseudo-random sequence (splitmix64 seeded by the name), so
/// that a shifted or mixed-up body does not compare equal.
pub fn content(name: &str, len: usize) -> Vec<u8> {
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

/// The JSON reports of the neqo side(s): the client's (one per process) and the server's.
#[derive(Debug, Default)]
pub struct Reports {
    pub clients: Vec<Value>,
    pub server: Option<Value>,
}

impl Reports {
    /// Those in `dir` of the neqo sides among `client` and `server`.
    ///
    /// # Errors
    /// A neqo side's report missing or unreadable.
    pub fn read(dir: &Path, client: Impl, server: Impl) -> Result<Self, String> {
        let mut clients = Vec::new();
        if client == Impl::Neqo {
            for n in 1.. {
                let p = dir.join(format!("client-{n}.json"));
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
            Some(report(&dir.join("server.json"))?)
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
#[derive(Debug, Default, Clone, Copy)]
pub struct RelayCounts {
    pub lost: u64,
    pub corrupted: u64,
    pub blackholed: u64,
    pub rebinds: u64,
    pub window_client_bytes: u64,
    pub window_server_bytes: u64,
}

impl RelayCounts {
    /// From the relay's standard output.
    pub fn parse(stdout: &str) -> Self {
        let mut c = Self::default();
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
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;

    fn case(name: &str) -> &'static Case {
        Case::named(name).unwrap()
    }

    /// A fresh directory holding `case`'s files as served.
    fn downloads(case: &Case, tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "neqo-interop-test-{}-{}-{tag}",
            std::process::id(),
            case.name
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (name, len) in case.files() {
            fs::write(dir.join(&name), content(&name, len)).unwrap();
        }
        dir
    }

    fn neqo_reports(client: Value, server: Value) -> Reports {
        Reports {
            clients: vec![client],
            server: Some(server),
        }
    }

    fn evidence(downloads: &Path, reports: Reports, relay: RelayCounts) -> Evidence<'_> {
        Evidence {
            downloads,
            reports,
            relay,
            server: Impl::Neqo,
        }
    }

    /// One check on its own, outside its case's list.
    fn check(c: Check, case: &Case, run: &Evidence<'_>) -> Result<String, String> {
        let mut seen = String::new();
        c.verify(case, run, &mut seen).map(|()| seen)
    }

    #[test]
    fn every_case_checks_its_files_first() {
        for c in CASES {
            assert!(
                matches!(c.checks.first(), Some(Check::FilesEqual)),
                "{}: {:?}",
                c.name,
                c.checks
            );
            assert!(!c.files().is_empty(), "{}", c.name);
        }
    }

    #[test]
    fn names_are_unique_and_known_to_run_endpoint_sh() {
        for (i, c) in CASES.iter().enumerate() {
            // `--cases` splits at commas; BASE's empty name is no case's.
            assert!(!c.name.is_empty() && !c.name.contains(','), "{c:?}");
            assert!(
                CASES[..i].iter().all(|o| o.name != c.name),
                "{} twice",
                c.name
            );
        }
        // The script's list of the cases it supports: every one is a row here.
        let script = fs::read_to_string(crate::runner::SCRIPT).unwrap();
        let list = script
            .split("case \"${TESTCASE:-}\" in")
            .nth(1)
            .and_then(|s| s.split(") ;;").next())
            .unwrap();
        let names: Vec<&str> = list
            .split(['|', '\\', '\n', ' '])
            .filter(|w| !w.is_empty())
            .collect();
        assert!(names.len() > 10, "{names:?}");
        for n in names {
            assert!(Case::named(n).is_some(), "run_endpoint.sh's {n:?}");
        }
    }

    /// A check about the relay needs a relay that does what it counts.
    #[test]
    fn relay_checks_have_a_relay_that_does_it() {
        for c in CASES {
            for check in c.checks {
                let flag = match check {
                    Check::Relay(Impairment::Lost) => "--loss",
                    Check::Relay(Impairment::Corrupted) => "--corrupt",
                    Check::Relay(Impairment::Blackholed) => "--blackhole",
                    Check::Relay(Impairment::Rebound) => "--rebind-after",
                    Check::AmplificationLimit => "--amplification-window",
                    _ => continue,
                };
                assert!(
                    c.relay.is_some_and(|args| args.contains(&flag)),
                    "{}: {check:?} without {flag}",
                    c.name
                );
            }
        }
    }

    #[test]
    fn case_lists_parse_once_and_unknown_names_are_refused() {
        let all = Case::parse_list("all").unwrap();
        assert_eq!(all.len(), CASES.len());
        let two = Case::parse_list("retry,zerortt").unwrap();
        assert_eq!(
            two.iter().map(|c| c.name).collect::<Vec<_>>(),
            ["retry", "zerortt"]
        );
        for bad in ["retry,bogus", "Retry", "", "retry,"] {
            let e = Case::parse_list(bad).unwrap_err();
            assert!(e.starts_with("unknown case"), "{bad:?}: {e}");
            for c in CASES {
                assert!(e.contains(c.name), "{bad:?}: {e} lacks {}", c.name);
            }
        }
    }

    #[test]
    fn files_are_named_and_sized_by_the_row() {
        assert_eq!(
            case("transfer").files(),
            [
                ("transfer-0".to_owned(), 1 << 20),
                ("transfer-1".to_owned(), 3 << 20),
                ("transfer-2".to_owned(), 5 << 20)
            ]
        );
        let mux = case("multiplexing").files();
        assert_eq!(mux.len(), 400);
        assert_eq!(mux[1], ("mux-1".to_owned(), 129));
    }

    #[test]
    fn a_failing_counter_names_the_case_and_what_differed() {
        let c = case("retry");
        let dir = downloads(c, "counter");
        let run = evidence(
            &dir,
            neqo_reports(
                json!({"tls": {"retries_accepted": 1}}),
                json!({"driver": {"retries": 0}}),
            ),
            RelayCounts::default(),
        );
        let e = c.verify(&run).unwrap_err();
        assert_eq!(e.case.name, "retry");
        assert_eq!(e.what, "server driver.retries: 0, wanted at least 1");
        assert_eq!(
            e.to_string(),
            "retry: server driver.retries: 0, wanted at least 1"
        );

        let run = evidence(
            &dir,
            neqo_reports(
                json!({"tls": {"retries_accepted": 1}}),
                json!({"driver": {"retries": 2}}),
            ),
            RelayCounts::default(),
        );
        assert_eq!(
            c.verify(&run).unwrap(),
            "server driver.retries 2; client tls.retries_accepted 1"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_msquic_side_is_not_held_to_neqo_counters() {
        let c = case("handshake");
        let dir = downloads(c, "msquic");
        let mut run = evidence(&dir, Reports::default(), RelayCounts::default());
        run.server = Impl::Msquic;
        assert_eq!(c.verify(&run).unwrap(), "");
        // A neqo client with two connections where the case wants one.
        run.reports.clients.push(json!({"connections": 2}));
        let e = c.verify(&run).unwrap_err();
        assert_eq!(e.to_string(), "handshake: client connections: 2, wanted 1");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_wrong_or_missing_file_fails() {
        let c = case("handshake");
        let dir = downloads(c, "files");
        let run = evidence(&dir, Reports::default(), RelayCounts::default());
        let mut wrong = content("handshake-0", 1024);
        wrong[512] ^= 1;
        fs::write(dir.join("handshake-0"), wrong).unwrap();
        let e = c.verify(&run).unwrap_err();
        assert_eq!(
            e.to_string(),
            "handshake: handshake-0: 1024 bytes differ from the 1024 served"
        );
        fs::remove_file(dir.join("handshake-0")).unwrap();
        let e = c.verify(&run).unwrap_err();
        assert!(e.what.starts_with("handshake-0 not downloaded"), "{e}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn ecn_checks_both_sides() {
        let c = case("ecn");
        let ecn = |tx: u64, unmarked: u64, rx: u64| json!({"driver": {"tx_ecn": {"ect0": tx, "not_ect": unmarked}, "rx_ecn": {"ect0": rx}}});
        let dir = PathBuf::new();
        let cases = [
            (ecn(5, 0, 5), ecn(5, 0, 5), None),
            (
                ecn(5, 0, 5),
                ecn(0, 0, 5),
                Some("server driver.tx_ecn.ect0: 0, wanted at least 1"),
            ),
            (
                ecn(5, 3, 5),
                ecn(5, 0, 5),
                Some("client driver.tx_ecn.not_ect: 3, wanted 0"),
            ),
            (
                ecn(5, 0, 5),
                ecn(5, 0, 0),
                Some("server driver.rx_ecn.ect0: 0, wanted at least 1"),
            ),
        ];
        for (client, server, want) in cases {
            let run = evidence(&dir, neqo_reports(client, server), RelayCounts::default());
            let got = c.checks[1..]
                .iter()
                .try_for_each(|&k| check(k, c, &run).map(drop));
            assert_eq!(got.err().as_deref(), want);
        }
    }

    #[test]
    fn http3_wants_h3_and_one_response_per_file() {
        let c = case("http3");
        let dir = PathBuf::new();
        let server = |n: u64| json!({"http3": {"responses": n}});
        let run = evidence(
            &dir,
            neqo_reports(json!({"alpn": "hq-interop", "connections": 1}), server(3)),
            RelayCounts::default(),
        );
        assert_eq!(
            check(Check::Alpn("h3"), c, &run).unwrap_err(),
            "the client spoke [\"hq-interop\"], not h3"
        );
        let responses = c.checks[3];
        let run = evidence(
            &dir,
            neqo_reports(json!({"alpn": "h3"}), server(2)),
            RelayCounts::default(),
        );
        assert!(check(Check::Alpn("h3"), c, &run).is_ok());
        assert_eq!(
            check(responses, c, &run).unwrap_err(),
            "server http3.responses: 2, wanted 3, one per file"
        );
    }

    #[test]
    fn relay_checks_want_the_impairment_to_have_happened() {
        let c = case("blackhole");
        let dir = PathBuf::new();
        let run = evidence(&dir, Reports::default(), RelayCounts::default());
        assert_eq!(
            check(Check::Relay(Impairment::Blackholed), c, &run).unwrap_err(),
            "the blackhole swallowed nothing"
        );
        let relay = RelayCounts::parse(
            "| direction | received | forwarded | lost | queue drops | corrupted | duplicated | reordered |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n\
             | client -> server | 100 | 90 | 7 | 0 | 3 | 0 | 0 |\n\
             | server -> client | 200 | 190 | 5 | 0 | 4 | 0 | 0 |\n\
             sessions: 0 open, 1 in all; blackholed 12; rebinds 1; window-client-bytes 1250; window-server-bytes 3600",
        );
        assert_eq!(
            (relay.lost, relay.corrupted, relay.blackholed, relay.rebinds),
            (12, 7, 12, 1)
        );
        let run = evidence(&dir, Reports::default(), relay);
        assert_eq!(
            check(Check::Relay(Impairment::Blackholed), c, &run).unwrap(),
            "relay blackholed 12; "
        );
    }

    #[test]
    fn amplification_allows_neqo_less_than_one_datagram_over() {
        let c = case("amplificationlimit");
        let dir = PathBuf::new();
        let at = |server_bytes: u64, server: Impl| {
            let mut run = evidence(
                &dir,
                Reports::default(),
                RelayCounts {
                    window_client_bytes: 1000,
                    window_server_bytes: server_bytes,
                    ..RelayCounts::default()
                },
            );
            run.server = server;
            check(Check::AmplificationLimit, c, &run)
        };
        assert!(at(3000, Impl::Msquic).is_ok());
        assert_eq!(
            at(3001, Impl::Msquic).unwrap_err(),
            "the server sent 3001 B for the client's 1000 B before validating it"
        );
        assert!(at(3000 + 1199, Impl::Neqo).is_ok());
        assert!(at(3000 + 1200, Impl::Neqo).is_err());
        assert!(
            at(0, Impl::Neqo)
                .unwrap_err()
                .starts_with("nothing crossed")
        );
    }
}
