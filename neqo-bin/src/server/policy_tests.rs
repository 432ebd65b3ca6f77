//! The server's policies in virtual time, on the in-memory network of
//! [`driver::testing`](crate::driver::testing): admission (the half-open table, eviction, the
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
use quinn_proto::{
    ConnectionError, ConnectionHandle, Dir, EndpointConfig, Event, StreamEvent, TransportErrorCode,
    crypto::rustls::QuicClientConfig,
};

use super::{Budget, Limits, RetryPolicy, ServerConfig, app::ServerApp, prepare, worker};
use crate::{
    driver::{
        Application, Driver,
        testing::{Behaviour, Network},
    },
    hq, pattern,
    tls::{self, ALPN_HQ, TransportOptions, Trust},
};

const SERVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 4433);
const ONE_WAY: Duration = Duration::from_millis(10);
/// Bytes each client asks for.
const BODY: u64 = 100_000;
/// Turns a run may take at most.
const TURNS: usize = 100_000;

/// A client address: host `host` of 127.0.0.0/8 (its own [`ClientSource`](super::ledger::ClientSource)), port `port`.
fn client(host: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, host)), port)
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
            true,
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

/// With the half-open table full of handshakes from two sources, one each, a third source is
/// refused (none holds two more than it); the handshakes are given up exactly at their
/// timeout, and the next client is served.
#[test]
fn stalled_handshakes_fill_the_table_until_their_timeout_then_the_slot_serves_again() {
    let limits = Limits {
        retry: RetryPolicy::Never,
        max_half_open: 2,
        handshake_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000), client(21, 5000)],
        &[
            (Duration::from_secs(1), 0, true),
            (Duration::from_secs(6), 1, true),
        ],
    );
    b.lone_initial(client(10, 6000));
    b.lone_initial(client(11, 6000));
    b.run_until("the refusal", |b| b.clients.outcomes[0] != Outcome::Pending);
    assert_eq!(b.clients.outcomes[0], refused());
    let a = b.app.report.admission;
    assert_eq!(
        (a.half_open, a.refused_half_open, a.evicted_half_open),
        (2, 1, 0)
    );

    b.run_until("the timeouts", |b| {
        b.app.report.admission.handshake_timeouts > 0
    });
    // Accepted when their Initials arrived, one way after the start.
    assert_eq!(b.elapsed(), ONE_WAY + limits.handshake_timeout);
    assert_eq!(b.app.report.admission.handshake_timeouts, 2, "both at once");
    assert_eq!(b.app.report.admission.half_open, 0);

    b.run_to_the_end();
    b.assert_outcomes(&[refused(), Outcome::Done]);
    let a = b.app.report.admission;
    assert_eq!((a.peak_half_open, a.handshakes.count), (2, 1));
    assert_eq!(b.server.counters().accepted, 3);
    assert_eq!(
        b.server.open_connections(),
        0,
        "the given-up ones drained too"
    );
}

/// A source holding the whole half-open table loses its oldest handshake to a newcomer from
/// another source, who is served.
#[test]
fn a_source_holding_the_half_open_table_is_evicted_for_another() {
    let limits = Limits {
        retry: RetryPolicy::Never,
        max_half_open: 2,
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000)],
        &[(Duration::from_millis(100), 0, true)],
    );
    b.lone_initial(client(10, 6000));
    b.lone_initial(client(10, 6001));
    b.run_until("the newcomer", |b| {
        b.clients.outcomes[0] != Outcome::Pending
    });
    b.assert_outcomes(&[Outcome::Done]);
    let a = b.app.report.admission;
    assert_eq!((a.evicted_half_open, a.refused_half_open), (1, 0));
    assert_eq!(a.half_open, 1, "the other lone handshake is still held");
    assert!(
        b.elapsed() < limits.handshake_timeout,
        "served well before any timeout"
    );
    b.run_to_the_end();
    assert_eq!(b.app.report.admission.handshake_timeouts, 1);
    assert_eq!(b.server.open_connections(), 0);
}

/// A budget of four minimal windows: four connections from four sources hold it all, a fifth
/// is refused, and once one of the four closes its window serves the next.
#[test]
fn the_receive_budget_refuses_past_its_windows_until_one_returns() {
    let mut c = config(Limits {
        retry: RetryPolicy::Never,
        ..Limits::default()
    });
    c.budget = Budget {
        bytes: 4 * super::MIN_WINDOW,
        floor_connections: 4,
    };
    let addrs: Vec<SocketAddr> = (0..6).map(|i| client(20 + i, 5000)).collect();
    let ms = Duration::from_millis;
    let mut b = Bench::new(
        c,
        &addrs,
        &[
            (ms(0), 0, false),
            (ms(0), 1, false),
            (ms(0), 2, false),
            (ms(0), 3, false),
            (ms(500), 4, true),
        ],
    );
    b.run_to_the_end();
    let done = Outcome::Done;
    b.assert_outcomes(&[
        done.clone(),
        done.clone(),
        done.clone(),
        done.clone(),
        refused(),
    ]);
    assert_eq!(b.app.report.refused_budget, 1);
    assert_eq!(b.app.report.receive_windows, 4 * super::MIN_WINDOW);

    // The first holder closes; a client after it is served from its window.
    let now = b.net.now();
    let first = b.clients.handles[0].unwrap();
    b.client
        .update(first, |conn| {
            conn.close(now, 0u32.into(), Bytes::from_static(b"bye"))
        })
        .expect("open");
    b.run_until("the window's return", |b| b.server.open_connections() == 3);
    assert_eq!(b.app.report.receive_windows, 3 * super::MIN_WINDOW);
    let later = b.elapsed() + ms(10);
    b.clients.plan.push((b.start + later, 5, true));
    b.clients.handles.push(None);
    b.clients.outcomes.push(Outcome::Pending);
    b.clients.got.push(0);
    b.run_until("the sixth", |b| b.clients.outcomes[5] != Outcome::Pending);
    assert_eq!(b.clients.outcomes[5], Outcome::Done);
    assert_eq!(b.app.report.refused_budget, 1);
}

/// One source may hold half the floor's connections once the budget is contended: its third
/// connection is refused for its share while another source is still served.
#[test]
fn a_source_past_its_share_of_a_contended_budget_is_refused_and_others_are_not() {
    let mut c = config(Limits {
        retry: RetryPolicy::Never,
        ..Limits::default()
    });
    c.budget = Budget {
        bytes: 4 * super::MIN_WINDOW,
        floor_connections: 4,
    };
    let ms = Duration::from_millis;
    let mut b = Bench::new(
        c,
        &[
            client(20, 5000),
            client(20, 5001),
            client(20, 5002),
            client(21, 5000),
        ],
        &[
            (ms(0), 0, false),
            (ms(0), 1, false),
            (ms(200), 2, true),
            (ms(400), 3, true),
        ],
    );
    b.run_to_the_end();
    b.assert_outcomes(&[Outcome::Done, Outcome::Done, refused(), Outcome::Done]);
    assert_eq!(
        (
            b.app.report.refused_source_share,
            b.app.report.refused_budget
        ),
        (1, 0)
    );
}

/// `--retry always`: every new connection is sent a Retry first and completes with the
/// token; a client's second Initial (with it) is not retried again.
#[test]
fn retry_always_validates_every_client_and_each_completes() {
    let mut b = Bench::new(
        config(Limits {
            retry: RetryPolicy::Always,
            ..Limits::default()
        }),
        &[client(20, 5000), client(21, 5000)],
        &[(Duration::ZERO, 0, true), (Duration::ZERO, 1, true)],
    );
    b.run_to_the_end();
    b.assert_outcomes(&[Outcome::Done, Outcome::Done]);
    let counters = b.server.counters();
    assert_eq!((counters.retries, counters.accepted), (2, 2));
    assert_eq!(b.app.report.admission.retries, 2);
    assert_eq!(b.app.report.admission.handshakes.count, 2);
}

/// `--retry auto`: no Retry while the server is quiet; once the half-open handshakes reach the
/// threshold a newcomer is retried (and served), and after they time out, none is again.
#[test]
fn retry_auto_starts_at_the_half_open_threshold_and_stops_below_it() {
    let limits = Limits {
        retry: RetryPolicy::Auto,
        retry_half_open: 2,
        handshake_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000), client(21, 5000), client(22, 5000)],
        &[
            (Duration::ZERO, 0, true),
            (Duration::from_secs(1), 1, true),
            (Duration::from_secs(7), 2, true),
        ],
    );
    // The first client is served before the lone Initials arrive: no Retry for it.
    b.run_until("the first", |b| b.clients.outcomes[0] != Outcome::Pending);
    assert_eq!(b.server.counters().retries, 0);
    b.lone_initial(client(10, 6000));
    b.lone_initial(client(11, 6000));
    b.run_until("the second", |b| b.clients.outcomes[1] != Outcome::Pending);
    assert_eq!(b.server.counters().retries, 1, "the second was retried");
    b.run_to_the_end();
    b.assert_outcomes(&[Outcome::Done, Outcome::Done, Outcome::Done]);
    assert_eq!(b.server.counters().retries, 1, "the third was not");
    assert_eq!(b.app.report.admission.handshake_timeouts, 2);
}

/// Uploads `len` pattern bytes with `perf` on one stream through [`body::Source`] (as the
/// client does), and reads the empty response to its FIN.
struct Uploader {
    config: Option<quinn_proto::ClientConfig>,
    source: crate::body::Source,
    stream: Option<quinn_proto::StreamId>,
    finished_writing: bool,
    response_fin: bool,
}

impl Uploader {
    fn pump(&mut self, conn: &mut quinn_proto::Connection) {
        if let Some(id) = self.stream
            && !self.finished_writing
            && let Ok(crate::body::Pumped::Finished) = self.source.pump(&mut conn.send_stream(id))
        {
            self.finished_writing = true;
        }
    }
}

impl Application for Uploader {
    fn event(
        &mut self,
        _: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        now: Instant,
    ) {
        match ev {
            Event::Connected => {
                self.stream = conn.streams().open(Dir::Bi);
                self.pump(conn);
            }
            Event::Stream(StreamEvent::Writable { .. }) => self.pump(conn),
            Event::Stream(StreamEvent::Readable { id })
                if crate::body::read_stream(conn, id, |_| std::ops::ControlFlow::Continue(()))
                    == crate::body::ReadEnd::Fin =>
            {
                self.response_fin = true;
                conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
            }
            _ => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take() {
            driver.connect(0, config, SERVER, "localhost", now).unwrap();
        }
        None
    }
}

/// An upload far larger than the server's connection window (a budget of minimal windows):
/// the uploader is held back by connection-level flow control over and over, each time part
/// way through a chunk, and must be woken by every MAX_DATA. It completes, every byte counted.
#[test]
fn an_upload_many_times_its_connection_window_completes() {
    const UPLOAD: u64 = 2 << 20;
    let mut c = config(Limits {
        retry: RetryPolicy::Never,
        ..Limits::default()
    });
    c.budget = Budget {
        bytes: 4 * super::MIN_WINDOW,
        floor_connections: 4,
    };
    let mut b = Bench::new(c, &[], &[]);
    let mut client_config = quinn_proto::ClientConfig::new(
        tls::client_crypto(&Trust::Insecure, tls::ALPN_PERF).unwrap(),
    );
    client_config.transport_config(Arc::new(
        TransportOptions::default().transport("client").unwrap(),
    ));
    let mut up = Uploader {
        config: Some(client_config),
        source: crate::body::Source::pattern(
            Some(Bytes::copy_from_slice(&crate::perf::request_header(0))),
            UPLOAD,
        ),
        stream: None,
        finished_writing: false,
        response_fin: false,
    };
    let mut client = Driver::with_datapaths(
        vec![b.net.path(client(20, 5000), Behaviour::default())],
        EndpointConfig::default(),
        None,
        true,
    );
    for turn in 0..TURNS {
        let s = b.net.turn(&mut b.server, &mut b.app).unwrap();
        let c = b.net.turn(&mut client, &mut up).unwrap();
        if up.response_fin {
            break;
        }
        let queued = b.server.queued_datagrams() + client.queued_datagrams() > 0;
        assert!(
            b.net.advance(&[s.deadline, c.deadline], queued),
            "the upload stalled at turn {turn}: {} of {UPLOAD} B received by the server",
            b.app.report.bytes_received
        );
    }
    assert!(up.response_fin, "the upload completed");
    assert_eq!(b.app.report.receive_windows, super::MIN_WINDOW);
    assert_eq!(
        b.app.report.bytes_received,
        UPLOAD + crate::perf::HEADER_LEN as u64
    );
}
