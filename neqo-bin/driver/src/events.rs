//! Routing what happened: due wake-ups from the schedule, and the events of every touched
//! connection to the endpoint and the application.

use std::time::Instant;

use quinn_proto::ConnectionHandle;

use super::{Application, Driver};

impl Driver {
    /// Fires every wake-up due by `now`: the connection's quinn-proto timer if it is due, and
    /// in any case a look at it (a pacer release makes it ready to send again).
    pub(super) fn fire(&mut self, now: Instant) {
        let conns = &mut self.conns;
        self.scheduler.expire(now, |idx, generation| {
            if let Some(c) = conns.get_mut(idx)
                && c.slot.fire(generation)
            {
                if c.conn.poll_timeout().is_some_and(|t| t <= now) {
                    c.conn.handle_timeout(now);
                }
                conns.touch(idx);
            }
        });
    }

    /// Routes the endpoint and application events of touched connections, drops drained ones,
    /// puts the rest in the send round and re-arms their wake-ups.
    pub(super) fn process<A: Application>(&mut self, app: &mut A, now: Instant) {
        while let Some(idx) = self.conns.pop_touched() {
            let ch = ConnectionHandle(idx);
            let Some((endpoint, c)) = self.conns.with_endpoint(idx) else {
                continue;
            };
            let mut drained = false;
            loop {
                let mut progressed = false;
                while let Some(ev) = c.conn.poll_endpoint_events() {
                    progressed = true;
                    drained |= ev.is_drained();
                    if let Some(back) = endpoint.handle_event(ch, ev) {
                        c.conn.handle_event(back);
                    }
                }
                while let Some(ev) = c.conn.poll() {
                    progressed = true;
                    app.event(ch, &mut c.conn, ev, now);
                }
                if !progressed {
                    break;
                }
            }
            if drained {
                if let Some(c) = self.conns.remove(idx) {
                    app.drained(ch, &c.conn);
                    self.counters.drained += 1;
                    let stats = c.conn.stats();
                    self.counters.lost_packets += stats.path.lost_packets;
                    self.counters.add_paths(&stats);
                    if c.conn.side().is_client() && stats.frame_rx.handshake_done == 0 {
                        self.counters.unconfirmed += 1;
                    }
                }
                continue;
            }
            self.conns.make_ready(idx);
            self.arm(idx);
        }
        if self.scheduler.len() > 4 * self.conns.len() + 1024 {
            self.scheduler.compact(self.conns.slots());
        }
    }

    /// Sets a connection's place in the schedule to its next wake-up.
    pub(super) fn arm(&mut self, idx: usize) {
        if let Some(c) = self.conns.get_mut(idx) {
            let at = c.wake_at(self.epoch);
            self.scheduler.arm(idx, &mut c.slot, at);
        }
    }
}
