//! A protocol of your own on raw QUIC: a [`QuicApp`] makes a [`QuicSession`] for each
//! connection that negotiates its ALPN, and the session reads and writes the connection's
//! streams (and datagrams) itself, as an application of neqo-driver's does, while the server
//! keeps admission, the receive budget, the metrics and the drain.

use std::{
    net::SocketAddr,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::Instant,
};

use neqo_driver::{Driver, IdMap};
use neqo_h3::Notifier;
use quinn_proto::{Connection, ConnectionHandle, Event, VarInt};

/// Makes a session for each connection of its ALPN. One value serves every connection on
/// every worker, so it is shared (`Send + Sync`); its sessions live on their connection's
/// worker.
pub trait QuicApp: Send + Sync + 'static {
    /// A session for the connection from `peer`, whose handshake has just chosen this app's
    /// ALPN (no stream is open yet). `waker` asks the server to call the session's
    /// [`poll`](QuicSession::poll) soon, from any thread: for work of its own that finishes
    /// elsewhere.
    fn session(&self, peer: SocketAddr, waker: Waker) -> Box<dyn QuicSession>;
}

/// One connection's side of your protocol, on its worker's thread.
pub trait QuicSession {
    /// An event of the connection: its streams opened, readable, writable, finished or
    /// stopped; datagrams; the handshake's confirmation; its loss.
    fn event(&mut self, conn: &mut Connection, event: &Event, now: Instant);

    /// Called after its waker was woken, with the connection.
    fn poll(&mut self, _conn: &mut Connection, _now: Instant) {}

    /// The server is shutting down: tell the peer, where the protocol can, and return whether
    /// there is work under way to let finish within the drain period. By default there is
    /// none, and the connection is closed at once.
    fn shutdown(&mut self, _conn: &mut Connection, _now: Instant) -> bool {
        false
    }

    /// After [`shutdown`](Self::shutdown) returned `true`: whether that work is done.
    fn settled(&self) -> bool {
        true
    }

    /// The application error code and reason the server closes the connection with when it
    /// shuts down.
    fn close_reason(&self) -> (VarInt, &'static [u8]) {
        (VarInt::from_u32(0), b"shutdown")
    }
}

/// The raw-QUIC sessions of one worker.
pub(crate) struct Sessions {
    sessions: IdMap<ConnectionHandle, Box<dyn QuicSession>>,
    notifier: Arc<Notifier>,
    /// Sessions that said, at shutdown, that they have work to finish.
    finishing: Vec<ConnectionHandle>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sessions({})", self.sessions.len())
    }
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            sessions: IdMap::default(),
            notifier: Notifier::new(),
            finishing: Vec::new(),
        }
    }
}

impl Sessions {
    /// Whether `ch` is one of its connections.
    pub(crate) fn serves(&self, ch: ConnectionHandle) -> bool {
        !self.sessions.is_empty() && self.sessions.contains_key(&ch)
    }

    /// `ch` negotiated `app`'s ALPN.
    pub(crate) fn start(&mut self, ch: ConnectionHandle, conn: &Connection, app: &dyn QuicApp) {
        let waker = self.notifier.waker(ch.0 as u64);
        self.sessions
            .insert(ch, app.session(conn.remote_address(), waker));
    }

    /// An event of one of its connections.
    pub(crate) fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) {
        if let Some(s) = self.sessions.get_mut(&ch) {
            s.event(conn, event, now);
        }
    }

    /// Polls the sessions whose wakers were woken.
    pub(crate) fn poll(&mut self, driver: &mut Driver, now: Instant) {
        if self.sessions.is_empty() {
            return;
        }
        for key in self.notifier.take_ready() {
            let ch = ConnectionHandle(usize::try_from(key).unwrap_or(usize::MAX));
            if let Some(s) = self.sessions.get_mut(&ch) {
                driver.update(ch, |conn| s.poll(conn, now));
            }
        }
    }

    /// Ready once a session's waker was woken.
    pub(crate) fn poll_wake(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.notifier.poll(cx)
    }

    /// `ch` is lost or drained: its session is dropped.
    pub(crate) fn gone(&mut self, ch: ConnectionHandle) {
        self.sessions.remove(&ch);
        self.finishing.retain(|c| *c != ch);
    }

    /// The server shuts down: each session is told. Returns whether one has work to finish.
    pub(crate) fn shut_down(&mut self, driver: &mut Driver, now: Instant) -> bool {
        for (&ch, s) in &mut self.sessions {
            if driver.update(ch, |conn| s.shutdown(conn, now)) == Some(true) {
                self.finishing.push(ch);
            }
        }
        !self.finishing.is_empty()
    }

    /// Whether the sessions that had work to finish at shutdown are done.
    pub(crate) fn settled(&self) -> bool {
        self.finishing
            .iter()
            .all(|ch| self.sessions.get(ch).is_none_or(|s| s.settled()))
    }

    /// The code and reason `ch`'s session closes with, if it is one.
    pub(crate) fn close_reason(&self, ch: ConnectionHandle) -> Option<(VarInt, &'static [u8])> {
        self.sessions.get(&ch).map(|s| s.close_reason())
    }

    /// Sessions held, for tests of what is freed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }
}
