//! CPU time of the calling thread or the whole process: steadier than wall-clock rates on a
//! shared 2-core machine.

use std::time::Duration;

/// CPU time (user + system) of `clock`, zero when it cannot be read.
#[cfg(unix)]
fn clock_time(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec; the clocks passed here always exist.
    let rc = unsafe { libc::clock_gettime(clock, &raw mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// CPU time (user + system) every thread of this process has used so far.
#[must_use]
pub fn process_time() -> Duration {
    #[cfg(unix)]
    {
        clock_time(libc::CLOCK_PROCESS_CPUTIME_ID)
    }
    #[cfg(not(unix))]
    {
        Duration::ZERO
    }
}

/// CPU time (user + system) the calling thread has used so far.
#[must_use]
pub fn thread_time() -> Duration {
    #[cfg(unix)]
    {
        clock_time(libc::CLOCK_THREAD_CPUTIME_ID)
    }
    #[cfg(not(unix))]
    {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn thread_time_advances_with_work() {
        let before = super::thread_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(super::thread_time() > before);
        assert!(super::process_time() >= super::thread_time());
    }
}
