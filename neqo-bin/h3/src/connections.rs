//! An application's HTTP/3 connections: an [`Engine`] each, with what the application keeps
//! beside it, driven when a task of theirs was woken (on the driver's thread or off it, through
//! one [`Notifier`]) or when a callback left work undone.

use std::{
    collections::HashMap,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use neqo_driver::Driver;
use quinn_proto::{Connection, ConnectionHandle, Event};

use super::{Engine, tasks::Notifier};

/// The connections, each an [`Engine`] and the application's `T`.
#[derive(Debug)]
pub struct Connections<T> {
    conns: HashMap<ConnectionHandle, (Engine, T)>,
    notifier: Arc<Notifier>,
    /// Connections whose engine stopped at its round limit with work left.
    again: Vec<ConnectionHandle>,
}

impl<T> Default for Connections<T> {
    fn default() -> Self {
        Self {
            conns: HashMap::new(),
            notifier: Notifier::new(),
            again: Vec::new(),
        }
    }
}

impl<T> Connections<T> {
    /// An engine for connection `ch`, its wake-ups told to this set; start its tasks, then
    /// [`insert`](Self::insert) it.
    #[must_use]
    pub fn engine(&self, ch: ConnectionHandle) -> Engine {
        Engine::notifying(Arc::clone(&self.notifier), ch.0 as u64)
    }

    /// Adds `ch` with its engine (from [`engine`](Self::engine)) and `data`.
    pub fn insert(&mut self, ch: ConnectionHandle, engine: Engine, data: T) {
        self.conns.insert(ch, (engine, data));
    }

    /// Takes `ch` out; returns its data.
    pub fn remove(&mut self, ch: ConnectionHandle) -> Option<T> {
        self.conns.remove(&ch).map(|(_, data)| data)
    }

    /// Connections held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Whether `ch` is one of them.
    #[must_use]
    pub fn contains(&self, ch: ConnectionHandle) -> bool {
        self.conns.contains_key(&ch)
    }

    /// Each connection's engine and data.
    pub fn iter(&self) -> impl Iterator<Item = (ConnectionHandle, &Engine, &T)> {
        self.conns.iter().map(|(ch, (e, d))| (*ch, e, d))
    }

    /// The engine and data of `ch`.
    pub fn get_mut(&mut self, ch: ConnectionHandle) -> Option<(&mut Engine, &mut T)> {
        self.conns.get_mut(&ch).map(|(e, d)| (e, d))
    }

    /// Gives `event` of `ch` to its engine; returns its data, if `ch` is one of them.
    pub fn on_event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) -> Option<&mut T> {
        let (engine, data) = self.conns.get_mut(&ch)?;
        engine.on_event(conn, event, now);
        if engine.pending() {
            self.again.push(ch);
        }
        Some(data)
    }

    /// The connections to drive now, each once: those with work left, those woken, and
    /// `also`.
    pub fn due(
        &mut self,
        also: impl IntoIterator<Item = ConnectionHandle>,
    ) -> Vec<ConnectionHandle> {
        let mut due = std::mem::take(&mut self.again);
        due.extend(
            self.notifier
                .take_ready()
                .into_iter()
                .map(|k| ConnectionHandle(usize::try_from(k).unwrap_or(usize::MAX))),
        );
        due.extend(also);
        due.sort_unstable_by_key(|c| c.0);
        due.dedup();
        due
    }

    /// Drives `ch`'s engine with its connection; returns its engine and data, if `ch` is one
    /// of them (and is kept for another turn if it has work left).
    pub fn drive(
        &mut self,
        driver: &mut Driver,
        ch: ConnectionHandle,
        now: Instant,
    ) -> Option<(&mut Engine, &mut T)> {
        let (engine, data) = self.conns.get_mut(&ch)?;
        driver.update(ch, |conn| engine.drive(conn, now));
        if engine.pending() {
            self.again.push(ch);
        }
        Some((engine, data))
    }

    /// Whether a connection has work left for the next turn.
    #[must_use]
    pub fn busy(&self) -> bool {
        !self.again.is_empty()
    }

    /// For [`Application::poll_wake`](neqo_driver::Application::poll_wake): ready when a
    /// task was woken off the driver's thread.
    pub fn poll_wake(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.notifier.poll(cx)
    }
}
