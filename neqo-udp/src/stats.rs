//! Counters of what a socket did, always on: relaxed atomic adds, a few per syscall.

use std::{
    fmt,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

/// Buckets of the datagrams-per-syscall histogram: bucket `i` counts syscalls that moved
/// `2^i ..= 2^(i+1) - 1` datagrams (so 1, 2-3, 4-7, ..., 64-127, 128+).
pub const HISTOGRAM_BUCKETS: usize = 8;

/// Errors and anomalies, by kind. Each is something a caller may want to see in a report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCounts {
    /// `EINTR`, retried.
    pub interrupted: u64,
    /// `EAGAIN`/`EWOULDBLOCK` returned to the caller.
    pub would_block: u64,
    /// Transmits dropped because the kernel said `EMSGSIZE` (too big for the path, e.g. a
    /// PMTU probe).
    pub msg_size: u64,
    /// Transmits dropped because the kernel said `ENOBUFS` (no writable wake-up would follow).
    pub no_buffers: u64,
    /// GSO sends that failed with `EIO`/`EINVAL` and were resent as separate datagrams; after
    /// the first, GSO is off for the socket.
    pub gso_fallback: u64,
    /// ICMP-driven errors reported by the kernel (port/host/network unreachable, ...).
    pub icmp: u64,
    /// Received datagrams longer than their buffer (`MSG_TRUNC`), dropped.
    pub truncated: u64,
    /// Received datagrams of zero length, skipped.
    pub empty: u64,
    /// Transmits dropped after an unexpected error repeated on the same transmit.
    pub send_dropped_other: u64,
    /// Other errors seen (and returned or retried).
    pub other: u64,
}

impl ErrorCounts {
    /// Sum of all error counters except the benign `would_block` and `interrupted`.
    #[must_use]
    pub const fn serious(&self) -> u64 {
        self.msg_size
            + self.no_buffers
            + self.gso_fallback
            + self.icmp
            + self.truncated
            + self.empty
            + self.send_dropped_other
            + self.other
    }
}

/// One direction's counters, as a snapshot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
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
        let mut per_syscall = [0; HISTOGRAM_BUCKETS];
        for (i, b) in per_syscall.iter_mut().enumerate() {
            *b = self.per_syscall[i].saturating_sub(earlier.per_syscall[i]);
        }
        Self {
            syscalls: self.syscalls.saturating_sub(earlier.syscalls),
            datagrams: self.datagrams.saturating_sub(earlier.datagrams),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            offload_segments: self
                .offload_segments
                .saturating_sub(earlier.offload_segments),
            per_syscall,
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

/// A snapshot of a socket's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Receive side.
    pub rx: DirectionStats,
    /// Send side.
    pub tx: DirectionStats,
    /// Datagrams the kernel dropped on this socket's receive queue (from `SO_RXQ_OVFL` or
    /// `SO_MEMINFO` on Linux; 0 where the platform does not say).
    pub kernel_drops: u64,
    /// Errors by kind.
    pub errors: ErrorCounts,
}

impl Stats {
    /// Counters accumulated since `earlier` (kernel drops likewise as a difference).
    #[must_use]
    pub fn since(&self, earlier: &Self) -> Self {
        let e = &self.errors;
        let o = &earlier.errors;
        Self {
            rx: self.rx.since(&earlier.rx),
            tx: self.tx.since(&earlier.tx),
            kernel_drops: self.kernel_drops.saturating_sub(earlier.kernel_drops),
            errors: ErrorCounts {
                interrupted: e.interrupted.saturating_sub(o.interrupted),
                would_block: e.would_block.saturating_sub(o.would_block),
                msg_size: e.msg_size.saturating_sub(o.msg_size),
                no_buffers: e.no_buffers.saturating_sub(o.no_buffers),
                gso_fallback: e.gso_fallback.saturating_sub(o.gso_fallback),
                icmp: e.icmp.saturating_sub(o.icmp),
                truncated: e.truncated.saturating_sub(o.truncated),
                empty: e.empty.saturating_sub(o.empty),
                send_dropped_other: e.send_dropped_other.saturating_sub(o.send_dropped_other),
                other: e.other.saturating_sub(o.other),
            },
        }
    }

    /// Adds another socket's counters to these (for endpoints with several sockets).
    pub fn accumulate(&mut self, other: &Self) {
        for (mine, theirs) in [(&mut self.rx, &other.rx), (&mut self.tx, &other.tx)] {
            mine.syscalls += theirs.syscalls;
            mine.datagrams += theirs.datagrams;
            mine.bytes += theirs.bytes;
            mine.offload_segments += theirs.offload_segments;
            for (a, b) in mine.per_syscall.iter_mut().zip(theirs.per_syscall) {
                *a += b;
            }
        }
        self.kernel_drops += other.kernel_drops;
        let e = &mut self.errors;
        let o = &other.errors;
        e.interrupted += o.interrupted;
        e.would_block += o.would_block;
        e.msg_size += o.msg_size;
        e.no_buffers += o.no_buffers;
        e.gso_fallback += o.gso_fallback;
        e.icmp += o.icmp;
        e.truncated += o.truncated;
        e.empty += o.empty;
        e.send_dropped_other += o.send_dropped_other;
        e.other += o.other;
    }
}

impl fmt::Display for Stats {
    /// Two lines, e.g.
    /// `rx: 1000 datagrams in 40 syscalls (25.0/syscall), 1200000 bytes, 0 in GRO runs`.
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
        let e = &self.errors;
        write!(
            f,
            "kernel drops: {}; errors: msgsize={} nobufs={} gso_fallback={} icmp={} truncated={} empty={} dropped_other={} other={} (would_block={} eintr={})",
            self.kernel_drops,
            e.msg_size,
            e.no_buffers,
            e.gso_fallback,
            e.icmp,
            e.truncated,
            e.empty,
            e.send_dropped_other,
            e.other,
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
        let mut per_syscall = [0; HISTOGRAM_BUCKETS];
        for (out, c) in per_syscall.iter_mut().zip(&self.per_syscall) {
            *out = c.load(Relaxed);
        }
        DirectionStats {
            syscalls: self.syscalls.load(Relaxed),
            datagrams: self.datagrams.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            offload_segments: self.offload_segments.load(Relaxed),
            per_syscall,
        }
    }
}

/// Which error counter to bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    Interrupted,
    WouldBlock,
    MsgSize,
    NoBuffers,
    GsoFallback,
    Icmp,
    Truncated,
    Empty,
    SendDroppedOther,
    Other,
}

/// The live counters of a socket.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) rx: DirectionCounters,
    pub(crate) tx: DirectionCounters,
    kernel_drops: AtomicU64,
    errors: [AtomicU64; 10],
}

impl Counters {
    pub(crate) fn error(&self, kind: ErrorKind) {
        self.error_n(kind, 1);
    }

    pub(crate) fn error_n(&self, kind: ErrorKind, n: u64) {
        self.errors[kind as usize].fetch_add(n, Relaxed);
    }

    /// The kernel reports a cumulative drop count; keep the largest seen.
    pub(crate) fn observe_kernel_drops(&self, total: u64) {
        self.kernel_drops.fetch_max(total, Relaxed);
    }

    pub(crate) fn kernel_drops(&self) -> u64 {
        self.kernel_drops.load(Relaxed)
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let e = |k: ErrorKind| self.errors[k as usize].load(Relaxed);
        Stats {
            rx: self.rx.snapshot(),
            tx: self.tx.snapshot(),
            kernel_drops: self.kernel_drops.load(Relaxed),
            errors: ErrorCounts {
                interrupted: e(ErrorKind::Interrupted),
                would_block: e(ErrorKind::WouldBlock),
                msg_size: e(ErrorKind::MsgSize),
                no_buffers: e(ErrorKind::NoBuffers),
                gso_fallback: e(ErrorKind::GsoFallback),
                icmp: e(ErrorKind::Icmp),
                truncated: e(ErrorKind::Truncated),
                empty: e(ErrorKind::Empty),
                send_dropped_other: e(ErrorKind::SendDroppedOther),
                other: e(ErrorKind::Other),
            },
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
        c.error(ErrorKind::MsgSize);
        c.observe_kernel_drops(5);
        c.observe_kernel_drops(3);
        let s = c.snapshot();
        assert_eq!(s.rx.syscalls, 2);
        assert_eq!(s.rx.datagrams, 33);
        assert_eq!(s.rx.per_syscall[5], 1);
        assert_eq!(s.rx.per_syscall[0], 1);
        assert!((s.rx.datagrams_per_syscall() - 16.5).abs() < 1e-9);
        assert_eq!(s.tx.offload_segments, 10);
        assert_eq!(s.errors.msg_size, 1);
        assert_eq!(s.kernel_drops, 5);
        let later = {
            c.rx.record(4, 400, 0);
            c.snapshot()
        };
        let d = later.since(&s);
        assert_eq!(d.rx.datagrams, 4);
        assert_eq!(d.rx.syscalls, 1);
        assert_eq!(d.tx.datagrams, 0);
        let text = later.to_string();
        assert!(text.contains("rx: 37 datagrams in 3 syscalls"), "{text}");
        let mut sum = Stats::default();
        sum.accumulate(&later);
        sum.accumulate(&later);
        assert_eq!(sum.rx.datagrams, 74);
        assert_eq!(sum.errors.msg_size, 2);
    }
}
