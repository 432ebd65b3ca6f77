//! `h3` over the driver, both ends on the in-memory network of
//! [`driver::testing`](neqo_driver::testing): requests and responses byte-exact, many at
//! once, through loss; the mailbox left empty.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use neqo_driver::{
    Application, Driver, TransportOptions,
    testing::{Behaviour, Network},
    tls::{self, Identity, Trust},
};
use neqo_protocols::pattern;
use quinn_proto::{ConnectionHandle, EndpointConfig, Event};

use super::{
    Engine, UNI_STREAMS,
    handles::H3Connection,
    tasks::Spawner,
    testing::{Client, Got, pattern_body},
};

const SERVER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5555);

/// `GET /N`: N pattern bytes; anything else 404.
async fn respond(
    req: http::Request<()>,
    mut stream: h3::server::RequestStream<super::streams::BidiStream, Bytes>,
) -> Result<(), h3::error::StreamError> {
    let n: Option<u64> = req
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
        let chunk = pattern::chunk(at, n - at);
        at += chunk.len() as u64;
        stream.send_data(chunk).await?;
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
            let options = TransportOptions {
                uni_streams: UNI_STREAMS,
                ..options.clone()
            };
            Arc::new(options.transport(label).unwrap())
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
            neqo_driver::DriverConfig::default(),
        );
        let client = Driver::with_datapaths(
            vec![net.path(CLIENT, Behaviour::default())],
            EndpointConfig::default(),
            None,
            neqo_driver::DriverConfig::default(),
        );
        Self {
            net,
            server,
            server_app: Server::default(),
            client,
            client_app: Client::new(
                SERVER,
                client_config,
                &paths.iter().map(|p| ("GET", *p)).collect::<Vec<_>>(),
            ),
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
        self.client_app
            .answers()
            .into_iter()
            .map(|g| g.expect("an answer"))
            .collect()
    }
}

/// A `/n` answered by the test server.
fn ok(path: &str) -> Got {
    let mut g = Got::ok("GET", path, pattern_body(path[1..].parse().unwrap()), None);
    g.content_type = None;
    g
}

#[test]
fn requests_get_their_responses_byte_exact() {
    let mut pair = Pair::new(&["/3000000", "/0", "/nothing", "/70000"]);
    pair.run();
    let lost = pair.client_app.lost.clone();
    assert_eq!(
        pair.got(),
        vec![
            ok("/0"),
            ok("/3000000"),
            ok("/70000"),
            Got {
                content_length: None,
                ..Got::status("GET", "/nothing", 404)
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
    let mut want: Vec<Got> = paths.iter().map(|p| ok(p)).collect();
    want.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(pair.got(), want);
    assert!(pair.net.lost() > 0, "the network lost some");
}

/// A thousand requests at once, ten times what the server lets be open: each waits for a
/// stream in turn, and once all are answered no opener is left waiting and the client's
/// mailbox keeps only the control and QPACK streams. While requests wait for credit, the
/// client acknowledges arriving responses at once (a PING carries the ACK): the server gives
/// credit back only once it knows its responses arrived, and a client with nothing else to
/// send would acknowledge them only after its ACK delay.
#[test]
fn requests_beyond_the_stream_limit_leave_no_waiter_behind() {
    let paths: Vec<String> = (0..1000).map(|i| format!("/{}", i % 97)).collect();
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let mut pair = Pair::new(&refs);
    pair.run();
    assert_eq!(pair.got().len(), 1000);
    assert!(
        pair.client_app.pings_sent >= 9,
        "a PING each round the client waited for credit: {}",
        pair.client_app.pings_sent
    );
    assert!(pair.got().iter().all(|g| g.status == 200));
    let e = &pair.client_app.engine;
    assert_eq!(e.open_waiters(), 0);
    assert!(e.accept_waiters() <= 2);
    assert!(e.streams() <= 2 * UNI_STREAMS as usize, "{}", e.streams());
}
