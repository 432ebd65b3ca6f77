//! The server's [`Application`]: reads each request to its FIN, then answers it with generated
//! bytes or a file, or resets the stream. Files are opened and read off the driver thread
//! ([`disk`]), one chunk in flight per stream.

use std::{
    fs::File,
    ops::ControlFlow,
    path::Path,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use bytes::BytesMut;
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, Incoming, StreamEvent, StreamId};

use super::{
    BAD_REQUEST, REFUSED, ServerConfig, ServerReport,
    admission::{ClientSource, Decision, Gate},
    budget::{NoWindow, Windows},
    configs::QlogConfigs,
    ledger::Ledger,
};
use crate::{
    body::{self, Pumped, ReadEnd, Source, StreamClosed},
    disk::{self, FileChunk, Jobs},
    driver::{Admission, Application, Driver},
    hq::{self, Target},
    idmap::IdMap,
    perf,
    tls::{self, ALPN_PERF},
};

/// The request bytes of a stream, as its protocol reads them.
#[derive(Debug)]
enum Request {
    Hq(BytesMut),
    Perf(perf::RequestReader),
}

#[derive(Debug)]
struct StreamState {
    /// Tells this request from another that later gets the same connection handle and stream
    /// id, so that a late file result is not taken for it.
    token: u64,
    request: Request,
    /// The response, once the request is complete.
    source: Option<Source>,
    /// The file being sent, when one is.
    file: Option<FileState>,
}

/// A file being sent.
#[derive(Debug)]
struct FileState {
    /// `None` while a read is in flight (the job holds the file), or once all is read.
    file: Option<File>,
    /// Bytes still to read.
    remaining: u64,
}

#[derive(Debug, Default)]
struct ConnState {
    streams: IdMap<StreamId, StreamState>,
}

/// A file job's result for one stream.
#[derive(Debug)]
struct FileDone {
    ch: ConnectionHandle,
    id: StreamId,
    token: u64,
    /// The next chunk, or what to log before resetting the stream.
    result: Result<FileChunk, String>,
}

pub(super) struct ServerApp {
    /// The worker this runs on, for its log lines.
    worker: usize,
    root: Option<Arc<Path>>,
    gate: Gate,
    windows: Windows,
    qlog: QlogConfigs,
    config: ServerConfig,
    conns: IdMap<ConnectionHandle, ConnState>,
    pub(super) report: ServerReport,
    next_stats: Instant,
    started: Instant,
    files: Jobs<FileDone>,
    next_token: u64,
}

impl ServerApp {
    /// Worker `worker`'s application; `root` must be canonical, and `config` the worker's
    /// share of the limits ([`ServerConfig::worker_share`]).
    pub(super) fn new(
        worker: usize,
        root: Option<Arc<Path>>,
        base: Arc<quinn_proto::ServerConfig>,
        config: ServerConfig,
        ledger: Arc<Ledger>,
        now: Instant,
    ) -> Self {
        Self {
            worker,
            root,
            gate: Gate::new(worker, config.limits, ledger),
            windows: Windows::new(config.budget),
            qlog: QlogConfigs::new(base, config.transport.clone()),
            config,
            conns: IdMap::default(),
            report: ServerReport::default(),
            next_stats: now,
            started: now,
            files: Jobs::default(),
            next_token: 0,
        }
    }
}

impl Application for ServerApp {
    fn admit(&mut self, open: usize, incoming: &Incoming, now: Instant) -> Admission {
        let remote = incoming.remote_address();
        let source = ClientSource::of(remote);
        match self
            .gate
            .admit(source, incoming.remote_address_validated(), now)
        {
            Decision::Accept => {}
            Decision::Retry => return Admission::Retry,
            why @ (Decision::RefuseHalfOpen | Decision::RefuseFull) => {
                tracing::info!(
                    "refusing connection from {remote}: {why:?}, {open} open on worker {}",
                    self.worker
                );
                return Admission::Refuse;
            }
        }
        let window = match self.windows.reserve(source) {
            Ok(window) => window,
            Err(why) => {
                tracing::info!("refusing connection from {remote}: receive budget, {why:?}");
                match why {
                    NoWindow::Spent => self.report.refused_budget += 1,
                    NoWindow::SourceShare => self.report.refused_source_share += 1,
                }
                return Admission::Refuse;
            }
        };
        tracing::trace!("connection from {remote}: a window of {window} B");
        Admission::Accept(self.qlog.next())
    }

    fn accepted(&mut self, ch: ConnectionHandle, conn: &mut Connection) {
        self.gate
            .accepted(ch, ClientSource::of(conn.remote_address()), Instant::now());
        if let Some(window) = self.windows.accepted(ch) {
            // Every connection is told the same small window (0-RTT requires that the next
            // connection is told no less), then gets its own from the budget at once.
            conn.set_receive_window(
                quinn_proto::VarInt::from_u64(window).unwrap_or(quinn_proto::VarInt::MAX),
            );
        }
        self.conns.insert(ch, ConnState::default());
    }

    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, event: Event, _now: Instant) {
        let Some(state) = self.conns.get_mut(&ch) else {
            return;
        };
        match event {
            Event::Connected => self.gate.connected(ch),
            Event::ConnectionLost { reason } => {
                tracing::debug!("connection {ch:?} lost: {reason}");
                self.gate.gone(ch);
                self.conns.remove(&ch);
            }
            Event::Stream(StreamEvent::Opened { dir }) => {
                let perf = tls::negotiated_alpn(conn).as_deref() == Some(ALPN_PERF);
                let mut opened = Vec::new();
                while let Some(id) = conn.streams().accept(dir) {
                    if dir == Dir::Uni {
                        let _ = conn.recv_stream(id).stop(0u32.into());
                        continue;
                    }
                    let request = if perf {
                        Request::Perf(perf::RequestReader::default())
                    } else {
                        Request::Hq(BytesMut::new())
                    };
                    self.next_token += 1;
                    state.streams.insert(
                        id,
                        StreamState {
                            token: self.next_token,
                            request,
                            source: None,
                            file: None,
                        },
                    );
                    opened.push(id);
                }
                for id in opened {
                    self.read(ch, conn, id);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => self.read(ch, conn, id),
            Event::Stream(StreamEvent::Writable { id }) => self.pump(ch, conn, id),
            Event::Stream(StreamEvent::Finished { id }) => {
                state.streams.remove(&id);
            }
            Event::Stream(StreamEvent::Stopped { id, error_code }) => {
                // RFC 9000 section 3.5: STOP_SENDING is answered with RESET_STREAM (with its
                // code); a request still arriving is not wanted either.
                state.streams.remove(&id);
                body::cancel(conn, id, error_code);
            }
            Event::Stream(StreamEvent::Available { .. })
            | Event::HandshakeDataReady
            | Event::DatagramReceived
            | Event::DatagramsUnblocked => {}
        }
    }

    fn drained(&mut self, ch: ConnectionHandle, _conn: &Connection) {
        self.gate.drained(ch);
        self.windows.released(ch);
        self.conns.remove(&ch);
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        #[cfg(test)]
        super::worker::tests::maybe_panic(self.worker);
        while let Some(done) = self.files.take() {
            driver.update(done.ch, |conn| self.file_done(conn, done));
        }
        if self.gate.next_expiry(now).is_some_and(|t| t <= now) {
            for ch in self.gate.expired(now) {
                tracing::debug!("connection {ch:?}: handshake given up (timed out or evicted)");
                driver.update(ch, |conn| {
                    conn.close(
                        now,
                        0u32.into(),
                        bytes::Bytes::from_static(b"handshake given up"),
                    );
                });
            }
        }
        self.report.admission = self.gate.counters();
        self.report.receive_budget = self.config.budget.bytes;
        self.report.receive_windows = self.windows.granted_bytes();
        let expiry = self.gate.next_expiry(now);
        let Some(interval) = self.config.stats_interval else {
            return expiry;
        };
        if now >= self.next_stats {
            if self.started != now {
                let mut r = self.report.clone();
                r.fill(driver, 0);
                eprintln!(
                    "neqo-server stats, worker {}: open connections {}; {}",
                    self.worker,
                    driver.open_connections(),
                    r.summary()
                );
            }
            self.next_stats = now + interval;
        }
        Some(expiry.map_or(self.next_stats, |e| e.min(self.next_stats)))
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.files.poll_ready(cx)
    }
}

impl ServerApp {
    /// Reads request bytes; answers once the request is complete.
    fn read(&mut self, ch: ConnectionHandle, conn: &mut Connection, id: StreamId) {
        let Some(cs) = self.conns.get_mut(&ch) else {
            return;
        };
        let Some(st) = cs.streams.get_mut(&id) else {
            return;
        };
        if st.source.is_some() {
            return;
        }
        let mut too_long = false;
        let bytes_received = &mut self.report.bytes_received;
        let end = body::read_stream(conn, id, |chunk| {
            *bytes_received += chunk.bytes.len() as u64;
            match &mut st.request {
                Request::Hq(buf) => {
                    // Checked as it arrives so that a long request costs no more memory.
                    if buf.len() + chunk.bytes.len() > hq::MAX_REQUEST {
                        too_long = true;
                        return ControlFlow::Break(());
                    }
                    buf.extend_from_slice(&chunk.bytes);
                }
                Request::Perf(r) => r.push(&chunk.bytes),
            }
            ControlFlow::Continue(())
        });
        if let ReadEnd::Reset(code) = end {
            // The peer gave up on its request: our response is not wanted either.
            cs.streams.remove(&id);
            body::cancel(conn, id, code);
        } else if too_long {
            tracing::warn!("refusing request on stream {id}: {}", hq::Error::TooLong);
            self.refuse(ch, conn, id, hq::BAD_REQUEST);
        } else if end == ReadEnd::Fin {
            self.answer(ch, conn, id);
        }
    }

    /// Starts the response to a complete request, or refuses it.
    fn answer(&mut self, ch: ConnectionHandle, conn: &mut Connection, id: StreamId) {
        let Some(st) = self.conns.get_mut(&ch).and_then(|c| c.streams.get_mut(&id)) else {
            return;
        };
        let len = match &st.request {
            Request::Perf(r) => r.response_len().map_err(|e| {
                (
                    format!("refusing request on stream {id}: {e}"),
                    hq::BAD_REQUEST,
                )
            }),
            Request::Hq(buf) => match hq::parse_request(buf) {
                Ok(Target::Generated(n)) => Ok(n),
                Ok(Target::File(path)) => {
                    let path = path.to_owned();
                    st.source = Some(Source::fed());
                    st.file = Some(FileState {
                        file: None,
                        remaining: 0,
                    });
                    let (root, token) = (self.root.clone(), st.token);
                    self.files.spawn(move || FileDone {
                        ch,
                        id,
                        token,
                        result: hq::open(root.as_deref(), &path)
                            .map_err(|e| format!("refusing request for {path:?}: {e}"))
                            .and_then(|(file, len)| {
                                disk::read_chunk(file, len)
                                    .map_err(|e| format!("reading {path:?}: {e}"))
                            }),
                    });
                    return;
                }
                Err(e) => Err((format!("refusing request on stream {id}: {e}"), e.code())),
            },
        };
        match len {
            Ok(n) => {
                st.source = Some(Source::pattern(None, n));
                self.pump(ch, conn, id);
            }
            Err((why, code)) => {
                tracing::warn!("{why}");
                self.refuse(ch, conn, id, code);
            }
        }
    }

    /// A file job finished: sends the chunk, or resets the stream.
    fn file_done(&mut self, conn: &mut Connection, done: FileDone) {
        let FileDone {
            ch,
            id,
            token,
            result,
        } = done;
        let Some(st) = self
            .conns
            .get_mut(&ch)
            .and_then(|c| c.streams.get_mut(&id))
            .filter(|s| s.token == token)
        else {
            return;
        };
        match result {
            Ok(chunk) => {
                let last = chunk.remaining == 0;
                st.file = Some(FileState {
                    file: chunk.file,
                    remaining: chunk.remaining,
                });
                if let Some(src) = &mut st.source {
                    src.feed(chunk.data, last);
                }
                self.pump(ch, conn, id);
            }
            Err(why) => {
                tracing::warn!("{why}");
                self.refuse(ch, conn, id, hq::REFUSED);
            }
        }
    }

    /// Starts reading the next chunk of the stream's file, unless a read is in flight.
    fn read_file(&mut self, ch: ConnectionHandle, id: StreamId) {
        let Some(st) = self.conns.get_mut(&ch).and_then(|c| c.streams.get_mut(&id)) else {
            return;
        };
        let token = st.token;
        let Some(fs) = &mut st.file else {
            return;
        };
        // None: a read is in flight, or everything is read.
        let Some(file) = fs.file.take() else {
            return;
        };
        let remaining = fs.remaining;
        self.files.spawn(move || FileDone {
            ch,
            id,
            token,
            result: disk::read_chunk(file, remaining)
                .map_err(|e| format!("reading the file for stream {id}: {e}")),
        });
    }

    /// Resets the stream with `code` ([`hq::REFUSED`] or [`hq::BAD_REQUEST`]).
    fn refuse(&mut self, ch: ConnectionHandle, conn: &mut Connection, id: StreamId, code: u64) {
        self.report.refused_requests += 1;
        let code = if code == hq::BAD_REQUEST {
            BAD_REQUEST
        } else {
            REFUSED
        };
        body::cancel(conn, id, code);
        if let Some(cs) = self.conns.get_mut(&ch) {
            cs.streams.remove(&id);
        }
    }

    fn pump(&mut self, ch: ConnectionHandle, conn: &mut Connection, id: StreamId) {
        let Some(cs) = self.conns.get_mut(&ch) else {
            return;
        };
        let Some(src) = cs.streams.get_mut(&id).and_then(|s| s.source.as_mut()) else {
            return;
        };
        let before = src.written;
        let result = src.pump(&mut conn.send_stream(id));
        self.report.bytes_sent += src.written - before;
        match result {
            Ok(Pumped::Blocked) => {}
            Ok(Pumped::Starved) => self.read_file(ch, id),
            Ok(Pumped::Finished) => {
                self.report.requests += 1;
                cs.streams.remove(&id);
            }
            Err(StreamClosed) => {
                cs.streams.remove(&id);
            }
        }
    }
}
