//! The server's workers: each a thread ([`ServedThread`]) with its own current-thread runtime,
//! driver, quinn-proto endpoint and sockets (or channels from the dispatcher), bound and
//! steered as `steering` says; and [`Workers`], the running set, which stops them all and adds
//! up their reports.
//!
//! What the workers share: the keys (stateless reset, Retry tokens, connection IDs), one TLS
//! config (one session store: a client resumes whichever worker it reaches), and the counts
//! the connection limits apply to ([`Ledger`]).
//!
//! A worker or dispatcher that fails or panics stops the server (see [`Workers::run`]): the
//! steering program (or the dispatcher) would go on sending its connections' datagrams to a
//! socket (or channel) nobody reads, and without the dispatcher no worker receives.

use std::{future::Future, sync::Arc, thread::JoinHandle, time::Instant};

use neqo_driver::{ChannelDatapath, Datapath, Driver, SocketDatapath};
use neqo_udp::Datagram;
use tokio::sync::mpsc;

use super::{
    ServerConfig, ServerError, ServerReport,
    app::ServerApp,
    cid::CidLayout,
    dispatch::{self, CHANNEL_CAPACITY, DispatchReport, Dispatcher},
    ledger::Ledger,
    served_thread::{Ended, ServedThread, panic_message},
    steering::{Bound, BoundSockets},
};

/// What every worker starts from.
pub(super) struct Shared {
    /// Canonical.
    pub(super) root: Option<Arc<crate::disk::Root>>,
    pub(super) server_config: Arc<quinn_proto::ServerConfig>,
    pub(super) layout: CidLayout,
    pub(super) ledger: Arc<Ledger>,
    pub(super) config: ServerConfig,
    /// With a metrics endpoint, where the workers publish their reports.
    pub(super) board: Option<Arc<super::metrics::Board>>,
}

/// What a worker receives and sends through, before its runtime wraps it.
enum WorkerPath {
    Socket(std::net::UdpSocket),
    /// Its handle to a shared socket, and its channel from the dispatcher.
    Channel(std::net::UdpSocket, mpsc::Receiver<Datagram>),
}

/// One worker: its driver and application.
struct Worker {
    driver: Driver,
    app: ServerApp,
}

impl Worker {
    /// Worker `index` on `sockets`; inside the worker's runtime.
    fn new(index: usize, paths: Vec<WorkerPath>, shared: &Shared) -> anyhow::Result<Self> {
        let socket = &shared.config.socket;
        let datapaths = paths
            .into_iter()
            .map(|p| -> std::io::Result<Box<dyn Datapath>> {
                Ok(match p {
                    WorkerPath::Socket(s) => Box::new(SocketDatapath::new(
                        neqo_udp::Socket::from_std(s, socket.clone())?,
                    )),
                    WorkerPath::Channel(s, rx) => Box::new(ChannelDatapath::new(
                        rx,
                        neqo_udp::Socket::from_std(s, socket.clone())?,
                    )),
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let (driver, app) = parts(index, datapaths, shared, Instant::now());
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

/// Worker `index`'s driver and application on `datapaths`, started at `now`.
pub(super) fn parts(
    index: usize,
    datapaths: Vec<Box<dyn Datapath>>,
    shared: &Shared,
    now: Instant,
) -> (Driver, ServerApp) {
    let config = shared.config.worker_share();
    let endpoint = config
        .keys
        .endpoint_config(&shared.layout, index, config.cid_lifetime);
    let driver = Driver::with_datapaths(
        datapaths,
        endpoint,
        Some(shared.server_config.clone()),
        config.driver,
    );
    let app = ServerApp::new(index, shared, config, now);
    (driver, app)
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
    pub(super) fn start(bound: Bound, shared: Shared) -> Result<Self, ServerError> {
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
                        let clone = socket.try_clone().map_err(|source| ServerError::Io {
                            what: "a worker's handle to the listening socket",
                            source,
                        })?;
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
            .map_err(|e| failed(format!("worker {index}: {e:#}")))?;
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
            .map_err(|e| failed(format!("the dispatcher: {e:#}")))?;
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
    ) -> Result<ServerReport, ServerError> {
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
            return Err(ServerError::Workers { failures });
        }
        if let Some(i) = early {
            return Err(failed(if i == self.threads.len() {
                "the dispatcher stopped before the server was shut down".to_owned()
            } else {
                format!("worker {i} stopped before the server was shut down")
            }));
        }
        Ok(ServerReport::merged(
            reports,
            &self.ledger,
            &self.steering,
            dispatch,
        ))
    }
}

/// One thread's failure.
fn failed(failure: String) -> ServerError {
    ServerError::Workers {
        failures: vec![failure],
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

#[cfg(test)]
pub(super) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::super::{Server, ServerConfig, Steering};

    /// The worker that panics at its next turn, for the test below (none: `usize::MAX`).
    pub(in super::super) static PANIC_WORKER: AtomicUsize = AtomicUsize::new(usize::MAX);

    /// Panics if this is the worker the test picked.
    pub(in super::super) fn maybe_panic(worker: usize) {
        if PANIC_WORKER.load(Ordering::Relaxed) == worker {
            panic!("worker {worker} panics for the test");
        }
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

    /// A server is not started for an ALPN it has no application for, nor for none.
    #[test]
    fn unknown_or_no_alpns_are_refused_at_bind() {
        let bind = |alpns: &[&str]| {
            Server::bind(ServerConfig {
                listen: vec!["127.0.0.1:0".parse().unwrap()],
                alpns: alpns.iter().map(|a| (*a).to_owned()).collect(),
                workers: 1,
                ..ServerConfig::default()
            })
        };
        assert!(matches!(
            bind(&["h3", "h2"]),
            Err(crate::ServerError::UnknownAlpn(a)) if a == "h2"
        ));
        assert!(matches!(bind(&[]), Err(crate::ServerError::NoAlpn)));
        bind(&["h3", "hq-interop", "perf"]).expect("every served ALPN");
    }

    /// `ServerConfig::check` refuses what `bind` refuses before binding, and binds nothing: a
    /// config on a port held elsewhere passes it, where `bind` finds the port taken.
    #[test]
    fn check_refuses_what_bind_refuses_and_binds_nothing() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let config = ServerConfig {
            listen: vec![held.local_addr().unwrap()],
            workers: 1,
            ..ServerConfig::default()
        };
        config.check().expect("a good config");
        assert!(Server::bind(config.clone()).is_err(), "the port is taken");
        let refused = |change: fn(&mut ServerConfig)| {
            let mut c = config.clone();
            change(&mut c);
            c.check().expect_err("refused")
        };
        assert!(matches!(
            refused(|c| c.alpns = vec!["h2".into()]),
            crate::ServerError::UnknownAlpn(a) if a == "h2"
        ));
        assert!(matches!(
            refused(|c| c.alpns.clear()),
            crate::ServerError::NoAlpn
        ));
        assert!(matches!(
            refused(|c| c.workers = 0),
            crate::ServerError::Layout(crate::LayoutError::Workers(0))
        ));
        assert!(matches!(
            refused(|c| c.root = Some("/nonexistent/neqo-check".into())),
            crate::ServerError::Root { .. }
        ));
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
