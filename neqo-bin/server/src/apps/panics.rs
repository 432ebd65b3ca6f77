//! A panic in your application's code costs the request or the connection it was serving, as
//! in hyper and axum, never the worker: a service's call, its future and its response body
//! are run under [`catch_unwind`](std::panic::catch_unwind), and so is each call into a
//! raw-QUIC session. What panicked is dropped and never called again (so the state a panic
//! may have left half-changed is not seen: hence `AssertUnwindSafe`), the panic is logged
//! with its message, counted (`app_panics` in the report and the metrics), and the worker
//! serves on.
//!
//! A build with `panic = "abort"` aborts instead, as it would under hyper.

use std::{
    future::Future,
    panic::{AssertUnwindSafe, catch_unwind},
    pin::Pin,
    task::{Context, Poll},
};

use crate::served_thread::panic_message;

/// A caught panic: its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Panicked(pub(super) String);

/// `f()`, or the panic it raised.
pub(super) fn caught<T>(f: impl FnOnce() -> T) -> Result<T, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| Panicked(panic_message(p.as_ref())))
}

/// Polls `fut` until it is ready or panics; a future that panicked is dropped there (its
/// drop may panic too), and never polled again.
pub(super) async fn guarded<T>(fut: Pin<Box<dyn Future<Output = T>>>) -> Result<T, Panicked> {
    let mut fut = Some(fut);
    std::future::poll_fn(move |cx: &mut Context<'_>| {
        let Some(f) = fut.as_mut() else {
            return Poll::Ready(Err(Panicked("polled after its panic".to_owned())));
        };
        match caught(|| f.as_mut().poll(cx)) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(p) => {
                let f = fut.take();
                let _ = caught(move || drop(f));
                Poll::Ready(Err(p))
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_caught_with_its_message_and_a_value_passes() {
        assert_eq!(caught(|| 7), Ok(7));
        assert_eq!(
            caught(|| -> u8 { panic!("handler bug {}", 3) }),
            Err(Panicked("handler bug 3".to_owned()))
        );
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let ok: Pin<Box<dyn Future<Output = u8>>> = Box::pin(async { 5 });
        let mut g = std::pin::pin!(guarded(ok));
        assert_eq!(g.as_mut().poll(&mut cx), Poll::Ready(Ok(5)));
        let bad: Pin<Box<dyn Future<Output = u8>>> = Box::pin(async { panic!("later") });
        let mut g = std::pin::pin!(guarded(bad));
        assert_eq!(
            g.as_mut().poll(&mut cx),
            Poll::Ready(Err(Panicked("later".to_owned())))
        );
    }
}
