//! The driver's pacer: releases a connection's datagrams at the congestion controller's rate.
//!
//! See `docs/reference/pacing.md` for who paces what.
//!
//! The bucket holds [`QUANTUM`] of the rate (at least [`MIN_BURST`] datagrams, at most cwnd)
//! and, in the send round of a pacing wake-up that came late, that lateness's worth too, so
//! that late wake-ups do not cost rate. A connection waiting for the pacer is released when
//! its bucket holds a release's worth ([`Pacer::release_wait`]): [`QUANTUM`] of the rate per
//! connection the driver paces at once, at least a datagram, at most a run
//! ([`Pacer::run_limit`]).
//!
//! One paced connection is released every 250 us. Each release costs the driver a wake-up, a
//! poll and a send message, and it wakes the receiver, whose acknowledgment the driver then
//! reads, so n connections released every 250 us each would cost n times the releases of
//! one, in runs n times shorter at the same aggregate rate (at 1000 connections, one datagram
//! each). Waiting for n times the quantum holds the driver to about one release per
//! [`QUANTUM`] whatever the number of connections, while the aggregate leaving the socket
//! stays as smooth. A run is [`BURST_DATAGRAMS`] where the quantum of the rate is less; for
//! a release shared among many connections it may be more, up to [`MAX_RELEASE`] and a
//! quarter of cwnd: a fixed 10 there would have every run acknowledged on its own. With
//! [`PreciseTimer`] (Linux) wake-ups come only
//! microseconds late, so the bucket stays small and runs short; on tokio's timers (elsewhere)
//! the lateness makes the bucket about a millisecond of the rate, as it must be to sustain
//! the rate. `docs/records/pacing.md` has the measurements.

use std::time::{Duration, Instant};

/// Datagrams one transmit may carry while pacing, unless a quarter millisecond of the rate is
/// more; also the cap on the handshake's unpaced flights.
pub const BURST_DATAGRAMS: usize = 10;

/// The pacing gain over cwnd/srtt (as in Linux's `sk_pacing_rate` and RFC 9002 §7.7).
pub const GAIN: f64 = 1.25;

/// tokio's timers fire on a 1 ms grid: a bucket smaller than the rate times that grid would
/// cap the rate below cwnd/srtt if the pacer waited on them ([`PreciseTimer`] does better).
pub const TIMER_GRANULARITY: Duration = Duration::from_millis(1);

/// The burst the bucket holds beyond the last wake-up's lateness: this long at the rate.
pub const QUANTUM: Duration = Duration::from_micros(250);

/// The least the bucket holds, in datagrams (as Linux's TSO autosizing and Chromium's "lumpy"
/// pacing, two).
pub const MIN_BURST: usize = 2;

/// The most one release carries however many connections share the driver: a GSO
/// super-packet's worth, as Linux's TSO autosizing caps a TCP burst.
pub const MAX_RELEASE: usize = 65_536;

/// A release carries at most this share of cwnd, so a window still leaves in spaced parts.
const RELEASE_CWND_DIVISOR: f64 = 4.0;

/// Deadlines nearer than this are waited for on the [`PreciseTimer`] when pacing, beyond it on
/// tokio's timer.
pub const PRECISE_WITHIN: Duration = Duration::from_millis(2);

/// What the pacer waits on for release times nearer than 2 ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PacingTimer {
    /// A `timerfd` where there is one (Linux); tokio's timers elsewhere.
    #[default]
    Precise,
    /// tokio's timers and their 1 ms grid, as on platforms without a precise timer: bursts of
    /// about a millisecond of the rate, one wake-up per millisecond at most.
    Tokio,
}

/// A token bucket per connection, refilled at `GAIN * cwnd / srtt`.
#[derive(Debug)]
pub struct Pacer {
    tokens: f64,
    last: Instant,
    /// When the last refusal said a datagram could leave, until a call at or after it.
    release: Option<Instant>,
    /// The call that came at or after it, and how late: for calls at that instant (the same
    /// send round) the bucket holds this much more of the rate.
    late: Option<(Instant, Duration)>,
}

impl Pacer {
    #[must_use]
    pub const fn new(now: Instant) -> Self {
        Self {
            tokens: 0.0,
            last: now,
            release: None,
            late: None,
        }
    }

    /// How much of the rate a waiting connection waits for while `paced` connections wait
    /// for their pacers: [`QUANTUM`] each (the release is also bounded by a run).
    #[must_use]
    pub fn release_wait(paced: usize) -> Duration {
        QUANTUM.saturating_mul(u32::try_from(paced.max(1)).unwrap_or(u32::MAX))
    }

    /// Bytes per second at this cwnd and rtt.
    #[must_use]
    #[expect(clippy::cast_precision_loss, reason = "rates need no exact integers")]
    pub fn rate(cwnd: u64, rtt: Duration) -> f64 {
        GAIN * cwnd as f64 / rtt.as_secs_f64().max(1e-6)
    }

    /// The most `mtu`-sized datagrams one transmit may carry at this rate, for a release that
    /// waits for `wait` of it: [`BURST_DATAGRAMS`], or more where the bucket's [`QUANTUM`] of
    /// the rate (at most cwnd) or the release (at most [`MAX_RELEASE`] and a quarter of cwnd)
    /// is more.
    ///
    /// Runs of one connection in one send round leave back to back anyway, so what bounds a
    /// burst on the wire is the bucket, not this limit; a fixed 10 would only multiply
    /// transmits (and their per-transmit cost) where the rate is high. Where 250 us of the
    /// rate is under 10 datagrams the limit stays 10, so a late wake-up's catch-up still
    /// leaves in runs of at most 10. A connection alone waits for [`QUANTUM`], so only a
    /// release shared among connections is ever longer than that.
    #[must_use]
    #[expect(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "token arithmetic in floating point, results bounded"
    )]
    pub fn run_limit(rate: f64, cwnd: u64, mtu: usize, wait: Duration) -> usize {
        let mtu = mtu.max(1) as f64;
        let quantum = (rate * QUANTUM.as_secs_f64()).min(cwnd as f64) / mtu;
        let shared = (rate * wait.as_secs_f64())
            .min(MAX_RELEASE as f64)
            .min(cwnd as f64 / RELEASE_CWND_DIVISOR)
            / mtu;
        (quantum.max(shared) as usize).max(BURST_DATAGRAMS)
    }

    /// How many `mtu`-sized datagrams may leave now (at most [`Pacer::run_limit`]), or, when
    /// the bucket holds less than a release (`wait` of the rate, at least a datagram, at most
    /// a run; see [`Pacer::release_wait`]), the instant at which it will.
    #[expect(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "token arithmetic in floating point, results bounded"
    )]
    pub fn allowance(
        &mut self,
        now: Instant,
        cwnd: u64,
        rtt: Duration,
        mtu: usize,
        wait: Duration,
    ) -> Result<usize, Instant> {
        let rate = Self::rate(cwnd, rtt);
        let mtu_f = mtu as f64;
        // A wake-up that came late owes the datagrams of its lateness: hold them, or the rate
        // falls short of cwnd/srtt by the timer's lateness.
        if let Some(r) = self.release
            && now >= r
        {
            self.late = Some((now, (now - r).min(2 * TIMER_GRANULARITY)));
            self.release = None;
        }
        let late = match self.late {
            Some((at, late)) if at == now => late,
            _ => Duration::ZERO,
        };
        let run_limit = Self::run_limit(rate, cwnd, mtu, wait);
        let cwnd_f = cwnd as f64;
        // What a release waits for: `wait` of the rate, at least a datagram, at most a run.
        let due = (rate * wait.as_secs_f64())
            .min(run_limit as f64 * mtu_f)
            .min(cwnd_f)
            .max(mtu_f);
        let capacity = (rate * (QUANTUM + late).as_secs_f64())
            .max(due)
            .min(cwnd_f)
            .max((MIN_BURST as f64) * mtu_f);
        let due = due.min(capacity);
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * rate).min(capacity);
        // A hair of slack for floating point: woken exactly at the release time, go.
        if self.tokens + 1e-6 >= due {
            self.release = None;
            Ok(((self.tokens / mtu_f) as usize).clamp(1, run_limit))
        } else {
            // Never "now": a release time rounded down to the current instant would be refused
            // again at once, without the clock having moved.
            let until =
                Duration::from_secs_f64((due - self.tokens) / rate).max(Duration::from_micros(1));
            let at = now + until;
            self.release = Some(at);
            Err(at)
        }
    }

    /// When the last refusal said a datagram could leave, until a call at or after it (or one
    /// that lets datagrams leave) makes it moot: the driver wakes the connection then.
    #[must_use]
    pub const fn release(&self) -> Option<Instant> {
        self.release
    }

    /// Drops a pending release: the connection sends past its pacer now (its handshake, its
    /// close), and a release left pending would wake it at once, again and again.
    pub const fn clear_release(&mut self) {
        self.release = None;
    }

    /// Takes `bytes` that just left.
    #[expect(clippy::cast_precision_loss, reason = "token arithmetic")]
    pub fn consume(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
    }
}

pub use super::precise_timer::PreciseTimer;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_small_bursts_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        let rtt = Duration::from_millis(100);
        // 1.25 * 120 000 / 0.1 = 1.5 MB/s; 1200-byte datagrams every 0.8 ms.
        let next = p.allowance(t0, 120_000, rtt, 1200, QUANTUM).unwrap_err();
        assert!((next - t0).abs_diff(Duration::from_micros(800)) < Duration::from_micros(1));
        // Woken on time: one datagram.
        assert_eq!(p.allowance(next, 120_000, rtt, 1200, QUANTUM), Ok(1));
        p.consume(1200);
        // After 100 ms idle the bucket holds the least burst, not 100 ms of the rate.
        let later = next + Duration::from_millis(100);
        assert_eq!(
            p.allowance(later, 120_000, rtt, 1200, QUANTUM),
            Ok(MIN_BURST)
        );
        p.consume(MIN_BURST * 1200);
        assert!(p.allowance(later, 120_000, rtt, 1200, QUANTUM).is_err());
    }

    #[test]
    fn runs_are_ten_at_modest_rates_and_the_quantum_at_high_ones() {
        let mtu = 1452;
        // 100 Mbit/s: 250 us is 2 datagrams; a 2 ms late wake-up still goes in runs of 10.
        let rate = 100e6 / 8.0;
        assert_eq!(
            Pacer::run_limit(rate, 10_000_000, mtu, QUANTUM),
            BURST_DATAGRAMS
        );
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        let rtt = Duration::from_millis(20);
        let cwnd = (rate * rtt.as_secs_f64() / GAIN) as u64;
        let at = p.allowance(t0, cwnd, rtt, mtu, QUANTUM).unwrap_err();
        let late = at + Duration::from_millis(2);
        assert_eq!(
            p.allowance(late, cwnd, rtt, mtu, QUANTUM),
            Ok(BURST_DATAGRAMS)
        );
        // Loopback-like: cwnd 2 MB at 200 us srtt. 250 us of the rate exceeds cwnd, so runs
        // may carry what cwnd holds, up to the bucket.
        let (cwnd, rtt) = (2_000_000, Duration::from_micros(200));
        let rate = Pacer::rate(cwnd, rtt);
        assert_eq!(Pacer::run_limit(rate, cwnd, mtu, QUANTUM), 2_000_000 / mtu);
        let mut p = Pacer::new(t0);
        let _ = p.allowance(t0, cwnd, rtt, mtu, QUANTUM);
        let n = p
            .allowance(t0 + Duration::from_millis(1), cwnd, rtt, mtu, QUANTUM)
            .unwrap();
        assert!(n > BURST_DATAGRAMS, "{n}");
        assert!(n <= 2_000_000 / mtu, "{n}");
    }

    #[test]
    fn the_release_wait_grows_with_paced_connections() {
        assert_eq!(Pacer::release_wait(0), QUANTUM);
        assert_eq!(Pacer::release_wait(1), QUANTUM);
        assert_eq!(Pacer::release_wait(4), 4 * QUANTUM);
        assert_eq!(Pacer::release_wait(1000), 1000 * QUANTUM);
        assert_eq!(
            Pacer::release_wait(usize::MAX),
            QUANTUM.saturating_mul(u32::MAX)
        );
    }

    #[test]
    fn a_waiting_connection_is_released_with_its_share_of_the_rate_at_most_a_quarter_of_cwnd() {
        // 5 MB/s (40 Mbit/s, one of 100 connections sharing 4 Gbit/s), 1250-byte datagrams,
        // cwnd 80 000 B.
        let (mtu, rtt) = (1250, Duration::from_millis(20));
        let cwnd = (5e6 * rtt.as_secs_f64() / GAIN) as u64;
        let t0 = Instant::now();
        // Alone: a datagram every 250 us. Four paced: 1 ms, four datagrams. Ten: 2.5 ms, ten.
        // A thousand: a quarter of cwnd (4 ms of the rate), not 250 ms of it.
        for (paced, datagrams) in [(1, 1), (4, 4), (10, 10), (1000, 16)] {
            let wait = Pacer::release_wait(paced);
            let mut p = Pacer::new(t0);
            let at = p.allowance(t0, cwnd, rtt, mtu, wait).unwrap_err();
            let waited = (at - t0).as_secs_f64();
            let expected = (datagrams * mtu) as f64 / 5e6;
            assert!((waited - expected).abs() < 1e-5, "{paced}: {waited} s");
            assert_eq!(
                p.allowance(at, cwnd, rtt, mtu, wait),
                Ok(datagrams),
                "{paced}"
            );
            p.consume(datagrams * mtu);
            // Over a second the rate is the same, however many connections are paced.
            let mut now = at;
            let mut sent = 0;
            while now < t0 + Duration::from_secs(1) {
                match p.allowance(now, cwnd, rtt, mtu, wait) {
                    Ok(n) => {
                        assert!(n <= datagrams, "{paced}: a run of {n}");
                        p.consume(n * mtu);
                        sent += n;
                    }
                    Err(next) => now = next,
                }
            }
            // 4000 datagrams in the second, less the last release or two cut off at its end.
            assert!(
                (4000 - 2 * datagrams..=4000).contains(&sent),
                "{paced}: {sent}"
            );
        }
    }

    #[test]
    fn a_release_is_at_most_64_kib() {
        // 75 MB/s at 20 ms: cwnd 1.2 MB, so a quarter of it is more than 64 KiB.
        let (mtu, rtt, cwnd) = (1250, Duration::from_millis(20), 1_200_000);
        let rate = Pacer::rate(cwnd, rtt);
        let wait = Pacer::release_wait(1000);
        assert_eq!(Pacer::run_limit(rate, cwnd, mtu, wait), MAX_RELEASE / mtu);
        // Alone, the quantum of the rate (15 datagrams) is the run.
        assert_eq!(Pacer::run_limit(rate, cwnd, mtu, QUANTUM), 15);
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        let at = p.allowance(t0, cwnd, rtt, mtu, wait).unwrap_err();
        assert_eq!(p.allowance(at, cwnd, rtt, mtu, wait), Ok(MAX_RELEASE / mtu));
    }

    #[test]
    fn late_wake_ups_keep_the_rate() {
        // 1.25 * 1.2 MB / 0.02 s = 75 MB/s: a datagram every 16 us. Woken on a 1 ms grid, the
        // bucket holds the lateness, so a millisecond's 62 datagrams leave per wake-up.
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        let rtt = Duration::from_millis(20);
        let mut now = t0;
        let mut sent = 0;
        for _ in 0..100 {
            loop {
                match p.allowance(now, 1_200_000, rtt, 1200, QUANTUM) {
                    Ok(n) => {
                        p.consume(n * 1200);
                        sent += n;
                    }
                    Err(at) => {
                        assert!(at > now);
                        break;
                    }
                }
            }
            now += TIMER_GRANULARITY;
        }
        // 99 ms at 62.5 datagrams per ms.
        assert!((6000..=6250).contains(&sent), "{sent}");
    }
}
