//! The generated body pattern: the byte at offset `k` is `k % 256`.
//!
//! Chunks are slices of one static buffer, so streaming a generated body allocates nothing
//! and copies nothing until quinn-proto encrypts it into a packet.

use bytes::Bytes;

/// Largest chunk [`chunk`] hands out.
pub const CHUNK: usize = 64 * 1024;

const TABLE_LEN: usize = CHUNK + 256;

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

/// The pattern bytes from `offset`, at most `max` (and at most [`CHUNK`]) of them.
#[must_use]
pub fn chunk(offset: u64, max: u64) -> Bytes {
    let start = (offset % 256) as usize;
    let len = usize::try_from(max).unwrap_or(usize::MAX).min(CHUNK);
    Bytes::from_static(&TABLE[start..start + len])
}

/// Whether `data`, found at `offset` of a body, matches the pattern.
#[must_use]
pub fn verify(offset: u64, data: &[u8]) -> bool {
    let mut off = offset;
    data.chunks(CHUNK).all(|piece| {
        let ok = piece == &chunk(off, piece.len() as u64)[..];
        off += piece.len() as u64;
        ok
    })
}

/// The length a path of only digits (`/N`) asks for, if it is one.
#[must_use]
pub fn generated_len(path: &str) -> Option<u64> {
    let digits = path.strip_prefix('/')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
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
        let long: Vec<u8> = (0..200_000u64).map(|k| (k % 256) as u8).collect();
        assert!(verify(0, &long));
        assert!(verify(3, &long[3..]));
        assert!(!verify(4, &long[3..]));
    }

    #[test]
    fn generated_paths() {
        assert_eq!(generated_len("/123"), Some(123));
        assert_eq!(generated_len("/0"), Some(0));
        assert_eq!(generated_len("/"), None);
        assert_eq!(generated_len("/12a"), None);
        assert_eq!(generated_len("/index.html"), None);
    }
}
