//! A datapath on the in-memory [`Network`]: it receives what the network queued for its
//! address and puts what it sends on the network, behaving as its [`Behaviour`] says
//! (`WouldBlock` every so often, few transmits per call, GSO that breaks).

use std::{
    io,
    net::SocketAddr,
    task::{Context, Poll},
};

use bytes::BytesMut;
use neqo_udp::{Datagram, Sent, Stats, Transmit, TxQueue};

use super::{Behaviour, Network};
use crate::Datapath;

/// A datapath on the network.
pub(super) struct Path {
    addr: SocketAddr,
    net: Network,
    how: Behaviour,
    calls: usize,
    stats: Stats,
    /// GSO broke: one segment per call from then on.
    fallback: bool,
    /// Bytes of the run the last fallback call stopped in, still to send.
    remainder: Option<usize>,
}

impl Datapath for Path {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }

    fn max_segments_for(&self, _segment_size: usize) -> usize {
        if self.fallback {
            1
        } else {
            self.how.gso_segments
        }
    }

    fn batch_size(&self) -> usize {
        32
    }

    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<()> {
        let mut net = self.net.0.borrow_mut();
        let now = net.now;
        let queue = net.queues.entry(self.addr).or_default();
        let before = out.len();
        while let Some((at, data, source)) = queue.front()
            && *at <= now
            && out.len() - before < 32
        {
            let mut d = Datagram::new(BytesMut::from(&data[..]), *source);
            d.destination = Some(self.addr.ip());
            out.push(d);
            queue.pop_front();
        }
        let got = out.len() - before;
        if got == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.stats.rx.syscalls += 1;
        self.stats.rx.datagrams += got as u64;
        Ok(())
    }

    fn flush(&mut self, queue: &mut TxQueue) -> io::Result<usize> {
        queue.flush(|transmits| self.send(transmits))
    }

    fn poll_recv_ready(&self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_send_ready(&self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.kernel_drops = self.net.overflowed(self.addr);
        s
    }
}

impl Path {
    pub(super) fn new(addr: SocketAddr, net: Network, how: Behaviour) -> Self {
        Self {
            addr,
            net,
            how,
            calls: 0,
            stats: Stats::default(),
            fallback: false,
            remainder: None,
        }
    }

    /// One send call: what the kernel would take of `transmits`.
    fn send(&mut self, transmits: &[Transmit<&[u8]>]) -> io::Result<Sent> {
        self.calls += 1;
        if let Some(n) = self.net.0.borrow_mut().full_for.get_mut(&self.addr)
            && *n > 0
        {
            *n -= 1;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if self.how.block_every > 0 && self.calls.is_multiple_of(self.how.block_every) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.stats.tx.syscalls += 1;
        if !self.fallback && self.how.gso_breaks_after.is_some_and(|n| self.calls > n) {
            self.fallback = true;
            // Runs generated before the break (all but the first, which is cut now).
            let queued = transmits[1..].iter().filter(|t| t.datagrams() > 1).count();
            self.net
                .0
                .borrow_mut()
                .gso_break_runs
                .entry(self.addr)
                .or_default()
                .0 = queued;
        } else if self.fallback && transmits[0].datagrams() > 1 {
            let resumed = self.remainder == Some(transmits[0].contents.len());
            let mut net = self.net.0.borrow_mut();
            let runs = net.gso_break_runs.entry(self.addr).or_default();
            if resumed {
                runs.2 += 1;
            } else {
                runs.1 += 1;
            }
        }
        if self.fallback {
            // One datagram per call, reporting a run's progress segment by segment.
            let t = &transmits[0];
            let stride = t.stride();
            self.remainder = (stride < t.contents.len()).then(|| t.contents.len() - stride);
            self.put(&t.contents[..stride], t.destination);
            return Ok(if stride < t.contents.len() {
                Sent::new(0, stride)
            } else {
                Sent::new(1, 0)
            });
        }
        let mut done = 0;
        let mut call = Vec::new();
        for t in transmits.iter().take(self.how.per_call) {
            assert!(
                t.datagrams() <= self.how.gso_segments,
                "a transmit of {} segments where {} may go",
                t.datagrams(),
                self.how.gso_segments
            );
            for part in t.contents.chunks(t.stride().max(1)) {
                self.put(part, t.destination);
            }
            call.push((t.destination, t.datagrams()));
            done += 1;
        }
        self.net
            .0
            .borrow_mut()
            .send_calls
            .entry(self.addr)
            .or_default()
            .push(call);
        Ok(Sent::new(done, 0))
    }

    fn put(&mut self, datagram: &[u8], to: SocketAddr) {
        self.stats.tx.datagrams += 1;
        self.net.deliver(self.addr, to, datagram);
    }
}
