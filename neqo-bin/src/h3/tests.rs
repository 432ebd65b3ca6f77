//! `h3` over the driver, both ends on the in-memory network of
//! [`driver::testing`](crate::driver::testing): requests and responses byte-exact, many at
//! once, through loss; the mailbox left empty.

use std::{
    cell::RefCell,
    collections::HashMap,
    net::SocketAddr,
    rc::Rc,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::{Buf as _, Bytes};
use quinn_proto::{ConnectionHandle, EndpointConfig, Event};

use super::{Engine, tasks::Spawner, transport::H3Connection};
use crate::{
    driver::{
        Application, Driver,
        testing::{Behaviour, Network},
    },
    tls::{self, Identity, TransportOptions, Trust},
};

const SERVER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5555);

fn pattern(k: usize) -> u8 {
    (k % 251) as u8
}

/// `GET /N`: N pattern bytes; anything else 404.
async fn respond(
    req: http::Request<()>,
    mut stream: h3::server::RequestStream<super::transport::BidiStream, Bytes>,
) -> Result<(), h3::error::StreamError> {
    let n: Option<usize> = req
        .uri()
        .path()
        .strip_prefix('/')
        .and_then(|n| n.parse().ok());
    let Some(n) = n else {
        let resp = http::Response::builder().status(404).body(()).unwrap();
        stream.send_response(resp).await?;
        return stream.finish().await;
    };
    let resp = http::Response::builder()
        .status(200)
        .header("content-length", n)
        .body(())
        .unwrap();
    stream.send_response(resp).await?;
    let mut at = 0;
    while at < n {
        let end = n.min(at + 16_384);
        stream
            .send_data((at..end).map(pattern).collect::<Bytes>())
            .await?;
        at = end;
    }
    stream.finish().await
}

async fn serve(t: H3Connection, spawner: Spawner) {
    let Ok(mut conn) = h3::server::Connection::<_, Bytes>::new(t).await else {
        return;
    };
    loop {
        let resolver = match conn.accept().await {
            Ok(Some(r)) => r,
            _ => break,
        };
        spawner.spawn(async move {
            if let Ok((req, stream)) = resolver.resolve_request().await {
                let _ = respond(req, stream).await;
            }
        });
    }
}

#[derive(Default)]
struct Server {
    conns: HashMap<ConnectionHandle, Engine>,
}

impl Application for Server {
    fn accepted(&mut self, ch: ConnectionHandle, conn: &mut quinn_proto::Connection, now: Instant) {
        let mut engine = Engine::new();
        engine
            .spawner()
            .spawn(serve(engine.transport(), engine.spawner()));
        engine.drive(conn, now);
        self.conns.insert(ch, engine);
    }

    fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        now: Instant,
    ) {
        if let Some(e) = self.conns.get_mut(&ch) {
            e.on_event(conn, &ev, now);
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        let mut again = None;
        for (ch, e) in &mut self.conns {
            if e.pending() {
                driver.update(*ch, |c| e.drive(c, now));
                if e.pending() {
                    again = Some(now);
                }
            }
        }
        again
    }

    fn drained(&mut self, ch: ConnectionHandle, _: &quinn_proto::Connection) {
        self.conns.remove(&ch);
    }
}

/// What a request got: status, body bytes, bytes that differ from the pattern.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    path: String,
    status: u16,
    bytes: usize,
    wrong: usize,
}

async fn get(
    mut send: h3::client::SendRequest<super::transport::Opener, Bytes>,
    path: String,
    out: Rc<RefCell<Vec<Got>>>,
) -> Result<(), h3::error::StreamError> {
    let req = http::Request::get(format!("https://t{path}"))
        .body(())
        .unwrap();
    let mut s = send.send_request(req).await?;
    s.finish().await?;
    let resp = s.recv_response().await?;
    let (mut bytes, mut wrong) = (0, 0);
    while let Some(mut chunk) = s.recv_data().await? {
        while chunk.has_remaining() {
            let c = chunk.chunk();
            wrong += c
                .iter()
                .enumerate()
                .filter(|(i, b)| **b != pattern(bytes + i))
                .count();
            bytes += c.len();
            let n = c.len();
            chunk.advance(n);
        }
    }
    out.borrow_mut().push(Got {
        path,
        status: resp.status().as_u16(),
        bytes,
        wrong,
    });
    Ok(())
}

struct Client {
    config: Option<quinn_proto::ClientConfig>,
    paths: Vec<String>,
    ch: Option<ConnectionHandle>,
    engine: Engine,
    got: Rc<RefCell<Vec<Got>>>,
    closed: bool,
    lost: Option<quinn_proto::ConnectionError>,
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
        if let Event::ConnectionLost { reason } = &ev {
            self.lost = Some(reason.clone());
        }
        self.engine.on_event(conn, &ev, now);
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take() {
            let ch = driver.connect(0, config, SERVER, "localhost", now).unwrap();
            self.ch = Some(ch);
            let (t, spawner) = (self.engine.transport(), self.engine.spawner());
            let (paths, got) = (self.paths.clone(), Rc::clone(&self.got));
            self.engine.spawner().spawn(async move {
                let (mut conn, send) = match h3::client::new(t).await {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("client::new: {e}");
                        return;
                    }
                };
                for path in paths {
                    spawner.spawn({
                        let (send, got) = (send.clone(), Rc::clone(&got));
                        async move {
                            if let Err(e) = get(send, path, got).await {
                                eprintln!("get: {e}");
                            }
                        }
                    });
                }
                drop(send);
                let e = std::future::poll_fn(|cx| conn.poll_close(cx)).await;
                eprintln!("client closed: {e}");
            });
        }
        let ch = self.ch?;
        let engine = &mut self.engine;
        driver.update(ch, |c| engine.drive(c, now));
        if !self.closed && self.got.borrow().len() == self.paths.len() {
            self.closed = true;
            driver.update(ch, |c| {
                c.close(now, 0x100u32.into(), Bytes::from_static(b"done"));
            });
        }
        self.engine.pending().then_some(now)
    }

    fn drained(&mut self, _: ConnectionHandle, _: &quinn_proto::Connection) {
        self.drained = true;
    }

    fn done(&self) -> bool {
        self.drained
    }
}

struct Pair {
    net: Network,
    server: Driver,
    server_app: Server,
    client: Driver,
    client_app: Client,
}

impl Pair {
    fn new(paths: &[&str]) -> Self {
        let identity = Identity::self_signed().unwrap();
        let options = TransportOptions::default();
        let mut server_config = quinn_proto::ServerConfig::with_crypto(
            tls::server_crypto(&identity, &["h3".into()]).unwrap(),
        );
        // HTTP/3's control and QPACK streams (RFC 9114 section 6.2), and grease.
        let transport = |label| {
            let mut t = options.transport(label).unwrap();
            t.max_concurrent_uni_streams(8u32.into());
            Arc::new(t)
        };
        server_config.transport_config(transport("server"));
        let mut client_config = quinn_proto::ClientConfig::new(
            tls::client_crypto(&Trust::Certs(identity.chain.clone()), "h3").unwrap(),
        );
        client_config.transport_config(transport("client"));
        let net = Network::new(3, Instant::now()).with_one_way(Duration::from_millis(5));
        let server = Driver::with_datapaths(
            vec![net.path(SERVER, Behaviour::default())],
            EndpointConfig::default(),
            Some(Arc::new(server_config)),
            true,
        );
        let client = Driver::with_datapaths(
            vec![net.path(CLIENT, Behaviour::default())],
            EndpointConfig::default(),
            None,
            true,
        );
        Self {
            net,
            server,
            server_app: Server::default(),
            client,
            client_app: Client {
                config: Some(client_config),
                paths: paths.iter().map(|p| (*p).to_owned()).collect(),
                ch: None,
                engine: Engine::new(),
                got: Rc::default(),
                closed: false,
                lost: None,
                drained: false,
            },
        }
    }

    fn run(&mut self) {
        for turn in 0..200_000 {
            let s = self
                .net
                .turn(&mut self.server, &mut self.server_app)
                .unwrap();
            let c = self
                .net
                .turn(&mut self.client, &mut self.client_app)
                .unwrap();
            if c.done {
                return;
            }
            let queued = self.server.queued_datagrams() + self.client.queued_datagrams() > 0;
            assert!(
                self.net.advance(&[s.deadline, c.deadline], queued),
                "stalled at turn {turn}: got {:?}, client tasks {}, server engines {:?}",
                self.client_app.got.borrow(),
                self.client_app.engine.tasks(),
                self.server_app
                    .conns
                    .values()
                    .map(|e| (e.tasks(), e.streams()))
                    .collect::<Vec<_>>()
            );
        }
        panic!(
            "no end after 200 000 turns: got {}, client {:?} pending {}, server {:?}",
            self.client_app.got.borrow().len(),
            self.client_app.engine,
            self.client_app.engine.pending(),
            self.server_app
                .conns
                .values()
                .map(|e| (format!("{e:?}"), e.pending()))
                .collect::<Vec<_>>()
        );
    }

    fn got(&self) -> Vec<Got> {
        let mut got = std::mem::take(&mut *self.client_app.got.borrow_mut());
        got.sort_by(|a, b| a.path.cmp(&b.path));
        got
    }
}

fn ok(path: &str, bytes: usize) -> Got {
    Got {
        path: path.into(),
        status: 200,
        bytes,
        wrong: 0,
    }
}

#[test]
fn requests_get_their_responses_byte_exact() {
    let mut pair = Pair::new(&["/3000000", "/0", "/nothing", "/70000"]);
    pair.run();
    let lost = pair.client_app.lost.clone();
    assert_eq!(
        pair.got(),
        vec![
            ok("/0", 0),
            ok("/3000000", 3_000_000),
            ok("/70000", 70_000),
            Got {
                path: "/nothing".into(),
                status: 404,
                bytes: 0,
                wrong: 0
            },
        ]
    );
    assert!(lost.is_none(), "closed by the client, not lost: {lost:?}");
}

#[test]
fn a_hundred_concurrent_requests_through_loss() {
    let paths: Vec<String> = (0..100).map(|i| format!("/{}", 1000 + i * 997)).collect();
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let mut pair = Pair::new(&refs);
    pair.net.set_loss(0.02);
    pair.run();
    let mut want: Vec<Got> = paths
        .iter()
        .map(|p| ok(p, p[1..].parse().unwrap()))
        .collect();
    want.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(pair.got(), want);
    assert!(pair.net.lost() > 0, "the network lost some");
}
