//! A QUIC endpoint driver: quinn-proto's sans-I/O endpoint and connections over
//! [`neqo_udp`]'s batched sockets, paced, on the current task.
//!
//! Data flows one way through it:
//!
//! ```text
//! kernel -> Datapath::recv -> Endpoint::handle / Connection::handle_event
//!        -> Application::event -> Connection::poll_transmit
//!        -> the path's TxQueue -> Datapath::flush -> kernel
//! ```
//!
//! Each [`turn`](Driver::turn) fires due wake-ups (quinn-proto timers and pacer releases
//! alike), routes the events of connections something happened to, lets the [`Application`]
//! act, and asks every ready connection for transmits, round robin and paced, flushing a
//! syscall's worth at a time. [`run`](Driver::run) alternates turns with waiting for
//! readiness, the next wake-up or shutdown, and receiving.
//!
//! - [`Driver`] and [`DriverConfig`]: the driver and how it paces and shuts down.
//! - [`Application`]: what a protocol implements to run on it.
//! - [`Datapath`]: what a socket must offer ([`SocketDatapath`] over a neqo-udp socket,
//!   [`ChannelDatapath`] fed by a dispatcher over a channel).
//! - [`TransportOptions`]: the transport settings both sides use, made into quinn-proto's
//!   `TransportConfig` in one place; [`tls`]: the rustls configs for QUIC (and for TLS over
//!   TCP, to compare against).
//! - [`run_client`]: a client on a runtime of its own, for tools and tests.
//! - For applications: [`Jobs`], work off the driver thread that wakes it when done;
//!   [`IdMap`], maps keyed by connection handles and stream IDs with a cheap hash.
//! - `testing` (feature `testing`): a seeded in-memory network on a virtual clock that
//!   drivers run on, deterministic, for tests of applications.
//!
//! A driver is built and run on one thread (its datapaths are registered with that thread's
//! runtime); what crosses threads is configuration (`Arc<ServerConfig>`) and reports.

mod application;
mod channel;
mod congestion;
mod conns;
mod counters;
mod datapath;
mod error;
mod events;
mod idmap;
mod jobs;
mod pacer;
mod precise_timer;
mod rx;
mod scheduler;
mod standalone;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tls;
mod transport;
mod tx;

#[cfg(test)]
mod tests;

use std::{
    future::{Future, poll_fn},
    io,
    net::SocketAddr,
    pin::{Pin, pin},
    sync::Arc,
    task::Poll,
    time::{Duration, Instant},
};

pub use application::{Admission, Application};
pub use channel::{CHANNEL_RECV_BATCH, ChannelDatapath};
pub use counters::{DriverCounters, EcnCounts};
pub use datapath::{Datapath, SocketDatapath};
pub use error::ConfigError;
pub use idmap::{IdHasher, IdMap, IdSet};
pub use jobs::Jobs;
use neqo_udp::{Datagram, Socket, Stats, TxQueue};
pub use pacer::{BURST_DATAGRAMS, PacingTimer};
use quinn_proto::{
    ClientConfig, ConnectError, Connection, ConnectionHandle, Endpoint, EndpointConfig,
    ServerConfig,
};
pub use rx::BEHIND_HOLD;
pub use standalone::run_client;
pub use transport::{
    ACK_EVERY_MAX_DELAY, CLIENT_KEEP_ALIVE, CongestionControl, DEFAULT_MTU_BOUND,
    MAX_CONCURRENT_STREAMS, MAX_MTU_BOUND, MIN_MTU_BOUND, MTU_MINIMUM_CHANGE, ROUTE_MTU_CAP,
    TransportOptions, mtu_bound, qlog_label,
};

use conns::Connections;
use datapath::Path;
use pacer::{PRECISE_WITHIN, PreciseTimer};
use scheduler::Scheduler;

/// How long a shutdown waits for a full socket to take the connections' closes before it
/// gives up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// How long a shutdown waits for the peers to acknowledge the resets of what it cut before it
/// closes the connections anyway: many round trips on any path a server serves.
const CUT_GRACE: Duration = Duration::from_millis(500);

/// How a [`Driver`] paces and shuts down. The default paces on the precise timer and closes
/// every connection at once on shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriverConfig {
    /// Spread each connection's datagrams over its round trip (`docs/reference/pacing.md`); off, a
    /// connection sends whatever congestion control allows at once.
    pub pacing: bool,
    /// What the pacer waits on (no effect with pacing off). `Precise` falls back to tokio's
    /// timers where there is no precise timer; [`Driver::counters`] say which one ran.
    pub pacing_timer: PacingTimer,
    /// How long a shutdown may let the application finish work under way
    /// ([`Application::shutdown`]); zero closes every connection at once.
    pub drain: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            pacing: true,
            pacing_timer: PacingTimer::Precise,
            drain: Duration::ZERO,
        }
    }
}

impl DriverConfig {
    /// Paced or not.
    #[must_use]
    pub const fn with_pacing(mut self, pacing: bool) -> Self {
        self.pacing = pacing;
        self
    }

    /// The timer the pacer waits on.
    #[must_use]
    pub const fn with_pacing_timer(mut self, timer: PacingTimer) -> Self {
        self.pacing_timer = timer;
        self
    }

    /// The drain period of a shutdown.
    #[must_use]
    pub const fn with_drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }
}

/// The largest UDP payload a receive slot holds, and the largest QUIC allows.
const MAX_RECV_PAYLOAD: u16 = {
    assert!(neqo_udp::RECV_SLOT_SIZE >= 65_527);
    65_527
};

/// Capacity of a transmit buffer: one full GSO run.
const TX_BUF: usize = neqo_udp::MAX_UDP_PAYLOAD + 1500;

/// Drives a QUIC endpoint over [`Datapath`]s. See the module docs.
#[expect(
    missing_debug_implementations,
    reason = "quinn-proto's Endpoint and Connection are not Debug"
)]
pub struct Driver {
    conns: Connections,
    paths: Vec<Path>,
    scheduler: Scheduler,
    /// The origin of the schedule's tick grid.
    epoch: Instant,
    pacing: bool,
    /// What the pacer is to wait on.
    pacing_timer: PacingTimer,
    /// Sub-millisecond wake-ups for near deadlines (pacer releases), when pacing: made when
    /// `run` starts, inside the runtime it registers with.
    precise: Option<PreciseTimer>,
    counters: DriverCounters,
    /// Datagrams of one receive, kept for its allocation.
    rx: Vec<Datagram>,
    /// Until when the driver counts as behind its sockets (`rx::BEHIND_HOLD`).
    behind_until: Option<Instant>,
    /// Set by [`close_all`](Driver::close_all): until when the driver waits for the closed
    /// connections to drain.
    closing: Option<Instant>,
    /// How long a shutdown lets the application finish what is under way
    /// ([`DriverConfig::drain`]).
    drain: Duration,
    /// Set by a shutdown the application drains first: when the driver cuts what is still
    /// under way.
    draining: Option<Instant>,
    /// Set once the application has cut what was under way ([`Application::cut`]) and has
    /// resets to deliver: when the driver closes everything anyway.
    cutting: Option<Instant>,
}

fn sockets_as_datapaths(sockets: Vec<Socket>) -> Vec<Box<dyn Datapath>> {
    sockets
        .into_iter()
        .map(|s| Box::new(SocketDatapath::new(s)) as Box<dyn Datapath>)
        .collect()
}

/// What a [`turn`](Driver::turn) left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turn {
    /// When the driver must turn again at the latest (a connection's or the application's
    /// wake-up).
    pub deadline: Option<Instant>,
    /// The application is done and everything queued is sent.
    pub done: bool,
}

/// Why the driver woke up.
enum Wake {
    Io,
    Timer,
    Shutdown,
}

impl Driver {
    /// A client over `sockets`, its endpoint with quinn-proto's default config.
    #[must_use]
    pub fn client(sockets: Vec<Socket>, config: DriverConfig) -> Self {
        Self::with_datapaths(
            sockets_as_datapaths(sockets),
            EndpointConfig::default(),
            None,
            config,
        )
    }

    /// A server over `sockets` whose endpoint has `endpoint`'s config (its stateless-reset
    /// key, say).
    #[must_use]
    pub fn server(
        sockets: Vec<Socket>,
        endpoint: EndpointConfig,
        server_config: Arc<ServerConfig>,
        config: DriverConfig,
    ) -> Self {
        Self::with_datapaths(
            sockets_as_datapaths(sockets),
            endpoint,
            Some(server_config),
            config,
        )
    }

    /// A driver over any datapaths; a server when `server_config` is given.
    #[must_use]
    pub fn with_datapaths(
        datapaths: Vec<Box<dyn Datapath>>,
        endpoint: EndpointConfig,
        server_config: Option<Arc<ServerConfig>>,
        config: DriverConfig,
    ) -> Self {
        let mut endpoint = endpoint;
        // What the sockets' receive slots hold, as the transport parameter tells the peer: its
        // path MTU discovery may then probe up to what the path carries.
        endpoint
            .max_udp_payload_size(MAX_RECV_PAYLOAD)
            .expect("within quinn-proto's bounds");
        let endpoint = Endpoint::new(Arc::new(endpoint), server_config, true, None);
        let paths = datapaths
            .into_iter()
            .map(|io| Path {
                queue_limit: io.batch_size().max(4),
                // Room for a full queue and the transmits generated while it is flushed.
                queue: TxQueue::new(TX_BUF).with_pool_limit(2 * io.batch_size().max(4)),
                io,
                blocked: false,
                overflows: 0,
            })
            .collect();
        Self {
            conns: Connections::new(endpoint),
            paths,
            scheduler: Scheduler::default(),
            epoch: Instant::now(),
            pacing: config.pacing,
            pacing_timer: config.pacing_timer,
            precise: None,
            counters: DriverCounters {
                pacing_timer: config.pacing.then_some(config.pacing_timer),
                ..DriverCounters::default()
            },
            rx: Vec::new(),
            behind_until: None,
            closing: None,
            drain: config.drain,
            draining: None,
            cutting: None,
        }
    }

    /// Whether new connections are refused: the driver is draining, cutting or closing.
    pub(crate) const fn shutting_down(&self) -> bool {
        self.closing.is_some() || self.draining.is_some() || self.cutting.is_some()
    }

    /// Starts a shutdown: with a drain period and an application with work worth finishing
    /// ([`Application::shutdown`]), new connections are refused and the open ones served
    /// until the application is [settled](Application::settled) or the period ends; then,
    /// or at once, what is still under way is [cut](Application::cut) and every connection
    /// closed ([`close_all`](Self::close_all)).
    ///
    /// # Errors
    /// A socket error other than `WouldBlock`.
    pub fn shut_down<A: Application>(&mut self, app: &mut A, now: Instant) -> io::Result<()> {
        if self.shutting_down() {
            return Ok(());
        }
        if !self.drain.is_zero() && app.shutdown(self, now) {
            self.draining = Some(now + self.drain);
            return Ok(());
        }
        self.cut_or_close(app, now)
    }

    /// Cuts what the application has under way; closes every connection at once unless the
    /// cut has resets to deliver first (then [`end_drain`](Self::end_drain) closes).
    fn cut_or_close<A: Application>(&mut self, app: &mut A, now: Instant) -> io::Result<()> {
        if app.cut(self, now) {
            self.cutting = Some(now + CUT_GRACE);
            self.process(app, now);
            return self.transmit(now);
        }
        self.close_all(app, now)
    }

    /// While draining: cuts what is under way once the drain period is over; closes every
    /// connection once the application is settled (or the cut's grace is over).
    fn end_drain<A: Application>(&mut self, app: &mut A, now: Instant) -> io::Result<()> {
        if self.closing.is_some() {
            return Ok(());
        }
        if let Some(by) = self.cutting {
            if now >= by || app.settled() {
                self.close_all(app, now)?;
            }
        } else if let Some(by) = self.draining {
            if app.settled() {
                self.close_all(app, now)?;
            } else if now >= by {
                tracing::warn!("shutdown: the drain period ended with work under way: cut");
                self.cut_or_close(app, now)?;
            }
        }
        Ok(())
    }

    /// Makes the precise timer when pacing asks for it (once; inside the runtime it registers
    /// with); tokio's timers (and the counters saying so) where there is none.
    fn make_precise_timer(&mut self) {
        if self.pacing && self.pacing_timer == PacingTimer::Precise && self.precise.is_none() {
            match PreciseTimer::new() {
                Ok(t) => self.precise = Some(t),
                Err(e) => {
                    tracing::debug!("no precise pacing timer ({e}): tokio's timers");
                    self.pacing_timer = PacingTimer::Tokio;
                    self.counters.pacing_timer = Some(PacingTimer::Tokio);
                }
            }
        }
    }

    /// Opens a connection from path (socket) `path` to `remote`, at `now` (the `now` of the
    /// [`Application::poll`] that opens it).
    ///
    /// # Errors
    /// As `Endpoint::connect`.
    pub fn connect(
        &mut self,
        path: usize,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
        now: Instant,
    ) -> Result<ConnectionHandle, ConnectError> {
        let (ch, conn) = self
            .conns
            .endpoint
            .connect(now, config, remote, server_name)?;
        self.conns.insert(ch, conn, path, now);
        Ok(ch)
    }

    /// A connection, to look at.
    #[must_use]
    pub fn connection(&self, ch: ConnectionHandle) -> Option<&Connection> {
        self.conns.get(ch).map(|c| &c.conn)
    }

    /// Acts on a connection outside its events (closes it, opens a stream, ...): `f` runs on
    /// it, and the driver then routes its events and sends what it has, this turn. `None`
    /// when there is no such connection.
    pub fn update<R>(
        &mut self,
        ch: ConnectionHandle,
        f: impl FnOnce(&mut Connection) -> R,
    ) -> Option<R> {
        let r = f(&mut self.conns.get_mut(ch.0)?.conn);
        self.conns.touch(ch.0);
        Some(r)
    }

    /// Every live connection, to look at.
    pub fn connections(&self) -> impl Iterator<Item = (ConnectionHandle, &Connection)> {
        self.conns.iter().map(|(ch, c)| (ch, &c.conn))
    }

    /// Connections not yet drained.
    #[must_use]
    pub const fn open_connections(&self) -> usize {
        self.conns.len()
    }

    /// The paths' local addresses.
    #[must_use]
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.paths
            .iter()
            .filter_map(|p| p.io.local_addr().ok())
            .collect()
    }

    /// The sockets' counters, added up.
    #[must_use]
    pub fn socket_stats(&self) -> Stats {
        let mut total = Stats::default();
        for p in &self.paths {
            total.accumulate(&p.io.stats());
        }
        total
    }

    /// Datagrams queued and not yet taken by the sockets.
    #[must_use]
    pub fn queued_datagrams(&self) -> usize {
        self.paths.iter().map(|p| p.queue.queued_datagrams()).sum()
    }

    /// The driver's own counters, with the path validation frames of the connections still
    /// open added to those of the drained ones.
    #[must_use]
    pub fn counters(&self) -> DriverCounters {
        let mut c = self.counters;
        c.peak_connections = self.conns.peak() as u64;
        for (_, conn) in self.connections() {
            c.add_paths(&conn.stats());
        }
        c
    }

    /// Each path's (socket's) counters, in path order.
    pub fn path_stats(&self) -> impl Iterator<Item = Stats> + '_ {
        self.paths.iter().map(|p| p.io.stats())
    }

    /// Whether the driver paces.
    #[must_use]
    pub const fn pacing(&self) -> bool {
        self.pacing
    }

    /// One turn at `now`: fires due wake-ups, routes events, lets the application act, and
    /// sends what the connections have, as far as pacing and the sockets allow.
    ///
    /// # Errors
    /// A socket error other than `WouldBlock`.
    pub fn turn<A: Application>(&mut self, app: &mut A, now: Instant) -> io::Result<Turn> {
        self.fire(now);
        self.process(app, now);
        let app_deadline = app.poll(self, now);
        self.process(app, now);
        self.transmit(now)?;
        self.end_drain(app, now)?;
        let conns = &self.conns;
        let next = self.scheduler.next(|idx, g| conns.is_scheduled(idx, g));
        let deadline = match (next, app_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sent = self.paths.iter().all(|p| p.queue.is_empty());
        let done = match self.closing {
            None => app.done() && sent,
            Some(by) if now >= by => {
                tracing::warn!(
                    "shutdown: gave up on {} connections, {} datagrams queued",
                    self.conns.len(),
                    self.queued_datagrams()
                );
                true
            }
            // The closes are out: nothing queued, no connection with more to send.
            Some(_) => sent && self.conns.ready_len() == 0,
        };
        let deadline = self
            .closing
            .or(self.cutting)
            .or(self.draining)
            .map_or(deadline, |by| Some(deadline.map_or(by, |d| d.min(by))));
        Ok(Turn { deadline, done })
    }

    /// Closes every connection and refuses new ones. The driver's turns go on sending until
    /// the closes are out (nothing queued, no connection with more to send), or a full
    /// socket has not taken them within a grace period; then a turn reports `done`. The
    /// connections' closing periods (RFC 9000 section 10.2) are not waited out.
    ///
    /// # Errors
    /// A socket error other than `WouldBlock`.
    pub fn close_all<A: Application>(&mut self, app: &mut A, now: Instant) -> io::Result<()> {
        self.closing.get_or_insert(now + SHUTDOWN_GRACE);
        let open: Vec<usize> = self.conns.iter().map(|(ch, _)| ch.0).collect();
        for idx in open {
            if let Some(c) = self.conns.get_mut(idx) {
                let (code, reason) = app.close_reason(ConnectionHandle(idx));
                c.conn.close(now, code, bytes::Bytes::from_static(reason));
            }
            self.conns.touch(idx);
        }
        self.process(app, now);
        self.transmit(now)
    }

    /// Runs until the application is done (and everything queued is sent), or after
    /// `shutdown` completes, until [`close_all`](Self::close_all)'s closes are out.
    ///
    /// # Errors
    /// A socket error other than `WouldBlock`.
    pub async fn run<A: Application>(
        &mut self,
        app: &mut A,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let shutdown = pin!(shutdown);
        // Fused: a finished future must not be polled again.
        let mut shutdown = Some(shutdown);
        // Made now rather than at the first paced wait: a server holds the same descriptors
        // idle and under load, so that one more is a leak.
        self.make_precise_timer();
        loop {
            let turn = self.turn(app, Instant::now())?;
            if turn.done {
                return Ok(());
            }
            let signal = shutdown.as_mut().map(Pin::as_mut);
            match self.wait(app, turn.deadline, signal).await? {
                Wake::Shutdown => {
                    shutdown = None;
                    self.shut_down(app, Instant::now())?;
                }
                Wake::Io => self.counters.io_wakes += 1,
                Wake::Timer => self.counters.timer_wakes += 1,
            }
            self.receive(app, Instant::now())?;
        }
    }

    /// Waits for readability, writability of a path with something queued, the deadline, the
    /// application's own wake-up, or shutdown.
    async fn wait<A: Application>(
        &mut self,
        app: &mut A,
        deadline: Option<Instant>,
        mut shutdown: Option<Pin<&mut impl Future<Output = ()>>>,
    ) -> io::Result<Wake> {
        let mut sleep = pin!(deadline.map(|d| tokio::time::sleep_until(d.into())));
        // Near deadlines go on the precise timer: tokio's 1 ms grid would round them up.
        let near = deadline
            .filter(|d| d.saturating_duration_since(Instant::now()) < PRECISE_WITHIN)
            .is_some();
        if near {
            self.make_precise_timer();
        }
        let paths = &self.paths;
        let mut precise = self.precise.as_mut().filter(|_| near).zip(deadline);
        poll_fn(|cx| {
            if let Some(s) = shutdown.as_mut()
                && s.as_mut().poll(cx).is_ready()
            {
                return Poll::Ready(Ok(Wake::Shutdown));
            }
            let mut ready = false;
            for p in paths {
                match p.io.poll_recv_ready(cx) {
                    Poll::Ready(Ok(())) => ready = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
                if !p.queue.is_empty() {
                    match p.io.poll_send_ready(cx) {
                        Poll::Ready(Ok(())) => ready = true,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => {}
                    }
                }
            }
            if ready || app.poll_wake(cx).is_ready() {
                return Poll::Ready(Ok(Wake::Io));
            }
            if let Some(s) = sleep.as_mut().as_pin_mut()
                && s.poll(cx).is_ready()
            {
                return Poll::Ready(Ok(Wake::Timer));
            }
            if let Some((t, d)) = precise.as_mut()
                && t.poll_until(cx, *d).is_ready()
            {
                return Poll::Ready(Ok(Wake::Timer));
            }
            Poll::Pending
        })
        .await
    }
}
