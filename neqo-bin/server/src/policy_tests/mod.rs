//! The server's policies in virtual time, on the in-memory network of
//! [`driver::testing`](neqo_driver::testing): admission (the half-open table, eviction, the
//! handshake timeout), the receive budget and Retry. A worker's driver and application as the
//! server builds them ([`prepare`](super::prepare), [`worker::parts`](super::worker::parts)),
//! reached by clients on a client driver and by hand-made Initials that never go on. The
//! clock jumps to what is due, so a five-second handshake timeout is exact and takes no time.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use neqo_driver::{
    Application, Driver, TransportOptions,
    testing::{Behaviour, Network},
    tls::{self, Trust},
};
use neqo_protocols::{ALPN_HQ, hq, pattern};
use quinn_proto::{
    ConnectionError, ConnectionHandle, Dir, EndpointConfig, Event, StreamEvent, TransportErrorCode,
    crypto::rustls::QuicClientConfig,
};

use super::{
    Budget, Limits, MIN_WINDOW, RetryPolicy, ServerConfig, app::ServerApp, prepare, worker,
};

const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4433);
const ONE_WAY: Duration = Duration::from_millis(10);
/// Bytes each client asks for.
const BODY: u64 = 100_000;
/// Turns a run may take at most.
const TURNS: usize = 100_000;

/// A client address: host `host` of 127.0.0.0/8, in a /24 of its own (its own
/// [`ClientSource`](super::ledger::ClientSource) at every prefix level), port `port`.
fn client(host: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, host, 1)), port)
}

/// What became of a client's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Not opened yet, or in progress.
    Pending,
    /// The whole body arrived, every byte right.
    Done,
    /// Closed before that.
    Lost(ConnectionError),
}

/// Connections to open, each from its client path at its time: asks for `BODY` bytes,
/// checks every byte, and closes (or holds the connection open, when told).
struct Clients {
    crypto: Arc<QuicClientConfig>,
    /// (when, client path, close once done)
    plan: Vec<(Instant, usize, bool)>,
    opened: usize,
    /// Connection -> its index in `plan`.
    conns: HashMap<ConnectionHandle, usize>,
    handles: Vec<Option<ConnectionHandle>>,
    outcomes: Vec<Outcome>,
    got: Vec<u64>,
    wrong: u64,
}

impl Clients {
    fn new(mut plan: Vec<(Instant, usize, bool)>) -> Self {
        plan.sort_by_key(|p| p.0);
        let n = plan.len();
        Self {
            crypto: tls::client_crypto(&Trust::Insecure, ALPN_HQ).unwrap(),
            plan,
            opened: 0,
            conns: HashMap::new(),
            handles: vec![None; n],
            outcomes: vec![Outcome::Pending; n],
            got: vec![0; n],
            wrong: 0,
        }
    }

    fn settle(&mut self, i: usize, outcome: Outcome) {
        if self.outcomes[i] == Outcome::Pending {
            self.outcomes[i] = outcome;
        }
    }
}

impl Application for Clients {
    fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        now: Instant,
    ) {
        let Some(&i) = self.conns.get(&ch) else {
            return;
        };
        match ev {
            Event::Connected => {
                let id = conn.streams().open(Dir::Bi).expect("a stream");
                let request = hq::request(&format!("/{BODY}"));
                conn.send_stream(id).write(request.as_bytes()).unwrap();
                conn.send_stream(id).finish().unwrap();
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                let mut rs = conn.recv_stream(id);
                let Ok(mut chunks) = rs.read(true) else {
                    return;
                };
                let mut finished = false;
                loop {
                    match chunks.next(usize::MAX) {
                        Ok(Some(c)) => {
                            assert_eq!(c.offset, self.got[i], "in order");
                            for (k, b) in c.bytes.iter().enumerate() {
                                if *b != pattern::byte_at(c.offset + k as u64) {
                                    self.wrong += 1;
                                }
                            }
                            self.got[i] += c.bytes.len() as u64;
                        }
                        Ok(None) => {
                            finished = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let _ = chunks.finalize();
                if finished && self.got[i] == BODY {
                    self.settle(i, Outcome::Done);
                    if self.plan[i].2 {
                        conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
                    }
                }
            }
            Event::ConnectionLost { reason } => self.settle(i, Outcome::Lost(reason)),
            _ => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        while let Some(&(at, path, _)) = self.plan.get(self.opened) {
            if at > now {
                return Some(at);
            }
            let mut config = quinn_proto::ClientConfig::new(self.crypto.clone());
            config.transport_config(Arc::new(
                TransportOptions::default().transport("client").unwrap(),
            ));
            let ch = driver
                .connect(path, config, SERVER, "localhost", now)
                .unwrap();
            self.conns.insert(ch, self.opened);
            self.handles[self.opened] = Some(ch);
            self.opened += 1;
        }
        None
    }
}

/// One worker of a server of `config` and a client driver with a path at each of `clients`,
/// on one network.
struct Bench {
    net: Network,
    start: Instant,
    server: Driver,
    app: ServerApp,
    client: Driver,
    clients: Clients,
}

impl Bench {
    fn new(config: ServerConfig, clients: &[SocketAddr], plan: &[(Duration, usize, bool)]) -> Self {
        let start = Instant::now();
        let net = Network::new(3, start).with_one_way(ONE_WAY);
        let config = ServerConfig {
            listen: vec![SERVER],
            ..config
        };
        let (shared, _) = prepare(config).unwrap();
        let (server, app) = worker::parts(
            0,
            vec![net.path(SERVER, Behaviour::default())],
            &shared,
            start,
        );
        let client = Driver::with_datapaths(
            clients
                .iter()
                .map(|&a| net.path(a, Behaviour::default()))
                .collect(),
            EndpointConfig::default(),
            None,
            neqo_driver::DriverConfig::default(),
        );
        let plan = plan.iter().map(|&(t, p, c)| (start + t, p, c)).collect();
        Self {
            net,
            start,
            server,
            app,
            client,
            clients: Clients::new(plan),
        }
    }

    /// The first Initial of a client at `from` that never says anything again and receives
    /// nothing (a spoofed source, or one that vanished): a half-open connection for the
    /// server, until its handshake timeout.
    fn lone_initial(&self, from: SocketAddr) {
        let mut endpoint =
            quinn_proto::Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
        let config = quinn_proto::ClientConfig::new(self.clients.crypto.clone());
        let now = self.net.now();
        let (_, mut conn) = endpoint.connect(now, config, SERVER, "localhost").unwrap();
        let mut buf = Vec::new();
        let t = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
        self.net.set_unreachable(from, true);
        self.net.inject(from, SERVER, &buf[..t.size]);
    }

    /// Runs both ends until `stop` says so after a turn; the clock jumps to what is due. The
    /// receive windows granted stay within the budget at every turn.
    fn run_until(&mut self, what: &str, stop: impl Fn(&Self) -> bool) {
        for turn in 0..TURNS {
            let s = self.net.turn(&mut self.server, &mut self.app).unwrap();
            let c = self.net.turn(&mut self.client, &mut self.clients).unwrap();
            let r = &self.app.report;
            assert!(r.receive_windows <= r.receive_budget, "{r:?}");
            if stop(self) {
                return;
            }
            let queued = self.server.queued_datagrams() + self.client.queued_datagrams() > 0;
            assert!(
                self.net.advance(&[s.deadline, c.deadline], queued),
                "{what}: nothing scheduled at turn {turn}, {:?} after the start: {:?}",
                self.net.now() - self.start,
                self.clients.outcomes
            );
        }
        panic!("{what}: not after {TURNS} turns");
    }

    /// Runs until every planned connection has its outcome and the server has drained
    /// every connection the clients closed.
    fn run_to_the_end(&mut self) {
        self.run_until("every outcome", |b| {
            b.clients.opened == b.clients.plan.len()
                && !b.clients.outcomes.contains(&Outcome::Pending)
                && b.server.open_connections()
                    == b.clients.plan.iter().filter(|p| !p.2).count() - b.refused_holders()
        });
    }

    /// Held connections (not closed once done) that never were accepted.
    fn refused_holders(&self) -> usize {
        self.clients
            .plan
            .iter()
            .zip(&self.clients.outcomes)
            .filter(|(p, o)| !p.2 && matches!(o, Outcome::Lost(_)))
            .count()
    }

    fn elapsed(&self) -> Duration {
        self.net.now() - self.start
    }

    fn assert_outcomes(&self, expected: &[Outcome]) {
        assert_eq!(self.clients.outcomes, expected);
        assert_eq!(self.clients.wrong, 0, "every byte right");
    }
}

/// Closed by the server with `CONNECTION_REFUSED`.
fn refused() -> Outcome {
    Outcome::Lost(ConnectionError::ConnectionClosed(
        quinn_proto::ConnectionClose {
            error_code: TransportErrorCode::CONNECTION_REFUSED,
            frame_type: None,
            reason: Bytes::new(),
        },
    ))
}

fn config(limits: Limits) -> ServerConfig {
    ServerConfig {
        limits,
        ..ServerConfig::default()
    }
}

/// A server whose receive budget is four minimal windows (all floor, no bonus), without Retry.
/// A worker built from `config` (which listens at `SERVER`) and a client's driver at
/// `client(2, 5000)`, on a new virtual network.
fn worker_and_client(config: ServerConfig) -> (Network, Driver, ServerApp, Driver) {
    let start = Instant::now();
    let net = Network::new(5, start).with_one_way(ONE_WAY);
    let (shared, _) = prepare(config).unwrap();
    let (server, app) = worker::parts(
        0,
        vec![net.path(SERVER, Behaviour::default())],
        &shared,
        start,
    );
    let client = Driver::with_datapaths(
        vec![net.path(client(2, 5000), Behaviour::default())],
        EndpointConfig::default(),
        None,
        neqo_driver::DriverConfig::default(),
    );
    (net, server, app, client)
}

fn minimal_budget() -> ServerConfig {
    let mut c = config(Limits {
        retry: RetryPolicy::Never,
        ..Limits::default()
    });
    c.budget = Budget {
        bytes: 4 * MIN_WINDOW,
        floor_connections: 4,
    };
    c
}

mod admission;
mod budget;
mod flow_control;
mod http3;
mod http3_hostile;
mod quic_apps;
mod retry;
mod services;
mod shutdown;
mod vanishing;
