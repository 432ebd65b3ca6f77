//! [`ChannelDatapath`]: a worker's datapath where no steering program spreads datagrams over
//! sockets (the server's channel steering): it receives what a dispatcher hands it over a
//! bounded channel and sends on the shared socket directly.

use std::{
    cell::RefCell,
    io,
    net::SocketAddr,
    task::{Context, Poll},
};

use neqo_udp::{Datagram, Socket, Stats, TxQueue};
use tokio::sync::mpsc;

use super::Datapath;

/// Datagrams one [`recv`](Datapath::recv) takes from the channel at most: about what a
/// receive syscall of 32 slots brings with GRO runs, so one turn of the driver does not
/// grow without bound behind a busy dispatcher.
pub const CHANNEL_RECV_BATCH: usize = 256;

/// The receiving end and a datagram taken while polling for readiness.
#[derive(Debug)]
struct Inbox {
    rx: mpsc::Receiver<Datagram>,
    /// `poll_recv_ready` can only find out whether the channel holds something by taking it.
    taken: Option<Datagram>,
}

/// What a worker receives through when a dispatcher owns the receive side of the socket: its
/// datagrams arrive over `rx`, and it sends on `socket`, its own handle to the listening
/// socket (a `try_clone` of the descriptor, registered with the worker's runtime; several
/// threads may send on one UDP socket, each `sendmmsg` being atomic per message).
///
/// Its own handle, rather than the dispatcher's socket shared: its send counters are its own,
/// and its writability waits are served by its own runtime. The price: tokio registers the
/// handle for readability too, so the worker's runtime is also woken by datagrams arriving
/// for the other workers (the dispatcher's measurement in `docs/records/server.md` includes it).
#[derive(Debug)]
pub struct ChannelDatapath {
    inbox: RefCell<Inbox>,
    socket: Socket,
    /// Channel receives that took at least one datagram, as a socket counts syscalls.
    rx: neqo_udp::DirectionStats,
    /// Receives that found the channel full: the dispatcher drops what it cannot add.
    found_full: u64,
}

impl ChannelDatapath {
    /// Receives from `rx`, sends on `socket` (which nothing reads from but the dispatcher).
    #[must_use]
    pub fn new(rx: mpsc::Receiver<Datagram>, socket: Socket) -> Self {
        Self {
            inbox: RefCell::new(Inbox { rx, taken: None }),
            socket,
            rx: neqo_udp::DirectionStats::default(),
            found_full: 0,
        }
    }
}

impl Datapath for ChannelDatapath {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    fn max_segments_for(&self, segment_size: usize) -> usize {
        self.socket.max_segments_for(segment_size)
    }

    fn batch_size(&self) -> usize {
        self.socket.batch_size()
    }

    /// Takes up to [`CHANNEL_RECV_BATCH`] datagrams. A closed channel (the dispatcher is
    /// gone) reads as empty: the server is stopping, and a worker that is closing its
    /// connections must not fail for it.
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<()> {
        let inbox = self.inbox.get_mut();
        // Full now: datagrams for this worker are being dropped by the dispatcher.
        if inbox.rx.len() >= inbox.rx.max_capacity() {
            self.found_full += 1;
        }
        let before = out.len();
        out.extend(inbox.taken.take());
        while out.len() - before < CHANNEL_RECV_BATCH {
            match inbox.rx.try_recv() {
                Ok(d) => out.push(d),
                Err(_) => break,
            }
        }
        let n = out.len() - before;
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let bytes = out[before..].iter().map(|d| d.data.len() as u64).sum();
        self.rx.count(n, bytes);
        Ok(())
    }

    fn flush(&mut self, queue: &mut TxQueue) -> io::Result<usize> {
        self.socket.flush(queue)
    }

    fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inbox = self.inbox.borrow_mut();
        if inbox.taken.is_some() {
            return Poll::Ready(Ok(()));
        }
        match inbox.rx.poll_recv(cx) {
            Poll::Ready(Some(d)) => {
                inbox.taken = Some(d);
                Poll::Ready(Ok(()))
            }
            // Closed: nothing more will come, and the server's stop is under way (see
            // `recv`); never ready, or the driver would spin.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }

    fn poll_send_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_send_ready(cx)
    }

    /// Receives that found the channel full.
    fn overflows(&self) -> u64 {
        self.found_full
    }

    /// The channel's receives and the socket's sends. The socket's kernel drops and receive
    /// counters are the dispatcher's (the descriptor is shared): reported there, not here.
    fn stats(&self) -> Stats {
        let socket = self.socket.stats();
        let mut stats = Stats::default();
        stats.rx = self.rx;
        stats.tx = socket.tx;
        stats.tx_dropped = socket.tx_dropped;
        stats.events = socket.events;
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn receives_what_the_channel_holds_and_reads_a_closed_channel_as_empty() {
        let (tx, rx) = mpsc::channel(8);
        let socket = Socket::bind("127.0.0.1:0".parse().unwrap(), neqo_udp::Config::default())
            .expect("bind");
        let mut path = ChannelDatapath::new(rx, socket);
        let mut out = Vec::new();
        assert_eq!(
            path.recv(&mut out).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        let source: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for i in 0..3u8 {
            tx.try_send(Datagram::new(bytes::BytesMut::from(&[i; 10][..]), source))
                .unwrap();
        }
        std::future::poll_fn(|cx| path.poll_recv_ready(cx))
            .await
            .unwrap();
        path.recv(&mut out).unwrap();
        assert_eq!(
            out.iter().map(|d| d.data[0]).collect::<Vec<_>>(),
            [0, 1, 2],
            "in order, the one taken while polling first"
        );
        let s = path.stats();
        assert_eq!((s.rx.syscalls, s.rx.datagrams, s.rx.bytes), (1, 3, 30));
        drop(tx);
        let waker = std::task::Waker::noop();
        assert!(
            path.poll_recv_ready(&mut Context::from_waker(waker))
                .is_pending()
        );
        assert_eq!(
            path.recv(&mut out).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[tokio::test]
    async fn a_full_channel_is_an_overflow() {
        let (tx, rx) = mpsc::channel(2);
        let socket = Socket::bind("127.0.0.1:0".parse().unwrap(), neqo_udp::Config::default())
            .expect("bind");
        let mut path = ChannelDatapath::new(rx, socket);
        let source: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let send = || tx.try_send(Datagram::new(bytes::BytesMut::from(&[1; 10][..]), source));
        let mut out = Vec::new();
        send().unwrap();
        path.recv(&mut out).unwrap();
        assert_eq!(path.overflows(), 0, "room left");
        send().unwrap();
        send().unwrap();
        assert!(send().is_err(), "the dispatcher's next datagram is dropped");
        path.recv(&mut out).unwrap();
        assert_eq!((out.len(), path.overflows()), (3, 1));
    }
}
