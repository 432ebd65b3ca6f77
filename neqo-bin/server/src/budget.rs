//! The server-wide receive budget: how much received data all connections together may
//! make the server hold.
//!
//! A connection can make us buffer up to its receive window (QUIC flow control: data behind a
//! gap in a stream waits, up to the window), so the sum of the windows granted is the worst
//! case. Windows follow trust: a connection gets [`MIN_WINDOW`] at accept (every connection
//! is told that as its `initial_max_data`, which 0-RTT requires), and its full window once
//! its handshake completes ([`Windows::confirmed`]), which also proves its address. A
//! handshake that never completes costs the budget [`MIN_WINDOW`] and no more, so unfinished
//! handshakes cannot make the budget look contended to the clients that finish theirs. The
//! sum never exceeds the budget:
//! - every connection gets at least [`MIN_WINDOW`], and a floor of that much is kept for
//!   [`Budget::floor_connections`] connections;
//! - the rest (the bonus pool) goes to connections as their handshakes complete, each taking
//!   a sixteenth of what is free in it (a power of two, at most [`MAX_WINDOW`] in all), so
//!   the first few connections of a quiet server get large windows and a crowd gets the
//!   floor;
//! - a connection that cannot get [`MIN_WINDOW`] is refused (with the default 1 GiB and
//!   4096 floor connections, the 4097th to about the 4110th get the floor from what is left of
//!   the pool, and the next is refused until some close);
//! - a drained connection's window returns to the budget;
//! - fair shares, in two parts (`prefixes` has the levels: a source is an IPv4 address or
//!   an IPv6 /64, within a /24, or a /56 within a /48):
//!   - bonus windows: a source gets them only while its connections hold less than a
//!     [`SOURCE_SHARE`]th of the budget, and each prefix it belongs to less than its own
//!     share (twice the share of the level below: a /24 or /56 two, a /48 four), so that a
//!     routed prefix of many hosts takes a few hosts' shares, not one per host;
//!   - connections: once half the floor or half the budget is granted (contended), a
//!     source is refused while it, or a prefix it belongs to, holds a share or half the
//!     floor in floors alone (that many connections). One host alone may take half the
//!     floor's connections and its share of the bonus pool (a load test from one machine)
//!     and leaves the rest to others; a host with a few connections is never refused for
//!     the large windows they hold; and a host rotating through its prefix's addresses
//!     counts as its prefix.
//!
//! What this bounds: the stream data a peer can make the server buffer (data behind a gap
//! waits, up to the window). quinn-proto keeps each received packet's data as slices of that
//! packet, and defragments a stream's buffered data when its packets hold more than 32 KiB
//! beyond it (or half as much again as the data); neqo-udp hands every datagram over in an
//! allocation of its own size, so those rules count real memory. A connection's worst case
//! is therefore about two and a half times its window, plus 32 KiB for each of its up to
//! [`MAX_CONCURRENT_STREAMS`](neqo_driver::MAX_CONCURRENT_STREAMS) streams, plus quinn-proto's
//! bounded crypto buffers. The protocols on top hold little beside: an `hq-interop` request
//! line or an HTTP/3 header section of at most 8 KiB per stream while it arrives (the rest of
//! an HTTP/3 stream's frames are streamed or skipped, `http3`). DATAGRAM frames, which
//! quinn-proto would buffer outside any
//! window, are refused: no protocol here uses them (`tls/transport.rs`).

use neqo_driver::IdMap;
use quinn_proto::ConnectionHandle;

use super::{ledger::ClientSource, prefixes::Tally};

/// A source's share of the budget: a sixteenth.
pub const SOURCE_SHARE: u64 = 16;

/// Why the budget gives no window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoWindow {
    /// Fewer than [`MIN_WINDOW`] bytes are left.
    Spent,
    /// Half the budget is granted and the source, or a prefix it belongs to, holds its
    /// share already.
    SourceShare,
}

/// The largest window a connection gets: enough for a fast transfer over a long path.
pub const MAX_WINDOW: u64 = 64 << 20;

/// The smallest: a few round trips of a slow path.
pub const MIN_WINDOW: u64 = 64 << 10;

/// The default budget.
pub const DEFAULT_BUDGET: u64 = 1 << 30;

/// How a budget is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// All windows together at most.
    pub bytes: u64,
    /// Connections the floor is kept for.
    pub floor_connections: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            bytes: DEFAULT_BUDGET,
            floor_connections: 4096,
        }
    }
}

/// The windows granted; the one owner of the budget's accounting.
#[derive(Debug)]
pub(super) struct Windows {
    budget: Budget,
    /// Bytes of the floor still free, and of the bonus pool.
    floor_free: u64,
    bonus_free: u64,
    /// Each connection's window: its floor part and its bonus part, and its source.
    granted: IdMap<ConnectionHandle, Grant>,
    /// Reserved at admission, for the connection being accepted.
    pending: Option<Grant>,
    /// What each source's and prefix's connections hold.
    held: Tally,
    /// The same counting [`MIN_WINDOW`] a connection: how many connections each holds.
    floors: Tally,
}

/// One connection's window.
#[derive(Debug, Clone, Copy)]
struct Grant {
    floor: u64,
    bonus: u64,
    source: ClientSource,
    /// Its handshake completed: it had its share of the bonus pool.
    confirmed: bool,
}

impl Grant {
    const fn window(&self) -> u64 {
        self.floor + self.bonus
    }
}

impl Windows {
    pub(super) fn new(budget: Budget) -> Self {
        let floor = budget
            .floor_connections
            .saturating_mul(MIN_WINDOW)
            .min(budget.bytes);
        Self {
            budget,
            floor_free: floor,
            bonus_free: budget.bytes - floor,
            granted: IdMap::default(),
            pending: None,
            held: Tally::default(),
            floors: Tally::default(),
        }
    }

    /// Reserves [`MIN_WINDOW`] for the next connection, from `source`; refused if the budget
    /// cannot give that, or while it is contended, if its connections, or those of a prefix
    /// of it, hold their share in floors alone, or half the floor (so as many connections as
    /// that: what a source has in larger windows never refuses it, it only gets no more of
    /// them). A reservation not taken by [`accepted`](Self::accepted) before the next call
    /// is returned.
    pub(super) fn reserve(&mut self, source: ClientSource) -> Result<u64, NoWindow> {
        if let Some(p) = self.pending.take() {
            self.give_back(p);
        }
        if self.floors.heaviest(source) >= self.floor_share() && self.contended() {
            return Err(NoWindow::SourceShare);
        }
        let floor = if self.floor_free >= MIN_WINDOW {
            self.floor_free -= MIN_WINDOW;
            MIN_WINDOW
        } else if self.bonus_free >= MIN_WINDOW {
            // Past the floor's connections: the floor comes out of the bonus pool.
            self.bonus_free -= MIN_WINDOW;
            0
        } else {
            return Err(NoWindow::Spent);
        };
        // Recorded as (floor part, bonus part: a floor taken from the bonus pool).
        let grant = Grant {
            floor,
            bonus: MIN_WINDOW - floor,
            source,
            confirmed: false,
        };
        self.pending = Some(grant);
        Ok(grant.window())
    }

    /// The connection reserved for was accepted as `ch`: its window, [`MIN_WINDOW`].
    pub(super) fn accepted(&mut self, ch: ConnectionHandle) -> Option<u64> {
        let g = self.pending.take()?;
        self.granted.insert(ch, g);
        self.held.add(g.source, g.window());
        self.floors.add(g.source, MIN_WINDOW);
        Some(g.window())
    }

    /// `ch`'s handshake completed: it gets its share of the bonus pool, a sixteenth of what
    /// is free there within what is left of its source's and prefixes' shares. Its new
    /// window, if that is larger (once only).
    pub(super) fn confirmed(&mut self, ch: ConnectionHandle) -> Option<u64> {
        let g = self.granted.get(&ch).filter(|g| !g.confirmed)?;
        let left = self.held.room(g.source, self.share());
        let offer = (self.bonus_free / 16).min(left);
        let bonus = if offer >= MIN_WINDOW {
            prev_power_of_two(offer).min(MAX_WINDOW - g.window())
        } else {
            0
        };
        let source = g.source;
        let g = self.granted.get_mut(&ch)?;
        g.confirmed = true;
        g.bonus += bonus;
        self.bonus_free -= bonus;
        self.held.add(source, bonus);
        (bonus > 0).then_some(g.window())
    }

    /// What one source's connections, or one prefix's, may hold in floors once the budget
    /// is contended: a share, and half the floor at most.
    fn floor_share(&self) -> u64 {
        let floor = self.budget.bytes - self.bonus_pool();
        self.share().min(floor / 2)
    }

    /// What one source may hold in bonus windows (a prefix more: `Tally::room`).
    const fn share(&self) -> u64 {
        self.budget.bytes / SOURCE_SHARE
    }

    /// Connection `ch`'s window.
    pub(super) fn window(&self, ch: ConnectionHandle) -> Option<u64> {
        self.granted.get(&ch).map(Grant::window)
    }

    /// Connection `ch` is gone: its window returns.
    pub(super) fn released(&mut self, ch: ConnectionHandle) {
        if let Some(g) = self.granted.remove(&ch) {
            self.held.sub(g.source, g.window());
            self.floors.sub(g.source, MIN_WINDOW);
            self.give_back(g);
        }
    }

    fn give_back(&mut self, g: Grant) {
        self.floor_free += g.floor;
        self.bonus_free += g.bonus;
    }

    /// Whether half the floor or half the budget is granted: from then on a source holding
    /// its share gets nothing more.
    fn contended(&self) -> bool {
        let floor = self.budget.bytes - self.bonus_pool();
        self.floor_free <= floor / 2 || self.granted_bytes() >= self.budget.bytes / 2
    }

    /// The bonus pool's size: what the floor leaves of the budget.
    fn bonus_pool(&self) -> u64 {
        self.budget.bytes
            - self
                .budget
                .floor_connections
                .saturating_mul(MIN_WINDOW)
                .min(self.budget.bytes)
    }

    /// Bytes granted to connections now (their windows' sum).
    pub(super) fn granted_bytes(&self) -> u64 {
        self.budget.bytes - self.floor_free - self.bonus_free
    }
}

/// The largest power of two not above `n` (`n` > 0).
const fn prev_power_of_two(n: u64) -> u64 {
    1 << (63 - n.leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client `i`'s source: one each, each in a /24 of its own.
    fn own(i: usize) -> ClientSource {
        let i = (i as u32) << 8;
        ClientSource::of(std::net::SocketAddr::from((i.to_be_bytes(), 443)))
    }

    /// Connections from `source(i)`, each accepted and confirmed, until `n` or the first
    /// refusal: their windows, and the refusal.
    /// Connection `i`'s handle is `ConnectionHandle(first + i)`.
    fn fill(
        w: &mut Windows,
        first: usize,
        n: usize,
        source: impl Fn(usize) -> ClientSource,
    ) -> (Vec<u64>, Option<NoWindow>) {
        let mut got = Vec::new();
        for i in 0..n {
            match w.reserve(source(i)) {
                Ok(window) => {
                    let ch = ConnectionHandle(first + i);
                    assert_eq!(window, MIN_WINDOW);
                    assert_eq!(w.accepted(ch), Some(window));
                    got.push(w.confirmed(ch).unwrap_or(window));
                    assert_eq!(w.confirmed(ch), None, "once");
                }
                Err(e) => return (got, Some(e)),
            }
        }
        (got, None)
    }

    #[test]
    fn windows_never_sum_above_the_budget() {
        for bytes in [1 << 20, 64 << 20, 1 << 30, 8 << 30] {
            let budget = Budget {
                bytes,
                floor_connections: 4096,
            };
            let mut w = Windows::new(budget);
            let (got, refused) = fill(&mut w, 0, 1_000_000, own);
            assert_eq!(refused, Some(NoWindow::Spent));
            let sum: u64 = got.iter().sum();
            assert!(sum <= bytes, "{bytes}: {sum}");
            assert_eq!(sum, w.granted_bytes());
            assert!(got.iter().all(|&g| (MIN_WINDOW..=MAX_WINDOW).contains(&g)));
            // Refused only once fewer than MIN_WINDOW bytes are left.
            assert!(bytes - sum < MIN_WINDOW, "{bytes}: {sum} granted");
        }
    }

    #[test]
    fn a_quiet_server_gives_large_windows_a_crowd_the_floor() {
        let mut w = Windows::new(Budget::default());
        let (got, _) = fill(&mut w, 0, 100_000, own);
        // The floor holds for 4096 connections, and what is left of the pool for a few more.
        assert!((4096..4200).contains(&got.len()), "{}", got.len());
        assert!(got[0] >= 16 << 20, "the first: {}", got[0]);
        assert!(got[..8].iter().all(|&g| g >= 4 << 20), "{:?}", &got[..8]);
        assert!(got[200..].iter().all(|&g| g == MIN_WINDOW));
        assert!(w.granted_bytes() <= DEFAULT_BUDGET);
    }

    /// One host alone gets large windows up to its share, then the floor, and stops at half
    /// the floor's connections; the next host still gets a large window, and others the
    /// rest.
    #[test]
    fn one_source_takes_half_the_budget_at_most() {
        let budget = Budget::default();
        let mut w = Windows::new(budget);
        let one = own(7);
        let (got, refused) = fill(&mut w, 0, 100_000, |_| one);
        assert_eq!(refused, Some(NoWindow::SourceShare));
        let share = budget.bytes / SOURCE_SHARE;
        let bonus: u64 = got.iter().map(|g| g - MIN_WINDOW).sum();
        assert!(bonus < share, "bonus windows within the share: {bonus}");
        assert!(got[0] >= 16 << 20, "the first is large: {}", got[0]);
        // Half the floor's connections (the first few with a share of the bonus pool).
        assert_eq!(got.len() as u64, budget.floor_connections / 2);
        assert!(
            w.granted_bytes() < budget.bytes / 2,
            "{}",
            w.granted_bytes()
        );
        assert_eq!(w.reserve(one), Err(NoWindow::SourceShare), "refused again");
        assert_eq!(w.reserve(own(8)), Ok(MIN_WINDOW), "another host");
        w.accepted(ConnectionHandle(1_000_000));
        let next = w
            .confirmed(ConnectionHandle(1_000_000))
            .expect("a larger window");
        assert!(next >= 4 << 20, "{next}");
        let (rest, refused) = fill(&mut w, 2_000_000, 100_000, |i| own(1000 + i));
        assert_eq!(refused, Some(NoWindow::Spent));
        assert!(
            rest.len() as u64 > budget.floor_connections / 2,
            "{}",
            rest.len()
        );
        // Once the host's connections are gone, it is a newcomer again.
        for i in 0..got.len() {
            w.released(ConnectionHandle(i));
        }
        assert!(w.reserve(one).is_ok());
    }

    #[test]
    fn released_and_unclaimed_windows_return() {
        let mut w = Windows::new(Budget {
            bytes: 4 * MIN_WINDOW,
            floor_connections: 4,
        });
        assert_eq!(fill(&mut w, 0, 10, own).0.len(), 4);
        assert_eq!(w.reserve(own(5)), Err(NoWindow::Spent), "full");
        w.released(ConnectionHandle(2));
        assert_eq!(w.reserve(own(5)), Ok(MIN_WINDOW));
        // Not accepted: the next reservation takes it back first.
        assert_eq!(w.reserve(own(6)), Ok(MIN_WINDOW));
        w.accepted(ConnectionHandle(7));
        assert_eq!(w.reserve(own(8)), Err(NoWindow::Spent));
        assert_eq!(w.granted_bytes(), 4 * MIN_WINDOW);
        // Four sources of four /24s.
        assert_eq!((w.held.len(), w.floors.len()), (8, 8));
        for ch in [0, 1, 3, 7] {
            w.released(ConnectionHandle(ch));
        }
        assert_eq!((w.granted_bytes(), w.held.len(), w.floors.len()), (0, 0, 0));
    }

    /// Handshakes that never complete hold the floor and nothing more: 32 sources' worth
    /// leave the budget uncontended, and the next client that completes its handshake gets
    /// a large window.
    #[test]
    fn unfinished_handshakes_cost_the_floor_only() {
        let budget = Budget::default();
        let mut w = Windows::new(budget);
        for i in 0..32 {
            assert_eq!(w.reserve(own(i)), Ok(MIN_WINDOW));
            assert_eq!(w.accepted(ConnectionHandle(i)), Some(MIN_WINDOW));
        }
        assert_eq!(w.granted_bytes(), 32 * MIN_WINDOW);
        assert!(!w.contended());
        let (got, refused) = fill(&mut w, 100, 4, |_| own(1000));
        assert_eq!(refused, None);
        assert!(got[0] >= 32 << 20, "{got:?}");
        assert!(got.iter().all(|&g| g >= 4 << 20), "{got:?}");
        // A handshake that fails returns its floor; one confirmed twice gains nothing more.
        w.released(ConnectionHandle(0));
        assert_eq!(w.window(ConnectionHandle(0)), None);
        assert_eq!(w.confirmed(ConnectionHandle(100)), None);
    }

    /// Many hosts of one routed prefix take, in bonus windows, a few hosts' shares (a /48
    /// four at most), not one each; and once the budget is contended, the prefix is refused
    /// while a host from elsewhere is not.
    #[test]
    fn a_routed_prefix_takes_a_few_shares() {
        let budget = Budget {
            bytes: 256 * MIN_WINDOW * 16,
            floor_connections: 256,
        };
        let mut w = Windows::new(budget);
        let in_prefix = |i: usize| {
            let a = std::net::Ipv6Addr::from((0x2001_0db8_00aa_u128 << 80) | ((i as u128) << 64));
            ClientSource::of((a, 443).into())
        };
        let (got, refused) = fill(&mut w, 0, 10_000, in_prefix);
        assert_eq!(refused, Some(NoWindow::SourceShare));
        let bonus: u64 = got.iter().map(|g| g - MIN_WINDOW).sum();
        assert!(bonus < 4 * budget.bytes / SOURCE_SHARE, "{bonus}");
        // A /56 (256 hosts here) two shares of floors, then the /48 four.
        assert!(got.len() <= 1024, "{}", got.len());
        let outsider = ClientSource::of(([192, 0, 2, 1], 443).into());
        assert_eq!(w.reserve(outsider), Ok(MIN_WINDOW));
        assert_eq!(
            w.reserve(in_prefix(got.len() + 1)),
            Err(NoWindow::SourceShare)
        );
    }

    /// While another source makes the budget contended, a host that opens connections
    /// one after another gets large windows until its share is held, then the floor, and is
    /// never refused for the large windows it holds: only as many connections as a share
    /// has floors refuse it.
    #[test]
    fn a_host_past_its_bonus_share_still_gets_the_floor() {
        let budget = Budget::default();
        let mut w = Windows::new(budget);
        let (flood, _) = fill(&mut w, 0, 1024, |_| own(1));
        assert_eq!(flood.len(), 1024);
        let (got, _) = fill(&mut w, 2048, 1024, |_| own(2));
        assert!(w.contended());
        assert!(got[0] >= 16 << 20, "{got:?}");
        let bonus: u64 = got.iter().map(|g| g - MIN_WINDOW).sum();
        assert!(bonus < budget.bytes / SOURCE_SHARE, "{bonus}");
        assert!(
            got[100..].iter().all(|&g| g == MIN_WINDOW),
            "the floor, once its share is held"
        );
        assert_eq!(got.len(), 1024, "served, not refused");
        assert_eq!(
            w.reserve(own(2)),
            Err(NoWindow::SourceShare),
            "a share in floors"
        );
    }
}
