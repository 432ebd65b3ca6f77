//! The metrics endpoint: `GET /metrics` answered with the [`Board`]'s exposition by hyper's
//! HTTP/1 server on a thread of its own (a current-thread runtime), so that no scrape touches
//! a worker.
//!
//! A scrape is answered while slow or hostile clients hold the port, because none of them can
//! make it wait its turn:
//!
//! - Connections are accepted as they come, whatever the others are doing: the listen
//!   backlog ([`BACKLOG`]) only has to absorb a burst between two turns of the accept loop,
//!   and no scraper waits in it behind slow clients.
//! - Each connection has [`HEAD_TIMEOUT`] from its accept to send its request head, at most
//!   8 KiB of it (hyper answers 431 past the size and closes the connection unanswered past
//!   the time, however the bytes trickle in), and [`DEADLINE`] for all of it, its answer
//!   included.
//! - At most [`MAX_CONNECTIONS`] are held, fewer where the process's descriptor limit is low
//!   (a quarter of it, so that the endpoint cannot take the descriptors the server's files
//!   and sockets need). A connection accepted past that sheds the one that has waited longest
//!   without a complete head (every one having its head: the oldest), never itself. Nothing
//!   more is accepted until the one shed is dropped, and the runtime turns to the newcomer
//!   first: a newcomer reads the head it sent with its connection (a scraper's whole head)
//!   long before a thousand later ones could make it the one waiting longest, and the slow
//!   clients shed are those that held the port longest. Out of descriptors at an accept, the
//!   endpoint sheds one the same way.
//!
//! What the endpoint holds is so bounded: [`MAX_CONNECTIONS`] sockets (and one being shed),
//! each with at most 8 KiB of request head buffered and, once its head is in, one exposition
//! being written, for at most [`DEADLINE`]. Shutdown drops whatever is under way.

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::{SocketAddr, TcpListener},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::ServerError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, header, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    sync::oneshot,
    task::{AbortHandle, JoinSet},
};

use super::Board;

/// Connections held at once at most (fewer with a low descriptor limit, see the module doc).
pub const MAX_CONNECTIONS: usize = 1024;

/// How long a client has from its connection's accept to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a connection may last, its answer included.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// The listen backlog asked for (the kernel may cap it: `net.core.somaxconn` on Linux).
pub const BACKLOG: i32 = 1024;

/// hyper's smallest read buffer, and so the largest request head taken.
const MAX_HEAD: usize = 8192;

/// How long to wait before accepting again after an error there is nothing to shed for.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What one endpoint allows a connection: the constants above, or a test's own.
#[derive(Debug, Clone, Copy)]
struct Limits {
    connections: usize,
    head: Duration,
    deadline: Duration,
}

impl Limits {
    /// [`MAX_CONNECTIONS`], [`HEAD_TIMEOUT`] and [`DEADLINE`], the connections held no more
    /// than a quarter of the process's descriptor limit.
    fn of_this_process() -> Self {
        #[cfg(unix)]
        let connections = rlimit::Resource::NOFILE
            .get_soft()
            .map_or(MAX_CONNECTIONS, |n| {
                usize::try_from(n / 4)
                    .unwrap_or(usize::MAX)
                    .clamp(1, MAX_CONNECTIONS)
            });
        #[cfg(not(unix))]
        let connections = MAX_CONNECTIONS;
        Self {
            connections,
            head: HEAD_TIMEOUT,
            deadline: DEADLINE,
        }
    }
}

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
        Self::start_with(addr, board, Limits::of_this_process())
    }

    fn start_with(
        addr: SocketAddr,
        board: Arc<Board>,
        limits: Limits,
    ) -> Result<Self, ServerError> {
        let refused = |source| ServerError::Metrics { addr, source };
        let listener = listen(addr).map_err(refused)?;
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
                runtime.block_on(serve(listener, board, limits, stopped));
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

/// A listening socket at `addr` with a backlog of [`BACKLOG`] (std's `bind` asks for 128),
/// non-blocking for tokio. `SO_REUSEADDR` on Unix, as std sets it.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The connections held, by the order they were accepted in.
struct Held {
    tasks: JoinSet<()>,
    /// Each connection's task, and whether its request head is in, by accept order.
    order: BTreeMap<u64, (AbortHandle, Arc<AtomicBool>)>,
    /// Each connection's place in `order`, by task: until its task is reaped.
    place: HashMap<tokio::task::Id, u64>,
    accepted: u64,
}

impl Held {
    /// Which to shed, given whether each connection's head is in, in accept order: the
    /// first without a head, else the first.
    fn victim(heads: impl IntoIterator<Item = bool>) -> Option<usize> {
        let mut any = false;
        for (i, head) in heads.into_iter().enumerate() {
            if !head {
                return Some(i);
            }
            any = true;
        }
        any.then_some(0)
    }

    /// Serves a connection accepted now; `head` is set once its request head is in.
    fn admit(
        &mut self,
        connection: impl Future<Output = ()> + Send + 'static,
        head: Arc<AtomicBool>,
    ) {
        let task = self.tasks.spawn(connection);
        self.place.insert(task.id(), self.accepted);
        self.order.insert(self.accepted, (task, head));
        self.accepted += 1;
    }

    /// Takes the connection to shed out of those held ([`Held::victim`]); none with none
    /// held. Aborting its task closes its socket when the runtime next turns to it; it counts
    /// in `tasks` until reaped.
    fn shed(&mut self) -> Option<AbortHandle> {
        let heads = self.order.values().map(|(_, h)| h.load(Ordering::Relaxed));
        let at = Self::victim(heads).and_then(|i| self.order.keys().nth(i).copied())?;
        self.order.remove(&at).map(|(task, _)| task)
    }

    /// A connection's task ended and was reaped.
    fn forget(&mut self, id: tokio::task::Id) {
        if let Some(at) = self.place.remove(&id) {
            self.order.remove(&at);
        }
    }
}

/// Accepts connections as they come, shedding past `limits.connections`, until `stopped`.
async fn serve(
    listener: TcpListener,
    board: Arc<Board>,
    limits: Limits,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("metrics endpoint: {e}");
            return;
        }
    };
    let mut held = Held {
        tasks: JoinSet::new(),
        order: BTreeMap::new(),
        place: HashMap::new(),
        accepted: 0,
    };
    loop {
        // Ended connections are reaped before anything is accepted, and nothing is accepted
        // while a shed one is still to be dropped: no more than `limits.connections` sockets
        // and the one being shed. The one shed is aborted after the newcomer is spawned, so
        // the runtime turns to the newcomer before it drops that one (unless that one's turn
        // was due already): a newcomer reads the head it sent with its connection (a
        // scraper's whole head) long before later ones could make it the one that has waited
        // longest without one.
        tokio::select! {
            biased;
            _ = &mut stopped => return,
            Some(ended) = held.tasks.join_next_with_id(), if !held.tasks.is_empty() => {
                let id = match ended {
                    Ok((id, ())) => id,
                    Err(e) => e.id(),
                };
                held.forget(id);
            }
            accepted = listener.accept(), if held.tasks.len() <= limits.connections => {
                match accepted {
                    Ok((stream, _)) => {
                        let shed = if held.order.len() >= limits.connections {
                            held.shed()
                        } else {
                            None
                        };
                        let head = Arc::new(AtomicBool::new(false));
                        let task = connection(stream, Arc::clone(&board), limits, Arc::clone(&head));
                        held.admit(task, head);
                        if let Some(shed) = shed {
                            shed.abort();
                        }
                    }
                    Err(e) => {
                        tracing::debug!("metrics endpoint: accept: {e}");
                        // Out of descriptors, say: one shed frees one for the client waiting
                        // (accepted once it is dropped); with none to shed, a pause rather
                        // than a busy loop.
                        let shed = if out_of_descriptors(&e) { held.shed() } else { None };
                        match shed {
                            Some(shed) => shed.abort(),
                            None => tokio::time::sleep(ACCEPT_PAUSE).await,
                        }
                    }
                }
            }
        }
    }
}

/// Whether an accept failed for want of a file descriptor, the process's or the system's.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// One connection: its request head within `limits.head`, all of it within
/// `limits.deadline`; `head` is set once the head is in.
async fn connection(
    stream: tokio::net::TcpStream,
    board: Arc<Board>,
    limits: Limits,
    head: Arc<AtomicBool>,
) {
    let service = service_fn(move |req| {
        head.store(true, Ordering::Relaxed);
        let response = answer(&req, &board);
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head)
        .max_buf_size(MAX_HEAD)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(limits.deadline, connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!("metrics request: {e}"),
        Err(_) => tracing::debug!("metrics request: over its deadline, closed"),
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

#[cfg(test)]
mod tests {
    use std::{
        io::{ErrorKind, Read as _, Write as _},
        net::{SocketAddr, TcpStream},
        sync::Arc,
        time::{Duration, Instant},
    };

    use super::{Held, Limits, MAX_CONNECTIONS, MetricsServer};
    use crate::{
        ServerReport,
        metrics::{Board, openmetrics, test_certificates, tests::strict_parse},
    };

    /// A hang guard, not a speed bound: no test here waits for a time to pass.
    const GUARD: Duration = Duration::from_secs(60);

    /// What a slow client sends: a request head it never ends.
    const PARTIAL: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ";

    /// An endpoint on loopback with `connections` held at most and heads given a minute
    /// (the hang guard's time), so that no slow client is cut off by time while a test runs.
    fn endpoint(connections: usize) -> MetricsServer {
        let board = Board::new(1, Arc::default(), test_certificates(), None);
        board.publish(0, ServerReport::default());
        let limits = Limits {
            connections,
            head: GUARD,
            deadline: 2 * GUARD,
        };
        MetricsServer::start_with("127.0.0.1:0".parse().unwrap(), Arc::new(board), limits)
            .expect("the endpoint starts")
    }

    /// A connection that sent `PARTIAL` and holds.
    fn slow(addr: SocketAddr) -> TcpStream {
        let mut s = TcpStream::connect_timeout(&addr, GUARD).expect("loopback connects");
        s.write_all(PARTIAL).unwrap();
        s
    }

    /// A whole scrape: it must be a 200 with a valid exposition.
    fn scrape(addr: SocketAddr) {
        let mut s = TcpStream::connect_timeout(&addr, GUARD).expect("loopback connects");
        s.set_read_timeout(Some(GUARD)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("a whole answer");
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        strict_parse(body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        openmetrics::check(body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    }

    /// Whether the endpoint still holds `s` unanswered: nothing to read, and no end.
    fn held_unanswered(s: &TcpStream) -> bool {
        s.set_nonblocking(true).unwrap();
        let held = matches!((&*s).read(&mut [0; 64]), Err(e) if e.kind() == ErrorKind::WouldBlock);
        s.set_nonblocking(false).unwrap();
        held
    }

    /// Whether the endpoint closed `s` without an answer (waits for it, up to the guard).
    fn closed_unanswered(s: &TcpStream) -> bool {
        s.set_read_timeout(Some(GUARD)).unwrap();
        match (&*s).read(&mut [0; 64]) {
            Ok(0) => true,
            Err(e) => matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ),
            Ok(_) => false,
        }
    }

    /// How many slow clients this process can afford besides the rest of the suite: each
    /// takes two descriptors here (the client's and the endpoint's). The soft limit is
    /// raised toward 8192 where the hard one allows.
    fn affordable(wanted: usize) -> usize {
        let limit = rlimit::increase_nofile_limit(8192).unwrap_or(1024);
        let spare = usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .saturating_sub(256)
            / 2;
        if spare < wanted {
            eprintln!("descriptor limit {limit}: {spare} slow clients rather than {wanted}");
        }
        wanted.min(spare)
    }

    /// 1000 clients that connect, send part of a head and hold: a scrape after them is
    /// answered whole while every one of them is still connected and unanswered (the cap is
    /// the endpoint's own, 1024).
    #[test]
    fn a_scrape_is_answered_while_1000_slow_clients_hold_the_port() {
        let n = affordable(1000);
        let server = endpoint(MAX_CONNECTIONS);
        let addr = server.local_addr();
        let started = Instant::now();
        let slow: Vec<TcpStream> = (0..n)
            .map(|i| {
                assert!(
                    started.elapsed() < GUARD,
                    "{i} of {n} connected in the guard's time"
                );
                slow(addr)
            })
            .collect();
        scrape(addr);
        let held = slow.iter().filter(|s| held_unanswered(s)).count();
        assert_eq!(held, n, "slow clients still connected and unanswered");
        drop(server);
        let closed = slow.iter().filter(|s| closed_unanswered(s)).count();
        assert_eq!(closed, n, "the endpoint's stop closed them all, unanswered");
    }

    /// Past its cap the endpoint sheds the connections that have waited longest for their
    /// heads, never the newest: of 20 slow clients and a scrape with room for 8, the 13
    /// oldest are closed unanswered, the 7 newest held, and the scrape answered.
    #[test]
    fn past_the_cap_the_oldest_without_a_head_are_shed() {
        const CAP: usize = 8;
        const SLOW: usize = 20;
        let server = endpoint(CAP);
        let addr = server.local_addr();
        let slow: Vec<TcpStream> = (0..SLOW).map(|_| slow(addr)).collect();
        scrape(addr);
        let shed = SLOW + 1 - CAP;
        for (i, s) in slow.iter().enumerate() {
            if i < shed {
                assert!(closed_unanswered(s), "slow client {i} shed");
            } else {
                assert!(held_unanswered(s), "slow client {i} held");
            }
        }
    }

    #[test]
    fn the_one_shed_is_the_oldest_without_a_head_else_the_oldest() {
        assert_eq!(Held::victim([true, false, true, false]), Some(1));
        assert_eq!(Held::victim([false, false]), Some(0));
        assert_eq!(
            Held::victim([true, true]),
            Some(0),
            "all with heads: the oldest"
        );
        assert_eq!(Held::victim([]), None);
    }

    /// A head sent a byte at a time does not hold its connection past its head time: the
    /// endpoint closes it unanswered (hyper's timer runs from the accept, not from the last
    /// byte). Its head time is 1 s here; the test waits for the close, bounded by the guard.
    #[test]
    fn a_head_that_trickles_is_closed_at_its_head_time() {
        let board = Board::new(1, Arc::default(), test_certificates(), None);
        let limits = Limits {
            connections: MAX_CONNECTIONS,
            head: Duration::from_secs(1),
            deadline: 2 * GUARD,
        };
        let server =
            MetricsServer::start_with("127.0.0.1:0".parse().unwrap(), Arc::new(board), limits)
                .unwrap();
        let mut s = slow(server.local_addr());
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let started = Instant::now();
        let answer = loop {
            assert!(started.elapsed() < GUARD, "never closed");
            let mut buf = [0; 64];
            match s.read(&mut buf) {
                Ok(n) => break buf[..n].to_vec(),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    // Another byte of the head; a write may fail once the endpoint is gone.
                    let _ = s.write_all(b"a");
                }
                Err(_) => break Vec::new(),
            }
        };
        assert!(answer.is_empty(), "closed unanswered: {answer:?}");
    }
}
