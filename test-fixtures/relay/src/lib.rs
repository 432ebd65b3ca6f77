//! A UDP impairment relay: forwards datagrams between clients and one upstream server, both
//! ways, delaying, dropping, reordering, duplicating, corrupting and rate-limiting them as
//! configured, with a seeded RNG so that a failing run can be replayed.
//!
//! This machine's kernel has no netem, so impaired paths come from here. The relay moves
//! datagrams through the project's own batched [`Socket`]s (`recvmmsg` in, `sendmmsg` out,
//! payloads never copied but for duplicates), so it is not the bottleneck it simulates.
//!
//! Each client address gets its own upstream socket (like a NAT), so the server sees one
//! address per client and replies find their way back. The same NAT can rebind (a new
//! upstream socket every so often), the path can go dark for a while (a blackhole), and a
//! window after the first client datagram can hold the client back to measure what a server
//! sends to an address it has not validated.

mod impair;

use std::{
    collections::{HashMap, HashSet},
    fmt, io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{Arc, Mutex, PoisonError},
    thread,
    time::{Duration, Instant},
};

use bytes::BytesMut;
pub use impair::{Impairment, LinkStats};
use impair::{Link, Pending};
use neqo_udp::{Socket, Transmit};
use tokio::sync::{mpsc, oneshot};

/// How the relay is set up.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Where clients send to.
    pub listen: SocketAddr,
    /// The server.
    pub upstream: SocketAddr,
    /// Impairment of the client-to-server direction.
    pub to_server: Impairment,
    /// Impairment of the server-to-client direction.
    pub to_client: Impairment,
    /// RNG seed; each direction derives its own stream from it.
    pub seed: u64,
    /// Socket configuration for all the relay's sockets.
    pub io: neqo_udp::Config,
    /// A client silent this long, both ways, loses its upstream socket, so that its next
    /// datagram comes from a new address. Longer than any quiet spell of a handshake still
    /// under way: probes back off to minutes apart in a five-minute handshake, and a new
    /// address in the middle of a handshake ends it (RFC 9000 section 9 allows no migration
    /// before the handshake is confirmed).
    pub session_idle: Duration,
    /// Drops every datagram, both ways, from `.0` after the first client datagram, for `.1`:
    /// a path that goes dark and comes back.
    pub blackhole: Option<(Duration, Duration)>,
    /// For this long after the first client datagram, the client's later datagrams are held
    /// back (dropped), and what the server sends meanwhile is counted: a server that has not
    /// validated the client's address may send no more than three times what it received
    /// (RFC 9000 section 8.1), and here it received one datagram.
    pub amplification_window: Option<Duration>,
    /// Every so often, each client gets a new upstream socket, as a NAT rebinding it: the
    /// server sees the client's address change.
    pub rebind: Option<Rebind>,
}

/// The relay rebinding its clients (see [`RelayConfig::rebind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebind {
    /// How often.
    pub every: RebindEvery,
    /// A new port only (`false`), or a new IP address too (`true`: the next of 127.0.0.2 to
    /// 127.0.0.254, so an IPv4 loopback server only).
    pub addr: bool,
    /// Each client is rebound at most this often (`None`: without end). Some stacks take a
    /// rebinding or two in a transfer but not more (msquic 2.5's server, docs/records/interop.md).
    pub limit: Option<u64>,
}

/// When the relay rebinds (see [`Rebind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebindEvery {
    /// Every client at once, this often from the first client datagram: a rebinding whose
    /// count depends on how long the traffic lasts, as a NAT's timer does.
    Interval(Duration),
    /// Each client on its own, at every this many of its short-header (1-RTT) datagrams,
    /// the one that reaches the count leaving from the new socket: a count that follows the
    /// traffic, not the machine's speed, and never in the middle of a handshake (a client
    /// sends short headers only once it has the handshake's keys).
    Datagrams(u64),
}

/// The client's side of a session after `rebinds` rebindings: a new port, and with
/// [`Rebind::addr`] a new loopback address.
fn rebound_addr(upstream: SocketAddr, rebind: Rebind, rebinds: u64) -> io::Result<SocketAddr> {
    if !rebind.addr {
        return Ok(upstream_bind_addr(upstream));
    }
    if !matches!(upstream.ip(), IpAddr::V4(ip) if ip.is_loopback()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "address rebinding needs an IPv4 loopback server",
        ));
    }
    // 127.0.0.2..=127.0.0.254, in turn; all of 127/8 is this host's on Linux.
    let host = u8::try_from(2 + rebinds % 253).unwrap_or(2);
    Ok(SocketAddr::new(Ipv4Addr::new(127, 0, 0, host).into(), 0))
}

impl RelayConfig {
    /// A relay with the same impairment both ways.
    #[must_use]
    pub fn symmetric(listen: SocketAddr, upstream: SocketAddr, imp: Impairment, seed: u64) -> Self {
        Self {
            listen,
            upstream,
            to_server: imp,
            to_client: imp,
            seed,
            io: neqo_udp::Config::default(),
            session_idle: Duration::from_secs(600),
            blackhole: None,
            amplification_window: None,
            rebind: None,
        }
    }
}

/// What the relay did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RelayStats {
    /// Client to server.
    pub to_server: LinkStats,
    /// Server to client.
    pub to_client: LinkStats,
    /// Client sessions open now.
    pub sessions: usize,
    /// Client sessions ever opened.
    pub sessions_total: u64,
    /// Datagrams dropped by the blackhole, both ways.
    pub blackholed: u64,
    /// Sessions given a new upstream socket ([`RelayConfig::rebind`]).
    pub rebinds: u64,
    /// [`RelayConfig::amplification_window`]: bytes of the client datagrams forwarded in it
    /// (the first only) and of the server's datagrams that arrived in it.
    pub window_client_bytes: u64,
    /// See [`RelayStats::window_client_bytes`].
    pub window_server_bytes: u64,
}

impl fmt::Display for RelayStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| direction | received | forwarded | lost | queue drops | corrupted | duplicated | reordered |"
        )?;
        writeln!(f, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
        for (name, s) in [
            ("client -> server", &self.to_server),
            ("server -> client", &self.to_client),
        ] {
            writeln!(
                f,
                "| {name} | {} | {} | {} | {} | {} | {} | {} |",
                s.received,
                s.forwarded,
                s.lost,
                s.queue_drops,
                s.corrupted,
                s.duplicated,
                s.reordered
            )?;
        }
        write!(
            f,
            "sessions: {} open, {} in all; blackholed {}; rebinds {}; window-client-bytes {}; window-server-bytes {}",
            self.sessions,
            self.sessions_total,
            self.blackholed,
            self.rebinds,
            self.window_client_bytes,
            self.window_server_bytes
        )
    }
}

/// A relay running on its own thread.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    stats: Arc<Mutex<RelayStats>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<io::Result<RelayStats>>>,
}

impl Relay {
    /// Binds the listening socket and starts relaying on a new thread.
    ///
    /// # Errors
    /// Invalid impairments, or the bind error (e.g. the port is in use).
    pub fn start(config: RelayConfig) -> io::Result<Self> {
        for imp in [&config.to_server, &config.to_client] {
            imp.validate()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        }
        let stats = Arc::new(Mutex::new(RelayStats::default()));
        let (stop_tx, stop_rx) = oneshot::channel();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let shared = Arc::clone(&stats);
        let thread = thread::Builder::new()
            .name("neqo-relay".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                rt.block_on(async move {
                    let listen = match Socket::bind(config.listen, config.io.clone()) {
                        Ok(s) => s,
                        Err(e) => {
                            let kind = e.kind();
                            let _ = addr_tx.send(Err(e.into()));
                            return Err(io::Error::new(kind, "relay failed to bind"));
                        }
                    };
                    let _ = addr_tx.send(listen.local_addr());
                    run(listen, config, async { drop(stop_rx.await) }, &shared).await
                })
            })?;
        let addr = addr_rx
            .recv()
            .map_err(|_| io::Error::other("relay thread ended before binding"))??;
        Ok(Self {
            addr,
            stats,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Where clients should send to.
    #[must_use]
    pub const fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the relay has done so far.
    #[must_use]
    pub fn stats(&self) -> RelayStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops the relay and returns its final counts.
    ///
    /// # Errors
    /// An I/O error that ended the relay early.
    pub fn stop(mut self) -> io::Result<RelayStats> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<RelayStats> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| io::Error::other("relay thread panicked"))?,
            None => Ok(self.stats()),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

struct Session {
    upstream: Arc<Socket>,
    last_active: Instant,
    reader: tokio::task::JoinHandle<()>,
    /// The client's short-header datagrams so far ([`RebindEvery::Datagrams`]).
    short_datagrams: u64,
    /// How often it was rebound ([`Rebind::limit`]).
    rebinds: u64,
}

impl Session {
    /// Whether `rebind` allows another rebinding of the session.
    fn may_rebind(&self, rebind: &Rebind) -> bool {
        rebind.limit.is_none_or(|l| self.rebinds < l)
    }

    /// Gives the session a new upstream socket, bound to `bind` at an address of `bound`'s
    /// choosing.
    fn rebind(
        &mut self,
        client: SocketAddr,
        (bind, bound): (SocketAddr, &mut Bound),
        io: &neqo_udp::Config,
        from_server: &mpsc::UnboundedSender<(SocketAddr, Vec<BytesMut>)>,
    ) -> io::Result<()> {
        let socket = Arc::new(bound.fresh(bind, io)?);
        self.reader.abort();
        self.reader = tokio::spawn(read_upstream(
            Arc::clone(&socket),
            client,
            from_server.clone(),
        ));
        self.upstream = socket;
        self.rebinds += 1;
        Ok(())
    }
}

/// The upstream addresses the relay has bound. A rebinding gets an address and port the relay
/// has not used before, as a NAT gives a rebound client a new 4-tuple: the kernel hands a port
/// out again once its socket is closed, and a middlebox that remembers 4-tuples (conntrack in
/// front of a fleet, docs/guides/fleet.md) would send a reused one where it went before.
#[derive(Debug, Default)]
struct Bound(HashSet<SocketAddr>);

impl Bound {
    /// Tries for a fresh address before taking whatever comes.
    const TRIES: usize = 64;

    /// A socket bound to `bind` (port 0), at an address not used before if one comes within
    /// [`Self::TRIES`].
    fn fresh(&mut self, bind: SocketAddr, io: &neqo_udp::Config) -> io::Result<Socket> {
        // Refused sockets stay bound until one is taken, so that the kernel cannot hand the
        // same port back at once.
        let mut refused = Vec::new();
        loop {
            let s = Socket::bind(bind, io.clone())?;
            if self.0.insert(s.local_addr()?) || refused.len() >= Self::TRIES {
                return Ok(s);
            }
            refused.push(s);
        }
    }
}

/// Whether `datagram` starts with a QUIC short header (RFC 9000 section 17.3: the first
/// bit, the header form, is 0).
fn is_short_header(datagram: &[u8]) -> bool {
    datagram.first().is_some_and(|b| b & 0x80 == 0)
}

/// Where the upstream socket binds: loopback for a loopback server, else unspecified.
fn upstream_bind_addr(upstream: SocketAddr) -> SocketAddr {
    let ip = match upstream.ip() {
        ip if ip.is_loopback() => ip,
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    SocketAddr::new(ip, 0)
}

/// Most receive batches taken from one socket per wake-up, so no direction starves another.
const MAX_BATCHES_PER_WAKE: usize = 64;

/// Sends `items` (all to the same socket) as batches.
async fn send_items(socket: &Socket, items: &[(SocketAddr, BytesMut)]) -> io::Result<()> {
    let transmits: Vec<Transmit<&[u8]>> = items
        .iter()
        .map(|(to, data)| Transmit::new(*to, &data[..]))
        .collect();
    socket.send_all(&transmits).await
}

/// Relays until `shutdown` completes; `stats` is refreshed as it goes.
///
/// # Errors
/// An error of the listening socket itself (not of a datagram).
pub async fn run(
    listen: Socket,
    config: RelayConfig,
    shutdown: impl Future<Output = ()>,
    stats: &Mutex<RelayStats>,
) -> io::Result<RelayStats> {
    let mut to_server: Link<Arc<Socket>> = Link::new(config.to_server, config.seed);
    let mut to_client: Link<SocketAddr> = Link::new(
        config.to_client,
        config.seed.wrapping_add(0x9e37_79b9_7f4a_7c15),
    );
    let mut sessions: HashMap<SocketAddr, Session> = HashMap::new();
    let mut bound = Bound::default();
    let mut sessions_total = 0u64;
    let (from_server_tx, mut from_server) =
        mpsc::unbounded_channel::<(SocketAddr, Vec<BytesMut>)>();
    let mut batch = listen.recv_batch();
    let mut due = Vec::new();
    let mut last_sweep = Instant::now();
    // When the first client datagram came: the blackhole and the rebinding count from it.
    let mut first: Option<Instant> = None;
    let mut blackholed = 0u64;
    let mut rebinds = 0u64;
    let mut next_rebind: Option<Instant> = None;
    let (mut window_client_bytes, mut window_server_bytes) = (0u64, 0u64);
    let in_window = |first: Option<Instant>, now: Instant| matches!((first, config.amplification_window), (Some(t), Some(len)) if now < t + len);
    let dark = |first: Option<Instant>, now: Instant| {
        matches!((first, config.blackhole), (Some(t), Some((after, len)))
            if now >= t + after && now < t + after + len)
    };
    tokio::pin!(shutdown);
    loop {
        let next_due = [to_server.next_due(), to_client.next_due()]
            .into_iter()
            .flatten()
            .min();
        let rebind_due = async {
            match next_rebind {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        let sleep = async {
            match next_due {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            r = listen.readable() => {
                r?;
                for _ in 0..MAX_BATCHES_PER_WAKE {
                    match listen.recv(&mut batch) {
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                    let now = Instant::now();
                    if first.is_none() {
                        first = Some(now);
                        next_rebind = match config.rebind {
                            Some(Rebind { every: RebindEvery::Interval(every), .. }) => Some(now + every),
                            _ => None,
                        };
                    }
                    for d in batch.datagrams() {
                        if dark(first, now) {
                            blackholed += 1;
                            continue;
                        }
                        if in_window(first, now) {
                            if window_client_bytes > 0 {
                                blackholed += 1;
                                continue;
                            }
                            window_client_bytes = d.data.len() as u64;
                        }
                        let session = match sessions.get_mut(&d.source) {
                            Some(s) => s,
                            None => {
                                let upstream = Arc::new(bound.fresh(upstream_bind_addr(config.upstream), &config.io)?);
                                let reader = tokio::spawn(read_upstream(Arc::clone(&upstream), d.source, from_server_tx.clone()));
                                sessions_total += 1;
                                sessions.entry(d.source).or_insert(Session { upstream, last_active: now, reader, short_datagrams: 0, rebinds: 0 })
                            }
                        };
                        session.last_active = now;
                        if let Some(r @ Rebind { every: RebindEvery::Datagrams(n), .. }) = config.rebind
                            && is_short_header(&d.data)
                        {
                            session.short_datagrams += 1;
                            if session.short_datagrams % n.max(1) == 0 && session.may_rebind(&r) {
                                session.rebind(d.source, (rebound_addr(config.upstream, r, rebinds)?, &mut bound), &config.io, &from_server_tx)?;
                                rebinds += 1;
                            }
                        }
                        to_server.push(now, d.data, Arc::clone(&session.upstream));
                    }
                }
            }
            Some((client, datagrams)) = from_server.recv() => {
                let now = Instant::now();
                if let Some(s) = sessions.get_mut(&client) {
                    s.last_active = now;
                }
                let mut batches = vec![(client, datagrams)];
                // Take whatever else the readers queued meanwhile.
                while let Ok(more) = from_server.try_recv() {
                    batches.push(more);
                }
                for (client, datagrams) in batches {
                    for d in datagrams {
                        if in_window(first, now) {
                            window_server_bytes += d.len() as u64;
                        }
                        if dark(first, now) {
                            blackholed += 1;
                        } else {
                            to_client.push(now, d, client);
                        }
                    }
                }
            }
            () = rebind_due => {
                let now = Instant::now();
                if let Some(r @ Rebind { every: RebindEvery::Interval(every), .. }) = config.rebind {
                    next_rebind = Some(now + every);
                    for (client, s) in sessions.iter_mut().filter(|(_, s)| s.may_rebind(&r)) {
                        s.rebind(*client, (rebound_addr(config.upstream, r, rebinds)?, &mut bound), &config.io, &from_server_tx)?;
                        rebinds += 1;
                    }
                }
            }
            () = sleep => {}
        }
        let now = Instant::now();
        // Client to server: consecutive datagrams for the same upstream socket go together.
        due.clear();
        to_server.pop_due(now, &mut due);
        let mut i = 0;
        while i < due.len() {
            let sock = Arc::clone(&due[i].to);
            let mut j = i;
            let mut items = Vec::new();
            while j < due.len() && Arc::ptr_eq(&due[j].to, &sock) {
                items.push((config.upstream, std::mem::take(&mut due[j].data)));
                j += 1;
            }
            send_items(&sock, &items).await?;
            i = j;
        }
        // Server to client: all through the listening socket, one sendmmsg per batch.
        let mut back: Vec<Pending<SocketAddr>> = Vec::new();
        to_client.pop_due(now, &mut back);
        if !back.is_empty() {
            let items: Vec<(SocketAddr, BytesMut)> =
                back.into_iter().map(|p| (p.to, p.data)).collect();
            send_items(&listen, &items).await?;
        }
        if now.duration_since(last_sweep) > Duration::from_secs(1) {
            last_sweep = now;
            sessions.retain(|_, s| {
                let keep = now.duration_since(s.last_active) < config.session_idle;
                if !keep {
                    s.reader.abort();
                }
                keep
            });
        }
        let snapshot = RelayStats {
            to_server: to_server.snapshot(),
            to_client: to_client.snapshot(),
            sessions: sessions.len(),
            sessions_total,
            blackholed,
            rebinds,
            window_client_bytes,
            window_server_bytes,
        };
        *stats.lock().unwrap_or_else(PoisonError::into_inner) = snapshot;
    }
    for s in sessions.values() {
        s.reader.abort();
    }
    let final_stats = RelayStats {
        to_server: to_server.snapshot(),
        to_client: to_client.snapshot(),
        sessions: 0,
        sessions_total,
        blackholed,
        rebinds,
        window_client_bytes,
        window_server_bytes,
    };
    *stats.lock().unwrap_or_else(PoisonError::into_inner) = final_stats;
    Ok(final_stats)
}

/// Reads what the server sends to one client's upstream socket.
async fn read_upstream(
    socket: Arc<Socket>,
    client: SocketAddr,
    tx: mpsc::UnboundedSender<(SocketAddr, Vec<BytesMut>)>,
) {
    let mut batch = socket.recv_batch();
    loop {
        match socket.recv_async(&mut batch).await {
            Ok(_) => {
                let datagrams: Vec<BytesMut> = batch.datagrams().map(|d| d.data).collect();
                if !datagrams.is_empty() && tx.send((client, datagrams)).is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!("relay upstream socket for {client}: {e}");
                return;
            }
        }
    }
}
