//! Counters of what a socket did, always on: relaxed atomic adds, a few per syscall.
//!
//! Datagrams are counted one by one (a GSO or GRO run of 40 segments is 40), so that on the
//! send side every datagram handed in is accounted for exactly once:
//! handed in = [`DirectionStats::datagrams`] sent + [`TxDropped::total`] + still queued.

use std::{
    fmt,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

/// Buckets of the datagrams-per-syscall histogram: bucket `i` counts syscalls that moved
/// `2^i ..= 2^(i+1) - 1` datagrams (so 1, 2-3, 4-7, ..., 64-127, 128+).
pub const HISTOGRAM_BUCKETS: usize = 8;

/// A snapshot struct of plain `u64` counters, with its live atomic twin and the arithmetic
/// both need.
macro_rules! counters {
    (
        $(#[$meta:meta])*
        $name:ident / $live:ident / $kind:ident {
            $($(#[$fmeta:meta])* $field:ident = $variant:ident,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        #[non_exhaustive]
        pub struct $name {
            $($(#[$fmeta])* pub $field: u64,)*
        }

        impl $name {
            /// Counts accumulated since `earlier`.
            #[must_use]
            pub const fn since(&self, earlier: &Self) -> Self {
                Self { $($field: self.$field.saturating_sub(earlier.$field),)* }
            }

            /// Adds `other`'s counts to these.
            pub const fn add(&mut self, other: &Self) {
                $(self.$field += other.$field;)*
            }

            /// Every count added up.
            #[must_use]
            pub const fn total(&self) -> u64 {
                0 $(+ self.$field)*
            }
        }

        /// Which counter of
        #[doc = concat!("[`", stringify!($name), "`]")]
        /// to add to.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum $kind {
            $($variant,)*
        }

        #[derive(Debug, Default)]
        pub(crate) struct $live([AtomicU64; [$($kind::$variant),*].len()]);

        impl $live {
            pub(crate) fn add(&self, kind: $kind, n: u64) {
                if n > 0 {
                    self.0[kind as usize].fetch_add(n, Relaxed);
                }
            }

            fn snapshot(&self) -> $name {
                $name { $($field: self.0[$kind::$variant as usize].load(Relaxed),)* }
            }
        }
    };
}

counters! {
    /// Datagrams a send dropped, by the error the kernel gave for them twice in a row (once
    /// could have been an earlier datagram's pending error; see the crate's send policy), or
    /// by the last of eight errors in a row, none the same as the one before.
    TxDropped / LiveTxDropped / TxDrop {
        /// `EMSGSIZE`: too big for the path or the device (e.g. a PMTU probe).
        msg_size = MsgSize,
        /// `ENOBUFS`: the device queue was full; no writable wake-up would follow.
        no_buffers = NoBuffers,
        /// `ENETUNREACH`, `EHOSTUNREACH` and the like: no route.
        unreachable = Unreachable,
        /// Any other error (`EINVAL` for a bad source address, `EACCES`, ...).
        other = Other,
    }
}

counters! {
    /// Datagrams a receive dropped rather than hand up wrong.
    RxDropped / LiveRxDropped / RxDrop {
        /// Longer than the receive buffer (`MSG_TRUNC`); a GRO run counts its segments.
        truncated = Truncated,
        /// Their control messages did not fit (`MSG_CTRUNC`): the GRO segment size, ECN or
        /// destination address may be missing, so the slot is dropped whole.
        ctrunc = CTrunc,
        /// Zero-length datagrams, which no QUIC packet can be.
        empty = Empty,
        /// No usable source address.
        other = Other,
    }
}

counters! {
    /// Things that happened and cost no datagram.
    Events / LiveEvents / Event {
        /// `EINTR`, retried.
        interrupted = Interrupted,
        /// `EAGAIN`/`EWOULDBLOCK` returned to the caller.
        would_block = WouldBlock,
        /// Failed sends retried at once: a pending error of an earlier datagram costs the
        /// transmit that meets it nothing.
        retried = Retried,
        /// GSO runs the kernel refused and that were resent segment by segment.
        gso_fallbacks = GsoFallback,
        /// Errors a receive reported instead of data (a pending error), taken and passed over.
        recv_errors = RecvError,
    }
}

/// One direction's counters, as a snapshot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct DirectionStats {
    /// Syscalls that moved at least one datagram.
    pub syscalls: u64,
    /// Datagrams moved (GSO/GRO segments counted one by one).
    pub datagrams: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Datagrams that travelled inside a GSO (send) or GRO (receive) run of two or more.
    pub offload_segments: u64,
    /// Histogram of datagrams per syscall, see [`HISTOGRAM_BUCKETS`].
    pub per_syscall: [u64; HISTOGRAM_BUCKETS],
}

impl DirectionStats {
    /// Counts one syscall (or what stands for one, such as a receive from a queue) that moved
    /// `datagrams >= 1` datagrams of `bytes` in all, none of them in an offload run.
    pub fn count(&mut self, datagrams: usize, bytes: u64) {
        self.syscalls += 1;
        self.datagrams += datagrams as u64;
        self.bytes += bytes;
        self.per_syscall[bucket(datagrams)] += 1;
    }

    /// Mean datagrams per syscall (0 when nothing moved).
    #[must_use]
    pub fn datagrams_per_syscall(&self) -> f64 {
        if self.syscalls == 0 {
            0.0
        } else {
            #[expect(clippy::cast_precision_loss, reason = "a ratio for humans")]
            let r = self.datagrams as f64 / self.syscalls as f64;
            r
        }
    }

    /// Counters accumulated since `earlier`.
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            syscalls: self.syscalls.saturating_sub(earlier.syscalls),
            datagrams: self.datagrams.saturating_sub(earlier.datagrams),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            offload_segments: self
                .offload_segments
                .saturating_sub(earlier.offload_segments),
            per_syscall: std::array::from_fn(|i| {
                self.per_syscall[i].saturating_sub(earlier.per_syscall[i])
            }),
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Self) {
        self.syscalls += other.syscalls;
        self.datagrams += other.datagrams;
        self.bytes += other.bytes;
        self.offload_segments += other.offload_segments;
        for (a, b) in self.per_syscall.iter_mut().zip(other.per_syscall) {
            *a += b;
        }
    }

    /// Label of histogram bucket `i`, e.g. `"4-7"`.
    #[must_use]
    pub fn bucket_label(i: usize) -> String {
        let lo = 1u64 << i;
        if i + 1 == HISTOGRAM_BUCKETS {
            format!("{lo}+")
        } else if lo == 1 {
            "1".to_string()
        } else {
            format!("{lo}-{}", (lo << 1) - 1)
        }
    }
}

/// A snapshot of a socket's counters. Counters may be added: make one with
/// `Stats::default()` and set its fields.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Stats {
    /// Receive side.
    pub rx: DirectionStats,
    /// Send side.
    pub tx: DirectionStats,
    /// Datagrams the kernel dropped on this socket's receive queue (from `SO_RXQ_OVFL` or
    /// `SO_MEMINFO` on Linux; 0 where the platform does not say).
    pub kernel_drops: u64,
    /// Received datagrams dropped, by reason.
    pub rx_dropped: RxDropped,
    /// Datagrams handed in to send and dropped, by reason.
    pub tx_dropped: TxDropped,
    /// What happened without costing a datagram.
    pub events: Events,
}

impl Stats {
    /// Counters accumulated since `earlier` (kernel drops likewise as a difference).
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            rx: self.rx.since(&earlier.rx),
            tx: self.tx.since(&earlier.tx),
            kernel_drops: self.kernel_drops.saturating_sub(earlier.kernel_drops),
            rx_dropped: self.rx_dropped.since(&earlier.rx_dropped),
            tx_dropped: self.tx_dropped.since(&earlier.tx_dropped),
            events: self.events.since(&earlier.events),
        }
    }

    /// Adds another socket's counters to these (for endpoints with several sockets).
    pub fn accumulate(&mut self, other: &Self) {
        self.rx.add(&other.rx);
        self.tx.add(&other.tx);
        self.kernel_drops += other.kernel_drops;
        self.rx_dropped.add(&other.rx_dropped);
        self.tx_dropped.add(&other.tx_dropped);
        self.events.add(&other.events);
    }
}

impl fmt::Display for Stats {
    /// Three lines, e.g.
    /// `rx: 1000 datagrams in 40 syscalls (25.0/syscall), 1200000 bytes, 0 in GRO runs; ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, d, offload) in [("rx", &self.rx, "GRO"), ("tx", &self.tx, "GSO")] {
            write!(
                f,
                "{name}: {} datagrams in {} syscalls ({:.1}/syscall), {} bytes, {} in {offload} runs; per syscall:",
                d.datagrams,
                d.syscalls,
                d.datagrams_per_syscall(),
                d.bytes,
                d.offload_segments
            )?;
            for (i, n) in d.per_syscall.iter().enumerate() {
                if *n > 0 {
                    write!(f, " [{}]={n}", DirectionStats::bucket_label(i))?;
                }
            }
            writeln!(f)?;
        }
        let (r, t, e) = (&self.rx_dropped, &self.tx_dropped, &self.events);
        write!(
            f,
            "kernel drops {}; rx dropped: truncated={} ctrunc={} empty={} other={}; \
             tx dropped: msgsize={} nobufs={} unreachable={} other={}; \
             events: retried={} gso_fallbacks={} recv_errors={} would_block={} eintr={}",
            self.kernel_drops,
            r.truncated,
            r.ctrunc,
            r.empty,
            r.other,
            t.msg_size,
            t.no_buffers,
            t.unreachable,
            t.other,
            e.retried,
            e.gso_fallbacks,
            e.recv_errors,
            e.would_block,
            e.interrupted
        )
    }
}

/// The live counters of one direction.
#[derive(Debug, Default)]
pub(crate) struct DirectionCounters {
    syscalls: AtomicU64,
    datagrams: AtomicU64,
    bytes: AtomicU64,
    offload_segments: AtomicU64,
    per_syscall: [AtomicU64; HISTOGRAM_BUCKETS],
}

impl DirectionCounters {
    /// Records one syscall that moved `datagrams` datagrams and `bytes` bytes, of which
    /// `offload_segments` travelled in GSO/GRO runs.
    pub(crate) fn record(&self, datagrams: usize, bytes: usize, offload_segments: usize) {
        if datagrams == 0 {
            return;
        }
        self.syscalls.fetch_add(1, Relaxed);
        self.datagrams.fetch_add(datagrams as u64, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
        if offload_segments > 0 {
            self.offload_segments
                .fetch_add(offload_segments as u64, Relaxed);
        }
        self.per_syscall[bucket(datagrams)].fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> DirectionStats {
        DirectionStats {
            syscalls: self.syscalls.load(Relaxed),
            datagrams: self.datagrams.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            offload_segments: self.offload_segments.load(Relaxed),
            per_syscall: std::array::from_fn(|i| self.per_syscall[i].load(Relaxed)),
        }
    }
}

/// The live counters of a socket.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) rx: DirectionCounters,
    pub(crate) tx: DirectionCounters,
    pub(crate) rx_dropped: LiveRxDropped,
    pub(crate) tx_dropped: LiveTxDropped,
    pub(crate) events: LiveEvents,
    kernel_drops: AtomicU64,
}

impl Counters {
    pub(crate) fn event(&self, kind: Event) {
        self.events.add(kind, 1);
    }

    /// The kernel reports a cumulative drop count; keep the largest seen.
    pub(crate) fn observe_kernel_drops(&self, total: u64) {
        self.kernel_drops.fetch_max(total, Relaxed);
    }

    pub(crate) fn kernel_drops(&self) -> u64 {
        self.kernel_drops.load(Relaxed)
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            rx: self.rx.snapshot(),
            tx: self.tx.snapshot(),
            kernel_drops: self.kernel_drops.load(Relaxed),
            rx_dropped: self.rx_dropped.snapshot(),
            tx_dropped: self.tx_dropped.snapshot(),
            events: self.events.snapshot(),
        }
    }
}

/// Histogram bucket for a syscall that moved `n >= 1` datagrams.
fn bucket(n: usize) -> usize {
    (usize::BITS - 1 - n.max(1).leading_zeros()).min(HISTOGRAM_BUCKETS as u32 - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_is_one_syscall_in_its_bucket() {
        let mut d = DirectionStats::default();
        d.count(3, 30);
        d.count(128, 1000);
        assert_eq!((d.syscalls, d.datagrams, d.bytes), (2, 131, 1030));
        assert_eq!((d.per_syscall[1], d.per_syscall[7]), (1, 1));
        assert_eq!(d.offload_segments, 0);
    }

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(2), 1);
        assert_eq!(bucket(3), 1);
        assert_eq!(bucket(4), 2);
        assert_eq!(bucket(31), 4);
        assert_eq!(bucket(32), 5);
        assert_eq!(bucket(64), 6);
        assert_eq!(bucket(127), 6);
        assert_eq!(bucket(128), 7);
        assert_eq!(bucket(100_000), 7);
        assert_eq!(DirectionStats::bucket_label(0), "1");
        assert_eq!(DirectionStats::bucket_label(2), "4-7");
        assert_eq!(DirectionStats::bucket_label(7), "128+");
    }

    #[test]
    fn record_and_snapshot() {
        let c = Counters::default();
        c.rx.record(32, 3200, 0);
        c.rx.record(1, 100, 0);
        c.rx.record(0, 0, 0); // not a syscall that moved anything
        c.tx.record(10, 12_000, 10);
        c.tx_dropped.add(TxDrop::MsgSize, 3);
        c.rx_dropped.add(RxDrop::Truncated, 2);
        c.event(Event::Retried);
        c.observe_kernel_drops(5);
        c.observe_kernel_drops(3);
        let s = c.snapshot();
        assert_eq!(s.rx.syscalls, 2);
        assert_eq!(s.rx.datagrams, 33);
        assert_eq!(s.rx.per_syscall[5], 1);
        assert_eq!(s.rx.per_syscall[0], 1);
        assert!((s.rx.datagrams_per_syscall() - 16.5).abs() < 1e-9);
        assert_eq!(s.tx.offload_segments, 10);
        assert_eq!(s.tx_dropped.msg_size, 3);
        assert_eq!(s.tx_dropped.total(), 3);
        assert_eq!(s.rx_dropped.truncated, 2);
        assert_eq!(s.events.retried, 1);
        assert_eq!(s.kernel_drops, 5);
        let later = {
            c.rx.record(4, 400, 0);
            c.tx_dropped.add(TxDrop::Other, 1);
            c.snapshot()
        };
        let d = later.since(&s);
        assert_eq!(d.rx.datagrams, 4);
        assert_eq!(d.rx.syscalls, 1);
        assert_eq!(d.tx.datagrams, 0);
        assert_eq!(d.tx_dropped.total(), 1);
        let text = later.to_string();
        assert!(text.contains("rx: 37 datagrams in 3 syscalls"), "{text}");
        assert!(text.contains("msgsize=3"), "{text}");
        let mut sum = Stats::default();
        sum.accumulate(&later);
        sum.accumulate(&later);
        assert_eq!(sum.rx.datagrams, 74);
        assert_eq!(sum.tx_dropped.msg_size, 6);
        assert_eq!(sum.events.retried, 2);
    }

    /// With `serde`, every counter goes out under its field's name and comes back as it was.
    #[test]
    #[cfg(feature = "serde")]
    fn serde_round_trip_keeps_every_counter() {
        let c = Counters::default();
        c.rx.record(3, 3000, 3);
        c.tx.record(10, 12_000, 10);
        c.tx_dropped.add(TxDrop::MsgSize, 2);
        c.rx_dropped.add(RxDrop::CTrunc, 1);
        for _ in 0..4 {
            c.event(Event::WouldBlock);
        }
        c.observe_kernel_drops(7);
        let s = c.snapshot();
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(json["rx"]["datagrams"], 3, "{json}");
        assert_eq!(json["tx"]["offload_segments"], 10, "{json}");
        assert_eq!(json["tx_dropped"]["msg_size"], 2, "{json}");
        assert_eq!(json["rx_dropped"]["ctrunc"], 1, "{json}");
        assert_eq!(json["events"]["would_block"], 4, "{json}");
        assert_eq!(json["kernel_drops"], 7, "{json}");
        let back: Stats = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }
}
