//! The server's connection IDs: routable by a QUIC-LB load balancer in front of a fleet, and
//! by the kernel's steering program to the worker that owns the connection.
//!
//! Layout (draft-ietf-quic-load-balancers, the plaintext algorithm):
//!
//! ```text
//! | first octet | server ID (0 or 1..=11 B) | worker byte | random (3 B) | signature (4 B) |
//! ```
//!
//! - First octet: with a server ID, config rotation 0 in the top 3 bits and the CID's length
//!   minus one in the low 5 (QUIC-LB's self-encoded length, so that a load balancer can find
//!   the server ID without knowing the length). Without one, config rotation `0b111` (QUIC-LB's
//!   "not routable": a load balancer falls back to the 4-tuple) and 5 random bits.
//! - The worker byte is congruent to the worker's index modulo the number of workers, drawn
//!   uniformly among such bytes, so that it reveals nothing across servers with the same
//!   worker count. The steering program reads it from the destination connection ID of every
//!   short-header and Handshake packet (`neqo_udp::CidSteering`): a connection stays on its
//!   worker whatever its client's address. (Initials, whose DCID the client chose, go by the
//!   4-tuple hash.)
//! - The signature (HMAC-SHA256 of the rest under the server's key, truncated) lets the
//!   endpoint tell IDs it could have issued from noise, so that it answers only those with a
//!   stateless reset ([`ConnectionIdGenerator::validate`]).
//!
//! QUIC-LB's nonce is everything after the server ID: 8 bytes, within its 4 to 18.

use std::{fmt, time::Duration};

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};
use rand::RngCore as _;
use ring::hmac;

use crate::LayoutError;

/// Most bytes of a server ID: the 20-byte CID limit less the first octet and the 8-byte
/// nonce.
pub const MAX_SERVER_ID: usize = 11;

/// Most workers: the worker byte tells 256 apart.
pub const MAX_WORKERS: usize = 256;

/// Config rotation bits of CIDs that carry no server ID: QUIC-LB's "unroutable".
const UNROUTABLE: u8 = 0b111;

/// Random bytes after the worker byte.
const RANDOM_LEN: usize = 3;

/// Signature bytes at the end.
const SIGNATURE_LEN: usize = 4;

/// The bytes after the server ID.
const NONCE_LEN: usize = 1 + RANDOM_LEN + SIGNATURE_LEN;

/// A server's QUIC-LB server ID (plaintext algorithm), unique within its fleet.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerId(Vec<u8>);

impl ServerId {
    /// A server ID of `bytes`.
    ///
    /// # Errors
    /// Empty, or longer than [`MAX_SERVER_ID`].
    pub fn new(bytes: &[u8]) -> Result<Self, LayoutError> {
        if bytes.is_empty() || bytes.len() > MAX_SERVER_ID {
            return Err(LayoutError::ServerIdLength(bytes.len()));
        }
        Ok(Self(bytes.to_vec()))
    }

    /// The ID's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerId({self})")
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ServerId {
    type Err = String;

    /// Hex digits, two per byte (`0a1b`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.strip_prefix("0x").unwrap_or(s);
        if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "{s:?} is not hex bytes (an even number of hex digits, such as 0a1b)"
            ));
        }
        let bytes: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("checked hex digits"))
            .collect();
        Self::new(&bytes).map_err(|e| e.to_string())
    }
}

/// Where things sit in the server's connection IDs; the same for every worker.
#[derive(Debug, Clone)]
pub struct CidLayout {
    server_id: Option<ServerId>,
    workers: usize,
}

impl CidLayout {
    /// The layout for `workers` workers (1..=[`MAX_WORKERS`]), with a QUIC-LB server ID or
    /// without.
    ///
    /// # Errors
    /// A worker count out of range.
    pub fn new(server_id: Option<ServerId>, workers: usize) -> Result<Self, LayoutError> {
        if !(1..=MAX_WORKERS).contains(&workers) {
            return Err(LayoutError::Workers(workers));
        }
        Ok(Self { server_id, workers })
    }

    fn server_id_len(&self) -> usize {
        self.server_id.as_ref().map_or(0, |s| s.0.len())
    }

    /// The length of every connection ID.
    #[must_use]
    pub fn cid_len(&self) -> usize {
        1 + self.server_id_len() + NONCE_LEN
    }

    /// Where the worker byte is in a connection ID.
    #[must_use]
    pub fn worker_offset(&self) -> usize {
        1 + self.server_id_len()
    }

    /// The workers told apart.
    #[must_use]
    pub const fn workers(&self) -> usize {
        self.workers
    }

    /// The worker a datagram with this destination connection ID is steered to (what the
    /// steering program computes); `None` when the ID is too short to say. The tests' statement
    /// of the rule; the program and the dispatcher apply it to datagrams.
    #[cfg(test)]
    pub fn worker_of(&self, cid: &[u8]) -> Option<usize> {
        cid.get(self.worker_offset())
            .map(|&b| usize::from(b) % self.workers)
    }

    /// A generator for worker `worker` signing with `key`.
    ///
    /// # Panics
    /// When `worker` is not below [`workers`](Self::workers).
    #[must_use]
    pub fn generator(
        &self,
        worker: usize,
        key: hmac::Key,
        lifetime: Option<Duration>,
    ) -> CidGenerator {
        assert!(worker < self.workers, "worker {worker} of {}", self.workers);
        CidGenerator {
            layout: self.clone(),
            worker,
            key,
            lifetime,
        }
    }
}

/// Decodes a connection ID as a QUIC-LB load balancer with the plaintext algorithm and a
/// `server_id_len`-byte server ID does: `None` for an unroutable one (config rotation
/// `0b111`) or one too short for its self-encoded length.
#[must_use]
pub fn quic_lb_server_id(cid: &[u8], server_id_len: usize) -> Option<&[u8]> {
    let first = *cid.first()?;
    if first >> 5 == UNROUTABLE {
        return None;
    }
    let len = usize::from(first & 0x1f) + 1;
    if cid.len() < len || len < 1 + server_id_len {
        return None;
    }
    Some(&cid[1..=server_id_len])
}

/// Makes one worker's connection IDs. See the module docs.
pub struct CidGenerator {
    layout: CidLayout,
    worker: usize,
    key: hmac::Key,
    lifetime: Option<Duration>,
}

impl fmt::Debug for CidGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CidGenerator")
            .field("layout", &self.layout)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl CidGenerator {
    fn signature(&self, signed: &[u8]) -> [u8; SIGNATURE_LEN] {
        let tag = hmac::sign(&self.key, signed);
        let mut out = [0; SIGNATURE_LEN];
        out.copy_from_slice(&tag.as_ref()[..SIGNATURE_LEN]);
        out
    }

    /// A worker byte for this worker: uniform among the bytes congruent to its index.
    fn worker_byte(&self, rng: &mut impl rand::RngCore) -> u8 {
        let n = self.layout.workers;
        // The bytes below `top` hold each residue equally often.
        let top = 256 - 256 % n;
        let per_residue = top / n;
        let k = (rng.next_u32() as usize) % per_residue;
        u8::try_from(k * n + self.worker).expect("below 256")
    }
}

impl ConnectionIdGenerator for CidGenerator {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut rng = rand::rng();
        let len = self.layout.cid_len();
        let mut cid = [0u8; 20];
        cid[0] = match &self.layout.server_id {
            Some(_) => u8::try_from(len - 1).expect("at most 20"),
            None => (UNROUTABLE << 5) | (rng.next_u32() as u8 & 0x1f),
        };
        let mut at = 1;
        if let Some(id) = &self.layout.server_id {
            cid[at..at + id.0.len()].copy_from_slice(&id.0);
            at += id.0.len();
        }
        cid[at] = self.worker_byte(&mut rng);
        at += 1;
        rng.fill_bytes(&mut cid[at..at + RANDOM_LEN]);
        at += RANDOM_LEN;
        let signature = self.signature(&cid[..at]);
        cid[at..len].copy_from_slice(&signature);
        ConnectionId::new(&cid[..len])
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        let len = self.layout.cid_len();
        if cid.len() != len {
            return Err(InvalidCid);
        }
        let (signed, signature) = cid.split_at(len - SIGNATURE_LEN);
        if self.signature(signed) == signature {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        self.layout.cid_len()
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        self.lifetime
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &[b; 32])
    }

    #[test]
    fn server_ids_parse_as_hex_bytes_and_are_bounded() {
        let id: ServerId = "0a1B".parse().unwrap();
        assert_eq!(id.as_bytes(), &[0x0a, 0x1b]);
        assert_eq!(id.to_string(), "0a1b");
        assert_eq!("0x01".parse::<ServerId>().unwrap().as_bytes(), &[1]);
        for bad in ["", "1", "0g", "0a1", "000000000000000000000000"] {
            assert!(bad.parse::<ServerId>().is_err(), "{bad:?}");
        }
        assert!(
            "0000000000000000000000".parse::<ServerId>().is_ok(),
            "11 bytes"
        );
    }

    #[test]
    fn every_cid_carries_the_server_id_and_its_worker() {
        let id = ServerId::new(&[0xab, 0xcd, 0xef]).unwrap();
        for workers in [1, 2, 3, 7, 64, 256] {
            let layout = CidLayout::new(Some(id.clone()), workers).unwrap();
            assert_eq!(layout.cid_len(), 12);
            for worker in [0, workers / 2, workers - 1] {
                let mut g = layout.generator(worker, key(1), None);
                let mut bytes = std::collections::HashSet::new();
                for _ in 0..10_000 {
                    let cid = g.generate_cid();
                    assert_eq!(cid.len(), 12);
                    assert_eq!(cid[0], 11, "config rotation 0, length 12 - 1");
                    assert_eq!(quic_lb_server_id(&cid, 3), Some(&[0xab, 0xcd, 0xef][..]));
                    assert_eq!(layout.worker_of(&cid), Some(worker));
                    assert!(g.validate(&cid).is_ok());
                    bytes.insert(cid[layout.worker_offset()]);
                }
                // Every byte of the worker's residue class appears (at most 256 of them).
                assert_eq!(bytes.len(), 256 / workers, "{workers} workers");
            }
        }
    }

    #[test]
    fn without_a_server_id_cids_are_unroutable_to_a_load_balancer() {
        let layout = CidLayout::new(None, 2).unwrap();
        let mut g = layout.generator(1, key(1), None);
        for _ in 0..100 {
            let cid = g.generate_cid();
            assert_eq!(cid.len(), 9);
            assert_eq!(cid[0] >> 5, UNROUTABLE);
            assert_eq!(quic_lb_server_id(&cid, 1), None);
            assert_eq!(layout.worker_of(&cid), Some(1));
        }
    }

    #[test]
    fn only_cids_signed_with_the_key_validate() {
        let layout = CidLayout::new(None, 1).unwrap();
        let mut g = layout.generator(0, key(1), None);
        let other = layout.generator(0, key(2), None);
        let cid = g.generate_cid();
        assert!(g.validate(&cid).is_ok());
        assert!(other.validate(&cid).is_err());
        let mut flipped = cid.to_vec();
        flipped[4] ^= 1;
        assert!(g.validate(&ConnectionId::new(&flipped)).is_err());
        assert!(g.validate(&ConnectionId::new(&cid[..8])).is_err());
    }

    #[test]
    fn quic_lb_decoding_refuses_short_and_unroutable_ids() {
        assert_eq!(quic_lb_server_id(&[], 1), None);
        // Length 12 claimed, 5 present.
        assert_eq!(quic_lb_server_id(&[11, 1, 2, 3, 4], 1), None);
        assert_eq!(quic_lb_server_id(&[0xe0, 1, 2, 3, 4], 1), None);
        assert_eq!(quic_lb_server_id(&[4, 9, 8, 7, 6], 2), Some(&[9, 8][..]));
    }

    #[test]
    fn layouts_refuse_impossible_worker_counts() {
        assert!(CidLayout::new(None, 0).is_err());
        assert!(CidLayout::new(None, MAX_WORKERS + 1).is_err());
        let l = CidLayout::new(None, 3).unwrap();
        assert_eq!(l.worker_of(&[0, 5]), Some(2));
        assert_eq!(l.worker_of(&[0]), None);
    }
}
