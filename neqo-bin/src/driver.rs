//! The endpoint driver: one `quinn_proto::Endpoint`, its connections, one [`Socket`] per bound
//! address and one timer heap, all on the current task.
//!
//! Each turn of [`Driver::run`] fires due timers, lets connections and the [`Application`]
//! react to their events, asks every connection with work for transmits (as many GSO segments
//! per transmit as the socket allows) and flushes them through [`Socket::send`] a batch per
//! syscall, keeping what the kernel did not take for the next writable wake-up. Then it waits
//! for readability, writability, the earliest timer or shutdown, and drains receive batches
//! into the endpoint, handing each datagram's `BytesMut` over without a copy.

use std::{
    collections::VecDeque,
    future::{Future, poll_fn},
    io,
    net::{IpAddr, SocketAddr},
    pin::pin,
    sync::Arc,
    task::Poll,
    time::Instant,
};

use neqo_udp::{Datagram, RecvBatch, Socket, Stats, Transmit};
use quinn_proto::{
    ClientConfig, ConnectError, Connection, ConnectionHandle, DatagramEvent, Endpoint,
    EndpointConfig, Event, ServerConfig,
};

use crate::{
    pacer::{PRECISE_WITHIN, Pacer},
    timers::{TimerSlot, Timers},
};

/// Receive batches taken from each socket per turn before the driver processes and sends
/// again. One: answering every batch at once (ACKs, and new data on the ACKs' credit) keeps
/// the peer's sending pipelined with our processing; measured on loopback, it beat draining
/// 4 or 16 batches per turn in throughput and CPU. Whatever is left is read next turn, as the
/// socket stays ready.
const RECV_BUDGET: usize = 1;

/// Capacity of a pooled transmit buffer: one full GSO run.
const TX_BUF: usize = neqo_udp::MAX_UDP_PAYLOAD + 1500;

/// What the driver does with a new incoming connection.
#[derive(Debug)]
pub enum Admission {
    /// Accept it, with this server config instead of the endpoint's if given (e.g. to give
    /// the connection its own qlog stream).
    Accept(Option<Arc<ServerConfig>>),
    /// Refuse it with `CONNECTION_REFUSED`.
    Refuse,
}

/// The protocol on top of the driver: reacts to connection events.
pub trait Application {
    /// A peer opens a connection; `open` connections exist already.
    fn admit(&mut self, _open: usize, _remote: SocketAddr) -> Admission {
        Admission::Accept(None)
    }

    /// A connection was accepted.
    fn accepted(&mut self, _ch: ConnectionHandle, _conn: &mut Connection) {}

    /// An event of a connection.
    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant);

    /// A connection is drained and about to be dropped.
    fn drained(&mut self, _ch: ConnectionHandle, _conn: &Connection) {}

    /// Called every turn: may open or close connections. Returns when it wants to be called
    /// again at the latest.
    fn poll(&mut self, _driver: &mut Driver, _now: Instant) -> Option<Instant> {
        None
    }

    /// Whether the driver may return (once everything queued is sent).
    fn done(&self) -> bool {
        false
    }
}

/// Counters the driver keeps besides the sockets' [`Stats`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DriverCounters {
    /// Incoming connections accepted.
    pub accepted: u64,
    /// Incoming connections refused (`--max-connections`).
    pub refused: u64,
    /// Connections drained and dropped.
    pub drained: u64,
    /// Packets declared lost by drained connections.
    pub lost_packets: u64,
    /// Transmits (GSO runs) handed to the socket.
    pub transmits: u64,
    /// Datagrams in those transmits.
    pub transmit_datagrams: u64,
    /// The most datagrams one transmit carried.
    pub max_transmit_datagrams: u64,
    /// Times a connection had to wait for the driver's pacer.
    pub paced_waits: u64,
    /// Datagrams fed to the endpoint.
    pub datagrams_in: u64,
    /// Wake-ups for socket readiness.
    pub io_wakes: u64,
    /// Wake-ups for a timer.
    pub timer_wakes: u64,
    /// The timer the pacer waits on; `None` with pacing off.
    pub pacing_timer: Option<crate::pacer::PacingTimer>,
}

struct Conn {
    conn: Connection,
    socket: usize,
    timer: TimerSlot,
    pace_at: Option<Instant>,
    pacer: Pacer,
    in_dirty: bool,
    touched: bool,
}

/// A transmit waiting for the kernel, owning its (pooled) buffer.
struct Outgoing {
    buf: Vec<u8>,
    destination: SocketAddr,
    ecn: Option<neqo_udp::EcnCodepoint>,
    segment_size: Option<usize>,
    src_ip: Option<IpAddr>,
}

impl Outgoing {
    /// quinn-proto's transmit, whose bytes are in `buf`, as the socket will send it.
    fn new(buf: Vec<u8>, t: &quinn_proto::Transmit) -> Self {
        Self {
            buf,
            destination: t.destination,
            ecn: t
                .ecn
                .and_then(|e| neqo_udp::EcnCodepoint::from_bits(e as u8)),
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        }
    }
}

struct SocketSlot {
    socket: Socket,
    /// The `Transmit` array handed to `Socket::send`, kept for its allocation.
    scratch: Vec<Transmit<'static>>,
    batch: RecvBatch,
    pending: VecDeque<Outgoing>,
    /// Transmits generated before a flush: one syscall's worth.
    queue_limit: usize,
    blocked: bool,
}

/// Drives a QUIC endpoint over [`Socket`]s. See the module docs.
#[expect(
    missing_debug_implementations,
    reason = "quinn-proto's Endpoint and Connection are not Debug"
)]
pub struct Driver {
    endpoint: Endpoint,
    sockets: Vec<SocketSlot>,
    conns: Vec<Option<Conn>>,
    live: usize,
    timers: Timers,
    dirty: VecDeque<usize>,
    touched: Vec<usize>,
    pool: Vec<Vec<u8>>,
    rx: Vec<(usize, Datagram)>,
    due: Vec<(usize, u64)>,
    pacing: bool,
    /// Sub-millisecond wake-ups for the pacer's near release times (see `pacer`).
    precise: Option<crate::pacer::PreciseTimer>,
    /// Release times the pacer gave that have not passed, earliest first (some stale).
    pace_next: std::collections::BinaryHeap<std::cmp::Reverse<Instant>>,
    counters: DriverCounters,
}

/// Why the driver woke up.
enum Wake {
    Io,
    Timer,
    Shutdown,
}

impl Driver {
    /// A driver over `sockets`; a server when `server_config` is given.
    #[must_use]
    pub fn new(
        sockets: Vec<Socket>,
        server_config: Option<Arc<ServerConfig>>,
        pacing: bool,
    ) -> Self {
        let endpoint = Endpoint::new(
            Arc::new(EndpointConfig::default()),
            server_config,
            true,
            None,
        );
        let sockets = sockets
            .into_iter()
            .map(|socket| SocketSlot {
                scratch: Vec::new(),
                batch: socket.recv_batch(),
                queue_limit: socket.batch_size().max(4),
                socket,
                pending: VecDeque::new(),
                blocked: false,
            })
            .collect();
        Self {
            endpoint,
            sockets,
            conns: Vec::new(),
            live: 0,
            timers: Timers::default(),
            dirty: VecDeque::new(),
            touched: Vec::new(),
            pool: Vec::new(),
            rx: Vec::new(),
            due: Vec::new(),
            pacing,
            precise: None,
            pace_next: std::collections::BinaryHeap::new(),
            counters: DriverCounters::default(),
        }
        .with_pacing_timer(crate::pacer::PacingTimer::Precise)
    }

    /// Sets the timer the pacer waits on (no effect with pacing off). `Precise` falls back to
    /// tokio's timers where there is no precise timer; [`counters`](Self::counters) say which
    /// one runs.
    #[must_use]
    pub fn with_pacing_timer(mut self, timer: crate::pacer::PacingTimer) -> Self {
        use crate::pacer::{PacingTimer, PreciseTimer};
        if !(self.pacing && timer == PacingTimer::Precise) {
            self.precise = None;
        } else if self.precise.is_none() {
            self.precise = PreciseTimer::new()
                .map_err(|e| tracing::debug!("no precise pacing timer ({e}): tokio's timers"))
                .ok();
        }
        self.counters.pacing_timer = self.pacing.then_some(if self.precise.is_some() {
            PacingTimer::Precise
        } else {
            PacingTimer::Tokio
        });
        self
    }

    /// Opens a connection from socket `socket` to `remote`.
    ///
    /// # Errors
    /// As `Endpoint::connect`.
    pub fn connect(
        &mut self,
        socket: usize,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<ConnectionHandle, ConnectError> {
        let now = Instant::now();
        let (ch, conn) = self.endpoint.connect(now, config, remote, server_name)?;
        self.insert(ch, conn, socket, now);
        Ok(ch)
    }

    /// A connection, to act on outside its events (it is polled for transmits this turn).
    pub fn connection(&mut self, ch: ConnectionHandle) -> Option<&mut Connection> {
        self.touch(ch.0);
        self.conns.get_mut(ch.0)?.as_mut().map(|c| &mut c.conn)
    }

    /// Every live connection (each polled for transmits this turn).
    pub fn connections(&mut self) -> impl Iterator<Item = (ConnectionHandle, &mut Connection)> {
        for i in 0..self.conns.len() {
            self.touch(i);
        }
        self.conns
            .iter_mut()
            .enumerate()
            .filter_map(|(i, c)| c.as_mut().map(|c| (ConnectionHandle(i), &mut c.conn)))
    }

    /// Connections not yet drained.
    #[must_use]
    pub const fn open_connections(&self) -> usize {
        self.live
    }

    /// The sockets' local addresses.
    #[must_use]
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.socket.local_addr().ok())
            .collect()
    }

    /// The sockets' counters, added up.
    #[must_use]
    pub fn socket_stats(&self) -> Stats {
        let mut total = Stats::default();
        for s in &self.sockets {
            total.accumulate(&s.socket.stats());
        }
        total
    }

    /// The driver's own counters.
    #[must_use]
    pub const fn counters(&self) -> DriverCounters {
        self.counters
    }

    /// Whether the driver paces.
    #[must_use]
    pub const fn pacing(&self) -> bool {
        self.pacing
    }

    fn insert(&mut self, ch: ConnectionHandle, conn: Connection, socket: usize, now: Instant) {
        if self.conns.len() <= ch.0 {
            self.conns.resize_with(ch.0 + 1, || None);
        }
        self.conns[ch.0] = Some(Conn {
            conn,
            socket,
            timer: TimerSlot::default(),
            pace_at: None,
            pacer: Pacer::new(now),
            in_dirty: false,
            touched: false,
        });
        self.live += 1;
        self.touch(ch.0);
    }

    fn touch(&mut self, idx: usize) {
        if let Some(Some(c)) = self.conns.get_mut(idx)
            && !c.touched
        {
            c.touched = true;
            self.touched.push(idx);
        }
    }

    fn take_buf(&mut self) -> Vec<u8> {
        let mut buf = self
            .pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(TX_BUF));
        buf.clear();
        buf
    }

    fn queue(&mut self, socket: usize, buf: Vec<u8>, t: &quinn_proto::Transmit) {
        self.sockets[socket]
            .pending
            .push_back(Outgoing::new(buf, t));
    }

    /// Runs until the application is done (and everything queued is sent) or `shutdown`
    /// completes (then every connection is closed and the close sent, best effort).
    ///
    /// # Errors
    /// A socket error other than `WouldBlock`.
    pub async fn run<A: Application>(
        &mut self,
        app: &mut A,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let mut shutdown = pin!(shutdown);
        loop {
            let now = Instant::now();
            self.fire_timers(now);
            self.process(app, now);
            let app_deadline = app.poll(self, now);
            self.process(app, now);
            self.transmit(now)?;
            if app.done() && self.sockets.iter().all(|s| s.pending.is_empty()) {
                return Ok(());
            }
            let deadline = match (self.timers.next(), app_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            match self.wait(deadline, shutdown.as_mut()).await? {
                Wake::Shutdown => {
                    let now = Instant::now();
                    for (_, conn) in self.connections() {
                        conn.close(now, 0u32.into(), bytes::Bytes::from_static(b"shutdown"));
                    }
                    self.process(app, now);
                    return self.transmit(now);
                }
                Wake::Io => {
                    self.counters.io_wakes += 1;
                    self.receive(app)?;
                }
                Wake::Timer => {
                    self.counters.timer_wakes += 1;
                    self.receive(app)?;
                }
            }
        }
    }

    async fn wait(
        &mut self,
        deadline: Option<Instant>,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> io::Result<Wake> {
        let mut sleep = pin!(deadline.map(|d| tokio::time::sleep_until(d.into())));
        let sockets = &self.sockets;
        let mut precise = self
            .precise
            .as_mut()
            .zip(self.pace_next.peek().map(|r| r.0))
            .filter(|(_, p)| p.saturating_duration_since(Instant::now()) < PRECISE_WITHIN);
        poll_fn(|cx| {
            if shutdown.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(Wake::Shutdown));
            }
            let mut ready = false;
            for slot in sockets {
                match slot.socket.poll_recv_ready(cx) {
                    Poll::Ready(Ok(())) => ready = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
                if !slot.pending.is_empty() || slot.socket.has_backlog() {
                    match slot.socket.poll_send_ready(cx) {
                        Poll::Ready(Ok(())) => ready = true,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => {}
                    }
                }
            }
            if ready {
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

    /// Takes up to [`RECV_BUDGET`] batches from every socket into the endpoint.
    fn receive<A: Application>(&mut self, app: &mut A) -> io::Result<()> {
        for _ in 0..RECV_BUDGET {
            let mut any = false;
            for (i, slot) in self.sockets.iter_mut().enumerate() {
                match slot.socket.recv(&mut slot.batch) {
                    Ok(_) => {
                        any = true;
                        self.rx.extend(slot.batch.datagrams().map(|d| (i, d)));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if !any {
                break;
            }
            let now = Instant::now();
            let mut rx = std::mem::take(&mut self.rx);
            for (socket, d) in rx.drain(..) {
                self.on_datagram(app, socket, d, now);
            }
            self.rx = rx;
        }
        Ok(())
    }

    fn on_datagram<A: Application>(
        &mut self,
        app: &mut A,
        socket: usize,
        d: Datagram,
        now: Instant,
    ) {
        self.counters.datagrams_in += 1;
        let mut buf = self.take_buf();
        let ecn = d
            .ecn
            .and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8));
        match self
            .endpoint
            .handle(now, d.source, d.destination, ecn, d.data, &mut buf)
        {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(Some(c)) = self.conns.get_mut(ch.0) {
                    c.conn.handle_event(event);
                    self.touch(ch.0);
                }
                self.pool.push(buf);
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                match app.admit(self.live, incoming.remote_address()) {
                    Admission::Accept(config) => {
                        match self.endpoint.accept(incoming, now, &mut buf, config) {
                            Ok((ch, conn)) => {
                                self.counters.accepted += 1;
                                self.insert(ch, conn, socket, now);
                                if let Some(Some(c)) = self.conns.get_mut(ch.0) {
                                    app.accepted(ch, &mut c.conn);
                                }
                                self.pool.push(buf);
                            }
                            Err(e) => {
                                tracing::debug!("accept failed: {}", e.cause);
                                if let Some(t) = e.response {
                                    self.queue(socket, buf, &t);
                                } else {
                                    self.pool.push(buf);
                                }
                            }
                        }
                    }
                    Admission::Refuse => {
                        self.counters.refused += 1;
                        let t = self.endpoint.refuse(incoming, &mut buf);
                        self.queue(socket, buf, &t);
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => self.queue(socket, buf, &t),
            None => self.pool.push(buf),
        }
    }

    fn fire_timers(&mut self, now: Instant) {
        while self.pace_next.peek().is_some_and(|r| r.0 <= now) {
            self.pace_next.pop();
        }
        let mut due = std::mem::take(&mut self.due);
        self.timers.expire(now, |k, g| due.push((k, g)));
        for (k, g) in due.drain(..) {
            let Some(Some(c)) = self.conns.get_mut(k) else {
                continue;
            };
            if !c.timer.fire(g) {
                continue;
            }
            if c.pace_at.is_some_and(|p| p <= now) {
                c.pace_at = None;
            }
            if c.conn.poll_timeout().is_some_and(|t| t <= now) {
                c.conn.handle_timeout(now);
            }
            self.touch(k);
        }
        self.due = due;
    }

    /// Routes endpoint and application events of touched connections; drops drained ones.
    fn process<A: Application>(&mut self, app: &mut A, now: Instant) {
        while let Some(idx) = self.touched.pop() {
            let Some(Some(c)) = self.conns.get_mut(idx) else {
                continue;
            };
            c.touched = false;
            let ch = ConnectionHandle(idx);
            let mut drained = false;
            loop {
                let mut progressed = false;
                while let Some(ev) = c.conn.poll_endpoint_events() {
                    progressed = true;
                    drained |= ev.is_drained();
                    if let Some(cev) = self.endpoint.handle_event(ch, ev) {
                        c.conn.handle_event(cev);
                    }
                }
                while let Some(ev) = c.conn.poll() {
                    progressed = true;
                    app.event(ch, &mut c.conn, ev, now);
                }
                if !progressed {
                    break;
                }
            }
            if drained {
                app.drained(ch, &c.conn);
                self.counters.drained += 1;
                self.counters.lost_packets += c.conn.stats().path.lost_packets;
                self.conns[idx] = None;
                self.live -= 1;
                continue;
            }
            if !c.in_dirty {
                c.in_dirty = true;
                self.dirty.push_back(idx);
            }
            Self::arm(&mut self.timers, idx, c);
        }
        if self.timers.len() > 4 * self.live + 1024 {
            self.timers.compact(
                self.conns
                    .iter()
                    .enumerate()
                    .filter_map(|(i, c)| c.as_ref().map(|c| (i, c.timer))),
            );
        }
    }

    fn arm(timers: &mut Timers, idx: usize, c: &mut Conn) {
        let deadline = match (c.conn.poll_timeout(), c.pace_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        timers.arm(idx, &mut c.timer, deadline);
    }

    /// Polls dirty connections for transmits, round robin, and flushes a syscall's worth at a
    /// time, until every connection is idle or paced or the sockets are full.
    fn transmit(&mut self, now: Instant) -> io::Result<()> {
        for s in &mut self.sockets {
            s.blocked = false;
        }
        loop {
            let mut produced = false;
            while self.generate_round(now) {
                produced = true;
                if self
                    .sockets
                    .iter()
                    .all(|s| s.blocked || s.pending.len() >= s.queue_limit)
                {
                    break;
                }
            }
            let mut flushed = false;
            for slot in &mut self.sockets {
                flushed |= Self::flush(slot, &mut self.pool)?;
            }
            if !produced && !flushed {
                break;
            }
        }
        for &idx in &self.dirty {
            if let Some(Some(c)) = self.conns.get_mut(idx) {
                Self::arm(&mut self.timers, idx, c);
            }
        }
        Ok(())
    }

    /// One round robin pass over the dirty connections, at most one transmit each; returns
    /// whether any was produced.
    fn generate_round(&mut self, now: Instant) -> bool {
        let mut produced = false;
        let mut rounds = self.dirty.len();
        while rounds > 0 {
            rounds -= 1;
            let Some(idx) = self.dirty.pop_front() else {
                break;
            };
            let Some(Some(c)) = self.conns.get_mut(idx) else {
                continue;
            };
            let slot = &mut self.sockets[c.socket];
            if slot.blocked || slot.pending.len() >= slot.queue_limit {
                self.dirty.push_back(idx);
                continue;
            }
            let mtu = usize::from(c.conn.current_mtu());
            let mut max = slot.socket.max_segments_for(mtu);
            if self.pacing && c.conn.is_handshaking() {
                // The handshake's flights go out unpaced, in bursts of at most
                // BURST_DATAGRAMS (anti-amplification and the initial window bound them, and
                // RFC 9002 §7.7 lets a sender burst its initial window). Before the first RTT
                // sample the bucket's rate is 1.25 x 14 720 B / 333 ms (quinn-proto's initial
                // window and RTT), so pacing them from an empty bucket delayed each flight by
                // about 22 ms: two such waits per connection capped HPS at about 18 conn/s.
                max = max.min(crate::pacer::BURST_DATAGRAMS);
            } else if self.pacing {
                match c
                    .pacer
                    .allowance(now, c.conn.congestion_state().window(), c.conn.rtt(), mtu)
                {
                    Ok(n) => max = max.min(n),
                    Err(at) => {
                        self.counters.paced_waits += 1;
                        c.pace_at = Some(at);
                        self.pace_next.push(std::cmp::Reverse(at));
                        c.in_dirty = false;
                        Self::arm(&mut self.timers, idx, c);
                        continue;
                    }
                }
            }
            let mut buf = self
                .pool
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(TX_BUF));
            buf.clear();
            if let Some(t) = c.conn.poll_transmit(now, max, &mut buf) {
                if self.pacing {
                    c.pacer.consume(t.size);
                }
                buf.truncate(t.size);
                self.counters.transmits += 1;
                let datagrams = t.segment_size.map_or(1, |s| t.size.div_ceil(s)) as u64;
                self.counters.transmit_datagrams += datagrams;
                self.counters.max_transmit_datagrams =
                    self.counters.max_transmit_datagrams.max(datagrams);
                slot.pending.push_back(Outgoing::new(buf, &t));
                self.dirty.push_back(idx);
                produced = true;
            } else {
                self.pool.push(buf);
                c.in_dirty = false;
                Self::arm(&mut self.timers, idx, c);
            }
        }
        produced
    }

    /// Sends what `slot` has queued; returns whether the kernel took anything.
    fn flush(slot: &mut SocketSlot, pool: &mut Vec<Vec<u8>>) -> io::Result<bool> {
        if slot.blocked || (slot.pending.is_empty() && !slot.socket.has_backlog()) {
            return Ok(false);
        }
        let mut transmits = recycle(std::mem::take(&mut slot.scratch));
        transmits.extend(slot.pending.iter().map(|o| Transmit {
            destination: o.destination,
            ecn: o.ecn,
            contents: &o.buf,
            segment_size: o.segment_size,
            src_ip: o.src_ip,
        }));
        let result = slot.socket.send(&transmits);
        let offered = transmits.len();
        transmits.clear();
        slot.scratch = recycle(transmits);
        match result {
            Ok(n) => {
                slot.blocked = n < offered;
                for o in slot.pending.drain(..n) {
                    pool.push(o.buf);
                }
                Ok(n > 0)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                slot.blocked = true;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

/// An empty vector of another lifetime on the same allocation (std collects in place when
/// the element layouts match), so the per-syscall `Transmit` array is not reallocated.
fn recycle<'a, 'b>(mut v: Vec<Transmit<'a>>) -> Vec<Transmit<'b>> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}
