//! Child processes measured the way a benchmark needs: wall time, CPU time and peak RSS
//! (from `wait4`), with every wait bounded.

use std::{
    io::{self, BufRead, BufReader},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

/// How a child process ended and what it used.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Exit code; `None` if a signal ended it.
    pub code: Option<i32>,
    pub wall: Duration,
    pub user: Duration,
    pub system: Duration,
    /// Peak resident set size, in KiB.
    pub max_rss_kib: u64,
}

impl Measured {
    #[must_use]
    pub const fn success(&self) -> bool {
        matches!(self.code, Some(0))
    }

    #[must_use]
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }
}

#[cfg(unix)]
fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
}

/// Reaps `child`, waiting at most `timeout` (from `started`) before killing it. On Unix it
/// uses `wait4` for the CPU time and peak RSS; elsewhere those read 0.
///
/// # Errors
/// When waiting fails.
pub fn reap(child: &mut Child, started: Instant, timeout: Duration) -> io::Result<Measured> {
    let deadline = started + timeout;
    let mut killed = false;
    loop {
        if let Some(m) = try_reap(child, started)? {
            return Ok(m);
        }
        if !killed && Instant::now() >= deadline {
            let _ = child.kill();
            killed = true;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(unix)]
fn try_reap(child: &Child, started: Instant) -> io::Result<Option<Measured>> {
    let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our child; `status` and `usage` are live for the call.
        let rc = unsafe { libc::wait4(pid, &raw mut status, libc::WNOHANG, &raw mut usage) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if rc != pid {
            return Ok(None);
        }
        let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        return Ok(Some(Measured {
            code,
            wall: started.elapsed(),
            user: timeval(usage.ru_utime),
            system: timeval(usage.ru_stime),
            max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
        }));
    }
}

#[cfg(not(unix))]
fn try_reap(child: &mut Child, started: Instant) -> io::Result<Option<Measured>> {
    Ok(child.try_wait()?.map(|status| Measured {
        code: status.code(),
        wall: started.elapsed(),
        user: Duration::ZERO,
        system: Duration::ZERO,
        max_rss_kib: 0,
    }))
}

/// Asks a child to stop: SIGTERM on Unix (a graceful stop), a kill elsewhere.
pub fn terminate(child: &mut Child) {
    #[cfg(unix)]
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: sending a signal to our own child has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    #[cfg(not(unix))]
    let _ = child.kill();
}

/// Runs a command to its end (at most `timeout`), output discarded unless it fails.
///
/// # Errors
/// When it cannot be started or waited for.
pub fn run(cmd: &mut Command, timeout: Duration) -> io::Result<(Measured, String)> {
    let started = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    let stderr = child.stderr.take();
    let reader = thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr {
            for line in BufReader::new(s).lines().map_while(Result::ok) {
                if text.len() < 64 * 1024 {
                    text.push_str(&line);
                    text.push('\n');
                }
            }
        }
        text
    });
    let measured = reap(&mut child, started, timeout)?;
    let stderr = reader.join().unwrap_or_default();
    Ok((measured, stderr))
}

/// A server process that announced where it listens.
#[derive(Debug)]
pub struct Server {
    child: Child,
    started: Instant,
    pub addr: SocketAddr,
}

/// The first address after "listening on " in a line.
#[must_use]
pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on ").nth(1)?;
    rest.split([',', ' ']).find_map(|t| t.trim().parse().ok())
}

impl Server {
    /// Starts it and waits (at most `timeout`) for its "listening on ADDR" line.
    ///
    /// # Errors
    /// When it cannot start, exits, or never says where it listens.
    pub fn start(cmd: &mut Command, timeout: Duration) -> io::Result<Self> {
        let started = Instant::now();
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| io::Error::other("no stdout"))?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !sent && let Some(addr) = parse_listening(&line) {
                    let _ = tx.send(addr);
                    sent = true;
                }
                // Keep draining so the server never blocks on a full pipe.
            }
        });
        match rx.recv_timeout(timeout) {
            Ok(addr) => Ok(Self {
                child,
                started,
                addr,
            }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(io::Error::other(format!(
                    "server did not announce its address within {timeout:?}"
                )))
            }
        }
    }

    /// Stops it gracefully (SIGTERM, then SIGKILL after 10 s) and measures it.
    ///
    /// # Errors
    /// When waiting fails.
    pub fn stop(mut self) -> io::Result<Measured> {
        terminate(&mut self.child);
        let grace = self.started.elapsed() + Duration::from_secs(10);
        reap(&mut self.child, self.started, grace)
    }
}

/// The `target/release` directory beside the running executable's profile directory, where
/// `cargo build --release` puts the peers.
#[must_use]
pub fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let profile_dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    // target/<profile>/ or target/<profile>/deps/ (tests).
    let profile_dir = if profile_dir.ends_with("deps") {
        profile_dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or(profile_dir)
    } else {
        profile_dir
    };
    profile_dir
        .parent()
        .map_or_else(|| profile_dir.clone(), |t| t.join("release"))
}

/// Runs `cargo build --release --quiet ARGS` with the cargo that runs us.
///
/// # Errors
/// The first error lines of a failed build.
pub fn cargo_build(args: &[&str]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--release", "--quiet"])
        .args(args)
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let first: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("error"))
            .take(3)
            .collect();
        Err(format!(
            "`cargo build --release {}` failed: {}",
            args.join(" "),
            first.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_lines_parse() {
        assert_eq!(
            parse_listening("neqo-server listening on 127.0.0.1:4433"),
            Some("127.0.0.1:4433".parse().unwrap())
        );
        assert_eq!(
            parse_listening("msquic-peer listening on [::1]:5000, 127.0.0.1:6000"),
            Some("[::1]:5000".parse().unwrap())
        );
        assert_eq!(parse_listening("starting"), None);
    }

    #[cfg(unix)]
    #[test]
    fn run_reports_exit_code_and_usage() {
        let (m, _) = run(
            Command::new("sh").args(["-c", "exit 3"]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(m.code, Some(3));
        let (m, _) = run(&mut Command::new("true"), Duration::from_secs(10)).unwrap();
        assert!(m.success());
        assert!(m.max_rss_kib > 0);
    }

    #[cfg(unix)]
    #[test]
    fn a_hung_child_is_killed_at_the_deadline() {
        let (m, _) = run(Command::new("sleep").arg("30"), Duration::from_millis(200)).unwrap();
        assert_eq!(m.code, None, "ended by a signal");
    }
}
