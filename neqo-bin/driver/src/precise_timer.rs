//! A one-shot timer with sub-millisecond resolution for pacing release times, which tokio's
//! 1 ms timer grid would round up to the next millisecond: a `timerfd` on Linux (this module
//! holds the crate's only unsafe code, its syscalls), no such timer elsewhere.

use std::{
    task::{Context, Poll},
    time::Instant,
};

/// A one-shot timer with sub-millisecond resolution (a `timerfd` on Linux) for pacing release
/// times, which tokio's 1 ms timer grid would round up to the next millisecond.
#[derive(Debug)]
pub struct PreciseTimer {
    #[cfg(target_os = "linux")]
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    armed: Option<Instant>,
}

impl PreciseTimer {
    /// A timer registered with the current tokio runtime.
    ///
    /// # Errors
    /// `timerfd_create` failed, or this is not Linux (`Unsupported`).
    #[cfg(target_os = "linux")]
    pub fn new() -> std::io::Result<Self> {
        use std::os::fd::FromRawFd as _;
        // SAFETY: a plain syscall without pointers.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just created and owned by nobody else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        // SAFETY: the AsyncFd owns `fd`, which stays open and the same until it is dropped.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(std::io::Error::from)?;
        Ok(Self { fd, armed: None })
    }

    /// A timer registered with the current tokio runtime.
    ///
    /// # Errors
    /// Always `Unsupported`: only Linux has one.
    #[cfg(not(target_os = "linux"))]
    pub fn new() -> std::io::Result<Self> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// Ready once `deadline` has passed; re-arms the timer when `deadline` changed.
    #[cfg(target_os = "linux")]
    pub fn poll_until(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        use std::os::fd::AsRawFd as _;
        let now = Instant::now();
        if deadline <= now {
            return Poll::Ready(());
        }
        if self.armed != Some(deadline) {
            let wait = deadline - now;
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: libc::time_t::try_from(wait.as_secs()).unwrap_or(libc::time_t::MAX),
                    tv_nsec: wait.subsec_nanos().into(),
                },
            };
            // SAFETY: `spec` is a valid itimerspec; the old value is not asked for.
            let rc = unsafe {
                libc::timerfd_settime(
                    self.fd.as_raw_fd(),
                    0,
                    &raw const spec,
                    std::ptr::null_mut(),
                )
            };
            if rc < 0 {
                // The caller's tokio sleep still wakes it, a millisecond late.
                return Poll::Pending;
            }
            self.armed = Some(deadline);
        }
        while let Poll::Ready(Ok(mut guard)) = self.fd.poll_read_ready(cx) {
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into an 8-byte buffer.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), expirations.as_mut_ptr().cast(), 8) };
            if n == 8 {
                self.armed = None;
                return Poll::Ready(());
            }
            guard.clear_ready();
        }
        Poll::Pending
    }

    /// Ready once `deadline` has passed (never before: there is no such timer here).
    #[cfg(not(target_os = "linux"))]
    pub fn poll_until(&mut self, _cx: &mut Context<'_>, deadline: Instant) -> Poll<()> {
        self.armed = Some(deadline);
        if deadline <= Instant::now() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::{future::poll_fn, time::Duration};

    use super::*;

    #[tokio::test]
    async fn fires_at_the_deadline_never_before_and_rearms() {
        let mut timer = PreciseTimer::new().expect("timerfd");
        for wait_us in [300u64, 50, 1500] {
            let deadline = Instant::now() + Duration::from_micros(wait_us);
            // Bounded: a broken timer fails here instead of hanging.
            tokio::time::timeout(
                Duration::from_secs(5),
                poll_fn(|cx| timer.poll_until(cx, deadline)),
            )
            .await
            .expect("the timer fired");
            assert!(Instant::now() >= deadline, "fired before its deadline");
        }
        // A deadline already past is ready at once, without arming anything.
        let past = Instant::now();
        assert!(
            poll_fn(|cx| Poll::Ready(timer.poll_until(cx, past)))
                .await
                .is_ready()
        );
    }

    #[tokio::test]
    async fn a_moved_deadline_rearms_the_timer() {
        let mut timer = PreciseTimer::new().expect("timerfd");
        let far = Instant::now() + Duration::from_secs(3600);
        assert!(
            poll_fn(|cx| Poll::Ready(timer.poll_until(cx, far)))
                .await
                .is_pending()
        );
        let near = Instant::now() + Duration::from_micros(200);
        tokio::time::timeout(
            Duration::from_secs(5),
            poll_fn(|cx| timer.poll_until(cx, near)),
        )
        .await
        .expect("the nearer deadline replaced the far one");
    }
}
