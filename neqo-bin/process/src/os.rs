//! Reaping and signalling a child. On Unix `wait4` reaps it and reports its CPU time and peak
//! RSS in the same call, and SIGTERM asks it to stop cleanly; elsewhere the standard library
//! reaps it (no CPU or memory figures: they read zero) and stopping it means killing it.

use std::{io, process::Child, time::Duration};

/// How a reaped child ended and what it used.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Exit {
    /// Exit code; `None` when a signal ended it.
    pub(crate) code: Option<i32>,
    pub(crate) user: Duration,
    pub(crate) system: Duration,
    /// Peak resident set size, in KiB.
    pub(crate) max_rss_kib: u64,
}

#[cfg(unix)]
pub(crate) use unix::{hangup, terminate, try_reap};

#[cfg(not(unix))]
pub(crate) use other::{terminate, try_reap};

#[cfg(unix)]
mod unix {
    use super::{Child, Duration, Exit, io};

    fn pid(child: &Child) -> io::Result<libc::pid_t> {
        libc::pid_t::try_from(child.id()).map_err(io::Error::other)
    }

    fn duration(tv: libc::timeval) -> Duration {
        Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
    }

    /// Reaps `child` if it has ended, without blocking.
    ///
    /// `child` must not have been reaped yet. Once this returns `Some`, its pid is free for the
    /// system to reuse, so the caller must neither signal nor wait on `child` again.
    pub(crate) fn try_reap(child: &mut Child) -> io::Result<Option<Exit>> {
        let pid = pid(child)?;
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: `rusage` holds only integers, for which all-zero bytes are a valid value.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: `status` and `usage` are live locals, valid for writes during the call;
            // `pid` is a child of this process that nobody has reaped (the caller's contract),
            // so wait4 reaps nothing but it.
            let rc = unsafe { libc::wait4(pid, &raw mut status, libc::WNOHANG, &raw mut usage) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                return Ok(None);
            }
            // Linux and the BSDs count ru_maxrss in KiB, Apple's kernels in bytes.
            let rss_unit = if cfg!(target_vendor = "apple") {
                1024
            } else {
                1
            };
            return Ok(Some(Exit {
                code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
                user: duration(usage.ru_utime),
                system: duration(usage.ru_stime),
                max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0) / rss_unit,
            }));
        }
    }

    /// Sends SIGTERM: a request to stop cleanly, which the child may handle.
    ///
    /// `child` must not have been reaped yet (see [`try_reap`]).
    pub(crate) fn terminate(child: &mut Child) -> io::Result<()> {
        signal(child, libc::SIGTERM)
    }

    /// Sends SIGHUP: for a server, a request to read its files again.
    ///
    /// `child` must not have been reaped yet (see [`try_reap`]).
    pub(crate) fn hangup(child: &mut Child) -> io::Result<()> {
        signal(child, libc::SIGHUP)
    }

    fn signal(child: &mut Child, signo: libc::c_int) -> io::Result<()> {
        let pid = pid(child)?;
        // SAFETY: kill(2) takes no pointers. `pid` names our unreaped child (the callers'
        // contract; an exited but unreaped child keeps its pid), never a reused pid.
        if unsafe { libc::kill(pid, signo) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(not(unix))]
mod other {
    use super::{Child, Exit, io};

    /// Reaps `child` if it has ended, without blocking; CPU time and peak RSS read zero.
    pub(crate) fn try_reap(child: &mut Child) -> io::Result<Option<Exit>> {
        Ok(child.try_wait()?.map(|status| Exit {
            code: status.code(),
            ..Exit::default()
        }))
    }

    /// There is no graceful stop to ask for: kills `child`.
    pub(crate) fn terminate(child: &mut Child) -> io::Result<()> {
        child.kill()
    }
}
