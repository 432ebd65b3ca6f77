//! The send round: every ready connection is asked for a transmit in turn (round robin), as
//! many segments as its pacer and the socket allow, into its path's queue; a syscall's worth
//! at a time is flushed, until every connection is idle or paced or the sockets are full.
//!
//! A connection whose transmit filled a GSO send is asked again before the others, up to
//! [`RUN_TRANSMITS`] in a row, its pacer consulted each time. Its transmits then sit side by
//! side in one `sendmmsg` and its peer reads them in one wake-up and acknowledges them once.
//! Between them, round robin would put every other ready connection's transmit: each would
//! reach the peer alone, and each costs a wake-up and an acknowledgment, which the server
//! receives and which clocks out the next small transmit. A connection alone in the round
//! goes again at once anyway.

use std::{io, time::Instant};

use neqo_udp::quinn;

use super::{
    Driver,
    pacer::{BURST_DATAGRAMS, Pacer},
};

/// The most transmits one connection makes in a row in a send round, while each fills a GSO
/// send: 256 KiB at 64 KiB each, a quarter of a syscall's 32 messages.
pub(crate) const RUN_TRANSMITS: usize = 4;

impl Driver {
    /// Polls ready connections for transmits and flushes them, until nothing more goes.
    pub(super) fn transmit(&mut self, now: Instant) -> io::Result<()> {
        for p in &mut self.paths {
            p.blocked = false;
        }
        loop {
            let mut produced = false;
            while self.generate_round(now) {
                produced = true;
                if self
                    .paths
                    .iter()
                    .all(|p| p.blocked || p.queue.len() >= p.queue_limit)
                {
                    break;
                }
            }
            let mut flushed = false;
            for p in &mut self.paths {
                flushed |= p.flush()?;
            }
            if !produced && !flushed {
                break;
            }
        }
        // Connections left in the round (their path is full) sent packets this turn, which
        // moved their quinn-proto timers.
        for i in 0..self.conns.ready_len() {
            if let Some(idx) = self.conns.ready_at(i) {
                self.arm(idx);
            }
        }
        Ok(())
    }

    /// One pass over the send round, one transmit per connection, or up to [`RUN_TRANSMITS`]
    /// in a row for one whose transmits fill a GSO send; returns whether any was produced. A
    /// connection that produced one stays in the round; one that had nothing, or must wait
    /// for its pacer, leaves it until its next event or wake-up.
    fn generate_round(&mut self, now: Instant) -> bool {
        let mut produced = false;
        let wait = Pacer::release_wait(self.conns.paced());
        let mut turns = self.conns.ready_len();
        // Transmits the connection at the front of the round has made in a row.
        let mut run = 0;
        while turns > 0 {
            turns -= 1;
            let in_a_row = std::mem::take(&mut run);
            let Some(idx) = self.conns.pop_ready() else {
                break;
            };
            let Some(c) = self.conns.get_mut(idx) else {
                continue;
            };
            let path = &mut self.paths[c.path];
            if path.blocked || path.queue.len() >= path.queue_limit {
                self.conns.make_ready(idx);
                continue;
            }
            let mtu = usize::from(c.conn.current_mtu());
            let mut max = path.io.max_segments_for(mtu);
            if self.pacing && (c.conn.is_handshaking() || c.conn.is_closed()) {
                // The handshake's flights go out unpaced (the pacer has no RTT sample yet and
                // would hold each flight back by tens of milliseconds), in runs of at most
                // BURST_DATAGRAMS; anti-amplification and the initial window bound them, and
                // RFC 9002 §7.7 lets a sender burst its initial window. So does a
                // CONNECTION_CLOSE: a close held back by the pacer left a shutting-down driver
                // with nothing ready, which ended it with the close unsent, and the peer
                // waited out its idle timeout.
                max = max.min(BURST_DATAGRAMS);
                if c.pacer.release().is_some() {
                    c.pacer.clear_release();
                    self.conns.pacer_checked(idx);
                }
            } else if self.pacing {
                let window = c.conn.congestion_state().window();
                let allowed = c.pacer.allowance(now, window, c.conn.rtt(), mtu, wait);
                self.conns.pacer_checked(idx);
                match allowed {
                    Ok(n) => max = max.min(n),
                    Err(_) => {
                        self.counters.paced_waits += 1;
                        self.arm(idx);
                        continue;
                    }
                }
            }
            let Some(c) = self.conns.get_mut(idx) else {
                continue;
            };
            let path = &mut self.paths[c.path];
            let mut buf = path.queue.take_buffer();
            if let Some(t) = c.conn.poll_transmit(now, max, &mut buf) {
                if self.pacing {
                    c.pacer.consume(t.size);
                }
                let datagrams = t.segment_size.map_or(1, |s| t.size.div_ceil(s)) as u64;
                self.counters.transmits += 1;
                self.counters.tx_ecn.add(t.ecn, datagrams);
                self.counters.max_transmit_datagrams =
                    self.counters.max_transmit_datagrams.max(datagrams);
                path.queue.push(quinn::queued(&t, buf));
                if datagrams >= path.io.max_segments_for(mtu) as u64 && in_a_row + 1 < RUN_TRANSMITS
                {
                    // A full GSO send, and the pacer (asked again first) may let out more:
                    // the next transmit goes beside this one in the same sendmmsg.
                    self.conns.make_ready_next(idx);
                    run = in_a_row + 1;
                    turns += 1;
                } else {
                    self.conns.make_ready(idx);
                }
                produced = true;
            } else {
                path.queue.recycle(buf);
                self.arm(idx);
            }
        }
        produced
    }
}
