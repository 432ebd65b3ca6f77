//! Receive buffers and the datagrams cut from them.
//!
//! A [`RecvBatch`] owns one [`BytesMut`] slot per datagram buffer handed to the kernel. After a
//! receive, each slot holds what the kernel wrote: one datagram, or a GRO run of equal-size
//! segments (the last may be shorter). [`RecvBatch::datagrams`] cuts them apart with
//! `BytesMut::split_to`, so each [`Datagram`] owns its payload without a copy; the slot keeps
//! the rest of its allocation and reuses it once every datagram cut from it has been dropped.
//! Slots holding 4 KiB or less are the exception: their datagrams are copied out
//! (`COPY_UP_TO` says why).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::{
    config::{Config, RECV_SLOT_SIZE},
    stats::RxDrop,
    transmit::EcnCodepoint,
};
use bytes::BytesMut;

/// A slot whose contents (one datagram, or a short GRO run) are at most this long is copied
/// out of its 64 KiB buffer; longer ones are cut from it without a copy.
///
/// A datagram cut from a slot shares the slot's allocation, and a QUIC stack keeps received
/// data (out-of-order stream frames) as slices of it until the gap before it is filled: a
/// slot that got one datagram would pin 64 KiB per buffered packet. Copying costs one
/// allocation and a memcpy of at most 4 KiB, and the slot keeps its buffer for the next
/// receive; GRO runs longer than that, which carry the bulk of a fast transfer, are still cut
/// without a copy. `docs/performance.md` has the measurement.
pub(crate) const COPY_UP_TO: usize = 4096;

/// One received datagram.
#[derive(Debug)]
pub struct Datagram {
    /// The payload. It shares its allocation with nothing the caller can see: mutate it,
    /// freeze it or hand it to a QUIC state machine as it is.
    pub data: BytesMut,
    /// Who sent it.
    pub source: SocketAddr,
    /// The local IP address it was sent to, where the platform reports it (`IP_PKTINFO`).
    pub destination: Option<IpAddr>,
    /// ECN codepoint of the IP header.
    pub ecn: Option<EcnCodepoint>,
}

/// What the kernel reported for one slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotMeta {
    /// Bytes written into the slot.
    pub(crate) len: usize,
    /// Segment size of a GRO run; equal to `len` for a single datagram.
    pub(crate) stride: usize,
    pub(crate) source: SocketAddr,
    pub(crate) destination: Option<IpAddr>,
    pub(crate) ecn: Option<EcnCodepoint>,
    /// Why the slot's datagrams are dropped rather than handed up, and how many there were
    /// (its length is then 0).
    pub(crate) dropped: Option<(RxDrop, usize)>,
}

impl Default for SlotMeta {
    fn default() -> Self {
        Self {
            len: 0,
            stride: 0,
            source: SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0),
            destination: None,
            ecn: None,
            dropped: None,
        }
    }
}

/// The lengths of the segments in a GRO run of `len` bytes cut at `stride`: all `stride` long
/// but the last, which may be shorter. A `stride` of 0 or at least `len` means one datagram.
/// A `len` of 0 yields nothing.
pub fn segment_lengths(len: usize, stride: usize) -> impl Iterator<Item = usize> {
    let stride = if stride == 0 || stride > len {
        len
    } else {
        stride
    };
    let mut left = len;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let n = stride.min(left);
        left -= n;
        Some(n)
    })
}

/// Buffers for one receive syscall and the datagrams it returned.
#[derive(Debug)]
pub struct RecvBatch {
    slots: Vec<BytesMut>,
    pub(crate) meta: Vec<SlotMeta>,
    /// Slots the last receive filled.
    pub(crate) filled: usize,
    /// The next slot [`RecvBatch::datagrams`] cuts from.
    next: usize,
    /// Leading slots readied by an earlier `prepare` (untouched unless filled since).
    ready: usize,
    slot_size: usize,
    /// A slot holding at most this many bytes yields copies of its datagrams.
    copy_up_to: usize,
    /// The current slot's contents, when they were copied out: datagrams are cut from here.
    copied: Option<BytesMut>,
}

impl RecvBatch {
    /// Buffers for a socket with this config: one 64 KiB slot per datagram of a batch.
    #[must_use]
    pub fn new(config: &Config) -> Self {
        Self::with_slots(config.effective_batch_size(), RECV_SLOT_SIZE).copying_up_to(COPY_UP_TO)
    }

    /// `slots` buffers of `slot_size` bytes each. A slot smaller than a datagram (or a GRO run)
    /// makes the kernel truncate it, which the socket counts and drops.
    #[must_use]
    pub fn with_slots(slots: usize, slot_size: usize) -> Self {
        let slots = slots.max(1);
        Self {
            slots: (0..slots)
                .map(|_| BytesMut::with_capacity(slot_size))
                .collect(),
            meta: vec![SlotMeta::default(); slots],
            filled: 0,
            next: 0,
            ready: 0,
            slot_size,
            copy_up_to: 0,
            copied: None,
        }
    }

    /// Copies out the datagrams of slots holding at most `bytes` (see `COPY_UP_TO`).
    pub(crate) fn copying_up_to(mut self, bytes: usize) -> Self {
        self.copy_up_to = bytes;
        self
    }

    /// Number of slots, i.e. the most datagram buffers one syscall can fill.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Slots filled by the last receive (a GRO run counts once).
    #[must_use]
    pub fn filled_slots(&self) -> usize {
        self.filled
    }

    /// Readies every slot for the kernel: drops leftovers, makes `slot_size` bytes writable
    /// in each. A slot whose earlier datagrams have all been dropped reuses its allocation.
    ///
    /// Only slots that need it are touched: those the last receive filled (cut into
    /// datagrams since) and those never readied. The others are still empty with their space,
    /// so a receive that gets one datagram costs one slot's preparation, not a whole batch's.
    pub(crate) fn prepare(&mut self, max_slots: usize) -> (&mut [BytesMut], &mut [SlotMeta]) {
        let n = max_slots.clamp(1, self.slots.len());
        // Every slot filled since the last reset, offered this time or not, then every slot
        // offered for the first time.
        let dirty = self.filled.min(self.slots.len());
        let first_fresh = self.ready.max(dirty);
        let fresh = first_fresh..n.max(first_fresh);
        self.filled = 0;
        self.next = 0;
        self.copied = None;
        let slot_size = self.slot_size;
        for slot in &mut self.slots[..dirty] {
            slot.clear();
            slot.reserve(slot_size);
        }
        for slot in &mut self.slots[fresh] {
            slot.clear();
            slot.reserve(slot_size);
        }
        self.ready = self.ready.max(n);
        (&mut self.slots[..n], &mut self.meta[..n])
    }

    /// Records that the kernel filled `filled` slots, whose lengths are set.
    pub(crate) fn set_filled(&mut self, filled: usize) {
        self.filled = filled;
        self.next = 0;
        self.copied = None;
    }

    /// The datagrams of the last receive, in the order the kernel delivered them, GRO runs
    /// split into their segments. Each is yielded once; ones not taken are dropped by the
    /// next receive.
    pub fn datagrams(&mut self) -> Datagrams<'_> {
        Datagrams { batch: self }
    }
}

/// Iterator over the datagrams of a [`RecvBatch`].
#[derive(Debug)]
pub struct Datagrams<'a> {
    batch: &'a mut RecvBatch,
}

impl Iterator for Datagrams<'_> {
    type Item = Datagram;

    fn next(&mut self) -> Option<Datagram> {
        let b = &mut *self.batch;
        loop {
            if b.next >= b.filled {
                return None;
            }
            let meta = b.meta[b.next];
            let slot = &mut b.slots[b.next];
            // A slot not cut yet whose contents are small: copy them out in one piece, so
            // that what the caller keeps does not pin the slot's buffer.
            let uncut = !slot.is_empty() && slot.len() == meta.len;
            if b.copied.is_none() && uncut && meta.len <= b.copy_up_to {
                b.copied = Some(BytesMut::from(&slot[..]));
                slot.clear();
            }
            let source = b.copied.as_mut().unwrap_or(slot);
            if source.is_empty() {
                // Run finished (or an empty/truncated slot that recv already counted).
                b.next += 1;
                b.copied = None;
                continue;
            }
            let stride = if meta.stride == 0 || meta.stride > meta.len {
                meta.len
            } else {
                meta.stride
            };
            let data = source.split_to(stride.min(source.len()));
            return Some(Datagram {
                data,
                source: meta.source,
                destination: meta.destination,
                ecn: meta.ecn,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_lengths_cover_the_run() {
        assert_eq!(segment_lengths(0, 1200).count(), 0);
        assert_eq!(segment_lengths(100, 0).collect::<Vec<_>>(), vec![100]);
        assert_eq!(segment_lengths(100, 100).collect::<Vec<_>>(), vec![100]);
        assert_eq!(segment_lengths(100, 1200).collect::<Vec<_>>(), vec![100]);
        assert_eq!(
            segment_lengths(3000, 1200).collect::<Vec<_>>(),
            vec![1200, 1200, 600]
        );
        assert_eq!(
            segment_lengths(2400, 1200).collect::<Vec<_>>(),
            vec![1200, 1200]
        );
        assert_eq!(segment_lengths(5, 1).count(), 5);
    }

    fn fill(batch: &mut RecvBatch, contents: &[(&[u8], usize)]) {
        let (slots, _) = batch.prepare(contents.len());
        for (slot, (bytes, _)) in slots.iter_mut().zip(contents) {
            slot.extend_from_slice(bytes);
        }
        for (i, (bytes, stride)) in contents.iter().enumerate() {
            batch.meta[i] = SlotMeta {
                len: bytes.len(),
                stride: *stride,
                source: SocketAddr::from(([127, 0, 0, 1], 1000 + i as u16)),
                ..SlotMeta::default()
            };
        }
        batch.set_filled(contents.len());
    }

    #[test]
    fn datagrams_split_gro_runs_and_keep_order() {
        let mut batch = RecvBatch::with_slots(4, 4096);
        let run: Vec<u8> = (0..25u8).collect();
        fill(&mut batch, &[(b"first", 0), (&run, 10), (b"last", 4)]);
        let got: Vec<_> = batch
            .datagrams()
            .map(|d| (d.data.to_vec(), d.source.port()))
            .collect();
        assert_eq!(
            got,
            vec![
                (b"first".to_vec(), 1000),
                ((0..10).collect(), 1001),
                ((10..20).collect(), 1001),
                ((20..25).collect(), 1001),
                (b"last".to_vec(), 1002),
            ]
        );
        // Yielded once only.
        assert_eq!(batch.datagrams().count(), 0);
    }

    #[test]
    fn small_slots_are_copied() {
        let mut batch = RecvBatch::new(&Config::default());
        // A lone datagram and a short GRO run (3 segments, the last one shorter).
        let run: Vec<u8> = (0..30u8).collect();
        fill(&mut batch, &[(&[7u8; 1200], 0), (&run, 12)]);
        let (p0, p1) = (batch.slots[0].as_ptr(), batch.slots[1].as_ptr());
        let held: Vec<_> = batch.datagrams().collect();
        let got: Vec<_> = held.iter().map(|d| d.data.to_vec()).collect();
        assert_eq!(
            got,
            vec![
                vec![7u8; 1200],
                (0..12).collect(),
                (12..24).collect(),
                (24..30).collect()
            ]
        );
        for d in &held {
            assert!(d.data.as_ptr() != p0 && d.data.as_ptr() != p1, "a copy");
        }
        // Still held, yet the slots' buffers are reused, not reallocated.
        fill(&mut batch, &[(&[8u8; 1200], 0), (&[9u8; 100], 0)]);
        assert_eq!(batch.slots[0].as_ptr(), p0);
        assert_eq!(batch.slots[1].as_ptr(), p1);
        let again: Vec<_> = batch.datagrams().map(|d| d.data.to_vec()).collect();
        assert_eq!(again, vec![vec![8u8; 1200], vec![9u8; 100]]);
        assert_eq!(&held[0].data[..], &[7u8; 1200]);

        // A slot holding more is cut without a copy.
        let big = vec![5u8; COPY_UP_TO + 1];
        fill(&mut batch, &[(&big, 1000)]);
        let p = batch.slots[0].as_ptr();
        let cut: Vec<_> = batch.datagrams().collect();
        assert_eq!(cut.len(), 5);
        assert_eq!(cut[0].data.as_ptr(), p);
        assert_eq!(cut[4].data.len(), 97);

        // Single mode's one slot follows the same rule.
        let mut single = RecvBatch::new(&Config::with_mode(crate::IoMode::Single));
        assert_eq!(single.capacity(), 1);
        fill(&mut single, &[(&[6u8; 1200], 0)]);
        let p = single.slots[0].as_ptr();
        let d = single.datagrams().next().unwrap();
        assert_ne!(d.data.as_ptr(), p);
        fill(&mut single, &[(&big, 0)]);
        assert_eq!(single.datagrams().next().unwrap().data.as_ptr(), p);
    }

    /// A caller that stops part-way through a copied run gets the rest on the next call.
    #[test]
    fn copied_runs_resume_where_the_caller_stopped() {
        let mut batch = RecvBatch::new(&Config::default());
        let run: Vec<u8> = (0..30u8).collect();
        fill(&mut batch, &[(&run, 10), (b"next", 0)]);
        let first = batch.datagrams().next().unwrap();
        assert_eq!(&first.data[..], &run[..10]);
        let rest: Vec<_> = batch.datagrams().map(|d| d.data.to_vec()).collect();
        assert_eq!(
            rest,
            vec![run[10..20].to_vec(), run[20..].to_vec(), b"next".to_vec()]
        );
    }

    /// What the kernel relies on: after `prepare`, every offered slot is empty with a whole
    /// slot of space, whatever earlier receives filled and whatever was taken or kept.
    #[test]
    fn prepared_slots_are_always_empty_with_room() {
        let mut batch = RecvBatch::with_slots(8, 2048);
        let mut kept = Vec::new();
        let mut x = 7u32;
        for round in 0..500 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let offered = 1 + (x >> 8) as usize % 8;
            let (slots, _) = batch.prepare(offered);
            assert_eq!(slots.len(), offered);
            for (i, slot) in slots.iter().enumerate() {
                assert!(slot.is_empty(), "round {round}: slot {i} not empty");
                assert!(
                    slot.capacity() >= 2048,
                    "round {round}: slot {i} lacks room"
                );
            }
            let filled = (x >> 16) as usize % (offered + 1);
            for slot in &mut slots[..filled] {
                slot.extend_from_slice(&[round as u8; 100]);
            }
            for i in 0..filled {
                batch.meta[i] = SlotMeta {
                    len: 100,
                    stride: 40,
                    ..SlotMeta::default()
                };
            }
            batch.set_filled(filled);
            // Take some datagrams, keep a few alive, leave the rest in the slots.
            let take = (x >> 20) as usize % (filled * 3 + 1);
            for d in batch.datagrams().take(take) {
                assert_eq!(d.data[0], round as u8);
                if x.is_multiple_of(5) {
                    kept.push(d);
                }
            }
        }
        assert!(kept.iter().all(|d| !d.data.is_empty()));
    }

    #[test]
    fn slots_are_reused_once_datagrams_are_dropped() {
        let mut batch = RecvBatch::with_slots(1, 2048);
        fill(&mut batch, &[(&[7u8; 100], 0)]);
        let d = batch.datagrams().next().unwrap();
        let first_ptr = d.data.as_ptr();
        drop(d);
        fill(&mut batch, &[(&[8u8; 100], 0)]);
        let d = batch.datagrams().next().unwrap();
        assert_eq!(d.data.as_ptr(), first_ptr, "allocation reused");
        assert_eq!(&d.data[..], &[8u8; 100]);
        // Still held: the next fill must not clobber it.
        fill(&mut batch, &[(&[9u8; 100], 0)]);
        assert_eq!(&d.data[..], &[8u8; 100]);
        let e = batch.datagrams().next().unwrap();
        assert_eq!(&e.data[..], &[9u8; 100]);
    }
}
