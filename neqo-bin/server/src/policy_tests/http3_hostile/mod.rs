//! Hostile HTTP/3 input: a client that writes raw frames on raw streams. Each case gets the
//! reaction RFC 9114 and RFC 9204 require (the connection closed with the named error, or the
//! stream refused, or the oddity ignored), and after each a fresh client is served: the
//! server keeps serving.

use std::{
    collections::HashMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use neqo_driver::{
    Application, Driver,
    testing::{Behaviour, Network},
};
use neqo_protocols::ALPN_H3;
use quinn_proto::{
    Connection, ConnectionError, ConnectionHandle, Dir, EndpointConfig, Event, StreamEvent,
    StreamId,
};

use super::{MIN_WINDOW, ONE_WAY, SERVER, ServerApp, ServerConfig, TURNS, client, prepare, worker};
use neqo_h3::testing::{self, Client, Got, pattern_body};

fn varint(v: u64, out: &mut Vec<u8>) {
    match v {
        0..=63 => out.push(v as u8),
        64..=16_383 => out.extend_from_slice(&(0x4000 | v as u16).to_be_bytes()),
        16_384..=1_073_741_823 => out.extend_from_slice(&(0x8000_0000 | v as u32).to_be_bytes()),
        _ => out.extend_from_slice(&(0xC000_0000_0000_0000 | v).to_be_bytes()),
    }
}

fn frame(kind: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(kind, &mut out);
    varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

const DATA: u64 = 0x0;
const HEADERS: u64 = 0x1;
const SETTINGS: u64 = 0x4;
const CONTROL: u64 = 0x0;
const QPACK_ENCODER: u64 = 0x2;
const QPACK_DECODER: u64 = 0x3;

/// A QPACK field section (static table only, RFC 9204 appendix A) for `GET path` at
/// `localhost`, with `extra` bytes of one more header's value when non-zero.
fn get(path: &str, extra: usize) -> Vec<u8> {
    // Required Insert Count 0, Base 0; :method GET (17), :scheme https (23) indexed; :path
    // (1) and :authority (0) literal with a static name reference.
    let mut s = vec![0x00, 0x00, 0xD1, 0xD7, 0x51];
    varint_prefixed(path.as_bytes(), 7, &mut s);
    s.push(0x50);
    varint_prefixed(b"localhost", 7, &mut s);
    if extra > 0 {
        // user-agent (95) is above the 4-bit prefix: 0x5F then 95 - 15 = 80.
        s.extend_from_slice(&[0x5F, 80]);
        varint_prefixed(&vec![b'a'; extra], 7, &mut s);
    }
    s
}

/// A QPACK string: its length with an N-bit prefix (no Huffman), then the bytes.
fn varint_prefixed(bytes: &[u8], bits: u32, out: &mut Vec<u8>) {
    let max = (1u64 << bits) - 1;
    let mut n = bytes.len() as u64;
    if n < max {
        out.push(n as u8);
    } else {
        out.push(max as u8);
        n -= max;
        while n >= 128 {
            out.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        out.push(n as u8);
    }
    out.extend_from_slice(bytes);
}

/// A control stream's opening: its type and an empty SETTINGS frame.
fn control() -> Vec<u8> {
    let mut c = Vec::new();
    varint(CONTROL, &mut c);
    c.extend(frame(SETTINGS, &[]));
    c
}

/// Opens a stream in `dir` and writes `bytes`, finishing it when `fin`.
fn write(conn: &mut Connection, dir: Dir, bytes: &[u8], fin: bool) -> StreamId {
    let id = conn.streams().open(dir).expect("a stream");
    let n = conn.send_stream(id).write(bytes).unwrap();
    assert_eq!(n, bytes.len());
    if fin {
        conn.send_stream(id).finish().unwrap();
    }
    id
}

type Script = fn(&mut Connection) -> Vec<StreamId>;

/// A client that runs `script` once connected and then reads whatever comes.
struct Raw {
    config: Option<quinn_proto::ClientConfig>,
    script: Script,
    /// The request streams the script opened.
    requests: Vec<StreamId>,
    received: HashMap<StreamId, Vec<u8>>,
    finished: Vec<StreamId>,
    reset: HashMap<StreamId, u64>,
    lost: Option<ConnectionError>,
}

impl Application for Raw {
    fn event(&mut self, _: ConnectionHandle, conn: &mut Connection, ev: Event, _: Instant) {
        match ev {
            Event::Connected => self.requests = (self.script)(conn),
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = conn.streams().accept(dir) {
                    self.read(conn, id);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => self.read(conn, id),
            Event::ConnectionLost { reason } => self.lost = Some(reason),
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

impl Raw {
    fn read(&mut self, conn: &mut Connection, id: StreamId) {
        let mut rs = conn.recv_stream(id);
        let Ok(mut chunks) = rs.read(true) else {
            return;
        };
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(c)) => self.received.entry(id).or_default().extend(&c.bytes[..]),
                Ok(None) => {
                    self.finished.push(id);
                    break;
                }
                Err(quinn_proto::ReadError::Reset(code)) => {
                    self.reset.insert(id, code.into_inner());
                    break;
                }
                Err(quinn_proto::ReadError::Blocked) => break,
            }
        }
        let _ = chunks.finalize();
    }

    /// Whether request `i`'s response is a HEADERS frame, then DATA frames carrying `body`
    /// (frames of reserved types, which servers send to exercise their peers, aside), and
    /// its end.
    fn answered(&self, i: usize, body: &[u8]) -> bool {
        let id = self.requests[i];
        let Some(frames) = self.received.get(&id).and_then(|r| frames(r)) else {
            return false;
        };
        let data: Vec<u8> = frames
            .iter()
            .filter(|(t, _)| *t == DATA)
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        self.finished.contains(&id)
            && frames.first().is_some_and(|f| f.0 == HEADERS)
            && data == body
    }
}

/// A QUIC varint at the start of `b`, and its length.
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let len = 1 << (b.first()? >> 6);
    let mut v = u64::from(b.first()? & 0x3F);
    for x in b.get(1..len)? {
        v = (v << 8) | u64::from(*x);
    }
    Some((v, len))
}

/// The frames of a stream's bytes, whole ones only; `None` when they do not parse.
fn frames(mut b: &[u8]) -> Option<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (kind, n) = read_varint(b)?;
        let (len, m) = read_varint(&b[n..])?;
        let start = n + m;
        let end = start + usize::try_from(len).ok()?;
        out.push((kind, b.get(start..end)?.to_vec()));
        b = &b[end..];
    }
    Some(out)
}

/// A server offering h3 on the virtual network.
struct Bench {
    net: Network,
    server: Driver,
    app: ServerApp,
    port: u16,
    /// h3 is answered by a service.
    service: bool,
}

impl Bench {
    fn new() -> Self {
        Self::with(ServerConfig::default())
    }

    /// With `config`, h3 answered by the `Files` service on the library's service path.
    fn service_with(mut config: ServerConfig) -> Self {
        config
            .apps
            .insert(ALPN_H3, crate::App::http3(crate::Files::generated()));
        Self {
            service: true,
            ..Self::with(config)
        }
    }

    /// With `config`, listening at `SERVER` for h3.
    fn with(config: ServerConfig) -> Self {
        let start = Instant::now();
        let net = Network::new(9, start).with_one_way(ONE_WAY);
        let config = ServerConfig {
            listen: vec![SERVER],
            alpns: vec![ALPN_H3.into()],
            ..config
        };
        let (shared, _) = prepare(config).unwrap();
        let (server, app) = worker::parts(
            0,
            vec![net.path(SERVER, Behaviour::default())],
            &shared,
            start,
        );
        Self {
            net,
            server,
            app,
            port: 6000,
            service: false,
        }
    }

    /// The most a connection may hold for frames not yet whole in a case: `built_in` for the
    /// built-in HTTP/3, which decodes as bytes arrive, `service` for a service's, where `h3`
    /// takes each frame other than DATA whole (a request's HEADERS, some 200 B here) and a
    /// body waits for the service to read it.
    const fn held_at_most(&self, built_in: usize, service: usize) -> usize {
        if self.service { service } else { built_in }
    }

    /// Runs `app` from a new client address until `done` or `limit` of virtual time; then
    /// the address is gone (what the server still sends it is lost).
    fn run<A: Application>(&mut self, app: &mut A, limit: Duration, done: impl Fn(&A) -> bool) {
        self.port += 1;
        let from: SocketAddr = client(3, self.port);
        self.turns(from, app, limit, done);
        self.net.set_unreachable(from, true);
    }

    fn turns<A: Application>(
        &mut self,
        from: SocketAddr,
        app: &mut A,
        limit: Duration,
        done: impl Fn(&A) -> bool,
    ) {
        let mut driver = Driver::with_datapaths(
            vec![self.net.path(from, Behaviour::default())],
            EndpointConfig::default(),
            None,
            neqo_driver::DriverConfig::default(),
        );
        let start = self.net.now();
        for _ in 0..TURNS {
            let s = self.net.turn(&mut self.server, &mut self.app).unwrap();
            let c = self.net.turn(&mut driver, app).unwrap();
            if done(app) || c.done || self.net.now() - start > limit {
                return;
            }
            let queued = self.server.queued_datagrams() + driver.queued_datagrams() > 0;
            let end = Some(start + limit + Duration::from_millis(1));
            if !self.net.advance(&[s.deadline, c.deadline, end], queued) {
                return;
            }
        }
        panic!("no end after {TURNS} turns");
    }

    /// What `script` gets within two seconds, or once its connection is lost.
    fn raw(&mut self, script: Script) -> Raw {
        self.raw_with(testing::config(), script)
    }

    /// The same with the client's `config`.
    fn raw_with(&mut self, config: quinn_proto::ClientConfig, script: Script) -> Raw {
        let mut raw = Raw {
            config: Some(config),
            script,
            requests: Vec::new(),
            received: HashMap::new(),
            finished: Vec::new(),
            reset: HashMap::new(),
            lost: None,
        };
        self.run(&mut raw, Duration::from_secs(2), |r| r.lost.is_some());
        raw
    }

    /// A fresh client gets `/100000` whole: the server still serves.
    fn still_serving(&mut self) {
        let mut c = Client::new(SERVER, testing::config(), &[("GET", "/100000")]);
        self.run(&mut c, Duration::from_secs(30), |_| false);
        let got: Vec<_> = c.answers().into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![Got::ok(
                "GET",
                "/100000",
                pattern_body(100_000),
                Some("application/octet-stream")
            )]
        );
    }
}

/// A QPACK encoder stream (RFC 9204 section 4.2) carrying `junk` after its type.
fn encoder_stream(junk: &[u8]) -> Vec<u8> {
    let mut s = Vec::new();
    varint(QPACK_ENCODER, &mut s);
    s.extend_from_slice(junk);
    s
}

/// Request `i`'s stream reset by the server with `code`, and the connection still open.
fn reset_with(raw: &Raw, i: usize, code: u64) {
    assert_eq!(raw.lost, None, "not a connection error");
    assert_eq!(
        raw.reset.get(&raw.requests[i]),
        Some(&code),
        "{:?}",
        raw.reset
    );
}

/// Closed by the server with HTTP/3 (or QPACK) error `code`.
fn closed_with(raw: &Raw, code: u64) {
    match &raw.lost {
        Some(ConnectionError::ApplicationClosed(c)) => {
            assert_eq!(c.error_code.into_inner(), code, "{c:?}");
        }
        other => panic!("expected a close with {code:#x}, got {other:?}"),
    }
}

mod frames;
mod holds;
mod limits;
mod qpack;

mod via_service;
