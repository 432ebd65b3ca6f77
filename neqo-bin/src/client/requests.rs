//! One connection's requests ([`Open`]): opened as the stream limit and `parallel` allow,
//! request bodies pumped, responses read no faster than their output can take, verified
//! against the pattern and saved off the driver thread; each request's latency and each
//! connection's throughput go into what all connections share ([`Shared`]).

use std::{
    collections::{HashSet, VecDeque},
    ops::ControlFlow,
    time::Instant,
};

use bytes::Bytes;
use neqo_driver::{IdMap, Jobs};
use neqo_protocols::{
    body::{self, Pumped, ReadEnd, Source},
    hq::{self, Target},
    pattern, perf,
};
use quinn_proto::{Connection, ConnectionHandle, Dir, StreamId};

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
}

impl Request {
    /// It is over at `now`, failed with `error` or not: counted, its latency recorded if it
    /// succeeded.
    fn ended(self, s: &mut Shared, now: Instant, error: Option<String>) {
        s.last_fin = Some(now);
        if let Some(e) = error {
            s.report.failed_requests += 1;
            s.fail(e);
        } else {
            s.report.requests += 1;
            s.latencies
                .record(now.saturating_duration_since(self.opened));
        }
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
    pub(super) fn new(perf: bool, requests: Vec<String>, config: ClientConfig) -> Self {
        Self {
            perf,
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
    pub(super) fn zero_rtt_rejected(&mut self, s: &mut Shared) {
        for (_, req) in self.streams.drain() {
            if let Some(out) = &req.output {
                s.saved.remove(out.sink());
            }
        }
        self.queue = (0..s.requests.len()).collect();
    }

    pub(super) fn open_streams(&mut self, s: &mut Shared, conn: &mut Connection, now: Instant) {
        let limit = if s.config.parallel { usize::MAX } else { 1 };
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
            let path = s.requests[r].clone();
            let (source, expected) = if s.perf {
                let header = perf::request_header(s.config.download);
                (
                    Source::pattern(Some(Bytes::copy_from_slice(&header)), s.config.upload),
                    Some(s.config.download),
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
                    source: Some(source),
                },
            );
            self.pump(s, conn, id);
        }
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
                    self.finish_request(s, conn, id, now, Some(msg));
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
        req.start_write(&s.writes, ch, id);
        if req.fin && req.output.as_ref().is_none_or(Output::done) {
            let error = req
                .expected
                .and_then(|n| report::body_error(&req.path, n, req.received, req.pattern_ok));
            self.finish_request(s, conn, id, now, error);
        }
    }

    /// The connection ended: the requests whose response has not all arrived failed (how
    /// many is returned), the rest of them included; those whose response has all arrived
    /// and is being saved stay, to finish their writes without the connection. Returns how
    /// many failed, and whether any stay.
    pub(super) fn lost(&mut self) -> (usize, bool) {
        let unmade = self.queue.len();
        self.queue.clear();
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
        let error = match done.result {
            Ok(written) => {
                out.written(written);
                req.start_write(&s.writes, done.connection, done.id);
                if !req.output.as_ref().is_some_and(Output::done) {
                    return;
                }
                req.expected
                    .and_then(|n| report::body_error(&req.path, n, req.received, req.pattern_ok))
            }
            Err(e) => Some(format!(
                "{}: cannot save the body to {}: {e}",
                req.path,
                out.sink()
            )),
        };
        if let Some(req) = self.streams.remove(&done.id) {
            req.ended(s, now, error);
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
                body::cancel(conn, done.id, 0u32.into());
                self.finish_request(s, conn, done.id, now, Some(msg));
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
        error: Option<String>,
    ) {
        let Some(req) = self.streams.remove(&id) else {
            return;
        };
        req.ended(s, now, error);
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
            conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
            self.closed = true;
        }
    }
}
