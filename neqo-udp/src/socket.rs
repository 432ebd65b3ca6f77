//! [`Socket`]: a [`UdpSocketState`] on a tokio UDP socket (feature `tokio`, on by default).

use std::{
    io,
    net::SocketAddr,
    task::{Context, Poll},
};

use tokio::io::Interest;

use crate::{
    bind::new_udp_socket,
    config::{Config, IoMode},
    error::{Refused, SetupError},
    queue::TxQueue,
    recv::RecvBatch,
    send::Sent,
    state::{BufferSizes, RecvSummary, UdpSocketState},
    stats::Stats,
    sys::UdpSockRef,
    transmit::Transmit,
};

/// A non-blocking UDP socket registered with tokio that hands the kernel up to `batch_size`
/// datagrams per syscall.
///
/// Built for one task driving it (a QUIC endpoint), though every method takes `&self` and the
/// socket is `Sync`, so a relay may share it. Must be created inside a tokio runtime, whose
/// reactor it registers with.
#[derive(Debug)]
pub struct Socket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
}

impl Socket {
    /// Binds a socket to `addr`. Bound to `[::]` it is dual-stack (IPv4 peers appear as
    /// v4-mapped IPv6 addresses).
    ///
    /// # Errors
    /// [`Refused::Bind`] with the bind error (`AddrInUse`, ...), or what
    /// [`from_std`](Self::from_std) refuses.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled.
    pub fn bind(addr: SocketAddr, config: Config) -> Result<Self, SetupError> {
        let sock = new_udp_socket(addr)?;
        sock.bind(&addr.into())
            .map_err(SetupError::of(Refused::Bind(addr)))?;
        Self::from_std(sock.into(), config)
    }

    /// Takes over an already bound, unconnected std socket (made non-blocking here).
    ///
    /// # Errors
    /// What [`UdpSocketState::new`] refuses ([`Refused::Connected`], a socket option),
    /// [`Refused::NonBlocking`], or [`Refused::Runtime`] where the runtime's reactor does not
    /// take the socket.
    ///
    /// # Panics
    /// Outside a tokio runtime with I/O enabled, as tokio's `UdpSocket::from_std` does.
    pub fn from_std(sock: std::net::UdpSocket, config: Config) -> Result<Self, SetupError> {
        sock.set_nonblocking(true)
            .map_err(SetupError::of(Refused::NonBlocking))?;
        let state = UdpSocketState::new(UdpSockRef::from(&sock), config)?;
        let io = tokio::net::UdpSocket::from_std(sock).map_err(SetupError::of(Refused::Runtime))?;
        Ok(Self { io, state })
    }

    fn sock(&self) -> UdpSockRef<'_> {
        UdpSockRef::from(&self.io)
    }

    /// The runtime-free state underneath (configuration, capabilities, counters).
    #[must_use]
    pub const fn state(&self) -> &UdpSocketState {
        &self.state
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
        self.state.config()
    }

    /// Batched or single.
    #[must_use]
    pub const fn mode(&self) -> IoMode {
        self.state.mode()
    }

    /// Datagram buffers per receive and messages per send syscall (1 in single mode).
    #[must_use]
    pub const fn batch_size(&self) -> usize {
        self.state.batch_size()
    }

    /// Socket buffer sizes the kernel granted.
    #[must_use]
    pub const fn buffer_sizes(&self) -> BufferSizes {
        self.state.buffer_sizes()
    }

    /// See [`UdpSocketState::max_gso_segments`].
    #[must_use]
    pub fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// See [`UdpSocketState::max_segments_for`].
    #[must_use]
    pub fn max_segments_for(&self, segment_size: usize) -> usize {
        self.state.max_segments_for(segment_size)
    }

    /// Whether the kernel coalesces received datagrams into GRO runs for us.
    #[must_use]
    pub const fn gro_enabled(&self) -> bool {
        self.state.gro_enabled()
    }

    /// Buffers sized for this socket's batches.
    #[must_use]
    pub fn recv_batch(&self) -> RecvBatch {
        self.state.recv_batch()
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

    /// [`UdpSocketState::recv`] on this socket.
    ///
    /// Like tokio's `try_recv`, this reports `WouldBlock` without a syscall while the runtime
    /// has not seen the socket readable; wait with [`readable`](Self::readable) and call again.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is queued (and the socket's readiness is cleared); other
    /// errors only for a broken socket.
    pub fn recv(&self, batch: &mut RecvBatch) -> io::Result<RecvSummary> {
        self.io
            .try_io(Interest::READABLE, || self.state.recv(self.sock(), batch))
    }

    /// [`UdpSocketState::send`] on this socket.
    ///
    /// Like tokio's `try_send`, this reports `WouldBlock` without a syscall while the runtime
    /// has not seen the socket writable; wait with [`writable`](Self::writable) and call again.
    ///
    /// # Errors
    /// `WouldBlock` when nothing was finished; other errors only for a broken socket.
    pub fn send(&self, transmits: &[Transmit<&[u8]>]) -> io::Result<Sent> {
        let mut sent = Sent::default();
        let result = self.io.try_io(Interest::WRITABLE, || {
            sent = self.state.send(self.sock(), transmits)?;
            if sent.transmits < transmits.len() {
                // Stopped short: the kernel said WouldBlock. Tell tokio, so that the next
                // writable() really waits.
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(())
        });
        match result {
            Ok(()) => Ok(sent),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && sent.progressed() => Ok(sent),
            Err(e) => Err(e),
        }
    }

    /// Sends what `queue` holds, once ([`TxQueue::flush`] with [`send`](Self::send)).
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub fn flush(&self, queue: &mut TxQueue) -> io::Result<usize> {
        queue.flush(|transmits| self.send(transmits))
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
    pub async fn send_all(&self, transmits: &[Transmit<&[u8]>]) -> io::Result<()> {
        let (mut done, mut partial) = (0, 0);
        while done < transmits.len() {
            let result = if partial > 0 {
                let head = &transmits[done];
                self.send(&[head.with_contents(&head.contents[partial..])])
            } else {
                self.send(&transmits[done..])
            };
            match result {
                Ok(sent) if sent.transmits > 0 => {
                    done += sent.transmits;
                    partial = sent.partial;
                }
                Ok(sent) => partial += sent.partial,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// A snapshot of the counters, with the kernel's drop count refreshed.
    #[must_use]
    pub fn stats(&self) -> Stats {
        self.state.stats(self.sock())
    }
}

#[cfg(unix)]
impl std::os::fd::AsFd for Socket {
    /// The socket's descriptor, e.g. to set further options.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.io.as_fd()
    }
}

#[cfg(windows)]
impl std::os::windows::io::AsSocket for Socket {
    /// The socket's handle, e.g. to set further options.
    fn as_socket(&self) -> std::os::windows::io::BorrowedSocket<'_> {
        self.io.as_socket()
    }
}
