//! Entry points for the fuzz targets in `fuzz/`: the receive path's own parsing, fed
//! arbitrary input. Not part of the API.

use std::net::SocketAddr;

use crate::recv::{RecvBatch, SlotMeta, segment_lengths};

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
/// than its stride. Panics on a violation.
pub fn split_batch(contents: &[u8], slots: &[FuzzSlot]) {
    let n = slots.len().clamp(1, 64);
    // Slots of up to 1 KiB are copied out, larger ones cut in place: both paths are fed.
    let mut batch = RecvBatch::with_slots(n, 4096).copying_up_to(1024);
    let (bufs, metas) = batch.prepare(n);
    let mut offset = 0;
    let mut expected = Vec::new();
    for ((buf, meta), s) in bufs.iter_mut().zip(metas.iter_mut()).zip(slots) {
        let len = s.len.min(4096).min(contents.len() - offset);
        let bytes = &contents[offset..offset + len];
        offset += len;
        *meta = SlotMeta {
            len: if s.truncated { 0 } else { len },
            stride: s.stride,
            source: SocketAddr::from(([127, 0, 0, 1], 9)),
            truncated: s.truncated,
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
        .map(|d| d.data.to_vec())
        .collect();
    got.extend(batch.datagrams().map(|d| d.data.to_vec()));
    assert!(
        got.iter().all(|d| !d.is_empty()),
        "no empty datagram handed up"
    );
    assert_eq!(got, expected, "datagrams are the slots' segments, in order");
}

/// Decodes arbitrary bytes as a received control-message buffer. Must never read outside
/// the buffer or panic. Returns whether anything was recognised.
#[cfg(target_os = "linux")]
#[must_use]
pub fn decode_control(bytes: &[u8]) -> bool {
    let (meta, drops) = crate::sys::decode_control_bytes(bytes);
    meta.ecn.is_some() || meta.destination.is_some() || meta.stride != 0 || drops.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic stand-in for the fuzzer, run with the unit tests.
    #[test]
    fn random_inputs_keep_the_invariants() {
        let mut x = 0x1234_5678_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2000 {
            let contents: Vec<u8> = (0..(next() % 20_000)).map(|_| next() as u8).collect();
            let slots: Vec<FuzzSlot> = (0..(next() % 40))
                .map(|_| FuzzSlot {
                    len: (next() % 5000) as usize,
                    stride: (next() % 1500) as usize,
                    truncated: next() % 10 == 0,
                })
                .collect();
            split_batch(&contents, &slots);
            #[cfg(target_os = "linux")]
            {
                let ctrl: Vec<u8> = (0..(next() % 200)).map(|_| next() as u8).collect();
                let _ = decode_control(&ctrl);
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn decode_control_reads_real_cmsgs() {
        // A UDP_GRO cmsg with stride 1200, as the kernel lays it out.
        let mut buf = vec![0u8; 24];
        let len = 16 + 4;
        buf[..8].copy_from_slice(&(len as u64).to_ne_bytes());
        buf[8..12].copy_from_slice(&libc::SOL_UDP.to_ne_bytes());
        buf[12..16].copy_from_slice(&libc::UDP_GRO.to_ne_bytes());
        buf[16..20].copy_from_slice(&1200i32.to_ne_bytes());
        let (meta, _) = crate::sys::decode_control_bytes(&buf);
        assert_eq!(meta.stride, 1200);
        // The same header claiming more payload than the buffer holds reads nothing beyond.
        buf[..8].copy_from_slice(&4096u64.to_ne_bytes());
        let (meta, _) = crate::sys::decode_control_bytes(&buf[..18]);
        assert_eq!(meta.stride, 0, "a truncated int is not read");
        // The fuzzer's first find: a cmsg_len near usize::MAX made libc's CMSG_NXTHDR
        // overflow. It must simply end the walk.
        assert!(!decode_control(&[0xff; 16]));
        assert!(!decode_control(&[0xff; 40]));
    }
}
