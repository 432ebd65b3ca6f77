//! The client session against a scripted server on neqo-driver's in-memory network: the server
//! reads each request whole (its head checked by the same rules), then writes the bytes a
//! test gives for its path, frame by frame, and ends or resets the stream as told. What the
//! client made of each response is compared whole: interim statuses, final status, body
//! byte-exact, and how it ended.

use std::{
    cell::RefCell,
    collections::HashMap,
    net::SocketAddr,
    ops::ControlFlow,
    rc::Rc,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use neqo_driver::{
    Application, Driver, TransportOptions,
    testing::{Behaviour, Network},
    tls::{self, Identity, Trust},
};
use neqo_protocols::{body, pattern};
use quinn_proto::{ConnectionHandle, Dir, EndpointConfig, Event, StreamEvent, StreamId};

use super::*;
use crate::{
    control::{goaway, opening},
    frame::{FrameReader, Step, Take, put_frame_header, put_varint},
};

const SERVER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 4433);
const CLIENT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 5555);

fn frame(kind: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_frame_header(kind, payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

fn section(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    qpack::put_section(
        fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        &mut out,
    );
    out
}

fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
    frame(kind::HEADERS, &section(fields))
}

/// A 200 with `body` as one DATA frame and its content-length.
fn ok(body: &[u8]) -> Vec<u8> {
    let mut out = headers(&[
        (":status", "200"),
        ("content-length", &body.len().to_string()),
    ]);
    out.extend(frame(kind::DATA, body));
    out
}

/// What the scripted server does with a request.
#[derive(Debug, Clone)]
enum Answer {
    /// Writes these bytes and ends the stream.
    Fin(Vec<u8>),
    /// Writes these bytes and resets the stream with the code: at once when there are none,
    /// else once the client has read the head they hold (a reset may drop unsent data).
    Reset(Vec<u8>, u64),
    /// Never answers.
    Silent,
}

/// A request as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: &'static str,
    path: String,
    authority: String,
    body: u64,
}

type Script = Rc<dyn Fn(&str) -> Answer>;

type Field<'a> = (&'a [u8], &'a [u8]);

struct Server {
    script: Script,
    /// Its control stream's bytes.
    control: Vec<u8>,
    /// A GOAWAY naming this ID, sent once the first request is read.
    goaway: Option<u64>,
    seen: Rc<RefCell<Vec<Seen>>>,
    /// Unidirectional streams the client opened.
    client_uni: Rc<RefCell<usize>>,
    reading: HashMap<StreamId, Vec<u8>>,
    control_id: Option<StreamId>,
    /// Streams to reset once the client has read their head, with the code.
    resets: HashMap<StreamId, u64>,
    /// Request streams whose final head the client has read.
    heads_read: Rc<RefCell<Vec<StreamId>>>,
    ch: Option<ConnectionHandle>,
}

impl Server {
    /// Reads request `id` to its end; then answers.
    fn read(&mut self, conn: &mut quinn_proto::Connection, id: StreamId) {
        let buf = self.reading.entry(id).or_default();
        let end = body::read_stream(conn, id, |c| {
            buf.extend_from_slice(&c.bytes);
            ControlFlow::Continue(())
        });
        if end != body::ReadEnd::Fin {
            return;
        }
        let bytes = self.reading.remove(&id).unwrap();
        let seen = seen(&bytes);
        let answer = (self.script)(&seen.path);
        self.seen.borrow_mut().push(seen);
        if let (Some(first), Some(ctl)) = (self.goaway.take(), self.control_id) {
            conn.send_stream(ctl).write_all_for_test(&goaway(first));
        }
        let mut send = conn.send_stream(id);
        match answer {
            Answer::Fin(b) => {
                send.write_all_for_test(&b);
                send.finish().unwrap();
            }
            Answer::Reset(b, c) if b.is_empty() => {
                send.reset(quinn_proto::VarInt::from_u64(c).unwrap())
                    .unwrap();
            }
            Answer::Reset(b, c) => {
                send.write_all_for_test(&b);
                self.resets.insert(id, c);
            }
            Answer::Silent => {}
        }
    }
}

/// Writes all of `b` (the tests' bodies fit the stream's window).
trait WriteAll {
    fn write_all_for_test(&mut self, b: &[u8]);
}

impl WriteAll for quinn_proto::SendStream<'_> {
    fn write_all_for_test(&mut self, b: &[u8]) {
        let n = self.write(b).unwrap_or(0);
        assert_eq!(n, b.len(), "a test answer within the window");
    }
}

/// A request stream's head and body, by the same rules the server here holds requests to.
fn seen(bytes: &[u8]) -> Seen {
    let mut frames = FrameReader::default();
    let mut decoder = Decoder::default();
    let mut out = Seen {
        method: "",
        path: String::new(),
        authority: String::new(),
        body: 0,
    };
    let mut authority = String::new();
    frames
        .feed(bytes, &mut |step| {
            match step {
                Step::Begins { kind, .. } if kind == kind::DATA => return Ok(Take::Pieces),
                Step::Begins { .. } => return Ok(Take::Whole),
                Step::Whole { payload, .. } => {
                    let h = head::request(&mut decoder, payload, u64::MAX, |n, v| {
                        if n == b":authority" {
                            authority = String::from_utf8_lossy(v).into_owned();
                        }
                    })
                    .expect("a request within the rules");
                    out.method = h.method.as_str();
                    out.path = h.path;
                }
                Step::Piece(p) => out.body += p.len() as u64,
            }
            Ok(Take::Skip)
        })
        .unwrap();
    out.authority = authority;
    out
}

impl Application for Server {
    fn poll(&mut self, driver: &mut Driver, _: Instant) -> Option<Instant> {
        let read: Vec<StreamId> = self.heads_read.borrow_mut().drain(..).collect();
        let ch = self.ch?;
        driver.update(ch, |conn| {
            for id in read {
                if let Some(c) = self.resets.remove(&id) {
                    let code = quinn_proto::VarInt::from_u64(c).unwrap();
                    conn.send_stream(id).reset(code).unwrap();
                }
            }
        });
        None
    }

    fn accepted(&mut self, ch: ConnectionHandle, conn: &mut quinn_proto::Connection, _: Instant) {
        self.ch = Some(ch);
        let id = conn.streams().open(Dir::Uni).unwrap();
        conn.send_stream(id).write_all_for_test(&self.control);
        self.control_id = Some(id);
    }

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
                    self.read(conn, id);
                }
            }
            Event::Stream(StreamEvent::Opened { dir: Dir::Uni }) => {
                while let Some(id) = conn.streams().accept(Dir::Uni) {
                    *self.client_uni.borrow_mut() += 1;
                    // Its control stream: read and dropped (the client rules are not what
                    // is tested here).
                    let _ = body::read_stream(conn, id, |_| ControlFlow::Continue(()));
                }
            }
            Event::Stream(StreamEvent::Readable { id }) if id.dir() == Dir::Bi => {
                self.read(conn, id);
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                let _ = body::read_stream(conn, id, |_| ControlFlow::Continue(()));
            }
            _ => {}
        }
    }
}

/// How a request ended, as the client told it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Done,
    Failed(Failure),
    Rejected,
    NotSent(NotSent),
    /// The connection went first.
    Lost,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Got {
    interim: Vec<u16>,
    status: Option<u16>,
    fields: Vec<(String, String)>,
    trailers: Vec<(String, String)>,
    body: Vec<u8>,
    end: Option<End>,
}

struct Client {
    config: Option<quinn_proto::ClientConfig>,
    ch: Option<ConnectionHandle>,
    session: ClientSession,
    requests: Vec<(&'static str, String, Body)>,
    authority: String,
    sequential: bool,
    /// Read at most this many bytes at a time; a paused read goes on at the next poll.
    window: usize,
    next: usize,
    ids: HashMap<StreamId, usize>,
    got: Vec<Got>,
    paused: Vec<StreamId>,
    largest_read: usize,
    goaway: Option<u64>,
    /// What a request sent once the GOAWAY came met.
    after_goaway: Option<NotSent>,
    closed: Option<(u64, &'static str)>,
    done: bool,
    /// Told to the server: request streams whose final head was read.
    heads_read: Rc<RefCell<Vec<StreamId>>>,
    /// Connections that sent their requests in 0-RTT, and those of them the server refused.
    zero_rtt: (usize, usize),
}

impl Client {
    /// Another connection, with the same requests, from a client that keeps its session
    /// tickets (`config`'s crypto).
    fn again(&mut self, config: quinn_proto::ClientConfig) {
        self.config = Some(config);
        self.ch = None;
        self.session = ClientSession::new(Config {
            keep_fields: true,
            ..Config::default()
        });
        self.next = 0;
        self.ids.clear();
        self.got = vec![Got::default(); self.requests.len()];
        self.done = false;
    }

    fn ended(&mut self, i: usize, end: End) {
        assert!(self.got[i].end.is_none(), "request {i} ended twice");
        self.got[i].end = Some(end);
    }

    fn send(&mut self, conn: &mut quinn_proto::Connection) {
        while self.next < self.requests.len() {
            if self.sequential && !self.ids.is_empty() {
                return;
            }
            let (method, path, body) = self.requests[self.next].clone();
            let request = Request {
                method,
                scheme: "https",
                authority: &self.authority,
                path: &path,
                fields: &[(b"user-agent", b"test")],
            };
            match self.session.send_request(conn, &request, body) {
                Ok(id) => {
                    self.ids.insert(id, self.next);
                }
                Err(NotSent::NoStream) => return,
                Err(e) => self.ended(self.next, End::NotSent(e)),
            }
            self.next += 1;
        }
    }

    fn read(&mut self, conn: &mut quinn_proto::Connection, id: StreamId, now: Instant) {
        let Some(&i) = self.ids.get(&id) else {
            return;
        };
        let got = &mut self.got[i];
        let heads_read = &self.heads_read;
        let mut read = 0;
        let text = |f: &Fields| -> Vec<(String, String)> {
            f.iter()
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(n).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    )
                })
                .collect()
        };
        let r = self
            .session
            .read(conn, id, self.window, now, &mut |part| match part {
                Part::Interim { head, .. } => got.interim.push(head.status),
                Part::Head { head, fields } => {
                    heads_read.borrow_mut().push(id);
                    got.status = Some(head.status);
                    got.fields = text(fields);
                }
                Part::Data(d) => {
                    read += d.len();
                    got.body.extend_from_slice(d);
                }
                Part::Trailers { fields } => got.trailers = text(fields),
            });
        self.largest_read = self.largest_read.max(read);
        match r {
            Read::Blocked => {}
            Read::Paused => self.paused.push(id),
            Read::Done => {
                self.ids.remove(&id);
                self.ended(i, End::Done);
            }
            Read::Failed(f) => {
                self.ids.remove(&id);
                self.ended(i, End::Failed(f));
            }
        }
    }

    fn events(&mut self, conn: &mut quinn_proto::Connection, now: Instant) {
        while let Some(e) = self.session.poll() {
            match e {
                ClientEvent::Readable(id) => self.read(conn, id, now),
                ClientEvent::Rejected(id) => {
                    let i = self.ids.remove(&id).unwrap();
                    self.ended(i, End::Rejected);
                }
                ClientEvent::GoAway { first } => {
                    self.goaway = Some(first);
                    let request = Request {
                        method: "GET",
                        scheme: "https",
                        authority: &self.authority,
                        path: "/after",
                        fields: &[],
                    };
                    self.after_goaway =
                        self.session.send_request(conn, &request, Body::Empty).err();
                }
                ClientEvent::Available => {}
                ClientEvent::Closed { code, why } => {
                    self.closed = Some((code, why));
                    for i in self.ids.drain().map(|(_, i)| i).collect::<Vec<_>>() {
                        self.got[i].end = Some(End::Lost);
                    }
                    self.done = true;
                }
            }
        }
        self.send(conn);
        if self.got.iter().all(|g| g.end.is_some()) && !self.done {
            self.done = true;
            conn.close(now, code::NO_ERROR.try_into().unwrap(), Bytes::new());
        }
    }
}

impl Application for Client {
    fn event(
        &mut self,
        _: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        now: Instant,
    ) {
        if let Event::ConnectionLost { .. } = ev {
            for i in self.ids.drain().map(|(_, i)| i).collect::<Vec<_>>() {
                self.got[i].end = Some(End::Lost);
            }
            self.done = true;
            return;
        }
        if matches!(ev, Event::Connected) && conn.has_0rtt() && !conn.accepted_0rtt() {
            // quinn-proto dropped the streams opened in 0-RTT: the requests go again.
            self.zero_rtt.1 += 1;
            self.session.zero_rtt_rejected(conn, now);
            self.ids.clear();
            self.next = 0;
        }
        self.session.event(conn, &ev, now);
        self.events(conn, now);
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take() {
            let ch = driver.connect(0, config, SERVER, "localhost", now).unwrap();
            self.ch = Some(ch);
            driver.update(ch, |conn| {
                self.session.start(conn, now);
                if conn.has_0rtt() {
                    self.zero_rtt.0 += 1;
                }
                self.send(conn);
            });
        }
        let paused = std::mem::take(&mut self.paused);
        if let Some(ch) = self.ch
            && !paused.is_empty()
        {
            driver.update(ch, |conn| {
                for id in paused {
                    self.read(conn, id, now);
                }
                self.events(conn, now);
            });
            return Some(now);
        }
        None
    }

    fn done(&self) -> bool {
        self.done
    }
}

struct Pair {
    net: Network,
    server: Driver,
    server_app: Server,
    client: Driver,
    client_app: Client,
    identity: Identity,
    uni: u32,
    client_config: quinn_proto::ClientConfig,
}

impl Pair {
    /// `requests` (method, path, body) against a server answering as `script` says, which
    /// lets the client open `uni` unidirectional streams.
    fn new(
        requests: &[(&'static str, &str, Body)],
        uni: u32,
        script: impl Fn(&str) -> Answer + 'static,
    ) -> Self {
        let identity = Identity::self_signed().unwrap();
        let transport = |label, uni_streams| {
            let options = TransportOptions {
                uni_streams,
                ..TransportOptions::default()
            };
            Arc::new(options.transport(label).unwrap())
        };
        let mut client_config = quinn_proto::ClientConfig::new(
            tls::client_crypto(&Trust::Certs(identity.chain.clone()), "h3").unwrap(),
        );
        client_config.transport_config(transport("client", crate::UNI_STREAMS));
        let heads_read = Rc::default();
        let net = Network::new(7, Instant::now()).with_one_way(Duration::from_millis(5));
        let server = server(&net, &identity, uni);
        let client = Driver::with_datapaths(
            vec![net.path(CLIENT, Behaviour::default())],
            EndpointConfig::default(),
            None,
            neqo_driver::DriverConfig::default(),
        );
        Self {
            net,
            server,
            server_app: Server {
                script: Rc::new(script),
                control: opening(16_384),
                goaway: None,
                seen: Rc::default(),
                client_uni: Rc::default(),
                reading: HashMap::new(),
                control_id: None,
                resets: HashMap::new(),
                heads_read: Rc::clone(&heads_read),
                ch: None,
            },
            client,
            client_app: Client {
                config: Some(client_config.clone()),
                ch: None,
                session: ClientSession::new(Config {
                    keep_fields: true,
                    ..Config::default()
                }),
                requests: requests
                    .iter()
                    .map(|(m, p, b)| (*m, (*p).to_owned(), *b))
                    .collect(),
                authority: "localhost:4433".into(),
                sequential: false,
                window: usize::MAX,
                next: 0,
                ids: HashMap::new(),
                got: vec![Got::default(); requests.len()],
                paused: Vec::new(),
                largest_read: 0,
                goaway: None,
                after_goaway: None,
                closed: None,
                done: false,
                heads_read,
                zero_rtt: (0, 0),
            },
            identity,
            uni,
            client_config,
        }
    }

    /// The server's process ends and another takes its address: the same certificate, none
    /// of its session state.
    fn restart_server(&mut self) {
        self.server = server(&self.net, &self.identity, self.uni);
        self.server_app.ch = None;
        self.server_app.control_id = None;
        self.server_app.reading.clear();
        self.server_app.seen.borrow_mut().clear();
    }

    fn run(&mut self) -> Vec<Got> {
        for _ in 0..100_000 {
            let s = self
                .net
                .turn(&mut self.server, &mut self.server_app)
                .unwrap();
            let c = self
                .net
                .turn(&mut self.client, &mut self.client_app)
                .unwrap();
            if c.done {
                return self.client_app.got.clone();
            }
            let queued = self.server.queued_datagrams() + self.client.queued_datagrams() > 0;
            assert!(
                self.net.advance(&[s.deadline, c.deadline], queued),
                "stalled: {:?}",
                self.client_app.got
            );
        }
        panic!("no end: {:?}", self.client_app.got);
    }
}

/// A server endpoint at [`SERVER`] with `identity`, letting the client open `uni`
/// unidirectional streams.
fn server(net: &Network, identity: &Identity, uni: u32) -> Driver {
    let options = TransportOptions {
        uni_streams: uni,
        ..TransportOptions::default()
    };
    let mut config = quinn_proto::ServerConfig::with_crypto(
        tls::server_crypto(identity, &["h3".into()]).unwrap(),
    );
    config.transport_config(Arc::new(options.transport("server").unwrap()));
    Driver::with_datapaths(
        vec![net.path(SERVER, Behaviour::default())],
        EndpointConfig::default(),
        Some(Arc::new(config)),
        neqo_driver::DriverConfig::default(),
    )
}

fn get(path: &str) -> (&'static str, &str, Body) {
    ("GET", path, Body::Empty)
}

fn broken(why: &'static str) -> End {
    End::Failed(Failure::Broken {
        code: code::MESSAGE_ERROR,
        why,
    })
}

#[test]
fn responses_arrive_byte_exact_through_empty_data_interim_heads_and_trailers() {
    let body = pattern::slice(0, 70_000).to_vec();
    let want = body.clone();
    let mut pair = Pair::new(&[get("/a"), get("/b")], 3, move |path| {
        if path == "/b" {
            return Answer::Fin(ok(b"b"));
        }
        let mut out = headers(&[(":status", "103"), ("link", "</s.css>; rel=preload")]);
        out.extend(headers(&[(":status", "100")]));
        out.extend(headers(&[
            (":status", "200"),
            ("content-length", &body.len().to_string()),
        ]));
        out.extend(frame(kind::DATA, b""));
        out.extend(frame(kind::DATA, &body[..10]));
        out.extend(frame(0x21, b"an unknown frame is read past"));
        out.extend(frame(kind::DATA, b""));
        out.extend(frame(kind::DATA, &body[10..]));
        out.extend(headers(&[("x-checksum", "ok")]));
        Answer::Fin(out)
    });
    let got = pair.run();
    assert_eq!(got[0].interim, [103, 100]);
    assert_eq!(got[0].status, Some(200));
    assert_eq!(got[0].body, want);
    assert_eq!(got[0].trailers, [("x-checksum".into(), "ok".into())]);
    assert_eq!(got[0].end, Some(End::Done));
    assert_eq!(got[1].body, b"b");
    assert_eq!(got[1].end, Some(End::Done));
    let seen = pair.server_app.seen.borrow();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|s| s.method == "GET" && s.authority == "localhost:4433")
    );
    // The control stream alone: QPACK's two are not needed without a dynamic table.
    assert_eq!(*pair.server_app.client_uni.borrow(), 1);
}

#[test]
fn a_body_not_its_content_length_fails_the_request() {
    let mut pair = Pair::new(&[get("/short"), get("/long"), get("/none")], 3, |path| {
        let mut out = headers(&[(":status", "200"), ("content-length", "12")]);
        match path {
            "/short" => out.extend(frame(kind::DATA, b"123456")),
            "/long" => out.extend(frame(kind::DATA, b"1234567890123")),
            _ => return Answer::Fin(headers(&[(":status", "200")])),
        }
        Answer::Fin(out)
    });
    let got = pair.run();
    assert_eq!(
        got[0].end,
        Some(broken("a body shorter than its content-length"))
    );
    assert_eq!(
        got[0].body, b"123456",
        "what came is handed over before the verdict"
    );
    assert_eq!(
        got[1].end,
        Some(broken("a body longer than its content-length"))
    );
    assert_eq!(
        got[1].body, b"123456789012",
        "what is within the length is handed over"
    );
    assert_eq!(
        got[2].end,
        Some(End::Done),
        "no content-length: the FIN ends it"
    );
}

#[test]
fn head_204_and_304_carry_no_body() {
    let requests = [
        ("HEAD", "/h", Body::Empty),
        get("/204"),
        get("/304-with-body"),
    ];
    let mut pair = Pair::new(&requests, 3, |path| match path {
        "/h" => Answer::Fin(headers(&[(":status", "200"), ("content-length", "12")])),
        "/204" => Answer::Fin(headers(&[(":status", "204")])),
        _ => {
            let mut out = headers(&[(":status", "304"), ("content-length", "3")]);
            out.extend(frame(kind::DATA, b"abc"));
            Answer::Fin(out)
        }
    });
    let got = pair.run();
    assert_eq!(got[0].end, Some(End::Done));
    assert_eq!(got[0].status, Some(200));
    assert_eq!(got[1].end, Some(End::Done));
    assert_eq!(
        got[2].end,
        Some(broken("a body where the response has none"))
    );
    assert_eq!(pair.server_app.seen.borrow()[0].method, "HEAD");
}

#[test]
fn rejected_is_told_apart_from_cut() {
    let mut pair = Pair::new(
        &[get("/rejected"), get("/cut"), get("/cancelled")],
        3,
        |p| {
            match p {
                "/rejected" => Answer::Reset(Vec::new(), code::REQUEST_REJECTED),
                // A head came: whatever the code says, it may have been processed.
                "/cut" => Answer::Reset(headers(&[(":status", "200")]), code::REQUEST_REJECTED),
                _ => Answer::Reset(Vec::new(), code::REQUEST_CANCELLED),
            }
        },
    );
    let got = pair.run();
    assert_eq!(got[0].end, Some(End::Failed(Failure::Rejected)));
    assert_eq!(
        got[1].end,
        Some(End::Failed(Failure::Reset(code::REQUEST_REJECTED)))
    );
    assert_eq!(
        got[2].end,
        Some(End::Failed(Failure::Reset(code::REQUEST_CANCELLED)))
    );
}

#[test]
fn a_goaway_rejects_the_requests_past_it_and_no_more_are_sent() {
    let requests: Vec<_> = ["/0", "/1", "/2"].into_iter().map(get).collect();
    let mut pair = Pair::new(&requests, 3, |p| match p {
        "/0" => Answer::Fin(ok(b"zero")),
        _ => Answer::Silent,
    });
    // The first request's stream is 0: 4 and 8 are past the GOAWAY.
    pair.server_app.goaway = Some(4);
    let got = pair.run();
    assert_eq!(pair.client_app.goaway, Some(4));
    assert_eq!(got[0].end, Some(End::Done));
    assert_eq!(got[0].body, b"zero");
    assert_eq!(got[1].end, Some(End::Rejected));
    assert_eq!(got[2].end, Some(End::Rejected));
    assert_eq!(pair.client_app.after_goaway, Some(NotSent::GoingAway));
}

#[test]
fn sequential_requests_fit_a_server_allowing_three_unidirectional_streams() {
    let requests: Vec<_> = (0..5).map(|_| get("/x")).collect();
    let mut pair = Pair::new(&requests, 3, |_| Answer::Fin(ok(b"x")));
    pair.client_app.sequential = true;
    let got = pair.run();
    assert!(
        got.iter()
            .all(|g| g.end == Some(End::Done) && g.body == b"x")
    );
    assert_eq!(*pair.server_app.client_uni.borrow(), 1);
}

#[test]
fn a_response_read_a_window_at_a_time_is_whole() {
    let body = pattern::slice(0, 200_000).to_vec();
    let want = body.clone();
    let mut pair = Pair::new(&[get("/big")], 3, move |_| Answer::Fin(ok(&body)));
    pair.client_app.window = 1000;
    let got = pair.run();
    assert_eq!(got[0].end, Some(End::Done));
    assert_eq!(got[0].body, want);
    assert!(
        pair.client_app.largest_read <= 1000,
        "{}",
        pair.client_app.largest_read
    );
}

#[test]
fn responses_against_the_rules_fail_the_stream_or_close_the_connection() {
    // Stream errors: each request alone fails.
    let cases: Vec<(&str, Vec<u8>, End)> = vec![
        (
            "/no-status",
            headers(&[("content-length", "0")]),
            broken("no :status"),
        ),
        (
            "/connection",
            headers(&[(":status", "200"), ("connection", "close")]),
            broken("a connection-specific field"),
        ),
        (
            "/two-lengths",
            headers(&[
                (":status", "200"),
                ("content-length", "1"),
                ("content-length", "2"),
            ]),
            broken("content-lengths that differ"),
        ),
        (
            "/101",
            headers(&[(":status", "101")]),
            broken("a 101 Switching Protocols"),
        ),
        (
            "/empty",
            Vec::new(),
            broken("the stream ended before the final head"),
        ),
        (
            "/interim-only",
            headers(&[(":status", "103")]),
            broken("the stream ended before the final head"),
        ),
    ];
    let requests: Vec<_> = cases.iter().map(|(p, ..)| get(p)).collect();
    let answers: HashMap<String, Vec<u8>> = cases
        .iter()
        .map(|(p, b, _)| ((*p).to_owned(), b.clone()))
        .collect();
    let mut pair = Pair::new(&requests, 3, move |p| Answer::Fin(answers[p].clone()));
    let got = pair.run();
    for ((path, _, want), got) in cases.iter().zip(&got) {
        let end = got.end.clone().unwrap();
        match (&end, want) {
            (
                End::Failed(Failure::Broken { code: c, why }),
                End::Failed(Failure::Broken { why: w, .. }),
            ) => {
                assert_eq!(*c, code::MESSAGE_ERROR, "{path}");
                assert!(
                    why.contains(w) || w.contains(why),
                    "{path}: {why} is not {w}"
                );
            }
            _ => panic!("{path}: {end:?}"),
        }
    }
    assert!(pair.client_app.closed.is_none());
}

#[test]
fn connection_errors_close_the_connection_with_their_code() {
    let mut dynamic = Vec::new();
    // Required Insert Count 1: a dynamic reference, with a table of capacity 0.
    dynamic.extend([0x02, 0x00, 0x80]);
    let mut cut = headers(&[(":status", "200")]);
    cut.extend([kind::DATA as u8, 10, b'a']);
    let mut push = headers(&[(":status", "200")]);
    push.extend(frame(kind::PUSH_PROMISE, &[0, 0, 0]));
    let cases = [
        (frame(kind::DATA, b"x"), code::FRAME_UNEXPECTED),
        (
            frame(kind::HEADERS, &dynamic),
            code::QPACK_DECOMPRESSION_FAILED,
        ),
        (cut, code::FRAME_ERROR),
        (push, code::ID_ERROR),
        (frame(kind::SETTINGS, &[]), code::FRAME_UNEXPECTED),
    ];
    for (bytes, want) in cases {
        let mut pair = Pair::new(&[get("/x")], 3, move |_| Answer::Fin(bytes.clone()));
        let got = pair.run();
        let Some(End::Failed(Failure::Closed { code: c, .. })) = got[0].end else {
            panic!("{want:#x}: {:?}", got[0].end);
        };
        assert_eq!(c, want);
        assert_eq!(pair.client_app.closed.map(|(c, _)| c), Some(want));
    }
}

#[test]
fn a_server_control_stream_against_the_rules_closes_the_connection() {
    let mut settings_twice = opening(100);
    let mut rest = Vec::new();
    put_frame_header(kind::SETTINGS, 0, &mut rest);
    settings_twice.extend(rest);
    let mut max_push = opening(100);
    max_push.extend(frame(kind::MAX_PUSH_ID, &[0]));
    let mut no_settings = Vec::new();
    put_varint(0, &mut no_settings);
    no_settings.extend(goaway(0));
    let cases = [
        (settings_twice, code::FRAME_UNEXPECTED),
        (max_push, code::FRAME_UNEXPECTED),
        (no_settings, code::MISSING_SETTINGS),
    ];
    for (control, want) in cases {
        let mut pair = Pair::new(&[get("/x")], 3, |_| Answer::Silent);
        pair.server_app.control = control;
        pair.run();
        assert_eq!(pair.client_app.closed.map(|(c, _)| c), Some(want));
    }
}

#[test]
fn requests_are_held_to_the_rules_before_they_go() {
    let mut pair = Pair::new(&[get("/ok")], 3, |_| Answer::Fin(ok(b"")));
    pair.client_app.authority = "[::1]:4433".into();
    let got = pair.run();
    assert_eq!(got[0].end, Some(End::Done));
    assert_eq!(pair.server_app.seen.borrow()[0].authority, "[::1]:4433");
    let ch = pair.client_app.ch.unwrap();
    let session = &mut pair.client_app.session;
    let cases: [(&str, &str, &[Field<'_>]); 4] = [
        ("", "/", &[]),
        ("localhost", "no-slash", &[]),
        ("localhost", "/", &[(b"Upper", b"x")]),
        ("localhost", "/", &[(b"transfer-encoding", b"chunked")]),
    ];
    pair.client.update(ch, |conn| {
        for (authority, path, fields) in cases {
            let request = Request {
                method: "GET",
                scheme: "https",
                authority,
                path,
                fields,
            };
            let r = session.send_request(conn, &request, Body::Empty);
            assert!(
                matches!(r, Err(NotSent::Malformed(_))),
                "{authority} {path}: {r:?}"
            );
        }
    });
}

#[test]
fn an_upload_goes_as_one_data_frame_with_its_length() {
    let mut pair = Pair::new(&[("POST", "/up", Body::Pattern(100_000))], 3, |_| {
        Answer::Fin(ok(b"100000"))
    });
    let got = pair.run();
    assert_eq!(got[0].end, Some(End::Done));
    assert_eq!(pair.server_app.seen.borrow()[0].body, 100_000);
    assert_eq!(pair.client_app.session.body_sent(), 100_000);
}

/// A second connection sends its requests in 0-RTT; the server (a new one, which cannot take
/// the ticket) refuses them, quinn-proto drops their streams, and the session starts over
/// on the same connection: every request answered once, whole.
#[test]
fn requests_refused_in_0rtt_go_again_and_are_answered() {
    let requests: Vec<_> = ["/a", "/b", "/c"].into_iter().map(get).collect();
    let mut pair = Pair::new(&requests, 3, |p| Answer::Fin(ok(p.as_bytes())));
    let got = pair.run();
    assert!(got.iter().all(|g| g.end == Some(End::Done)), "{got:?}");
    assert_eq!(
        pair.client_app.zero_rtt,
        (0, 0),
        "the first connection has no ticket"
    );
    // The same server again: its ticket is taken, 0-RTT with it.
    pair.client_app.again(pair.client_config.clone());
    let got = pair.run();
    assert!(got.iter().all(|g| g.end == Some(End::Done)), "{got:?}");
    assert_eq!(pair.client_app.zero_rtt, (1, 0), "0-RTT taken");
    // A new server: the ticket is not taken, nor what was sent in 0-RTT.
    pair.restart_server();
    pair.client_app.again(pair.client_config.clone());
    let got = pair.run();
    assert_eq!(pair.client_app.zero_rtt, (2, 1), "0-RTT refused once");
    for (g, p) in got.iter().zip(["/a", "/b", "/c"]) {
        assert_eq!(g.end, Some(End::Done), "{p}");
        assert_eq!(g.body, p.as_bytes(), "{p}");
    }
    let seen = pair.server_app.seen.borrow();
    assert_eq!(
        seen.len(),
        3,
        "each request reached the new server once: {seen:?}"
    );
    assert_eq!(
        *pair.server_app.client_uni.borrow(),
        3,
        "one control stream per connection"
    );
}
