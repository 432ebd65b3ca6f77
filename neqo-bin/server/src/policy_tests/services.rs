//! Applications of your own behind the server, on a worker as the server builds it: an HTTP/3
//! service answering JSON, echoing uploads and failing on purpose, every body byte-exact;
//! requests cancelled, and what they held freed; GOAWAY at shutdown; a raw-QUIC protocol on
//! an ALPN of its own; and the ALPNs refused at start.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::Waker,
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use neqo_driver::{
    Application, Driver,
    tls::{self, Trust},
};
use neqo_h3::testing::{self, Cancel, Client, Got, pattern_body};
use neqo_protocols::pattern;
use quinn_proto::{Connection, ConnectionError, ConnectionHandle, Dir, Event, StreamEvent, VarInt};

use super::{
    SERVER, TURNS,
    http3::{exchange, exchange_with},
    prepare,
};
use crate::{
    App, BoxError, QuicApp, QuicSession, RequestBody, ResponseBody, ServerConfig, ServerError,
    service_fn,
};

/// `n` pattern bytes, produced 16 KiB at a time as the stream takes them.
struct PatternBody {
    at: u64,
    n: u64,
    /// Told how far it got.
    produced: Option<Arc<AtomicU64>>,
}

impl http_body::Body for PatternBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        if self.at == self.n {
            return std::task::Poll::Ready(None);
        }
        let chunk = pattern::chunk(self.at, (self.n - self.at).min(16 << 10));
        self.at += chunk.len() as u64;
        if let Some(p) = &self.produced {
            p.store(self.at, Ordering::Relaxed);
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }
}

fn streamed_pattern(n: u64) -> ResponseBody {
    ResponseBody::new(PatternBody {
        at: 0,
        n,
        produced: None,
    })
}

/// The test service: `GET /hello` JSON, `POST /echo` the request body streamed back,
/// `GET /N` N streamed pattern bytes, `GET /fail` an error (500), anything else 404.
async fn routes(req: Request<RequestBody>) -> Result<Response<ResponseBody>, BoxError> {
    let path = req.uri().path().to_owned();
    Ok(match (req.method().clone(), path.as_str()) {
        (Method::GET | Method::HEAD, "/hello") => Response::builder()
            .header("content-type", "application/json")
            .body(ResponseBody::from(r#"{"hello":"world"}"#))?,
        (Method::POST, "/echo") => Response::builder()
            .header("content-type", "application/octet-stream")
            .body(ResponseBody::from(req.into_body()))?,
        (Method::GET, "/fail") => return Err("failed on purpose".into()),
        (Method::GET, n) if n[1..].parse::<u64>().is_ok() => Response::builder()
            .header("content-type", "application/octet-stream")
            .body(streamed_pattern(n[1..].parse()?))?,
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(ResponseBody::empty())?,
    })
}

fn service_config() -> ServerConfig {
    let mut config = ServerConfig::http3(service_fn(routes));
    config.listen = vec![SERVER];
    config
}

#[test]
fn a_service_answers_json_echoes_uploads_and_fails_with_500() {
    let c = Client::new(
        SERVER,
        testing::config(),
        &[
            ("GET", "/hello"),
            ("HEAD", "/hello"),
            ("POST", "/echo"),
            ("GET", "/300000"),
            ("GET", "/fail"),
            ("GET", "/missing"),
        ],
    )
    .posting(250_000);
    let (report, c) = exchange(service_config(), c);
    let answers: Vec<Got> = c.answers().into_iter().map(|g| g.unwrap()).collect();
    let hello = br#"{"hello":"world"}"#.to_vec();
    let mut json = Got::ok("GET", "/hello", hello.clone(), Some("application/json"));
    json.content_length = Some(hello.len().to_string());
    let mut head = Got::ok("HEAD", "/hello", Vec::new(), Some("application/json"));
    head.content_length = None;
    let mut want = vec![
        json,
        head,
        Got::ok(
            "POST",
            "/echo",
            pattern_body(250_000),
            Some("application/octet-stream"),
        ),
        Got::ok(
            "GET",
            "/300000",
            pattern_body(300_000),
            Some("application/octet-stream"),
        ),
        Got::status("GET", "/fail", 500),
        Got::status("GET", "/missing", 404),
    ];
    // Bodies of a known length say so; streamed ones (the echo, the pattern) do not.
    for g in &mut want {
        g.content_length = match g.path.as_str() {
            "/hello" if g.method == "GET" => Some(hello.len().to_string()),
            "/fail" | "/missing" => Some("0".to_owned()),
            _ => None,
        };
    }
    want.sort_by_key(|g| (g.path.clone(), g.method.clone()));
    assert_eq!(answers.len(), want.len());
    for (a, w) in answers.iter().zip(&want) {
        assert_eq!(
            (
                &a.method,
                &a.path,
                a.status,
                &a.content_length,
                &a.content_type
            ),
            (
                &w.method,
                &w.path,
                w.status,
                &w.content_length,
                &w.content_type
            )
        );
        assert!(
            a.body == w.body,
            "{} {}: {} bytes",
            a.method,
            a.path,
            a.body.len()
        );
    }
    let h = report.http3;
    assert_eq!(
        (h.responses, h.error_statuses, h.cancelled, h.uploaded_bytes),
        (4, 2, 0, 250_000),
        "{h:?}"
    );
    assert_eq!(
        h.body_bytes,
        hello.len() as u64 + 250_000 + 300_000,
        "{h:?}"
    );
    assert_eq!(report.requests, 4);
    assert_eq!(report.refused_requests, 2);
}

/// 300 requests one after another on one connection, then 200 cancelled by the client once
/// their headers arrive: every request's task and stream is freed, so that after them the
/// connection keeps only its accepting task.
#[test]
fn service_requests_free_what_they_held_answered_or_cancelled() {
    let requests = vec![("GET", "/hello"); 300];
    let c = Client::new(SERVER, testing::config(), &requests)
        .sequential()
        .holding_open();
    let mut kept = None;
    let (report, c) = exchange_with(service_config(), c, |_, app, _| {
        if app.report.http3.responses == 300 {
            kept.get_or_insert(app.services_kept());
        }
    });
    assert!(
        c.answers()
            .iter()
            .all(|g| g.as_ref().is_ok_and(|g| g.status == 200))
    );
    assert_eq!(report.http3.responses, 300);
    assert_eq!(kept, Some((0, 1)), "requests under way, tasks");

    const CANCELLED: usize = 200;
    let mut requests = vec![("GET", "/1000000"); CANCELLED];
    requests.push(("GET", "/1000"));
    let c = Client::new(
        SERVER,
        testing::config_with_stream_window(64 << 10),
        &requests,
    )
    .cancelling(Cancel::StopSending, CANCELLED)
    .holding_open();
    let mut kept = None;
    let (report, c) = exchange_with(service_config(), c, |_, app, _| {
        let h = app.report.http3;
        if h.cancelled == CANCELLED as u64 && h.responses == 1 {
            kept.get_or_insert(app.services_kept());
        }
    });
    let answers = c.answers();
    assert_eq!(answers.len(), CANCELLED + 1);
    let whole: Vec<_> = answers
        .iter()
        .filter_map(|g| g.as_ref().ok().filter(|g| g.path == "/1000"))
        .collect();
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0].body, pattern_body(1000));
    let h = report.http3;
    assert_eq!((h.responses, h.cancelled), (1, CANCELLED as u64), "{h:?}");
    assert_eq!(kept, Some((0, 1)), "requests under way, tasks");
}

/// RFC 9114 section 5.2 for a service: at shutdown the connection sends GOAWAY; the response
/// under way (3 MB, streamed by the service) arrives whole, a request sent later is refused
/// unprocessed (`H3_REQUEST_REJECTED`), and the server closes with `H3_NO_ERROR` once the
/// response is acknowledged.
#[test]
fn a_shutdown_lets_a_service_response_finish_and_rejects_later_requests() {
    let produced = Arc::new(AtomicU64::new(0));
    let p = Arc::clone(&produced);
    let service = service_fn(move |_| {
        let produced = Some(Arc::clone(&p));
        async move {
            Response::new(ResponseBody::new(PatternBody {
                at: 0,
                n: 3_000_000,
                produced,
            }))
        }
    });
    let mut config = ServerConfig::http3(service);
    config.listen = vec![SERVER];
    config.driver = neqo_driver::DriverConfig::default().with_drain(Duration::from_secs(2));
    let c = Client::new(SERVER, testing::config(), &[("GET", "/3000000")]).staying_open();
    let mut shut = false;
    let (report, c) = exchange_with(config, c, |server, app, now| {
        // A third of the body handed to the stream: the rest is still to come.
        if !shut && produced.load(Ordering::Relaxed) >= 1_000_000 {
            shut = true;
            server.shut_down(app, now).unwrap();
        }
    });
    assert!(shut, "the response started");
    let got = c.got.borrow().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0].as_ref().map(|g| g.body.len()),
        Ok(3_000_000),
        "the response under way"
    );
    assert_eq!(got[0].as_ref().unwrap().body, pattern_body(3_000_000));
    assert_eq!(got[1], Err("Remote reset: H3_REQUEST_REJECTED".to_owned()));
    match &c.lost {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code, VarInt::from_u32(0x100), "H3_NO_ERROR");
        }
        other => panic!("closed by the server with H3_NO_ERROR, not {other:?}"),
    }
    let h = report.http3;
    assert_eq!((h.responses, h.cancelled, h.rejected), (1, 0, 1), "{h:?}");
}

/// A raw-QUIC protocol of its own: each bidirectional stream is answered with its bytes
/// reversed, once the client finishes it; at shutdown the session closes with its own code.
struct Reverse;

const REVERSE: &str = "reverse/1";
const REVERSE_BYE: u32 = 0x77;

impl QuicApp for Reverse {
    fn session(&self, _: SocketAddr, _: Waker) -> Box<dyn QuicSession> {
        Box::new(ReverseSession::default())
    }
}

#[derive(Default)]
struct ReverseSession {
    got: HashMap<quinn_proto::StreamId, Vec<u8>>,
}

impl QuicSession for ReverseSession {
    fn event(&mut self, conn: &mut Connection, event: &Event, _: Instant) {
        match event {
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    self.got.insert(id, Vec::new());
                    self.read(conn, id);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => self.read(conn, *id),
            _ => {}
        }
    }

    fn close_reason(&self) -> (VarInt, &'static [u8]) {
        (VarInt::from_u32(REVERSE_BYE), b"bye")
    }
}

impl ReverseSession {
    /// Reads what `id` has; once the client finished it, answers it reversed.
    fn read(&mut self, conn: &mut Connection, id: quinn_proto::StreamId) {
        let Some(buf) = self.got.get_mut(&id) else {
            return;
        };
        let mut rs = conn.recv_stream(id);
        let Ok(mut chunks) = rs.read(true) else {
            return;
        };
        let mut fin = false;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(c)) => buf.extend_from_slice(&c.bytes),
                Ok(None) => {
                    fin = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let _ = chunks.finalize();
        if fin {
            let mut out = self.got.remove(&id).unwrap_or_default();
            out.reverse();
            // Small enough for the stream's window in one write.
            let mut s = conn.send_stream(id);
            assert_eq!(s.write(&out).unwrap(), out.len());
            s.finish().unwrap();
        }
    }
}

/// The client: sends `streams` streams of distinct bytes, checks each answer, then stays
/// open for the server's shutdown.
struct ReverseClient {
    config: Option<quinn_proto::ClientConfig>,
    sent: HashMap<quinn_proto::StreamId, Vec<u8>>,
    got: HashMap<quinn_proto::StreamId, Vec<u8>>,
    right: usize,
    lost: Option<ConnectionError>,
    /// Close once every stream is answered.
    close: bool,
}

impl Application for ReverseClient {
    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take() {
            driver.connect(0, config, SERVER, "localhost", now).unwrap();
        }
        None
    }

    fn event(&mut self, _: ConnectionHandle, conn: &mut Connection, ev: Event, now: Instant) {
        match ev {
            Event::Connected => {
                for k in 0..5u8 {
                    let id = conn.streams().open(Dir::Bi).unwrap();
                    let body: Vec<u8> = (0..1000u32).map(|i| (i as u8) ^ k).collect();
                    let mut s = conn.send_stream(id);
                    assert_eq!(s.write(&body).unwrap(), body.len());
                    s.finish().unwrap();
                    self.sent.insert(id, body);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                let mut rs = conn.recv_stream(id);
                let Ok(mut chunks) = rs.read(true) else {
                    return;
                };
                let buf = self.got.entry(id).or_default();
                let fin = loop {
                    match chunks.next(usize::MAX) {
                        Ok(Some(c)) => buf.extend_from_slice(&c.bytes),
                        Ok(None) => break true,
                        Err(_) => break false,
                    }
                };
                let _ = chunks.finalize();
                if fin {
                    let mut want = self.sent[&id].clone();
                    want.reverse();
                    assert_eq!(self.got[&id], want, "stream {id}");
                    self.right += 1;
                    if self.close && self.right == self.sent.len() {
                        conn.close(now, VarInt::from_u32(0), Bytes::from_static(b"done"));
                    }
                }
            }
            Event::ConnectionLost { reason } => self.lost = Some(reason),
            _ => {}
        }
    }

    fn done(&self) -> bool {
        self.lost.is_some()
    }
}

/// Runs a [`ReverseClient`] against a worker serving [`Reverse`]; once every stream is
/// answered, the client closes (`client_closes`) or the server shuts down. Returns the client
/// and the worker's sessions left once its connection is gone (bounded in turns).
fn reverse_run(client_closes: bool) -> (ReverseClient, usize) {
    let mut config = ServerConfig::quic(REVERSE, Reverse);
    config.listen = vec![SERVER];
    let (net, mut server, mut app, mut client_driver) = super::worker_and_client(config);
    let crypto = tls::client_crypto(&Trust::Insecure, REVERSE).unwrap();
    let mut c = ReverseClient {
        config: Some(quinn_proto::ClientConfig::new(crypto)),
        sent: HashMap::new(),
        got: HashMap::new(),
        right: 0,
        lost: None,
        close: client_closes,
    };
    let mut shut = false;
    for _ in 0..TURNS {
        let s = net.turn(&mut server, &mut app).unwrap();
        let t = net.turn(&mut client_driver, &mut c).unwrap();
        if c.right == 5 && !shut && !client_closes {
            assert_eq!(app.sessions(), 1);
            shut = true;
            server.shut_down(&mut app, net.now()).unwrap();
        }
        if t.done || (client_closes && c.right == 5 && server.open_connections() == 0) {
            break;
        }
        let queued = server.queued_datagrams() + client_driver.queued_datagrams() > 0;
        assert!(net.advance(&[s.deadline, t.deadline], queued), "stalled");
    }
    (c, app.sessions())
}

#[test]
fn a_raw_quic_application_serves_its_own_alpn_and_closes_with_its_own_code() {
    let (c, _) = reverse_run(false);
    assert_eq!(c.right, 5, "every stream answered, reversed");
    match &c.lost {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code, VarInt::from_u32(REVERSE_BYE));
            assert_eq!(&close.reason[..], b"bye");
        }
        other => panic!("closed with the session's code, not {other:?}"),
    }
}

#[test]
fn a_raw_quic_session_is_dropped_with_its_connection() {
    let (c, sessions) = reverse_run(true);
    assert_eq!(c.right, 5, "every stream answered, reversed");
    assert_eq!(sessions, 0);
}

/// An ALPN that neither an application of yours nor the built-in server serves is refused at
/// start; one an application serves is offered, and HTTP/3 on any ALPN lets the client open
/// its control and QPACK streams.
#[test]
fn alpns_are_checked_at_start_and_http3_gets_its_streams() {
    let mut config = service_config();
    config.alpns.push("mine/1".into());
    assert!(matches!(prepare(config), Err(ServerError::UnknownAlpn(a)) if a == "mine/1"));

    let service = service_fn(|_| async { Response::new(ResponseBody::from(Bytes::new())) });
    let config = ServerConfig::quic(REVERSE, Reverse).serve("h3-mine", App::http3(service));
    assert_eq!(config.alpns, [REVERSE, "h3-mine"]);
    let (shared, _) = prepare(config).unwrap();
    assert_eq!(shared.config.transport.uni_streams, neqo_h3::UNI_STREAMS);

    let (shared, _) = prepare(ServerConfig::quic(REVERSE, Reverse)).unwrap();
    assert_eq!(
        shared.config.transport.uni_streams, 0,
        "no HTTP/3, no streams for it"
    );

    let mut config = ServerConfig::quic(REVERSE, Reverse);
    config.alpns.clear();
    let (shared, _) = prepare(config).unwrap();
    assert_eq!(
        shared.config.alpns,
        [REVERSE],
        "an application's ALPN is offered"
    );
    assert!(!ServerConfig::http3(service_fn(routes)).generate);
}
