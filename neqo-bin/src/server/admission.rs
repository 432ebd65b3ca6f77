//! Which new connections the server takes, validates with Retry first, or refuses; and the
//! half-open ones it is holding, which it gives up on at their handshake timeout.
//!
//! The order of the rules, for an Initial that starts a connection:
//! 1. Retry, unless its address is validated already (it carries our Retry token): always
//!    with [`RetryPolicy::Always`]; with [`RetryPolicy::Auto`] once the half-open
//!    connections reach [`Limits::retry_half_open`] or new connections arrive faster than
//!    [`Limits::retry_rate`] a second. A Retry costs the server no state, so a flood from
//!    spoofed addresses creates none.
//! 2. Refuse once [`Limits::max_half_open`] handshakes are in progress.
//! 3. Refuse once [`Limits::max_connections`] connections are open, half-open ones included.
//! 4. Accept.
//!
//! Under a flood of Initials from spoofed addresses, rule 1 keeps the half-open connections
//! few (past [`Limits::retry_half_open`] each new one gets a Retry and is never heard of
//! again), so the flood takes neither memory nor the slots of clients that can prove their
//! address.
//!
//! The workers of one server share the counts the limits apply to ([`Totals`]): the half-open
//! and open connections are the server's, not a worker's. Two workers deciding at the same
//! moment may each take the last slot, so a limit can be exceeded by at most the number of
//! workers less one. The arrival rate is each worker's own, against its share of
//! [`Limits::retry_rate`] (new connections are spread evenly over the workers).

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use quinn_proto::ConnectionHandle;

use crate::idmap::IdMap;

/// When the server asks new clients to prove their address with a Retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RetryPolicy {
    /// Under load: see [`Limits::retry_half_open`] and [`Limits::retry_rate`].
    #[default]
    Auto,
    /// Every new connection (one more round trip each).
    Always,
    /// Never.
    Never,
}

/// The numbers behind the rules.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Retry policy.
    pub retry: RetryPolicy,
    /// Auto Retry from this many half-open connections on.
    pub retry_half_open: usize,
    /// Auto Retry while more new connections than this arrive per second.
    pub retry_rate: u32,
    /// Handshakes in progress at most.
    pub max_half_open: usize,
    /// Connections at most, half-open ones included.
    pub max_connections: Option<usize>,
    /// A connection still in its handshake this long after it was accepted is closed.
    pub handshake_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::Auto,
            retry_half_open: 64,
            retry_rate: 200,
            max_half_open: 1000,
            max_connections: None,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// What to do with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accept,
    Retry,
    /// Refused: too many handshakes in progress.
    RefuseHalfOpen,
    /// Refused: `max_connections` open.
    RefuseFull,
}

/// The gate's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AdmissionCounters {
    /// Handshakes in progress now.
    pub half_open: usize,
    /// The most handshakes in progress at once.
    pub peak_half_open: usize,
    /// Retries decided (the driver counts those it sent).
    pub retries: u64,
    /// Connections refused for [`Limits::max_half_open`].
    pub refused_half_open: u64,
    /// Connections refused for [`Limits::max_connections`].
    pub refused_full: u64,
    /// Handshakes given up at their timeout.
    pub handshake_timeouts: u64,
}

/// What the limits count, over all the workers of a server.
#[derive(Debug, Default)]
pub(super) struct Totals {
    /// Connections accepted and not yet drained.
    open: AtomicUsize,
    /// The most of them at once.
    peak_open: AtomicUsize,
    /// Of them, handshakes in progress.
    half_open: AtomicUsize,
    /// The most of those at once.
    peak_half_open: AtomicUsize,
}

impl Totals {
    /// Connections open now, over all workers.
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The most connections open at once.
    pub(super) fn peak_open(&self) -> usize {
        self.peak_open.load(Ordering::Relaxed)
    }

    /// The most handshakes in progress at once.
    pub(super) fn peak_half_open(&self) -> usize {
        self.peak_half_open.load(Ordering::Relaxed)
    }

    fn half_open(&self) -> usize {
        self.half_open.load(Ordering::Relaxed)
    }
}

impl AdmissionCounters {
    /// Adds another worker's counts (the server's peak comes from [`Totals`]).
    pub(super) const fn add(&mut self, other: &Self) {
        self.half_open += other.half_open;
        self.retries += other.retries;
        self.refused_half_open += other.refused_half_open;
        self.refused_full += other.refused_full;
        self.handshake_timeouts += other.handshake_timeouts;
    }
}

/// One worker's gate: applies the rules to the server's [`Totals`]; the one owner of the
/// worker's half-open set.
#[derive(Debug)]
pub(super) struct Gate {
    limits: Limits,
    totals: std::sync::Arc<Totals>,
    /// Half-open connections and when each times out.
    half_open: IdMap<ConnectionHandle, Instant>,
    /// New connections seen in the current one-second window, and in the one before.
    window: (Instant, u32, u32),
    counters: AdmissionCounters,
}

impl Gate {
    /// A gate counting into `totals`, shared with the server's other workers.
    pub(super) fn new(limits: Limits, totals: std::sync::Arc<Totals>, now: Instant) -> Self {
        Self {
            limits,
            totals,
            half_open: IdMap::default(),
            window: (now, 0, 0),
            counters: AdmissionCounters::default(),
        }
    }

    /// Decides for a new connection.
    pub(super) fn admit(&mut self, validated: bool, now: Instant) -> Decision {
        let rate = self.count_arrival(now);
        let half_open = self.totals.half_open();
        let open = self.totals.open();
        let loaded = half_open >= self.limits.retry_half_open || rate > self.limits.retry_rate;
        let retry = match self.limits.retry {
            RetryPolicy::Always => true,
            RetryPolicy::Auto => loaded,
            RetryPolicy::Never => false,
        };
        let decision = if retry && !validated {
            self.counters.retries += 1;
            Decision::Retry
        } else if half_open >= self.limits.max_half_open {
            self.counters.refused_half_open += 1;
            Decision::RefuseHalfOpen
        } else if self.limits.max_connections.is_some_and(|max| open >= max) {
            self.counters.refused_full += 1;
            Decision::RefuseFull
        } else {
            Decision::Accept
        };
        if decision != Decision::Accept {
            tracing::debug!("new connection: {decision:?} ({half_open} half-open, {rate}/s)");
        }
        decision
    }

    /// New connections per second: the busier of this window and the last.
    fn count_arrival(&mut self, now: Instant) -> u32 {
        let (start, current, previous) = &mut self.window;
        let elapsed = now.saturating_duration_since(*start);
        if elapsed >= Duration::from_secs(1) {
            *previous = if elapsed < Duration::from_secs(2) {
                *current
            } else {
                0
            };
            *current = 0;
            *start = now;
        }
        *current = current.saturating_add(1);
        (*current).max(*previous)
    }

    /// A connection was accepted: open until [`drained`](Self::drained), half-open until
    /// [`connected`](Self::connected).
    pub(super) fn accepted(&mut self, ch: ConnectionHandle, now: Instant) {
        self.half_open
            .insert(ch, now + self.limits.handshake_timeout);
        self.counters.peak_half_open = self.counters.peak_half_open.max(self.half_open.len());
        let open = self.totals.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.totals.peak_open.fetch_max(open, Ordering::Relaxed);
        let half_open = self.totals.half_open.fetch_add(1, Ordering::Relaxed) + 1;
        self.totals
            .peak_half_open
            .fetch_max(half_open, Ordering::Relaxed);
    }

    /// Its handshake completed.
    pub(super) fn connected(&mut self, ch: ConnectionHandle) {
        self.no_longer_half_open(ch);
    }

    /// It is lost, whatever its state (it stays open until drained).
    pub(super) fn gone(&mut self, ch: ConnectionHandle) {
        self.no_longer_half_open(ch);
    }

    /// It is drained: no longer open.
    pub(super) fn drained(&mut self, ch: ConnectionHandle) {
        self.no_longer_half_open(ch);
        self.totals.open.fetch_sub(1, Ordering::Relaxed);
    }

    fn no_longer_half_open(&mut self, ch: ConnectionHandle) {
        if self.half_open.remove(&ch).is_some() {
            self.totals.half_open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The half-open connections whose handshake timed out by `now`, no longer tracked.
    pub(super) fn expired(&mut self, now: Instant) -> Vec<ConnectionHandle> {
        let expired: Vec<ConnectionHandle> = self
            .half_open
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(ch, _)| *ch)
            .collect();
        for ch in &expired {
            self.no_longer_half_open(*ch);
        }
        self.counters.handshake_timeouts += expired.len() as u64;
        expired
    }

    /// When the next handshake times out.
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        self.half_open.values().copied().min()
    }

    pub(super) fn counters(&self) -> AdmissionCounters {
        AdmissionCounters {
            half_open: self.half_open.len(),
            ..self.counters
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(f: impl FnOnce(&mut Limits)) -> (Gate, Instant) {
        let mut limits = Limits::default();
        f(&mut limits);
        let now = Instant::now();
        (Gate::new(limits, std::sync::Arc::default(), now), now)
    }

    #[test]
    fn never_and_always() {
        let (mut g, now) = gate(|l| l.retry = RetryPolicy::Always);
        assert_eq!(g.admit(false, now), Decision::Retry);
        assert_eq!(g.admit(true, now), Decision::Accept, "a token proves it");
        let (mut g, now) = gate(|l| {
            l.retry = RetryPolicy::Never;
            l.retry_half_open = 0;
        });
        assert_eq!(g.admit(false, now), Decision::Accept);
        assert_eq!(g.counters().retries, 1 - 1);
    }

    #[test]
    fn auto_retries_once_half_open_connections_pile_up() {
        let (mut g, now) = gate(|l| l.retry_half_open = 3);
        for i in 0..3 {
            assert_eq!(g.admit(false, now), Decision::Accept);
            g.accepted(ConnectionHandle(i), now);
        }
        assert_eq!(g.admit(false, now), Decision::Retry);
        assert_eq!(g.admit(true, now), Decision::Accept);
        g.connected(ConnectionHandle(0));
        assert_eq!(g.admit(false, now), Decision::Accept, "two half-open");
        assert_eq!(g.counters().retries, 1);
        assert_eq!(g.counters().peak_half_open, 3);
    }

    #[test]
    fn auto_retries_while_the_rate_is_high_and_stops_after() {
        let (mut g, now) = gate(|l| l.retry_rate = 5);
        let decisions: Vec<Decision> = (0..8).map(|_| g.admit(false, now)).collect();
        assert_eq!(&decisions[..5], &[Decision::Accept; 5]);
        assert_eq!(&decisions[5..], &[Decision::Retry; 3]);
        // The next second still counts the last one's rate...
        let later = now + Duration::from_millis(1500);
        assert_eq!(g.admit(false, later), Decision::Retry);
        // ...and a quiet second after that does not.
        let quiet = later + Duration::from_millis(2500);
        assert_eq!(g.admit(false, quiet), Decision::Accept);
    }

    #[test]
    fn half_open_and_open_connections_are_capped_each() {
        let (mut g, now) = gate(|l| {
            l.retry = RetryPolicy::Never;
            l.max_half_open = 2;
            l.max_connections = Some(3);
        });
        g.accepted(ConnectionHandle(0), now);
        g.accepted(ConnectionHandle(1), now);
        assert_eq!(g.admit(true, now), Decision::RefuseHalfOpen);
        g.connected(ConnectionHandle(0));
        assert_eq!(g.admit(true, now), Decision::Accept, "one half-open");
        g.accepted(ConnectionHandle(2), now);
        g.connected(ConnectionHandle(2));
        assert_eq!(g.admit(true, now), Decision::RefuseFull);
        let c = g.counters();
        assert_eq!((c.refused_half_open, c.refused_full), (1, 1));
    }

    #[test]
    fn a_flood_gets_retries_not_slots() {
        let (mut g, now) = gate(|l| {
            l.retry_half_open = 2;
            l.max_connections = Some(4);
        });
        g.accepted(ConnectionHandle(0), now);
        g.accepted(ConnectionHandle(1), now);
        for _ in 0..1000 {
            assert_eq!(g.admit(false, now), Decision::Retry);
        }
        assert_eq!(
            g.admit(true, now),
            Decision::Accept,
            "a client with a token"
        );
        assert_eq!(g.counters().retries, 1000);
    }

    #[test]
    fn the_limits_count_every_worker_and_drained_connections_free_their_slot() {
        let totals = std::sync::Arc::new(Totals::default());
        let limits = Limits {
            retry: RetryPolicy::Never,
            max_half_open: 3,
            max_connections: Some(4),
            ..Limits::default()
        };
        let now = Instant::now();
        let mut a = Gate::new(limits, totals.clone(), now);
        let mut b = Gate::new(limits, totals.clone(), now);
        a.accepted(ConnectionHandle(0), now);
        a.accepted(ConnectionHandle(1), now);
        b.accepted(ConnectionHandle(0), now);
        assert_eq!(b.admit(true, now), Decision::RefuseHalfOpen, "3 over both");
        a.connected(ConnectionHandle(0));
        assert_eq!(b.admit(true, now), Decision::Accept);
        b.accepted(ConnectionHandle(1), now);
        a.connected(ConnectionHandle(1));
        assert_eq!(a.admit(true, now), Decision::RefuseFull, "4 open over both");
        assert_eq!((totals.open(), totals.peak_open()), (4, 4));
        assert_eq!(totals.peak_half_open(), 3);
        // A lost connection holds its slot until it is drained; a half-open one is counted
        // out once only.
        b.gone(ConnectionHandle(1));
        assert_eq!(a.admit(true, now), Decision::RefuseFull);
        b.drained(ConnectionHandle(1));
        assert_eq!(totals.open(), 3);
        assert_eq!(totals.half_open(), 1);
        assert_eq!(a.admit(true, now), Decision::Accept);
    }

    #[test]
    fn handshakes_time_out() {
        let (mut g, now) = gate(|l| l.handshake_timeout = Duration::from_secs(2));
        g.accepted(ConnectionHandle(0), now);
        g.accepted(ConnectionHandle(1), now + Duration::from_secs(1));
        g.connected(ConnectionHandle(1));
        g.accepted(ConnectionHandle(2), now + Duration::from_secs(1));
        assert_eq!(g.next_expiry(), Some(now + Duration::from_secs(2)));
        assert!(g.expired(now + Duration::from_millis(1999)).is_empty());
        assert_eq!(
            g.expired(now + Duration::from_secs(2)),
            vec![ConnectionHandle(0)]
        );
        assert_eq!(
            g.expired(now + Duration::from_secs(3)),
            vec![ConnectionHandle(2)]
        );
        assert_eq!(g.next_expiry(), None);
        assert_eq!(g.counters().handshake_timeouts, 2);
        assert_eq!(g.counters().half_open, 0);
    }
}
