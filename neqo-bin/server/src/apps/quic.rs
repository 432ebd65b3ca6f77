//! A protocol of your own on raw QUIC: a [`QuicApp`] makes a [`QuicSession`] for each
//! connection that negotiates its ALPN, and the session reads and writes the connection's
//! streams (and datagrams) itself, as an application of neqo-driver's does, while the server
//! keeps admission, the receive budget, the metrics and the drain.

use std::{
    cell::Cell,
    net::SocketAddr,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::Instant,
};

use bytes::Bytes;
use neqo_driver::{Driver, IdMap};
use neqo_h3::Notifier;
use quinn_proto::{Connection, ConnectionHandle, Event, VarInt};

use super::panics::{Panicked, caught};

/// Makes a session for each connection of its ALPN. One value serves every connection on
/// every worker, so it is shared (`Send + Sync`); its sessions live on their connection's
/// worker.
pub trait QuicApp: Send + Sync + 'static {
    /// A session for the connection from `peer`, whose handshake has just chosen this app's
    /// ALPN (no stream is open yet). `waker` asks the server to call the session's
    /// [`poll`](QuicSession::poll) soon, from any thread: for work of its own that finishes
    /// elsewhere.
    fn session(&self, peer: SocketAddr, waker: Waker) -> Box<dyn QuicSession>;

    /// The application error code and reason a connection is closed with when its session
    /// (or [`session`](Self::session) making it) panicked: the session is dropped, never
    /// called again, and the worker serves on.
    fn panic_close(&self) -> (VarInt, &'static [u8]) {
        (VarInt::from_u32(1), b"internal error")
    }
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

/// A connection's session, and what closes the connection if it panics.
struct Entry {
    session: Box<dyn QuicSession>,
    panic_close: (VarInt, &'static [u8]),
}

/// The raw-QUIC sessions of one worker.
pub(crate) struct Sessions {
    sessions: IdMap<ConnectionHandle, Entry>,
    notifier: Arc<Notifier>,
    /// Sessions that said, at shutdown, that they have work to finish.
    finishing: Vec<ConnectionHandle>,
    /// Panics caught in the sessions' code, and how many of them the report has.
    panics: Cell<u64>,
    reported_panics: u64,
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
            panics: Cell::new(0),
            reported_panics: 0,
        }
    }
}

impl Sessions {
    /// Whether `ch` is one of its connections.
    pub(crate) fn serves(&self, ch: ConnectionHandle) -> bool {
        !self.sessions.is_empty() && self.sessions.contains_key(&ch)
    }

    /// `ch` negotiated `app`'s ALPN.
    pub(crate) fn start(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        app: &dyn QuicApp,
        now: Instant,
    ) {
        let waker = self.notifier.waker(ch.0 as u64);
        let peer = conn.remote_address();
        let panic_close =
            caught(|| app.panic_close()).unwrap_or((VarInt::from_u32(1), b"internal error"));
        match caught(|| app.session(peer, waker)) {
            Ok(session) => {
                self.sessions.insert(
                    ch,
                    Entry {
                        session,
                        panic_close,
                    },
                );
            }
            Err(p) => self.panicked(ch, conn, panic_close, &p, now),
        }
    }

    /// `ch`'s session panicked (with `p`): counted, logged, its connection closed.
    fn panicked(
        &self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        (code, reason): (VarInt, &'static [u8]),
        p: &Panicked,
        now: Instant,
    ) {
        tracing::error!(
            "raw-QUIC session of {} panicked: {}; its connection {ch:?} is closed",
            conn.remote_address(),
            p.0
        );
        self.panics.set(self.panics.get() + 1);
        conn.close(now, code, Bytes::from_static(reason));
    }

    /// Runs `f` on `ch`'s session, if it has one; a session that panics is dropped (its
    /// drop under the same guard) and its connection closed.
    fn guarded<T>(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        now: Instant,
        f: impl FnOnce(&mut dyn QuicSession, &mut Connection) -> T,
    ) -> Option<T> {
        let entry = self.sessions.get_mut(&ch)?;
        match caught(|| f(entry.session.as_mut(), conn)) {
            Ok(v) => Some(v),
            Err(p) => {
                let panic_close = entry.panic_close;
                let broken = self.sessions.remove(&ch);
                let _ = caught(move || drop(broken));
                self.finishing.retain(|c| *c != ch);
                self.panicked(ch, conn, panic_close, &p, now);
                None
            }
        }
    }

    /// An event of one of its connections.
    pub(crate) fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) {
        self.guarded(ch, conn, now, |s, conn| s.event(conn, event, now));
    }

    /// Polls the sessions whose wakers were woken.
    pub(crate) fn poll(&mut self, driver: &mut Driver, now: Instant) {
        if self.sessions.is_empty() {
            return;
        }
        for key in self.notifier.take_ready() {
            let ch = ConnectionHandle(usize::try_from(key).unwrap_or(usize::MAX));
            if self.sessions.contains_key(&ch) {
                driver.update(ch, |conn| {
                    self.guarded(ch, conn, now, |s, conn| s.poll(conn, now));
                });
            }
        }
    }

    /// Adds the panics caught since the last call to `report`.
    pub(crate) fn report(&mut self, report: &mut crate::ServerReport) {
        let panics = self.panics.get();
        report.app_panics += panics - self.reported_panics;
        self.reported_panics = panics;
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
        let chs: Vec<ConnectionHandle> = self.sessions.keys().copied().collect();
        for ch in chs {
            let finishing = driver.update(ch, |conn| {
                self.guarded(ch, conn, now, |s, conn| s.shutdown(conn, now))
            });
            if finishing == Some(Some(true)) {
                self.finishing.push(ch);
            }
        }
        !self.finishing.is_empty()
    }

    /// Whether the sessions that had work to finish at shutdown are done (one that panics
    /// saying so is, and is counted).
    pub(crate) fn settled(&self) -> bool {
        self.finishing.iter().all(|ch| {
            self.sessions.get(ch).is_none_or(|e| {
                caught(|| e.session.settled()).unwrap_or_else(|p| {
                    tracing::error!("raw-QUIC session panicked in settled(): {}", p.0);
                    self.panics.set(self.panics.get() + 1);
                    true
                })
            })
        })
    }

    /// The code and reason `ch`'s session closes with, if it is one (its app's panic close
    /// if it panics saying so).
    pub(crate) fn close_reason(&self, ch: ConnectionHandle) -> Option<(VarInt, &'static [u8])> {
        self.sessions.get(&ch).map(|e| {
            caught(|| e.session.close_reason()).unwrap_or_else(|p| {
                tracing::error!("raw-QUIC session panicked in close_reason(): {}", p.0);
                self.panics.set(self.panics.get() + 1);
                e.panic_close
            })
        })
    }

    /// Sessions held, for tests of what is freed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }
}
