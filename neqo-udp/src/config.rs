//! What a [`Socket`](crate::Socket) is asked to do.

use std::{fmt, str::FromStr};

/// How many datagrams one syscall may carry at most, whatever the config says.
///
/// `sendmmsg`/`recvmmsg` accept up to `UIO_MAXIOV` (1024) messages; beyond a few dozen the
/// gain is nil and the per-call scratch (headers, addresses, control buffers, all on the
/// stack) only grows.
pub const MAX_BATCH_SIZE: usize = 128;

/// The default number of datagram buffers (receive) or messages (send) per syscall.
pub const DEFAULT_BATCH_SIZE: usize = 32;

/// Largest UDP payload a receive slot must hold without truncation: a GRO run is at most
/// 64 segments and never more than 64 KiB (the kernel's GRO size limit), and a plain
/// datagram is at most 65 535 bytes.
pub const RECV_SLOT_SIZE: usize = 1 << 16;

/// The default socket buffer size requested from the kernel, both directions.
///
/// Large enough to absorb a full batch of 64 KiB GSO transmits; the kernel may grant less
/// (`net.core.rmem_max`/`wmem_max`), which [`Socket::buffer_sizes`](crate::Socket::buffer_sizes)
/// reports.
pub const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;

/// Whether a socket batches datagrams or moves one per syscall.
///
/// There is no io_uring mode: one was built, measured slower than `Batched` and removed
/// (`docs/io_uring.md` in the repository has the figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// Many datagrams per syscall: `recvmmsg`/`sendmmsg` (Linux), `recvmsg_x`/`sendmsg_x`
    /// (Apple), plus GSO/GRO where enabled.
    #[default]
    Batched,
    /// One datagram per syscall (`recvmsg`/`sendmsg`), no GSO and no GRO: the baseline.
    Single,
}

impl IoMode {
    /// The name used on command lines and in reports.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Batched => "batched",
            Self::Single => "single",
        }
    }
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IoMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "batched" | "batch" => Ok(Self::Batched),
            "single" => Ok(Self::Single),
            other => Err(format!(
                "unknown I/O mode {other:?} (expected batched or single)"
            )),
        }
    }
}

/// What the buffer of a received [`Datagram`](crate::Datagram) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecvBuffers {
    /// Each datagram in an allocation of its own size, so that whatever a QUIC stack keeps of
    /// it (data behind a gap, queued packets) costs what the stack counts. One copy per
    /// byte more than [`SharedRuns`](Self::SharedRuns). For a server, or any receiver whose
    /// peers may be hostile.
    #[default]
    Own,
    /// The datagrams of a GRO run longer than 4 KiB share the 64 KiB receive slot it arrived
    /// in, cut from it without a copy; shorter ones are copied. A datagram kept pins its
    /// whole slot, so a peer that makes the stack keep one datagram of each run makes it hold
    /// up to 54 times what it counts: for a receiver that trusts its peer (a client of a
    /// server it chose) or drops every datagram at once.
    SharedRuns,
}

/// Socket configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Datagram buffers per receive syscall and messages per send syscall in
    /// [`IoMode::Batched`]; clamped to `1..=MAX_BATCH_SIZE`.
    pub batch_size: usize,
    /// Use UDP generic segmentation offload on send (Linux `UDP_SEGMENT`).
    pub gso: bool,
    /// Use UDP generic receive offload (Linux `UDP_GRO`).
    pub gro: bool,
    /// Batched or one datagram per syscall. `Single` implies no GSO and no GRO.
    pub mode: IoMode,
    /// `SO_RCVBUF` to ask for; `None` keeps the kernel's default. Where the kernel caps it
    /// (Linux: `net.core.rmem_max`), `SO_RCVBUFFORCE` asks past the cap, which takes
    /// `CAP_NET_ADMIN`; without it the capped size stands ([`BufferSizes`](crate::BufferSizes)
    /// says what was granted).
    pub recv_buffer_size: Option<usize>,
    /// `SO_SNDBUF` to ask for; `None` keeps the kernel's default; past `wmem_max` as for
    /// `recv_buffer_size`.
    pub send_buffer_size: Option<usize>,
    /// Whether received datagrams get allocations of their own or share their GRO run's.
    pub recv_buffers: RecvBuffers,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            gso: true,
            gro: true,
            mode: IoMode::Batched,
            recv_buffer_size: Some(DEFAULT_SOCKET_BUFFER),
            send_buffer_size: Some(DEFAULT_SOCKET_BUFFER),
            recv_buffers: RecvBuffers::Own,
        }
    }
}

impl Config {
    /// The default configuration in the given mode.
    #[must_use]
    pub fn with_mode(mode: IoMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// Datagrams per syscall this config allows: 1 in `Single` mode.
    #[must_use]
    pub fn effective_batch_size(&self) -> usize {
        match self.mode {
            IoMode::Single => 1,
            IoMode::Batched => self.batch_size.clamp(1, MAX_BATCH_SIZE),
        }
    }

    /// Whether GSO is wanted (it may still be unsupported by the kernel).
    #[must_use]
    pub fn wants_gso(&self) -> bool {
        self.gso && self.mode == IoMode::Batched
    }

    /// Whether GRO is wanted (it may still be unsupported by the kernel).
    #[must_use]
    pub fn wants_gro(&self) -> bool {
        self.gro && self.mode == IoMode::Batched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_mode_disables_batching_and_offloads() {
        let c = Config::with_mode(IoMode::Single);
        assert_eq!(c.effective_batch_size(), 1);
        assert!(!c.wants_gso());
        assert!(!c.wants_gro());
        let b = Config::default();
        assert_eq!(b.effective_batch_size(), DEFAULT_BATCH_SIZE);
        assert!(b.wants_gso() && b.wants_gro());
    }

    #[test]
    fn batch_size_is_clamped() {
        let mut c = Config {
            batch_size: 0,
            ..Config::default()
        };
        assert_eq!(c.effective_batch_size(), 1);
        c.batch_size = 10_000;
        assert_eq!(c.effective_batch_size(), MAX_BATCH_SIZE);
    }

    #[test]
    fn io_mode_parses_and_prints() {
        assert_eq!("batched".parse::<IoMode>(), Ok(IoMode::Batched));
        assert_eq!("Single".parse::<IoMode>(), Ok(IoMode::Single));
        assert!("fast".parse::<IoMode>().unwrap_err().contains("fast"));
        assert_eq!(IoMode::Single.to_string(), "single");
        // io_uring was a mode until it was removed (docs/io_uring.md): refused by name now.
        for gone in ["uring", "io_uring"] {
            let e = gone.parse::<IoMode>().unwrap_err();
            assert!(e.contains(gone) && e.contains("batched or single"), "{e}");
        }
    }
}
