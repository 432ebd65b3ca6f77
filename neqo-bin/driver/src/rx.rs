//! The receive side: a batch from every path into the endpoint and its connections.

use std::{
    io,
    time::{Duration, Instant},
};

use neqo_udp::{Datagram, quinn};
use quinn_proto::DatagramEvent;

use super::{Admission, Application, Driver};

/// Receive batches taken from each path per turn before the driver processes and sends
/// again. One: answering every batch at once (ACKs, and new data on the ACKs' credit) keeps
/// the peer's sending pipelined with our processing, and whatever is left is read next turn,
/// as the socket stays ready. (`docs/records/performance.md` has the measurement.)
const RECV_BUDGET: usize = 1;

/// How long the driver counts as behind after datagrams were lost before it read them (a
/// full socket buffer): long enough that a flood, once cheap to read, keeps counting as one.
pub const BEHIND_HOLD: Duration = Duration::from_secs(1);

/// The destination connection ID of `data` when it opens with a QUIC v1 Initial packet
/// (long header, type 0, a version other than Version Negotiation's 0).
pub(super) fn initial_dcid(data: &[u8]) -> Option<&[u8]> {
    let first = *data.first()?;
    if first & 0x80 == 0 || (first >> 4) & 0x03 != 0 || data.get(1..5)? == [0; 4] {
        return None;
    }
    let len = usize::from(*data.get(5)?);
    // RFC 9000 section 17.2: at most 20 bytes in QUIC v1.
    if len > 20 {
        return None;
    }
    data.get(6..6 + len)
}

impl Driver {
    /// Takes up to `RECV_BUDGET` batches from every path into the endpoint.
    ///
    /// # Errors
    /// A socket error other than `WouldBlock`.
    pub fn receive<A: Application>(&mut self, app: &mut A, now: Instant) -> io::Result<()> {
        let mut rx = std::mem::take(&mut self.rx);
        let mut result = Ok(());
        'budget: for _ in 0..RECV_BUDGET {
            let mut any = false;
            for path in 0..self.paths.len() {
                match self.paths[path].io.recv(&mut rx) {
                    Ok(()) => any = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => {
                        result = Err(e);
                        break 'budget;
                    }
                }
                let behind = self.fell_behind(path, now);
                for d in rx.drain(..) {
                    if behind
                        && let Some(dcid) = initial_dcid(&d.data)
                        && !app.screen_initial(d.source, dcid, now)
                    {
                        self.counters.initials_shed += 1;
                        continue;
                    }
                    self.on_datagram(app, path, d, now);
                }
            }
            if !any {
                break;
            }
        }
        self.rx = rx;
        result
    }

    /// Notes a batch received on `path`; returns whether the driver is behind: datagrams
    /// for one of its paths were lost before it read them, since its last batch or within
    /// [`BEHIND_HOLD`] before. (A full batch alone is not a sign: a burst of a few hundred
    /// connections from one address fills batches that the worker takes in well in time.)
    fn fell_behind(&mut self, path: usize, now: Instant) -> bool {
        let p = &mut self.paths[path];
        let overflows = p.io.overflows();
        if overflows > p.overflows {
            self.behind_until = Some(now + BEHIND_HOLD);
        }
        p.overflows = overflows;
        self.behind_until.is_some_and(|t| t > now)
    }

    fn on_datagram<A: Application>(&mut self, app: &mut A, path: usize, d: Datagram, now: Instant) {
        let queue = &mut self.paths[path].queue;
        let mut buf = queue.take_buffer();
        self.counters.rx_ecn.add(d.ecn.map(Into::into), 1);
        let event = neqo_udp::quinn::handle(&mut self.conns.endpoint, now, d, &mut buf);
        let mut retry = false;
        let response = match event {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(c) = self.conns.get_mut(ch.0) {
                    c.conn.handle_event(event);
                    self.conns.touch(ch.0);
                }
                None
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                // A driver that is shutting down takes no new connections.
                let admission = if self.shutting_down() {
                    Admission::Refuse
                } else {
                    app.admit(self.conns.len(), &incoming, now)
                };
                match admission {
                    Admission::Accept(config) => {
                        match self.conns.endpoint.accept(incoming, now, &mut buf, config) {
                            Ok((ch, conn)) => {
                                self.counters.accepted += 1;
                                self.conns.insert(ch, conn, path, now);
                                if let Some(c) = self.conns.get_mut(ch.0) {
                                    app.accepted(ch, &mut c.conn, now);
                                }
                                None
                            }
                            Err(e) => {
                                tracing::debug!("accept failed: {}", e.cause);
                                e.response
                            }
                        }
                    }
                    Admission::Retry => match self.conns.endpoint.retry(incoming, &mut buf) {
                        Ok(t) => {
                            retry = true;
                            Some(t)
                        }
                        // It answered a Retry already: refused rather than retried again.
                        Err(e) => {
                            self.counters.refused += 1;
                            Some(self.conns.endpoint.refuse(e.into_incoming(), &mut buf))
                        }
                    },
                    Admission::Refuse => {
                        self.counters.refused += 1;
                        Some(self.conns.endpoint.refuse(incoming, &mut buf))
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => Some(t),
            None => None,
        };
        let p = &mut self.paths[path];
        match response {
            // A reply that no connection owns (Version Negotiation, Retry, a refusal, a
            // stateless reset) is the one thing a peer makes the driver send for free, and
            // a flood of datagrams asks for one each: it waits only while the path's queue is
            // under its limit, and in a buffer of its own size.
            Some(_) if p.queue.len() >= p.queue_limit => {
                self.counters.stateless_dropped += 1;
                p.queue.recycle(buf);
            }
            Some(t) => {
                self.counters.retries += u64::from(retry);
                self.counters.tx_ecn.add(t.ecn, 1);
                let reply = buf[..t.size].to_vec();
                p.queue.recycle(buf);
                p.queue.push(quinn::queued(&t, reply));
            }
            None => p.queue.recycle(buf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::initial_dcid;

    #[test]
    fn initials_are_told_by_their_first_packet() {
        // Long header, type Initial, version 1, an 8-byte DCID.
        let mut d = vec![0xc3, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0];
        assert_eq!(initial_dcid(&d), Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]));
        // Other long-header types: 0-RTT, Handshake, Retry.
        for t in 1..4u8 {
            d[0] = 0xc0 | (t << 4);
            assert_eq!(initial_dcid(&d), None, "type {t}");
        }
        d[0] = 0xc3;
        // Version Negotiation (version 0), a short header, a DCID past 20 bytes or past the
        // datagram's end, an empty datagram.
        assert_eq!(initial_dcid(&[0xc3, 0, 0, 0, 0, 1, 9]), None);
        assert_eq!(initial_dcid(&[0x43, 1, 2, 3, 4, 5, 6]), None);
        assert_eq!(initial_dcid(&[0xc3, 0, 0, 0, 1, 21]), None);
        assert_eq!(initial_dcid(&[0xc3, 0, 0, 0, 1, 8, 1, 2]), None);
        assert_eq!(initial_dcid(&[]), None);
        // An empty DCID is still an Initial's.
        assert_eq!(initial_dcid(&[0xc3, 0, 0, 0, 1, 0]), Some(&[][..]));
    }
}
