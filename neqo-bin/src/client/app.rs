//! The client's [`Application`]: opens the connections one after another and makes every
//! request on each, verifying `/N` and perf bodies and saving `--output-dir` bodies off the
//! driver thread.

use std::{
    collections::{HashSet, VecDeque},
    net::SocketAddr,
    ops::ControlFlow,
    path::PathBuf,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, StreamEvent, StreamId};

use super::{
    ClientConfig, ClientReport,
    output::{Output, WriteDone},
    progress::Progress,
    report,
};
use crate::{
    body::{self, Pumped, ReadEnd, Source},
    disk::Jobs,
    driver::{Application, Driver},
    hq::{self, Target},
    idmap::IdMap,
    pattern, perf, tls,
};

#[derive(Debug)]
struct Request {
    /// Tells this request from an earlier one with the same stream id, so that a late write
    /// result is not taken for it.
    token: u64,
    path: String,
    /// Body length to verify against, when verifying.
    expected: Option<u64>,
    received: u64,
    pattern_ok: bool,
    /// The response's FIN was read.
    fin: bool,
    output: Option<Output>,
    source: Option<Source>,
}

impl Request {
    /// Starts the next write of its output if one is due; returns whether it did.
    fn start_write(&mut self, writes: &Jobs<WriteDone>, connection: usize, id: StreamId) -> bool {
        let token = self.token;
        self.output
            .as_mut()
            .is_some_and(|o| o.start_write(writes, connection, id, token))
    }
}

pub(super) struct ClientApp {
    remote: SocketAddr,
    server_name: String,
    crypto: Arc<quinn_proto::crypto::rustls::QuicClientConfig>,
    perf: bool,
    requests: Vec<String>,
    config: ClientConfig,
    /// Connections opened so far.
    started: usize,
    current: Option<ConnectionHandle>,
    queue: VecDeque<usize>,
    streams: IdMap<StreamId, Request>,
    report: ClientReport,
    first_connect: Option<Instant>,
    last_fin: Option<Instant>,
    failed: bool,
    progress: Option<Progress>,
    writes: Jobs<WriteDone>,
    /// Output files some request saves to: one request each.
    saved: HashSet<PathBuf>,
    next_token: u64,
}

impl ClientApp {
    pub(super) fn new(
        remote: SocketAddr,
        server_name: String,
        crypto: Arc<quinn_proto::crypto::rustls::QuicClientConfig>,
        perf: bool,
        requests: Vec<String>,
        config: ClientConfig,
        progress: Option<Progress>,
    ) -> Self {
        Self {
            remote,
            server_name,
            crypto,
            perf,
            requests,
            config,
            started: 0,
            current: None,
            queue: VecDeque::new(),
            streams: IdMap::default(),
            report: ClientReport::default(),
            first_connect: None,
            last_fin: None,
            failed: false,
            progress,
            writes: Jobs::default(),
            saved: HashSet::new(),
            next_token: 0,
        }
    }

    /// The report, once the driver has returned.
    pub(super) fn finish(mut self, driver: &mut Driver, io: String) -> ClientReport {
        let mut report = self.report;
        if let Some(ch) = self.current.take()
            && let Some(conn) = driver.connection(ch)
        {
            report.lost_packets += conn.stats().path.lost_packets;
        }
        if let Some(p) = &self.progress {
            p.finish();
        }
        report.fill(driver, io, self.first_connect, self.last_fin);
        report
    }

    /// The driver was shut down (Ctrl-C) and has closed the connection: what was still to
    /// do failed.
    pub(super) fn interrupted(&mut self) {
        let outstanding = self.queue.len() + self.streams.len();
        self.abandon(format!(
            "interrupted: {outstanding} requests cancelled, the connection closed"
        ));
    }

    /// The connection is gone with requests left: they fail, with `msg`, and so does the run.
    fn abandon(&mut self, msg: String) {
        self.report.failed_requests += (self.queue.len() + self.streams.len()) as u64;
        self.fail(msg);
        self.failed = true;
        self.current = None;
        self.queue.clear();
        self.streams.clear();
    }

    fn fail(&mut self, msg: String) {
        self.report.errors.push(msg);
    }

    fn open_streams(&mut self, conn: &mut Connection) {
        let limit = if self.config.parallel { usize::MAX } else { 1 };
        while self.streams.len() < limit
            && let Some(&r) = self.queue.front()
        {
            let Some(id) = conn.streams().open(Dir::Bi) else {
                if self.streams.is_empty() {
                    // Out of stream credit with every request answered: the server frees its
                    // streams (and grants new ones) when our ACK of the responses arrives,
                    // which quinn-proto may hold back for max_ack_delay (25 ms) per window of
                    // requests. A PING sends that ACK now.
                    conn.ping();
                }
                break;
            };
            self.queue.pop_front();
            let path = self.requests[r].clone();
            let (source, expected) = if self.perf {
                let header = perf::request_header(self.config.download);
                (
                    Source::pattern(Some(Bytes::copy_from_slice(&header)), self.config.upload),
                    Some(self.config.download),
                )
            } else {
                let expected = match hq::target(&path) {
                    Ok(Target::Generated(n)) => Some(n),
                    _ => None,
                };
                (
                    Source::pattern(Some(Bytes::from(hq::request(&path))), 0),
                    expected,
                )
            };
            let output = match &self.config.output_dir {
                Some(dir) if !self.perf => {
                    let target = dir.join(hq::output_name(&path));
                    self.saved
                        .insert(target.clone())
                        .then(|| Output::new(target))
                }
                _ => None,
            };
            self.next_token += 1;
            self.streams.insert(
                id,
                Request {
                    token: self.next_token,
                    path,
                    expected,
                    received: 0,
                    pattern_ok: true,
                    fin: false,
                    output,
                    source: Some(source),
                },
            );
            self.pump(conn, id);
        }
    }

    fn pump(&mut self, conn: &mut Connection, id: StreamId) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        let Some(src) = req.source.as_mut() else {
            return;
        };
        let before = src.written;
        let result = src.pump(&mut conn.send_stream(id));
        self.report.bytes_sent += src.written - before;
        match result {
            Ok(Pumped::Blocked | Pumped::Starved) => {}
            // Closed: the server stopped the request; its reset says why when we read.
            Ok(Pumped::Finished) | Err(_) => req.source = None,
        }
    }

    /// Reads the response (no more than its output can take), starts due writes, and
    /// completes the request when all is read, verified and written.
    fn read(&mut self, conn: &mut Connection, id: StreamId, now: Instant) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        while !req.fin {
            let max = req.output.as_ref().map_or(usize::MAX, Output::room);
            let bytes_received = &mut self.report.bytes_received;
            let end = body::read_stream_up_to(conn, id, max, |chunk| {
                let len = chunk.bytes.len() as u64;
                if req.expected.is_some()
                    && (chunk.offset != req.received
                        || !pattern::verify(chunk.offset, &chunk.bytes))
                {
                    req.pattern_ok = false;
                }
                if let Some(out) = &mut req.output {
                    out.push(&chunk.bytes);
                }
                req.received += len;
                *bytes_received += len;
                ControlFlow::Continue(())
            });
            match end {
                ReadEnd::Reset(code) => {
                    // Nothing more of the request is wanted either (a perf upload may still
                    // be going).
                    let _ = conn.send_stream(id).reset(code);
                    let name = hq::code_name(code.into_inner())
                        .map_or_else(String::new, |n| format!(", {n}"));
                    let msg = format!(
                        "{}: the server reset the stream (error code {code}{name})",
                        req.path
                    );
                    self.finish_request(conn, id, now, Some(msg));
                    return;
                }
                ReadEnd::Fin => {
                    req.fin = true;
                    if let Some(out) = &mut req.output {
                        out.end();
                    }
                }
                ReadEnd::Blocked => break,
                // The output is full: write it and read on, unless a write is in flight.
                ReadEnd::Stopped => {
                    if !req.start_write(&self.writes, self.started, id) {
                        break;
                    }
                }
            }
        }
        req.start_write(&self.writes, self.started, id);
        if req.fin && req.output.as_ref().is_none_or(Output::done) {
            let error = req
                .expected
                .and_then(|n| report::body_error(&req.path, n, req.received, req.pattern_ok));
            self.finish_request(conn, id, now, error);
        }
    }

    /// A write job finished: go on reading, or fail the request.
    fn write_done(&mut self, conn: &mut Connection, done: WriteDone, now: Instant) {
        let Some(req) = self
            .streams
            .get_mut(&done.id)
            .filter(|r| r.token == done.token)
        else {
            return;
        };
        let Some(out) = &mut req.output else {
            return;
        };
        match done.result {
            Ok(file) => {
                out.written(file);
                self.read(conn, done.id, now);
            }
            Err(e) => {
                let msg = format!(
                    "{}: cannot save the body to {}: {e}",
                    req.path,
                    out.path().display()
                );
                // Given up: the server need not send the rest, nor we.
                body::cancel(conn, done.id, 0u32.into());
                self.finish_request(conn, done.id, now, Some(msg));
            }
        }
    }

    fn finish_request(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
        error: Option<String>,
    ) {
        self.streams.remove(&id);
        self.last_fin = Some(now);
        if let Some(e) = error {
            self.report.failed_requests += 1;
            self.fail(e);
        } else {
            self.report.requests += 1;
        }
        self.open_streams(conn);
        if self.queue.is_empty() && self.streams.is_empty() {
            self.report.connections += 1;
            self.report.lost_packets += conn.stats().path.lost_packets;
            conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
            self.current = None;
        }
    }

    /// Opens the next connection when the last one is done.
    fn connect(&mut self, driver: &mut Driver, now: Instant) {
        if self.current.is_some() || self.failed || self.started >= self.config.connections {
            return;
        }
        self.started += 1;
        let mut cc = quinn_proto::ClientConfig::new(self.crypto.clone());
        let label = tls::qlog_label("client");
        match self.config.transport.transport(&label) {
            Ok(t) => {
                cc.transport_config(Arc::new(t));
            }
            Err(e) => {
                self.fail(format!("{e:#}"));
                self.failed = true;
                return;
            }
        }
        match driver.connect(0, cc, self.remote, &self.server_name) {
            Ok(ch) => {
                self.first_connect.get_or_insert(now);
                self.current = Some(ch);
                self.queue = (0..self.requests.len()).collect();
                if self.queue.is_empty() {
                    self.fail("no request to make".to_owned());
                    self.failed = true;
                }
            }
            Err(e) => {
                self.fail(format!("cannot connect to {}: {e}", self.remote));
                self.failed = true;
            }
        }
    }
}

impl Application for ClientApp {
    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant) {
        if self.current != Some(ch) {
            return;
        }
        match event {
            Event::Connected => self.open_streams(conn),
            Event::Stream(StreamEvent::Available { dir: Dir::Bi }) => self.open_streams(conn),
            Event::Stream(StreamEvent::Readable { id }) => self.read(conn, id, now),
            Event::Stream(StreamEvent::Writable { id }) => self.pump(conn, id),
            Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                // RFC 9000 section 3.5: answered with RESET_STREAM if the request is still
                // being sent; the server's reset of the response says why, when we read it.
                let _ = conn.send_stream(id).reset(error_code);
                if let Some(req) = self.streams.get_mut(&id) {
                    req.source = None;
                }
            }
            Event::Stream(StreamEvent::Opened { dir }) => {
                while let Some(id) = conn.streams().accept(dir) {
                    let _ = conn.recv_stream(id).stop(0u32.into());
                }
            }
            Event::ConnectionLost { reason } => {
                let msg = report::connection_error(
                    self.remote,
                    &self.config.alpn,
                    self.config.transport.idle_timeout,
                    &reason,
                );
                self.report.lost_packets += conn.stats().path.lost_packets;
                self.abandon(msg);
            }
            Event::Stream(_)
            | Event::HandshakeDataReady
            | Event::DatagramReceived
            | Event::DatagramsUnblocked => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        while let Some(done) = self.writes.take() {
            if done.connection != self.started {
                continue;
            }
            if let Some(ch) = self.current {
                driver.update(ch, |conn| self.write_done(conn, done, now));
            }
        }
        self.connect(driver, now);
        let bytes = self.report.bytes_received;
        Some(
            self.progress
                .as_mut()?
                .update(bytes, self.first_connect, now),
        )
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.writes.poll_ready(cx)
    }

    fn done(&self) -> bool {
        self.failed || (self.current.is_none() && self.started >= self.config.connections)
    }
}
