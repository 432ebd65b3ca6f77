//! The generated body pattern: the byte at offset `k` is `k % 256`.

use std::sync::LazyLock;

/// Largest slice handed out by [`slice_at`].
pub const MAX_SLICE: usize = 256 * 1024;

static PATTERN: LazyLock<Box<[u8]>> = LazyLock::new(|| {
    (0..MAX_SLICE + 256)
        .map(|i| u8::try_from(i % 256).expect("i % 256 fits in u8"))
        .collect()
});

/// The pattern byte at `offset`.
#[must_use]
pub fn byte_at(offset: u64) -> u8 {
    u8::try_from(offset % 256).expect("offset % 256 fits in u8")
}

/// A static slice holding the pattern bytes `offset .. offset + len`.
///
/// # Panics
/// If `len > MAX_SLICE`.
#[must_use]
pub fn slice_at(offset: u64, len: usize) -> &'static [u8] {
    assert!(len <= MAX_SLICE, "pattern slice too long");
    let start = usize::from(byte_at(offset));
    &PATTERN[start..start + len]
}

/// Checks `data`, received at body offset `offset`, against the pattern.
/// Returns the body offset of the first wrong byte, if any.
#[must_use]
pub fn first_mismatch(offset: u64, data: &[u8]) -> Option<u64> {
    let mut done = 0usize;
    while done < data.len() {
        let n = (data.len() - done).min(MAX_SLICE);
        let at = offset + done as u64;
        let chunk = &data[done..done + n];
        if chunk != slice_at(at, n) {
            let i = chunk
                .iter()
                .zip(slice_at(at, n))
                .position(|(a, b)| a != b)
                .expect("slices differ");
            return Some(at + i as u64);
        }
        done += n;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_follow_pattern() {
        for offset in [0u64, 1, 255, 256, 1000, u64::from(u32::MAX) + 7] {
            let s = slice_at(offset, 600);
            for (i, b) in s.iter().enumerate() {
                assert_eq!(*b, byte_at(offset + i as u64));
            }
        }
    }

    #[test]
    fn mismatch_is_located() {
        let mut data: Vec<u8> = (0..(3 * MAX_SLICE as u64))
            .map(|k| byte_at(k + 5))
            .collect();
        assert_eq!(first_mismatch(5, &data), None);
        assert_eq!(first_mismatch(6, &data), Some(6));
        data[MAX_SLICE + 17] ^= 1;
        assert_eq!(first_mismatch(5, &data), Some(5 + MAX_SLICE as u64 + 17));
    }
}
