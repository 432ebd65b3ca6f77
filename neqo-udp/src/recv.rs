//! Receive buffers and the datagrams cut from them.
//!
//! A [`RecvBatch`] owns one 64 KiB slot per datagram buffer handed to the kernel. After a
//! receive, each slot holds what the kernel wrote: one datagram, or a GRO run of equal-size
//! segments (the last may be shorter). [`RecvBatch::datagrams`] yields each datagram as a
//! copy in an allocation of its own length ([`RecvBuffers::Own`]), and the slots stay the
//! batch's for the next receive.
//!
//! Why a copy, when the datagrams could be cut from the slot without one: a datagram cut from
//! a slot shares the slot's allocation, and a QUIC stack keeps received data (stream frames
//! behind a gap, DATAGRAM frames, queued packets) as slices of it for as long as it likes. One
//! such datagram would pin 64 KiB, so a peer that sends runs of datagrams and keeps one of
//! each buffered makes the receiver hold up to 54 times what its flow control grants, and
//! every bound a stack states on buffered bytes (quinn-proto's receive windows and its
//! over-allocation rule) would be off by that factor. With a copy per datagram, what a stack
//! holds is what it counts. A receiver that trusts its peer may take runs without the copy
//! ([`RecvBuffers::SharedRuns`]); `docs/records/performance.md` has what the copy costs.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use crate::{
    config::{Config, RECV_SLOT_SIZE, RecvBuffers},
    stats::RxDrop,
    transmit::EcnCodepoint,
};
use bytes::BytesMut;

/// With [`RecvBuffers::SharedRuns`], a slot holding more than this is cut into datagrams
/// without a copy; one holding this or less is copied (a lone datagram, a short run), so that
/// the small datagrams a peer can most cheaply make a stack keep never pin 64 KiB each.
pub(crate) const SHARE_ABOVE: usize = 4096;

/// One received datagram. [`Datagram::new`] makes one (for a test, or a datagram that
/// arrived some other way, such as through a channel).
#[derive(Debug)]
#[non_exhaustive]
pub struct Datagram {
    /// The payload: mutate it, freeze it or hand it to a QUIC state machine as it is. With
    /// [`RecvBuffers::Own`], the default, in an allocation of its own no larger than it, to
    /// hold as long as needed.
    pub data: BytesMut,
    /// Who sent it.
    pub source: SocketAddr,
    /// The local IP address it was sent to, where the platform reports it (`IP_PKTINFO`).
    pub destination: Option<IpAddr>,
    /// ECN codepoint of the IP header.
    pub ecn: Option<EcnCodepoint>,
}

impl Datagram {
    /// `data` from `source`, with no local address and no ECN codepoint (set the fields for
    /// those).
    #[must_use]
    pub const fn new(data: BytesMut, source: SocketAddr) -> Self {
        Self {
            data,
            source,
            destination: None,
            ecn: None,
        }
    }
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
#[cfg(any(fuzzing, test))]
pub(crate) fn segment_lengths(len: usize, stride: usize) -> impl Iterator<Item = usize> {
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
    /// The kernel's buffers. With [`RecvBuffers::Own`] never shared: every datagram handed
    /// out is a copy, so a slot keeps its allocation from one receive to the next.
    slots: Vec<BytesMut>,
    pub(crate) meta: Vec<SlotMeta>,
    /// Slots the last receive filled.
    filled: usize,
    /// Where [`RecvBatch::datagrams`] goes on: slot `next`, from byte `offset`.
    next: usize,
    offset: usize,
    slot_size: usize,
    buffers: RecvBuffers,
}

impl RecvBatch {
    /// Buffers for a socket with this config: one 64 KiB slot per datagram of a batch
    /// ([`Config::batch_size`]), yielding datagrams as [`Config::recv_buffers`]
    /// says. What [`UdpSocketState::recv_batch`](crate::UdpSocketState::recv_batch) gives.
    #[must_use]
    pub fn new(config: &Config) -> Self {
        Self::with_slots(config.batch_size(), RECV_SLOT_SIZE).with_buffers(config.recv_buffers())
    }

    /// `slots` buffers of `slot_size` bytes each, yielding datagrams of their own
    /// ([`RecvBuffers::Own`]) whatever the socket's config says: chain
    /// [`with_buffers`](Self::with_buffers) to share GRO runs, or use [`new`](Self::new) to
    /// follow a config. A slot smaller than a datagram (or a GRO run) makes the kernel
    /// truncate it, which the socket counts and drops.
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
            offset: 0,
            slot_size,
            buffers: RecvBuffers::Own,
        }
    }

    /// Yields datagrams as `buffers` says, from the next receive on.
    #[must_use]
    pub const fn with_buffers(mut self, buffers: RecvBuffers) -> Self {
        self.buffers = buffers;
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

    /// Readies the first `max_slots` slots for the kernel: empty, with `slot_size` bytes of
    /// room each. Datagrams of the last receive not taken yet are dropped.
    pub(crate) fn prepare(&mut self, max_slots: usize) -> (&mut [BytesMut], &mut [SlotMeta]) {
        let n = max_slots.clamp(1, self.slots.len());
        self.set_filled(0);
        let slot_size = self.slot_size;
        for slot in &mut self.slots[..n] {
            slot.clear();
            // A no-op but on first use and after a shared run: an allocation no datagram
            // shares is kept, one that datagrams still hold is left to them.
            slot.reserve(slot_size);
        }
        (&mut self.slots[..n], &mut self.meta[..n])
    }

    /// Records that the kernel filled `filled` slots, whose lengths are set.
    pub(crate) fn set_filled(&mut self, filled: usize) {
        self.filled = filled;
        self.next = 0;
        self.offset = 0;
    }

    /// The datagrams of the last receive, in the order the kernel delivered them, GRO runs
    /// split into their segments, each a copy of its own. Each is yielded once; ones not
    /// taken are dropped by the next receive.
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
        while b.next < b.filled {
            let meta = &b.meta[b.next];
            let slot = &mut b.slots[b.next];
            // Cut from the slot itself (which then starts at `offset`), or copied out of it.
            let cut = b.buffers == RecvBuffers::SharedRuns && meta.len > SHARE_ABOVE;
            let held = if cut {
                b.offset + slot.len()
            } else {
                slot.len()
            };
            // A dropped slot has length 0 (`recv` counted it); the run is finished at its end.
            let len = meta.len.min(held);
            if b.offset >= len {
                b.next += 1;
                b.offset = 0;
                continue;
            }
            let stride = if meta.stride == 0 { len } else { meta.stride };
            let n = stride.min(len - b.offset);
            let data = if cut {
                slot.split_to(n)
            } else {
                BytesMut::from(&slot[b.offset..b.offset + n])
            };
            b.offset += n;
            return Some(Datagram {
                data,
                source: meta.source,
                destination: meta.destination,
                ecn: meta.ecn,
            });
        }
        None
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

    /// Every datagram is a copy in an allocation of its own length, whatever the slot held
    /// (a lone datagram, a short run, a long run), and the slots keep their buffers while the
    /// datagrams are held.
    #[test]
    fn every_datagram_is_a_copy_of_its_own_size() {
        let mut batch = RecvBatch::new(&Config::default());
        let short: Vec<u8> = (0..30u8).collect();
        let long: Vec<u8> = (0..60_000u32).map(|i| i as u8).collect();
        fill(
            &mut batch,
            &[(&[7u8; 1200], 0), (&short, 12), (&long, 1452)],
        );
        let slots: Vec<(usize, usize)> = batch.slots[..3]
            .iter()
            .map(|s| (s.as_ptr() as usize, s.capacity()))
            .collect();
        let held: Vec<_> = batch.datagrams().collect();
        assert_eq!(held.len(), 1 + 3 + 42);
        assert_eq!(&held[0].data[..], &[7u8; 1200]);
        assert_eq!(&held[1].data[..], &short[..12]);
        assert_eq!(&held[3].data[..], &short[24..]);
        assert_eq!(&held[4].data[..], &long[..1452]);
        assert_eq!(&held[45].data[..], &long[41 * 1452..]);
        for d in &held {
            let at = d.data.as_ptr() as usize;
            assert!(
                slots.iter().all(|&(p, cap)| at < p || at >= p + cap),
                "a datagram inside a slot's buffer"
            );
            assert!(
                d.data.capacity() <= 1452,
                "{} bytes held",
                d.data.capacity()
            );
        }
        // Still held, yet the next receive reuses the slots' buffers.
        fill(
            &mut batch,
            &[(&[8u8; 1200], 0), (&[9u8; 100], 0), (&long, 1200)],
        );
        for (slot, &(p, cap)) in batch.slots[..3].iter().zip(&slots) {
            assert_eq!((slot.as_ptr() as usize, slot.capacity()), (p, cap));
        }
        assert_eq!(batch.datagrams().count(), 2 + 50);
        assert_eq!(&held[0].data[..], &[7u8; 1200], "held data untouched");
        assert_eq!(&held[45].data[..], &long[41 * 1452..]);
    }

    /// Shared runs: a slot of more than 4 KiB is cut without a copy, a smaller one copied;
    /// the next receive leaves the cut slot's allocation to the datagrams that hold it.
    #[test]
    fn shared_runs_are_cut_and_small_slots_copied() {
        let config = Config::default().with_recv_buffers(RecvBuffers::SharedRuns);
        let mut batch = RecvBatch::new(&config);
        let big: Vec<u8> = (0..SHARE_ABOVE as u32 + 1).map(|i| i as u8).collect();
        let small: Vec<u8> = (0..SHARE_ABOVE as u32).map(|i| (i * 7) as u8).collect();
        fill(&mut batch, &[(&big, 1000), (&small, 1000)]);
        let (p0, p1) = (batch.slots[0].as_ptr(), batch.slots[1].as_ptr());
        let got: Vec<_> = batch.datagrams().collect();
        assert_eq!(got.len(), 5 + 5);
        assert_eq!(got[0].data.as_ptr(), p0, "cut from the slot");
        assert_eq!(&got[4].data[..], &big[4000..]);
        assert!(got[5..].iter().all(|d| d.data.as_ptr() != p1), "copied");
        assert_eq!(&got[9].data[..], &small[4000..]);
        let parts: Vec<u8> = got[..5].iter().flat_map(|d| d.data.to_vec()).collect();
        assert_eq!(parts, big);
        fill(&mut batch, &[(b"next", 0), (b"one", 0)]);
        assert_ne!(
            batch.slots[0].as_ptr(),
            p0,
            "the held allocation is left alone"
        );
        assert_eq!(batch.slots[1].as_ptr(), p1, "the copied slot keeps its own");
        assert_eq!(&got[0].data[..], &big[..1000], "held data untouched");
        let again: Vec<_> = batch.datagrams().map(|d| d.data.to_vec()).collect();
        assert_eq!(again, vec![b"next".to_vec(), b"one".to_vec()]);
    }

    /// `new` follows the config (slots per batch, shared runs); `with_slots` copies unless
    /// told otherwise.
    #[test]
    fn new_follows_the_config_and_with_slots_copies() {
        let shared = Config::default()
            .with_batch_size(7)
            .with_recv_buffers(RecvBuffers::SharedRuns);
        let batch = RecvBatch::new(&shared);
        assert_eq!(
            (batch.capacity(), batch.buffers),
            (7, RecvBuffers::SharedRuns)
        );
        let single = RecvBatch::new(&shared.clone().with_mode(crate::IoMode::Single));
        assert_eq!(single.capacity(), 1);
        assert_eq!(RecvBatch::new(&Config::default()).buffers, RecvBuffers::Own);
        let own = RecvBatch::with_slots(3, 2048);
        assert_eq!((own.capacity(), own.buffers), (3, RecvBuffers::Own));
        let own = own.with_buffers(RecvBuffers::SharedRuns);
        assert_eq!(own.buffers, RecvBuffers::SharedRuns);
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
}
