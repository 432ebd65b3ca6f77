//! What a load of many connections looks like from the client: handshake times, request
//! latencies and each connection's throughput, summed up as percentiles and a spread.

use std::time::Duration;

use hdrhistogram::Histogram;
use neqo_report::{Percentiles, Spread};

/// Highest latency the histograms record exactly (an hour, in microseconds); longer ones are
/// recorded as this, so one absurd sample cannot fail a run.
const MAX_MICROS: u64 = 3_600_000_000;

/// Durations recorded as microseconds, with three significant digits.
#[derive(Debug, Clone)]
pub(super) struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Self(
            Histogram::new_with_bounds(1, MAX_MICROS, 3)
                .expect("1..=MAX_MICROS at 3 digits is a valid histogram"),
        )
    }
}

impl Latencies {
    pub(super) fn record(&mut self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.0.saturating_record(micros.clamp(1, MAX_MICROS));
    }

    /// `None` when nothing was recorded.
    pub(super) fn percentiles(&self) -> Option<Percentiles> {
        if self.0.is_empty() {
            return None;
        }
        #[expect(clippy::cast_precision_loss, reason = "microseconds to milliseconds")]
        let ms = |v: u64| v as f64 / 1000.0;
        Some(Percentiles {
            count: self.0.len(),
            p50: ms(self.0.value_at_quantile(0.5)),
            p90: ms(self.0.value_at_quantile(0.9)),
            p99: ms(self.0.value_at_quantile(0.99)),
            max: ms(self.0.max()),
        })
    }
}

/// The spread of `values`; `None` for none.
pub(super) fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len().is_multiple_of(2) {
        f64::midpoint(v[mid - 1], v[mid])
    } else {
        v[mid]
    };
    Some(Spread {
        count: v.len(),
        min: v[0],
        median,
        max: v[v.len() - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_samples() {
        let mut l = Latencies::default();
        assert_eq!(l.percentiles(), None);
        // 1..=100 ms: p50 is 50 ms, p90 90 ms, p99 99 ms, max 100 ms (3 significant digits).
        for ms in 1..=100 {
            l.record(Duration::from_millis(ms));
        }
        let p = l.percentiles().unwrap();
        assert_eq!(p.count, 100);
        for (got, want) in [(p.p50, 50.0), (p.p90, 90.0), (p.p99, 99.0), (p.max, 100.0)] {
            assert!((got - want).abs() <= want * 0.001, "{got} vs {want}");
        }
        // Longer than the histogram holds: recorded at its top, not lost.
        l.record(Duration::from_secs(10_000));
        let p = l.percentiles().unwrap();
        assert_eq!(p.count, 101);
        assert!(p.max >= 3_599_000.0, "{}", p.max);
    }

    #[test]
    fn spread_of_odd_and_even_sets() {
        assert_eq!(spread(&[]), None);
        let s = spread(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.count, s.min, s.median, s.max), (3, 1.0, 2.0, 3.0));
        let s = spread(&[4.0, 1.0, 2.0, 3.0, f64::NAN]).unwrap();
        assert_eq!((s.count, s.min, s.median, s.max), (4, 1.0, 2.5, 4.0));
    }
}
