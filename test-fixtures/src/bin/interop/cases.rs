//! The QUIC Interop Runner's test cases as one table: each row says what the endpoints are
//! started with, what the network between them does and what is checked afterwards. The
//! runner (`runner.rs`) reads nothing about a case but its row.
//!
//! neqo runs through `run_endpoint.sh`, which chooses its arguments from `TESTCASE` (the
//! runner's container protocol); the msquic peer has no such script, so its arguments are
//! here.

use std::{fmt, fmt::Write as _, fs, path::Path, time::Duration};

use neqo_report::{ClientReport, Report as _, ServerReport};
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

/// A counter of neqo's JSON reports that a check reads.
///
/// Both reports carry the same driver and TLS counter structs, but some of those count what
/// only one side does (the server sends Retries, the client accepts them): read from the
/// other side they are always 0, so a check of them there would pass or fail whatever
/// happened. Each counter says which sides keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Connections,
    DriverAccepted,
    DriverRetries,
    DriverPathChallenges,
    TxEcnEct0,
    TxEcnNotEct,
    RxEcnEct0,
    TlsRetriesAccepted,
    TlsFullHandshakes,
    TlsTicketsRedeemed,
    TlsZeroRttAttempted,
    TlsZeroRttAccepted,
    TlsKeyUpdates,
    TlsKeyUpdatesForced,
    Http3Responses,
}

impl Counter {
    #[cfg(test)]
    const ALL: [Self; 15] = [
        Self::Connections,
        Self::DriverAccepted,
        Self::DriverRetries,
        Self::DriverPathChallenges,
        Self::TxEcnEct0,
        Self::TxEcnNotEct,
        Self::RxEcnEct0,
        Self::TlsRetriesAccepted,
        Self::TlsFullHandshakes,
        Self::TlsTicketsRedeemed,
        Self::TlsZeroRttAttempted,
        Self::TlsZeroRttAccepted,
        Self::TlsKeyUpdates,
        Self::TlsKeyUpdatesForced,
        Self::Http3Responses,
    ];

    /// Its path in the JSON report, dotted: what messages call it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Connections => "connections",
            Self::DriverAccepted => "driver.accepted",
            Self::DriverRetries => "driver.retries",
            Self::DriverPathChallenges => "driver.path_challenges",
            Self::TxEcnEct0 => "driver.tx_ecn.ect0",
            Self::TxEcnNotEct => "driver.tx_ecn.not_ect",
            Self::RxEcnEct0 => "driver.rx_ecn.ect0",
            Self::TlsRetriesAccepted => "tls.retries_accepted",
            Self::TlsFullHandshakes => "tls.full_handshakes",
            Self::TlsTicketsRedeemed => "tls.tickets_redeemed",
            Self::TlsZeroRttAttempted => "tls.zero_rtt_attempted",
            Self::TlsZeroRttAccepted => "tls.zero_rtt_accepted",
            Self::TlsKeyUpdates => "tls.key_updates",
            Self::TlsKeyUpdatesForced => "tls.key_updates_forced",
            Self::Http3Responses => "http3.responses",
        }
    }

    /// Its value in a client's report; `None` if clients do not keep it.
    pub const fn client(self, r: &ClientReport) -> Option<u64> {
        let (d, t) = (&r.driver, &r.tls);
        Some(match self {
            Self::Connections => r.connections,
            Self::DriverPathChallenges => d.path_challenges,
            Self::TxEcnEct0 => d.tx_ecn.ect0,
            Self::TxEcnNotEct => d.tx_ecn.not_ect,
            Self::RxEcnEct0 => d.rx_ecn.ect0,
            Self::TlsRetriesAccepted => t.retries_accepted,
            Self::TlsFullHandshakes => t.full_handshakes,
            Self::TlsZeroRttAttempted => t.zero_rtt_attempted,
            Self::TlsZeroRttAccepted => t.zero_rtt_accepted,
            Self::TlsKeyUpdates => t.key_updates,
            Self::TlsKeyUpdatesForced => t.key_updates_forced,
            Self::DriverAccepted
            | Self::DriverRetries
            | Self::TlsTicketsRedeemed
            | Self::Http3Responses => return None,
        })
    }

    /// Its value in the server's report; `None` if the server does not keep it.
    pub const fn server(self, r: &ServerReport) -> Option<u64> {
        let (d, t) = (&r.driver, &r.tls);
        Some(match self {
            Self::DriverAccepted => d.accepted,
            Self::DriverRetries => d.retries,
            Self::DriverPathChallenges => d.path_challenges,
            Self::TxEcnEct0 => d.tx_ecn.ect0,
            Self::TxEcnNotEct => d.tx_ecn.not_ect,
            Self::RxEcnEct0 => d.rx_ecn.ect0,
            Self::TlsTicketsRedeemed => t.tickets_redeemed,
            Self::TlsZeroRttAttempted => t.zero_rtt_attempted,
            Self::TlsKeyUpdates => t.key_updates,
            Self::Http3Responses => r.http3.responses,
            Self::Connections
            | Self::TlsRetriesAccepted
            | Self::TlsFullHandshakes
            | Self::TlsZeroRttAccepted
            | Self::TlsKeyUpdatesForced => return None,
        })
    }
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
    /// A counter of a neqo endpoint's JSON report (the client's summed over its processes).
    /// An msquic side writes no such report and is not checked.
    Counter(Side, Counter, Want),
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
        Counter::DriverPathChallenges,
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
            Check::Counter(Side::Client, Counter::Connections, Want::Eq(1)),
            Check::Counter(Side::Server, Counter::DriverAccepted, Want::Eq(1)),
            Check::Counter(Side::Server, Counter::DriverRetries, Want::Eq(0)),
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
            Check::Counter(Side::Server, Counter::DriverRetries, Want::AtLeast(1)),
            Check::Counter(Side::Client, Counter::TlsRetriesAccepted, Want::AtLeast(1)),
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
            Check::Counter(Side::Client, Counter::Connections, Want::Eq(2)),
            Check::Counter(Side::Client, Counter::TlsFullHandshakes, Want::Eq(1)),
            Check::Counter(Side::Server, Counter::TlsTicketsRedeemed, Want::AtLeast(1)),
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
            Check::Counter(Side::Client, Counter::TlsZeroRttAccepted, Want::AtLeast(1)),
            Check::Counter(Side::Server, Counter::TlsZeroRttAttempted, Want::AtLeast(1)),
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
            Check::Counter(Side::Client, Counter::Connections, Want::Eq(1)),
            Check::Counter(Side::Server, Counter::Http3Responses, Want::OnePerFile),
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
            Check::Counter(Side::Client, Counter::TlsKeyUpdatesForced, Want::AtLeast(1)),
            Check::Counter(Side::Server, Counter::TlsKeyUpdates, Want::AtLeast(1)),
        ],
        ..BASE
    },
    Case {
        name: "ecn",
        // msquic marks what it sends only with `EcnEnabled`, which is off by default.
        msquic: Msquic {
            server_args: &["--ecn"],
            client_args: &["--ecn"],
            ..MSQUIC
        },
        checks: &[
            Check::FilesEqual,
            Check::Counter(Side::Both, Counter::TxEcnEct0, Want::AtLeast(1)),
            // quinn-proto stops marking at the first ACK without (valid) ECN counts.
            Check::Counter(Side::Both, Counter::TxEcnNotEct, Want::Eq(0)),
            Check::Counter(Side::Both, Counter::RxEcnEct0, Want::AtLeast(1)),
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
            Self::Counter(side, counter, want) => {
                let files = case.files().len() as u64;
                let client = matches!(side, Side::Client | Side::Both)
                    .then(|| ("client", run.reports.client(counter)));
                let server = matches!(side, Side::Server | Side::Both)
                    .then(|| ("server", run.reports.server(counter)));
                for (side, value) in [client, server].into_iter().flatten() {
                    let Some(v) = value? else { continue };
                    let name = counter.name();
                    if !want.holds(v, files) {
                        return Err(format!("{side} {name}: {v}, {}", want.describe(files)));
                    }
                    let _ = write!(seen, "{side} {name} {v}; ");
                }
            }
            Self::Alpn(want) => {
                let alpns: Vec<&str> = run
                    .reports
                    .clients
                    .iter()
                    .map(|r| r.alpn.as_str())
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
    pub clients: Vec<ClientReport>,
    pub server: Option<ServerReport>,
}

impl Reports {
    /// Those in `dir` of the neqo sides among `client` and `server`.
    ///
    /// # Errors
    /// A neqo side's report missing, unreadable, or lacking a field (named, with the file).
    pub fn read(dir: &Path, client: Impl, server: Impl) -> Result<Self, String> {
        let mut clients = Vec::new();
        if client == Impl::Neqo {
            for n in 1.. {
                let p = dir.join(format!("client-{n}.json"));
                if !p.exists() {
                    break;
                }
                clients.push(ClientReport::read(&p).map_err(|e| e.to_string())?);
            }
            if clients.is_empty() {
                return Err("no client report".to_owned());
            }
        }
        let server = if server == Impl::Neqo {
            Some(ServerReport::read(&dir.join("server.json")).map_err(|e| e.to_string())?)
        } else {
            None
        };
        Ok(Self { clients, server })
    }

    /// A client counter, summed over its processes: `None` for the msquic client.
    ///
    /// # Errors
    /// A counter clients do not keep.
    fn client(&self, c: Counter) -> Result<Option<u64>, String> {
        if self.clients.is_empty() {
            return Ok(None);
        }
        self.clients
            .iter()
            .map(|r| c.client(r))
            .sum::<Option<u64>>()
            .map(Some)
            .ok_or_else(|| format!("the client keeps no {}", c.name()))
    }

    /// A server counter: `None` for the msquic server.
    ///
    /// # Errors
    /// A counter the server does not keep.
    fn server(&self, c: Counter) -> Result<Option<u64>, String> {
        self.server
            .as_ref()
            .map(|r| {
                c.server(r)
                    .ok_or_else(|| format!("the server keeps no {}", c.name()))
            })
            .transpose()
    }
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

    use neqo_report::{DriverCounters, EcnCounts};
    use serde_json::Value;

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

    /// A client report of zeros and empty strings, changed by `set`.
    fn client_report(set: impl FnOnce(&mut ClientReport)) -> ClientReport {
        let mut r = ClientReport::default();
        set(&mut r);
        r
    }

    /// A server report of zeros and empty strings, changed by `set`.
    fn server_report(set: impl FnOnce(&mut ServerReport)) -> ServerReport {
        let mut r = ServerReport::default();
        set(&mut r);
        r
    }

    fn neqo_reports(client: ClientReport, server: ServerReport) -> Reports {
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
                client_report(|r| r.tls.retries_accepted = 1),
                server_report(|r| r.driver.retries = 0),
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
                client_report(|r| r.tls.retries_accepted = 1),
                server_report(|r| r.driver.retries = 2),
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
        run.reports
            .clients
            .push(client_report(|r| r.connections = 2));
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
        let ecn = |tx: u64, unmarked: u64, rx: u64| DriverCounters {
            tx_ecn: EcnCounts {
                ect0: tx,
                not_ect: unmarked,
                ..EcnCounts::default()
            },
            rx_ecn: EcnCounts {
                ect0: rx,
                ..EcnCounts::default()
            },
            ..DriverCounters::default()
        };
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
            let reports = neqo_reports(
                client_report(|r| r.driver = client),
                server_report(|r| r.driver = server),
            );
            let run = evidence(&dir, reports, RelayCounts::default());
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
        let server = |n: u64| server_report(|r| r.http3.responses = n);
        let run = evidence(
            &dir,
            neqo_reports(
                client_report(|r| {
                    r.alpn = "hq-interop".to_owned();
                    r.connections = 1;
                }),
                server(3),
            ),
            RelayCounts::default(),
        );
        assert_eq!(
            check(Check::Alpn("h3"), c, &run).unwrap_err(),
            "the client spoke [\"hq-interop\"], not h3"
        );
        let responses = c.checks[3];
        let run = evidence(
            &dir,
            neqo_reports(client_report(|r| r.alpn = "h3".to_owned()), server(2)),
            RelayCounts::default(),
        );
        assert!(check(Check::Alpn("h3"), c, &run).is_ok());
        assert_eq!(
            check(responses, c, &run).unwrap_err(),
            "server http3.responses: 2, wanted 3, one per file"
        );
    }

    /// Whether every side `side` names keeps `counter`.
    fn kept_by(side: Side, counter: Counter) -> bool {
        let client = counter.client(&ClientReport::default()).is_some();
        let server = counter.server(&ServerReport::default()).is_some();
        match side {
            Side::Client => client,
            Side::Server => server,
            Side::Both => client && server,
        }
    }

    #[test]
    fn every_counter_checked_is_kept_by_the_sides_checked() {
        for c in CASES {
            for check in c.checks {
                if let Check::Counter(side, counter, _) = *check {
                    assert!(
                        kept_by(side, counter),
                        "{}: {side:?} keeps no {}",
                        c.name,
                        counter.name()
                    );
                }
            }
        }
        // What a wrong row would be caught by.
        assert!(!kept_by(Side::Client, Counter::DriverRetries));
        assert!(!kept_by(Side::Server, Counter::Connections));
        assert!(!kept_by(Side::Both, Counter::Http3Responses));
        assert!(kept_by(Side::Both, Counter::TxEcnEct0));
    }

    /// A row whose side does not keep its counter fails rather than reading a 0.
    #[test]
    fn a_counter_the_side_does_not_keep_fails() {
        let c = case("handshake");
        let run = evidence(
            Path::new(""),
            neqo_reports(ClientReport::default(), ServerReport::default()),
            RelayCounts::default(),
        );
        let wrong = Check::Counter(Side::Client, Counter::DriverRetries, Want::Eq(0));
        assert_eq!(
            check(wrong, c, &run).unwrap_err(),
            "the client keeps no driver.retries"
        );
        let wrong = Check::Counter(Side::Both, Counter::Connections, Want::Eq(0));
        assert_eq!(
            check(wrong, c, &run).unwrap_err(),
            "the server keeps no connections"
        );
    }

    /// Each counter's name is its path in the report's JSON, and its reader reads that field:
    /// a distinct number written at the path comes back through the reader.
    #[test]
    fn counter_names_are_their_json_paths() {
        fn at<'v>(v: &'v mut Value, name: &str) -> &'v mut Value {
            name.split('.').fold(v, |v, k| {
                v.get_mut(k)
                    .unwrap_or_else(|| panic!("{name}: no {k} in the report"))
            })
        }
        for (i, counter) in Counter::ALL.into_iter().enumerate() {
            let n = 1000 + i as u64;
            let name = counter.name();
            let mut sides = 0;
            if counter.client(&ClientReport::default()).is_some() {
                let mut v = serde_json::to_value(ClientReport::default()).unwrap();
                *at(&mut v, name) = n.into();
                let r: ClientReport = serde_json::from_value(v).unwrap();
                assert_eq!(counter.client(&r), Some(n), "client {name}");
                sides += 1;
            }
            if counter.server(&ServerReport::default()).is_some() {
                let mut v = serde_json::to_value(ServerReport::default()).unwrap();
                *at(&mut v, name) = n.into();
                let r: ServerReport = serde_json::from_value(v).unwrap();
                assert_eq!(counter.server(&r), Some(n), "server {name}");
                sides += 1;
            }
            assert!(sides > 0, "{name}: kept by neither side");
            assert!(
                Counter::ALL[..i].iter().all(|o| o.name() != name),
                "{name} twice"
            );
        }
    }

    /// A report without a field the runner reads is an error naming the file and the field,
    /// not a 0.
    #[test]
    fn a_report_missing_a_field_is_refused() {
        let dir =
            std::env::temp_dir().join(format!("neqo-interop-test-{}-reports", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let server = ServerReport::default().to_json().unwrap();
        fs::write(dir.join("server.json"), &server).unwrap();
        let mut client = serde_json::to_value(ClientReport::default()).unwrap();
        fs::write(
            dir.join("client-1.json"),
            serde_json::to_string(&client).unwrap(),
        )
        .unwrap();
        let r = Reports::read(&dir, Impl::Neqo, Impl::Neqo).unwrap();
        assert_eq!((r.clients.len(), r.server.is_some()), (1, true));

        client["tls"]
            .as_object_mut()
            .unwrap()
            .remove("full_handshakes");
        fs::write(
            dir.join("client-1.json"),
            serde_json::to_string(&client).unwrap(),
        )
        .unwrap();
        let e = Reports::read(&dir, Impl::Neqo, Impl::Neqo).unwrap_err();
        assert!(
            e.contains("client-1.json") && e.contains("missing field `full_handshakes`"),
            "{e}"
        );
        // An msquic client's side is not read.
        assert!(Reports::read(&dir, Impl::Msquic, Impl::Neqo).is_ok());
        fs::remove_dir_all(dir).unwrap();
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
