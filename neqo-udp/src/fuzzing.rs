//! Entry points for the fuzz targets in `fuzz/` (built with `--cfg fuzzing`): the receive
//! path's parsing and the send policy, fed arbitrary input. Not part of the API.
//!
//! The send policy's scripted kernel speaks errno, so that harness is Unix only.

use std::net::SocketAddr;

use crate::{
    config::RecvBuffers,
    recv::{RecvBatch, SlotMeta, segment_lengths},
    stats::RxDrop,
};

/// What the kernel might report for one slot, as the fuzzer invents it.
#[derive(Debug, Clone, Copy)]
pub struct FuzzSlot {
    /// Bytes written into the slot (clamped to the contents given).
    pub len: usize,
    /// GRO segment size.
    pub stride: usize,
    /// `MSG_TRUNC`.
    pub truncated: bool,
}

/// Fills a batch with `contents` cut per `slots`, then splits it into datagrams and checks
/// the invariants: nothing invented, nothing lost, order kept, no datagram empty or longer
/// than its stride, each in an allocation no larger than itself. Panics on a violation.
pub fn split_batch(contents: &[u8], slots: &[FuzzSlot]) {
    let n = slots.len().clamp(1, 64);
    // Both ways of handing datagrams out, the slots' 8 KiB long enough to be shared.
    let buffers = if contents.len().is_multiple_of(2) {
        RecvBuffers::Own
    } else {
        RecvBuffers::SharedRuns
    };
    let mut batch = RecvBatch::with_slots(n, 8192).with_buffers(buffers);
    let (bufs, metas) = batch.prepare(n);
    let mut offset = 0;
    let mut expected = Vec::new();
    for ((buf, meta), s) in bufs.iter_mut().zip(metas.iter_mut()).zip(slots) {
        let len = s.len.min(8192).min(contents.len() - offset);
        let bytes = &contents[offset..offset + len];
        offset += len;
        *meta = SlotMeta {
            len: if s.truncated { 0 } else { len },
            stride: s.stride,
            source: SocketAddr::from(([127, 0, 0, 1], 9)),
            dropped: s.truncated.then_some((RxDrop::Truncated, 1)),
            ..SlotMeta::default()
        };
        if !s.truncated {
            buf.extend_from_slice(bytes);
            let mut at = 0;
            for seg in segment_lengths(len, s.stride) {
                expected.push(bytes[at..at + seg].to_vec());
                at += seg;
            }
            assert_eq!(at, len, "segments cover the slot");
        }
    }
    batch.set_filled(n.min(slots.len()));
    // Taken in two goes, as a caller that stops part-way would: the second resumes.
    let first_go = contents.len() % 7;
    let mut got: Vec<Vec<u8>> = batch
        .datagrams()
        .take(first_go)
        .map(|d| own_copy(d, buffers))
        .collect();
    got.extend(batch.datagrams().map(|d| own_copy(d, buffers)));
    assert!(
        got.iter().all(|d| !d.is_empty()),
        "no empty datagram handed up"
    );
    assert_eq!(got, expected, "datagrams are the slots' segments, in order");
}

/// A datagram's bytes, checking that its allocation holds nothing but them where it must.
fn own_copy(d: crate::Datagram, buffers: RecvBuffers) -> Vec<u8> {
    if buffers == RecvBuffers::Own {
        assert_eq!(
            d.data.capacity(),
            d.data.len(),
            "a datagram in a shared allocation"
        );
    }
    d.data.to_vec()
}

/// Decodes arbitrary bytes as a received control-message buffer. Must never read outside
/// the buffer or panic. Returns whether anything was recognised.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[must_use]
pub fn decode_control(bytes: &[u8]) -> bool {
    let (meta, drops) = crate::sys::decode_control_bytes(bytes);
    meta.ecn.is_some() || meta.destination.is_some() || meta.stride != 0 || drops.is_some()
}

#[cfg(unix)]
mod send_policy;
#[cfg(unix)]
pub use send_policy::send_policy;

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic random source for the stand-ins of the fuzzers.
    pub(super) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The inputs checked in under `fuzz/corpus/<target>/` (seeds and past crashes), so that
    /// the unit tests replay them without cargo-fuzz. Outside the repository (a packaged
    /// crate has no `fuzz/`) there are none; inside it, an empty or missing corpus is an error.
    /// (Unix only: its callers' targets are.)
    #[cfg(unix)]
    pub(super) fn corpus(target: &str) -> Vec<Vec<u8>> {
        let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        if !fuzz.is_dir() {
            eprintln!("no {}: corpus of {target} not replayed", fuzz.display());
            return Vec::new();
        }
        let dir = fuzz.join("corpus").join(target);
        let inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
            .collect();
        assert!(!inputs.is_empty(), "{} is empty", dir.display());
        inputs
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    #[cfg_attr(miri, ignore = "reads files")]
    fn the_checked_in_cmsg_corpus_decodes() {
        for input in corpus("cmsg_decode") {
            let _ = decode_control(&input);
        }
    }

    /// A small deterministic stand-in for the fuzzers, run with the unit tests.
    #[test]
    fn random_inputs_keep_the_invariants() {
        let mut next = xorshift(0x1234_5678);
        for _ in 0..2000 {
            let contents: Vec<u8> = (0..(next() % 20_000)).map(|_| next() as u8).collect();
            let slots: Vec<FuzzSlot> = (0..(next() % 40))
                .map(|_| FuzzSlot {
                    len: (next() % 9000) as usize,
                    stride: (next() % 1500) as usize,
                    truncated: next().is_multiple_of(10),
                })
                .collect();
            split_batch(&contents, &slots);
            #[cfg(any(target_os = "linux", target_os = "android"))]
            {
                let ctrl: Vec<u8> = (0..(next() % 200)).map(|_| next() as u8).collect();
                let _ = decode_control(&ctrl);
            }
        }
    }
}
