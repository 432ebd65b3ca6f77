//! Hostile HTTP/3 input: a client that writes raw frames on raw streams. Each case gets the
//! reaction RFC 9114 and RFC 9204 require (the connection closed with the named error, or the
//! stream refused, or the oddity ignored), and after each a fresh client is served: the
//! server keeps serving.

use std::{
    collections::HashMap,
    net::SocketAddr,
    time::{Duration, Instant},
};

use quinn_proto::{
    Connection, ConnectionError, ConnectionHandle, Dir, EndpointConfig, Event, StreamEvent,
    StreamId,
};

use super::{MIN_WINDOW, ONE_WAY, SERVER, ServerApp, ServerConfig, TURNS, client, prepare, worker};
use crate::{
    driver::{
        Application, Driver,
        testing::{Behaviour, Network},
    },
    h3::{
        test_client::{self, Client, Got},
        tests::pattern_body,
    },
    tls::ALPN_H3,
};

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
}

impl Bench {
    fn new() -> Self {
        Self::with(ServerConfig::default())
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
        }
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
            true,
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
        self.raw_with(test_client::config(), script)
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
        let mut c = Client::new(SERVER, test_client::config(), &[("GET", "/100000")]);
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

/// Closed by the server with HTTP/3 (or QPACK) error `code`.
fn closed_with(raw: &Raw, code: u64) {
    match &raw.lost {
        Some(ConnectionError::ApplicationClosed(c)) => {
            assert_eq!(c.error_code.into_inner(), code, "{c:?}");
        }
        other => panic!("expected a close with {code:#x}, got {other:?}"),
    }
}

#[test]
fn a_raw_request_is_answered_and_unknown_frames_are_ignored() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // A reserved frame type (0x1f * 1 + 0x21) before the HEADERS: ignored (RFC 9114
        // section 9).
        let mut req = frame(0x40, b"grease");
        req.extend(frame(HEADERS, &get("/5", 0)));
        vec![write(conn, Dir::Bi, &req, true)]
    });
    assert_eq!(raw.lost, None);
    assert!(raw.answered(0, &pattern_body(5)), "{:?}", raw.received);
    b.still_serving();
}

#[test]
fn a_first_control_frame_other_than_settings_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        let mut c = Vec::new();
        varint(CONTROL, &mut c);
        c.extend(frame(DATA, b"x"));
        write(conn, Dir::Uni, &c, false);
        Vec::new()
    });
    // H3_MISSING_SETTINGS (RFC 9114 section 6.2.1).
    closed_with(&raw, 0x10a);
    b.still_serving();
}

#[test]
fn a_second_control_stream_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        write(conn, Dir::Uni, &control(), false);
        Vec::new()
    });
    // H3_STREAM_CREATION_ERROR (section 6.2.1).
    closed_with(&raw, 0x103);
    b.still_serving();
}

#[test]
fn data_before_headers_on_a_request_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        vec![write(conn, Dir::Bi, &frame(DATA, b"early"), true)]
    });
    // H3_FRAME_UNEXPECTED (section 4.1).
    closed_with(&raw, 0x105);
    b.still_serving();
}

#[test]
fn a_field_section_qpack_cannot_decode_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // An indexed line naming static entry 99 (the table has 99: 0 to 98).
        let section = [0x00, 0x00, 0xFF, 0x24];
        vec![write(conn, Dir::Bi, &frame(HEADERS, &section), true)]
    });
    // QPACK_DECOMPRESSION_FAILED (RFC 9204 section 6).
    closed_with(&raw, 0x200);
    b.still_serving();
}

#[test]
fn an_oversized_header_section_is_refused_and_the_connection_goes_on() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let big = frame(HEADERS, &get("/5", 20_000));
        let small = frame(HEADERS, &get("/7", 0));
        vec![
            write(conn, Dir::Bi, &big, true),
            write(conn, Dir::Bi, &small, true),
        ]
    });
    assert_eq!(raw.lost, None, "not a connection error");
    // Answered with a status that is no 200 and no body: a HEADERS frame alone, whose field
    // section's one line is a literal with :status's static name (24), as 431 is written
    // (200 would be static entry 25, indexed).
    let big = raw.requests[0];
    let got = raw.received.get(&big).cloned().unwrap_or_default();
    assert!(raw.finished.contains(&big), "{got:?}");
    assert_eq!(got[0], HEADERS as u8);
    assert_eq!(
        usize::from(got[1]) + 2,
        got.len(),
        "one frame, no DATA: {got:?}"
    );
    assert_eq!(
        &got[2..6],
        &[0, 0, 0x5F, 0x09],
        "a :status literal: {got:?}"
    );
    assert_eq!(b.app.report.http3.cancelled, 1, "{:?}", b.app.report.http3);
    assert!(raw.answered(1, &pattern_body(7)), "{:?}", raw.received);
    b.still_serving();
}

#[test]
fn a_request_that_never_finishes_its_headers_holds_back_only_itself() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // A HEADERS frame that says 100 bytes and brings 10, and a stream left open.
        let mut slow = Vec::new();
        varint(HEADERS, &mut slow);
        varint(100, &mut slow);
        slow.extend_from_slice(&get("/5", 0)[..10]);
        vec![
            write(conn, Dir::Bi, &slow, false),
            write(conn, Dir::Bi, &frame(HEADERS, &get("/9", 0)), true),
        ]
    });
    assert_eq!(raw.lost, None);
    assert!(!raw.finished.contains(&raw.requests[0]));
    assert!(raw.answered(1, &pattern_body(9)), "{:?}", raw.received);
    b.still_serving();
}

#[test]
fn a_second_qpack_encoder_stream_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        write(conn, Dir::Uni, &encoder_stream(&[]), false);
        write(conn, Dir::Uni, &encoder_stream(&[]), false);
        Vec::new()
    });
    // H3_STREAM_CREATION_ERROR (RFC 9204 section 4.2).
    closed_with(&raw, 0x103);
    b.still_serving();
}

/// `h3` 0.0.8 never reads the QPACK encoder stream; the mailbox's guard does. With no
/// dynamic table (capacity 0), an insertion is an error (RFC 9204 section 4.3); 200 KB of
/// the one instruction allowed, a capacity of 0, costs nothing held and the request on the
/// same connection is answered.
#[test]
fn an_encoder_instruction_for_a_table_of_capacity_zero_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // Insert with literal name "a", value "b".
        write(
            conn,
            Dir::Uni,
            &encoder_stream(&[0x41, b'a', 0x01, b'b']),
            false,
        );
        Vec::new()
    });
    // QPACK_ENCODER_STREAM_ERROR.
    closed_with(&raw, 0x201);
    b.still_serving();
}

#[test]
fn setting_the_capacity_to_zero_is_taken_and_costs_nothing_held() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        write(conn, Dir::Uni, &encoder_stream(&[0x20; 50_000]), false);
        vec![write(conn, Dir::Bi, &frame(HEADERS, &get("/5", 0)), true)]
    });
    assert_eq!(raw.lost, None);
    assert!(raw.answered(0, &pattern_body(5)), "{:?}", raw.received);
    // The request and the streams' types, not the 50 KB of instructions.
    let held = b.app.h3_peak_held();
    assert!((1..1000).contains(&held), "held {held} B");
    b.still_serving();
}

/// A decoder's acknowledgment of a section with no dynamic reference, which `h3` never
/// sends, is an error (RFC 9204 section 4.4.1).
#[test]
fn a_section_acknowledgment_nothing_asked_for_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut decoder = Vec::new();
        varint(QPACK_DECODER, &mut decoder);
        // Stream cancellations (allowed), then a section acknowledgment for stream 0.
        decoder.extend_from_slice(&[0x40, 0x44, 0x80]);
        write(conn, Dir::Uni, &decoder, false);
        Vec::new()
    });
    // QPACK_DECODER_STREAM_ERROR.
    closed_with(&raw, 0x202);
    b.still_serving();
}

/// A HEADERS frame that announces a gigabyte: `h3` would read it whole before looking. The
/// guard refuses it at its length: that request's stream ends with H3_EXCESSIVE_LOAD (both
/// ways), the one beside it is answered, and the connection goes on.
#[test]
fn a_frame_over_the_size_limit_ends_its_stream_at_once() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut huge = Vec::new();
        varint(HEADERS, &mut huge);
        varint(1 << 30, &mut huge);
        huge.extend_from_slice(&[0x41; 20_000]);
        vec![
            write(conn, Dir::Bi, &huge, false),
            write(conn, Dir::Bi, &frame(HEADERS, &get("/9", 0)), true),
        ]
    });
    assert_eq!(raw.lost, None, "not a connection error");
    assert_eq!(
        raw.reset.get(&raw.requests[0]),
        Some(&0x107),
        "{:?}",
        raw.reset
    );
    assert!(raw.answered(1, &pattern_body(9)), "{:?}", raw.received);
    assert!(b.app.h3_peak_held() < 1000, "{}", b.app.h3_peak_held());
    b.still_serving();
}

/// The same on the control stream, which `h3` reads for the connection's life: a reserved
/// frame type announcing a megabyte closes the connection with H3_EXCESSIVE_LOAD.
#[test]
fn a_control_frame_over_the_size_limit_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        let mut c = control();
        varint(0x21, &mut c);
        varint(1 << 20, &mut c);
        c.extend_from_slice(&[0; 10_000]);
        write(conn, Dir::Uni, &c, false);
        Vec::new()
    });
    closed_with(&raw, 0x107);
    b.still_serving();
}

/// Request bodies, which the server does not read: the mailbox reads them ahead of `h3`
/// (up to `RECV_HELD` each) while the responses go out (slowly: the client's stream window
/// is 8 KiB), but with the smallest window it holds at most half of it for the connection
/// (the other half is quinn-proto's), and the requests are still answered.
#[test]
fn what_a_connection_holds_for_h3_stays_within_half_its_window() {
    let mut b = Bench::with(super::minimal_budget());
    let raw = b.raw_with(test_client::config_with_stream_window(8 * 1024), |conn| {
        write(conn, Dir::Uni, &control(), false);
        (0..4)
            .map(|i| {
                let mut request = frame(HEADERS, &get(&format!("/{}", 200_000 + i), 0));
                request.extend(frame(DATA, &[0x55; 12_000]));
                write(conn, Dir::Bi, &request, true)
            })
            .collect()
    });
    assert_eq!(raw.lost, None);
    for i in 0..4 {
        assert!(raw.answered(i, &pattern_body(200_000 + i as u64)), "{i}");
    }
    let held = b.app.h3_peak_held();
    let limit = usize::try_from(MIN_WINDOW / 2).unwrap();
    // Without the limit all four bodies (48 KB) are read at once.
    assert!(
        (20_000..=limit).contains(&held),
        "held {held} B, limit {limit}"
    );
    b.still_serving();
}
