//! A server child: started, ready once it has said where it listens, stopped with SIGTERM and
//! a deadline, and measured.

use std::{
    fmt, io,
    net::SocketAddr,
    process::Command,
    sync::mpsc::{self, RecvTimeoutError},
    time::{Duration, Instant},
};

use crate::child::{Measured, Running};

/// How long [`Server::stop`] waits after SIGTERM before it kills: longer than a server's
/// default drain period (`neqo-server`'s 30 s), which a client that holds a response open
/// may fill.
pub const STOP_GRACE: Duration = Duration::from_secs(60);

/// The addresses a readiness line announces: those after `listening on `, separated by commas,
/// up to the first that is not an address. `neqo-server listening on A, B` announces A and B,
/// `msquic-peer listening on A` announces A, `neqo-relay listening on A, forwarding to B`
/// announces A; a line without `listening on ` announces nothing.
#[must_use]
pub fn parse_listening(line: &str) -> Vec<SocketAddr> {
    line.split_once("listening on ")
        .map(|(_, rest)| {
            rest.split(',')
                .map_while(|a| a.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A running server child, killed when dropped.
#[derive(Debug)]
pub struct Server {
    child: Running,
    addrs: Vec<SocketAddr>,
}

/// Why a server did not become ready.
#[derive(Debug)]
pub enum StartError {
    /// It could not be started or waited for.
    Io(io::Error),
    /// It ended (or closed its stdout) before announcing its addresses.
    Exited(Measured),
    /// It announced too few addresses by its deadline, and was killed.
    Silent(Measured),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, m) = match self {
            Self::Io(e) => return write!(f, "{e}"),
            Self::Exited(m) => ("ended before saying where it listens", m),
            Self::Silent(m) => ("did not say where it listens in time", m),
        };
        write!(f, "{what} ({})", m.ending())?;
        match m.last_stderr_line() {
            Some(line) => write!(f, ": {line}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::Exited(_) | Self::Silent(_) => None,
        }
    }
}

impl From<io::Error> for StartError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl Server {
    /// Starts `cmd` (stdin closed, stdout and stderr captured) and waits at most `ready_within`
    /// for a readiness line (see [`parse_listening`]).
    ///
    /// # Errors
    /// When it cannot start, ends first, or announces nothing in time (it is killed then).
    pub fn start(cmd: &mut Command, ready_within: Duration) -> Result<Self, StartError> {
        Self::start_expecting(cmd, 1, ready_within)
    }

    /// Like [`Server::start`], waiting until readiness lines have announced at least
    /// `addresses` addresses, on one line or several (`msquic-peer` prints one line per
    /// address).
    ///
    /// # Errors
    /// As [`Server::start`].
    pub fn start_expecting(
        cmd: &mut Command,
        addresses: usize,
        ready_within: Duration,
    ) -> Result<Self, StartError> {
        let deadline = Instant::now() + ready_within;
        let (tx, rx) = mpsc::channel();
        let mut child = Running::spawn(cmd, move |line| {
            let addrs = parse_listening(line);
            if !addrs.is_empty() {
                let _ = tx.send(addrs);
            }
        })?;
        let mut addrs = Vec::new();
        while addrs.len() < addresses.max(1) {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(more) => addrs.extend(more),
                // Its stdout has closed: it is on its way out. What is left of the deadline
                // bounds the wait for that.
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(StartError::Exited(child.finish(deadline)?));
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(StartError::Silent(child.finish(Instant::now())?));
                }
            }
        }
        Ok(Self { child, addrs })
    }

    /// The first address it announced.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every address it announced, in order.
    #[must_use]
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Its process id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Asks it to stop (SIGTERM on Unix), kills it if it has not ended [`STOP_GRACE`] later,
    /// and measures it. [`Measured::killed`] says whether it ignored the request.
    ///
    /// # Errors
    /// When it cannot be signalled or waited for.
    pub fn stop(self) -> io::Result<Measured> {
        self.stop_within(STOP_GRACE)
    }

    /// What it has written to stderr so far: for a test to wait for a line that says a
    /// signal was acted on.
    #[must_use]
    pub fn stderr_so_far(&self) -> String {
        self.child.stderr_so_far()
    }

    /// Asks it to stop (SIGTERM on Unix; a kill elsewhere) without waiting: once more is a
    /// second request.
    ///
    /// # Errors
    /// When it cannot be signalled.
    pub fn terminate(&mut self) -> io::Result<()> {
        self.child.terminate()
    }

    /// Sends it SIGHUP (reread its certificates, reopen its log) without waiting.
    ///
    /// # Errors
    /// When it cannot be signalled.
    #[cfg(unix)]
    pub fn hangup(&mut self) -> io::Result<()> {
        self.child.hangup()
    }

    /// Waits for it to end, kills it if it has not `limit` from now, and measures it.
    ///
    /// # Errors
    /// As [`Server::stop`].
    pub fn wait(mut self, limit: Duration) -> io::Result<Measured> {
        self.child.finish(Instant::now() + limit)
    }

    /// Like [`Server::stop`] with `grace` instead of [`STOP_GRACE`].
    ///
    /// # Errors
    /// As [`Server::stop`].
    pub fn stop_within(mut self, grace: Duration) -> io::Result<Measured> {
        self.child.terminate()?;
        self.child.finish(Instant::now() + grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn readiness_lines_parse() {
        assert_eq!(
            parse_listening("neqo-server listening on 127.0.0.1:4433"),
            [addr("127.0.0.1:4433")]
        );
        assert_eq!(
            parse_listening("neqo-server listening on 127.0.0.1:4433, [::1]:5000"),
            [addr("127.0.0.1:4433"), addr("[::1]:5000")]
        );
        assert_eq!(
            parse_listening("msquic-peer listening on [::1]:9\r"),
            [addr("[::1]:9")]
        );
        assert_eq!(
            parse_listening("neqo-relay listening on 127.0.0.1:1, forwarding to 127.0.0.1:2"),
            [addr("127.0.0.1:1")]
        );
        assert!(parse_listening("starting").is_empty());
        assert!(parse_listening("listening on nothing").is_empty());
    }

    #[cfg(unix)]
    mod unix {
        use super::*;

        const READY: Duration = Duration::from_secs(30);

        fn sh(script: &str) -> Command {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            c
        }

        #[test]
        fn ready_after_one_line_per_address_and_stopped_cleanly() {
            let server = Server::start_expecting(
                &mut sh(r#"trap 'echo bye >&2; exit 0' TERM
                    echo starting
                    echo "x listening on 127.0.0.1:1"
                    echo "x listening on [::1]:2"
                    while :; do sleep 0.05; done"#),
                2,
                READY,
            )
            .unwrap();
            assert_eq!(server.addrs(), [addr("127.0.0.1:1"), addr("[::1]:2")]);
            assert_eq!(server.addr(), addr("127.0.0.1:1"));
            assert!(server.id() > 0);
            let m = server.stop().unwrap();
            assert!(m.success() && !m.killed, "{m:?}");
            assert_eq!(m.stderr, "bye\n");
            assert!(m.stdout.starts_with("starting\n"), "{m:?}");
        }

        #[test]
        fn sigterm_ignored_means_killed_at_the_deadline() {
            let server = Server::start(
                &mut sh(r#"trap '' TERM; echo "x listening on 127.0.0.1:1"; exec sleep 30"#),
                READY,
            )
            .unwrap();
            let m = server.stop_within(Duration::from_millis(200)).unwrap();
            assert!(m.killed, "{m:?}");
            assert_eq!(m.code, None);
        }

        #[test]
        fn a_child_that_exits_before_announcing() {
            let e = Server::start(
                &mut sh("echo starting; echo 'no certificate' >&2; exit 4"),
                READY,
            )
            .unwrap_err();
            let StartError::Exited(m) = &e else {
                panic!("{e:?}")
            };
            assert_eq!(m.code, Some(4));
            assert_eq!(m.stdout, "starting\n");
            assert_eq!(
                e.to_string(),
                "ended before saying where it listens (exit code 4): no certificate"
            );
        }

        #[test]
        fn a_child_that_never_announces_is_killed() {
            let e = Server::start(
                &mut sh("echo starting; exec sleep 30"),
                Duration::from_millis(200),
            )
            .unwrap_err();
            let StartError::Silent(m) = &e else {
                panic!("{e:?}")
            };
            assert!(m.killed, "{m:?}");
            assert_eq!(m.stdout, "starting\n");
        }

        #[test]
        fn too_few_addresses_is_silence() {
            let e = Server::start_expecting(
                &mut sh(r#"echo "x listening on 127.0.0.1:1"; exec sleep 30"#),
                2,
                Duration::from_millis(200),
            )
            .unwrap_err();
            assert!(matches!(e, StartError::Silent(_)), "{e:?}");
        }

        #[test]
        fn a_missing_program_cannot_start() {
            let e = Server::start(&mut Command::new("/nonexistent/server"), READY).unwrap_err();
            assert!(
                matches!(&e, StartError::Io(io) if io.kind() == io::ErrorKind::NotFound),
                "{e:?}"
            );
        }
    }
}
