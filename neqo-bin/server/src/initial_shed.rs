//! Shedding Initials by prefix while a worker falls behind, before quinn-proto spends any
//! crypto on them.
//!
//! Initials go to a worker by the kernel's 4-tuple hash, and every connection ID the server
//! issues names its worker, so an attacker that probes its own source ports learns which
//! reach one worker and floods from those: that worker decrypts (and answers with a Retry, at
//! least) every Initial while the others idle, and its socket overflows. Reading a datagram
//! is cheap next to that, so while the driver is behind ([`neqo_driver::BEHIND_HOLD`]) each
//! worker counts the Initials it reads per address prefix (IPv6 /48, /56, /64; IPv4 /24, /32,
//! as the admission shares do) in windows of [`WINDOW`], and drops unread those of a prefix
//! over its limit: [`LEAF_LIMIT`] kept per window for one address (or /64), doubling per
//! level up; what is shed does not count, so a flooding address takes its own share of its
//! /24 and leaves the rest to its neighbours. An attacker's own prefixes then cost the worker a read per datagram, while other
//! sources' Initials go on to admission as before. Initials whose destination ID the server
//! issued (after a Retry, and the client's later Initials) are never shed.
//!
//! The counts live in a count-min sketch (`ROWS` x `WIDTH` counters under a key random per
//! worker, 32 KiB, made the first time the worker is behind): fixed memory however many
//! sources a spoofed flood uses, and it never counts a prefix low; a prefix is counted high
//! only when each of its counters is shared with others, which a spoofed flood of 300 000
//! Initials a second does not make happen.

use std::{
    hash::{BuildHasher as _, RandomState},
    net::SocketAddr,
    time::{Duration, Instant},
};

use quinn_proto::{ConnectionId, ConnectionIdGenerator as _};

use super::{
    cid::CidGenerator,
    ledger::ClientSource,
    prefixes::{self, Prefix},
};

/// The window Initials are counted in.
pub const WINDOW: Duration = Duration::from_millis(100);

/// Initials one address (an IPv4 address, an IPv6 /64) may have read per [`WINDOW`] while
/// the worker is behind; each level up allows twice its level below.
pub const LEAF_LIMIT: u32 = 16;

const ROWS: usize = 4;
const WIDTH: usize = 8192;

/// A worker's shedding of Initials. See the module docs.
pub(super) struct InitialShed {
    /// This worker's connection IDs, to tell the ones the server issued.
    ours: CidGenerator,
    hasher: RandomState,
    /// Made the first time the worker is behind: a worker never flooded keeps none.
    counts: Option<Box<[[u8; WIDTH]; ROWS]>>,
    window_start: Option<Instant>,
}

impl std::fmt::Debug for InitialShed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitialShed")
            .field("window_start", &self.window_start)
            .finish_non_exhaustive()
    }
}

impl InitialShed {
    /// Shedding that knows the server's IDs by `ours` (any worker's generator: they share
    /// the key).
    pub(super) fn new(ours: CidGenerator) -> Self {
        Self {
            ours,
            hasher: RandomState::new(),
            counts: None,
            window_start: None,
        }
    }

    /// Whether to read an Initial from `source` to `dcid`, the worker being behind at `now`.
    pub(super) fn keep(&mut self, source: SocketAddr, dcid: &[u8], now: Instant) -> bool {
        if dcid.len() <= 20 && self.ours.validate(&ConnectionId::new(dcid)).is_ok() {
            return true;
        }
        if self
            .window_start
            .is_none_or(|t| now.saturating_duration_since(t) >= WINDOW)
        {
            self.window_start = Some(now);
            if let Some(counts) = &mut self.counts {
                for row in counts.iter_mut() {
                    row.fill(0);
                }
            }
        }
        let counts = self
            .counts
            .get_or_insert_with(|| Box::new([[0; WIDTH]; ROWS]));
        // Each level's counters, top first (at most three levels: no allocation per Initial).
        let mut levels = [[0; ROWS]; 3];
        let mut n = 0;
        for p in prefixes::levels(ClientSource::of(source)) {
            levels[n] = slots(&self.hasher, p);
            n += 1;
        }
        let levels = &levels[..n];
        let keep = levels.iter().enumerate().all(|(level, slots)| {
            let limit = LEAF_LIMIT << (n - 1 - level);
            estimate(counts, slots) < limit
        });
        // Only what is kept counts: a flooding address holds its own share of its /24 and
        // no more, leaving the rest to its neighbours.
        if keep {
            for slots in levels {
                for (row, &i) in counts.iter_mut().zip(slots) {
                    row[i] = row[i].saturating_add(1);
                }
            }
        }
        keep
    }
}

/// `p`'s counter in each row.
fn slots(hasher: &RandomState, p: Prefix) -> [usize; ROWS] {
    let h = hasher.hash_one(p);
    // Two halves of one keyed hash make the rows' indexes (Kirsch and Mitzenmacher).
    let (a, b) = (h & 0xffff_ffff, (h >> 32) | 1);
    std::array::from_fn(|r| {
        usize::try_from(a.wrapping_add(b.wrapping_mul(r as u64))).unwrap_or(0) % WIDTH
    })
}

/// The count at `slots`: never below the true one (the counters saturate at 255, above
/// every limit).
fn estimate(counts: &[[u8; WIDTH]; ROWS], slots: &[usize; ROWS]) -> u32 {
    counts
        .iter()
        .zip(slots)
        .map(|(row, &i)| u32::from(row[i]))
        .min()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use ring::hmac;

    use super::*;
    use crate::cid::CidLayout;

    fn shed() -> (InitialShed, CidGenerator) {
        let layout = CidLayout::new(None, 2).unwrap();
        let key = || hmac::Key::new(hmac::HMAC_SHA256, &[7; 32]);
        (
            InitialShed::new(layout.generator(0, key(), None)),
            layout.generator(1, key(), None),
        )
    }

    fn v4(a: u8, b: u8, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, a, b)), port)
    }

    fn v6(prefix56: u16, net64: u16, host: u16) -> SocketAddr {
        SocketAddr::new(
            IpAddr::V6(Ipv6Addr::new(
                0x2001,
                0xdb8,
                0x100,
                prefix56 << 8 | net64,
                0,
                0,
                0,
                host,
            )),
            443,
        )
    }

    /// How many of `n` Initials from `source` (each to a new client-chosen ID) are kept at
    /// `now`.
    fn kept(s: &mut InitialShed, source: SocketAddr, n: u32, now: Instant) -> u32 {
        (0..n)
            .map(|i| u32::from(s.keep(source, &[9, 9, 9, 9, 9, 9, 9, i as u8], now)))
            .sum()
    }

    #[test]
    fn one_address_gets_its_limit_per_window_and_others_are_kept() {
        let (mut s, _) = shed();
        let now = Instant::now();
        assert_eq!(kept(&mut s, v4(1, 1, 1000), 1000, now), LEAF_LIMIT);
        // Another port of the same address is the same source.
        assert_eq!(kept(&mut s, v4(1, 1, 2000), 10, now), 0);
        // Another address of the same /24 has the rest of the /24's share; one elsewhere
        // its own.
        assert_eq!(kept(&mut s, v4(1, 2, 1000), 100, now), LEAF_LIMIT);
        assert_eq!(kept(&mut s, v4(1, 3, 1000), 10, now), 0);
        assert_eq!(kept(&mut s, v4(2, 1, 1000), 10, now), 10);
        // The next window starts over.
        let later = now + WINDOW;
        assert_eq!(kept(&mut s, v4(1, 1, 1000), 1000, later), LEAF_LIMIT);
    }

    #[test]
    fn a_prefix_of_many_addresses_is_held_at_its_level() {
        let (mut s, _) = shed();
        let now = Instant::now();
        // 100 addresses of one /24, 10 Initials each: under their own limit, over the /24's.
        let from_24: u32 = (0..100).map(|b| kept(&mut s, v4(1, b, 1), 10, now)).sum();
        assert_eq!(from_24, 2 * LEAF_LIMIT);
        // IPv6: 256 /64s of one /56, 2 Initials each: held at the /56's limit.
        let from_56: u32 = (0..256).map(|n| kept(&mut s, v6(1, n, 1), 2, now)).sum();
        assert_eq!(from_56, 2 * LEAF_LIMIT);
        // In the next window, 40 /56s of one /48, 4 each: held at the /48's.
        let next = now + WINDOW;
        let from_48: u32 = (0..40).map(|p| kept(&mut s, v6(p, 0, 1), 4, next)).sum();
        assert_eq!(from_48, 4 * LEAF_LIMIT);
        // An ordinary client of another /48, and one of another /24.
        assert_eq!(
            kept(&mut s, "[2001:db8:200::1]:443".parse().unwrap(), 4, next),
            4
        );
        assert_eq!(kept(&mut s, v4(9, 9, 1), 4, next), 4);
    }

    #[test]
    fn initials_to_the_servers_own_ids_are_never_shed() {
        let (mut s, mut other_worker) = shed();
        let now = Instant::now();
        let source = v4(1, 1, 1000);
        assert_eq!(kept(&mut s, source, 100, now), LEAF_LIMIT);
        for _ in 0..100 {
            let cid = other_worker.generate_cid();
            assert!(s.keep(source, &cid, now), "a server-issued ID");
        }
        // A forged one of the right length is not.
        let mut forged = other_worker.generate_cid().to_vec();
        *forged.last_mut().unwrap() ^= 1;
        assert!(!s.keep(source, &forged, now));
    }

    #[test]
    fn a_spoofed_flood_from_every_address_sheds_no_one() {
        let (mut s, _) = shed();
        let now = Instant::now();
        // 30 000 sources in one window, one Initial each (a spoofed flood of 300 000 a
        // second), spread over the address space: no prefix is over its limit, and the
        // sketch's collisions do not make one look it.
        let mut shed_any = 0;
        for i in 0..30_000u32 {
            let source =
                SocketAddr::new(IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(2_654_435_761))), 1);
            shed_any += u32::from(!s.keep(source, &[1; 8], now));
        }
        assert_eq!(shed_any, 0);
    }
}
