//! The generated body pattern of `hq-interop` `/N` responses and `perf` transfers: the byte at
//! body offset `k` is `k % 256`.
//!
//! Pieces of the pattern are slices of one static table, so sending a generated body of any
//! length allocates nothing and copies nothing on the sender's side. Nothing here depends on a
//! QUIC stack: [`slice()`] suits a peer that sends from `&'static [u8]` buffers, [`chunk`] one
//! that takes [`Bytes`].

use bytes::Bytes;

/// Largest piece [`chunk`] hands out (and the size of a file read, see `disk`): big enough to
/// amortise per-chunk work, small enough to bound what a stream holds.
pub const CHUNK: usize = 64 * 1024;

/// Largest piece [`slice()`] hands out.
pub const MAX_SLICE: usize = 256 * 1024;

/// `MAX_SLICE` bytes from any starting phase `0..256`.
const TABLE_LEN: usize = MAX_SLICE + 256;

static TABLE: [u8; TABLE_LEN] = build();

#[expect(clippy::cast_possible_truncation, reason = "i % 256 fits a byte")]
const fn build() -> [u8; TABLE_LEN] {
    let mut t = [0u8; TABLE_LEN];
    let mut i = 0;
    while i < TABLE_LEN {
        t[i] = (i % 256) as u8;
        i += 1;
    }
    t
}

/// The pattern byte at body offset `offset`.
#[must_use]
#[expect(clippy::cast_possible_truncation, reason = "offset % 256 fits a byte")]
pub const fn byte_at(offset: u64) -> u8 {
    (offset % 256) as u8
}

/// The pattern bytes from body offset `offset`: `max` of them, but at most [`MAX_SLICE`].
#[must_use]
pub fn slice(offset: u64, max: u64) -> &'static [u8] {
    let start = usize::from(byte_at(offset));
    let len = usize::try_from(max).unwrap_or(usize::MAX).min(MAX_SLICE);
    &TABLE[start..start + len]
}

/// The pattern bytes from body offset `offset`: `max` of them, but at most [`CHUNK`].
#[must_use]
pub fn chunk(offset: u64, max: u64) -> Bytes {
    Bytes::from_static(slice(offset, max.min(CHUNK as u64)))
}

/// The body offset of the first byte of `data` (found at body offset `offset`) that differs
/// from the pattern, if any.
#[must_use]
pub fn first_mismatch(offset: u64, data: &[u8]) -> Option<u64> {
    let mut at = offset;
    for piece in data.chunks(MAX_SLICE) {
        let expected = slice(at, piece.len() as u64);
        if piece != expected {
            let i = piece.iter().zip(expected).position(|(a, b)| a != b)?;
            return Some(at + i as u64);
        }
        at += piece.len() as u64;
    }
    None
}

/// Whether `data`, found at body offset `offset`, matches the pattern.
#[must_use]
pub fn verify(offset: u64, data: &[u8]) -> bool {
    first_mismatch(offset, data).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_offsets() {
        assert_eq!(&chunk(0, 3)[..], &[0, 1, 2]);
        assert_eq!(&chunk(255, 3)[..], &[255, 0, 1]);
        assert_eq!(
            &chunk(1000, 2)[..],
            &[(1000 % 256) as u8, (1001 % 256) as u8]
        );
        assert_eq!(chunk(7, 1 << 40).len(), CHUNK);
        assert_eq!(slice(7, 1 << 40).len(), MAX_SLICE);
        assert!(chunk(5, 0).is_empty());
        for offset in [
            0u64,
            1,
            255,
            256,
            1000,
            u64::from(u32::MAX) + 7,
            u64::MAX - 3,
        ] {
            let s = slice(offset, 600);
            for (i, b) in s.iter().enumerate() {
                assert_eq!(*b, byte_at(offset.wrapping_add(i as u64)), "{offset} + {i}");
            }
        }
    }

    #[test]
    fn mismatches_are_located() {
        let mut long: Vec<u8> = (0..3 * MAX_SLICE as u64 + 7).map(byte_at).collect();
        assert!(verify(0, &long));
        assert!(verify(3, &long[3..]));
        assert!(!verify(4, &long[3..]));
        assert_eq!(first_mismatch(4, &long[3..]), Some(4));
        long[MAX_SLICE + 17] ^= 1;
        assert_eq!(first_mismatch(0, &long), Some(MAX_SLICE as u64 + 17));
        assert!(!verify(0, &long));
        assert_eq!(first_mismatch(0, &[]), None);
    }
}
