//! The metrics endpoint: `GET /metrics` answered with the [`Board`]'s exposition by hyper's
//! HTTP/1 server on a thread of its own (a current-thread runtime), so that no scrape touches
//! a worker. What a slow or hostile client can hold is bounded: at most
//! [`MAX_CONNECTIONS`] at once (more wait in the kernel's accept queue, first come first
//! served), a request head within [`HEAD_TIMEOUT`] and 8 KiB (hyper answers 408 or 431 past
//! them), and a whole connection within [`DEADLINE`]. Shutdown drops whatever is under way.

use std::{
    convert::Infallible,
    net::{SocketAddr, TcpListener},
    sync::Arc,
    thread::JoinHandle,
    time::Duration,
};

use crate::ServerError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Semaphore, oneshot};

use super::Board;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// How long a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a connection may last, its answer included.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// hyper's smallest read buffer, and so the largest request head taken.
const MAX_HEAD: usize = 8192;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The endpoint: a thread answering scrapes until dropped.
#[derive(Debug)]
pub(crate) struct MetricsServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` and serves `board` there.
    ///
    /// # Errors
    /// The bind error, or the system refusing the endpoint's runtime or thread.
    pub(crate) fn start(addr: SocketAddr, board: Arc<Board>) -> Result<Self, ServerError> {
        let refused = |source| ServerError::Metrics { addr, source };
        let listener = TcpListener::bind(addr).map_err(refused)?;
        listener.set_nonblocking(true).map_err(refused)?;
        let addr = listener.local_addr().map_err(refused)?;
        let io = |what| move |source| ServerError::Io { what, source };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("the metrics endpoint's runtime"))?;
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("neqo-server-metrics".into())
            .spawn(move || {
                // Dropping the runtime after `serve` returns drops the connections under way.
                runtime.block_on(serve(listener, board, stopped));
            })
            .map_err(io("the metrics endpoint's thread"))?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub(crate) const fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts connections while there is room for them, until `stopped`.
async fn serve(listener: TcpListener, board: Arc<Board>, mut stopped: oneshot::Receiver<()>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("metrics endpoint: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        // Not accepted while every slot is taken: later clients wait in the accept queue in
        // the order they came.
        let slot = tokio::select! {
            _ = &mut stopped => return,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, say: try again a little later.
                    tracing::debug!("metrics endpoint: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let board = Arc::clone(&board);
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |req| {
                let response = answer(&req, &board);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(DEADLINE, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!("metrics request: {e}"),
                Err(_) => tracing::debug!("metrics request: over its deadline, closed"),
            }
        });
    }
}

/// `GET /metrics`: the exposition; another path 404, another method 405.
fn answer(req: &Request<Incoming>, board: &Board) -> Response<Full<Bytes>> {
    let (status, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, board.render()),
        (&Method::GET, _) => (StatusCode::NOT_FOUND, String::new()),
        _ => (StatusCode::METHOD_NOT_ALLOWED, String::new()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if status == StatusCode::OK {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(OPENMETRICS),
        );
    }
    response
}
