//! The soak's clients: each job a `neqo-client` process (through a `neqo-relay` for the
//! impaired ones) of a kind drawn from the seed, what it must deliver, the fault it suffers if
//! any, and the verdict on how it ended.

use std::{
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use neqo_report::{ClientReport, ReadError, Report as _};
use rand::{Rng as _, rngs::StdRng, seq::IndexedRandom as _};
use test_fixtures::{Measured, Server, release_binary};

/// How often the impaired jobs' relay gives its client a new port.
const REBIND_EVERY_MS: u64 = 300;

/// The longest a job may run: past it, it is a hang (a bug).
pub const JOB_LIMIT: Duration = Duration::from_secs(180);

/// The files served from the root: (name, size).
pub const FILES: [(&str, usize); 4] = [
    ("empty", 0),
    ("small", 1000),
    ("page", 100_003),
    ("big", 3_000_017),
];

/// Byte `i` of a served file: no pattern a misplaced chunk could repeat.
pub fn file_byte(i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `hq-interop` `/N` downloads, several connections and requests.
    Download,
    /// A file from the root, saved with `-o` and compared.
    File,
    /// `perf` uploads (and a download).
    Upload,
    /// Connection churn: many short connections, resumed with tickets and 0-RTT.
    Churn,
    /// Through a relay with loss, reordering and a new client port every 300 ms.
    Impaired,
    /// A slow reader: the client stopped (SIGSTOP) for most of every second.
    Slow,
    /// Cancelled by the client (SIGINT) mid-transfer.
    Cancelled,
    /// Killed (SIGKILL) mid-transfer: the server must time the connection out.
    Killed,
    /// A path the server refuses with a stream reset.
    Refused,
    /// HTTP/3, as a browser loads a page: the page and 30 files and generated bodies at once
    /// on one connection.
    H3Page,
    /// HTTP/3 downloads of 8 to 32 MB, over one or two connections.
    H3Download,
    /// HTTP/3 POSTs of 100 kB to 8 MB, each answered with its count.
    H3Upload,
    /// HTTP/3 responses given up on mid-body (STOP_SENDING), the connection going on.
    H3Cancel,
    /// HTTP/3 through a relay with loss, reordering and a new client port every 300 ms.
    H3Impaired,
    /// A server of its own shut down under HTTP/3 load: GOAWAY, the requests it took answered,
    /// the later ones rejected, a clean exit.
    H3Drain,
    /// A server of its own (`hq-interop`) shut down during a long download: with the default
    /// drain period the download finishes; with half a second it is cut, and the client and
    /// the server's report both say so; a clean exit either way.
    HqDrain,
}

impl Kind {
    /// Each kind and its weight in the mix.
    pub const MIX: [(Self, u32); 16] = [
        (Self::Download, 6),
        (Self::File, 3),
        (Self::Upload, 3),
        (Self::Churn, 2),
        (Self::Impaired, 2),
        (Self::Slow, 1),
        (Self::Cancelled, 2),
        (Self::Killed, 1),
        (Self::Refused, 1),
        (Self::H3Page, 4),
        (Self::H3Download, 2),
        (Self::H3Upload, 2),
        (Self::H3Cancel, 2),
        (Self::H3Impaired, 1),
        (Self::H3Drain, 1),
        (Self::HqDrain, 1),
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Download => "download",
            Self::File => "file",
            Self::Upload => "upload",
            Self::Churn => "churn",
            Self::Impaired => "impaired",
            Self::Slow => "slow reader",
            Self::Cancelled => "cancelled",
            Self::Killed => "killed",
            Self::Refused => "refused",
            Self::H3Page => "h3 page",
            Self::H3Download => "h3 download",
            Self::H3Upload => "h3 upload",
            Self::H3Cancel => "h3 cancel",
            Self::H3Impaired => "h3 impaired",
            Self::H3Drain => "h3 drain",
            Self::HqDrain => "hq drain",
        }
    }
}

/// What a job must deliver.
#[derive(Debug, Clone)]
enum Expect {
    /// Success: this many requests, this many body bytes received (verified by the client).
    Transfer { requests: u64, bytes: u64 },
    /// Success, and the saved file equal to served file `FILES[i]`.
    File { index: usize, saved: PathBuf },
    /// Success: this many requests, at least this many bytes sent.
    Upload { requests: u64, sent: u64 },
    /// Failure, the stream reset by the server.
    Reset,
    /// Anything but a hang: the fault ends it.
    Faulted,
    /// Success: `requests` answered whole, `cancelled` given up on.
    Cancel { requests: u64, cancelled: u64 },
    /// Its server drained: of `total` requests each answered or rejected, none failed but
    /// those the h3 crate's client cannot tell unprocessed (see the verdict), and the server
    /// exited cleanly, its report (`report`) counting what the client got and none cut.
    Drain { total: u64, report: PathBuf },
    /// Its server drained during one download of `bytes`: whole, or cut with the server's
    /// reset (never taken for unprocessed), as the server's report (`report`) counts it; the
    /// server exited cleanly.
    CutOrWhole { bytes: u64, report: PathBuf },
}

/// A signal for the client, by `kill`.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGINT at this time after the start.
    Interrupt(Duration),
    /// SIGKILL at this time after the start.
    Kill(Duration),
    /// SIGSTOP for 700 ms of every second.
    Stalls,
    /// SIGTERM for the job's own server once its metrics at `.0` show some of metric `.2`
    /// (responses, or response bytes), at least `.1` after the start.
    Drain(SocketAddr, Duration, &'static str),
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// It failed, as the fault it suffered explains.
    Explained(String),
    /// It failed and nothing injected explains it: a bug.
    Unexplained(String),
}

/// What a finished job counts for.
#[derive(Debug, Clone)]
pub struct Finished {
    pub kind: Kind,
    pub verdict: Verdict,
    pub requests: u64,
    pub bytes: u64,
}

pub struct Job {
    kind: Kind,
    expect: Expect,
    fault: Option<Fault>,
    child: Child,
    relay: Option<Server>,
    /// A server of the job's own ([`Kind::H3Drain`], [`Kind::HqDrain`]).
    own_server: Option<Server>,
    started: Instant,
    dir: PathBuf,
    /// The client is stopped now (the slow reader).
    stopped: bool,
    signalled: bool,
}

/// A relay with 1 % loss and reordering, 2 ms each way, and a new client port every
/// [`REBIND_EVERY_MS`], in front of `server`.
fn impairing_relay(server: SocketAddr, seed: u32) -> anyhow::Result<Server> {
    Server::start(
        Command::new(release_binary("neqo-relay")).args([
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--upstream".into(),
            server.to_string(),
            "--loss".into(),
            "0.01".into(),
            "--reorder".into(),
            "0.01".into(),
            "--delay".into(),
            "2".into(),
            "--rebind-every".into(),
            REBIND_EVERY_MS.to_string(),
            "--seed".into(),
            seed.to_string(),
        ]),
        Duration::from_secs(20),
    )
    .map_err(|e| anyhow::anyhow!("neqo-relay: {e}"))
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A server of a drain job's own: `neqo-server` with `args` (the job's settings) on a free
/// port of 127.0.0.1, one worker, its metrics on another; started, with the fault that stops
/// it once its metrics show some of `metric`, between 0.3 and 1.5 s after the start.
fn server_to_drain<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
    metric: &'static str,
    rng: &mut StdRng,
) -> anyhow::Result<(Server, Fault)> {
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let s = Server::start(
        Command::new(release_binary("neqo-server"))
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--workers", "1", "--metrics"])
            .arg(metrics.to_string()),
        Duration::from_secs(20),
    )
    .map_err(|e| anyhow::anyhow!("neqo-server (to drain): {e}"))?;
    let after = Duration::from_millis(rng.random_range(300..1500));
    Ok((s, Fault::Drain(metrics, after, metric)))
}

/// The sum of `metric`'s samples at the metrics endpoint `addr`; `None` when it does not
/// answer (within a second).
fn metric_sum(addr: SocketAddr, metric: &str) -> Option<u64> {
    use std::io::{Read as _, Write as _};
    let limit = Duration::from_secs(1);
    let mut s = std::net::TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let n: f64 = out
        .lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a count"
    )]
    Some(n as u64)
}

/// A drain job's server and its report (`report`): the report when the server exited
/// cleanly, otherwise the job's verdict, which says what went wrong.
fn drained(
    own: Option<&std::io::Result<Measured>>,
    report: &std::path::Path,
) -> Result<neqo_report::ServerReport, Verdict> {
    let m = match own {
        Some(Ok(m)) => m,
        Some(Err(e)) => return Err(Verdict::Unexplained(format!("the drained server: {e}"))),
        None => return Err(Verdict::Unexplained("no server to drain".into())),
    };
    if !m.success() || m.killed {
        return Err(Verdict::Unexplained(format!(
            "the drained server's exit: {}",
            m.ending()
        )));
    }
    neqo_report::ServerReport::read(report).map_err(|e| {
        Verdict::Unexplained(format!("the drained server's report: {e} ({})", m.ending()))
    })
}

fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Job {
    /// Starts job number `n` of kind `kind` against `server`, its files in `dir` (made here);
    /// a server of its own serves h3 through the service path if `h3_service`.
    pub fn start(
        kind: Kind,
        n: u64,
        (server, h3_service): (SocketAddr, bool),
        dir: &Path,
        rng: &mut StdRng,
    ) -> anyhow::Result<Self> {
        let dir = dir.join(format!("job-{n}"));
        std::fs::create_dir_all(&dir)?;
        let json = dir.join("client.json");
        let mut args: Vec<String> = vec!["--insecure".into(), "--no-progress".into()];
        let mut target = server;
        let mut relay = None;
        let mut own_server = None;
        let mut fault = None;
        let url = |to: SocketAddr, path: &str| format!("https://{to}{path}");
        let expect = match kind {
            Kind::Download => {
                let size = *[10_000u64, 100_000, 1_000_000, 8_000_000]
                    .choose(rng)
                    .unwrap_or(&1);
                let conns = rng.random_range(1..=4u64);
                let n = rng.random_range(1..=3u64);
                args.extend([
                    url(target, &format!("/{size}")),
                    "--connections".into(),
                    conns.to_string(),
                    "--concurrency".into(),
                    conns.to_string(),
                    "-n".into(),
                    n.to_string(),
                ]);
                if rng.random_bool(0.5) {
                    args.push("--parallel".into());
                }
                Expect::Transfer {
                    requests: conns * n,
                    bytes: conns * n * size,
                }
            }
            Kind::File => {
                let index = rng.random_range(0..FILES.len());
                let saved = dir.join("body");
                args.extend([
                    url(target, &format!("/{}", FILES[index].0)),
                    "-o".into(),
                    saved.to_string_lossy().into_owned(),
                ]);
                Expect::File { index, saved }
            }
            Kind::Upload => {
                let up = *[100_000u64, 1_000_000, 8_000_000].choose(rng).unwrap_or(&1);
                let down = *[0u64, 1_000_000].choose(rng).unwrap_or(&0);
                let n = rng.random_range(1..=2u64);
                args.extend([
                    url(target, "/"),
                    "--alpn".into(),
                    "perf".into(),
                    "--upload".into(),
                    up.to_string(),
                    "--download".into(),
                    down.to_string(),
                    "-n".into(),
                    n.to_string(),
                ]);
                Expect::Upload {
                    requests: n,
                    sent: n * up,
                }
            }
            Kind::Churn => {
                let conns = rng.random_range(8..=16u64);
                args.extend([
                    url(target, "/1000"),
                    "--connections".into(),
                    conns.to_string(),
                    "--concurrency".into(),
                    "3".into(),
                ]);
                Expect::Transfer {
                    requests: conns,
                    bytes: conns * 1000,
                }
            }
            Kind::Impaired | Kind::H3Impaired => {
                let r = impairing_relay(server, rng.random())?;
                target = r.addr();
                relay = Some(r);
                args.extend([url(target, "/4000000"), "-n".into(), "2".into()]);
                if kind == Kind::H3Impaired {
                    args.extend(["--alpn".into(), "h3".into()]);
                }
                Expect::Transfer {
                    requests: 2,
                    bytes: 8_000_000,
                }
            }
            Kind::H3Page => {
                // The page, then 30 files and generated bodies, all at once.
                args.extend(["--alpn".into(), "h3".into(), "--parallel".into()]);
                let mut bytes = FILES[2].1 as u64;
                args.push(url(target, &format!("/{}", FILES[2].0)));
                for _ in 0..30 {
                    if rng.random_bool(0.5) {
                        let (name, size) = FILES[rng.random_range(0..3)];
                        bytes += size as u64;
                        args.push(url(target, &format!("/{name}")));
                    } else {
                        let size = rng.random_range(1..=50_000u64);
                        bytes += size;
                        args.push(url(target, &format!("/{size}")));
                    }
                }
                Expect::Transfer {
                    requests: 31,
                    bytes,
                }
            }
            Kind::H3Download => {
                let size = *[8_000_000u64, 32_000_000].choose(rng).unwrap_or(&1);
                let conns = rng.random_range(1..=2u64);
                let n = rng.random_range(1..=2u64);
                args.extend([
                    url(target, &format!("/{size}")),
                    "--alpn".into(),
                    "h3".into(),
                    "--connections".into(),
                    conns.to_string(),
                    "--concurrency".into(),
                    conns.to_string(),
                    "-n".into(),
                    n.to_string(),
                ]);
                Expect::Transfer {
                    requests: conns * n,
                    bytes: conns * n * size,
                }
            }
            Kind::H3Upload => {
                let up = *[100_000u64, 1_000_000, 8_000_000].choose(rng).unwrap_or(&1);
                let n = rng.random_range(1..=3u64);
                args.extend([
                    url(target, "/upload"),
                    "--alpn".into(),
                    "h3".into(),
                    "--upload".into(),
                    up.to_string(),
                    "-n".into(),
                    n.to_string(),
                ]);
                if rng.random_bool(0.5) {
                    args.push("--parallel".into());
                }
                Expect::Upload {
                    requests: n,
                    sent: n * up,
                }
            }
            Kind::H3Cancel => {
                // Long responses given up on after 100 kB to 2 MB, short ones whole, in turn
                // on one connection.
                let after = rng.random_range(100_000..=2_000_000u64);
                let n = rng.random_range(2..=4u64);
                args.extend([
                    url(target, "/50000"),
                    url(target, "/400000000"),
                    "--alpn".into(),
                    "h3".into(),
                    "--cancel-after".into(),
                    after.to_string(),
                    "-n".into(),
                    n.to_string(),
                ]);
                Expect::Cancel {
                    requests: n,
                    cancelled: n,
                }
            }
            Kind::H3Drain => {
                let report = dir.join("server.json");
                let settings = ["--alpn", "h3", "--drain-timeout", "5"]
                    .map(std::ffi::OsStr::new)
                    .into_iter()
                    .chain([std::ffi::OsStr::new("--json"), report.as_os_str()])
                    .chain(h3_service.then_some("--h3-service".as_ref()));
                let (s, f) = server_to_drain(settings, "neqo_server_http3_responses_total", rng)?;
                target = s.addr();
                own_server = Some(s);
                fault = Some(f);
                let conns = rng.random_range(1..=4u64);
                // Far more than is answered before the shutdown (all at once, fewer: a task
                // each).
                let parallel = rng.random_bool(0.5);
                let n = if parallel { 5000 } else { 100_000 };
                args.extend([
                    url(target, "/100000"),
                    "--alpn".into(),
                    "h3".into(),
                    "--connections".into(),
                    conns.to_string(),
                    "--concurrency".into(),
                    conns.to_string(),
                    "-n".into(),
                    n.to_string(),
                ]);
                if parallel {
                    args.push("--parallel".into());
                }
                Expect::Drain {
                    total: conns * n,
                    report,
                }
            }
            Kind::HqDrain => {
                let report = dir.join("server.json");
                // Half the jobs cut: a download far longer than half a second's drain.
                let cut = rng.random_bool(0.5);
                let (drain, bytes) = if cut {
                    (Some("0.5"), 4_000_000_000u64)
                } else {
                    (None, 400_000_000)
                };
                let settings = [std::ffi::OsStr::new("--json"), report.as_os_str()]
                    .into_iter()
                    .chain(
                        drain
                            .map(|d| ["--drain-timeout".as_ref(), d.as_ref()])
                            .into_iter()
                            .flatten(),
                    );
                let (s, f) = server_to_drain(settings, "neqo_server_response_bytes_total", rng)?;
                target = s.addr();
                own_server = Some(s);
                fault = Some(f);
                args.push(url(target, &format!("/{bytes}")));
                Expect::CutOrWhole { bytes, report }
            }
            Kind::Slow => {
                fault = Some(Fault::Stalls);
                args.push(url(target, "/16000000"));
                Expect::Transfer {
                    requests: 1,
                    bytes: 16_000_000,
                }
            }
            Kind::Cancelled => {
                fault = Some(Fault::Interrupt(Duration::from_millis(
                    rng.random_range(100..800),
                )));
                args.push(url(target, "/400000000"));
                Expect::Faulted
            }
            Kind::Killed => {
                fault = Some(Fault::Kill(Duration::from_millis(
                    rng.random_range(100..800),
                )));
                args.push(url(target, "/400000000"));
                Expect::Faulted
            }
            Kind::Refused => {
                args.push(url(target, "//etc/passwd"));
                Expect::Reset
            }
        };
        args.extend(["--json".into(), json.to_string_lossy().into_owned()]);
        let child = Command::new(release_binary("neqo-client"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("stdout"))?)
            .stderr(std::fs::File::create(dir.join("stderr"))?)
            .spawn()?;
        Ok(Self {
            kind,
            expect,
            fault,
            child,
            relay,
            own_server,
            started: Instant::now(),
            dir,
            stopped: false,
            signalled: false,
        })
    }

    /// Delivers its fault when due; returns how it ended once it has (its files removed).
    pub fn poll(&mut self) -> Option<Finished> {
        let age = self.started.elapsed();
        let pid = self.child.id();
        match self.fault {
            Some(Fault::Interrupt(at)) if !self.signalled && age >= at => {
                kill(pid, "-INT");
                self.signalled = true;
            }
            Some(Fault::Kill(at)) if !self.signalled && age >= at => {
                kill(pid, "-KILL");
                self.signalled = true;
            }
            Some(Fault::Stalls) => {
                let stop = age.subsec_millis() < 700;
                if stop != self.stopped {
                    kill(pid, if stop { "-STOP" } else { "-CONT" });
                    self.stopped = stop;
                }
            }
            // Once responses flow (or after 20 s: a load that never started is the client's
            // verdict to give), the server's SIGTERM.
            Some(Fault::Drain(metrics, after, metric))
                if !self.signalled
                    && age >= after
                    && (age >= Duration::from_secs(20)
                        || metric_sum(metrics, metric).is_some_and(|n| n > 0)) =>
            {
                if let Some(s) = &self.own_server {
                    kill(s.id(), "-TERM");
                }
                self.signalled = true;
            }
            _ => {}
        }
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) if age < JOB_LIMIT => return None,
            _ => {
                kill(pid, "-CONT");
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Some(
                    self.finish(Verdict::Unexplained(format!("no end after {JOB_LIMIT:?}"))),
                );
            }
        };
        let stderr = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        // A client that was killed, or failed before it could write, leaves no report: it
        // delivered nothing the job can count.
        let report = match ClientReport::read(&self.dir.join("client.json")) {
            Ok(r) => Some(r),
            Err(ReadError::Io { .. }) => None,
            Err(e) => {
                eprintln!("soak: {e}");
                None
            }
        };
        let u = |f: fn(&ClientReport) -> u64| report.as_ref().map_or(0, f);
        let (requests, received, sent, failed) = (
            u(|r| r.requests),
            u(|r| r.bytes_received),
            u(|r| r.bytes_sent),
            u(|r| r.failed_requests),
        );
        let (rejected, cancelled) = (u(|r| r.rejected_requests), u(|r| r.cancelled_requests));
        // The job's own server, stopped by its SIGTERM (or now): its exit. Once signalled it
        // is only waited for: a second SIGTERM would end it at once.
        let signalled = self.signalled;
        let own = self.own_server.take().map(|s| {
            if signalled {
                s.wait(Duration::from_secs(45))
            } else {
                s.stop_within(Duration::from_secs(15))
            }
        });
        // The relay's own record, once it has stopped: how often it rebound the client (kept
        // beside the client's files, which stay when the job failed).
        let relay = self.relay.take().and_then(|r| r.stop().ok());
        if let Some(m) = &relay {
            let _ = std::fs::write(self.dir.join("relay.out"), &m.stdout);
        }
        let rebinds = relay.and_then(|m| relay_rebinds(&m.stdout));
        let last_line = stderr.lines().rev().find(|l| !l.is_empty()).unwrap_or("");
        let failure = |what: &str| format!("{what}: {status}; {last_line}");
        let verdict = match &self.expect {
            _ if !status.success()
                && self.fault.is_none_or(|f| matches!(f, Fault::Stalls))
                && !matches!(
                    self.expect,
                    Expect::Drain { .. } | Expect::CutOrWhole { .. }
                ) =>
            {
                match self.expect {
                    Expect::Reset if stderr.contains("reset") => {
                        Verdict::Explained("the server reset the refused path".into())
                    }
                    _ if matches!(self.kind, Kind::Impaired | Kind::H3Impaired)
                        && requests == 0
                        && rebinds.is_some_and(|n| n > 0)
                        && report.as_ref().is_some_and(unconfirmed_at_first_rebind) =>
                    {
                        Verdict::Explained(
                            "the relay rebound the client before its handshake was confirmed"
                                .into(),
                        )
                    }
                    _ => Verdict::Unexplained(failure("failed")),
                }
            }
            Expect::Faulted => match self.fault {
                Some(Fault::Interrupt(_)) if self.signalled => {
                    Verdict::Explained("cancelled by the client".into())
                }
                Some(Fault::Kill(_)) if self.signalled => {
                    Verdict::Explained("killed mid-transfer".into())
                }
                // Done before its fault came: a plain success.
                _ if status.success() => Verdict::Ok,
                _ => Verdict::Unexplained(failure("ended before its fault")),
            },
            Expect::Reset => Verdict::Unexplained("the refused path was served".into()),
            Expect::Cancel {
                requests: r,
                cancelled: c,
            } => {
                if status.success() && requests == *r && cancelled == *c && failed == 0 {
                    Verdict::Ok
                } else {
                    Verdict::Unexplained(format!(
                        "{requests} of {r} answered, {cancelled} of {c} cancelled, {failed} failed: {status}; {last_line}"
                    ))
                }
            }
            Expect::Drain { total, report } => match drained(own.as_ref(), report) {
                Err(v) => v,
                Ok(r) => {
                    let whole = requests + rejected + failed == *total
                        && r.requests == requests
                        && r.cut_at_shutdown == 0;
                    // Sent, unanswered when the server closed gracefully (H3_NO_ERROR)
                    // having answered all it took: sent past its GOAWAY's stream ID, or it
                    // would have answered or cut them. The client rejects those it knows
                    // to be past the GOAWAY; one sent before the GOAWAY reached it, whose
                    // reset the close overtook, it cannot tell processed or not, and counts
                    // failed, never safe to retry.
                    let past_goaway = stderr
                        .lines()
                        .filter(|l| l.starts_with("neqo-client: error:"))
                        .all(|l| {
                            l.ends_with("closed by peer: shutdown (code 256)")
                                || l.ends_with("(not processed: safe to retry)")
                        });
                    match (whole, failed) {
                        (true, 0) => Verdict::Ok,
                        (true, _) if past_goaway => Verdict::Explained(
                            "some sent before the GOAWAY reached the client, unanswered at the \
                                 graceful close: counted failed"
                                .into(),
                        ),
                        _ => Verdict::Unexplained(format!(
                            "drained: {requests} answered, {rejected} rejected, {failed} \
                                 failed of {total}, the server answered {} and cut {}; {last_line}",
                            r.requests, r.cut_at_shutdown
                        )),
                    }
                }
            },
            Expect::CutOrWhole { bytes, report } => match drained(own.as_ref(), report) {
                Err(v) => v,
                Ok(r) => {
                    let counted = r.cut_at_shutdown;
                    let whole = status.success() && received == *bytes && failed == 0;
                    let cut = !status.success()
                        && failed == 1
                        && rejected == 0
                        && stderr.contains("cut: the server shut down")
                        && !stderr.contains("safe to retry");
                    match (whole, cut, counted) {
                        (true, _, 0) => Verdict::Ok,
                        (_, true, 1) => Verdict::Explained(
                            "cut at the end of the drain period, as the server counted".into(),
                        ),
                        _ => Verdict::Unexplained(format!(
                            "drained: {received} of {bytes} B, {failed} failed, {rejected} \
                                 rejected, the server counted {counted} cut: {status}; {last_line}"
                        )),
                    }
                }
            },
            Expect::Transfer { requests: r, bytes } => {
                if requests == *r && received == *bytes && failed == 0 {
                    Verdict::Ok
                } else {
                    Verdict::Unexplained(format!(
                        "{requests} of {r} requests, {received} of {bytes} B, {failed} failed"
                    ))
                }
            }
            Expect::Upload {
                requests: r,
                sent: s,
            } => {
                if requests == *r && sent >= *s && failed == 0 {
                    Verdict::Ok
                } else {
                    Verdict::Unexplained(format!(
                        "{requests} of {r} uploads, {sent} of {s} B sent, {failed} failed"
                    ))
                }
            }
            Expect::File { index, saved } => {
                let body = std::fs::read(saved).unwrap_or_default();
                let (_, size) = FILES[*index];
                if body.len() == size && body.iter().enumerate().all(|(i, &b)| b == file_byte(i)) {
                    Verdict::Ok
                } else {
                    Verdict::Unexplained(format!(
                        "the saved {} is {} B, not the {size} B served",
                        FILES[*index].0,
                        body.len()
                    ))
                }
            }
        };
        let mut f = self.finish(verdict);
        if f.verdict == Verdict::Ok || matches!(f.verdict, Verdict::Explained(_)) {
            f.requests = requests;
            f.bytes = received + sent;
        }
        Some(f)
    }

    fn finish(&mut self, verdict: Verdict) -> Finished {
        if let Some(r) = self.relay.take() {
            let _ = r.stop();
        }
        if let Some(s) = self.own_server.take() {
            let _ = s.stop();
        }
        if verdict == Verdict::Ok || matches!(verdict, Verdict::Explained(_)) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        Finished {
            kind: self.kind,
            verdict,
            requests: 0,
            bytes: 0,
        }
    }
}

/// The `rebinds N` of the relay's last stats line.
fn relay_rebinds(stdout: &str) -> Option<u64> {
    let line = stdout.lines().rev().find(|l| l.starts_with("sessions:"))?;
    let (_, rest) = line.split_once("rebinds ")?;
    rest.split(';').next()?.trim().parse().ok()
}

/// Whether the client's handshake was still unconfirmed when the relay first rebound it
/// ([`REBIND_EVERY_MS`] after the client's first datagram): it never completed, it took
/// longer, or the server never confirmed it (no HANDSHAKE_DONE came). A new address before
/// the handshake is confirmed is one the server may ignore (RFC 9000 section 9; quinn-proto
/// discards its packets until the server's side of the handshake is done), and one between a
/// Retry and the Initial carrying its token no longer matches the token (section 8.1.3):
/// either way the connection fails because of the injected fault. A handshake that completed
/// here in time can still be one: when the soak's attack bursts make the server's socket drop
/// the client's last flight and its repeats until the rebinding, the server never hears them
/// from the old address and discards them from the new one.
fn unconfirmed_at_first_rebind(report: &ClientReport) -> bool {
    report
        .handshake_ms
        .is_none_or(|h| h.max > REBIND_EVERY_MS as f64)
        || report.driver.unconfirmed > 0
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            kill(self.child.id(), "-CONT");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relays_rebinds_are_read_from_its_last_stats_line() {
        let stdout = "neqo-relay listening on 127.0.0.1:1, forwarding to 127.0.0.1:2\n\
            to-server: forwarded 9, lost 1\n\
            sessions: 1 open, 1 in all; blackholed 0; rebinds 0; window-client-bytes 0\n\
            sessions: 0 open, 1 in all; blackholed 0; rebinds 17; window-client-bytes 0; window-server-bytes 0\n";
        assert_eq!(relay_rebinds(stdout), Some(17));
        assert_eq!(relay_rebinds("neqo-relay listening on 127.0.0.1:1\n"), None);
        assert_eq!(relay_rebinds("sessions: 1 open; rebinds x;\n"), None);
    }

    #[test]
    fn only_a_handshake_unconfirmed_at_the_first_rebind_is_the_relays_fault() {
        let report = |max: Option<f64>, unconfirmed: u64| ClientReport {
            handshake_ms: max.map(|max| neqo_report::Percentiles {
                count: 1,
                max,
                ..Default::default()
            }),
            driver: neqo_report::DriverCounters {
                unconfirmed,
                ..Default::default()
            },
            ..Default::default()
        };
        // The soak's failures of this kind: a handshake of 3 s, none at all (Retry token),
        // and one done in 44 ms that the server never confirmed.
        assert!(unconfirmed_at_first_rebind(&report(Some(3022.8), 0)));
        assert!(unconfirmed_at_first_rebind(&report(None, 0)));
        assert!(unconfirmed_at_first_rebind(&report(Some(43.7), 1)));
        assert!(!unconfirmed_at_first_rebind(&report(Some(12.5), 0)));
    }
}
