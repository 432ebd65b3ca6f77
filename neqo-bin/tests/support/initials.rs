//! Client Initials that are never followed up, as an attacker sends them: a Retry token
//! read and replayed, and [`Holders`], which keep handshakes open from many source addresses
//! through one socket. Included as a module by the tests that use it.
#![allow(dead_code, unreachable_pub)]

use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use neqo_driver::tls::{self, Trust};
use neqo_protocols::ALPN_HQ;
use neqo_udp::{Transmit, UdpSocketState};

/// Gives one token to every connection that asks.
#[derive(Debug)]
pub struct Replayed(pub Bytes);

impl quinn_proto::TokenStore for Replayed {
    fn insert(&self, _: &str, _: Bytes) {}

    fn take(&self, _: &str) -> Option<Bytes> {
        Some(self.0.clone())
    }
}

/// The token of a QUIC version 1 Retry packet: after its connection IDs, before the 16-byte
/// integrity tag.
pub fn retry_token(d: &[u8]) -> Option<&[u8]> {
    if d.first()? & 0xf0 != 0xf0 {
        return None;
    }
    let dcid_len = usize::from(*d.get(5)?);
    let scid_at = 6 + dcid_len;
    let token_at = scid_at + 1 + usize::from(*d.get(scid_at)?);
    d.get(token_at..d.len().checked_sub(16)?)
}

/// What [`Holders::run`] did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Held {
    /// Initials sent, with a token or without.
    pub initials: u64,
    /// Retries answered with a token.
    pub retries: u64,
}

/// Handshakes that never finish, from many source addresses at once (all local: configured
/// in the test's namespace, or 127.0.0.0/8), through one socket that sets each datagram's
/// source (`IP_PKTINFO`), so that a thousand sources take one descriptor. Each source opens
/// a new connection with one Initial every round, and when the server asks for a Retry,
/// another with its token; nothing else is ever answered, so each handshake lasts until the
/// server gives it up.
pub struct Holders {
    socket: UdpSocket,
    state: UdpSocketState,
    endpoint: quinn_proto::Endpoint,
    crypto: Arc<quinn_proto::crypto::rustls::QuicClientConfig>,
    /// A long idle timeout: the server's connection ends at the smaller of the two, so a
    /// holder's handshake lasts as long as the server's timeouts say.
    transport: Arc<quinn_proto::TransportConfig>,
    server: SocketAddr,
    buf: Vec<u8>,
    held: Held,
    /// As from spoofed addresses: what comes back is read and dropped, Retries unanswered.
    spoofed: bool,
}

impl Holders {
    /// Holders of handshakes with `server`.
    pub fn new(server: SocketAddr) -> io::Result<Self> {
        let any: IpAddr = if server.is_ipv4() {
            Ipv4Addr::UNSPECIFIED.into()
        } else {
            Ipv6Addr::UNSPECIFIED.into()
        };
        let socket = UdpSocket::bind((any, 0))?;
        socket.set_nonblocking(true)?;
        let state = UdpSocketState::new((&socket).into(), neqo_udp::Config::default())
            .map_err(io::Error::other)?;
        let mut transport = quinn_proto::TransportConfig::default();
        transport.max_idle_timeout(Some(
            quinn_proto::IdleTimeout::try_from(Duration::from_secs(3600))
                .map_err(io::Error::other)?,
        ));
        Ok(Self {
            socket,
            state,
            endpoint: quinn_proto::Endpoint::new(
                Arc::new(quinn_proto::EndpointConfig::default()),
                None,
                true,
                None,
            ),
            crypto: tls::client_crypto(&Trust::Insecure, ALPN_HQ).map_err(io::Error::other)?,
            transport: Arc::new(transport),
            server,
            buf: Vec::new(),
            held: Held::default(),
            spoofed: false,
        })
    }

    /// The same senders as from spoofed addresses: a flood of first Initials whose
    /// Retries nobody answers.
    #[must_use]
    pub const fn spoofed(mut self) -> Self {
        self.spoofed = true;
        self
    }

    /// The first Initial of a new connection, from `from`, with `token` if given.
    fn initial(&mut self, from: IpAddr, token: Option<Bytes>) {
        let mut config = quinn_proto::ClientConfig::new(self.crypto.clone());
        config.transport_config(Arc::clone(&self.transport));
        if let Some(t) = token {
            config.token_store(Arc::new(Replayed(t)));
        }
        let now = Instant::now();
        let (_, mut conn) = self
            .endpoint
            .connect(now, config, self.server, "localhost")
            .expect("a client connection");
        self.buf.clear();
        let t = conn
            .poll_transmit(now, 1, &mut self.buf)
            .expect("an Initial");
        let datagram = Transmit::new(self.server, &self.buf[..t.size]).with_src_ip(Some(from));
        // A full socket buffer loses the Initial, as the network may: the next round sends
        // another.
        if self.state.send((&self.socket).into(), &[datagram]).is_ok() {
            self.held.initials += 1;
        }
    }

    /// Answers each Retry that came, from the address it came to, with its token.
    fn answer_retries(&mut self) {
        let mut batch = self.state.recv_batch();
        let mut retries: Vec<(IpAddr, Bytes)> = Vec::new();
        while self.state.recv((&self.socket).into(), &mut batch).is_ok() {
            for d in batch.datagrams() {
                if let (Some(to), Some(token)) = (d.destination, retry_token(&d.data)) {
                    retries.push((to, Bytes::copy_from_slice(token)));
                }
            }
        }
        if self.spoofed {
            return;
        }
        for (from, token) in retries {
            self.held.retries += 1;
            self.initial(from, Some(token));
        }
    }

    /// Rounds of one new handshake from each of `sources`, a round every `every` (each
    /// round's Initials spread over its first tenth), until `stop` is set or `limit` has
    /// passed. A source listed `n` times opens `n` handshakes a round.
    pub fn run(
        mut self,
        sources: &[IpAddr],
        every: Duration,
        stop: &AtomicBool,
        limit: Duration,
    ) -> Held {
        let started = Instant::now();
        let n = u32::try_from(sources.len()).expect("a few sources");
        while !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
            let round = Instant::now();
            for (i, &from) in (0u32..).zip(sources) {
                self.initial(from, None);
                if i % 32 == 31 {
                    self.answer_retries();
                    let due = round + every / 10 * (i + 1) / n;
                    // In short steps, so that a stop never waits for a long round's pacing.
                    while Instant::now() < due && !stop.load(Ordering::Relaxed) {
                        let left = due.saturating_duration_since(Instant::now());
                        std::thread::sleep(left.min(Duration::from_millis(2)));
                        self.answer_retries();
                    }
                }
            }
            while round.elapsed() < every && !stop.load(Ordering::Relaxed) {
                self.answer_retries();
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        self.held
    }
}

/// What [`aimed_flood`] did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Aimed {
    /// Source ports whose probe the server answered.
    pub probed: usize,
    /// Of those, the ones steered to worker 0, which the flood came from.
    pub aimed: usize,
    /// Initials the flood sent.
    pub sent: u64,
}

/// An attacker that learns the steering and aims at one worker: from `probes` source ports
/// on `from` it sends one real Initial each and reads the worker from the reply's connection
/// ID (the worker byte follows the first octet when the server has no `--server-id`), then
/// sends real Initials from the ports steered to worker 0 of `workers`, as fast as they go,
/// until `stop` is set, `limit` has passed or `max` are sent.
pub fn aimed_flood(
    server: SocketAddr,
    from: IpAddr,
    workers: usize,
    probes: usize,
    stop: &AtomicBool,
    limit: Duration,
    max: u64,
) -> io::Result<Aimed> {
    let started = Instant::now();
    let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ).map_err(io::Error::other)?;
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        true,
        None,
    );
    let mut initial = || {
        let now = Instant::now();
        let config = quinn_proto::ClientConfig::new(crypto.clone());
        let (_, mut conn) = endpoint
            .connect(now, config, server, "localhost")
            .expect("a client connection");
        let mut buf = Vec::new();
        let t = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
        buf.truncate(t.size);
        buf
    };
    let mut aimed = Aimed::default();
    let mut sockets = Vec::new();
    let mut reply = [0u8; 2048];
    for _ in 0..probes {
        let socket = UdpSocket::bind((from, 0))?;
        // A hang guard: a loaded server answers late, and a port skipped is one not aimed.
        socket.set_read_timeout(Some(Duration::from_secs(30)))?;
        socket.send_to(&initial(), server)?;
        let Ok((n, _)) = socket.recv_from(&mut reply) else {
            continue;
        };
        // Long header: first byte, version, DCID length and DCID, SCID length and SCID.
        let d = &reply[..n];
        let scid_at = 6 + usize::from(d[5]);
        if let Some(&byte) = d.get(scid_at + 2) {
            aimed.probed += 1;
            if usize::from(byte) % workers == 0 {
                sockets.push(socket);
            }
        }
    }
    aimed.aimed = sockets.len();
    if sockets.is_empty() {
        return Ok(aimed);
    }
    let flood: Vec<Vec<u8>> = (0..1000).map(|_| initial()).collect();
    for s in &sockets {
        s.set_nonblocking(true)?;
    }
    while aimed.sent < max && !stop.load(Ordering::Relaxed) && started.elapsed() < limit {
        let i = usize::try_from(aimed.sent).unwrap_or(0);
        // A full buffer loses the datagram, as on a wire.
        let _ = sockets[i % sockets.len()].send_to(&flood[i % flood.len()], server);
        aimed.sent += 1;
    }
    Ok(aimed)
}
