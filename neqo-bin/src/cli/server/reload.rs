//! What neqo-server's SIGHUP reloads, and what it opens at start for that: the certificates
//! (`--tls-cert`/`--tls-key`, read and checked pair by pair) and the access log's output;
//! and how: off the signal handlers' thread, one reload at a time, within a deadline.
//!
//! Without SIGHUP (Windows) the server opens the log and builds its [`Reloader`] all the
//! same, and nothing reloads.
#![cfg_attr(
    not(unix),
    expect(dead_code, reason = "the reload runs on SIGHUP, which only Unix has")
)]

use std::{
    future::Future,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, bail};
use neqo_driver::tls::{Certificates, Identity};
use neqo_server_core::{AccessLog, AccessLogFormat, ServerError, ServerReport};

use super::{ServerArgs, layers::Values};

/// `--access-log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AccessLogFormatArg {
    /// Like the common log format.
    Common,
    /// A JSON object per line.
    Json,
}

impl From<AccessLogFormatArg> for AccessLogFormat {
    fn from(f: AccessLogFormatArg) -> Self {
        match f {
            AccessLogFormatArg::Common => Self::Common,
            AccessLogFormatArg::Json => Self::Json,
        }
    }
}

/// Opens `--access-log`: appended to, made readable by its owner and group only; `-` is
/// standard output.
pub(super) fn access_log(path: &Path, format: AccessLogFormatArg) -> anyhow::Result<AccessLog> {
    AccessLog::start(log_output(path)?, format.into())
        .context("--access-log: no thread for the writer")
}

/// Where `--access-log` writes: the file, opened (again) for appending, or standard output.
fn log_output(path: &Path) -> anyhow::Result<Box<dyn std::io::Write + Send>> {
    if path == Path::new("-") {
        return Ok(Box::new(std::io::stdout()));
    }
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o640);
    let file = options
        .open(path)
        .with_context(|| format!("--access-log {}: cannot open it", path.display()))?;
    Ok(Box::new(file))
}

/// SIGHUP's handler (Unix), installed before the server says it listens: a SIGHUP that comes
/// early is taken as a reload, not the default action that ends the process.
#[cfg(unix)]
pub(super) type Hangups = tokio::signal::unix::Signal;
/// No SIGHUP here.
#[cfg(not(unix))]
pub(super) type Hangups = ();

/// Installs the SIGHUP handler [`reloading`] takes.
///
/// # Errors
/// The handler could not be installed.
pub(super) fn hangups() -> Result<Hangups, ServerError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::hangup()).map_err(|source| ServerError::Io {
            what: "the SIGHUP handler",
            source,
        })
    }
    #[cfg(not(unix))]
    Ok(())
}

/// How long a reload may take before it is given up: reading a few small files takes
/// milliseconds, so one that takes this long waits on a file that blocks (a FIFO, a hung
/// network mount).
pub(super) const RELOAD_DEADLINE: Duration = Duration::from_secs(5);

/// The settings SIGHUP applies; any other that changed is reported as needing a restart.
const APPLIED: [&str; 3] = ["tls-cert", "tls-key", "config"];

/// The settings read again, and their values: as at start (the same flags and variables, the
/// file read anew).
pub(super) type Reread = Box<dyn Fn() -> anyhow::Result<(ServerArgs, Values)> + Send + Sync>;

/// What a reload works from, shared with the thread each runs on.
pub(super) struct Reloader {
    /// How to read the settings again.
    pub(super) reread: Reread,
    /// The settings' values at start: what the server runs with but for what reloads apply.
    pub(super) started: Values,
    /// The certificates served, replaced by a reload.
    pub(super) certificates: Certificates,
    /// Whether the server serves its self-signed certificate (none was given).
    pub(super) self_signed: bool,
    /// The access log and the path it is opened again at (not for `-`).
    pub(super) log: Option<(AccessLog, PathBuf)>,
}

/// A reload's progress, by which its thread and the deadline agree on which of them settles
/// it: reading the files, applying what it read, or given up (the old settings kept).
const READING: u8 = 0;
/// See [`READING`].
const APPLYING: u8 = 1;
/// See [`READING`].
const GIVEN_UP: u8 = 2;

impl Reloader {
    /// One reload, on a thread of its own: the settings and the files they name read again,
    /// then applied and reported on stderr, unless the deadline gave it up first (`progress`).
    fn reload(&self, progress: &AtomicU8) {
        let again = (self.reread)();
        // A server on its self-signed certificate, still given none: no certificates to
        // reload (a SIGHUP for the log alone is no refused reload).
        let identities = match &again {
            Ok((args, _)) if self.self_signed && args.cert.is_empty() => None,
            Ok((args, _)) => Some(identities(args).and_then(|ids| {
                if ids.is_empty() {
                    bail!("no --tls-cert to serve (the self-signed one is not made again)");
                }
                Ok(ids)
            })),
            Err(e) => Some(Err(anyhow::anyhow!("{e:#}"))),
        };
        let log = self
            .log
            .as_ref()
            .map(|(log, path)| (log, path, log_output(path)));
        let changed = again.as_ref().map_or_else(
            |_| Vec::new(),
            |(_, values)| self.started.changed(values, &APPLIED),
        );
        if progress
            .compare_exchange(READING, APPLYING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if let Some(identities) = identities {
            match self.certificates.reload(|| identities) {
                Ok(n) => eprintln!("neqo-server: SIGHUP: serving {n} certificate(s) read again"),
                Err(e) => eprintln!(
                    "neqo-server: SIGHUP: certificates not reloaded, still serving the old: {e:#}"
                ),
            }
        }
        if let Some((log, path, output)) = log {
            match output.and_then(|out| Ok(log.reopen(out)?)) {
                Ok(()) => eprintln!(
                    "neqo-server: SIGHUP: access log {} opened again",
                    path.display()
                ),
                Err(e) => eprintln!(
                    "neqo-server: SIGHUP: access log not opened again, still writing the old: \
                     {e:#}"
                ),
            }
        }
        if !changed.is_empty() {
            let flags: Vec<String> = changed.iter().map(|l| format!("--{l}")).collect();
            let (pronoun, verb) = if flags.len() == 1 {
                ("it", "applies")
            } else {
                ("they", "apply")
            };
            eprintln!(
                "neqo-server: SIGHUP: {} changed: {pronoun} {verb} at the next start",
                flags.join(", ")
            );
        }
    }
}

/// A reload under way on the blocking pool.
#[cfg(unix)]
struct InFlight {
    task: tokio::task::JoinHandle<()>,
    progress: Arc<AtomicU8>,
}

#[cfg(unix)]
impl InFlight {
    fn start(reloader: &Arc<Reloader>) -> Self {
        let progress = Arc::new(AtomicU8::new(READING));
        let (r, p) = (reloader.clone(), progress.clone());
        let task = tokio::task::spawn_blocking(move || r.reload(&p));
        Self { task, progress }
    }

    /// Whether its deadline gave it up (its thread may still wait on a file).
    fn given_up(&self) -> bool {
        self.progress.load(Ordering::Acquire) == GIVEN_UP
    }
}

/// Runs `run`, reloading on each SIGHUP (from `hangups`), where there is SIGHUP (Unix): the
/// certificates replaced with those of the settings read again, the access log file opened
/// anew (after logrotate moved it away), the settings that changed but apply only at a start
/// named; stderr says what it did. A refused reload leaves the certificates served as they
/// were; a log file that cannot be opened, the old one in use.
///
/// Each reload runs on the blocking pool, off this task and the signal handlers' (SIGINT and
/// SIGTERM work whatever a file does), one at a time: SIGHUPs that come meanwhile make one
/// more reload after it. One not done within [`RELOAD_DEADLINE`] is given up, the old settings
/// kept; the next waits for its thread to end.
pub(super) async fn reloading(
    run: impl Future<Output = Result<ServerReport, ServerError>>,
    hangups: Hangups,
    reloader: Arc<Reloader>,
) -> Result<ServerReport, ServerError> {
    #[cfg(unix)]
    {
        let mut hangup = hangups;
        tokio::pin!(run);
        let mut in_flight: Option<InFlight> = None;
        // Until it passes, or the reload is given up or done.
        let mut deadline: Option<tokio::time::Instant> = None;
        let mut again = false;
        loop {
            tokio::select! {
                report = &mut run => return report,
                Some(()) = hangup.recv() => {
                    if in_flight.is_none() {
                        in_flight = Some(InFlight::start(&reloader));
                        deadline = Some(tokio::time::Instant::now() + RELOAD_DEADLINE);
                    } else {
                        if in_flight.as_ref().is_some_and(InFlight::given_up) && !again {
                            eprintln!(
                                "neqo-server: SIGHUP: the reload given up still waits on a file; \
                                 the next follows once it ends (a restart ends it)"
                            );
                        }
                        again = true;
                    }
                }
                () = until(deadline) => {
                    deadline = None;
                    let given_up = in_flight.as_ref().is_some_and(|f| {
                        f.progress
                            .compare_exchange(READING, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                    });
                    // Otherwise it is applying what it read, which takes no waiting.
                    if given_up {
                        eprintln!(
                            "neqo-server: SIGHUP: reload not done within {} s (a file that blocks: \
                             a FIFO, a hung mount?), given up: still serving the old settings",
                            RELOAD_DEADLINE.as_secs()
                        );
                    }
                }
                ended = finished(&mut in_flight) => {
                    deadline = None;
                    if in_flight.take().as_ref().is_some_and(InFlight::given_up) {
                        eprintln!(
                            "neqo-server: SIGHUP: the reload given up has ended, its result ignored"
                        );
                    }
                    if let Err(e) = ended {
                        eprintln!("neqo-server: SIGHUP: the reload failed: {e}");
                    }
                    if std::mem::take(&mut again) {
                        in_flight = Some(InFlight::start(&reloader));
                        deadline = Some(tokio::time::Instant::now() + RELOAD_DEADLINE);
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (hangups, reloader);
        run.await
    }
}

/// Resolves at `deadline`; never without one.
#[cfg(unix)]
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the reload in flight ends; never without one.
#[cfg(unix)]
async fn finished(in_flight: &mut Option<InFlight>) -> Result<(), tokio::task::JoinError> {
    match in_flight {
        Some(f) => (&mut f.task).await,
        None => std::future::pending().await,
    }
}

/// The certificates and keys `--tls-cert` and `--tls-key` name, read and each key checked
/// against its certificate; none without them.
pub(super) fn identities(args: &ServerArgs) -> anyhow::Result<Vec<Identity>> {
    if args.cert.len() != args.key.len() {
        bail!(
            "--tls-cert given {} times, --tls-key {}: each certificate needs its key",
            args.cert.len(),
            args.key.len()
        );
    }
    args.cert
        .iter()
        .zip(&args.key)
        .map(|(c, k)| {
            let at = || format!("--tls-cert {} --tls-key {}", c.display(), k.display());
            let identity = Identity::from_pem_files(c, k).with_context(at)?;
            Certificates::new(std::slice::from_ref(&identity)).with_context(at)?;
            Ok(identity)
        })
        .collect()
}
