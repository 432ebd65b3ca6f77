//! [`TxQueue`]: transmits waiting for the kernel, in owned buffers from a pool.

use std::{collections::VecDeque, io};

use crate::{send::Sent, transmit::Transmit};

/// Idle buffers a [`TxQueue`] keeps by default.
pub const DEFAULT_POOL_LIMIT: usize = 64;

#[derive(Debug)]
struct Queued {
    tx: Transmit<Vec<u8>>,
    /// Bytes at the front already finished (a run the kernel took part of).
    start: usize,
}

impl Queued {
    fn transmit(&self) -> Transmit<&[u8]> {
        self.tx.with_contents(&self.tx.contents[self.start..])
    }
}

/// The transmits of one socket waiting for the kernel, in order, each in an owned buffer;
/// and the pool those buffers come from and return to.
///
/// The queue is the only place a transmit waits: what a send did not take (a full socket
/// buffer, or the kernel stopping in the middle of a run) stays at its head, and the next
/// [`flush`](Self::flush) goes on from exactly there. Buffers are recycled, so a steady
/// sender allocates nothing. The pool keeps at most [`pool_limit`](Self::pool_limit)
/// buffers, and only those of the queue's buffer capacity: a burst that queued many
/// transmits gives its memory back once they are sent, and a small buffer pushed for a
/// short reply never comes back to serve a full-size transmit.
///
/// Every datagram pushed ends up sent or dropped (both counted in the socket's stats) or is
/// still queued: `pushed_datagrams() == stats.tx.datagrams + stats.tx_dropped.total() +
/// queued_datagrams()` for a queue that is a socket's only sender.
#[derive(Debug)]
pub struct TxQueue {
    queue: VecDeque<Queued>,
    pool: Vec<Vec<u8>>,
    pool_limit: usize,
    buffer_capacity: usize,
    pushed: u64,
    /// The slice handed to the socket, kept for its allocation.
    scratch: Vec<Transmit<&'static [u8]>>,
}

impl TxQueue {
    /// An empty queue whose fresh buffers hold `buffer_capacity` bytes (a whole GSO run:
    /// [`MAX_UDP_PAYLOAD`](crate::MAX_UDP_PAYLOAD) is the most a transmit can usefully carry).
    ///
    /// The pool keeps up to [`DEFAULT_POOL_LIMIT`] buffers; see [`with_pool_limit`](Self::with_pool_limit).
    #[must_use]
    pub fn new(buffer_capacity: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            pool: Vec::new(),
            pool_limit: DEFAULT_POOL_LIMIT,
            buffer_capacity,
            pushed: 0,
            scratch: Vec::new(),
        }
    }

    /// Keeps at most `limit` idle buffers: about the most transmits queued at once in steady
    /// sending (a flush's worth, and what is generated meanwhile). Buffers returned beyond it
    /// are freed.
    #[must_use]
    pub fn with_pool_limit(mut self, limit: usize) -> Self {
        self.pool_limit = limit;
        self.pool.truncate(limit);
        self
    }

    /// Idle buffers the pool keeps at most.
    #[must_use]
    pub const fn pool_limit(&self) -> usize {
        self.pool_limit
    }

    /// Idle buffers in the pool now.
    #[must_use]
    pub fn pooled(&self) -> usize {
        self.pool.len()
    }

    /// An empty buffer from the pool, with at least the queue's buffer capacity.
    pub fn take_buffer(&mut self) -> Vec<u8> {
        let mut buf = self
            .pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.buffer_capacity));
        buf.clear();
        buf
    }

    /// Returns a buffer to the pool (one taken and not pushed, say); freed if it is smaller
    /// than the queue's buffer capacity or the pool is full.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if buf.capacity() >= self.buffer_capacity && self.pool.len() < self.pool_limit {
            self.pool.push(buf);
        }
    }

    /// Queues `transmit`, its buffer taken from the pool ([`take_buffer`](Self::take_buffer))
    /// or not; the buffer goes back to the pool once it is sent.
    pub fn push(&mut self, transmit: Transmit<Vec<u8>>) {
        let queued = Queued {
            tx: transmit,
            start: 0,
        };
        self.pushed += queued.transmit().datagrams() as u64;
        self.queue.push_back(queued);
    }

    /// Transmits waiting (a partly sent one counts as one).
    #[must_use]
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Datagrams waiting.
    #[must_use]
    pub fn queued_datagrams(&self) -> usize {
        self.queue.iter().map(|q| q.transmit().datagrams()).sum()
    }

    /// Datagrams ever pushed.
    #[must_use]
    pub const fn pushed_datagrams(&self) -> u64 {
        self.pushed
    }

    /// Hands everything queued to `send` (e.g. [`UdpSocketState::send`](crate::UdpSocketState::send)
    /// or `Socket::send`) once, and keeps what it did not finish. Returns how many transmits
    /// were finished.
    ///
    /// # Errors
    /// `send`'s: `WouldBlock` when it finished nothing, or a broken socket's error.
    pub fn flush(
        &mut self,
        send: impl FnOnce(&[Transmit<&[u8]>]) -> io::Result<Sent>,
    ) -> io::Result<usize> {
        if self.queue.is_empty() {
            return Ok(0);
        }
        let mut transmits = recycle(std::mem::take(&mut self.scratch));
        transmits.extend(self.queue.iter().map(Queued::transmit));
        let result = send(&transmits);
        self.scratch = recycle(transmits);
        let sent = result?;
        let done = sent.transmits.min(self.queue.len());
        for _ in 0..done {
            if let Some(q) = self.queue.pop_front() {
                self.recycle(q.tx.contents);
            }
        }
        if sent.partial > 0
            && let Some(head) = self.queue.front_mut()
        {
            debug_assert!(
                head.tx
                    .segment_size
                    .is_some_and(|s| s > 0 && sent.partial % s == 0),
                "partial progress is whole segments"
            );
            head.start = (head.start + sent.partial).min(head.tx.contents.len());
        }
        Ok(done)
    }
}

/// An empty vector of another lifetime on the same allocation (std collects in place when
/// the element layouts match), so the per-flush `Transmit` slice is not reallocated.
fn recycle<'b>(mut v: Vec<Transmit<&[u8]>>) -> Vec<Transmit<&'b [u8]>> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EcnCodepoint;

    fn tx(buf: Vec<u8>, seg: Option<usize>) -> Transmit<Vec<u8>> {
        Transmit::new("127.0.0.1:9".parse().unwrap(), buf)
            .with_ecn(Some(EcnCodepoint::Ect0))
            .with_segment_size(seg)
    }

    fn filled(q: &mut TxQueue, bytes: &[u8]) -> Vec<u8> {
        let mut b = q.take_buffer();
        b.extend_from_slice(bytes);
        b
    }

    #[test]
    fn flush_keeps_what_was_not_taken_and_resumes_mid_run() {
        let mut q = TxQueue::new(2048);
        let run: Vec<u8> = (0..30u8).collect();
        let b = filled(&mut q, &run);
        q.push(tx(b, Some(10)));
        let b = filled(&mut q, b"tail");
        q.push(tx(b, None));
        assert_eq!(q.pushed_datagrams(), 4);
        assert_eq!(q.queued_datagrams(), 4);

        // The kernel takes the first segment of the run, then blocks.
        let taken = q
            .flush(|ts| {
                assert_eq!(ts.len(), 2);
                assert_eq!(ts[0].contents, &run[..]);
                assert_eq!(ts[0].ecn, Some(EcnCodepoint::Ect0));
                Ok(Sent {
                    transmits: 0,
                    partial: 10,
                })
            })
            .unwrap();
        assert_eq!(taken, 0);
        assert_eq!(q.queued_datagrams(), 3);
        assert_eq!(q.queue[0].transmit().datagrams(), 2);

        // The next flush starts where that one stopped.
        let taken = q
            .flush(|ts| {
                assert_eq!(ts[0].contents, &run[10..]);
                assert_eq!(ts[0].segment_size, Some(10));
                assert_eq!(ts[1].contents, b"tail");
                Ok(Sent {
                    transmits: 2,
                    partial: 0,
                })
            })
            .unwrap();
        assert_eq!(taken, 2);
        assert!(q.is_empty());
        assert_eq!(q.queued_datagrams(), 0);
    }

    #[test]
    fn would_block_keeps_everything_and_buffers_are_reused() {
        let mut q = TxQueue::new(2048);
        let b = filled(&mut q, b"x");
        let ptr = b.as_ptr();
        q.push(tx(b, None));
        let e = q
            .flush(|_| Err(io::ErrorKind::WouldBlock.into()))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(q.len(), 1);
        q.flush(|ts| {
            Ok(Sent {
                transmits: ts.len(),
                partial: 0,
            })
        })
        .unwrap();
        assert!(q.is_empty());
        let again = q.take_buffer();
        assert_eq!(again.as_ptr(), ptr, "the sent buffer came back to the pool");
        assert!(again.is_empty());
        // An empty queue calls nothing.
        assert_eq!(q.flush(|_| unreachable!()).unwrap(), 0);
    }

    fn send_all(ts: &[Transmit<&[u8]>]) -> io::Result<Sent> {
        Ok(Sent {
            transmits: ts.len(),
            partial: 0,
        })
    }

    /// A burst's buffers are freed once sent, down to the pool's limit, and a short buffer
    /// pushed for a small reply is freed rather than pooled.
    #[test]
    fn the_pool_keeps_its_limit_and_only_full_size_buffers() {
        let mut q = TxQueue::new(2048).with_pool_limit(4);
        for _ in 0..100 {
            let b = filled(&mut q, b"burst");
            q.push(tx(b, None));
        }
        assert_eq!(q.flush(send_all).unwrap(), 100);
        assert_eq!(q.pooled(), 4);
        q.push(tx(b"a short reply".to_vec(), None));
        let b = q.take_buffer();
        q.push(tx(b, None));
        assert_eq!(q.pooled(), 3);
        q.flush(send_all).unwrap();
        assert_eq!(
            q.pooled(),
            4,
            "the full-size buffer back, the short one freed"
        );
        for _ in 0..4 {
            assert!(q.take_buffer().capacity() >= 2048);
        }
    }
}
