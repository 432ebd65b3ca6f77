//! The server's workers: each a thread with its own current-thread runtime, driver,
//! quinn-proto endpoint and sockets. With several, every listen address has a socket per
//! worker in one `SO_REUSEPORT` group, and the kernel's steering program hands each datagram
//! to the worker whose index its destination connection ID carries (`cid`), so a connection
//! stays on its worker when its client's address or port changes. Where that program cannot
//! be attached (not Linux, or the kernel refuses it) or `--steering channel` asks for it,
//! every listen address has one socket instead, read by a dispatcher thread that hands each
//! datagram to its worker by the same rule over a bounded channel (`dispatch`); the workers
//! send on that socket directly.
//!
//! What the workers share: the keys (stateless reset, Retry tokens, connection IDs), one TLS
//! config (one session store: a client resumes whichever worker it reaches), and the counts
//! the connection limits apply to ([`Ledger`]).
//!
//! A worker or dispatcher that fails or panics stops the server (see [`Workers::run`]): the
//! steering program (or the dispatcher) would go on sending its connections' datagrams to a
//! socket (or channel) nobody reads, and without the dispatcher no worker receives.

use std::{
    future::Future, net::SocketAddr, path::Path, sync::Arc, thread::JoinHandle, time::Instant,
};

use anyhow::{Context as _, bail};
use neqo_udp::Datagram;
use tokio::sync::{mpsc, oneshot};

use super::{
    ServerConfig, ServerReport,
    app::ServerApp,
    cid::CidLayout,
    dispatch::{self, CHANNEL_CAPACITY, DispatchReport, Dispatcher},
    ledger::Ledger,
};
use crate::driver::{ChannelDatapath, Datapath, Driver, SocketDatapath};

/// How datagrams reach the workers when there are several.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Steering {
    /// The steering program where it attaches (Linux), else the dispatcher and channels.
    #[default]
    Auto,
    /// The steering program only: refuse to start without it.
    Bpf,
    /// The dispatcher and channels, also where the program would attach (to test and
    /// measure them).
    Channel,
}

/// The one line refusing `--steering bpf` where the kernel did not take the program.
pub(super) fn bpf_refused(workers: usize, addr: SocketAddr, reason: &str) -> String {
    format!(
        "--steering bpf: datagrams cannot be steered to {workers} workers by connection ID on \
         {addr} ({reason}); use --steering auto or channel"
    )
}

/// What every worker starts from.
pub(super) struct Shared {
    /// Canonical.
    pub(super) root: Option<Arc<Path>>,
    pub(super) server_config: Arc<quinn_proto::ServerConfig>,
    pub(super) layout: CidLayout,
    pub(super) ledger: Arc<Ledger>,
    pub(super) config: ServerConfig,
}

/// The bound sockets.
pub(super) struct Bound {
    sockets: BoundSockets,
    /// The listen addresses, with their real ports.
    pub(super) addrs: Vec<SocketAddr>,
    /// How datagrams reach the workers, for the report.
    steering: String,
}

enum BoundSockets {
    /// Each worker's sockets, one per listen address (the steering program's groups).
    PerWorker(Vec<Vec<std::net::UdpSocket>>),
    /// One socket per listen address, read by the dispatcher.
    Shared {
        sockets: Vec<std::net::UdpSocket>,
        steering: neqo_udp::CidSteering,
        workers: usize,
    },
}

/// What a worker receives and sends through, before its runtime wraps it.
enum WorkerPath {
    Socket(std::net::UdpSocket),
    /// Its handle to a shared socket, and its channel from the dispatcher.
    Channel(std::net::UdpSocket, mpsc::Receiver<Datagram>),
}

/// Binds the listen addresses: with several workers, a socket per worker on each, steered by
/// the worker byte of `layout`'s connection IDs, or one socket each read by a dispatcher,
/// as `steering` says.
///
/// # Errors
/// A bind failure, or `Steering::Bpf` where the steering program cannot be attached.
pub(super) fn bind(
    listen: &[SocketAddr],
    layout: &CidLayout,
    steering: Steering,
) -> anyhow::Result<Bound> {
    let workers = layout.workers();
    let cid = neqo_udp::CidSteering::new(
        u8::try_from(layout.worker_offset()).expect("within a 20-byte CID"),
    );
    let mut addrs = Vec::new();
    if workers == 1 {
        let mut sockets = Vec::new();
        for addr in listen {
            let group = neqo_udp::bind_reuseport_group(*addr, 1, None)?;
            addrs.push(group.local_addr()?);
            sockets.extend(group.sockets);
        }
        return Ok(Bound {
            sockets: BoundSockets::PerWorker(vec![sockets]),
            addrs,
            steering: "one worker".to_owned(),
        });
    }
    // Why the program is not used, where it is not.
    let mut fallback = match steering {
        Steering::Channel => Some("--steering channel".to_owned()),
        Steering::Auto if !cfg!(target_os = "linux") => {
            Some("no steering program on this platform".to_owned())
        }
        Steering::Auto | Steering::Bpf => None,
    };
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> = (0..workers).map(|_| Vec::new()).collect();
    if fallback.is_none() {
        for addr in listen {
            let group = neqo_udp::bind_reuseport_group(*addr, workers, Some(cid))?;
            if let neqo_udp::Steering::Hash { reason } = &group.steering {
                if steering == Steering::Bpf {
                    bail!(bpf_refused(workers, *addr, reason));
                }
                fallback = Some(reason.clone());
                break;
            }
            addrs.push(group.local_addr()?);
            for (w, s) in group.sockets.into_iter().enumerate() {
                per_worker[w].push(s);
            }
        }
    }
    let Some(reason) = fallback else {
        return Ok(Bound {
            sockets: BoundSockets::PerWorker(per_worker),
            addrs,
            steering: format!("{workers} workers, by connection ID (SO_REUSEPORT, classic BPF)"),
        });
    };
    // The groups bound so far are closed here, so the fixed ports they held are free again.
    drop(per_worker);
    addrs.clear();
    let mut sockets = Vec::new();
    for addr in listen {
        // A group of one: a plain socket, without SO_REUSEPORT, so nothing can join it.
        let group = neqo_udp::bind_reuseport_group(*addr, 1, None)?;
        addrs.push(group.local_addr()?);
        sockets.extend(group.sockets);
    }
    Ok(Bound {
        sockets: BoundSockets::Shared {
            sockets,
            steering: cid,
            workers,
        },
        addrs,
        steering: format!(
            "{workers} workers, by connection ID (one socket, a dispatcher thread, channels of \
             {CHANNEL_CAPACITY} datagrams; {reason})"
        ),
    })
}

/// One worker: its driver and application.
struct Worker {
    driver: Driver,
    app: ServerApp,
}

impl Worker {
    /// Worker `index` on `sockets`; inside the worker's runtime.
    fn new(index: usize, paths: Vec<WorkerPath>, shared: &Shared) -> anyhow::Result<Self> {
        let config = shared.config.worker_share();
        let datapaths = paths
            .into_iter()
            .map(|p| -> std::io::Result<Box<dyn Datapath>> {
                Ok(match p {
                    WorkerPath::Socket(s) => Box::new(SocketDatapath::new(
                        neqo_udp::Socket::from_std(s, config.socket.clone())?,
                    )),
                    WorkerPath::Channel(s, rx) => Box::new(ChannelDatapath::new(
                        rx,
                        neqo_udp::Socket::from_std(s, config.socket.clone())?,
                    )),
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let endpoint = config
            .keys
            .endpoint_config(&shared.layout, index, config.cid_lifetime);
        let driver = Driver::with_datapaths(
            datapaths,
            endpoint,
            Some(shared.server_config.clone()),
            config.pacing,
        )
        .with_pacing_timer(config.pacing_timer);
        let app = ServerApp::new(
            index,
            shared.root.clone(),
            shared.server_config.clone(),
            config,
            shared.ledger.clone(),
            Instant::now(),
        );
        Ok(Self { driver, app })
    }

    async fn run(mut self, stop: impl Future<Output = ()>) -> anyhow::Result<ServerReport> {
        self.driver.run(&mut self.app, stop).await?;
        let mut report = self.app.report.clone();
        let mut live_lost = 0;
        for (_, conn) in self.driver.connections() {
            live_lost += conn.stats().path.lost_packets;
        }
        report.fill(&self.driver, live_lost);
        Ok(report)
    }
}

/// A worker's or the dispatcher's thread: it serves until told to stop, and ends with its
/// report.
struct ServedThread<R> {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<anyhow::Result<R>>>,
}

impl<R: Send + 'static> ServedThread<R> {
    /// Starts thread `name` with a current-thread runtime of its own. In it, `start` makes
    /// what the thread serves (its sockets register with that runtime), and its error is
    /// returned here; then `serve` runs it with a future that completes when `stop` is sent.
    /// `ended` goes with the thread, so the server learns of its end however it comes.
    fn spawn<T, Fut>(
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
struct Ended(mpsc::UnboundedSender<usize>, usize);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(self.1);
    }
}

/// The running workers.
pub(super) struct Workers {
    threads: Vec<ServedThread<ServerReport>>,
    /// With channel steering.
    dispatcher: Option<ServedThread<DispatchReport>>,
    /// The index of each worker whose thread ended; the worker count for the dispatcher.
    ended: mpsc::UnboundedReceiver<usize>,
    pub(super) ledger: Arc<Ledger>,
    pub(super) steering: String,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("workers", &self.threads.len())
            .field("steering", &self.steering)
            .finish_non_exhaustive()
    }
}

impl Workers {
    /// Starts a worker on each socket set (and, with channel steering, the dispatcher); returns
    /// once all are serving.
    ///
    /// # Errors
    /// A worker or the dispatcher that failed to start (the others are stopped).
    pub(super) fn start(bound: Bound, shared: Shared) -> anyhow::Result<Self> {
        let shared = Arc::new(shared);
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let mut workers = Self {
            threads: Vec::new(),
            dispatcher: None,
            ended,
            ledger: shared.ledger.clone(),
            steering: bound.steering,
        };
        let (per_worker, dispatch) = match bound.sockets {
            BoundSockets::PerWorker(per_worker) => (
                per_worker
                    .into_iter()
                    .map(|s| s.into_iter().map(WorkerPath::Socket).collect())
                    .collect(),
                None,
            ),
            BoundSockets::Shared {
                sockets,
                steering,
                workers: n,
            } => {
                let mut per_worker: Vec<Vec<WorkerPath>> = (0..n).map(|_| Vec::new()).collect();
                let mut dispatchers = Vec::new();
                for socket in sockets {
                    let mut senders = Vec::new();
                    for paths in &mut per_worker {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        senders.push(tx);
                        let clone = socket
                            .try_clone()
                            .context("a worker's handle to the listening socket")?;
                        paths.push(WorkerPath::Channel(clone, rx));
                    }
                    dispatchers.push((socket, Dispatcher::new(steering, senders)));
                }
                (per_worker, Some(dispatchers))
            }
        };
        let count = per_worker.len();
        for (index, paths) in per_worker.into_iter().enumerate() {
            let shared = shared.clone();
            let worker = ServedThread::spawn(
                format!("neqo-server-{index}"),
                Ended(ended_tx.clone(), index),
                move || Worker::new(index, paths, &shared),
                |worker, stopped| {
                    worker.run(async move {
                        let _ = stopped.await;
                    })
                },
            )
            .with_context(|| format!("worker {index}"))?;
            workers.threads.push(worker);
        }
        if let Some(dispatchers) = dispatch {
            let config = shared.config.socket.clone();
            let dispatcher = ServedThread::spawn(
                "neqo-server-dispatch".to_owned(),
                Ended(ended_tx, count),
                move || {
                    dispatchers
                        .into_iter()
                        .map(|(s, d)| Ok((neqo_udp::Socket::from_std(s, config.clone())?, d)))
                        .collect::<anyhow::Result<Vec<_>>>()
                },
                |sockets, stopped| async move {
                    Ok(dispatch::run(sockets, async move {
                        let _ = stopped.await;
                    })
                    .await?)
                },
            )
            .context("the dispatcher")?;
            workers.dispatcher = Some(dispatcher);
        }
        Ok(workers)
    }

    fn stop_all(&mut self) {
        let dispatcher = self.dispatcher.iter_mut().map(|d| &mut d.stop);
        for stop in self
            .threads
            .iter_mut()
            .map(|t| &mut t.stop)
            .chain(dispatcher)
        {
            if let Some(s) = stop.take() {
                let _ = s.send(());
            }
        }
    }

    /// Serves until `shutdown` completes or a worker (or the dispatcher) ends on its own;
    /// then stops every worker and the dispatcher, and adds up their reports.
    ///
    /// # Errors
    /// A worker or the dispatcher that failed, panicked or stopped before `shutdown`.
    pub(super) async fn run(
        mut self,
        shutdown: impl Future<Output = ()>,
    ) -> anyhow::Result<ServerReport> {
        let early = tokio::select! {
            () = shutdown => None,
            ended = self.ended.recv() => ended,
        };
        self.stop_all();
        // Wait without blocking this runtime; then the joins below return at once.
        let mut running = self.threads.len() + usize::from(self.dispatcher.is_some())
            - usize::from(early.is_some());
        while running > 0 && self.ended.recv().await.is_some() {
            running -= 1;
        }
        let mut reports = Vec::new();
        let mut failures = Vec::new();
        for (i, t) in self.threads.iter_mut().enumerate() {
            match t.thread.take().map(JoinHandle::join) {
                Some(Ok(Ok(r))) => reports.push(r),
                Some(Ok(Err(e))) => failures.push(format!("worker {i}: {e:#}")),
                Some(Err(panic)) => failures.push(format!(
                    "worker {i} panicked: {}",
                    panic_message(panic.as_ref())
                )),
                None => {}
            }
        }
        let mut dispatch = None;
        if let Some(thread) = self.dispatcher.as_mut().and_then(|d| d.thread.take()) {
            match thread.join() {
                Ok(Ok(r)) => dispatch = Some(r),
                Ok(Err(e)) => failures.push(format!("the dispatcher: {e:#}")),
                Err(panic) => failures.push(format!(
                    "the dispatcher panicked: {}",
                    panic_message(panic.as_ref())
                )),
            }
        }
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        if let Some(i) = early {
            if i == self.threads.len() {
                bail!("the dispatcher stopped before the server was shut down");
            }
            bail!("worker {i} stopped before the server was shut down");
        }
        Ok(ServerReport::merged(
            reports,
            &self.ledger,
            &self.steering,
            dispatch,
        ))
    }
}

impl Drop for Workers {
    /// A server dropped without [`run`](Workers::run) (or while it runs) stops its workers and
    /// its dispatcher.
    fn drop(&mut self) {
        self.stop_all();
        for t in &mut self.threads {
            if let Some(thread) = t.thread.take() {
                let _ = thread.join();
            }
        }
        if let Some(thread) = self.dispatcher.as_mut().and_then(|d| d.thread.take()) {
            let _ = thread.join();
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use anyhow::bail;
    use tokio::sync::mpsc;

    use super::{
        super::{Server, ServerConfig},
        Ended, ServedThread, Steering,
    };

    /// The worker that panics at its next turn, for the test below (none: `usize::MAX`).
    pub(in super::super) static PANIC_WORKER: AtomicUsize = AtomicUsize::new(usize::MAX);

    /// Panics if this is the worker the test picked.
    pub(in super::super) fn maybe_panic(worker: usize) {
        if PANIC_WORKER.load(Ordering::Relaxed) == worker {
            panic!("worker {worker} panics for the test");
        }
    }

    #[test]
    fn the_kernel_refusing_the_program_is_one_line_naming_the_flag() {
        let m = super::bpf_refused(
            2,
            "127.0.0.1:4433".parse().unwrap(),
            "attaching the CID steering program: Operation not permitted",
        );
        assert!(m.starts_with("--steering bpf: "), "{m}");
        assert!(
            m.contains("127.0.0.1:4433") && m.contains("not permitted"),
            "{m}"
        );
        assert!(m.contains("--steering auto or channel"), "{m}");
        assert!(!m.contains('\n'), "{m}");
    }

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

    /// Runs `server` without a shutdown after `datagram` reaches it; returns its error.
    fn run_until_it_fails(server: Server, datagram: &[u8]) -> String {
        let addr = server.local_addrs()[0];
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(datagram, addr).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // The shutdown never comes: the server must return on its own.
        let result = rt.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(60),
                server.run(std::future::pending()),
            )
            .await
        });
        let err = result
            .expect("the server returned without a shutdown")
            .expect_err("with an error");
        format!("{err:#}")
    }

    #[test]
    fn a_worker_that_panics_stops_the_server_with_an_error() {
        // The kernel's steering program (Linux), and the dispatcher's channels (anywhere).
        let modes: &[Steering] = if cfg!(target_os = "linux") {
            &[Steering::Bpf, Steering::Channel]
        } else {
            &[Steering::Channel]
        };
        for &steering in modes {
            let server = Server::bind(ServerConfig {
                listen: vec!["127.0.0.1:0".parse().unwrap()],
                workers: 3,
                steering,
                ..ServerConfig::default()
            })
            .expect("server starts");
            PANIC_WORKER.store(2, Ordering::Relaxed);
            // A short-header datagram whose connection ID steers it to worker 2: its worker
            // byte (after the first octet, no server ID) is 2, modulo 3.
            let mut datagram = vec![0x40, 0xe0, 2];
            datagram.resize(40, 0);
            let msg = run_until_it_fails(server, &datagram);
            PANIC_WORKER.store(usize::MAX, Ordering::Relaxed);
            assert!(
                msg.contains("worker 2 panicked: worker 2 panics for the test"),
                "{steering:?}: {msg}"
            );
        }
    }

    #[test]
    fn a_dispatcher_that_panics_stops_the_server_with_an_error() {
        let server = Server::bind(ServerConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            workers: 2,
            steering: Steering::Channel,
            ..ServerConfig::default()
        })
        .expect("server starts");
        assert!(
            server.steering().contains("dispatcher"),
            "{}",
            server.steering()
        );
        let msg = run_until_it_fails(server, super::super::dispatch::tests::PANIC_PAYLOAD);
        assert!(
            msg.contains("the dispatcher panicked: the dispatcher panics for the test"),
            "{msg}"
        );
    }
}
