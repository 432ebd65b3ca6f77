//! What a [`Socket`](crate::Socket) is asked to do.

use std::{error::Error, fmt, str::FromStr};

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

/// Most sockets one `SO_REUSEPORT` group may have: the worker byte has 256 values, so a
/// larger group would have sockets that steering never picks.
pub const MAX_GROUP_SOCKETS: usize = 256;

/// Whether a socket batches datagrams or moves one per syscall.
///
/// There is no io_uring mode: one was built, measured slower than `Batched` and removed
/// (`docs/records/io_uring.md` in the repository has the figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
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
    type Err = ParseIoModeError;

    /// A mode by its name ([`as_str`](Self::as_str)), in any case; `batch` is `batched`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "batched" | "batch" => Ok(Self::Batched),
            "single" => Ok(Self::Single),
            _ => Err(ParseIoModeError {
                input: s.to_owned(),
            }),
        }
    }
}

/// A name that is no [`IoMode`]'s. `Display` names it and the valid modes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseIoModeError {
    input: String,
}

impl ParseIoModeError {
    /// What was parsed.
    #[must_use]
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for ParseIoModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown I/O mode {:?} (expected {} or {})",
            self.input.to_ascii_lowercase(),
            IoMode::Batched,
            IoMode::Single
        )
    }
}

impl Error for ParseIoModeError {}

/// What the buffer of a received [`Datagram`](crate::Datagram) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
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

/// Socket configuration: [`Config::default`] and the `with_` setters, each named after the
/// getter of what it sets.
///
/// ```
/// use neqo_udp::{Config, IoMode, RecvBuffers};
/// let config = Config::default()
///     .with_batch_size(16)
///     .with_gro(false)
///     .with_recv_buffers(RecvBuffers::SharedRuns);
/// assert_eq!(config.batch_size(), 16);
/// assert!(config.gso() && !config.gro());
/// assert_eq!(config.mode(), IoMode::Batched);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    batch_size: usize,
    gso: bool,
    gro: bool,
    mode: IoMode,
    recv_buffer_size: Option<usize>,
    send_buffer_size: Option<usize>,
    recv_buffers: RecvBuffers,
}

impl Default for Config {
    /// Batched, [`DEFAULT_BATCH_SIZE`] datagrams per syscall, GSO and GRO where the kernel
    /// has them, [`DEFAULT_SOCKET_BUFFER`] both ways, received datagrams in allocations of
    /// their own ([`RecvBuffers::Own`]).
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
    /// Datagram buffers per receive syscall and messages per send syscall in
    /// [`IoMode::Batched`], clamped to `1..=MAX_BATCH_SIZE` ([`batch_size`](Self::batch_size)
    /// says what is used).
    #[must_use]
    pub const fn with_batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Whether to use UDP generic segmentation offload on send (Linux `UDP_SEGMENT`).
    #[must_use]
    pub const fn with_gso(mut self, gso: bool) -> Self {
        self.gso = gso;
        self
    }

    /// Whether to use UDP generic receive offload (Linux `UDP_GRO`).
    #[must_use]
    pub const fn with_gro(mut self, gro: bool) -> Self {
        self.gro = gro;
        self
    }

    /// Batched or one datagram per syscall. `Single` implies a batch of one, no GSO and no
    /// GRO, whatever was set for them.
    #[must_use]
    pub const fn with_mode(mut self, mode: IoMode) -> Self {
        self.mode = mode;
        self
    }

    /// `SO_RCVBUF` to ask for; `None` keeps the kernel's default. Where the kernel caps it
    /// (Linux: `net.core.rmem_max`), `SO_RCVBUFFORCE` asks past the cap, which takes
    /// `CAP_NET_ADMIN`; without it the capped size stands ([`BufferSizes`](crate::BufferSizes)
    /// says what was granted).
    #[must_use]
    pub const fn with_recv_buffer_size(mut self, size: Option<usize>) -> Self {
        self.recv_buffer_size = size;
        self
    }

    /// `SO_SNDBUF` to ask for; `None` keeps the kernel's default; past `wmem_max` as for
    /// [`with_recv_buffer_size`](Self::with_recv_buffer_size).
    #[must_use]
    pub const fn with_send_buffer_size(mut self, size: Option<usize>) -> Self {
        self.send_buffer_size = size;
        self
    }

    /// Whether received datagrams get allocations of their own or share their GRO run's.
    #[must_use]
    pub const fn with_recv_buffers(mut self, recv_buffers: RecvBuffers) -> Self {
        self.recv_buffers = recv_buffers;
        self
    }

    /// Datagram buffers per receive and messages per send syscall: as set, within
    /// `1..=MAX_BATCH_SIZE`; 1 in [`IoMode::Single`].
    #[must_use]
    pub fn batch_size(&self) -> usize {
        match self.mode {
            IoMode::Single => 1,
            IoMode::Batched => self.batch_size.clamp(1, MAX_BATCH_SIZE),
        }
    }

    /// Whether GSO is to be used where the kernel has it: set, and [`IoMode::Batched`].
    #[must_use]
    pub fn gso(&self) -> bool {
        self.gso && self.mode == IoMode::Batched
    }

    /// Whether GRO is to be used where the kernel has it: set, and [`IoMode::Batched`].
    #[must_use]
    pub fn gro(&self) -> bool {
        self.gro && self.mode == IoMode::Batched
    }

    /// Batched or one datagram per syscall.
    #[must_use]
    pub const fn mode(&self) -> IoMode {
        self.mode
    }

    /// `SO_RCVBUF` asked for, if any.
    #[must_use]
    pub const fn recv_buffer_size(&self) -> Option<usize> {
        self.recv_buffer_size
    }

    /// `SO_SNDBUF` asked for, if any.
    #[must_use]
    pub const fn send_buffer_size(&self) -> Option<usize> {
        self.send_buffer_size
    }

    /// What the buffers of received datagrams are.
    #[must_use]
    pub const fn recv_buffers(&self) -> RecvBuffers {
        self.recv_buffers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_mode_disables_batching_and_offloads() {
        let c = Config::default().with_mode(IoMode::Single);
        assert_eq!(c.batch_size(), 1);
        assert!(!c.gso());
        assert!(!c.gro());
        let b = Config::default();
        assert_eq!(b.batch_size(), DEFAULT_BATCH_SIZE);
        assert!(b.gso() && b.gro());
        assert_eq!(
            c.with_mode(IoMode::Batched),
            b,
            "the batch and offloads set are kept"
        );
    }

    #[test]
    fn batch_size_is_clamped() {
        let c = Config::default().with_batch_size(0);
        assert_eq!(c.batch_size(), 1);
        let c = c.with_batch_size(10_000);
        assert_eq!(c.batch_size(), MAX_BATCH_SIZE);
    }

    /// Each setter sets its own field and no other.
    #[test]
    fn setters_set_what_their_getters_read() {
        let d = Config::default();
        let c = d
            .clone()
            .with_batch_size(7)
            .with_gso(false)
            .with_gro(false)
            .with_recv_buffer_size(None)
            .with_send_buffer_size(Some(1 << 16))
            .with_recv_buffers(RecvBuffers::SharedRuns);
        assert_eq!(c.batch_size(), 7);
        assert!(!c.gso() && !c.gro());
        assert_eq!(c.mode(), IoMode::Batched);
        assert_eq!(d.clone().with_mode(IoMode::Single).mode(), IoMode::Single);
        assert_eq!(c.recv_buffer_size(), None);
        assert_eq!(c.send_buffer_size(), Some(1 << 16));
        assert_eq!(c.recv_buffers(), RecvBuffers::SharedRuns);
        assert_eq!(
            (d.batch_size(), d.gso(), d.gro(), d.mode()),
            (DEFAULT_BATCH_SIZE, true, true, IoMode::Batched)
        );
        assert_eq!(d.recv_buffer_size(), Some(DEFAULT_SOCKET_BUFFER));
        assert_eq!(d.send_buffer_size(), Some(DEFAULT_SOCKET_BUFFER));
        assert_eq!(d.recv_buffers(), RecvBuffers::Own);
        assert_eq!(Config::default().with_gso(false).with_gso(true), d);
    }

    #[test]
    fn io_mode_parses_and_prints() {
        assert_eq!("batched".parse::<IoMode>(), Ok(IoMode::Batched));
        assert_eq!("Single".parse::<IoMode>(), Ok(IoMode::Single));
        let e = "Fast".parse::<IoMode>().unwrap_err();
        assert_eq!(e.input(), "Fast");
        assert_eq!(
            e.to_string(),
            r#"unknown I/O mode "fast" (expected batched or single)"#
        );
        assert_eq!(IoMode::Single.to_string(), "single");
        // io_uring was a mode until it was removed (docs/records/io_uring.md): refused by name now.
        for gone in ["uring", "io_uring"] {
            let e = gone.parse::<IoMode>().unwrap_err().to_string();
            assert!(e.contains(gone) && e.contains("batched or single"), "{e}");
        }
    }
}
