//! A connection's futures, run on the driver's thread: the `h3` crate is written as futures
//! over its `quic` traits, and the driver is not an executor. Each connection keeps its tasks
//! here; [`Tasks::run`] polls the ones whose waker fired since, so a turn costs the tasks that
//! have something to do, not every request the connection holds.
//!
//! Every waker fires on this thread (the only source of readiness is the mailbox the pump
//! fills), but `Waker` must be `Send + Sync`, so the flags are atomics.

use std::{
    cell::RefCell,
    future::Future,
    pin::Pin,
    rc::Rc,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Wake, Waker},
};

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

/// What a task's waker sets: its own flag and its connection's.
struct Flag {
    woken: AtomicBool,
    any: Arc<AtomicBool>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Relaxed);
        self.any.store(true, Ordering::Relaxed);
    }
}

struct Task {
    future: LocalFuture,
    flag: Arc<Flag>,
    waker: Waker,
}

/// Where tasks start tasks (a server's accept loop, a request each).
#[derive(Clone, Default)]
pub struct Spawner(Rc<RefCell<Vec<LocalFuture>>>);

impl Spawner {
    /// Runs `f` from the connection's next [`Tasks::run`] on.
    pub fn spawn(&self, f: impl Future<Output = ()> + 'static) {
        self.0.borrow_mut().push(Box::pin(f));
    }
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Spawner({} waiting)", self.0.borrow().len())
    }
}

/// A connection's tasks.
#[derive(Default)]
pub struct Tasks {
    slots: Vec<Option<Task>>,
    free: Vec<usize>,
    spawner: Spawner,
    any: Arc<AtomicBool>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tasks({} running)", self.len())
    }
}

impl Tasks {
    /// Where to start tasks.
    #[must_use]
    pub fn spawner(&self) -> Spawner {
        self.spawner.clone()
    }

    /// Tasks not finished.
    #[must_use]
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether every task has finished.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a task is woken or new, so that [`Tasks::run`] has something to do.
    #[must_use]
    pub fn ready(&self) -> bool {
        self.any.load(Ordering::Relaxed) || !self.spawner.0.borrow().is_empty()
    }

    /// Polls the new tasks and the woken ones, once each. Returns whether any was polled.
    pub fn run(&mut self) -> bool {
        let new: Vec<LocalFuture> = std::mem::take(&mut *self.spawner.0.borrow_mut());
        for future in new {
            let flag = Arc::new(Flag {
                woken: AtomicBool::new(true),
                any: Arc::clone(&self.any),
            });
            let task = Task {
                future,
                waker: Waker::from(Arc::clone(&flag)),
                flag,
            };
            match self.free.pop() {
                Some(i) => self.slots[i] = Some(task),
                None => self.slots.push(Some(task)),
            }
            self.any.store(true, Ordering::Relaxed);
        }
        if !self.any.swap(false, Ordering::Relaxed) {
            return false;
        }
        for i in 0..self.slots.len() {
            let Some(task) = &mut self.slots[i] else {
                continue;
            };
            if !task.flag.woken.swap(false, Ordering::Relaxed) {
                continue;
            }
            let mut cx = Context::from_waker(&task.waker);
            if task.future.as_mut().poll(&mut cx).is_ready() {
                self.slots[i] = None;
                self.free.push(i);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, task::Poll};

    use super::*;

    /// Ready on its `n`th poll; counts its polls.
    struct Countdown(Rc<Cell<u32>>, u32, Option<Waker>);

    impl Future for Countdown {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.0.set(self.0.get() + 1);
            if self.0.get() >= self.1 {
                return Poll::Ready(());
            }
            self.2 = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn only_woken_tasks_are_polled_and_finished_ones_leave() {
        let mut tasks = Tasks::default();
        let polls = Rc::new(Cell::new(0));
        let wakers: Rc<RefCell<Vec<Waker>>> = Rc::default();
        let (p, w) = (Rc::clone(&polls), Rc::clone(&wakers));
        tasks.spawner().spawn(async move {
            std::future::poll_fn(|cx| {
                p.set(p.get() + 1);
                if p.get() >= 3 {
                    Poll::Ready(())
                } else {
                    w.borrow_mut().push(cx.waker().clone());
                    Poll::Pending
                }
            })
            .await;
        });
        let idle = Rc::new(Cell::new(0));
        tasks
            .spawner()
            .spawn(Countdown(Rc::clone(&idle), u32::MAX, None));
        assert!(tasks.ready());
        assert!(tasks.run());
        assert_eq!((polls.get(), idle.get(), tasks.len()), (1, 1, 2));
        assert!(!tasks.ready(), "nothing woken");
        assert!(!tasks.run());
        assert_eq!((polls.get(), idle.get()), (1, 1));
        wakers.borrow_mut().pop().unwrap().wake();
        assert!(tasks.ready());
        tasks.run();
        assert_eq!((polls.get(), idle.get()), (2, 1), "only the woken one");
        wakers.borrow_mut().pop().unwrap().wake_by_ref();
        tasks.run();
        assert_eq!((polls.get(), tasks.len()), (3, 1), "finished and gone");
        // Its slot is taken by the next task.
        tasks.spawner().spawn(async {});
        tasks.run();
        assert_eq!((tasks.len(), tasks.slots.len()), (1, 2));
    }
}
