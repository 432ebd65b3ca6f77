//! What the driver sends and receives through: [`Datapath`], implemented by neqo-udp's
//! [`Socket`] ([`SocketDatapath`]) and, in the driver's tests, by an in-memory network.

use std::{
    io,
    net::SocketAddr,
    task::{Context, Poll},
};

use neqo_udp::{Datagram, RecvBatch, Socket, Stats, TxQueue};

/// A socket, as the driver uses it. The calls never wait: they report `WouldBlock`, and the
/// `poll_*_ready` calls say when to try again.
pub trait Datapath {
    /// The local address.
    ///
    /// # Errors
    /// As `getsockname`.
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Most segments of `segment_size` bytes one transmit should carry.
    fn max_segments_for(&self, segment_size: usize) -> usize;

    /// Messages one send syscall carries at most.
    fn batch_size(&self) -> usize;

    /// Receives one batch, appending its datagrams to `out`.
    ///
    /// # Errors
    /// `WouldBlock` when nothing is queued; other errors for a broken socket.
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<()>;

    /// Sends what `queue` holds, once, as [`Socket::flush`] does: what the kernel did not
    /// take stays at the queue's head. Returns how many transmits were finished.
    ///
    /// # Errors
    /// `WouldBlock` when nothing was finished; other errors for a broken socket.
    fn flush(&mut self, queue: &mut TxQueue) -> io::Result<usize>;

    /// Ready when a receive may find data.
    ///
    /// # Errors
    /// When the runtime's reactor is gone.
    fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Ready when a send may find room.
    ///
    /// # Errors
    /// When the runtime's reactor is gone.
    fn poll_send_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// The socket's counters.
    fn stats(&self) -> Stats;

    /// A count that rises as datagrams for this path are lost before it reads them: by
    /// default the kernel's drops at a full receive buffer. The driver's sign that it is
    /// behind ([`BEHIND_HOLD`](super::BEHIND_HOLD)).
    fn overflows(&self) -> u64 {
        self.stats().kernel_drops
    }
}

/// A neqo-udp [`Socket`] and its receive buffers.
#[derive(Debug)]
pub struct SocketDatapath {
    socket: Socket,
    batch: RecvBatch,
}

impl SocketDatapath {
    /// Wraps `socket`.
    #[must_use]
    pub fn new(socket: Socket) -> Self {
        Self {
            batch: socket.recv_batch(),
            socket,
        }
    }
}

impl Datapath for SocketDatapath {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    fn max_segments_for(&self, segment_size: usize) -> usize {
        self.socket.max_segments_for(segment_size)
    }

    fn batch_size(&self) -> usize {
        self.socket.batch_size()
    }

    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<()> {
        self.socket.recv(&mut self.batch)?;
        out.extend(self.batch.datagrams());
        Ok(())
    }

    fn flush(&mut self, queue: &mut TxQueue) -> io::Result<usize> {
        self.socket.flush(queue)
    }

    fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_recv_ready(cx)
    }

    fn poll_send_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_send_ready(cx)
    }

    fn stats(&self) -> Stats {
        self.socket.stats()
    }
}

/// One datapath and what waits to be sent on it.
pub(super) struct Path {
    pub(super) io: Box<dyn Datapath>,
    /// Transmits waiting for the kernel; also the pool of every transmit buffer.
    pub(super) queue: TxQueue,
    /// Transmits generated before a flush: one syscall's worth.
    pub(super) queue_limit: usize,
    /// The last flush left transmits behind (the kernel said `WouldBlock`).
    pub(super) blocked: bool,
    /// Its [`Datapath::overflows`] when its last batch was received.
    pub(super) overflows: u64,
}

impl Path {
    /// Sends what the queue holds; returns whether the kernel took anything.
    pub(super) fn flush(&mut self) -> io::Result<bool> {
        if self.blocked || self.queue.is_empty() {
            return Ok(false);
        }
        let offered = self.queue.len();
        match self.io.flush(&mut self.queue) {
            Ok(done) => {
                self.blocked = done < offered;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.blocked = true;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
