//! The driver's pacer: releases a connection's datagrams at the congestion controller's rate.
//!
//! See "Pacing: who paces what" in the README for who paces what.

use std::time::{Duration, Instant};

/// Datagrams one burst may carry: the most the driver hands quinn-proto as `max_datagrams`
/// while pacing, and the least the bucket holds.
pub const BURST_DATAGRAMS: usize = 10;

/// The pacing gain over cwnd/srtt (as in Linux's `sk_pacing_rate` and RFC 9002 §7.7).
pub const GAIN: f64 = 1.25;

/// How far ahead the bucket may fill: tokio's timers fire on a 1 ms grid, so a bucket smaller
/// than the rate times that grid would cap the rate below cwnd/srtt.
pub const TIMER_GRANULARITY: Duration = Duration::from_millis(1);

/// A token bucket per connection, refilled at `GAIN * cwnd / srtt`.
#[derive(Debug)]
pub struct Pacer {
    tokens: f64,
    last: Instant,
}

impl Pacer {
    #[must_use]
    pub fn new(now: Instant) -> Self {
        Self {
            tokens: 0.0,
            last: now,
        }
    }

    /// Bytes per second at this cwnd and rtt.
    #[must_use]
    #[expect(clippy::cast_precision_loss, reason = "rates need no exact integers")]
    pub fn rate(cwnd: u64, rtt: Duration) -> f64 {
        GAIN * cwnd as f64 / rtt.as_secs_f64().max(1e-6)
    }

    /// How many `mtu`-sized datagrams may leave now (at most [`BURST_DATAGRAMS`]), or, when
    /// none, the instant at which one may.
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
    ) -> Result<usize, Instant> {
        let rate = Self::rate(cwnd, rtt);
        let mtu_f = mtu as f64;
        let capacity = (rate * 2.0 * TIMER_GRANULARITY.as_secs_f64())
            .min(cwnd as f64)
            .max((BURST_DATAGRAMS as f64) * mtu_f);
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * rate).min(capacity);
        if self.tokens >= mtu_f {
            Ok(((self.tokens / mtu_f) as usize).clamp(1, BURST_DATAGRAMS))
        } else {
            let wait = (mtu_f - self.tokens) / rate;
            Err(now + Duration::from_secs_f64(wait))
        }
    }

    /// Takes `bytes` that just left.
    #[expect(clippy::cast_precision_loss, reason = "token arithmetic")]
    pub fn consume(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_bursts_at_the_rate() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0);
        let rtt = Duration::from_millis(100);
        // 1.25 * 120 000 / 0.1 = 1.5 MB/s; 1200-byte datagrams every 0.8 ms.
        let next = p.allowance(t0, 120_000, rtt, 1200).unwrap_err();
        assert!(next > t0 && next <= t0 + Duration::from_millis(1));
        let later = t0 + Duration::from_millis(100);
        let n = p.allowance(later, 120_000, rtt, 1200).unwrap();
        assert_eq!(n, BURST_DATAGRAMS);
        p.consume(n * 1200);
        // Bucket capped: tokens were at most max(10 datagrams, 2 ms of rate) = 12 000.
        assert!(p.allowance(later, 120_000, rtt, 1200).is_err());
    }
}
