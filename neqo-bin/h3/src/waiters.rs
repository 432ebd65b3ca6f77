//! The tasks waiting for one thing (a stream to accept), each at most once: a
//! waiter polled again replaces its waker in its own slot rather than adding one, and its
//! slot is freed when it is dropped. A list that gained a waker at every `Pending` grew with
//! every poll for as long as the thing did not happen: for a connection's life.

use std::task::Waker;

/// A waiter's place in [`Waiters`], held by the waiter: [`Waiters::wait`] fills it, and
/// [`Waiters::leave`] must be given it back when the waiter is dropped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Slot(Option<usize>);

/// Wakers of the tasks waiting for one thing, one per waiter.
#[derive(Debug, Default)]
pub struct Waiters {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Waiters {
    /// `slot`'s waiter waits, to be woken by `waker`: in its own slot, taken on its first
    /// wait.
    pub fn wait(&mut self, slot: &mut Slot, waker: &Waker) {
        let i = *slot.0.get_or_insert_with(|| {
            self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            })
        });
        match &mut self.slots[i] {
            Some(w) if w.will_wake(waker) => {}
            w => *w = Some(waker.clone()),
        }
    }

    /// `slot`'s waiter is gone: its slot is free for the next.
    pub fn leave(&mut self, slot: &mut Slot) {
        if let Some(i) = slot.0.take() {
            self.slots[i] = None;
            self.free.push(i);
        }
    }

    /// Wakes every waiter (each keeps its slot, for its next wait).
    pub fn wake_all(&mut self) {
        for w in &mut self.slots {
            if let Some(w) = w.take() {
                w.wake();
            }
        }
    }

    /// Waiters holding a slot.
    #[cfg(test)]
    #[must_use]
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether no waiter holds a slot.
    #[cfg(test)]
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
        task::Wake,
    };

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&c), Waker::from(c))
    }

    #[test]
    fn a_waiter_polled_again_keeps_one_slot_and_leaves_none_behind() {
        let mut w = Waiters::default();
        let (a_count, a) = waker();
        let (b_count, b) = waker();
        let (mut sa, mut sb) = (Slot::default(), Slot::default());
        for _ in 0..1000 {
            w.wait(&mut sa, &a);
        }
        w.wait(&mut sb, &b);
        assert_eq!((w.len(), w.slots.len()), (2, 2));
        // A new waker for the same waiter replaces the old one.
        let (c_count, c) = waker();
        w.wait(&mut sa, &c);
        assert_eq!(w.slots.len(), 2);
        w.wake_all();
        assert_eq!(
            (
                a_count.0.load(Ordering::Relaxed),
                b_count.0.load(Ordering::Relaxed),
                c_count.0.load(Ordering::Relaxed)
            ),
            (0, 1, 1)
        );
        // Woken ones keep their slots until they leave; a leaver's slot is reused.
        assert_eq!(w.len(), 2);
        w.leave(&mut sa);
        w.leave(&mut sa);
        assert_eq!((w.len(), sa), (1, Slot::default()));
        let mut sd = Slot::default();
        w.wait(&mut sd, &a);
        assert_eq!((w.len(), w.slots.len()), (2, 2));
        w.leave(&mut sb);
        w.leave(&mut sd);
        assert!(w.is_empty());
        // Nothing to wake once all have left.
        w.wake_all();
        assert_eq!(a_count.0.load(Ordering::Relaxed), 0);
    }
}
