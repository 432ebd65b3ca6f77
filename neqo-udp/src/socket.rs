//! [`Socket`]: a non-blocking UDP socket that moves batches of datagrams per syscall.

use std::{
    collections::VecDeque,
    io,
    net::SocketAddr,
    sync::{Mutex, PoisonError, atomic::Ordering::Relaxed},
    task::{Context, Poll},
};

use quinn_udp::Transmit;
use socket2::{Domain, Protocol, Type};
use tokio::io::Interest;

use crate::{
    config::{Config, IoMode},
    recv::{RecvBatch, segment_lengths},
    send::{Owned, SendCall, SendError, SendPolicy, classify},
    stats::{Counters, ErrorKind, Stats},
    sys,
};

/// Largest UDP payload that fits any IP version this socket may use: IPv4's 65 535 minus the
/// 20-byte IP and 8-byte UDP headers. (IPv6 allows 65 527; a dual-stack socket may send both.)
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// What one [`Socket::recv`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvSummary {
    /// Datagrams now waiting in the batch (GRO runs counted segment by segment).
    pub datagrams: usize,
    /// The kernel's cumulative count of datagrams it dropped on this socket.
    pub kernel_drops: u64,
}

/// Socket buffer sizes the kernel granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSizes {
    /// `SO_RCVBUF` as the kernel reports it (Linux reports double what was asked, the other
    /// half being its bookkeeping allowance).
    pub recv: usize,
    /// `SO_SNDBUF`, likewise.
    pub send: usize,
}

/// A UDP socket that hands the kernel up to `batch_size` datagrams per syscall.
///
/// Built for one task driving it (a QUIC endpoint), though every method takes `&self` and the
/// socket is `Sync`, so a relay may share it. Must be created inside a tokio runtime, whose
/// reactor it registers with.
#[derive(Debug)]
pub struct Socket {
    io: tokio::net::UdpSocket,
    platform: sys::Platform,
    config: Config,
    batch: usize,
    gro: bool,
    policy: SendPolicy,
    counters: Counters,
    backlog: Mutex<VecDeque<Owned>>,
    buffers: BufferSizes,
}

fn with_context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Socket {
    /// Binds a socket to `addr`. Bound to `[::]` it is dual-stack (IPv4 peers appear as
    /// v4-mapped IPv6 addresses).
    ///
    /// # Errors
    /// The bind error (`AddrInUse`, ...) with the address in its message, or a failure to set
    /// the socket options the config needs.
    pub fn bind(addr: SocketAddr, config: Config) -> io::Result<Self> {
        let sock =
            socket2::Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
                .map_err(|e| with_context(e, "creating UDP socket"))?;
        if let SocketAddr::V6(v6) = addr
            && v6.ip().is_unspecified()
        {
            sock.set_only_v6(false)
                .map_err(|e| with_context(e, "making the socket dual-stack"))?;
        }
        sock.bind(&addr.into())
            .map_err(|e| with_context(e, format_args!("binding UDP {addr}")))?;
        Self::from_std(sock.into(), config)
    }

    /// Takes over an already bound std socket (made non-blocking here).
    ///
    /// # Errors
    /// When the socket cannot be configured or registered with the runtime.
    pub fn from_std(sock: std::net::UdpSocket, config: Config) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        let s2 = socket2::SockRef::from(&sock);
        // Ask for the configured buffers; the kernel caps them at rmem_max/wmem_max, and we
        // report what it granted rather than fail.
        if let Some(size) = config.recv_buffer_size
            && let Err(e) = s2.set_recv_buffer_size(size)
        {
            tracing::debug!("SO_RCVBUF {size}: {e}");
        }
        if let Some(size) = config.send_buffer_size
            && let Err(e) = s2.set_send_buffer_size(size)
        {
            tracing::debug!("SO_SNDBUF {size}: {e}");
        }
        let buffers = BufferSizes {
            recv: s2.recv_buffer_size()?,
            send: s2.send_buffer_size()?,
        };
        let io = tokio::net::UdpSocket::from_std(sock)?;
        let (platform, caps) = sys::new_platform(&io, &config)?;
        let batch = config.effective_batch_size();
        Ok(Self {
            io,
            platform,
            batch,
            gro: caps.gro,
            policy: SendPolicy {
                batch,
                gso_segments: caps.gso_segments.max(1).into(),
            },
            counters: Counters::default(),
            backlog: Mutex::new(VecDeque::new()),
            buffers,
            config,
        })
    }

    /// The local address.
    ///
    /// # Errors
    /// As `getsockname`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    /// The configuration the socket was made with.
    #[must_use]
    pub const fn config(&self) -> &Config {
        &self.config
    }

    /// Batched or single.
    #[must_use]
    pub const fn mode(&self) -> IoMode {
        self.config.mode
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

    /// Most segments one transmit may carry: 1 when GSO is off, unsupported, or was found
    /// broken at run time.
    #[must_use]
    pub fn max_gso_segments(&self) -> usize {
        self.policy.gso_segments.load(Relaxed)
    }

    /// Most segments of `segment_size` bytes one transmit may carry, so that the whole run
    /// stays within [`MAX_UDP_PAYLOAD`] (64 x 1200 bytes would not: 54 do).
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

    /// Waits until the socket may be readable.
    ///
    /// # Errors
    /// When the runtime's reactor is gone.
    pub async fn readable(&self) -> io::Result<()> {
        self.io.readable().await
    }

    /// Waits until the socket may be writable.
    ///
    /// # Errors
    /// When the runtime's reactor is gone.
    pub async fn writable(&self) -> io::Result<()> {
        self.io.writable().await
    }

    /// Polls for read readiness (for hand-written futures).
    ///
    /// # Errors
    /// When the runtime's reactor is gone.
    pub fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io.poll_recv_ready(cx)
    }

    /// Polls for write readiness (for hand-written futures).
    ///
    /// # Errors
    /// When the runtime's reactor is gone.
    pub fn poll_send_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.io.poll_send_ready(cx)
    }

    /// Receives one batch with at most one syscall (`EINTR` aside) into `batch`, whose
    /// [`datagrams`](RecvBatch::datagrams) then yields them. Truncated and empty datagrams are
    /// counted and skipped. An ICMP error the kernel reports instead of data is counted and
    /// yields an empty batch, never an error.
    ///
    /// Like tokio's `try_recv`, this reports `WouldBlock` without a syscall while the runtime
    /// has not seen the socket readable; wait with [`readable`](Self::readable) and call again.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is queued (and the socket's readiness is cleared); other
    /// errors only for a broken socket.
    pub fn recv(&self, batch: &mut RecvBatch) -> io::Result<RecvSummary> {
        let batched = self.config.mode == IoMode::Batched;
        let max = if batched { self.batch } else { 1 };
        let result = self.io.try_io(Interest::READABLE, || {
            loop {
                let (slots, meta) = batch.prepare(max);
                match sys::recv(&self.platform, &self.io, slots, meta, batched) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                        self.counters.error(ErrorKind::Interrupted);
                    }
                    other => return other,
                }
            }
        });
        let received = match result {
            Ok(r) => r,
            Err(e) => {
                return match classify(&e) {
                    SendError::WouldBlock => {
                        self.counters.error(ErrorKind::WouldBlock);
                        Err(e)
                    }
                    SendError::Fatal => {
                        self.counters.error(ErrorKind::Other);
                        Err(e)
                    }
                    kind => {
                        // A pending error reported instead of data: an ICMP error of an earlier
                        // send, or a local send error the kernel also queued (IP_RECVERR).
                        // Neither is this socket's end; take the queue and carry on.
                        self.counters.error(if kind == SendError::Icmp {
                            ErrorKind::Icmp
                        } else {
                            ErrorKind::Other
                        });
                        let drained = sys::drain_error_queue(&self.io);
                        tracing::debug!("pending error on receive: {e} ({drained} queued)");
                        Ok(RecvSummary {
                            datagrams: 0,
                            kernel_drops: self.counters.kernel_drops(),
                        })
                    }
                };
            }
        };
        let mut datagrams = 0;
        let mut bytes = 0;
        let mut offload = 0;
        for meta in &batch.meta[..received.filled] {
            if meta.truncated {
                self.counters.error(ErrorKind::Truncated);
            } else if meta.len == 0 {
                self.counters.error(ErrorKind::Empty);
            } else {
                let segments = segment_lengths(meta.len, meta.stride).count();
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
        Ok(RecvSummary {
            datagrams,
            kernel_drops: self.counters.kernel_drops(),
        })
    }

    /// Sends `transmits`, up to `batch_size` per syscall (`sendmmsg`), each with its own
    /// destination, ECN, source IP and GSO segment size. Returns how many the kernel took;
    /// the caller keeps the rest for the next writable wake-up, so nothing is lost. A transmit
    /// the kernel refuses for itself (`EMSGSIZE`, `ENOBUFS`) counts as taken and is dropped,
    /// see the stats.
    ///
    /// Also flushes datagrams left from a GSO fallback first; [`has_backlog`](Self::has_backlog)
    /// says whether any wait.
    ///
    /// Like tokio's `try_send`, this reports `WouldBlock` without a syscall while the runtime
    /// has not seen the socket writable; wait with [`writable`](Self::writable) and call again.
    ///
    /// # Errors
    /// `WouldBlock` when the kernel took nothing; other errors only for a broken socket.
    pub fn send(&self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        let batched = self.config.mode == IoMode::Batched;
        let mut backlog = self.backlog.lock().unwrap_or_else(PoisonError::into_inner);
        let mut partial = 0;
        let result = self.io.try_io(Interest::WRITABLE, || {
            let mut call = SendCall {
                policy: &self.policy,
                counters: &self.counters,
                backlog: &mut backlog,
                sys: |chunk: &[Transmit<'_>], gso: bool| {
                    sys::send(&self.platform, &self.io, chunk, gso, batched)
                },
                drain_errors: || sys::drain_error_queue(&self.io),
            };
            match call.send(transmits) {
                // Stopped short: the kernel said WouldBlock. Tell tokio, so that the next
                // writable() really waits.
                Ok(n) if n < transmits.len() => {
                    partial = n;
                    Err(io::ErrorKind::WouldBlock.into())
                }
                other => other,
            }
        });
        match result {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && partial > 0 => Ok(partial),
            other => other,
        }
    }

    /// Whether datagrams from a GSO fallback still wait to be sent: wait for writability and
    /// call [`send`](Self::send) (with no transmits, if need be).
    #[must_use]
    pub fn has_backlog(&self) -> bool {
        !self
            .backlog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Waits for data and receives one batch.
    ///
    /// # Errors
    /// As [`recv`](Self::recv), but never `WouldBlock`.
    pub async fn recv_async(&self, batch: &mut RecvBatch) -> io::Result<RecvSummary> {
        loop {
            self.readable().await?;
            match self.recv(batch) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
    }

    /// Sends every transmit, waiting for writability as needed.
    ///
    /// # Errors
    /// As [`send`](Self::send), but never `WouldBlock`.
    pub async fn send_all(&self, transmits: &[Transmit<'_>]) -> io::Result<()> {
        let mut done = 0;
        while done < transmits.len() || self.has_backlog() {
            match self.send(&transmits[done..]) {
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A snapshot of the counters, with the kernel's drop count refreshed.
    #[must_use]
    pub fn stats(&self) -> Stats {
        if let Ok(drops) = sys::kernel_drops(&self.io) {
            self.counters.observe_kernel_drops(drops);
        }
        self.counters.snapshot()
    }

    /// The underlying tokio socket, e.g. to set further options.
    #[must_use]
    pub const fn as_tokio(&self) -> &tokio::net::UdpSocket {
        &self.io
    }
}
