//! The server's workers: each a thread with its own current-thread runtime, driver,
//! quinn-proto endpoint and sockets. With several, every listen address has a socket per
//! worker in one `SO_REUSEPORT` group, and the kernel's steering program hands each datagram
//! to the worker whose index its destination connection ID carries (`cid`), so a connection
//! stays on its worker when its client's address or port changes.
//!
//! What the workers share: the keys (stateless reset, Retry tokens, connection IDs), one TLS
//! config (one session store: a client resumes whichever worker it reaches), and the counts
//! the connection limits apply to ([`Totals`]).
//!
//! A worker that fails or panics stops the server (see [`Workers::run`]): the steering program
//! would go on sending its connections' datagrams to a socket nobody reads.

use std::{
    future::Future, net::SocketAddr, path::Path, sync::Arc, thread::JoinHandle, time::Instant,
};

use anyhow::{Context as _, bail};
use tokio::sync::{mpsc, oneshot};

use super::{ServerConfig, ServerReport, admission::Totals, app::ServerApp, cid::CidLayout};
use crate::driver::Driver;

/// What every worker starts from.
pub(super) struct Shared {
    /// Canonical.
    pub(super) root: Option<Arc<Path>>,
    pub(super) server_config: Arc<quinn_proto::ServerConfig>,
    pub(super) layout: CidLayout,
    pub(super) totals: Arc<Totals>,
    pub(super) config: ServerConfig,
}

/// The bound sockets: each worker's, one per listen address.
pub(super) struct Bound {
    per_worker: Vec<Vec<std::net::UdpSocket>>,
    /// The listen addresses, with their real ports.
    pub(super) addrs: Vec<SocketAddr>,
    /// How datagrams reach the workers, for the report.
    steering: String,
}

/// Binds a socket per worker on every listen address; with several workers, steered by the
/// worker byte of `layout`'s connection IDs.
///
/// # Errors
/// A bind failure, or several workers where the steering program cannot be attached.
pub(super) fn bind(listen: &[SocketAddr], layout: &CidLayout) -> anyhow::Result<Bound> {
    let workers = layout.workers();
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> = (0..workers).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    let steering = (workers > 1).then(|| {
        neqo_udp::CidSteering::new(
            u8::try_from(layout.worker_offset()).expect("within a 20-byte CID"),
        )
    });
    for addr in listen {
        let group = neqo_udp::bind_reuseport_group(*addr, workers, steering)?;
        if workers > 1
            && let neqo_udp::Steering::Hash { reason } = &group.steering
        {
            bail!(
                "--workers {workers}: datagrams cannot be steered to workers by connection ID \
                 on {addr} ({reason}); run with --workers 1"
            );
        }
        addrs.push(group.sockets[0].local_addr()?);
        for (w, s) in group.sockets.into_iter().enumerate() {
            per_worker[w].push(s);
        }
    }
    Ok(Bound {
        per_worker,
        addrs,
        steering: if workers > 1 {
            format!("{workers} workers, by connection ID (SO_REUSEPORT, classic BPF)")
        } else {
            "one worker".to_owned()
        },
    })
}

/// One worker: its driver and application.
struct Worker {
    driver: Driver,
    app: ServerApp,
}

impl Worker {
    /// Worker `index` on `sockets`; inside the worker's runtime.
    fn new(
        index: usize,
        sockets: Vec<std::net::UdpSocket>,
        shared: &Shared,
    ) -> anyhow::Result<Self> {
        let config = shared.config.worker_share();
        let sockets = sockets
            .into_iter()
            .map(|s| neqo_udp::Socket::from_std(s, config.socket.clone()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let endpoint = config
            .keys
            .endpoint_config(&shared.layout, index, config.cid_lifetime);
        let driver = Driver::server(
            sockets,
            endpoint,
            shared.server_config.clone(),
            config.pacing,
        )
        .with_pacing_timer(config.pacing_timer);
        let app = ServerApp::new(
            index,
            shared.root.clone(),
            shared.server_config.clone(),
            config,
            shared.totals.clone(),
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

/// A worker's thread.
struct WorkerThread {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<anyhow::Result<ServerReport>>>,
}

/// Tells the server a worker's thread ended, however it ended (a panic included).
struct Ended(mpsc::UnboundedSender<usize>, usize);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(self.1);
    }
}

/// The running workers.
pub(super) struct Workers {
    threads: Vec<WorkerThread>,
    /// The index of each worker whose thread ended.
    ended: mpsc::UnboundedReceiver<usize>,
    pub(super) totals: Arc<Totals>,
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
    /// Starts a worker on each socket set; returns once all are serving.
    ///
    /// # Errors
    /// A worker that failed to start (the others are stopped).
    pub(super) fn start(bound: Bound, shared: Shared) -> anyhow::Result<Self> {
        let shared = Arc::new(shared);
        let (ended_tx, ended) = mpsc::unbounded_channel();
        let mut workers = Self {
            threads: Vec::new(),
            ended,
            totals: shared.totals.clone(),
            steering: bound.steering,
        };
        for (index, sockets) in bound.per_worker.into_iter().enumerate() {
            let (ready_tx, ready) = std::sync::mpsc::channel();
            let (stop, stopped) = oneshot::channel::<()>();
            let (shared, ended) = (shared.clone(), Ended(ended_tx.clone(), index));
            let thread = std::thread::Builder::new()
                .name(format!("neqo-server-{index}"))
                .spawn(move || {
                    let _ended = ended;
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    rt.block_on(async move {
                        let worker = match Worker::new(index, sockets, &shared) {
                            Ok(w) => w,
                            Err(e) => {
                                let msg = format!("{e:#}");
                                let _ = ready_tx.send(Err(e));
                                bail!(msg);
                            }
                        };
                        let _ = ready_tx.send(Ok(()));
                        worker
                            .run(async move {
                                let _ = stopped.await;
                            })
                            .await
                    })
                })
                .context("starting a worker thread")?;
            workers.threads.push(WorkerThread {
                stop: Some(stop),
                thread: Some(thread),
            });
            match ready.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e.context(format!("worker {index}"))),
                Err(_) => bail!("worker {index} died while starting"),
            }
        }
        Ok(workers)
    }

    fn stop_all(&mut self) {
        for t in &mut self.threads {
            if let Some(s) = t.stop.take() {
                let _ = s.send(());
            }
        }
    }

    /// Serves until `shutdown` completes or a worker ends on its own; then stops every
    /// worker and adds up their reports.
    ///
    /// # Errors
    /// A worker that failed, panicked or stopped before `shutdown`.
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
        let mut running = self.threads.len() - usize::from(early.is_some());
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
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        if let Some(i) = early {
            bail!("worker {i} stopped before the server was shut down");
        }
        Ok(ServerReport::merged(reports, &self.totals, &self.steering))
    }
}

impl Drop for Workers {
    /// A server dropped without [`run`](Workers::run) (or while it runs) stops its workers.
    fn drop(&mut self) {
        self.stop_all();
        for t in &mut self.threads {
            if let Some(thread) = t.thread.take() {
                let _ = thread.join();
            }
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

    /// The worker that panics at its next turn, for the test below (none: `usize::MAX`).
    pub(in super::super) static PANIC_WORKER: AtomicUsize = AtomicUsize::new(usize::MAX);

    /// Panics if this is the worker the test picked.
    pub(in super::super) fn maybe_panic(worker: usize) {
        if PANIC_WORKER.load(Ordering::Relaxed) == worker {
            panic!("worker {worker} panics for the test");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_worker_that_panics_stops_the_server_with_an_error() {
        use super::super::{Server, ServerConfig};

        let server = Server::bind(ServerConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            workers: 3,
            ..ServerConfig::default()
        })
        .expect("server starts");
        let addr = server.local_addrs()[0];
        PANIC_WORKER.store(2, Ordering::Relaxed);
        // A short-header datagram whose connection ID steers it to worker 2: its worker
        // byte (after the first octet, no server ID) is 2, modulo 3.
        let mut datagram = vec![0x40, 0xe0, 2];
        datagram.resize(40, 0);
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(&datagram, addr).unwrap();
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
        PANIC_WORKER.store(usize::MAX, Ordering::Relaxed);
        let err = result
            .expect("the server returned without a shutdown")
            .expect_err("with an error");
        let msg = format!("{err:#}");
        assert!(
            msg.contains("worker 2 panicked: worker 2 panics for the test"),
            "{msg}"
        );
    }
}
