//! What the protocol on top of the driver implements: [`Application`].

use std::{net::SocketAddr, sync::Arc, task::Context, task::Poll, time::Instant};

use quinn_proto::{Connection, ConnectionHandle, Event, Incoming, ServerConfig, VarInt};

use super::Driver;

/// What the driver does with a new incoming connection.
#[derive(Debug)]
pub enum Admission {
    /// Accept it, with this server config instead of the endpoint's if given (e.g. to give
    /// the connection its own qlog stream).
    Accept(Option<Arc<ServerConfig>>),
    /// Ask the client to prove its address first: a Retry, which costs no state. (Refused
    /// instead when the Initial already answered a Retry.)
    Retry,
    /// Refuse it with `CONNECTION_REFUSED`.
    Refuse,
}

/// The protocol on top of the driver: reacts to connection events.
pub trait Application {
    /// A peer opens a connection with `incoming` (its address, whether that is validated);
    /// `open` connections exist already.
    fn admit(&mut self, _open: usize, _incoming: &Incoming, _now: Instant) -> Admission {
        Admission::Accept(None)
    }

    /// While the driver is behind (datagrams for it were lost before it read them, within
    /// the last [`BEHIND_HOLD`](super::BEHIND_HOLD)), each datagram that opens with an
    /// Initial packet is shown here first, by its `source` and destination
    /// connection ID, before quinn-proto spends any crypto on it; `false` drops it unread.
    /// The default keeps every one.
    fn screen_initial(&mut self, _source: SocketAddr, _dcid: &[u8], _now: Instant) -> bool {
        true
    }

    /// A connection was accepted at `now`.
    fn accepted(&mut self, _ch: ConnectionHandle, _conn: &mut Connection, _now: Instant) {}

    /// An event of a connection.
    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant);

    /// A connection is drained and about to be dropped.
    fn drained(&mut self, _ch: ConnectionHandle, _conn: &Connection) {}

    /// Called every turn: may open connections. Returns when it wants to be called again at
    /// the latest.
    fn poll(&mut self, _driver: &mut Driver, _now: Instant) -> Option<Instant> {
        None
    }

    /// Work of the application's own finished (a file read, say): the driver's wait polls
    /// this beside the sockets and timers, and runs a turn when it is ready.
    fn poll_wake(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }

    /// Whether the driver may return (once everything queued is sent).
    fn done(&self) -> bool {
        false
    }

    /// The driver is shutting down and has a drain period ([`DriverConfig::drain`](crate::DriverConfig::drain)): the
    /// application tells its peers so where its protocol can (HTTP/3's GOAWAY) and returns
    /// whether it has work under way worth letting finish. If so, the driver refuses new
    /// connections and serves the open ones until [`settled`](Self::settled) or the period
    /// ends; then (or at once) it closes every connection.
    fn shutdown(&mut self, _driver: &mut Driver, _now: Instant) -> bool {
        false
    }

    /// After [`shutdown`](Self::shutdown) returned `true`: whether the work it let finish is
    /// done (checked after every turn). After [`cut`](Self::cut) returned `true`: whether the
    /// peers have what it sent them (its resets acknowledged).
    fn settled(&self) -> bool {
        true
    }

    /// A shutdown is about to close every connection with work still under way: the drain
    /// period is over, or there is none. The application ends that work where its protocol
    /// can say so, so that a peer reads it as cut and never as "not processed" (a stream
    /// reset), and counts and logs each piece. It returns whether it sent anything the
    /// peers should get first: then the driver waits for [`settled`](Self::settled), for
    /// at most a short grace, before it closes (quinn-proto sends nothing but the close
    /// once a connection is closed, so a reset queued with it would be lost).
    fn cut(&mut self, _driver: &mut Driver, _now: Instant) -> bool {
        false
    }

    /// The application error code and reason a shutdown closes connection `ch` with.
    fn close_reason(&self, _ch: ConnectionHandle) -> (VarInt, &'static [u8]) {
        (VarInt::from_u32(0), b"shutdown")
    }
}
