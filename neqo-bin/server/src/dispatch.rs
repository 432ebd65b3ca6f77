//! Channel steering: where no steering program spreads the datagrams over the workers'
//! sockets (not Linux, a kernel that refuses it, or [`Steering::Channel`](crate::Steering::Channel)), one socket per
//! listen address is read by a dispatcher, which hands each datagram to its worker over a
//! bounded channel.
//!
//! Why a thread of its own, with its own current-thread runtime, rather than a task on one of
//! the workers: the dispatcher then never waits behind a worker's turn (which may take a
//! millisecond with many connections), so every worker's datagrams keep flowing while one is
//! busy; and it holds no connection state, so its only failure modes are the socket's
//! errors and a full channel, each simple to reason about. It costs a thread and a hop
//! (a channel send and, when the worker is idle, a wake-up) per datagram.
//!
//! The rule ([`worker_for`]) is the steering program's: the worker byte of the destination
//! connection ID modulo the worker count ([`neqo_udp::CidSteering::socket_index`]), so the
//! connection IDs are the same whichever steering runs. A datagram without the byte (an
//! Initial or 0-RTT packet, whose connection ID the client chose) goes by a hash of its
//! source address instead, as the kernel's 4-tuple hash would send it: one source's such
//! datagrams always reach one worker, and the hash's key is random per process, so no client
//! can pick sources that all reach one.
//!
//! The bound: each worker's channel holds [`CHANNEL_CAPACITY`] datagrams. When it is full the
//! datagram is dropped and counted (`dropped`, per worker), as the kernel drops on a full
//! socket buffer: a worker that falls behind, or is stuck, must neither stall the dispatcher
//! (and with it every other worker) nor make the server's memory grow. Each datagram is in
//! an allocation of its own size (neqo-udp copies it out of the receive slot), so a full
//! channel holds what its senders sent: about 1.5 MB of full-size QUIC datagrams (1452
//! bytes), and 64 MiB only if every one of them is a 64 KiB UDP datagram.

use std::{future::poll_fn, hash::BuildHasher as _, io, net::SocketAddr, task::Poll};

use neqo_udp::{CidSteering, Datagram, RecvBatch, Socket};
use tokio::sync::mpsc::{self, error::TrySendError};

/// Datagrams each worker's channel holds; beyond them, the dispatcher drops (see the module
/// docs).
pub const CHANNEL_CAPACITY: usize = 1024;

/// Receive batches the dispatcher takes from one socket before it looks at the next (and at
/// its stop signal): the sockets take turns, and the socket stays ready meanwhile.
const RECV_ROUND: usize = 8;

/// The worker, of `workers`, that gets a datagram with payload `data` from `source`: by the
/// worker byte of its destination connection ID, as the steering program picks; by a hash of
/// `source` where the datagram has no such byte.
///
/// # Panics
/// With `workers` 0.
#[must_use]
pub fn worker_for(steering: CidSteering, data: &[u8], source: SocketAddr, workers: usize) -> usize {
    assert!(workers > 0, "at least one worker");
    steering
        .socket_index(data, workers)
        .unwrap_or_else(|| source_hash(source) % workers)
}

/// A hash of the source address under a key drawn once per process: the same for every
/// datagram of this process, so one source stays on one worker, and unknown to clients (a
/// fixed key, such as `DefaultHasher::new`'s, would let one choose sources that collide).
fn source_hash(source: SocketAddr) -> usize {
    static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    #[expect(
        clippy::cast_possible_truncation,
        reason = "any bits of the hash will do"
    )]
    let h = KEY
        .get_or_init(std::hash::RandomState::new)
        .hash_one(source) as usize;
    h
}

/// What the dispatcher did, for the server's report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DispatchReport {
    /// Datagrams each worker's channel holds at most.
    pub capacity: usize,
    /// Datagrams handed to each worker, in worker order.
    pub datagrams: Vec<u64>,
    /// Datagrams dropped because the worker's channel was full (or the worker had stopped),
    /// in worker order.
    pub dropped: Vec<u64>,
    /// Datagrams without a worker byte, placed by the hash of their source address.
    pub by_source: u64,
    /// The dispatcher's sockets (the listening ones): receive syscalls and kernel drops.
    pub socket: neqo_udp::Stats,
}

impl DispatchReport {
    /// Adds another dispatcher's counts (one per listen address) to these.
    fn add(&mut self, other: &Self) {
        self.capacity = other.capacity;
        for (v, o) in [
            (&mut self.datagrams, &other.datagrams),
            (&mut self.dropped, &other.dropped),
        ] {
            v.resize(v.len().max(o.len()), 0);
            for (a, b) in v.iter_mut().zip(o) {
                *a += b;
            }
        }
        self.by_source += other.by_source;
        self.socket.accumulate(&other.socket);
    }
}

/// Hands datagrams to the workers' channels.
#[derive(Debug)]
pub struct Dispatcher {
    steering: CidSteering,
    workers: Vec<mpsc::Sender<Datagram>>,
    report: DispatchReport,
}

impl Dispatcher {
    /// Hands datagrams to `workers` (worker `i` at index `i`), steering on `steering`'s byte.
    #[must_use]
    pub fn new(steering: CidSteering, workers: Vec<mpsc::Sender<Datagram>>) -> Self {
        let n = workers.len();
        Self {
            steering,
            report: DispatchReport {
                capacity: workers.first().map_or(0, mpsc::Sender::max_capacity),
                datagrams: vec![0; n],
                dropped: vec![0; n],
                ..DispatchReport::default()
            },
            workers,
        }
    }

    /// Hands `d` to its worker, or drops it (counted) if that worker's channel is full or
    /// closed. Never waits.
    pub fn hand(&mut self, d: Datagram) {
        let n = self.workers.len();
        let w = match self.steering.socket_index(&d.data, n) {
            Some(w) => w,
            None => {
                self.report.by_source += 1;
                worker_for(self.steering, &d.data, d.source, n)
            }
        };
        match self.workers[w].try_send(d) {
            Ok(()) => self.report.datagrams[w] += 1,
            Err(TrySendError::Full(_) | TrySendError::Closed(_)) => self.report.dropped[w] += 1,
        }
    }

    /// What it did so far.
    #[cfg(test)]
    pub const fn report(&self) -> &DispatchReport {
        &self.report
    }
}

/// Reads every socket and hands what arrives to the workers until `stop` completes; returns
/// the counts of all, with the sockets' counters.
///
/// # Errors
/// A socket error other than `WouldBlock` (the server then stops).
pub(super) async fn run(
    sockets: Vec<(Socket, Dispatcher)>,
    stop: impl Future<Output = ()>,
) -> io::Result<DispatchReport> {
    let mut stop = std::pin::pin!(stop);
    let mut sockets: Vec<(Socket, RecvBatch, Dispatcher)> = sockets
        .into_iter()
        .map(|(s, d)| (s.recv_batch(), s, d))
        .map(|(b, s, d)| (s, b, d))
        .collect();
    loop {
        let stopped = poll_fn(|cx| {
            if stop.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(true));
            }
            let mut ready = false;
            for (s, _, _) in &sockets {
                match s.poll_recv_ready(cx) {
                    Poll::Ready(Ok(())) => ready = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            if ready {
                Poll::Ready(Ok(false))
            } else {
                Poll::Pending
            }
        })
        .await?;
        if stopped {
            break;
        }
        for (socket, batch, dispatcher) in &mut sockets {
            for _ in 0..RECV_ROUND {
                match socket.recv(batch) {
                    Ok(_) => {
                        for d in batch.datagrams() {
                            #[cfg(test)]
                            tests::maybe_panic(&d);
                            dispatcher.hand(d);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    let mut all = DispatchReport::default();
    for (socket, _, dispatcher) in &sockets {
        let mut r = dispatcher.report.clone();
        r.socket = socket.stats();
        all.add(&r);
    }
    Ok(all)
}

#[cfg(test)]
pub(super) mod tests {
    use bytes::BytesMut;

    use super::*;

    /// The payload that makes the dispatcher panic, for the server's test (unit tests only).
    pub(in super::super) const PANIC_PAYLOAD: &[u8] = b"the dispatcher panics for the test";

    pub(super) fn maybe_panic(d: &Datagram) {
        assert!(
            &d.data[..] != PANIC_PAYLOAD,
            "the dispatcher panics for the test"
        );
    }

    fn datagram(data: &[u8], source: &str) -> Datagram {
        Datagram::new(BytesMut::from(data), source.parse().unwrap())
    }

    #[test]
    fn the_worker_byte_picks_the_worker_and_the_source_picks_it_without_one() {
        // No server ID: the worker byte is the DCID's second byte (after the first octet).
        let steering = CidSteering::new(1);
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "[::1]:2000".parse().unwrap();
        for byte in 0..=255u8 {
            let short = [0x40, 0xe0, byte, 1, 2, 3];
            // Handshake: the server's connection ID.
            let mut long = vec![0xe0, 0, 0, 0, 1, 8, 0xe0, byte];
            long.resize(1200, 0);
            for workers in 1..=5 {
                let want = usize::from(byte) % workers;
                assert_eq!(worker_for(steering, &short, a, workers), want);
                assert_eq!(worker_for(steering, &short, b, workers), want, "any source");
                assert_eq!(worker_for(steering, &long, b, workers), want);
            }
        }
        // An Initial's connection ID is the client's: its byte aims at nothing, the source
        // decides, and many sources spread.
        let mut initial = vec![0xc0, 0, 0, 0, 1, 8, 0xe0, 0];
        initial.resize(1200, 0);
        let spread: std::collections::HashSet<usize> = (0..64)
            .map(|p| worker_for(steering, &initial, SocketAddr::new(a.ip(), 5000 + p), 4))
            .collect();
        assert!(spread.len() > 1, "{spread:?}");
        for p in 0..64 {
            let source = SocketAddr::new(a.ip(), 5000 + p);
            assert_eq!(
                worker_for(steering, &initial, source, 4),
                worker_for(steering, &[], source, 4)
            );
        }
        // Without the byte (too short; a long header whose DCID ends first), the source
        // decides, the same way each time, whatever the payload.
        let no_byte: [&[u8]; 3] = [&[0x40, 0xe0], &[0xc0, 0, 0, 0, 1, 1, 0xe0, 7, 7], &[]];
        for workers in 1..=5 {
            for source in [a, b] {
                let first = worker_for(steering, no_byte[0], source, workers);
                assert!(first < workers);
                for d in no_byte {
                    assert_eq!(worker_for(steering, d, source, workers), first);
                }
            }
        }
        // And different sources spread: 64 ports over 4 workers reach more than one.
        let spread: std::collections::HashSet<usize> = (0..64)
            .map(|p| worker_for(steering, &[], SocketAddr::new(a.ip(), 5000 + p), 4))
            .collect();
        assert!(spread.len() > 1, "{spread:?}");
    }

    #[test]
    fn a_full_channel_drops_and_counts_without_stalling_the_other_worker() {
        let steering = CidSteering::new(1);
        let (tx0, mut rx0) = mpsc::channel(2);
        let (tx1, mut rx1) = mpsc::channel(2);
        let mut d = Dispatcher::new(steering, vec![tx0, tx1]);
        // Worker 0 does not read: 5 datagrams for it, 2 fit.
        for i in 0..5u8 {
            d.hand(datagram(&[0x40, 0xe0, 0, i], "127.0.0.1:1"));
        }
        // Worker 1 reads each one: none dropped.
        for i in 0..5u8 {
            d.hand(datagram(&[0x40, 0xe0, 1, i], "127.0.0.1:1"));
            assert_eq!(rx1.try_recv().expect("handed over").data[3], i);
        }
        let r = d.report();
        assert_eq!(r.capacity, 2);
        assert_eq!(r.datagrams, [2, 5]);
        assert_eq!(r.dropped, [3, 0]);
        assert_eq!(r.by_source, 0);
        // The first two are the ones kept, in order.
        assert_eq!(rx0.try_recv().unwrap().data[3], 0);
        assert_eq!(rx0.try_recv().unwrap().data[3], 1);
        assert!(rx0.try_recv().is_err());
        // A worker that is gone: dropped and counted too.
        drop(rx1);
        d.hand(datagram(&[0x40, 0xe0, 1], "127.0.0.1:1"));
        assert_eq!(d.report().dropped, [3, 1]);
        // A datagram without the byte: placed by its source, and counted so.
        d.hand(datagram(&[0x40], "127.0.0.1:1"));
        let r = d.report();
        assert_eq!(r.by_source, 1);
        assert_eq!(
            r.datagrams.iter().sum::<u64>() + r.dropped.iter().sum::<u64>(),
            12,
            "every datagram handed over or counted as dropped"
        );
    }

    #[test]
    fn reports_add_up_over_listen_addresses() {
        let mut a = DispatchReport {
            capacity: 4,
            datagrams: vec![1, 2],
            dropped: vec![0, 1],
            by_source: 1,
            ..DispatchReport::default()
        };
        a.add(&a.clone());
        assert_eq!(
            (a.datagrams, a.dropped, a.by_source),
            (vec![2, 4], vec![0, 2], 2)
        );
    }
}
