//! Hash maps keyed by small integers (stream IDs, connection handles) with a multiply-rotate
//! hash instead of std's SipHash, which showed in the RPS benchmark's profile (several lookups
//! per request on each side; `docs/records/performance.md`).
//!
//! Not resistant to chosen keys, and needs not be: the keys are our own connection handles
//! and stream IDs, which a peer can only open in order and up to the stream limit we grant.

use std::{
    collections::{HashMap, HashSet},
    hash::{BuildHasherDefault, Hasher},
};

/// A `HashMap` with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A `HashSet` with [`IdHasher`].
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// FxHash's multiply step; `finish` rotates the well-mixed high bits down, because hashbrown
/// picks buckets by the low bits (stream IDs are multiples of 4).
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl IdHasher {
    const fn add(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(K);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher as _;

    use super::*;

    #[test]
    fn stream_ids_spread_over_buckets() {
        let build = BuildHasherDefault::<IdHasher>::default();
        // Client-initiated bidirectional stream IDs: 0, 4, 8, ...
        let mut low_bits = std::collections::HashSet::new();
        for id in (0..4096u64).step_by(4) {
            low_bits.insert(build.hash_one(id) & 0x3ff);
        }
        // 1024 keys into 1024 buckets: a decent spread, not a quarter of them.
        assert!(low_bits.len() > 600, "{}", low_bits.len());
        let mut m: IdMap<u64, u64> = IdMap::default();
        for i in 0..1000 {
            m.insert(i * 4, i);
        }
        assert!((0..1000).all(|i| m[&(i * 4)] == i));
    }
}
