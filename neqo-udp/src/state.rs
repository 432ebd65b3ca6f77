//! [`UdpSocketState`]: the runtime-free core of a socket: what it was configured with and what
//! the kernel supports, the send policy and the counters. It makes the syscalls on a socket
//! the caller owns and waits on however it likes (tokio, mio, a blocking thread).

use std::io;

use crate::{
    config::{Config, IoMode},
    error::{Refused, SetupError},
    recv::RecvBatch,
    send::{Class, SendPolicy, Sent, classify},
    stats::{Counters, Event, Stats},
    sys::{self, UdpSockRef},
    transmit::{MAX_UDP_PAYLOAD, Transmit},
};

/// What one [`UdpSocketState::recv`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecvSummary {
    /// Datagrams now waiting in the batch (GRO runs counted segment by segment).
    pub datagrams: usize,
    /// The kernel's cumulative count of datagrams it dropped on this socket.
    pub kernel_drops: u64,
}

/// Socket buffer sizes the kernel granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BufferSizes {
    /// `SO_RCVBUF` as the kernel reports it (Linux reports double what was asked, the other
    /// half being its bookkeeping allowance).
    pub recv: usize,
    /// `SO_SNDBUF`, likewise.
    pub send: usize,
}

/// The state of one UDP socket that moves batches of datagrams per syscall, without the
/// socket: every call takes a [`UdpSockRef`] to the socket it was made for.
///
/// The calls never wait. On a non-blocking socket they report `WouldBlock`; wait for
/// readiness in whatever event loop owns the socket and call again. ([`Socket`](crate::Socket)
/// does that for tokio.)
#[derive(Debug)]
pub struct UdpSocketState {
    platform: sys::Platform,
    config: Config,
    batch: usize,
    gro: bool,
    policy: SendPolicy,
    counters: Counters,
    buffers: BufferSizes,
}

/// Asks for a `size`-byte receive (`recv`) or send buffer, and past the kernel's cap with
/// the FORCE option where the cap stood in the way (Linux reports twice what it grants, half
/// being bookkeeping; elsewhere there is no forcing, and the call says so). Refusals are
/// logged, not failed: the caller reports what was granted.
fn request_buffer(
    sock: UdpSockRef<'_>,
    s: &socket2::SockRef<'_>,
    recv: bool,
    size: usize,
) -> Result<(), SetupError> {
    let (name, set) = if recv {
        ("SO_RCVBUF", s.set_recv_buffer_size(size))
    } else {
        ("SO_SNDBUF", s.set_send_buffer_size(size))
    };
    if let Err(e) = set {
        tracing::debug!("{name} {size}: {e}");
    }
    let granted = if recv {
        s.recv_buffer_size()
    } else {
        s.send_buffer_size()
    }
    .map_err(SetupError::of(Refused::Option(name)))?;
    if granted < 2 * size
        && let Err(e) = sys::force_buffer(sock, recv, size)
    {
        tracing::debug!("{name}FORCE {size}: {e}");
    }
    Ok(())
}

impl UdpSocketState {
    /// Configures `sock` (a bound, unconnected UDP socket) for `config`: socket buffers, the
    /// offloads the kernel supports, ECN and local-address reporting.
    ///
    /// What the kernel does not grant of the config is not an error: smaller socket buffers
    /// ([`buffer_sizes`](Self::buffer_sizes) says what they are), no GSO or GRO
    /// ([`max_gso_segments`](Self::max_gso_segments), [`gro_enabled`](Self::gro_enabled)).
    ///
    /// # Errors
    /// [`Refused::Connected`] for a connected socket; [`Refused::Option`] naming an option
    /// every socket needs (local address and ECN reporting, no fragmentation, no ICMP error
    /// reporting) that the kernel refused, or a buffer size it would not report;
    /// [`Refused::LocalAddr`] for a socket without one.
    pub fn new(sock: UdpSockRef<'_>, config: Config) -> Result<Self, SetupError> {
        let buffers = sock.with_socket2(|s| {
            // Ask for the configured buffers; the kernel caps them at rmem_max/wmem_max. Past
            // the cap only with CAP_NET_ADMIN (the FORCE options); we report what it granted
            // rather than fail.
            if let Some(size) = config.recv_buffer_size() {
                request_buffer(sock, s, true, size)?;
            }
            if let Some(size) = config.send_buffer_size() {
                request_buffer(sock, s, false, size)?;
            }
            Ok(BufferSizes {
                recv: s
                    .recv_buffer_size()
                    .map_err(SetupError::of(Refused::Option("SO_RCVBUF")))?,
                send: s
                    .send_buffer_size()
                    .map_err(SetupError::of(Refused::Option("SO_SNDBUF")))?,
            })
        })?;
        let (platform, caps) = sys::new_platform(sock, &config)?;
        let batch = config.batch_size();
        Ok(Self {
            platform,
            batch,
            gro: caps.gro,
            policy: SendPolicy::new(batch, caps.gso_segments),
            counters: Counters::default(),
            buffers,
            config,
        })
    }

    /// The configuration the socket was made with.
    #[must_use]
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// Batched or single.
    #[must_use]
    pub const fn mode(&self) -> IoMode {
        self.config.mode()
    }

    /// Datagram buffers per receive and messages per send syscall (1 in single mode).
    #[must_use]
    pub const fn batch_size(&self) -> usize {
        self.batch
    }

    /// Socket buffer sizes the kernel granted.
    #[must_use]
    pub const fn buffer_sizes(&self) -> BufferSizes {
        self.buffers
    }

    /// Most segments one message may carry: 1 when GSO is off, unsupported, or was found
    /// broken at run time. Longer transmits are fine: the socket cuts them.
    #[must_use]
    pub fn max_gso_segments(&self) -> usize {
        self.policy.gso_segments()
    }

    /// Most segments of `segment_size` bytes one message may carry, so that the whole run
    /// stays within [`MAX_UDP_PAYLOAD`] (64 x 1200 bytes would not: 54 do). A transmit of
    /// this many segments goes in one message.
    #[must_use]
    pub fn max_segments_for(&self, segment_size: usize) -> usize {
        self.max_gso_segments()
            .min(MAX_UDP_PAYLOAD / segment_size.max(1))
            .max(1)
    }

    /// Whether the kernel coalesces received datagrams into GRO runs for us.
    #[must_use]
    pub const fn gro_enabled(&self) -> bool {
        self.gro
    }

    /// Buffers sized for this socket's batches.
    #[must_use]
    pub fn recv_batch(&self) -> RecvBatch {
        RecvBatch::new(&self.config)
    }

    /// Receives one batch with at most one syscall (`EINTR` aside) into `batch`, whose
    /// [`datagrams`](RecvBatch::datagrams) then yields them. Truncated, empty and otherwise
    /// unusable datagrams are counted and skipped. An error the kernel reports instead of
    /// data (a pending one, not this socket's end) is counted and yields an empty batch.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is queued; other errors only for a broken socket.
    pub fn recv(&self, sock: UdpSockRef<'_>, batch: &mut RecvBatch) -> io::Result<RecvSummary> {
        let batched = self.config.mode() == IoMode::Batched;
        let max = if batched { self.batch } else { 1 };
        let received = loop {
            let (slots, meta) = batch.prepare(max);
            match sys::recv(&self.platform, sock, slots, meta, batched) {
                Ok(r) => break r,
                Err(e) => match classify(&e) {
                    Class::Interrupted => self.counters.event(Event::Interrupted),
                    Class::WouldBlock | Class::Fatal => return Err(e),
                    Class::Failed { .. } => {
                        tracing::debug!("error instead of data on receive: {e}");
                        self.counters.event(Event::RecvError);
                        batch.set_filled(0);
                        return Ok(self.summary(0));
                    }
                },
            }
        };
        let (mut datagrams, mut bytes, mut offload) = (0, 0, 0);
        for meta in &batch.meta[..received.filled] {
            if let Some((why, count)) = meta.dropped {
                self.counters.rx_dropped.add(why, count as u64);
            } else {
                let segments = crate::transmit::datagrams_in(meta.len, meta.stride);
                datagrams += segments;
                bytes += meta.len;
                if segments > 1 {
                    offload += segments;
                }
            }
        }
        batch.set_filled(received.filled);
        self.counters.rx.record(datagrams, bytes, offload);
        if let Some(drops) = received.kernel_drops {
            self.counters.observe_kernel_drops(drops);
        }
        Ok(self.summary(datagrams))
    }

    fn summary(&self, datagrams: usize) -> RecvSummary {
        RecvSummary {
            datagrams,
            kernel_drops: self.counters.kernel_drops(),
        }
    }

    /// Sends `transmits`, up to `batch_size` messages per syscall (`sendmmsg`), each with its
    /// own destination, ECN, source IP and GSO segment size, until all are finished or the
    /// kernel says `WouldBlock`. See [`Sent`] for what to do with the rest.
    ///
    /// Runs longer than one message may carry ([`max_segments_for`](Self::max_segments_for))
    /// are cut into several. What an error means:
    ///
    /// | error | action |
    /// |---|---|
    /// | `EINTR` | retry |
    /// | `EAGAIN` | stop and report how far the send got, or `WouldBlock` if nowhere |
    /// | `EBADF`, `ENOTSOCK`, `EFAULT` | return the error: the socket is unusable |
    /// | anything else, once | retry at once: it may be a pending error of an earlier datagram, which this failure consumed |
    /// | the same error twice in a row | the message's own: drop its datagrams, counted in [`Stats::tx_dropped`](crate::Stats::tx_dropped) by reason |
    /// | `EIO`/`EINVAL` twice on a GSO run | resend the run segment by segment; only if a full-size segment then goes out was GSO at fault, and GSO is off for the socket from then on |
    /// | never the same error twice in a row, eight times | a GSO run that met `EIO`/`EINVAL` among them: resend it segment by segment, as above; anything else: drop it, counted under the last error's reason |
    ///
    /// The bound of eight is there so that a send always ends: pending errors arriving
    /// between the retries may keep a message's own error from coming twice in a row, and a
    /// GSO run is then split rather than dropped, as its own error may have been GSO's. Every
    /// datagram handed in is sent, dropped and counted, or left for the caller: never lost
    /// silently, never sent twice.
    ///
    /// # Errors
    /// `WouldBlock` when nothing was finished; other errors only for a broken socket.
    pub fn send(&self, sock: UdpSockRef<'_>, transmits: &[Transmit<&[u8]>]) -> io::Result<Sent> {
        let batched = self.config.mode() == IoMode::Batched;
        self.policy.send(&self.counters, transmits, |messages| {
            sys::send(&self.platform, sock, messages, batched)
        })
    }

    /// A snapshot of the counters, with the kernel's drop count refreshed from `sock`.
    #[must_use]
    pub fn stats(&self, sock: UdpSockRef<'_>) -> Stats {
        if let Ok(drops) = sys::kernel_drops(sock) {
            self.counters.observe_kernel_drops(drops);
        }
        self.counters.snapshot()
    }
}
