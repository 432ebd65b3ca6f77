//! The server-wide receive budget: how much received data all connections together may
//! make the server hold.
//!
//! A connection can make us buffer up to its receive window (QUIC flow control: data behind a
//! gap in a stream waits, up to the window), so the sum of the windows granted is the worst
//! case. Each connection gets its window at accept and keeps it (every connection is told the
//! same small `initial_max_data`, [`MIN_WINDOW`], which 0-RTT requires, and is raised to its
//! window at once); the sum never exceeds the budget:
//! - every connection gets at least [`MIN_WINDOW`], and a floor of that much is kept for
//!   [`Budget::floor_connections`] connections;
//! - the rest (the bonus pool) goes to connections as they come, each taking a sixteenth of
//!   what is free in it (a power of two, at most [`MAX_WINDOW`] in all), so the first few
//!   connections of a quiet server get large windows and a crowd gets the floor;
//! - a connection that cannot get [`MIN_WINDOW`] is refused (with the default 1 GiB and
//!   4096 floor connections, the 4097th to about the 4110th get the floor from what is left of
//!   the pool, and the next is refused until some close);
//! - a drained connection's window returns to the budget.

use quinn_proto::ConnectionHandle;

use crate::idmap::IdMap;

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
    /// Each connection's window: its floor part and its bonus part.
    granted: IdMap<ConnectionHandle, (u64, u64)>,
    /// Reserved at admission, for the connection being accepted.
    pending: Option<(u64, u64)>,
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
        }
    }

    /// Reserves the window of the next connection, or `None` if the budget cannot give it
    /// [`MIN_WINDOW`]. A reservation not taken by [`accepted`](Self::accepted) before the next
    /// call is returned.
    pub(super) fn reserve(&mut self) -> Option<u64> {
        if let Some(p) = self.pending.take() {
            self.give_back(p);
        }
        let floor = if self.floor_free >= MIN_WINDOW {
            self.floor_free -= MIN_WINDOW;
            MIN_WINDOW
        } else if self.bonus_free >= MIN_WINDOW {
            // Past the floor's connections: the floor comes out of the bonus pool.
            self.bonus_free -= MIN_WINDOW;
            0
        } else {
            return None;
        };
        let share = self.bonus_free / 16;
        let bonus = if share >= MIN_WINDOW {
            prev_power_of_two(share).min(MAX_WINDOW - MIN_WINDOW)
        } else {
            0
        };
        self.bonus_free -= bonus;
        // Recorded as (floor part, bonus part incl. a floor taken from the bonus pool).
        let part = (floor, bonus + (MIN_WINDOW - floor));
        self.pending = Some(part);
        Some(part.0 + part.1)
    }

    /// The connection reserved for was accepted as `ch`: its window.
    pub(super) fn accepted(&mut self, ch: ConnectionHandle) -> Option<u64> {
        let p = self.pending.take()?;
        self.granted.insert(ch, p);
        Some(p.0 + p.1)
    }

    /// Connection `ch` is gone: its window returns.
    pub(super) fn released(&mut self, ch: ConnectionHandle) {
        if let Some(p) = self.granted.remove(&ch) {
            self.give_back(p);
        }
    }

    fn give_back(&mut self, (floor, bonus): (u64, u64)) {
        self.floor_free += floor;
        self.bonus_free += bonus;
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

    fn fill(w: &mut Windows, n: usize) -> Vec<u64> {
        (0..n)
            .map_while(|i| {
                let got = w.reserve()?;
                w.accepted(ConnectionHandle(i));
                Some(got)
            })
            .collect()
    }

    #[test]
    fn windows_never_sum_above_the_budget() {
        for bytes in [1 << 20, 64 << 20, 1 << 30, 8 << 30] {
            let budget = Budget {
                bytes,
                floor_connections: 4096,
            };
            let mut w = Windows::new(budget);
            let got = fill(&mut w, 1_000_000);
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
        let got = fill(&mut w, 100_000);
        // The floor holds for 4096 connections, and what is left of the pool for a few more.
        assert!((4096..4200).contains(&got.len()), "{}", got.len());
        assert!(got[0] >= 16 << 20, "the first: {}", got[0]);
        assert!(got[..8].iter().all(|&g| g >= 4 << 20), "{:?}", &got[..8]);
        assert!(got[200..].iter().all(|&g| g == MIN_WINDOW));
        assert!(w.granted_bytes() <= DEFAULT_BUDGET);
    }

    #[test]
    fn released_and_unclaimed_windows_return() {
        let mut w = Windows::new(Budget {
            bytes: 4 * MIN_WINDOW,
            floor_connections: 4,
        });
        assert_eq!(fill(&mut w, 10).len(), 4);
        assert_eq!(w.reserve(), None, "full");
        w.released(ConnectionHandle(2));
        assert_eq!(w.reserve(), Some(MIN_WINDOW));
        // Not accepted: the next reservation takes it back first.
        assert_eq!(w.reserve(), Some(MIN_WINDOW));
        w.accepted(ConnectionHandle(7));
        assert_eq!(w.reserve(), None);
        assert_eq!(w.granted_bytes(), 4 * MIN_WINDOW);
    }
}
