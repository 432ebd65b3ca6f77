//! Raw-QUIC applications behind the server, on a worker as the server builds it: a protocol
//! of its own on its ALPN, its session's close code at shutdown and its session freed with
//! its connection; and the ALPNs checked at start.

use std::{collections::HashMap, net::SocketAddr, task::Waker, time::Instant};

use bytes::Bytes;
use http::Response;
use neqo_driver::{
    Application, Driver,
    tls::{self, Trust},
};
use quinn_proto::{Connection, ConnectionError, ConnectionHandle, Dir, Event, StreamEvent, VarInt};

use super::{SERVER, TURNS, prepare};
use crate::{App, QuicApp, QuicSession, ResponseBody, ServerConfig, ServerError, service_fn};

/// A raw-QUIC protocol of its own: each bidirectional stream is answered with its bytes
/// reversed, once the client finishes it, from the session's `poll` after its waker was woken
/// on another thread; at shutdown the session closes with its own code.
struct Reverse;

const REVERSE: &str = "reverse/1";
const REVERSE_BYE: u32 = 0x77;

impl QuicApp for Reverse {
    fn session(&self, _: SocketAddr, waker: Waker) -> Box<dyn QuicSession> {
        Box::new(ReverseSession {
            got: HashMap::new(),
            reversed: Vec::new(),
            waker,
        })
    }
}

/// Reverses a finished stream's bytes as work of its own would finish elsewhere: it wakes
/// its waker from another thread, and writes the answer only in `poll`.
struct ReverseSession {
    got: HashMap<quinn_proto::StreamId, Vec<u8>>,
    /// Answers made, to write at the next `poll`.
    reversed: Vec<(quinn_proto::StreamId, Vec<u8>)>,
    waker: Waker,
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

    fn poll(&mut self, conn: &mut Connection, _: Instant) {
        for (id, out) in self.reversed.drain(..) {
            // Small enough for the stream's window in one write.
            let mut s = conn.send_stream(id);
            assert_eq!(s.write(&out).unwrap(), out.len());
            s.finish().unwrap();
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
            self.reversed.push((id, out));
            let waker = self.waker.clone();
            std::thread::spawn(move || waker.wake()).join().unwrap();
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
    let mut config = ServerConfig::http3(empty_service());
    config.alpns.push("mine/1".into());
    assert!(matches!(prepare(config), Err(ServerError::UnknownAlpn(a)) if a == "mine/1"));

    let config = ServerConfig::quic(REVERSE, Reverse).serve("h3-mine", App::http3(empty_service()));
    let (shared, _) = prepare(config).unwrap();
    assert_eq!(shared.config.alpns, [REVERSE, "h3-mine"]);
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
    assert!(!ServerConfig::http3(empty_service()).generate);
}

/// A service that answers every request with an empty 200.
fn empty_service() -> impl crate::Service {
    service_fn(|_| async { Response::new(ResponseBody::empty()) })
}

/// [`Reverse`], but the first session it makes panics at its connection's first stream.
struct PanicsOnce(std::sync::atomic::AtomicBool);

impl QuicApp for PanicsOnce {
    fn session(&self, peer: SocketAddr, waker: Waker) -> Box<dyn QuicSession> {
        if self.0.swap(false, std::sync::atomic::Ordering::Relaxed) {
            return Box::new(Panics);
        }
        Reverse.session(peer, waker)
    }
}

struct Panics;

impl QuicSession for Panics {
    fn event(&mut self, _: &mut Connection, event: &Event, _: Instant) {
        assert!(
            !matches!(event, Event::Stream(StreamEvent::Opened { .. })),
            "the session panics at its first stream, on purpose"
        );
    }
}

/// A raw-QUIC session that panics costs its connection, closed with the app's panic code
/// (application error 1, "internal error"), and is counted; the worker serves the next
/// connection on the same ALPN whole, and keeps no session once both are gone.
#[test]
fn a_raw_quic_session_that_panics_costs_its_connection_and_the_server_serves_on() {
    let mut config = ServerConfig::quic(REVERSE, PanicsOnce(true.into()));
    config.listen = vec![SERVER];
    let (net, mut server, mut app, mut client_driver) = super::worker_and_client(config);
    let client = || ReverseClient {
        config: Some(quinn_proto::ClientConfig::new(
            tls::client_crypto(&Trust::Insecure, REVERSE).unwrap(),
        )),
        sent: HashMap::new(),
        got: HashMap::new(),
        right: 0,
        lost: None,
        close: true,
    };
    let mut clients = vec![client(), client()];
    for c in &mut clients {
        for _ in 0..TURNS {
            let s = net.turn(&mut server, &mut app).unwrap();
            let t = net.turn(&mut client_driver, c).unwrap();
            // The first ends closed by the server, the second once it closed itself.
            if (t.done || c.right == 5) && server.open_connections() == 0 {
                break;
            }
            let queued = server.queued_datagrams() + client_driver.queued_datagrams() > 0;
            assert!(net.advance(&[s.deadline, t.deadline], queued), "stalled");
        }
    }
    match &clients[0].lost {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code, VarInt::from_u32(1));
            assert_eq!(&close.reason[..], b"internal error");
        }
        other => panic!("closed for the panic, not {other:?}"),
    }
    assert_eq!(clients[0].right, 0);
    assert_eq!(clients[1].right, 5, "the next connection served whole");
    assert_eq!(clients[1].lost, None, "closed by the client");
    assert_eq!(app.report.app_panics, 1);
    assert_eq!(app.sessions(), 0);
}
