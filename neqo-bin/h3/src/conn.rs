//! One HTTP/3 connection's engine: its [`Mailbox`](super::mailbox::Mailbox) and its
//! [`Tasks`], driven from the application's callbacks with the quinn-proto connection in
//! hand.

use std::time::Instant;

use quinn_proto::{Connection, Event};

use super::{
    handles::H3Connection,
    mailbox::Shared,
    tasks::{Notifier, Spawner, Tasks},
};

/// Rounds of "run the tasks, carry their work" per callback: each round moves a frame per
/// stream, so a callback is bounded; what is left runs at the next turn
/// ([`Engine::pending`]).
const ROUNDS: usize = 64;

/// An HTTP/3 connection's state beside its quinn-proto connection.
#[derive(Debug, Default)]
pub struct Engine {
    mailbox: Shared,
    tasks: Tasks,
}

impl Engine {
    /// A fresh engine: start its tasks with [`Engine::spawner`] over [`Engine::transport`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An engine whose tasks' wake-ups are told to `notifier` as `key` (an application with
    /// many connections drives the ones it names).
    #[must_use]
    pub fn notifying(notifier: std::sync::Arc<Notifier>, key: u64) -> Self {
        Self {
            mailbox: Shared::default(),
            tasks: Tasks::notifying(notifier, key),
        }
    }

    /// `h3`'s view of the connection, for `h3::server::Connection::new` or
    /// `h3::client::new`.
    #[must_use]
    pub fn transport(&self) -> H3Connection {
        H3Connection::new(std::rc::Rc::clone(&self.mailbox))
    }

    /// Where to start the connection's tasks.
    #[must_use]
    pub fn spawner(&self) -> Spawner {
        self.tasks.spawner()
    }

    /// Takes in an event of the connection and runs what it woke.
    pub fn on_event(&mut self, conn: &mut Connection, event: &Event, now: Instant) {
        self.mailbox.borrow_mut().on_event(conn, event);
        self.drive(conn, now);
    }

    /// Runs the woken tasks and carries their work to the connection, until neither has
    /// anything left or a bounded number of rounds have passed.
    pub fn drive(&mut self, conn: &mut Connection, now: Instant) {
        for _ in 0..ROUNDS {
            let ran = self.tasks.run();
            let (work, wants) = {
                let m = self.mailbox.borrow();
                (m.has_work(), m.wants_streams())
            };
            if work || wants {
                self.mailbox.borrow_mut().pump(conn, now);
            }
            if !ran && !work {
                break;
            }
        }
    }

    /// Whether it has work left for another [`Engine::drive`].
    #[must_use]
    pub fn pending(&self) -> bool {
        self.tasks.ready() || self.mailbox.borrow().has_work()
    }

    /// Tasks not finished.
    #[must_use]
    pub fn tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Caps what is held for `h3` of the connection's received data: at `bytes`, no stream is
    /// read until `h3` takes some. A peer that leaves more unfinished frames than this on its
    /// streams stalls its own connection.
    pub fn limit_held(&self, bytes: usize) {
        self.mailbox.borrow_mut().limit_held(bytes);
    }

    /// Bytes read from quinn-proto and held for `h3`.
    #[must_use]
    pub fn held(&self) -> usize {
        self.mailbox.borrow().held()
    }

    /// The most held for `h3` at once.
    #[must_use]
    pub fn peak_held(&self) -> usize {
        self.mailbox.borrow().peak_held()
    }

    /// Finished streams whose data the peer has not all acknowledged.
    #[must_use]
    pub fn unacked(&self) -> usize {
        self.mailbox.borrow().unacked()
    }

    /// Streams the mailbox keeps.
    #[must_use]
    pub fn streams(&self) -> usize {
        self.mailbox.borrow().streams()
    }

    /// Openers waiting for a stream.
    #[cfg(test)]
    pub(crate) fn open_waiters(&self) -> usize {
        self.mailbox.borrow().open_waiters()
    }

    /// Tasks waiting to accept a stream.
    #[cfg(test)]
    pub(crate) fn accept_waiters(&self) -> usize {
        self.mailbox.borrow().accept_waiters()
    }

    /// Whether the connection has ended (lost, or closed by `h3`).
    #[must_use]
    pub fn ended(&self) -> bool {
        self.mailbox.borrow().ended()
    }
}
