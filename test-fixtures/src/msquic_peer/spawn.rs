//! Running `msquic-peer` as a child process from tests.

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The server prints `{LISTENING_PREFIX}{addr}` once per listening address.
pub const LISTENING_PREFIX: &str = "msquic-peer listening on ";

/// How long [`spawn_server`] waits for the listening lines.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Parses a server's listening line.
#[must_use]
pub fn parse_listening_line(line: &str) -> Option<SocketAddr> {
    line.trim_end().strip_prefix(LISTENING_PREFIX)?.parse().ok()
}

/// Locates a binary built by cargo into the same target directory as the
/// running executable (a test, bench or another binary).
///
/// Looks at `$CARGO_BIN_EXE_<name>` first (cargo sets it for integration tests),
/// then next to the current executable and in the parent of a `deps/`
/// directory.
///
/// # Errors
/// If no such file exists.
pub fn locate_binary(name: &str) -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
    }
    let exe = std::env::current_exe()?;
    let mut dirs = Vec::new();
    if let Some(dir) = exe.parent() {
        dirs.push(dir.to_path_buf());
        if dir.file_name() == Some(OsStr::new("deps"))
            && let Some(parent) = dir.parent()
        {
            dirs.push(parent.to_path_buf());
        }
    }
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    dirs.iter()
        .map(|d| d.join(&file))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{file} not found in {dirs:?}; build it first (cargo build -p test-fixtures --features msquic)"
                ),
            )
        })
}

/// The `msquic-peer` binary: `$MSQUIC_PEER` if set, else [`locate_binary`].
///
/// # Errors
/// If the binary cannot be found.
pub fn peer_binary() -> io::Result<PathBuf> {
    match std::env::var_os("MSQUIC_PEER") {
        Some(p) => Ok(PathBuf::from(p)),
        None => locate_binary("msquic-peer"),
    }
}

/// Starts `msquic-peer server ARGS...` and returns it with its first
/// listening address (the real port when binding port 0).
///
/// # Errors
/// If the binary is missing, fails to start, exits, or does not report its
/// address within a minute.
pub fn spawn_server<I, S>(args: I) -> io::Result<(Child, SocketAddr)>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let (child, addrs) = spawn_server_all(args)?;
    Ok((child, addrs[0]))
}

/// Like [`spawn_server`], returning one address per `--listen`.
///
/// # Errors
/// As [`spawn_server`].
pub fn spawn_server_all<I, S>(args: I) -> io::Result<(Child, Vec<SocketAddr>)>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    spawn_server_with(&peer_binary()?, args)
}

/// Like [`spawn_server_all`] with an explicit binary path.
///
/// # Errors
/// As [`spawn_server`].
pub fn spawn_server_with<I, S>(binary: &Path, args: I) -> io::Result<(Child, Vec<SocketAddr>)>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let expected = args
        .iter()
        .filter(|a| {
            a.to_str()
                .is_some_and(|a| a == "--listen" || a.starts_with("--listen="))
        })
        .count()
        .max(1);
    let mut child = Command::new(binary)
        .arg("server")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("starting {}: {e}", binary.display())))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            match parse_listening_line(&line) {
                Some(addr) => {
                    if tx.send(addr).is_err() {
                        break;
                    }
                }
                // Keep draining so the server never blocks on a full pipe.
                None => eprintln!("msquic-peer stdout: {line}"),
            }
        }
    });
    let mut addrs = Vec::with_capacity(expected);
    while addrs.len() < expected {
        match rx.recv_timeout(STARTUP_TIMEOUT) {
            Ok(addr) => addrs.push(addr),
            Err(e) => {
                drop(child.kill());
                let status = child.wait()?;
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => "timed out waiting for it to listen",
                    mpsc::RecvTimeoutError::Disconnected => "it exited before listening",
                };
                return Err(io::Error::other(format!(
                    "msquic-peer server {args:?}: {why} ({status})"
                )));
            }
        }
    }
    Ok((child, addrs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listening_lines() {
        assert_eq!(
            parse_listening_line("msquic-peer listening on 127.0.0.1:4433\n"),
            Some("127.0.0.1:4433".parse().unwrap())
        );
        assert_eq!(
            parse_listening_line("msquic-peer listening on [::1]:9"),
            Some("[::1]:9".parse().unwrap())
        );
        assert_eq!(parse_listening_line("something else"), None);
    }
}
