//! A thread with a current-thread runtime of its own that serves until told to stop and ends
//! with its report: each worker runs on one, and so does the dispatcher. It says when it ends,
//! however it ends (a panic included), so that the server stops with it rather than go on
//! with a worker nobody runs.

use std::{future::Future, thread::JoinHandle};

use anyhow::{Context as _, bail};
use tokio::sync::{mpsc, oneshot};

/// A worker's or the dispatcher's thread: it serves until told to stop, and ends with its
/// report.
pub(super) struct ServedThread<R> {
    pub(super) stop: Option<oneshot::Sender<()>>,
    pub(super) thread: Option<JoinHandle<anyhow::Result<R>>>,
}

impl<R: Send + 'static> ServedThread<R> {
    /// Starts thread `name` with a current-thread runtime of its own. In it, `start` makes
    /// what the thread serves (its sockets register with that runtime), and its error is
    /// returned here; then `serve` runs it with a future that completes when `stop` is sent.
    /// `ended` goes with the thread, so the server learns of its end however it comes.
    pub(super) fn spawn<T, Fut>(
        name: String,
        ended: Ended,
        start: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
        serve: impl FnOnce(T, oneshot::Receiver<()>) -> Fut + Send + 'static,
    ) -> anyhow::Result<Self>
    where
        Fut: Future<Output = anyhow::Result<R>>,
    {
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let _ended = ended;
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let served = match start() {
                        Ok(s) => s,
                        Err(e) => {
                            let msg = format!("{e:#}");
                            let _ = ready_tx.send(Err(e));
                            bail!(msg);
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    serve(served, stopped).await
                })
            })
            .context("starting its thread")?;
        let served = Self {
            stop: Some(stop),
            thread: Some(thread),
        };
        match ready.recv() {
            Ok(Ok(())) => Ok(served),
            Ok(Err(e)) => Err(e),
            Err(_) => bail!("died while starting"),
        }
    }
}

/// Tells the server a worker's (or the dispatcher's) thread ended, however it ended (a panic
/// included).
pub(super) struct Ended(pub(super) mpsc::UnboundedSender<usize>, pub(super) usize);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(self.1);
    }
}

/// What a panic said, for the server's error.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use anyhow::bail;
    use tokio::sync::mpsc;

    use super::{Ended, ServedThread};

    /// A thread whose start fails, or panics, reports it from `spawn` and never serves; one
    /// that starts serves until stopped and ends with its report. Each says it ended.
    #[test]
    fn a_served_thread_reports_its_start_and_its_end() {
        let (ended_tx, mut ended) = mpsc::unbounded_channel();
        let err = ServedThread::<u32>::spawn(
            "t-fails".to_owned(),
            Ended(ended_tx.clone(), 7),
            || -> anyhow::Result<()> { bail!("no socket") },
            |(), _stopped| async { unreachable!("serving after a failed start") },
        )
        .err()
        .expect("the start's error");
        assert_eq!(format!("{err:#}"), "no socket");
        let err = ServedThread::<u32>::spawn(
            "t-panics".to_owned(),
            Ended(ended_tx.clone(), 8),
            || -> anyhow::Result<()> { panic!("for the test") },
            |(), _stopped| async { unreachable!("serving after a panicked start") },
        )
        .err()
        .expect("the panic, as an error");
        assert_eq!(format!("{err:#}"), "died while starting");
        let mut t = ServedThread::spawn(
            "t-serves".to_owned(),
            Ended(ended_tx, 9),
            || Ok(40_u32),
            |n, stopped| async move {
                let _ = stopped.await;
                Ok(n + 2)
            },
        )
        .unwrap();
        let _ = t.stop.take().unwrap().send(());
        assert_eq!(t.thread.take().unwrap().join().unwrap().unwrap(), 42);
        // The failed threads end just after `spawn` has their error: wait for every end (the
        // channel closes once the last `Ended` is gone with its thread).
        let mut seen: Vec<usize> = std::iter::from_fn(|| ended.blocking_recv()).collect();
        seen.sort_unstable();
        assert_eq!(seen, [7, 8, 9]);
    }
}
