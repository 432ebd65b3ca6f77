//! Which new connections the server takes, validates with Retry first, or refuses; and the
//! half-open ones it is holding, which it gives up on at their handshake timeout.
//!
//! The order of the rules, for an Initial that starts a connection:
//! 1. Retry, unless its address is validated already (it carries our Retry token): always
//!    with [`RetryPolicy::Always`]; with [`RetryPolicy::Auto`] once the half-open
//!    connections reach [`Limits::retry_half_open`], new connections arrive faster than
//!    [`Limits::retry_rate`] a second, or the new connection's source (see [`ClientSource`]) holds
//!    [`SOURCE_RETRY_HALF_OPEN`] handshakes already. A Retry costs the server no state, so a
//!    flood from spoofed addresses creates none.
//! 2. Once [`Limits::max_half_open`] handshakes are in progress: make room by evicting the
//!    oldest handshake of the heaviest group, if it holds at least two more than the
//!    newcomer's, comparing level by level down the address prefixes (IPv6 /48, /56, /64;
//!    IPv4 /24, /32: `prefixes`); failing that, the oldest handshake of all if it is older
//!    than half the handshake timeout; refuse otherwise (`Ledger::evict_for`). One host
//!    or prefix may fill the table while nobody else wants it, but never keeps anyone else
//!    out, and neither do many sources holding one stale handshake each.
//! 3. Refuse once [`Limits::max_connections`] connections are open, half-open ones included.
//! 4. Accept.
//!
//! Under a flood of Initials from spoofed addresses, rule 1 keeps the half-open connections
//! few (past [`Limits::retry_half_open`] each new one gets a Retry and is never heard of
//! again), so the flood takes neither memory nor the slots of clients that can prove their
//! address. A client that proves its address and then never finishes a handshake (it replays
//! one Retry token, valid for its lifetime, with a new connection ID each time) gets past
//! rule 1, and rule 2 keeps it from holding anyone else's slot.
//!
//! The workers of one server share the counts the limits apply to, the arrival rate and the
//! choice of whom to evict ([`Ledger`]). Two workers deciding at the same moment may each take
//! the last slot, so a limit can be exceeded by at most the number of workers less one.

use std::{sync::Arc, time::Instant};

use quinn_proto::ConnectionHandle;

pub use super::ledger::ClientSource;
use neqo_driver::IdMap;

use super::ledger::Ledger;

/// [`RetryPolicy::Auto`] sends a Retry to a new connection whose source has this many handshakes in
/// progress already: a client opening more at once than a browser does, or one flooding
/// from a single address below the server-wide thresholds, proves its address first.
pub const SOURCE_RETRY_HALF_OPEN: usize = 8;

/// When the server asks new clients to prove their address with a Retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
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
    /// Auto Retry from this many half-open connections on, over the server.
    pub retry_half_open: usize,
    /// Auto Retry while more new connections than this arrive per second, over the server.
    pub retry_rate: u32,
    /// Handshakes in progress at most.
    pub max_half_open: usize,
    /// Connections at most, half-open ones included.
    pub max_connections: Option<usize>,
    /// A connection still in its handshake this long after it was accepted is closed.
    pub handshake_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::Auto,
            retry_half_open: 64,
            retry_rate: 200,
            max_half_open: 1000,
            max_connections: None,
            handshake_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// What to do with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Accept,
    Retry,
    /// Refused: too many handshakes in progress, and none to evict.
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
    /// Handshakes evicted from a full table to make room for another source's newcomer.
    pub evicted_half_open: u64,
    /// How long the completed handshakes took, from accepting the connection.
    pub handshakes: HandshakeTimes,
}

/// The upper bounds of [`HandshakeTimes`]'s buckets, in milliseconds (the last bucket counts
/// what is longer).
pub const HANDSHAKE_BUCKETS_MS: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/// Handshake durations, counted in buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HandshakeTimes {
    /// Handshakes completed.
    pub count: u64,
    /// Their durations added up, in microseconds.
    pub sum_us: u64,
    /// Bucket `i` counts the handshakes longer than bucket `i - 1`'s bound and at most
    /// [`HANDSHAKE_BUCKETS_MS`]`[i]`; the last one those longer than every bound.
    pub buckets: [u64; HANDSHAKE_BUCKETS_MS.len() + 1],
}

impl HandshakeTimes {
    fn observe(&mut self, took: std::time::Duration) {
        self.count += 1;
        self.sum_us += u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let ms = took.as_secs_f64() * 1000.0;
        #[expect(clippy::cast_precision_loss, reason = "bounds of a few thousand")]
        let i = HANDSHAKE_BUCKETS_MS
            .iter()
            .position(|&b| ms <= b as f64)
            .unwrap_or(HANDSHAKE_BUCKETS_MS.len());
        self.buckets[i] += 1;
    }

    const fn add(&mut self, other: &Self) {
        self.count += other.count;
        self.sum_us += other.sum_us;
        let mut i = 0;
        while i < self.buckets.len() {
            self.buckets[i] += other.buckets[i];
            i += 1;
        }
    }

    /// As a histogram in seconds, for the metrics endpoint.
    #[expect(clippy::cast_precision_loss, reason = "figures, not counts")]
    pub(super) fn histogram(&self) -> super::metrics::Buckets {
        let buckets = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let upper = HANDSHAKE_BUCKETS_MS
                    .get(i)
                    .map_or(f64::INFINITY, |&ms| ms as f64 / 1000.0);
                (upper, n)
            })
            .collect();
        super::metrics::Buckets {
            sum: self.sum_us as f64 / 1e6,
            count: self.count,
            buckets,
        }
    }
}

impl AdmissionCounters {
    /// Adds another worker's counts (the server's peak comes from the [`Ledger`]).
    pub(super) const fn add(&mut self, other: &Self) {
        self.half_open += other.half_open;
        self.retries += other.retries;
        self.refused_half_open += other.refused_half_open;
        self.refused_full += other.refused_full;
        self.handshake_timeouts += other.handshake_timeouts;
        self.evicted_half_open += other.evicted_half_open;
        self.handshakes.add(&other.handshakes);
    }
}

/// One worker's gate: applies the rules to the server's [`Ledger`], and keeps the worker's
/// half-open connections' deadlines.
#[derive(Debug)]
pub(super) struct Gate {
    worker: usize,
    limits: Limits,
    ledger: Arc<Ledger>,
    /// The worker's half-open connections and when each times out. Whether one still counts
    /// as half-open is the ledger's to say (another worker may have evicted it).
    half_open: IdMap<ConnectionHandle, Instant>,
    /// Every open connection's source.
    sources: IdMap<ConnectionHandle, ClientSource>,
    counters: AdmissionCounters,
}

impl Gate {
    /// Worker `worker`'s gate, counting into `ledger`, shared with the server's other workers.
    pub(super) fn new(worker: usize, limits: Limits, ledger: Arc<Ledger>) -> Self {
        Self {
            worker,
            limits,
            ledger,
            half_open: IdMap::default(),
            sources: IdMap::default(),
            counters: AdmissionCounters::default(),
        }
    }

    /// Decides for a new connection from `source`.
    pub(super) fn admit(
        &mut self,
        source: ClientSource,
        validated: bool,
        now: Instant,
    ) -> Decision {
        let a = self.ledger.arrive(source, now);
        let loaded = a.half_open >= self.limits.retry_half_open
            || a.rate > self.limits.retry_rate
            || a.source_half_open >= SOURCE_RETRY_HALF_OPEN;
        let retry = match self.limits.retry {
            RetryPolicy::Always => true,
            RetryPolicy::Auto => loaded,
            RetryPolicy::Never => false,
        };
        let decision = if retry && !validated {
            self.counters.retries += 1;
            Decision::Retry
        } else if a.half_open >= self.limits.max_half_open
            && self
                .ledger
                .evict_for(source, self.stale_before(now))
                .is_none()
        {
            self.counters.refused_half_open += 1;
            Decision::RefuseHalfOpen
        } else if self.limits.max_connections.is_some_and(|max| a.open >= max) {
            self.counters.refused_full += 1;
            Decision::RefuseFull
        } else {
            if a.half_open >= self.limits.max_half_open {
                self.counters.evicted_half_open += 1;
            }
            Decision::Accept
        };
        if decision != Decision::Accept {
            tracing::debug!(
                "new connection from {source}: {decision:?} ({} half-open, {} of them its, {}/s)",
                a.half_open,
                a.source_half_open,
                a.rate
            );
        }
        decision
    }

    /// A handshake accepted at this time or earlier may be evicted for any newcomer when
    /// no group holds more than the newcomer's (`Ledger::evict_for`): half its timeout ago.
    fn stale_before(&self, now: Instant) -> Option<Instant> {
        now.checked_sub(self.limits.handshake_timeout / 2)
    }

    /// A connection from `source` was accepted: open until [`drained`](Self::drained),
    /// half-open until [`connected`](Self::connected).
    pub(super) fn accepted(&mut self, ch: ConnectionHandle, source: ClientSource, now: Instant) {
        self.half_open
            .insert(ch, now + self.limits.handshake_timeout);
        self.sources.insert(ch, source);
        self.counters.peak_half_open = self.counters.peak_half_open.max(self.half_open.len());
        self.ledger.accepted(self.worker, ch, source, now);
    }

    /// Its handshake completed at `now`.
    pub(super) fn connected(&mut self, ch: ConnectionHandle, now: Instant) {
        if let Some(deadline) = self.no_longer_half_open(ch) {
            let accepted = deadline - self.limits.handshake_timeout;
            self.counters
                .handshakes
                .observe(now.saturating_duration_since(accepted));
        }
    }

    /// It is lost, whatever its state (it stays open until drained).
    pub(super) fn gone(&mut self, ch: ConnectionHandle) {
        self.no_longer_half_open(ch);
    }

    /// It is drained: no longer open.
    pub(super) fn drained(&mut self, ch: ConnectionHandle) {
        self.no_longer_half_open(ch);
        if let Some(source) = self.sources.remove(&ch) {
            self.ledger.drained(source);
        }
    }

    /// Takes `ch` out of the half-open ones; its handshake deadline if it was one.
    fn no_longer_half_open(&mut self, ch: ConnectionHandle) -> Option<Instant> {
        let deadline = self.half_open.remove(&ch)?;
        self.ledger.handshake_done(self.worker, ch);
        Some(deadline)
    }

    /// The half-open connections to close by `now`, no longer tracked: those whose handshake
    /// timed out, and those evicted (by any worker) to make room for another source.
    pub(super) fn expired(&mut self, now: Instant) -> Vec<ConnectionHandle> {
        let mut expired: Vec<ConnectionHandle> = self
            .half_open
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(ch, _)| *ch)
            .collect();
        for ch in &expired {
            self.no_longer_half_open(*ch);
        }
        self.counters.handshake_timeouts += expired.len() as u64;
        for ch in self.ledger.take_evicted(self.worker) {
            if self.half_open.remove(&ch).is_some() {
                expired.push(ch);
            }
        }
        expired
    }

    /// When [`expired`](Self::expired) must be called next at the latest: the next handshake
    /// timeout, or now if one of ours was evicted. (A worker that sleeps learns of an
    /// eviction at its next wake-up, by a datagram or a timer of its connections; the slot
    /// was given to the newcomer at once.)
    pub(super) fn next_expiry(&self, now: Instant) -> Option<Instant> {
        if self.ledger.has_evicted(self.worker) {
            return Some(now);
        }
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
    use std::time::Duration;

    use super::*;

    fn gate(f: impl FnOnce(&mut Limits)) -> (Gate, Instant) {
        let mut limits = Limits::default();
        f(&mut limits);
        (Gate::new(0, limits, Arc::default()), Instant::now())
    }

    /// Client address `n` (each its own source).
    fn src(n: u8) -> ClientSource {
        ClientSource::of(std::net::SocketAddr::from(([192, 0, 2, n], 4433)))
    }

    #[test]
    fn never_and_always() {
        let (mut g, now) = gate(|l| l.retry = RetryPolicy::Always);
        assert_eq!(g.admit(src(1), false, now), Decision::Retry);
        assert_eq!(
            g.admit(src(1), true, now),
            Decision::Accept,
            "a token proves it"
        );
        let (mut g, now) = gate(|l| {
            l.retry = RetryPolicy::Never;
            l.retry_half_open = 0;
        });
        assert_eq!(g.admit(src(1), false, now), Decision::Accept);
        assert_eq!(g.counters().retries, 0);
    }

    #[test]
    fn auto_retries_once_half_open_connections_pile_up() {
        let (mut g, now) = gate(|l| l.retry_half_open = 3);
        for i in 0..3 {
            assert_eq!(g.admit(src(i as u8), false, now), Decision::Accept);
            g.accepted(ConnectionHandle(i), src(i as u8), now);
        }
        assert_eq!(g.admit(src(9), false, now), Decision::Retry);
        assert_eq!(g.admit(src(9), true, now), Decision::Accept);
        g.connected(ConnectionHandle(0), now);
        assert_eq!(
            g.admit(src(9), false, now),
            Decision::Accept,
            "two half-open"
        );
        assert_eq!(g.counters().retries, 1);
        assert_eq!(g.counters().peak_half_open, 3);
    }

    #[test]
    fn auto_retries_while_the_rate_is_high_and_stops_after() {
        let (mut g, now) = gate(|l| l.retry_rate = 5);
        let decisions: Vec<Decision> = (0..8).map(|i| g.admit(src(i), false, now)).collect();
        assert_eq!(&decisions[..5], &[Decision::Accept; 5]);
        assert_eq!(&decisions[5..], &[Decision::Retry; 3]);
        // The next second still counts the last one's rate...
        let later = now + Duration::from_millis(1500);
        assert_eq!(g.admit(src(1), false, later), Decision::Retry);
        // ...and a quiet second after that does not.
        let quiet = later + Duration::from_millis(2500);
        assert_eq!(g.admit(src(1), false, quiet), Decision::Accept);
    }

    /// A source with many handshakes in progress proves its address before it gets another;
    /// other sources do not pay for it.
    #[test]
    fn auto_retries_a_source_holding_many_handshakes() {
        let (mut g, now) = gate(|_| {});
        for i in 0..SOURCE_RETRY_HALF_OPEN {
            assert_eq!(g.admit(src(1), false, now), Decision::Accept);
            g.accepted(ConnectionHandle(i), src(1), now);
        }
        assert_eq!(g.admit(src(1), false, now), Decision::Retry);
        assert_eq!(g.admit(src(1), true, now), Decision::Accept);
        assert_eq!(g.admit(src(2), false, now), Decision::Accept);
    }

    #[test]
    fn half_open_and_open_connections_are_capped_each() {
        let (mut g, now) = gate(|l| {
            l.retry = RetryPolicy::Never;
            l.max_half_open = 2;
            l.max_connections = Some(3);
        });
        g.accepted(ConnectionHandle(0), src(1), now);
        g.accepted(ConnectionHandle(1), src(1), now);
        assert_eq!(
            g.admit(src(1), true, now),
            Decision::RefuseHalfOpen,
            "the source filling the table evicts none of its own"
        );
        g.connected(ConnectionHandle(0), now);
        assert_eq!(
            g.admit(src(1), true, now),
            Decision::Accept,
            "one half-open"
        );
        g.accepted(ConnectionHandle(2), src(1), now);
        g.connected(ConnectionHandle(2), now);
        assert_eq!(g.admit(src(2), true, now), Decision::RefuseFull);
        let c = g.counters();
        assert_eq!((c.refused_half_open, c.refused_full), (1, 1));
    }

    #[test]
    fn a_flood_gets_retries_not_slots() {
        let (mut g, now) = gate(|l| {
            l.retry_half_open = 2;
            l.max_connections = Some(4);
        });
        g.accepted(ConnectionHandle(0), src(1), now);
        g.accepted(ConnectionHandle(1), src(2), now);
        for i in 0..1000 {
            assert_eq!(g.admit(src((i % 200) as u8), false, now), Decision::Retry);
        }
        assert_eq!(
            g.admit(src(3), true, now),
            Decision::Accept,
            "a client with a token"
        );
        assert_eq!(g.counters().retries, 1000);
    }

    /// One source that proves its address and never finishes a handshake (a replayed Retry
    /// token) fills the table: a newcomer from elsewhere takes the place of its oldest
    /// handshake, also one on another worker, which that worker then closes.
    #[test]
    fn a_validated_flood_from_one_source_keeps_nobody_else_out() {
        let ledger = Arc::new(Ledger::default());
        let limits = Limits {
            max_half_open: 4,
            ..Limits::default()
        };
        let now = Instant::now();
        let mut a = Gate::new(0, limits, ledger.clone());
        let mut b = Gate::new(1, limits, ledger.clone());
        let flood = src(66);
        for i in 0..4 {
            let g = if i % 2 == 0 { &mut a } else { &mut b };
            assert_eq!(g.admit(flood, true, now), Decision::Accept);
            g.accepted(ConnectionHandle(i), flood, now);
        }
        assert_eq!(b.admit(flood, true, now), Decision::RefuseHalfOpen);
        // A newcomer on worker 1 evicts the flood's oldest, which is worker 0's.
        assert_eq!(b.admit(src(1), true, now), Decision::Accept);
        b.accepted(ConnectionHandle(10), src(1), now);
        assert_eq!(b.counters().evicted_half_open, 1);
        assert_eq!(ledger.half_open(), 4);
        assert_eq!(a.next_expiry(now), Some(now), "worker 0 is told at once");
        assert_eq!(a.expired(now), vec![ConnectionHandle(0)]);
        assert_eq!(a.counters().half_open, 1);
        assert_eq!(a.counters().handshake_timeouts, 0);
        // The evicted connection's end later counts nothing twice.
        a.gone(ConnectionHandle(0));
        a.drained(ConnectionHandle(0));
        assert_eq!((ledger.half_open(), ledger.open()), (4, 4));
        // Another newcomer evicts again; then the flood holds two and each newcomer's source
        // one, and a second newcomer from src(1) evicts nothing: that would not even it out.
        assert_eq!(a.admit(src(2), true, now), Decision::Accept);
        a.accepted(ConnectionHandle(11), src(2), now);
        assert_eq!(b.admit(src(1), true, now), Decision::RefuseHalfOpen);
        assert_eq!(ledger.half_open(), 4);
    }

    #[test]
    fn the_limits_count_every_worker_and_drained_connections_free_their_slot() {
        let ledger = Arc::new(Ledger::default());
        let limits = Limits {
            retry: RetryPolicy::Never,
            max_half_open: 3,
            max_connections: Some(4),
            ..Limits::default()
        };
        let now = Instant::now();
        let mut a = Gate::new(0, limits, ledger.clone());
        let mut b = Gate::new(1, limits, ledger.clone());
        a.accepted(ConnectionHandle(0), src(1), now);
        a.accepted(ConnectionHandle(1), src(1), now);
        b.accepted(ConnectionHandle(0), src(1), now);
        assert_eq!(
            b.admit(src(1), true, now),
            Decision::RefuseHalfOpen,
            "3 over both"
        );
        a.connected(ConnectionHandle(0), now);
        assert_eq!(b.admit(src(1), true, now), Decision::Accept);
        b.accepted(ConnectionHandle(1), src(1), now);
        a.connected(ConnectionHandle(1), now);
        assert_eq!(
            a.admit(src(1), true, now),
            Decision::RefuseFull,
            "4 open over both"
        );
        assert_eq!((ledger.open(), ledger.peak_open()), (4, 4));
        assert_eq!(ledger.peak_half_open(), 3);
        // A lost connection holds its slot until it is drained; a half-open one is counted
        // out once only.
        b.gone(ConnectionHandle(1));
        assert_eq!(a.admit(src(1), true, now), Decision::RefuseFull);
        b.drained(ConnectionHandle(1));
        assert_eq!(ledger.open(), 3);
        assert_eq!(ledger.half_open(), 1);
        assert_eq!(a.admit(src(1), true, now), Decision::Accept);
    }

    /// A completed handshake is counted in the bucket of its duration from accept; one that
    /// ends otherwise is not counted.
    #[test]
    fn handshake_durations_are_counted_in_buckets() {
        let (mut g, now) = gate(|_| {});
        g.accepted(ConnectionHandle(0), src(1), now);
        g.accepted(ConnectionHandle(1), src(1), now);
        g.accepted(ConnectionHandle(2), src(1), now);
        g.connected(ConnectionHandle(0), now + Duration::from_millis(3));
        g.connected(ConnectionHandle(1), now + Duration::from_secs(7));
        g.gone(ConnectionHandle(2));
        g.connected(ConnectionHandle(2), now + Duration::from_millis(1));
        let h = g.counters().handshakes;
        assert_eq!((h.count, h.sum_us), (2, 7_003_000));
        let mut want = [0; HANDSHAKE_BUCKETS_MS.len() + 1];
        want[2] = 1; // 3 ms: above 2, at most 5
        want[HANDSHAKE_BUCKETS_MS.len()] = 1; // 7 s: above every bound
        assert_eq!(h.buckets, want);
        let hist = h.histogram();
        assert_eq!(hist.count, 2);
        assert_eq!(hist.buckets[2], (0.005, 1));
        assert_eq!(hist.buckets.last().unwrap().0, f64::INFINITY);
    }

    #[test]
    fn handshakes_time_out() {
        let (mut g, now) = gate(|l| l.handshake_timeout = Duration::from_secs(2));
        g.accepted(ConnectionHandle(0), src(1), now);
        g.accepted(ConnectionHandle(1), src(1), now + Duration::from_secs(1));
        g.connected(ConnectionHandle(1), now);
        g.accepted(ConnectionHandle(2), src(1), now + Duration::from_secs(1));
        assert_eq!(g.next_expiry(now), Some(now + Duration::from_secs(2)));
        assert!(g.expired(now + Duration::from_millis(1999)).is_empty());
        assert_eq!(
            g.expired(now + Duration::from_secs(2)),
            vec![ConnectionHandle(0)]
        );
        assert_eq!(
            g.expired(now + Duration::from_secs(3)),
            vec![ConnectionHandle(2)]
        );
        assert_eq!(g.next_expiry(now), None);
        assert_eq!(g.counters().handshake_timeouts, 2);
        assert_eq!(g.counters().half_open, 0);
    }
}
