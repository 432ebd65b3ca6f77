//! A worker's shutdown as its HTTP/3 tasks see it: whether it has begun, and what it waits
//! for (connections yet to send their GOAWAY, requests being answered).

use std::{
    cell::{Cell, RefCell},
    future::poll_fn,
    rc::Rc,
    task::{Poll, Waker},
};

/// A worker's shutdown as its HTTP/3 tasks see it, and what it waits for.
#[derive(Debug, Default)]
pub(super) struct Shutdown {
    started: Cell<bool>,
    /// The connections' tasks waiting for it.
    waiting: RefCell<Vec<Waker>>,
    /// Connections serving requests that have not sent their GOAWAY.
    pub(super) unannounced: Cell<usize>,
    /// Requests being answered.
    pub(super) requests: Cell<usize>,
}

impl Shutdown {
    pub(super) fn start(&self) {
        self.started.set(true);
        for w in self.waiting.borrow_mut().drain(..) {
            w.wake();
        }
    }

    pub(super) async fn started(&self) {
        poll_fn(|cx| {
            if self.started.get() {
                return Poll::Ready(());
            }
            self.waiting.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await;
    }

    /// Every connection has sent GOAWAY and every request it let finish is answered.
    pub(super) fn settled(&self) -> bool {
        self.started.get() && self.unannounced.get() == 0 && self.requests.get() == 0
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
