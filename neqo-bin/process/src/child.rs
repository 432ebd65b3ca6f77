//! A child process run to its end within a deadline, and what it used.

use std::{
    io,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use crate::{capture::Capture, os};

/// How often a running child is checked for its exit.
const POLL: Duration = Duration::from_millis(2);

/// How long a child may take to go after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// A hang guard for the output of a reaped child to be taken in whole (see
/// [`Capture::text`]): its draining thread may lag behind on a loaded machine.
const OUTPUT_WAIT: Duration = Duration::from_secs(60);

/// How a child process ended, what it used and what it wrote.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// Whether the harness killed it at its deadline.
    pub killed: bool,
    /// From start to exit.
    pub wall: Duration,
    /// CPU time in user mode (zero where the platform does not say: not Unix).
    pub user: Duration,
    /// CPU time in the kernel (zero where the platform does not say).
    pub system: Duration,
    /// Peak resident set size in KiB (zero where the platform does not say).
    pub max_rss_kib: u64,
    /// The end of what it wrote to stdout (at most [`crate::CAPTURE_LIMIT`] bytes).
    pub stdout: String,
    /// The end of what it wrote to stderr (at most [`crate::CAPTURE_LIMIT`] bytes).
    pub stderr: String,
}

impl Measured {
    /// Whether it exited with code 0.
    #[must_use]
    pub const fn success(&self) -> bool {
        matches!(self.code, Some(0))
    }

    /// User plus system CPU time.
    #[must_use]
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }

    /// The last non-empty line of stderr: where a command usually says why it failed.
    #[must_use]
    pub fn last_stderr_line(&self) -> Option<&str> {
        self.stderr.lines().rev().find(|l| !l.trim().is_empty())
    }

    /// How it ended, for messages: `exit code 1`, `killed at its deadline`, `ended by a signal`.
    #[must_use]
    pub fn ending(&self) -> String {
        match (self.code, self.killed) {
            (Some(code), _) => format!("exit code {code}"),
            (None, true) => "killed at its deadline".to_owned(),
            (None, false) => "ended by a signal".to_owned(),
        }
    }
}

/// Runs `cmd` to its end with stdin closed and stdout and stderr captured, killing it once
/// `limit` has passed, and measures it.
///
/// # Errors
/// When it cannot be started or waited for.
pub fn run(cmd: &mut Command, limit: Duration) -> io::Result<Measured> {
    let mut child = Running::spawn(cmd, |_| {})?;
    child.finish(child.started + limit)
}

/// Drains a child's output pipe.
#[cfg(unix)]
fn capture(
    pipe: impl io::Read + std::os::fd::AsFd + Send + 'static,
    on_line: impl FnMut(&str) + Send + 'static,
) -> Capture {
    Capture::start_pipe(pipe, on_line)
}

/// Drains a child's output pipe.
#[cfg(not(unix))]
fn capture(
    pipe: impl io::Read + Send + 'static,
    on_line: impl FnMut(&str) + Send + 'static,
) -> Capture {
    Capture::start(pipe, on_line)
}

/// A started child whose output is being captured; killed and reaped when dropped unfinished.
#[derive(Debug)]
pub(crate) struct Running {
    child: Child,
    started: Instant,
    stdout: Capture,
    stderr: Capture,
    /// Set once the child is reaped: from then on its pid may name another process.
    reaped: bool,
}

impl Running {
    /// Starts `cmd` with stdin closed and stdout and stderr captured; `on_stdout_line` sees
    /// each line of stdout as it arrives.
    pub(crate) fn spawn(
        cmd: &mut Command,
        on_stdout_line: impl FnMut(&str) + Send + 'static,
    ) -> io::Result<Self> {
        let started = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("starting {}: {e}", cmd.get_program().to_string_lossy()),
                )
            })?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            unreachable!("both are piped");
        };
        Ok(Self {
            child,
            started,
            stdout: capture(stdout, on_stdout_line),
            stderr: capture(stderr, |_| {}),
            reaped: false,
        })
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// What it has written to stderr so far (the last [`crate::CAPTURE_LIMIT`] bytes).
    pub(crate) fn stderr_so_far(&self) -> String {
        self.stderr.so_far()
    }

    /// Asks it to stop: SIGTERM on Unix, a kill elsewhere.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    pub(crate) fn terminate(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        os::terminate(&mut self.child)
    }

    /// Sends SIGHUP, unless it has ended.
    ///
    /// # Errors
    /// When the signal cannot be sent.
    #[cfg(unix)]
    pub(crate) fn hangup(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        os::hangup(&mut self.child)
    }

    /// Waits for it to end, killing it at `deadline`, and measures it.
    ///
    /// # Errors
    /// When waiting fails, or it outlives SIGKILL by [`KILL_WAIT`].
    pub(crate) fn finish(&mut self, deadline: Instant) -> io::Result<Measured> {
        let (exit, wall, killed) = self.reap(deadline)?;
        Ok(Measured {
            code: exit.code,
            killed,
            wall,
            user: exit.user,
            system: exit.system,
            max_rss_kib: exit.max_rss_kib,
            stdout: self.stdout.text(OUTPUT_WAIT),
            stderr: self.stderr.text(OUTPUT_WAIT),
        })
    }

    /// Polls for its exit, kills it once at `deadline`, and gives up [`KILL_WAIT`] after that.
    fn reap(&mut self, deadline: Instant) -> io::Result<(os::Exit, Duration, bool)> {
        if self.reaped {
            return Err(io::Error::other("the child was reaped already"));
        }
        let mut killed_at = None;
        loop {
            if let Some(exit) = os::try_reap(&mut self.child)? {
                self.reaped = true;
                return Ok((exit, self.started.elapsed(), killed_at.is_some()));
            }
            let now = Instant::now();
            match killed_at {
                None if now >= deadline => {
                    // Not reaped yet, so its pid is still ours to signal.
                    let _ = self.child.kill();
                    killed_at = Some(now);
                }
                Some(at) if now >= at + KILL_WAIT => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("pid {} still runs {KILL_WAIT:?} after SIGKILL", self.id()),
                    ));
                }
                _ => {}
            }
            thread::sleep(POLL);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.reap(Instant::now());
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    const LIMIT: Duration = Duration::from_secs(30);

    #[test]
    fn exit_codes() {
        let m = run(&mut sh("exit 3"), LIMIT).unwrap();
        assert_eq!(m.code, Some(3));
        assert!(!m.success() && !m.killed);
        assert_eq!(m.ending(), "exit code 3");
        let m = run(&mut Command::new("true"), LIMIT).unwrap();
        assert!(m.success() && !m.killed, "{m:?}");
        let m = run(&mut sh("kill -KILL $$"), LIMIT).unwrap();
        assert_eq!((m.code, m.killed), (None, false));
        assert_eq!(m.ending(), "ended by a signal");
    }

    #[test]
    fn cpu_time_and_peak_memory_come_from_the_child() {
        let m = run(
            &mut sh("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"),
            LIMIT,
        )
        .unwrap();
        assert!(m.success(), "{m:?}");
        assert!(m.cpu() > Duration::ZERO, "{m:?}");
        assert!(m.user > Duration::ZERO, "{m:?}");
        assert!(m.max_rss_kib > 0, "{m:?}");
    }

    #[test]
    fn output_is_captured() {
        let m = run(
            &mut sh("echo out; echo err >&2; echo last >&2; echo >&2"),
            LIMIT,
        )
        .unwrap();
        assert_eq!(m.stdout, "out\n");
        assert_eq!(m.stderr, "err\nlast\n\n");
        assert_eq!(m.last_stderr_line(), Some("last"));
        let m = run(&mut sh("cat"), LIMIT).unwrap();
        assert!(m.success(), "stdin is closed: {m:?}");
    }

    /// A grandchild that inherited the pipes keeps them open after the child has gone: what
    /// the child wrote is all there, and `run` does not wait for the grandchild.
    #[test]
    fn output_is_whole_while_a_grandchild_holds_the_pipe() {
        let m = run(&mut sh("echo out; echo err >&2; sleep 5 & exit 0"), LIMIT).unwrap();
        assert!(m.success(), "{m:?}");
        assert_eq!((m.stdout.as_str(), m.stderr.as_str()), ("out\n", "err\n"));
    }

    #[test]
    fn a_hung_child_is_killed_at_the_deadline() {
        let m = run(Command::new("sleep").arg("30"), Duration::from_millis(200)).unwrap();
        assert!(m.killed);
        assert_eq!(m.code, None, "ended by SIGKILL");
        assert_eq!(m.ending(), "killed at its deadline");
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let e = run(&mut Command::new("/nonexistent/program"), LIMIT).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/nonexistent/program"), "{e}");
    }
}
