//! One direction of an impaired link: what happens to each datagram, decided by a seeded RNG.

use std::{
    cmp::Ordering,
    collections::BinaryHeap,
    time::{Duration, Instant},
};

use bytes::BytesMut;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// What a link does to the datagrams crossing it. Probabilities are in `0.0..=1.0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `0..=jitter` per datagram (which reorders too).
    pub jitter: Duration,
    /// Probability a datagram is dropped.
    pub loss: f64,
    /// Probability a datagram is held back so that later ones overtake it.
    pub reorder: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability one bit of a datagram is flipped.
    pub corrupt: f64,
    /// Bottleneck rate in Mbit/s; `None` for no limit.
    pub rate_mbit: Option<f64>,
    /// Datagrams the bottleneck queue holds before it drops (tail drop). Only with a rate.
    pub queue: usize,
}

impl Default for Impairment {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
            rate_mbit: None,
            queue: 1000,
        }
    }
}

impl Impairment {
    /// Checks the probabilities and the rate.
    ///
    /// # Errors
    /// A message naming the first value out of range.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!(
                    "{name} must be a probability between 0 and 1 (or 0% and 100%), got {p}"
                ));
            }
        }
        if let Some(r) = self.rate_mbit
            && !(r.is_finite() && r > 0.0)
        {
            return Err(format!("rate must be a positive number of Mbit/s, got {r}"));
        }
        if self.queue == 0 {
            return Err("queue must hold at least one datagram".into());
        }
        Ok(())
    }
}

/// What a link did, counted per datagram.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams that entered the link.
    pub received: u64,
    /// Datagrams that left it (duplicates included).
    pub forwarded: u64,
    /// Bytes that left it.
    pub forwarded_bytes: u64,
    /// Dropped by random loss.
    pub lost: u64,
    /// Dropped because the bottleneck queue was full.
    pub queue_drops: u64,
    /// Delivered with a flipped bit.
    pub corrupted: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Held back to be overtaken.
    pub reordered: u64,
    /// Waiting in the link now (delayed, queued or held back).
    pub queued: u64,
}

/// A datagram waiting to leave, tagged with where it goes.
#[derive(Debug)]
pub(crate) struct Pending<T> {
    pub(crate) due: Instant,
    seq: u64,
    pub(crate) data: BytesMut,
    pub(crate) to: T,
}

impl<T> PartialEq for Pending<T> {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due && self.seq == other.seq
    }
}
impl<T> Eq for Pending<T> {}
impl<T> PartialOrd for Pending<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Pending<T> {
    /// Reversed, so that the max-heap yields the earliest (then the first queued) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .due
            .cmp(&self.due)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// One direction of the relay.
#[derive(Debug)]
pub(crate) struct Link<T> {
    imp: Impairment,
    rng: StdRng,
    queue: BinaryHeap<Pending<T>>,
    /// When the bottleneck finishes serialising what it already holds.
    busy_until: Option<Instant>,
    seq: u64,
    pub(crate) stats: LinkStats,
}

impl<T: Clone> Link<T> {
    pub(crate) fn new(imp: Impairment, seed: u64) -> Self {
        Self {
            imp,
            rng: StdRng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            busy_until: None,
            seq: 0,
            stats: LinkStats::default(),
        }
    }

    /// Datagrams queued at the bottleneck (sent but not yet serialised), given the time.
    fn in_bottleneck(&self, now: Instant, rate_bps: f64) -> usize {
        match self.busy_until {
            // Backlog in bytes is the time left times the rate; in datagrams, assume the
            // typical size just enqueued. Simple and enough to model a tail-drop queue.
            Some(t) if t > now => {
                let backlog_bits = (t - now).as_secs_f64() * rate_bps;
                (backlog_bits / (1200.0 * 8.0)).ceil() as usize
            }
            _ => 0,
        }
    }

    /// Takes a datagram in at `now`: drops, corrupts, duplicates, schedules it.
    pub(crate) fn push(&mut self, now: Instant, mut data: BytesMut, to: T) {
        self.stats.received += 1;
        let imp = self.imp;
        // Draw every decision for every datagram, in a fixed order, so that a seed replays
        // the same fate for the n-th datagram whatever the earlier ones' fates were.
        let lose = self.rng.random::<f64>() < imp.loss;
        let corrupt = self.rng.random::<f64>() < imp.corrupt;
        let duplicate = self.rng.random::<f64>() < imp.duplicate;
        let reorder = self.rng.random::<f64>() < imp.reorder;
        let jitter_frac = self.rng.random::<f64>();
        let bit = self.rng.random::<u64>();
        if lose {
            self.stats.lost += 1;
            return;
        }
        let mut departure = now;
        if let Some(rate) = imp.rate_mbit {
            let rate_bps = rate * 1e6;
            if self.in_bottleneck(now, rate_bps) >= imp.queue {
                self.stats.queue_drops += 1;
                return;
            }
            let start = self.busy_until.map_or(now, |t| t.max(now));
            let serialise = Duration::from_secs_f64(data.len() as f64 * 8.0 / rate_bps);
            departure = start + serialise;
            self.busy_until = Some(departure);
        }
        if corrupt && !data.is_empty() {
            let bits = data.len() as u64 * 8;
            let b = (bit % bits) as usize;
            data[b / 8] ^= 1 << (b % 8);
            self.stats.corrupted += 1;
        }
        let mut due = departure + imp.delay + imp.jitter.mul_f64(jitter_frac);
        if reorder {
            // Held back by one extra delay (at least 1 ms) so the datagrams behind overtake it.
            due += imp.delay.max(Duration::from_millis(1));
            self.stats.reordered += 1;
        }
        if duplicate {
            self.stats.duplicated += 1;
            self.enqueue(due, data.clone(), to.clone());
        }
        self.enqueue(due, data, to);
    }

    fn enqueue(&mut self, due: Instant, data: BytesMut, to: T) {
        self.seq += 1;
        self.queue.push(Pending {
            due,
            seq: self.seq,
            data,
            to,
        });
    }

    /// When the next datagram is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.queue.peek().map(|p| p.due)
    }

    /// Every datagram due by `now`, in the order they are due.
    pub(crate) fn pop_due(&mut self, now: Instant, out: &mut Vec<Pending<T>>) {
        while self.queue.peek().is_some_and(|p| p.due <= now) {
            if let Some(p) = self.queue.pop() {
                self.stats.forwarded += 1;
                self.stats.forwarded_bytes += p.data.len() as u64;
                out.push(p);
            }
        }
    }

    /// The counts, with what waits in the link now.
    pub(crate) fn snapshot(&self) -> LinkStats {
        LinkStats {
            queued: self.queue.len() as u64,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(imp: Impairment, seed: u64, n: u16) -> (Vec<Vec<u8>>, LinkStats) {
        let mut link = Link::new(imp, seed);
        let t0 = Instant::now();
        for i in 0..n {
            link.push(t0, BytesMut::from(&i.to_be_bytes()[..]), ());
        }
        let mut out = Vec::new();
        link.pop_due(t0 + Duration::from_secs(3600), &mut out);
        (
            out.into_iter().map(|p| p.data.to_vec()).collect(),
            link.stats,
        )
    }

    #[test]
    fn no_impairment_passes_everything_in_order() {
        let (out, stats) = run(Impairment::default(), 1, 1000);
        assert_eq!(out.len(), 1000);
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, d)| d[..] == (i as u16).to_be_bytes())
        );
        assert_eq!(stats.forwarded, 1000);
    }

    #[test]
    fn loss_drops_about_p_and_replays_with_the_seed() {
        let imp = Impairment {
            loss: 0.3,
            ..Impairment::default()
        };
        let (a, sa) = run(imp, 7, 2000);
        let (b, _) = run(imp, 7, 2000);
        let (c, _) = run(imp, 8, 2000);
        assert_eq!(a, b, "same seed, same fate");
        assert_ne!(a, c, "another seed, another fate");
        assert_eq!(sa.lost + sa.forwarded, 2000);
        // Binomial(2000, 0.3): mean 600, sd 20; fixed seed, so this is deterministic.
        assert!((480..720).contains(&sa.lost), "{}", sa.lost);
    }

    #[test]
    fn corruption_flips_exactly_one_bit() {
        let imp = Impairment {
            corrupt: 1.0,
            ..Impairment::default()
        };
        let (out, stats) = run(imp, 3, 500);
        assert_eq!(stats.corrupted, 500);
        for (i, d) in out.iter().enumerate() {
            let orig = (i as u16).to_be_bytes();
            let diff: u32 = d.iter().zip(orig).map(|(a, b)| (a ^ b).count_ones()).sum();
            assert_eq!(diff, 1);
        }
    }

    #[test]
    fn duplicates_and_reordering_keep_every_datagram() {
        let imp = Impairment {
            duplicate: 0.2,
            reorder: 0.2,
            ..Impairment::default()
        };
        let (out, stats) = run(imp, 11, 1000);
        assert_eq!(out.len() as u64, 1000 + stats.duplicated);
        assert!(stats.duplicated > 0 && stats.reordered > 0);
        let mut seen: Vec<u16> = out
            .iter()
            .map(|d| u16::from_be_bytes([d[0], d[1]]))
            .collect();
        let in_order = seen.windows(2).all(|w| w[0] <= w[1]);
        assert!(!in_order, "reordering reorders");
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1000);
    }

    #[test]
    fn bottleneck_queue_tail_drops_and_paces() {
        // 10 Mbit/s, room for 10 datagrams: a burst of 100 at one instant keeps ~10.
        let imp = Impairment {
            rate_mbit: Some(10.0),
            queue: 10,
            ..Impairment::default()
        };
        let mut link = Link::new(imp, 1);
        let t0 = Instant::now();
        for _ in 0..100 {
            link.push(t0, BytesMut::from(&[0u8; 1200][..]), ());
        }
        assert!(link.stats.queue_drops >= 85, "{:?}", link.stats);
        // Departures are spaced by the serialisation time (0.96 ms at 10 Mbit/s).
        let mut out = Vec::new();
        link.pop_due(t0 + Duration::from_secs(1), &mut out);
        let gaps: Vec<Duration> = out.windows(2).map(|w| w[1].due - w[0].due).collect();
        assert!(gaps.iter().all(|g| g.as_micros() == 960), "{gaps:?}");
    }

    #[test]
    fn validate_names_the_bad_value() {
        assert!(
            Impairment {
                loss: 1.5,
                ..Impairment::default()
            }
            .validate()
            .unwrap_err()
            .contains("loss")
        );
        assert!(
            Impairment {
                rate_mbit: Some(0.0),
                ..Impairment::default()
            }
            .validate()
            .unwrap_err()
            .contains("rate")
        );
        assert!(Impairment::default().validate().is_ok());
    }
}
