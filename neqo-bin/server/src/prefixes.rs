//! The address prefixes fair shares are counted by, and [`Tally`], a count per prefix that
//! finds the heaviest without a scan.
//!
//! Why a hierarchy: one host is one IPv4 address or one IPv6 /64, but an attacker with a
//! routed prefix holds many of those. A share per /64 alone lets a /48 (a common
//! allocation) take 65 536 shares; a share per /48 alone lets one busy host crowd out its
//! neighbours. So a source is counted at each level it belongs to: IPv6 /48, /56 and /64;
//! IPv4 /24 and /32. Choosing whom to make room against walks down from the top level, and
//! at each level compares the newcomer's group with the heaviest other one, so that 1000
//! /64s of one /54 count as one heavy /48 against a client from elsewhere, and as many
//! light /64s against a client inside that /48.

use std::{
    collections::{BTreeSet, HashMap},
    net::{IpAddr, Ipv6Addr},
};

use super::ledger::ClientSource;

/// Levels, top first: prefix lengths of an IPv6 address, and of an IPv4 one.
const V6_LEVELS: [u8; 3] = [48, 56, 64];
const V4_LEVELS: [u8; 2] = [24, 32];

/// An address prefix: the network, as an IPv6 address (IPv4 ones mapped into
/// `::ffff:0:0/96`), and its length in that space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Prefix {
    net: u128,
    len: u8,
}

/// The prefixes `source` belongs to, top level first; the last is the source itself.
pub(super) fn levels(source: ClientSource) -> impl Iterator<Item = Prefix> {
    let (ip, lens, offset): (u128, &[u8], u8) = match source.ip() {
        IpAddr::V4(a) => (u128::from(a.to_ipv6_mapped()), &V4_LEVELS, 96),
        IpAddr::V6(a) => (u128::from(a), &V6_LEVELS, 0),
    };
    lens.iter().map(move |&l| {
        let len = l + offset;
        Prefix {
            net: ip & (u128::MAX << (128 - u32::from(len))),
            len,
        }
    })
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = Ipv6Addr::from(self.net);
        match a.to_ipv4_mapped() {
            Some(v4) if self.len >= 96 => write!(f, "{v4}/{}", self.len - 96),
            _ => write!(f, "{a}/{}", self.len),
        }
    }
}

/// A weight per prefix, at every level, with each group's children ordered by weight: the
/// heaviest child is found in `O(log n)`, and adding or taking weight costs `O(levels ·
/// log n)`. Prefixes of weight 0 are not kept.
#[derive(Debug, Default)]
pub(super) struct Tally {
    nodes: HashMap<Prefix, Node>,
    /// The top level's groups, by weight.
    top: BTreeSet<(u64, Prefix)>,
}

#[derive(Debug, Default)]
struct Node {
    weight: u64,
    children: BTreeSet<(u64, Prefix)>,
}

impl Tally {
    /// Adds `w` to `source` and every prefix it belongs to.
    pub(super) fn add(&mut self, source: ClientSource, w: u64) {
        self.change(source, |old| old + w);
    }

    /// Takes `w` from `source` and every prefix it belongs to (at most what they hold).
    pub(super) fn sub(&mut self, source: ClientSource, w: u64) {
        self.change(source, |old| old.saturating_sub(w));
    }

    fn change(&mut self, source: ClientSource, f: impl Fn(u64) -> u64) {
        // A prefix weighs what its children do together, so one that falls to 0 takes
        // the rest of the path with it: none of them is kept, nor listed in a parent.
        let mut parent: Option<Prefix> = None;
        for p in levels(source) {
            let old = self.weight(p);
            let new = f(old);
            let siblings = match parent {
                None => Some(&mut self.top),
                Some(q) => self.nodes.get_mut(&q).map(|n| &mut n.children),
            };
            if let Some(siblings) = siblings {
                siblings.remove(&(old, p));
                if new > 0 {
                    siblings.insert((new, p));
                }
            }
            if new > 0 {
                self.nodes.entry(p).or_default().weight = new;
            } else {
                self.nodes.remove(&p);
            }
            parent = Some(p);
        }
    }

    /// The most `source` or one of its prefixes holds.
    pub(super) fn heaviest(&self, source: ClientSource) -> u64 {
        levels(source).map(|p| self.weight(p)).max().unwrap_or(0)
    }

    /// What `p` holds.
    pub(super) fn weight(&self, p: Prefix) -> u64 {
        self.nodes.get(&p).map_or(0, |n| n.weight)
    }

    /// What `source` may still add when a source's share is `share` and each level up may
    /// hold twice as much as the one below (an IPv6 /48 four shares, an IPv4 /24 two): a
    /// prefix with many hosts gets more than one host, and far less than as many shares as
    /// it has hosts. 0 once the source or one of its prefixes holds its share.
    pub(super) fn room(&self, source: ClientSource, share: u64) -> u64 {
        let weights: Vec<u64> = levels(source).map(|p| self.weight(p)).collect();
        weights
            .iter()
            .rev()
            .zip(0u32..)
            .map(|(&w, up)| share.saturating_mul(1 << up).saturating_sub(w))
            .min()
            .unwrap_or(share)
    }

    /// The source to make room against for a newcomer from `newcomer`: walking down from the
    /// top level, the first level where the heaviest group is not the newcomer's and holds at
    /// least `margin` more than the newcomer's group there; then, inside that group, the
    /// heaviest child at each level down to a source. `None` when no group is that much
    /// heavier (the newcomer's group is the heaviest all the way down, or the others are
    /// within the margin).
    pub(super) fn heavier_than(&self, newcomer: ClientSource, margin: u64) -> Option<ClientSource> {
        let mut siblings = &self.top;
        for mine in levels(newcomer) {
            let own = self.weight(mine);
            let &(heaviest, group) = siblings.last()?;
            if own >= heaviest {
                // The newcomer's group is (one of) the heaviest here: compare inside it.
                siblings = &self.nodes.get(&mine)?.children;
                continue;
            }
            if heaviest < own + margin {
                return None;
            }
            return Some(self.heaviest_source_in(group));
        }
        None
    }

    /// The heaviest source inside `group`, taking the heaviest child at each level.
    fn heaviest_source_in(&self, mut group: Prefix) -> ClientSource {
        while let Some(&(_, child)) = self.nodes.get(&group).and_then(|n| n.children.last()) {
            group = child;
        }
        ClientSource::from_prefix(group.net, group.len)
    }

    /// Prefixes kept, every level.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }
}

impl ClientSource {
    /// The source a leaf prefix stands for.
    fn from_prefix(net: u128, len: u8) -> Self {
        let a = Ipv6Addr::from(net);
        match a.to_ipv4_mapped() {
            Some(v4) if len == 128 => Self::of((v4, 0).into()),
            _ => Self::of((a, 0).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(s: &str) -> ClientSource {
        ClientSource::of(std::net::SocketAddr::new(s.parse().unwrap(), 443))
    }

    #[test]
    fn a_source_belongs_to_its_prefixes() {
        let shown = |s: &str| levels(src(s)).map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shown("2001:db8:aa:bbcc:1::1"),
            [
                "2001:db8:aa::/48",
                "2001:db8:aa:bb00::/56",
                "2001:db8:aa:bbcc::/64"
            ]
        );
        assert_eq!(shown("192.0.2.7"), ["192.0.2.0/24", "192.0.2.7/32"]);
        assert_eq!(shown("::ffff:192.0.2.7"), ["192.0.2.0/24", "192.0.2.7/32"]);
        for s in ["2001:db8:aa:bbcc:1::1", "192.0.2.7"] {
            let leaf = levels(src(s)).last().unwrap();
            assert_eq!(ClientSource::from_prefix(leaf.net, leaf.len), src(s));
        }
    }

    #[test]
    fn weights_add_up_at_every_level_and_empty_prefixes_are_forgotten() {
        let mut t = Tally::default();
        let (a, b) = (src("2001:db8:0:1::1"), src("2001:db8:0:2::1"));
        t.add(a, 3);
        t.add(b, 2);
        let top = levels(a).next().unwrap();
        assert_eq!(t.weight(top), 5);
        assert_eq!((t.heaviest(a), t.heaviest(src("2001:db8:0:9::1"))), (5, 5));
        assert_eq!(t.heaviest(src("2001:db8:1::1")), 0);
        assert_eq!(t.weight(levels(a).last().unwrap()), 3);
        // Shares of 4 a source, 8 a /56 and 16 a /48.
        assert_eq!(t.room(a, 4), 1);
        assert_eq!(t.room(b, 4), 2);
        assert_eq!(t.room(a, 2), 0);
        t.add(src("2001:db8:0:3::1"), 3);
        assert_eq!(t.room(b, 4), 0, "the /56 holds 8 of 8");
        assert_eq!(
            t.room(src("2001:db8:0:1000::1"), 4),
            4,
            "another /56 of the /48"
        );
        // Every source of a prefix at its share has no room, a newcomer to it too: one
        // that rotates through the prefix's addresses takes no more than one that does not.
        assert_eq!(t.room(src("2001:db8:0:4::1"), 4), 0);
        t.add(src("2001:db8:0:1000::1"), 5);
        assert_eq!(
            t.room(src("2001:db8:0:2000::1"), 4),
            3,
            "the /48 holds 13 of 16"
        );
        t.sub(src("2001:db8:0:3::1"), 3);
        t.sub(src("2001:db8:0:1000::1"), 5);
        t.sub(a, 3);
        t.sub(b, 5);
        assert_eq!(t.len(), 0);
        assert!(t.top.is_empty());
    }

    /// 1000 /64s of one /54 holding one each against a newcomer from elsewhere: the /48 is
    /// the heavy group. Against a newcomer inside the /48, the /56s are compared, and inside
    /// its own /56 (as heavy as any) the /64s, of which only one holding two is made room
    /// against.
    #[test]
    fn a_routed_prefix_counts_as_one_group_against_outsiders() {
        let mut t = Tally::default();
        // 255 in the /56 of 2001:db8:aa:1000::, 256 in the next two, 233 in the last.
        let holder = |i: u16| src(&format!("2001:db8:aa:{:x}::1", 0x1001 + i));
        for i in 0..1000 {
            t.add(holder(i), 1);
        }
        let outsider = src("2001:db8:bb::1");
        let victim = t.heavier_than(outsider, 2).expect("room made");
        assert_eq!(levels(victim).next(), levels(holder(0)).next());
        // An IPv4 newcomer compares at the top level the same way.
        assert!(t.heavier_than(src("192.0.2.1"), 2).is_some());
        // Inside the /48 but in a /56 of its own: the heaviest /56 gives way.
        let neighbour = src("2001:db8:aa:ff00::1");
        assert!(t.heavier_than(neighbour, 2).is_some());
        // In a /56 within one of the heaviest: each /64 holds one.
        let insider = src("2001:db8:aa:1000::1");
        assert_eq!(t.heavier_than(insider, 2), None, "each /64 holds one");
        t.add(holder(7), 1);
        assert_eq!(t.heavier_than(insider, 2), Some(holder(7)));
        // The group's own members never make room against each other within the margin.
        assert_eq!(t.heavier_than(holder(3), 2), None);
    }

    #[test]
    fn the_newcomers_heavy_group_is_compared_inside() {
        let mut t = Tally::default();
        // Its /24 is the heaviest, but inside it another address holds more.
        for _ in 0..5 {
            t.add(src("192.0.2.1"), 1);
        }
        t.add(src("192.0.2.2"), 1);
        t.add(src("198.51.100.1"), 1);
        assert_eq!(t.heavier_than(src("192.0.2.2"), 2), Some(src("192.0.2.1")));
        assert_eq!(t.heavier_than(src("192.0.2.1"), 2), None);
        assert_eq!(
            t.heavier_than(src("203.0.113.1"), 2),
            Some(src("192.0.2.1"))
        );
    }
}
