//! The receive side: a batch from every path into the endpoint and its connections.

use std::{io, time::Instant};

use neqo_udp::{Datagram, TransmitHeader};
use quinn_proto::DatagramEvent;

use super::{Admission, Application, Driver};

/// Receive batches taken from each path per turn before the driver processes and sends
/// again. One: answering every batch at once (ACKs, and new data on the ACKs' credit) keeps
/// the peer's sending pipelined with our processing, and whatever is left is read next turn,
/// as the socket stays ready. (`docs/performance.md` has the measurement.)
const RECV_BUDGET: usize = 1;

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
                for d in rx.drain(..) {
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
                p.queue.push(reply, TransmitHeader::from(&t));
            }
            None => p.queue.recycle(buf),
        }
    }
}
