//! The driver against the in-memory network of [`testing`](super::testing): a client and a
//! server driver on a virtual clock. Deterministic: no sockets, no sleeping, no timing
//! thresholds.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use quinn_proto::{ConnectionError, ConnectionHandle, Dir, Event, StreamEvent, StreamId};

use super::{
    testing::{Behaviour, Network},
    *,
};
use crate::tls::{self, Identity, Trust};

mod runs;

/// Bytes the client asks for.
const DOWNLOAD: usize = 3 << 20;

const SERVER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5555);

/// Byte `k` of the download.
fn pattern(k: usize) -> u8 {
    (k % 251) as u8
}

/// Serves `DOWNLOAD` pattern bytes on every stream the client opens.
#[derive(Default)]
struct Server {
    written: HashMap<StreamId, usize>,
}

impl Server {
    fn pump(&mut self, conn: &mut quinn_proto::Connection, id: StreamId) {
        let Some(at) = self.written.get_mut(&id) else {
            return;
        };
        let mut s = conn.send_stream(id);
        while *at < DOWNLOAD {
            let chunk: Vec<u8> = (*at..DOWNLOAD.min(*at + 65_536)).map(pattern).collect();
            match s.write(&chunk) {
                Ok(n) => *at += n,
                Err(_) => return,
            }
        }
        let _ = s.finish();
        self.written.remove(&id);
    }
}

impl Application for Server {
    fn event(
        &mut self,
        _: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        _: Instant,
    ) {
        match ev {
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    self.written.insert(id, 0);
                    self.pump(conn, id);
                }
            }
            Event::Stream(StreamEvent::Writable { id }) => self.pump(conn, id),
            _ => {}
        }
    }
}

/// Opens one connection, asks for the download on one stream, checks every byte, closes.
#[derive(Default)]
struct Client {
    remote: Option<SocketAddr>,
    config: Option<quinn_proto::ClientConfig>,
    ch: Option<ConnectionHandle>,
    connected: bool,
    got: usize,
    wrong: usize,
    finished: bool,
    closed: Option<ConnectionError>,
    drained: bool,
}

impl Application for Client {
    fn event(
        &mut self,
        _: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        now: Instant,
    ) {
        match ev {
            Event::Connected => {
                self.connected = true;
                // None when the server's close came with its handshake.
                let Some(id) = conn.streams().open(Dir::Bi) else {
                    return;
                };
                conn.send_stream(id)
                    .write_chunks(&mut [Bytes::from_static(b"GET")])
                    .unwrap();
                conn.send_stream(id).finish().unwrap();
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                let mut rs = conn.recv_stream(id);
                let Ok(mut chunks) = rs.read(true) else {
                    return;
                };
                loop {
                    match chunks.next(usize::MAX) {
                        Ok(Some(c)) => {
                            assert_eq!(c.offset as usize, self.got, "in order");
                            for (i, b) in c.bytes.iter().enumerate() {
                                if *b != pattern(self.got + i) {
                                    self.wrong += 1;
                                }
                            }
                            self.got += c.bytes.len();
                        }
                        Ok(None) => {
                            self.finished = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let _ = chunks.finalize();
                if self.finished {
                    conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
                }
            }
            Event::ConnectionLost { reason } => self.closed = Some(reason),
            _ => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if self.ch.is_none()
            && let (Some(remote), Some(config)) = (self.remote, self.config.take())
        {
            self.ch = Some(driver.connect(0, config, remote, "localhost", now).unwrap());
        }
        None
    }

    fn drained(&mut self, _: ConnectionHandle, _: &quinn_proto::Connection) {
        self.drained = true;
    }

    fn done(&self) -> bool {
        self.closed.is_some() || self.drained
    }
}

struct Pair {
    net: Network,
    server: Driver,
    server_app: Server,
    client: Driver,
    client_app: Client,
    /// Instants at which the server's path sent, and how many datagrams.
    server_sends: Vec<(Instant, u64)>,
    /// The server's last turn said it was done.
    server_done: bool,
}

impl Pair {
    fn new(pacing: bool, one_way: Duration, server_how: Behaviour, client_how: Behaviour) -> Self {
        Self::with_server_options(
            pacing,
            one_way,
            server_how,
            client_how,
            &TransportOptions::default(),
        )
    }

    fn with_server_options(
        pacing: bool,
        one_way: Duration,
        server_how: Behaviour,
        client_how: Behaviour,
        server_options: &TransportOptions,
    ) -> Self {
        let identity = Identity::self_signed().unwrap();
        let options = TransportOptions::default();
        let mut server_config = quinn_proto::ServerConfig::with_crypto(
            tls::server_crypto(&identity, &["t".into()]).unwrap(),
        );
        server_config.transport_config(Arc::new(server_options.transport("server").unwrap()));
        let mut client_config = quinn_proto::ClientConfig::new(
            tls::client_crypto(&Trust::Certs(identity.chain.clone()), "t").unwrap(),
        );
        client_config.transport_config(Arc::new(options.transport("client").unwrap()));
        let net = Network::new(1, Instant::now()).with_one_way(one_way);
        let server = Driver::with_datapaths(
            vec![net.path(SERVER, server_how)],
            EndpointConfig::default(),
            Some(Arc::new(server_config)),
            DriverConfig::default().with_pacing(pacing),
        );
        let client = Driver::with_datapaths(
            vec![net.path(CLIENT, client_how)],
            EndpointConfig::default(),
            None,
            DriverConfig::default().with_pacing(pacing),
        );
        Self {
            net,
            server,
            server_app: Server::default(),
            client,
            client_app: Client {
                remote: Some(SERVER),
                config: Some(client_config),
                ..Client::default()
            },
            server_sends: Vec::new(),
            server_done: false,
        }
    }

    /// Runs both drivers on the virtual clock until the client is done; returns the turns.
    fn run(&mut self) -> usize {
        self.run_until(|_| false)
    }

    /// Runs both drivers on the virtual clock until the client is done or `stop` says so
    /// after a turn; returns the turns.
    fn run_until(&mut self, stop: impl Fn(&Self) -> bool) -> usize {
        for turns in 0..200_000 {
            let wire_before = self.net.wire(SERVER);
            let s = self
                .net
                .turn(&mut self.server, &mut self.server_app)
                .unwrap();
            self.server_done = s.done;
            let c = self
                .net
                .turn(&mut self.client, &mut self.client_app)
                .unwrap();
            let sent = self.net.wire(SERVER) - wire_before;
            if sent > 0 {
                self.server_sends.push((self.net.now(), sent));
            }
            if c.done || stop(self) {
                return turns;
            }
            let queued = self.server.queued_datagrams() + self.client.queued_datagrams() > 0;
            assert!(
                self.net.advance(&[s.deadline, c.deadline], queued),
                "nothing scheduled, the exchange stalled at turn {turns}: client got {} finished {} closed {:?}; open: server {} client {}",
                self.client_app.got,
                self.client_app.finished,
                self.client_app.closed,
                self.server.open_connections(),
                self.client.open_connections()
            );
        }
        panic!("no end after 200 000 turns");
    }

    /// The download arrived whole and right, and the close reached the server.
    fn assert_complete(&mut self) {
        let c = &self.client_app;
        assert!(c.finished, "the download finished");
        assert_eq!(c.got, DOWNLOAD);
        assert_eq!(c.wrong, 0, "every byte right");
        assert!(c.drained, "the connection closed and drained");
        assert_eq!(c.closed, None, "no error");
        // Every datagram the drivers queued went on the wire.
        assert_eq!(self.client.queued_datagrams(), 0);
        assert_eq!(self.server.queued_datagrams(), 0);
        assert_eq!(
            self.server.socket_stats().tx.datagrams,
            self.net.wire(SERVER)
        );
        // The server confirmed the handshake; a server has none of its own to count.
        assert_eq!(self.client.counters().unconfirmed, 0);
        assert_eq!(self.server.counters().unconfirmed, 0);
    }
}

#[test]
fn a_download_completes_byte_exact_paced_and_unpaced() {
    for pacing in [false, true] {
        let mut pair = Pair::new(
            pacing,
            Duration::from_millis(5),
            Behaviour::default(),
            Behaviour::default(),
        );
        pair.run();
        pair.assert_complete();
        let counters = pair.server.counters();
        assert_eq!(counters.accepted, 1);
        assert!(counters.max_transmit_datagrams <= 10, "{counters:?}");
        if pacing {
            assert!(counters.paced_waits > 0, "the pacer held the sender back");
        } else {
            assert_eq!(counters.paced_waits, 0);
        }
    }
}

/// A client whose handshake completed but whose last flight never reached the server (here
/// nothing does any more): no HANDSHAKE_DONE comes, the connection times out, and the client's
/// driver counts it unconfirmed. The server, which never completed its side, counts nothing.
#[test]
fn a_handshake_the_server_never_confirms_is_counted() {
    let mut pair = Pair::new(
        false,
        Duration::from_millis(5),
        Behaviour::default(),
        Behaviour::default(),
    );
    pair.run_until(|p| p.client_app.connected);
    // The client's Finished is in flight: lost with everything else to the server.
    pair.net.set_unreachable(SERVER, true);
    pair.run_until(|p| p.client_app.drained);
    assert_eq!(pair.client_app.closed, Some(ConnectionError::TimedOut));
    assert_eq!(pair.client_app.got, 0);
    let client = pair.client.counters();
    assert_eq!((client.drained, client.unconfirmed), (1, 1));
    assert_eq!(pair.server.counters().unconfirmed, 0);
}

/// `--ack-every` on the server: the client, told through an ACK_FREQUENCY frame, sends a
/// fraction of the ACKs it sends by default (every second packet), and the download is as
/// complete; with N = 2, the default's rule, as many as the default.
#[test]
fn ack_every_reduces_the_acks_the_server_receives() {
    let client_datagrams = |ack_every| {
        let options = TransportOptions {
            ack_every,
            ..TransportOptions::default()
        };
        let mut pair = Pair::with_server_options(
            true,
            Duration::from_millis(5),
            Behaviour::default(),
            Behaviour::default(),
            &options,
        );
        pair.run();
        pair.assert_complete();
        pair.net.wire(CLIENT)
    };
    let default = client_datagrams(None);
    let every_two = client_datagrams(Some(2));
    let every_32 = client_datagrams(Some(32));
    assert!(
        every_32 * 3 < default,
        "every 32: {every_32} datagrams from the client, default {default}"
    );
    assert!(
        every_two * 10 > default * 9,
        "every 2: {every_two} datagrams from the client, default {default}"
    );
}

/// Pacing spreads the server's datagrams over more send instants, in smaller bursts, than the
/// same download unpaced, on the same 40 ms round trip.
#[test]
fn pacing_releases_spread_the_bursts() {
    let run = |pacing| {
        let mut pair = Pair::new(
            pacing,
            Duration::from_millis(20),
            Behaviour::default(),
            Behaviour::default(),
        );
        pair.run();
        pair.assert_complete();
        let instants = pair.server_sends.len();
        let largest = pair.server_sends.iter().map(|s| s.1).max().unwrap();
        (instants, largest)
    };
    let (unpaced_instants, unpaced_largest) = run(false);
    let (paced_instants, paced_largest) = run(true);
    assert!(
        paced_instants > 2 * unpaced_instants,
        "paced: {paced_instants} send instants, unpaced {unpaced_instants}"
    );
    assert!(
        paced_largest * 2 < unpaced_largest,
        "largest burst paced {paced_largest}, unpaced {unpaced_largest}"
    );
}

/// A kernel that takes one transmit per call and blocks every third call: what it did not
/// take waits in the queue and goes next, and nothing is lost or sent twice.
#[test]
fn partial_sends_and_would_block_lose_nothing() {
    let stingy = Behaviour::default().per_call(1).block_every(3);
    for pacing in [false, true] {
        let mut pair = Pair::new(pacing, Duration::from_millis(2), stingy, stingy);
        pair.run();
        pair.assert_complete();
    }
}

/// GSO breaks in the middle of the download: the socket sends one segment of a run and says
/// how far it got; the rest of that run goes from the queue's buffer, and every later
/// transmit is a single datagram.
#[test]
fn a_gso_fallback_mid_run_resumes_from_the_queue() {
    // Early, while most of the download is still to come.
    let breaking = Behaviour::default().gso_breaks_after(3);
    let mut pair = Pair::new(
        false,
        Duration::from_millis(2),
        breaking,
        Behaviour::default(),
    );
    pair.run();
    pair.assert_complete();
    let (runs_at_break, runs_after_break, resumed_runs) = pair.net.gso_break_runs(SERVER);
    // The run cut at the break (and any run cut later) went on from where it stopped...
    assert!(resumed_runs > 0, "a run resumed from the queue");
    // ...and the only other runs the socket saw after the break were queued before it:
    // every transmit generated since carried one datagram.
    assert!(
        runs_after_break <= runs_at_break,
        "{runs_after_break} runs after the break, {runs_at_break} queued before it"
    );
}

/// The idle timeout fires on the virtual clock: with the server gone silent (its datagrams
/// never arrive), the client's connection times out, and the driver reports it done.
#[test]
fn timers_fire_when_due() {
    let mut pair = Pair::new(
        true,
        Duration::from_millis(2),
        Behaviour::default(),
        Behaviour::default(),
    );
    // Everything addressed to the client is lost.
    pair.net.set_unreachable(CLIENT, true);
    let start = pair.net.now();
    for _ in 0..100_000 {
        let s = pair
            .net
            .turn(&mut pair.server, &mut pair.server_app)
            .unwrap();
        let c = pair
            .net
            .turn(&mut pair.client, &mut pair.client_app)
            .unwrap();
        if c.done {
            break;
        }
        assert!(
            pair.net.advance(&[s.deadline, c.deadline], false),
            "the client's timers stay armed"
        );
    }
    assert!(
        matches!(pair.client_app.closed, Some(ConnectionError::TimedOut)),
        "{:?}",
        pair.client_app.closed
    );
    let idle = TransportOptions::default().idle_timeout;
    let waited = pair.net.now() - start;
    assert!(
        waited >= idle,
        "timed out after {waited:?}, before the idle timeout"
    );
    assert!(
        waited < idle * 3,
        "timed out after {waited:?}: a timer was late"
    );
}

/// A driver whose application is done is not done while its queue holds packets: they go
/// out first. (The client's socket here accepts nothing.)
#[test]
fn done_waits_for_the_queue() {
    let blocking = Behaviour::default().block_every(1);
    let mut pair = Pair::new(
        false,
        Duration::from_millis(2),
        Behaviour::default(),
        blocking,
    );
    let first = pair
        .client
        .turn(&mut pair.client_app, pair.net.now())
        .unwrap();
    assert!(!first.done);
    assert!(pair.client.queued_datagrams() > 0, "the Initial waits");
    // The application gives up; its datagrams still wait.
    pair.client_app.closed = Some(ConnectionError::TimedOut);
    let second = pair
        .client
        .turn(&mut pair.client_app, pair.net.now())
        .unwrap();
    assert!(!second.done, "not done with datagrams queued");
}

/// The client's view of how its connection ended: the server's close, an application close
/// or (sent before the server saw the handshake confirmed, so in Handshake packets)
/// APPLICATION_ERROR without the reason (RFC 9000 section 10.2.3). Not its idle timeout.
fn closed_by_the_server(closed: Option<&ConnectionError>) {
    match closed {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(&close.reason[..], b"shutdown");
        }
        Some(ConnectionError::ConnectionClosed(close)) => {
            assert_eq!(
                close.error_code,
                quinn_proto::TransportErrorCode::APPLICATION_ERROR
            );
        }
        other => panic!("the client saw {other:?}, not the server's close"),
    }
}

/// A shutdown just after the server sent its first flight, with pacing on: the close leaves
/// at once, unpaced, and the driver is done only then. Paced, the close waited for the pacer
/// (at the handshake's initial RTT, 333 ms, the flight had used its allowance for tens of
/// milliseconds) while the driver, with no connection ready, reported done: the close never
/// left, and the client waited out its idle timeout.
#[test]
fn a_shutdown_sends_the_close_past_the_pacer() {
    let mut pair = Pair::new(
        true,
        Duration::from_millis(20),
        Behaviour::default(),
        Behaviour::default(),
    );
    pair.run_until(|p| !p.server_sends.is_empty());
    assert!(!pair.client_app.connected, "mid-handshake");
    let wire = pair.net.wire(SERVER);
    pair.server
        .close_all(&mut pair.server_app, pair.net.now())
        .unwrap();
    pair.run_until(|p| p.server_done);
    assert!(pair.server_done);
    assert!(pair.net.wire(SERVER) > wire, "the close left");
    pair.run_until(|p| p.client_app.closed.is_some());
    closed_by_the_server(pair.client_app.closed.as_ref());
}

/// A shutdown while the server's socket is full: the driver goes on turning until the close
/// has left, and only then reports done; the client learns why the connection ended.
///
/// Closed right after the handshake, not mid-download: quinn-proto 0.11.19 never sends a
/// close while its congestion window is full (quinn issue 2785, fixed upstream after that
/// release), and no driver can make it.
#[test]
fn shutdown_waits_for_the_closes_to_leave() {
    let mut pair = Pair::new(
        false,
        Duration::from_millis(1),
        Behaviour::default(),
        Behaviour::default(),
    );
    pair.run_until(|p| p.client_app.connected);
    let server_addr = SocketAddr::from(([127, 0, 0, 1], 4433));
    pair.net.fill(server_addr, 3);
    pair.server
        .close_all(&mut pair.server_app, pair.net.now())
        .unwrap();
    assert!(
        pair.server.queued_datagrams() > 0,
        "the close waits for the socket"
    );
    let turn = pair
        .server
        .turn(&mut pair.server_app, pair.net.now())
        .unwrap();
    assert!(!turn.done, "not done while the close waits");
    pair.run_until(|p| p.server_done);
    assert!(pair.server_done, "done once the close left");
    assert_eq!(pair.server.queued_datagrams(), 0);
    assert_eq!(pair.net.full_for(server_addr), 0, "the socket was full");
    // The client reads what has arrived.
    pair.run_until(|p| p.client_app.closed.is_some());
    closed_by_the_server(pair.client_app.closed.as_ref());
}
