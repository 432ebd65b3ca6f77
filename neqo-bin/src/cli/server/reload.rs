//! What neqo-server's SIGHUP reloads, and what it opens at start for that: the certificates
//! (`--tls-cert`/`--tls-key`, read and checked pair by pair) and the access log's output.

use std::{future::Future, path::Path};

use anyhow::{Context as _, bail};
use neqo_driver::tls::{Certificates, Identity};
use neqo_server_core::{AccessLog, AccessLogFormat, ServerError, ServerReport};

use super::ServerArgs;

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

/// Runs `run`, replacing the certificates on each SIGHUP (from `hangups`) with those of the
/// settings read again and opening the access log file anew (after logrotate moved it away),
/// where there is SIGHUP (Unix); saying on stderr what it did. A refused reload leaves the
/// certificates served as they were; a log file that cannot be opened, the old one in use.
pub(super) async fn reloading(
    run: impl Future<Output = Result<ServerReport, ServerError>>,
    hangups: Hangups,
    certificates: &Certificates,
    reread: &Reread,
    self_signed: bool,
    log: Option<(&AccessLog, &Path)>,
) -> Result<ServerReport, ServerError> {
    #[cfg(unix)]
    {
        let mut hangup = hangups;
        tokio::pin!(run);
        loop {
            tokio::select! {
                report = &mut run => return report,
                Some(()) = hangup.recv() => {
                    let again = reread();
                    // A server on its self-signed certificate, still given none: nothing to
                    // reload (a SIGHUP for the log alone is no refused reload).
                    let nothing = self_signed && again.as_ref().is_ok_and(|a| a.cert.is_empty());
                    if !nothing {
                        let reloaded = certificates.reload(|| {
                            let ids = identities(&again?)?;
                            if ids.is_empty() {
                                bail!("no --tls-cert to serve (the self-signed one is not made again)");
                            }
                            Ok(ids)
                        });
                        match reloaded {
                            Ok(n) => eprintln!("neqo-server: SIGHUP: serving {n} certificate(s) read again"),
                            Err(e) => eprintln!(
                                "neqo-server: SIGHUP: certificates not reloaded, still serving the old: {e:#}"
                            ),
                        }
                    }
                    if let Some((log, path)) = log.filter(|(_, p)| *p != Path::new("-")) {
                        match log_output(path).and_then(|out| Ok(log.reopen(out)?)) {
                            Ok(()) => eprintln!(
                                "neqo-server: SIGHUP: access log {} opened again",
                                path.display()
                            ),
                            Err(e) => eprintln!(
                                "neqo-server: SIGHUP: access log not opened again, still writing \
                                 the old: {e:#}"
                            ),
                        }
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (hangups, certificates, reread, self_signed, log);
        run.await
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

/// Where SIGHUP gets the certificates from: the settings read again, as at start.
pub(super) type Reread = Box<dyn Fn() -> anyhow::Result<ServerArgs>>;
