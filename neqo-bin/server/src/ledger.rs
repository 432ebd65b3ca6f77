//! [`Ledger`]: what the workers of one server count together, and the one owner of those
//! counts: connections open and in their handshake (half-open), in all and per [`ClientSource`];
//! the arrival rate of new connections; and the handshakes given up to make room for a
//! newcomer (evicted), which the worker owning each then closes.
//!
//! Why per source: the limits protect the server, and a limit that one host can fill alone
//! protects it from everyone but that host's victims. A client that replays one Retry token
//! (it validates its address for its lifetime) can open a handshake per Initial and never
//! finish one; counted only in all, it fills the half-open table and every newcomer is
//! refused. Counted per source, a newcomer that finds the table full takes the place of the
//! oldest handshake of the source that holds the most, as long as that source holds more
//! than the newcomer's does: one host may still use the whole table while nobody else wants
//! it (a load test from one machine), but never keeps anyone else out.
//!
//! Why server-wide: new connections reach the workers by a hash of their 4-tuple, so one
//! source's handshakes spread over the workers, or all land on one; the counts, the rate and
//! the choice of whom to evict must not depend on which.

use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, SocketAddr},
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use quinn_proto::ConnectionHandle;

use super::prefixes::Tally;

/// A client as the fair shares count it: its IPv4 address, or the /64 prefix of its IPv6
/// address (what one host or site is usually given, so that its 2^64 addresses count as
/// one). An IPv4 address mapped into IPv6 (a dual-stack socket) counts as the IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientSource(IpAddr);

impl ClientSource {
    /// The source `addr` belongs to.
    #[must_use]
    pub fn of(addr: SocketAddr) -> Self {
        match addr.ip() {
            IpAddr::V4(a) => Self(IpAddr::V4(a)),
            IpAddr::V6(a) => Self(a.to_ipv4_mapped().map_or_else(
                || IpAddr::V6((u128::from(a) & !u128::from(u64::MAX)).into()),
                IpAddr::V4,
            )),
        }
    }
}

impl ClientSource {
    /// Its address (an IPv6 one with the host bits cleared).
    pub(super) const fn ip(self) -> IpAddr {
        self.0
    }
}

impl std::fmt::Display for ClientSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

/// A handshake as the ledger knows it: the worker it runs on and its handle there.
type Handshake = (usize, ConnectionHandle);

/// What one source holds.
#[derive(Debug, Default)]
struct Held {
    /// Connections accepted and not yet drained.
    open: usize,
    /// Its handshakes in progress, by age (their [`State::next`] numbers).
    half_open: BTreeMap<u64, Handshake>,
}

/// The counts behind a decision on a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Arrival {
    /// New connections per second over the server: the busier of this second and the last.
    pub(super) rate: u32,
    /// Connections open over the server, half-open ones included.
    pub(super) open: usize,
    /// Handshakes in progress over the server.
    pub(super) half_open: usize,
    /// Of them, the new connection's source's.
    pub(super) source_half_open: usize,
}

#[derive(Debug, Default)]
struct State {
    /// The arrival window: its start, new connections in it, and in the one before.
    window: Option<(Instant, u32, u32)>,
    sources: HashMap<ClientSource, Held>,
    /// Every handshake in progress: its source and age number.
    handshakes: HashMap<Handshake, (ClientSource, u64)>,
    /// Every handshake in progress by age, with when it was accepted.
    by_age: BTreeMap<u64, (Handshake, Instant)>,
    /// The handshakes in progress of every source and prefix (`prefixes`).
    tally: Tally,
    /// The next handshake's age number.
    next: u64,
    /// Handshakes evicted, by the worker that owns them, not yet taken by it.
    evicted: HashMap<usize, Vec<ConnectionHandle>>,
}

impl State {
    /// Takes handshake `h` out of those in progress; its source, if it was one.
    fn forget(&mut self, h: Handshake) -> Option<ClientSource> {
        let (source, age) = self.handshakes.remove(&h)?;
        self.by_age.remove(&age);
        if let Some(held) = self.sources.get_mut(&source) {
            held.half_open.remove(&age);
        }
        self.tally.sub(source, 1);
        Some(source)
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    open: AtomicUsize,
    peak_open: AtomicUsize,
    half_open: AtomicUsize,
    peak_half_open: AtomicUsize,
    /// Set while some worker has evicted handshakes to take: spares the others the lock.
    any_evicted: AtomicBool,
    state: Mutex<State>,
}

impl Ledger {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections open now, over all workers.
    pub(super) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Handshakes in progress now, over all workers.
    pub(super) fn half_open(&self) -> usize {
        self.half_open.load(Ordering::Relaxed)
    }

    /// The most connections open at once.
    pub(super) fn peak_open(&self) -> usize {
        self.peak_open.load(Ordering::Relaxed)
    }

    /// The most handshakes in progress at once.
    pub(super) fn peak_half_open(&self) -> usize {
        self.peak_half_open.load(Ordering::Relaxed)
    }

    /// Sources holding a connection now.
    #[cfg(test)]
    fn sources(&self) -> usize {
        self.state().sources.len()
    }

    /// A new connection from `source` arrives: counts it in the rate, and returns what the
    /// decision on it needs.
    pub(super) fn arrive(&self, source: ClientSource, now: Instant) -> Arrival {
        let mut s = self.state();
        let (start, current, previous) = s.window.get_or_insert((now, 0, 0));
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
        let rate = (*current).max(*previous);
        Arrival {
            rate,
            open: self.open(),
            half_open: self.half_open(),
            source_half_open: s.sources.get(&source).map_or(0, |h| h.half_open.len()),
        }
    }

    /// Worker `worker` accepted `ch` from `source` at `now`: open, and half-open until
    /// [`handshake_done`](Self::handshake_done).
    pub(super) fn accepted(
        &self,
        worker: usize,
        ch: ConnectionHandle,
        source: ClientSource,
        now: Instant,
    ) {
        {
            let mut guard = self.state();
            let s = &mut *guard;
            let age = s.next;
            s.next += 1;
            let held = s.sources.entry(source).or_default();
            held.open += 1;
            held.half_open.insert(age, (worker, ch));
            s.handshakes.insert((worker, ch), (source, age));
            s.by_age.insert(age, ((worker, ch), now));
            s.tally.add(source, 1);
        }
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_open.fetch_max(open, Ordering::Relaxed);
        let half_open = self.half_open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_half_open.fetch_max(half_open, Ordering::Relaxed);
    }

    /// `ch`'s handshake is over (completed, failed, timed out): no longer half-open. False if
    /// it was not counted as half-open any more (evicted, or told twice).
    pub(super) fn handshake_done(&self, worker: usize, ch: ConnectionHandle) -> bool {
        self.state().forget((worker, ch)).is_some() && {
            self.half_open.fetch_sub(1, Ordering::Relaxed);
            true
        }
    }

    /// A connection of `source` is drained: no longer open. Its handshake must be done.
    pub(super) fn drained(&self, source: ClientSource) {
        let mut s = self.state();
        if let Some(held) = s.sources.get_mut(&source) {
            held.open = held.open.saturating_sub(1);
            if held.open == 0 && held.half_open.is_empty() {
                s.sources.remove(&source);
            }
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Makes room in a full half-open table for a newcomer from `newcomer`, by evicting:
    /// - the oldest handshake of the heaviest group, compared level by level down the
    ///   prefixes ([`Tally::heavier_than`]), if that group holds at least two more than the
    ///   newcomer's there (so that the eviction evens out, and never turns on the
    ///   newcomer's own group when it is the one filling the table);
    /// - failing that (every holder holds about as much as the newcomer: many sources with
    ///   one handshake each), the oldest handshake of all, if it was accepted at
    ///   `stale_before` or earlier: one that has taken that long is likely never to finish.
    ///   (`None`: no handshake is that old yet.)
    ///
    /// Its worker learns of it through [`take_evicted`](Self::take_evicted). Returns the
    /// evicted handshake.
    pub(super) fn evict_for(
        &self,
        newcomer: ClientSource,
        stale_before: Option<Instant>,
    ) -> Option<Handshake> {
        let mut guard = self.state();
        let s = &mut *guard;
        let victim = match s.tally.heavier_than(newcomer, 2) {
            Some(heavy) => *s.sources.get(&heavy)?.half_open.first_key_value()?.1,
            None => {
                let (_, &(oldest, at)) = s.by_age.first_key_value()?;
                if stale_before.is_none_or(|t| at > t) {
                    return None;
                }
                oldest
            }
        };
        s.forget(victim)?;
        self.half_open.fetch_sub(1, Ordering::Relaxed);
        s.evicted.entry(victim.0).or_default().push(victim.1);
        self.any_evicted.store(true, Ordering::Release);
        Some(victim)
    }

    /// Whether worker `worker` has evicted handshakes to take.
    pub(super) fn has_evicted(&self, worker: usize) -> bool {
        self.any_evicted.load(Ordering::Acquire) && self.state().evicted.contains_key(&worker)
    }

    /// The handshakes of worker `worker` evicted since the last call, for it to close.
    pub(super) fn take_evicted(&self, worker: usize) -> Vec<ConnectionHandle> {
        if !self.any_evicted.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut s = self.state();
        let taken = s.evicted.remove(&worker).unwrap_or_default();
        if s.evicted.is_empty() {
            self.any_evicted.store(false, Ordering::Release);
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_source_is_an_ipv4_address_or_an_ipv6_prefix() {
        assert_eq!(
            ClientSource::of(addr("192.0.2.7:1")),
            ClientSource::of(addr("192.0.2.7:2"))
        );
        assert_ne!(
            ClientSource::of(addr("192.0.2.7:1")),
            ClientSource::of(addr("192.0.2.8:1"))
        );
        assert_eq!(
            ClientSource::of(addr("[2001:db8:1:2:aaaa::1]:1")),
            ClientSource::of(addr("[2001:db8:1:2:ffff:1:2:3]:9"))
        );
        assert_ne!(
            ClientSource::of(addr("[2001:db8:1:2::1]:1")),
            ClientSource::of(addr("[2001:db8:1:3::1]:1"))
        );
        assert_eq!(
            ClientSource::of(addr("[::ffff:192.0.2.7]:5")),
            ClientSource::of(addr("192.0.2.7:6")),
            "v4-mapped"
        );
        assert_eq!(
            ClientSource::of(addr("[2001:db8:1:2:aaaa::1]:1")).to_string(),
            "2001:db8:1:2::/64"
        );
    }

    #[test]
    fn the_rate_is_the_servers_and_counts_the_last_second() {
        let l = Ledger::default();
        let now = Instant::now();
        let a = ClientSource::of(addr("192.0.2.1:1"));
        for i in 1..=5 {
            assert_eq!(l.arrive(a, now).rate, i);
        }
        assert_eq!(l.arrive(a, now + Duration::from_millis(1500)).rate, 5);
        assert_eq!(l.arrive(a, now + Duration::from_millis(4000)).rate, 1);
    }

    #[test]
    fn counts_follow_connections_and_sources_are_forgotten_when_empty() {
        let l = Ledger::default();
        let now = Instant::now();
        let a = ClientSource::of(addr("192.0.2.1:1"));
        l.accepted(0, ConnectionHandle(1), a, now);
        l.accepted(1, ConnectionHandle(1), a, now);
        assert_eq!((l.open(), l.half_open()), (2, 2));
        assert_eq!(l.arrive(a, now).source_half_open, 2);
        assert!(l.handshake_done(1, ConnectionHandle(1)));
        assert!(!l.handshake_done(1, ConnectionHandle(1)), "once");
        assert_eq!((l.open(), l.half_open()), (2, 1));
        l.drained(a);
        assert!(l.handshake_done(0, ConnectionHandle(1)));
        l.drained(a);
        assert_eq!((l.open(), l.half_open(), l.sources()), (0, 0, 0));
        assert_eq!((l.peak_open(), l.peak_half_open()), (2, 2));
    }

    #[test]
    fn a_newcomer_evicts_the_oldest_handshake_of_the_heaviest_source() {
        let l = Ledger::default();
        let now = Instant::now();
        let (flood, other, third) = (
            ClientSource::of(addr("192.0.2.1:1")),
            ClientSource::of(addr("192.0.2.2:1")),
            ClientSource::of(addr("192.0.2.3:1")),
        );
        for i in 0..4 {
            l.accepted(i % 2, ConnectionHandle(i), flood, now);
        }
        l.accepted(1, ConnectionHandle(9), other, now);
        // The flooding source never evicts for itself.
        assert_eq!(l.evict_for(flood, None), None);
        assert_eq!(l.evict_for(third, None), Some((0, ConnectionHandle(0))));
        assert_eq!(l.evict_for(other, None), Some((1, ConnectionHandle(1))));
        // Two left to the flood, one to `other`: evicting would not even it out.
        assert_eq!(l.evict_for(other, None), None);
        assert_eq!(l.half_open(), 3);
        assert_eq!(l.take_evicted(0), vec![ConnectionHandle(0)]);
        assert_eq!(l.take_evicted(0), vec![]);
        assert_eq!(l.take_evicted(1), vec![ConnectionHandle(1)]);
        // The evicted handshake's own end later changes nothing.
        assert!(!l.handshake_done(0, ConnectionHandle(0)));
        assert_eq!(l.half_open(), 3);
    }

    /// 1000 /64s of one /54 holding one handshake each: a newcomer from elsewhere evicts
    /// one of them, oldest first within the heaviest /56 and /64, and the bookkeeping
    /// forgets each evicted handshake.
    #[test]
    fn a_routed_prefix_gives_way_to_a_newcomer_from_elsewhere() {
        let l = Ledger::default();
        let now = Instant::now();
        let holder =
            |i: usize| ClientSource::of(addr(&format!("[2001:db8:aa:{:x}::1]:1", 0x1001 + i)));
        for i in 0..1000 {
            l.accepted(i % 2, ConnectionHandle(i), holder(i), now);
        }
        // Inside one of the heaviest /56s each /64 holds one: nobody to evict by count.
        let insider = ClientSource::of(addr("[2001:db8:aa:1000::1]:1"));
        assert_eq!(l.evict_for(insider, None), None);
        let outsider = ClientSource::of(addr("[2001:db8:bb::1]:1"));
        let mut evicted = Vec::new();
        for _ in 0..40 {
            let (_, ch) = l.evict_for(outsider, None).expect("room for an outsider");
            evicted.push(ch.0);
        }
        evicted.sort_unstable();
        evicted.dedup();
        assert_eq!(evicted.len(), 40, "each evicted once");
        assert_eq!(l.half_open(), 960);
        for &ch in &evicted {
            assert!(!l.handshake_done(ch % 2, ConnectionHandle(ch)));
        }
    }

    /// Sources holding one handshake each, newcomers holding as many: no group is heavier,
    /// so only a handshake older than the stale bound gives way, the oldest first.
    #[test]
    fn with_every_holder_at_one_the_oldest_stale_handshake_gives_way() {
        let l = Ledger::default();
        let start = Instant::now();
        let holder = |i: u8| ClientSource::of(addr(&format!("192.0.{i}.1:1")));
        for i in 0..10 {
            let at = start + Duration::from_millis(u64::from(i) * 100);
            l.accepted(0, ConnectionHandle(usize::from(i)), holder(i), at);
        }
        let newcomer = ClientSource::of(addr("198.51.100.1:1"));
        assert_eq!(l.evict_for(newcomer, None), None);
        assert_eq!(
            l.evict_for(newcomer, Some(start - Duration::from_millis(1))),
            None
        );
        let bound = Some(start + Duration::from_millis(150));
        assert_eq!(l.evict_for(newcomer, bound), Some((0, ConnectionHandle(0))));
        assert_eq!(l.evict_for(newcomer, bound), Some((0, ConnectionHandle(1))));
        assert_eq!(l.evict_for(newcomer, bound), None, "the rest are younger");
        // A completed handshake is not one to evict.
        assert!(l.handshake_done(0, ConnectionHandle(2)));
        let later = Some(start + Duration::from_millis(350));
        assert_eq!(l.evict_for(newcomer, later), Some((0, ConnectionHandle(3))));
    }
}
