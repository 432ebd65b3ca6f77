//! A worker's shutdown as its HTTP/3 tasks see it: whether it has begun, and what it waits
//! for (connections yet to send their GOAWAY, requests being answered).

use std::{
    cell::{Cell, RefCell},
    future::Future,
    pin::Pin,
    rc::Rc,
    task::{Context, Poll},
};

use crate::h3::waiters::{Slot, Waiters};

/// A worker's shutdown as its HTTP/3 tasks see it, and what it waits for.
#[derive(Debug, Default)]
pub(super) struct Shutdown {
    started: Cell<bool>,
    /// The connections' tasks waiting for it: one slot each, for as long as it waits.
    waiting: RefCell<Waiters>,
    /// Connections serving requests that have not sent their GOAWAY.
    pub(super) unannounced: Cell<usize>,
    /// Requests being answered.
    pub(super) requests: Cell<usize>,
}

impl Shutdown {
    pub(super) fn start(&self) {
        self.started.set(true);
        self.waiting.borrow_mut().wake_all();
    }

    /// Ready once the shutdown has begun.
    pub(super) const fn started(&self) -> Started<'_> {
        Started {
            shutdown: self,
            slot: Slot::new(),
        }
    }

    /// Tasks waiting for the shutdown to begin.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.waiting.borrow().len()
    }

    /// Every connection has sent GOAWAY and every request it let finish is answered.
    pub(super) fn settled(&self) -> bool {
        self.started.get() && self.unannounced.get() == 0 && self.requests.get() == 0
    }
}

/// [`Shutdown::started`]: a task's wait for the shutdown, in one slot however often it is
/// polled, and none once it is dropped.
pub(super) struct Started<'a> {
    shutdown: &'a Shutdown,
    slot: Slot,
}

impl Future for Started<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if this.shutdown.started.get() {
            return Poll::Ready(());
        }
        this.shutdown
            .waiting
            .borrow_mut()
            .wait(&mut this.slot, cx.waker());
        Poll::Pending
    }
}

impl Drop for Started<'_> {
    fn drop(&mut self) {
        self.shutdown.waiting.borrow_mut().leave(&mut self.slot);
    }
}

/// Counts one in a [`Shutdown`] counter while it lives (a dropped task counts out too).
pub(super) struct Counted {
    shutdown: Rc<Shutdown>,
    counter: fn(&Shutdown) -> &Cell<usize>,
}

impl Counted {
    pub(super) fn new(shutdown: &Rc<Shutdown>, counter: fn(&Shutdown) -> &Cell<usize>) -> Self {
        let c = counter(shutdown);
        c.set(c.get() + 1);
        Self {
            shutdown: Rc::clone(shutdown),
            counter,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let c = (self.counter)(&self.shutdown);
        c.set(c.get() - 1);
    }
}
