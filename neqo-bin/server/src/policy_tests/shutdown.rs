//! A shutdown of `hq-interop` connections in virtual time: the download under way finishes
//! within the drain period while a request made after the shutdown began is refused unread
//! ([`hq::SHUTTING_DOWN`]); a drain period that ends first cuts the download with a reset
//! ([`hq::CUT`]) before the connection closes, and the access log and the report say so.

use std::{
    io::Write,
    ops::ControlFlow,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use neqo_driver::{
    Application, Driver, DriverConfig,
    tls::{self, Trust},
};
use neqo_protocols::{
    ALPN_HQ,
    body::{self, ReadEnd},
    hq, pattern,
};
use quinn_proto::{Connection, ConnectionError, ConnectionHandle, Dir, Event, StreamEvent};

use super::{SERVER, ServerConfig, TURNS, worker_and_client};
use crate::{AccessLog, AccessLogFormat, ServerReport};

/// How a request ended at the client.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// Under way.
    Open,
    /// Its response whole: this many bytes, each the pattern's.
    Whole(u64),
    /// Reset by the server with this code, after this many bytes.
    Reset(u64, u64),
}

/// An `hq-interop` client: `GET /N` at once, then `GET /10` once told to (after the server
/// began to shut down); it reads everything and never closes the connection itself.
struct HqClient {
    ch: Option<ConnectionHandle>,
    first: u64,
    second: bool,
    ends: Vec<(quinn_proto::StreamId, u64, End, bool)>,
    lost: Option<ConnectionError>,
    drained: bool,
}

impl HqClient {
    fn new(first: u64) -> Self {
        Self {
            ch: None,
            first,
            second: false,
            ends: Vec::new(),
            lost: None,
            drained: false,
        }
    }

    fn request(&mut self, conn: &mut Connection, n: u64) {
        let id = conn.streams().open(Dir::Bi).expect("stream credit");
        let request = hq::request(&format!("/{n}"));
        conn.send_stream(id).write(request.as_bytes()).unwrap();
        conn.send_stream(id).finish().unwrap();
        self.ends.push((id, 0, End::Open, true));
    }

    fn end(&self, i: usize) -> End {
        self.ends.get(i).map_or(End::Open, |e| e.2.clone())
    }
}

impl Application for HqClient {
    fn event(&mut self, _: ConnectionHandle, conn: &mut Connection, event: Event, _: Instant) {
        match event {
            Event::Connected => {
                let n = self.first;
                self.request(conn, n);
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                let Some((_, got, end, right)) = self.ends.iter_mut().find(|e| e.0 == id) else {
                    return;
                };
                let read = body::read_stream(conn, id, |chunk| {
                    *right &= chunk.offset == *got && pattern::verify(chunk.offset, &chunk.bytes);
                    *got += chunk.bytes.len() as u64;
                    ControlFlow::Continue(())
                });
                match read {
                    ReadEnd::Fin if *right => *end = End::Whole(*got),
                    ReadEnd::Fin => panic!("a wrong byte on {id}"),
                    ReadEnd::Reset(code) => *end = End::Reset(code.into_inner(), *got),
                    ReadEnd::Blocked | ReadEnd::Stopped => {}
                }
            }
            Event::ConnectionLost { reason } => self.lost = Some(reason),
            _ => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if self.ch.is_none() {
            let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ).unwrap();
            let config = quinn_proto::ClientConfig::new(crypto);
            self.ch = Some(driver.connect(0, config, SERVER, "localhost", now).unwrap());
        }
        if self.second
            && self.ends.len() == 1
            && let Some(ch) = self.ch
        {
            driver.update(ch, |conn| self.request(conn, 10));
        }
        None
    }

    fn drained(&mut self, _: ConnectionHandle, _: &Connection) {
        self.drained = true;
    }

    fn done(&self) -> bool {
        self.drained
    }
}

/// The access log's lines, kept in memory.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A client downloading `/{len}` from a server with a drain period of `drain`, shut down
/// once the response's first bytes are out; once the shutdown began the client asks for
/// `/10` too. Runs until the client's connection is drained; returns the worker's report,
/// the client and the access log's lines.
fn shut_down_during(len: u64, drain: Duration) -> (ServerReport, HqClient, String) {
    let lines = Lines::default();
    let log = AccessLog::start(Box::new(lines.clone()), AccessLogFormat::Common).unwrap();
    let config = ServerConfig {
        listen: vec![SERVER],
        access_log: Some(log.clone()),
        driver: DriverConfig::default().with_drain(drain),
        ..ServerConfig::default()
    };
    let (net, mut server, mut app, mut client) = worker_and_client(config);
    let mut c = HqClient::new(len);
    let mut shut = None;
    let mut server_done = false;
    for _ in 0..TURNS {
        let s = net.turn(&mut server, &mut app).unwrap();
        server_done |= s.done;
        if shut.is_none() && app.report.bytes_sent > 0 {
            shut = Some(net.now());
            server.shut_down(&mut app, net.now()).unwrap();
        }
        // The second request once the client has read some of the first: the server is
        // shutting down by then.
        c.second = shut.is_some() && c.ends.first().is_some_and(|e| e.1 > 0);
        let t = net.turn(&mut client, &mut c).unwrap();
        if t.done {
            break;
        }
        let queued = server.queued_datagrams() + client.queued_datagrams() > 0;
        assert!(net.advance(&[s.deadline, t.deadline], queued), "stalled");
    }
    assert!(
        c.drained,
        "the client's connection ended: {:?} {:?} server done {server_done} open {} at {:?}",
        c.ends
            .iter()
            .map(|e| (e.1, e.2.clone()))
            .collect::<Vec<_>>(),
        c.lost,
        server.open_connections(),
        shut.map(|s| net.now() - s)
    );
    assert!(shut.is_some(), "the response started");
    log.close().unwrap();
    let lines = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    (app.report, c, lines)
}

/// The download under way finishes whole within the drain period; the request made after
/// the shutdown began is refused unread, so the client may make it elsewhere; then the
/// server closes the connection.
#[test]
fn an_hq_shutdown_lets_the_download_finish_and_refuses_later_requests() {
    const LEN: u64 = 3_000_000;
    let (report, c, lines) = shut_down_during(LEN, Duration::from_secs(30));
    assert_eq!(c.end(0), End::Whole(LEN));
    assert_eq!(c.end(1), End::Reset(hq::SHUTTING_DOWN, 0));
    assert!(
        matches!(&c.lost, Some(ConnectionError::ApplicationClosed(close)) if &close.reason[..] == b"shutdown"),
        "{:?}",
        c.lost
    );
    assert_eq!(
        (
            report.requests,
            report.refused_requests,
            report.cut_at_shutdown
        ),
        (1, 1, 0)
    );
    assert_eq!(report.bytes_sent, LEN);
    let mut ends: Vec<&str> = lines
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    ends.sort_unstable();
    assert_eq!(ends, ["answered", "rejected"], "{lines}");
}

/// A drain period that ends first (a download far longer than it) cuts the response with a
/// reset the client reads as cut, delivered before the connection's close, and counted and
/// logged as cut at shutdown, never as refused unprocessed.
#[test]
fn an_hq_drain_that_ends_first_cuts_the_download_with_a_reset() {
    const LEN: u64 = 30_000_000;
    let (report, c, lines) = shut_down_during(LEN, Duration::from_millis(50));
    match c.end(0) {
        End::Reset(code, got) => {
            assert_eq!(code, hq::CUT);
            assert!(got > 0 && got < LEN, "{got}");
        }
        other => panic!("the download cut with a reset, not {other:?}"),
    }
    assert!(
        matches!(&c.lost, Some(ConnectionError::ApplicationClosed(close)) if &close.reason[..] == b"shutdown"),
        "{:?}",
        c.lost
    );
    assert_eq!((report.requests, report.cut_at_shutdown), (0, 1));
    let cut: Vec<&str> = lines.lines().filter(|l| l.ends_with(" shutdown")).collect();
    assert_eq!(cut.len(), 1, "{lines}");
    assert!(cut[0].contains("\"GET /30000000 hq-interop\""), "{lines}");
}
