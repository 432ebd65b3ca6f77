//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::{net::SocketAddr, sync::mpsc, time::Duration};

/// `https://ADDR/PATH`.
pub fn url(addr: SocketAddr, path: &str) -> url::Url {
    url::Url::parse(&format!("https://{addr}{path}")).unwrap()
}

/// Runs `f` on its own thread and waits at most `deadline` for it: a hang guard.
pub fn with_deadline<T: Send + 'static>(
    what: &str,
    deadline: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(deadline) {
        Ok(v) => v,
        Err(e) => panic!("{what}: no result within {deadline:?} ({e})"),
    }
}
