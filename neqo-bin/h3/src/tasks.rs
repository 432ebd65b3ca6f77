//! A connection's futures, run on the driver's thread: the `h3` crate is written as futures
//! over its `quic` traits, and the driver is not an executor. Each connection keeps its tasks
//! here; [`Tasks::run`] polls the ones whose waker fired since, so a turn costs the tasks that
//! have something to do, not every request the connection holds.
//!
//! Most wakers fire on this thread, from the mailbox the pump fills; a task that waits for
//! work elsewhere (a file read on tokio's blocking pool) is woken from another thread, so the
//! flags are atomics and a [`Notifier`] shared by all of an application's connections tells
//! the application which connection to drive and wakes the driver's wait.

use std::{
    cell::RefCell,
    future::Future,
    pin::Pin,
    rc::Rc,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
};

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

/// Which connections have woken tasks, for an application with many: it drives those, and
/// its driver's wait is woken when a task is woken from another thread.
#[derive(Debug, Default)]
pub struct Notifier {
    ready: Mutex<Vec<u64>>,
    waker: Mutex<Option<Waker>>,
}

impl Notifier {
    /// A notifier to share between an application's connections.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The connections woken since the last call (their keys, each once per wake-up).
    pub fn take_ready(&self) -> Vec<u64> {
        std::mem::take(&mut *self.ready.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// For [`Application::poll_wake`](neqo_driver::Application::poll_wake): ready when a
    /// connection has been woken; else the driver's waker is kept for the next wake.
    pub fn poll(&self, cx: &mut Context<'_>) -> Poll<()> {
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        if self
            .ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
        {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// A waker that marks connection `key` as woken: for work of an application's own
    /// (not a task's) that waits on something else and must be driven when it is done.
    #[must_use]
    pub fn waker(self: &Arc<Self>, key: u64) -> Waker {
        Waker::from(Arc::new(Keyed {
            notifier: Arc::clone(self),
            key,
        }))
    }

    fn notify(&self, key: u64) {
        self.ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(key);
        if let Some(w) = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            w.wake();
        }
    }
}

/// What [`Notifier::waker`] wakes.
struct Keyed {
    notifier: Arc<Notifier>,
    key: u64,
}

impl Wake for Keyed {
    fn wake(self: Arc<Self>) {
        self.notifier.notify(self.key);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notifier.notify(self.key);
    }
}

/// A connection's wake state: which of its tasks are woken, and whom to tell.
#[derive(Debug, Default)]
struct Connection {
    any: AtomicBool,
    /// The slots of the tasks woken since the last run, each once per wake-up.
    woken: Mutex<Vec<usize>>,
    key: u64,
    notifier: Option<Arc<Notifier>>,
}

/// What a task's waker sets: its own flag, its slot in its connection's woken list, and its
/// connection's flag.
struct Flag {
    woken: AtomicBool,
    slot: usize,
    conn: Arc<Connection>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.woken.swap(true, Ordering::AcqRel) {
            // Listed already, not yet polled.
            return;
        }
        self.conn
            .woken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.slot);
        if !self.conn.any.swap(true, Ordering::AcqRel)
            && let Some(n) = &self.conn.notifier
        {
            n.notify(self.conn.key);
        }
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
    /// Runs `f` on the driver's thread from the connection's next [`Engine::drive`](crate::Engine::drive) on.
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
    conn: Arc<Connection>,
    /// The slots a run visits, kept for its allocation.
    due: Vec<usize>,
    /// The tasks a run starts, kept for its allocation.
    starting: Vec<LocalFuture>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tasks({} running)", self.len())
    }
}

impl Tasks {
    /// Tasks whose wake-ups are told to `notifier` as `key`.
    #[must_use]
    pub fn notifying(notifier: Arc<Notifier>, key: u64) -> Self {
        Self {
            conn: Arc::new(Connection {
                key,
                notifier: Some(notifier),
                ..Connection::default()
            }),
            ..Self::default()
        }
    }

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

    /// Whether a task is woken or new, so that [`Tasks::run`] has something to do.
    #[must_use]
    pub fn ready(&self) -> bool {
        self.conn.any.load(Ordering::Acquire) || !self.spawner.0.borrow().is_empty()
    }

    /// Polls the new tasks and the woken ones, once each. Returns whether any was polled.
    /// Only those are visited: a woken task's waker listed its slot.
    pub fn run(&mut self) -> bool {
        let mut new = std::mem::take(&mut self.starting);
        std::mem::swap(&mut new, &mut *self.spawner.0.borrow_mut());
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        for future in new.drain(..) {
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slots.push(None);
                self.slots.len() - 1
            });
            // Woken already, and listed here rather than in the connection's list.
            let flag = Arc::new(Flag {
                woken: AtomicBool::new(true),
                slot,
                conn: Arc::clone(&self.conn),
            });
            self.slots[slot] = Some(Task {
                future,
                waker: Waker::from(Arc::clone(&flag)),
                flag,
            });
            due.push(slot);
        }
        self.starting = new;
        let any = self.conn.any.swap(false, Ordering::AcqRel);
        if !any && due.is_empty() {
            self.due = due;
            return false;
        }
        due.append(
            &mut self
                .conn
                .woken
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for &i in &due {
            // A slot freed (and maybe taken by a new task) since its waker fired: the flag
            // is the current task's.
            let Some(task) = self.slots.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            if !task.flag.woken.swap(false, Ordering::AcqRel) {
                continue;
            }
            let mut cx = Context::from_waker(&task.waker);
            if task.future.as_mut().poll(&mut cx).is_ready() {
                self.slots[i] = None;
                self.free.push(i);
            }
        }
        self.due = due;
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

    /// Counts its wakes.
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_wake_from_another_thread_names_the_connection_and_wakes_the_driver() {
        let notifier = Notifier::new();
        let mut tasks = Tasks::notifying(Arc::clone(&notifier), 7);
        let parked: Arc<Mutex<Option<Waker>>> = Arc::default();
        let p = Arc::clone(&parked);
        let done = Rc::new(Cell::new(false));
        let d = Rc::clone(&done);
        tasks.spawner().spawn(async move {
            let mut first = true;
            std::future::poll_fn(|cx| {
                if first {
                    first = false;
                    *p.lock().unwrap() = Some(cx.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
            d.set(true);
        });
        tasks.run();
        let driver = Arc::new(CountingWaker(std::sync::atomic::AtomicUsize::new(0)));
        let driver_waker = Waker::from(Arc::clone(&driver));
        let mut cx = Context::from_waker(&driver_waker);
        // Spawning and running happen in the application's own calls: nothing to tell.
        assert!(notifier.take_ready().is_empty());
        assert!(notifier.poll(&mut cx).is_pending());
        let w = parked.lock().unwrap().take().unwrap();
        std::thread::spawn(move || w.wake()).join().unwrap();
        assert_eq!(driver.0.load(Ordering::Relaxed), 1, "the driver woken");
        assert!(notifier.poll(&mut cx).is_ready());
        assert_eq!(notifier.take_ready(), vec![7]);
        assert!(tasks.ready());
        tasks.run();
        assert!(done.get() && tasks.len() == 0);
    }
}
