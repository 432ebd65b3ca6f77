//! One connection's requests ([`Open`]): opened as the stream limit and `parallel` allow,
//! request bodies pumped, responses read no faster than their output can take, verified
//! against the pattern and saved off the driver thread; each request's latency and each
//! connection's throughput go into what all connections share ([`Shared`]).
//!
//! `hq-interop` and `perf` read and write the streams themselves; HTTP/3 goes through the
//! connection's [`ClientSession`], which frames requests, holds responses to the rules
//! (content-length, interim heads, empty DATA frames) and hands over body bytes as the other
//! two read theirs. A request HTTP/3 says the server never processed (rejected, or past its
//! GOAWAY) is counted apart from a failed one: safe to retry.

use std::{
    collections::{HashSet, VecDeque},
    ops::ControlFlow,
    time::Instant,
};

use bytes::Bytes;
use neqo_driver::{IdMap, Jobs};
use neqo_h3::client::{self as h3, Body, ClientEvent, ClientSession, Failure, NotSent, Part, Read};
use neqo_protocols::{
    body::{self, Pumped, ReadEnd, Source},
    hq::{self, Target},
    pattern, perf,
};
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, StreamEvent, StreamId};

use super::{
    ClientConfig, ClientReport, Save,
    keys::KeyUpdate,
    load::Latencies,
    output::{Output, Sink, WriteDone},
    report,
};

#[derive(Debug)]
struct Request {
    /// Tells this request from an earlier one with the same connection handle and stream
    /// id, so that a late write result is not taken for it.
    token: u64,
    path: String,
    /// When its stream was opened: its latency runs from here to the last byte verified and
    /// written.
    opened: Instant,
    /// Body length to verify against, when verifying.
    expected: Option<u64>,
    received: u64,
    pattern_ok: bool,
    /// The response's FIN was read.
    fin: bool,
    output: Option<Output>,
    source: Option<Source>,
    /// HTTP/3: the final status, once its head came.
    status: Option<u16>,
    /// HTTP/3 `POST`: the start of the answer, which must be the count of bytes sent.
    answer: Vec<u8>,
}

/// How a request ended.
pub(super) enum Ending {
    /// Whole and verified.
    Done,
    Failed(String),
    /// Never processed, the server said: safe to retry.
    Rejected,
    /// Given up on by `--cancel-after`.
    Cancelled,
}

impl Request {
    /// It is over at `now`, as `ending` says: counted, its latency recorded if it
    /// succeeded.
    fn ended(self, s: &mut Shared, now: Instant, ending: Ending) {
        match ending {
            Ending::Done => {
                s.last_fin = Some(now);
                s.report.requests += 1;
                s.latencies
                    .record(now.saturating_duration_since(self.opened));
            }
            Ending::Failed(e) => {
                s.last_fin = Some(now);
                s.report.failed_requests += 1;
                s.fail(e);
            }
            Ending::Rejected => s.report.rejected_requests += 1,
            Ending::Cancelled => s.report.cancelled_requests += 1,
        }
    }

    /// What is wrong with the whole response, if anything.
    fn verdict(&self, upload: u64) -> Ending {
        if let Some(n) = self.expected
            && let Some(e) = report::body_error(&self.path, n, self.received, self.pattern_ok)
        {
            return Ending::Failed(e);
        }
        if self.status.is_some() && upload > 0 && self.answer != upload.to_string().as_bytes() {
            return Ending::Failed(format!(
                "{}: the server counted {:?} of the {upload} bytes posted",
                self.path,
                String::from_utf8_lossy(&self.answer)
            ));
        }
        Ending::Done
    }

    /// Starts the next write of its output if one is due; returns whether it did.
    fn start_write(
        &mut self,
        writes: &Jobs<WriteDone>,
        ch: ConnectionHandle,
        id: StreamId,
    ) -> bool {
        let token = self.token;
        self.output
            .as_mut()
            .is_some_and(|o| o.start_write(writes, ch, id, token))
    }
}

/// What all connections share: what to ask, where to save, what was seen.
pub(super) struct Shared {
    perf: bool,
    /// HTTP/3's `:authority`: the URL's host (an IPv6 literal in brackets) and port.
    authority: Option<String>,
    pub(super) requests: Vec<String>,
    pub(super) config: ClientConfig,
    pub(super) report: ClientReport,
    pub(super) handshakes: Latencies,
    pub(super) latencies: Latencies,
    /// Each finished connection's Gbit/s, from its connect to its last response.
    pub(super) connection_gbps: Vec<f64>,
    pub(super) last_fin: Option<Instant>,
    pub(super) writes: Jobs<WriteDone>,
    /// Where some request saves its body: one request each.
    saved: HashSet<Sink>,
    next_token: u64,
}

impl Shared {
    /// Nothing asked yet: `requests` (paths) on every connection, `perf` or `hq-interop`.
    pub(super) fn new(
        perf: bool,
        authority: Option<String>,
        requests: Vec<String>,
        config: ClientConfig,
    ) -> Self {
        Self {
            perf,
            authority,
            requests,
            config,
            report: ClientReport::default(),
            handshakes: Latencies::default(),
            latencies: Latencies::default(),
            connection_gbps: Vec::new(),
            last_fin: None,
            writes: Jobs::default(),
            saved: HashSet::new(),
            next_token: 0,
        }
    }

    pub(super) fn fail(&mut self, msg: String) {
        self.report.errors.push(msg);
    }
}

/// One open connection's requests.
pub(super) struct Open {
    /// When it was opened.
    pub(super) opened: Instant,
    /// Requests not yet made (indices into [`Shared::requests`]).
    queue: VecDeque<usize>,
    streams: IdMap<StreamId, Request>,
    /// Request and response bytes moved on it.
    bytes: u64,
    /// All its requests are done and it is closed.
    pub(super) closed: bool,
    /// The connection ended while some responses, all arrived, were still being saved:
    /// those finish without it ([`write_done_lost`](Self::write_done_lost)).
    lost: bool,
    pub(super) key_update: KeyUpdate,
    /// HTTP/3 (`h3`): the connection's session.
    h3: Option<ClientSession>,
    /// HTTP/3: request body bytes the session had sent when last looked.
    h3_sent: u64,
    /// HTTP/3: the server sent GOAWAY; no request opens any more.
    going_away: bool,
}

impl Open {
    /// A connection opened `now`, with every one of `s`'s requests still to make.
    pub(super) fn new(s: &Shared, now: Instant) -> Self {
        Self {
            opened: now,
            queue: (0..s.requests.len()).collect(),
            streams: IdMap::default(),
            bytes: 0,
            closed: false,
            lost: false,
            key_update: KeyUpdate::new(s.config.key_update),
            h3: s
                .authority
                .is_some()
                .then(|| ClientSession::new(h3::Config::default())),
            h3_sent: 0,
            going_away: false,
        }
    }

    /// Whether it speaks HTTP/3.
    pub(super) const fn is_h3(&self) -> bool {
        self.h3.is_some()
    }

    /// The connection was just opened: HTTP/3's control stream, and with a session ticket
    /// that allows 0-RTT the requests, before the handshake completes (and again after it,
    /// should the server refuse them).
    pub(super) fn started(&mut self, s: &mut Shared, conn: &mut Connection, now: Instant) {
        if let Some(h3) = &mut self.h3 {
            h3.start(conn, now);
        }
        if conn.has_0rtt() {
            self.open_streams(s, conn, now);
        }
    }

    /// Requests not yet answered, made or not.
    pub(super) fn outstanding(&self) -> usize {
        self.queue.len() + self.streams.len()
    }

    /// The server stopped request `id` (STOP_SENDING): nothing more of it is sent.
    pub(super) fn stopped(&mut self, id: StreamId) {
        if let Some(req) = self.streams.get_mut(&id) {
            req.source = None;
        }
    }

    /// The server refused our 0-RTT: quinn-proto dropped the streams opened in it, so their
    /// requests (none can have completed, no response comes before the handshake) are made
    /// again.
    pub(super) fn zero_rtt_rejected(
        &mut self,
        s: &mut Shared,
        conn: &mut Connection,
        now: Instant,
    ) {
        for (_, req) in self.streams.drain() {
            if let Some(out) = &req.output {
                s.saved.remove(out.sink());
            }
        }
        self.queue = (0..s.requests.len()).collect();
        if let Some(h3) = &mut self.h3 {
            h3.zero_rtt_rejected(conn, now);
        }
    }

    pub(super) fn open_streams(&mut self, s: &mut Shared, conn: &mut Connection, now: Instant) {
        let limit = if s.config.parallel { usize::MAX } else { 1 };
        while self.streams.len() < limit
            && let Some(&r) = self.queue.front()
        {
            let path = s.requests[r].clone();
            let opened = match &mut self.h3 {
                Some(_) if self.going_away => {
                    // Not sent: refused as surely as if the server had said so.
                    s.report.rejected_requests += self.queue.len() as u64;
                    self.queue.clear();
                    break;
                }
                Some(h3) => h3_request(h3, s, conn, &path),
                None => conn.streams().open(Dir::Bi).ok_or(NotSent::NoStream),
            };
            let id = match opened {
                Ok(id) => id,
                Err(NotSent::NoStream) => {
                    if self.streams.is_empty() {
                        // Out of stream credit with every request answered: the server frees
                        // its streams (and grants new ones) when our ACK of the responses
                        // arrives, which quinn-proto may hold back for max_ack_delay (25 ms)
                        // per window of requests. A PING sends that ACK now.
                        conn.ping();
                    }
                    break;
                }
                Err(NotSent::GoingAway) => {
                    self.going_away = true;
                    continue;
                }
                Err(e) => {
                    self.queue.pop_front();
                    s.report.failed_requests += 1;
                    s.fail(format!("{path}: {e}"));
                    continue;
                }
            };
            self.queue.pop_front();
            let generated = match hq::target(&path) {
                Ok(Target::Generated(n)) => Some(n),
                _ => None,
            };
            let (source, expected) = if self.h3.is_some() {
                (None, generated.filter(|_| s.config.upload == 0))
            } else if s.perf {
                let header = perf::request_header(s.config.download);
                (
                    Some(Source::pattern(
                        Some(Bytes::copy_from_slice(&header)),
                        s.config.upload,
                    )),
                    Some(s.config.download),
                )
            } else {
                (
                    Some(Source::pattern(Some(Bytes::from(hq::request(&path))), 0)),
                    generated,
                )
            };
            let sink = match &s.config.save {
                _ if s.perf => None,
                Save::Nothing => None,
                Save::Dir(dir) => Some(Sink::File(dir.join(hq::output_name(&path)))),
                Save::File(file) => Some(Sink::File(file.clone())),
                Save::Stdout => Some(Sink::Stdout),
            };
            let output = sink.and_then(|t| s.saved.insert(t.clone()).then(|| Output::new(t)));
            s.next_token += 1;
            self.streams.insert(
                id,
                Request {
                    token: s.next_token,
                    path,
                    opened: now,
                    expected,
                    received: 0,
                    pattern_ok: true,
                    fin: false,
                    output,
                    source,
                    status: None,
                    answer: Vec::new(),
                },
            );
            self.pump(s, conn, id);
        }
        self.count_h3_sent(s);
    }

    /// HTTP/3's request body bytes sent since it last looked, into the report.
    fn count_h3_sent(&mut self, s: &mut Shared) {
        if let Some(h3) = &self.h3 {
            let sent = h3.body_sent() - self.h3_sent;
            self.h3_sent = h3.body_sent();
            s.report.bytes_sent += sent;
            self.bytes += sent;
        }
    }

    /// An event of an HTTP/3 connection (its loss excepted): the session's to take, then
    /// what it made of it.
    pub(super) fn h3_event(
        &mut self,
        s: &mut Shared,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) {
        let Some(h3) = &mut self.h3 else {
            return;
        };
        h3.event(conn, event, now);
        if matches!(event, Event::Stream(StreamEvent::Readable { id }) if id.dir() == Dir::Bi) {
            self.key_update.poll(conn);
        }
        let mut more = matches!(event, Event::Connected);
        while let Some(e) = self.h3.as_mut().and_then(ClientSession::poll) {
            match e {
                ClientEvent::Readable(id) => self.read(s, ch, conn, id, now),
                ClientEvent::Rejected(id) => {
                    self.finish_request(s, conn, id, now, Ending::Rejected)
                }
                ClientEvent::GoAway { .. } => self.going_away = true,
                ClientEvent::Available => more = true,
                ClientEvent::Closed { code, why } => {
                    let name = h3::code_name(code).unwrap_or("an HTTP/3 error");
                    let msg = format!(
                        "the server broke HTTP/3, the connection is closed ({name}): {why}"
                    );
                    self.queue.clear();
                    for (_, req) in self.streams.drain() {
                        let path = req.path.clone();
                        req.ended(s, now, Ending::Failed(format!("{path}: {msg}")));
                    }
                    self.closed = true;
                    return;
                }
            }
        }
        if more {
            self.open_streams(s, conn, now);
        }
        self.count_h3_sent(s);
    }

    pub(super) fn pump(&mut self, s: &mut Shared, conn: &mut Connection, id: StreamId) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        let Some(src) = req.source.as_mut() else {
            return;
        };
        let before = src.written;
        let result = src.pump(&mut conn.send_stream(id));
        let sent = src.written - before;
        s.report.bytes_sent += sent;
        self.bytes += sent;
        match result {
            Ok(Pumped::Blocked | Pumped::Starved) => {}
            // Closed: the server stopped the request; its reset says why when we read.
            Ok(Pumped::Finished) | Err(_) => req.source = None,
        }
    }

    /// Reads the response (no more than its output can take), starts due writes, and
    /// completes the request when all is read, verified and written.
    pub(super) fn read(
        &mut self,
        s: &mut Shared,
        ch: ConnectionHandle,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
    ) {
        if self.h3.is_some() {
            self.read_h3(s, ch, conn, id, now);
            return;
        }
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        while !req.fin {
            let max = req.output.as_ref().map_or(usize::MAX, Output::room);
            let mut read = 0;
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
                read += len;
                ControlFlow::Continue(())
            });
            s.report.bytes_received += read;
            self.bytes += read;
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
                    self.finish_request(s, conn, id, now, Ending::Failed(msg));
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
                    if !req.start_write(&s.writes, ch, id) {
                        break;
                    }
                }
            }
        }
        self.written_out(s, ch, conn, id, now);
    }

    /// Starts request `id`'s next write; completes it once all is read, verified and
    /// written.
    fn written_out(
        &mut self,
        s: &mut Shared,
        ch: ConnectionHandle,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
    ) {
        let Some(req) = self.streams.get_mut(&id) else {
            return;
        };
        req.start_write(&s.writes, ch, id);
        if req.fin && req.output.as_ref().is_none_or(Output::done) {
            let verdict = req.verdict(s.config.upload);
            self.finish_request(s, conn, id, now, verdict);
        }
    }

    /// Reads an HTTP/3 response, as [`read`](Self::read) reads others: no more than its
    /// output can take.
    fn read_h3(
        &mut self,
        s: &mut Shared,
        ch: ConnectionHandle,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
    ) {
        let (Some(h3), Some(req)) = (&mut self.h3, self.streams.get_mut(&id)) else {
            return;
        };
        let cancel_after = s.config.cancel_after;
        while !req.fin {
            let max = req.output.as_ref().map_or(usize::MAX, Output::room);
            let mut read = 0;
            let r = h3.read(conn, id, max, now, &mut |part| match part {
                Part::Head { head, .. } => req.status = Some(head.status),
                // Read past (`-v` will show them).
                Part::Interim { .. } | Part::Trailers { .. } => {}
                Part::Data(d) if req.status == Some(200) => {
                    if req.expected.is_some() && !pattern::verify(req.received, d) {
                        req.pattern_ok = false;
                    }
                    if let Some(out) = &mut req.output {
                        out.push(d);
                    }
                    if req.answer.len() + d.len() <= 20 {
                        req.answer.extend_from_slice(d);
                    }
                    req.received += d.len() as u64;
                    read += d.len() as u64;
                }
                Part::Data(_) => {}
            });
            s.report.bytes_received += read;
            self.bytes += read;
            if let Some(status) = req.status.filter(|&st| st != 200) {
                // Given up on: not the response asked for.
                h3.cancel(conn, id);
                let msg = format!("{}: status {status}", req.path);
                self.finish_request(s, conn, id, now, Ending::Failed(msg));
                return;
            }
            if cancel_after.is_some_and(|limit| req.received >= limit) && r != Read::Done {
                h3.cancel(conn, id);
                self.finish_request(s, conn, id, now, Ending::Cancelled);
                return;
            }
            match r {
                Read::Blocked => break,
                // The output is full: write it and read on, unless a write is in flight.
                Read::Paused => {
                    if !req.start_write(&s.writes, ch, id) {
                        break;
                    }
                }
                Read::Done => {
                    req.fin = true;
                    if let Some(out) = &mut req.output {
                        out.end();
                    }
                }
                Read::Failed(Failure::Rejected) => {
                    self.finish_request(s, conn, id, now, Ending::Rejected);
                    return;
                }
                Read::Failed(f) => {
                    let msg = format!("{}: {f}", req.path);
                    self.finish_request(s, conn, id, now, Ending::Failed(msg));
                    return;
                }
            }
        }
        self.written_out(s, ch, conn, id, now);
    }

    /// The connection ended: the requests whose response has not all arrived failed (how
    /// many is returned), the rest of them included; those whose response has all arrived
    /// and is being saved stay, to finish their writes without the connection. Returns how
    /// many failed, and whether any stay.
    pub(super) fn lost(&mut self, s: &mut Shared, graceful: bool) -> (usize, bool) {
        let mut unmade = self.queue.len();
        self.queue.clear();
        if graceful && self.h3.is_some() {
            // A server that closes with H3_NO_ERROR has answered what it took (RFC 9114
            // section 5.2): the requests not sent were not processed.
            s.report.rejected_requests += unmade as u64;
            unmade = 0;
        }
        let before = self.streams.len();
        self.streams
            .retain(|_, r| r.fin && r.output.as_ref().is_some_and(|o| !o.done()));
        self.lost = true;
        (
            unmade + before - self.streams.len(),
            !self.streams.is_empty(),
        )
    }

    /// Whether `done` is the write of one of its requests.
    pub(super) fn owns(&self, done: &WriteDone) -> bool {
        self.streams
            .get(&done.id)
            .is_some_and(|r| r.token == done.token)
    }

    /// The request whose write `done` is, if it is still here.
    fn writer_of(&mut self, done: &WriteDone) -> Option<&mut Request> {
        self.streams
            .get_mut(&done.id)
            .filter(|r| r.token == done.token)
    }

    /// Whether it is gone: closed, or lost with nothing left to save.
    pub(super) fn gone(&self) -> bool {
        self.closed || (self.lost && self.streams.is_empty())
    }

    /// A write job of a request whose connection ended after its whole response arrived
    /// ([`lost`](Self::lost)): the next write, or the request's end.
    pub(super) fn write_done_lost(&mut self, s: &mut Shared, done: WriteDone, now: Instant) {
        let Some(req) = self.writer_of(&done) else {
            return;
        };
        let Some(out) = &mut req.output else {
            return;
        };
        let ending = match done.result {
            Ok(written) => {
                out.written(written);
                req.start_write(&s.writes, done.connection, done.id);
                if !req.output.as_ref().is_some_and(Output::done) {
                    return;
                }
                req.verdict(s.config.upload)
            }
            Err(e) => Ending::Failed(format!(
                "{}: cannot save the body to {}: {e}",
                req.path,
                out.sink()
            )),
        };
        if let Some(req) = self.streams.remove(&done.id) {
            req.ended(s, now, ending);
        }
    }

    /// A write job finished: go on reading, or fail the request.
    pub(super) fn write_done(
        &mut self,
        s: &mut Shared,
        conn: &mut Connection,
        done: WriteDone,
        now: Instant,
    ) {
        let Some(req) = self.writer_of(&done) else {
            return;
        };
        let Some(out) = &mut req.output else {
            return;
        };
        match done.result {
            Ok(written) => {
                out.written(written);
                self.read(s, done.connection, conn, done.id, now);
            }
            Err(e) => {
                let msg = format!("{}: cannot save the body to {}: {e}", req.path, out.sink());
                // Given up: the server need not send the rest, nor we.
                match &mut self.h3 {
                    Some(h3) => h3.cancel(conn, done.id),
                    None => body::cancel(conn, done.id, 0u32.into()),
                }
                self.finish_request(s, conn, done.id, now, Ending::Failed(msg));
            }
        }
    }

    /// A request is over: counted, its latency recorded if it succeeded; the next one opened,
    /// or the connection closed when none is left.
    fn finish_request(
        &mut self,
        s: &mut Shared,
        conn: &mut Connection,
        id: StreamId,
        now: Instant,
        ending: Ending,
    ) {
        let Some(req) = self.streams.remove(&id) else {
            return;
        };
        req.ended(s, now, ending);
        self.open_streams(s, conn, now);
        if self.outstanding() == 0 {
            s.report.connections += 1;
            s.report.lost_packets += conn.stats().path.lost_packets;
            let seconds = now.saturating_duration_since(self.opened).as_secs_f64();
            if seconds > 0.0 {
                #[expect(clippy::cast_precision_loss, reason = "a rate")]
                s.connection_gbps
                    .push(self.bytes as f64 * 8.0 / seconds / 1e9);
            }
            // H3_NO_ERROR for HTTP/3 (RFC 9114 section 8.1); 0 for the others.
            let code = if self.h3.is_some() {
                neqo_h3::frame::code::NO_ERROR
            } else {
                0
            };
            conn.close(
                now,
                code.try_into().unwrap_or_default(),
                Bytes::from_static(b"done"),
            );
            self.closed = true;
        }
    }
}

/// Sends request `path` on HTTP/3: a `GET`, or with `--upload` a `POST` of that many pattern
/// bytes.
fn h3_request(
    h3: &mut ClientSession,
    s: &Shared,
    conn: &mut Connection,
    path: &str,
) -> Result<StreamId, NotSent> {
    let (method, body) = match s.config.upload {
        0 => ("GET", Body::Empty),
        n => ("POST", Body::Pattern(n)),
    };
    let request = h3::Request {
        method,
        scheme: "https",
        authority: s.authority.as_deref().unwrap_or_default(),
        path,
        fields: &[],
    };
    h3.send_request(conn, &request, body)
}
