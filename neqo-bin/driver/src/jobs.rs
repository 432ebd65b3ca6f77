//! Work off the driver thread: a job runs on tokio's blocking pool and its result comes back
//! through [`Jobs`], which the application polls from
//! [`Application::poll_wake`](crate::Application::poll_wake), so that a finished job wakes
//! the driver, whose next turn lets the application act on it. The driver thread must never
//! block on a disk (or a network file system); file opens, reads and writes go this way.

use std::{
    collections::VecDeque,
    task::{Context, Poll},
};

use tokio::sync::mpsc;

/// Jobs running on tokio's blocking pool, and their results.
///
/// The channel is unbounded, but holds at most one result per job in flight.
#[derive(Debug)]
pub struct Jobs<M> {
    tx: mpsc::UnboundedSender<M>,
    rx: mpsc::UnboundedReceiver<M>,
    /// Results taken off the channel by [`poll_ready`](Self::poll_ready).
    ready: VecDeque<M>,
}

impl<M: Send + 'static> Default for Jobs<M> {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            tx,
            rx,
            ready: VecDeque::new(),
        }
    }
}

impl<M: Send + 'static> Jobs<M> {
    /// Runs `job` on the blocking pool; its result comes back through [`take`](Self::take).
    /// Must be called inside a tokio runtime.
    pub fn spawn(&self, job: impl FnOnce() -> M + Send + 'static) {
        let tx = self.tx.clone();
        // The result is discarded only if `self` is gone, and with it whoever wanted it.
        drop(tokio::task::spawn_blocking(move || {
            let _ = tx.send(job());
        }));
    }

    /// `Ready` when a result is waiting; otherwise `cx` is woken when one arrives.
    pub fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.ready.is_empty() {
            return Poll::Ready(());
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                self.ready.push_back(m);
                Poll::Ready(())
            }
            // The channel cannot close: `self` holds a sender.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }

    /// The next finished job's result, if any.
    pub fn take(&mut self) -> Option<M> {
        self.ready.pop_front().or_else(|| self.rx.try_recv().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_and_wake() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut jobs = Jobs::default();
            for i in 0..3u32 {
                jobs.spawn(move || i * 10);
            }
            let mut got = Vec::new();
            while got.len() < 3 {
                std::future::poll_fn(|cx| jobs.poll_ready(cx)).await;
                while let Some(m) = jobs.take() {
                    got.push(m);
                }
            }
            got.sort_unstable();
            assert_eq!(got, [0, 10, 20]);
            assert!(jobs.take().is_none());
        });
    }
}
