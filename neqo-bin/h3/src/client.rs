//! An HTTP/3 client's side of one connection (RFC 9114), sans-I/O over quinn-proto's
//! [`Connection`]: the application hands it the connection's stream events
//! ([`ClientSession::event`]), takes what they mean from one queue ([`ClientSession::poll`]),
//! sends requests ([`ClientSession::send_request`]) and reads each response no faster than it
//! can take it ([`ClientSession::read`]). No task, waker or buffer per request: a response's
//! body is handed over in the pieces quinn-proto read it in, and what the application does not
//! take stays in the stream, holding the server back by flow control.
//!
//! Every response is held to [`head`]'s and [`message`](crate::message)'s rules:
//! interim (1xx) heads before the final one, any number of DATA frames (empty ones too), a
//! body of exactly its `content-length`, none for `HEAD`, 204 and 304. A request the server
//! never processed (reset with `H3_REQUEST_REJECTED` before any of its response came, or at or
//! past its GOAWAY's ID) is told apart from one cut short: only the first is safe to retry.
//!
//! Only the control stream is opened (QPACK runs without a dynamic table on both sides, so
//! neither of its streams is needed, RFC 9204 section 4.2): a server that allows the three
//! unidirectional streams RFC 9114 asks for is never short of one.

use std::{collections::VecDeque, ops::ControlFlow};

use bytes::Bytes;
use neqo_driver::IdMap;
use neqo_protocols::body::{self, Pumped, ReadEnd, Source};
use quinn_proto::{Connection, Dir, Event, StreamEvent, StreamId, VarInt};

pub use crate::response::{Fields, Part};
use crate::{
    control::Role,
    frame::{FRAME_LIMIT, Violation, code, kind, put_frame_header},
    head::{self, Refused},
    qpack::{self, Decoder},
    response::{ResponseReader, Sections},
    session::{OwnControl, PeerUni},
};

/// How a client session reads responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The largest response head taken (`SETTINGS_MAX_FIELD_SECTION_SIZE`, sent to the
    /// server); at most [`FRAME_LIMIT`] is read.
    pub max_field_section: u64,
    /// Whether heads' and trailers' fields are handed over ([`Part`]); without it only what
    /// the rules check ([`ResponseHead`](crate::head::ResponseHead)) is, and reading a head allocates nothing.
    pub keep_fields: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_field_section: FRAME_LIMIT,
            keep_fields: false,
        }
    }
}

/// A request's head, as [`ClientSession::send_request`] sends it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `:method`.
    pub method: &'a str,
    /// `:scheme`: `https`.
    pub scheme: &'a str,
    /// `:authority`: host and port, an IPv6 literal in brackets (`[::1]:4433`).
    pub authority: &'a str,
    /// `:path`: absolute, with its query.
    pub path: &'a str,
    /// The other fields, names in lower case. A `content-length` is added for a body that
    /// has none.
    pub fields: &'a [(&'a [u8], &'a [u8])],
}

/// A request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// None: the stream ends after the head.
    Empty,
    /// This many bytes of the project's generated pattern
    /// ([`neqo_protocols::pattern`]), sent as one DATA frame straight from static memory.
    Pattern(u64),
}

/// Why a request was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSent {
    /// The server sent GOAWAY: no new request may open on this connection (section 5.2).
    GoingAway,
    /// The server allows no more request streams now: [`ClientEvent::Available`] tells
    /// when it does.
    NoStream,
    /// The head breaks the rules a server holds it to (the reason).
    Malformed(&'static str),
    /// The head is over the server's `SETTINGS_MAX_FIELD_SECTION_SIZE`.
    TooLarge,
    /// The connection's HTTP/3 is over ([`ClientEvent::Closed`]).
    Closed,
}

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::GoingAway => f.write_str("the server is going away (GOAWAY)"),
            Self::NoStream => f.write_str("the server allows no more streams now"),
            Self::Malformed(why) => write!(f, "a malformed request: {why}"),
            Self::TooLarge => f.write_str("the request head is over the server's limit"),
            Self::Closed => f.write_str("the connection is closed"),
        }
    }
}

/// What happened on the connection, from [`ClientSession::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientEvent {
    /// Response bytes of this request can be read ([`ClientSession::read`]).
    Readable(StreamId),
    /// The server's GOAWAY: no request opens from now on; those at or past `first` whose
    /// response had not begun are cancelled and each told [`Rejected`](Self::Rejected).
    GoAway {
        /// The first request stream ID the server did not process.
        first: u64,
    },
    /// This request was never processed by the server, which said so: safe to retry on
    /// another connection (section 4.1.1). It is forgotten here.
    Rejected(StreamId),
    /// The server may open more request streams ([`NotSent::NoStream`]).
    Available,
    /// The server broke HTTP/3's connection rules: the connection is closed with `code`,
    /// and every request not yet over is over with it (forgotten here, and never processed
    /// for all the client can tell).
    Closed {
        /// The HTTP/3 error code it was closed with.
        code: u64,
        /// What the server did.
        why: &'static str,
    },
}

/// Where a read stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Nothing more is readable now: [`ClientEvent::Readable`] tells when.
    Blocked,
    /// The bytes asked for were read; read again when more can be taken.
    Paused,
    /// The response is whole and within the rules: the request is over.
    Done,
    /// The request is over without a whole response.
    Failed(Failure),
}

/// How a request ended without its whole response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The server reset the stream with this code; it may have processed the request.
    Reset(u64),
    /// The server reset the stream with `H3_REQUEST_REJECTED` before any of its response:
    /// never processed, safe to retry.
    Rejected,
    /// The response broke the rules: the stream was reset with `code`.
    Broken {
        /// The HTTP/3 error code the stream was reset with.
        code: u64,
        /// What was wrong.
        why: &'static str,
    },
    /// The response broke the connection's rules: the connection was closed with `code`.
    Closed {
        /// The HTTP/3 error code the connection was closed with.
        code: u64,
        /// What was wrong.
        why: &'static str,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Reset(c) => match code_name(*c) {
                Some(n) => write!(f, "the server reset the stream ({n})"),
                None => write!(f, "the server reset the stream (error code {c:#x})"),
            },
            Self::Rejected => f.write_str("the server rejected the request unprocessed"),
            Self::Broken { why, .. } => write!(f, "a malformed response: {why}"),
            Self::Closed { code, why } => {
                let name = code_name(*code).unwrap_or("an HTTP/3 error");
                write!(f, "the connection was closed ({name}): {why}")
            }
        }
    }
}

/// An HTTP/3 error code's name (RFC 9114 section 8.1, RFC 9204 section 6).
#[must_use]
pub const fn code_name(c: u64) -> Option<&'static str> {
    Some(match c {
        code::NO_ERROR => "H3_NO_ERROR",
        0x101 => "H3_GENERAL_PROTOCOL_ERROR",
        code::INTERNAL_ERROR => "H3_INTERNAL_ERROR",
        code::STREAM_CREATION_ERROR => "H3_STREAM_CREATION_ERROR",
        code::CLOSED_CRITICAL_STREAM => "H3_CLOSED_CRITICAL_STREAM",
        code::FRAME_UNEXPECTED => "H3_FRAME_UNEXPECTED",
        code::FRAME_ERROR => "H3_FRAME_ERROR",
        code::EXCESSIVE_LOAD => "H3_EXCESSIVE_LOAD",
        code::ID_ERROR => "H3_ID_ERROR",
        code::SETTINGS_ERROR => "H3_SETTINGS_ERROR",
        code::MISSING_SETTINGS => "H3_MISSING_SETTINGS",
        code::REQUEST_REJECTED => "H3_REQUEST_REJECTED",
        code::REQUEST_CANCELLED => "H3_REQUEST_CANCELLED",
        code::REQUEST_INCOMPLETE => "H3_REQUEST_INCOMPLETE",
        code::MESSAGE_ERROR => "H3_MESSAGE_ERROR",
        0x10f => "H3_CONNECT_ERROR",
        0x110 => "H3_VERSION_FALLBACK",
        code::QPACK_DECOMPRESSION_FAILED => "QPACK_DECOMPRESSION_FAILED",
        code::QPACK_ENCODER_STREAM_ERROR => "QPACK_ENCODER_STREAM_ERROR",
        code::QPACK_DECODER_STREAM_ERROR => "QPACK_DECODER_STREAM_ERROR",
        _ => return None,
    })
}

/// A request being sent.
#[derive(Debug)]
struct Sending {
    source: Source,
    /// Its HEADERS and DATA frame headers, written first.
    framing: u64,
}

impl Sending {
    /// Body bytes written.
    const fn body(&self) -> u64 {
        self.source.written.saturating_sub(self.framing)
    }
}

/// One connection's HTTP/3, as a client.
#[derive(Debug)]
pub struct ClientSession {
    config: Config,
    control: OwnControl,
    peer: PeerUni,
    decoder: Decoder,
    /// Requests whose response is being read.
    reading: IdMap<StreamId, ResponseReader>,
    /// Requests whose body (or FIN) is still being sent.
    sending: IdMap<StreamId, Sending>,
    events: VecDeque<ClientEvent>,
    /// The server's GOAWAY, once it came.
    goaway: Option<u64>,
    /// Once a violation closed the connection: events are ignored.
    closed: bool,
    /// Request body bytes written to the streams.
    body_sent: u64,
    /// Fields of the section being read, when kept.
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// A request's encoded head, reused.
    section: Vec<u8>,
}

impl ClientSession {
    /// A session reading as `config` says; [`start`](Self::start) it on its connection.
    #[must_use]
    pub fn new(config: Config) -> Self {
        Self {
            config,
            control: OwnControl::default(),
            peer: PeerUni::new(Role::Client),
            decoder: Decoder::default(),
            reading: IdMap::default(),
            sending: IdMap::default(),
            events: VecDeque::new(),
            goaway: None,
            closed: false,
            body_sent: 0,
            fields: Vec::new(),
            section: Vec::new(),
        }
    }

    /// Opens the control stream with SETTINGS, on a connection just opened (requests may go
    /// out at once, in 0-RTT when the connection has it).
    pub fn start(&mut self, conn: &mut Connection, now: std::time::Instant) {
        let r = self.control.start(conn, self.config.max_field_section);
        self.settle(conn, r, now);
    }

    /// The server refused 0-RTT: quinn-proto dropped every stream opened in it, so all is
    /// forgotten (no [`ClientEvent`] for the requests, which the caller makes again) and the
    /// control stream opened anew.
    pub fn zero_rtt_rejected(&mut self, conn: &mut Connection, now: std::time::Instant) {
        *self = Self::new(self.config);
        self.start(conn, now);
    }

    /// The next thing that happened, if any.
    pub fn poll(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Requests not yet over: responses being read.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.reading.len()
    }

    /// The first request stream ID the server's GOAWAY excluded, once it came.
    #[must_use]
    pub const fn goaway(&self) -> Option<u64> {
        self.goaway
    }

    /// Request body bytes written to the streams so far.
    #[must_use]
    pub const fn body_sent(&self) -> u64 {
        self.body_sent
    }

    /// Bytes it holds for frames not yet whole (response heads and control frames cut by a
    /// packet's end): at most a field section per response.
    #[must_use]
    pub fn held(&self) -> usize {
        self.peer.held()
            + self
                .reading
                .values()
                .map(ResponseReader::held)
                .sum::<usize>()
    }

    /// Sends a request: its head, and its body.
    ///
    /// # Errors
    /// Why it was not sent; nothing was.
    pub fn send_request(
        &mut self,
        conn: &mut Connection,
        request: &Request<'_>,
        body: Body,
    ) -> Result<StreamId, NotSent> {
        if self.closed {
            return Err(NotSent::Closed);
        }
        if self.goaway.is_some() {
            return Err(NotSent::GoingAway);
        }
        let length = match body {
            Body::Empty => None,
            Body::Pattern(n) => Some(n),
        };
        let mut digits = itoa::Buffer::new();
        let has_length = request
            .fields
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(b"content-length"));
        let added = length
            .filter(|_| !has_length)
            .map(|n| (&b"content-length"[..], digits.format(n).as_bytes()));
        let pseudo = [
            (&b":method"[..], request.method.as_bytes()),
            (b":scheme", request.scheme.as_bytes()),
            (b":authority", request.authority.as_bytes()),
            (b":path", request.path.as_bytes()),
        ];
        let lines = || {
            pseudo
                .into_iter()
                .chain(request.fields.iter().copied())
                .chain(added)
        };
        // The rules a server holds the head to, the one copy of them: what it would refuse
        // is not sent.
        let limit = self
            .peer
            .control()
            .settings()
            .and_then(|s| s.max_field_section_size)
            .unwrap_or(u64::MAX);
        let head = match head::request_lines(lines(), limit) {
            Ok(h) => h,
            Err(Refused::Malformed(why) | Refused::Undecodable(why)) => {
                return Err(NotSent::Malformed(why));
            }
            Err(Refused::TooLarge) => return Err(NotSent::TooLarge),
        };
        self.section.clear();
        qpack::put_section(lines(), &mut self.section);
        let len = length.unwrap_or(0);
        if head.content_length.is_some_and(|l| l != len) {
            return Err(NotSent::Malformed(
                "a content-length that is not the body's length",
            ));
        }
        let id = conn.streams().open(Dir::Bi).ok_or(NotSent::NoStream)?;
        let mut prefix = Vec::with_capacity(self.section.len() + 20);
        put_frame_header(kind::HEADERS, self.section.len() as u64, &mut prefix);
        prefix.extend_from_slice(&self.section);
        if len > 0 {
            put_frame_header(kind::DATA, len, &mut prefix);
        }
        let framing = prefix.len() as u64;
        self.reading
            .insert(id, ResponseReader::new(head.method == head::Method::Head));
        let sending = Sending {
            source: Source::pattern(Some(Bytes::from(prefix)), len),
            framing,
        };
        self.pump(conn, id, sending);
        Ok(id)
    }

    /// Writes what `sending` has for stream `id`; keeps it while there is more.
    fn pump(&mut self, conn: &mut Connection, id: StreamId, mut sending: Sending) {
        let before = sending.body();
        let result = sending.source.pump(&mut conn.send_stream(id));
        self.body_sent += sending.body() - before;
        if matches!(result, Ok(Pumped::Blocked | Pumped::Starved)) {
            self.sending.insert(id, sending);
        }
        // Finished, or stopped by the server: its reset of the response says why, if it
        // says anything.
    }

    /// Gives up on request `id`: both halves of its stream closed with
    /// `H3_REQUEST_CANCELLED`, and forgotten.
    pub fn cancel(&mut self, conn: &mut Connection, id: StreamId) {
        self.reading.remove(&id);
        self.sending.remove(&id);
        body::cancel(conn, id, varint(code::REQUEST_CANCELLED));
    }

    /// One of the connection's events.
    pub fn event(&mut self, conn: &mut Connection, event: &Event, now: std::time::Instant) {
        if self.closed {
            return;
        }
        let e = match event {
            Event::Stream(e) => e,
            // The server's transport parameters are in: the control stream may open now.
            Event::Connected => {
                let r = self.control.flush(conn);
                self.settle(conn, r, now);
                return;
            }
            _ => return,
        };
        let r = match *e {
            StreamEvent::Opened { dir: Dir::Uni } => self.peer.accept(conn),
            // Section 6.1: a server opens no bidirectional stream.
            StreamEvent::Opened { dir: Dir::Bi } => {
                if conn.streams().accept(Dir::Bi).is_some() {
                    Err(Violation::Connection(
                        code::STREAM_CREATION_ERROR,
                        "a bidirectional stream opened by the server",
                    ))
                } else {
                    Ok(())
                }
            }
            StreamEvent::Readable { id } if id.dir() == Dir::Uni => self.peer.read(conn, id),
            StreamEvent::Readable { id } => {
                if self.reading.contains_key(&id) {
                    self.events.push_back(ClientEvent::Readable(id));
                }
                Ok(())
            }
            StreamEvent::Writable { id } if self.control.is(id) => self.control.flush(conn),
            StreamEvent::Writable { id } => {
                if let Some(sending) = self.sending.remove(&id) {
                    self.pump(conn, id, sending);
                }
                Ok(())
            }
            StreamEvent::Available { dir: Dir::Uni } => self.control.flush(conn),
            StreamEvent::Available { dir: Dir::Bi } => {
                self.events.push_back(ClientEvent::Available);
                Ok(())
            }
            StreamEvent::Stopped { id, .. } if self.control.is(id) => Err(Violation::Connection(
                code::CLOSED_CRITICAL_STREAM,
                "the control stream stopped",
            )),
            StreamEvent::Stopped { id, error_code } => {
                // RFC 9000 section 3.5: the request's sending ends with the same code. A
                // server that wants no more of the body stops it with H3_NO_ERROR and still
                // answers (section 4.1); any other code, its reset of the response says.
                self.sending.remove(&id);
                let _ = conn.send_stream(id).reset(error_code);
                Ok(())
            }
            StreamEvent::Finished { .. } => Ok(()),
        };
        self.settle(conn, r, now);
        if !self.closed {
            self.went_away(conn);
        }
    }

    /// Acts on the server's GOAWAY, once (it may send more, naming no higher ID, which the
    /// control stream's rules check).
    fn went_away(&mut self, conn: &mut Connection) {
        let Some(first) = self.peer.control().goaway() else {
            return;
        };
        if self.goaway == Some(first) {
            return;
        }
        self.goaway = Some(first);
        self.events.push_back(ClientEvent::GoAway { first });
        // Section 5.2: those at or past the ID were not processed. One whose response has
        // begun is read on: the server broke its word, and it is not labelled retryable.
        let mut unprocessed: Vec<StreamId> = self
            .reading
            .iter()
            .filter(|(id, r)| u64::from(**id) >= first && !r.begun())
            .map(|(id, _)| *id)
            .collect();
        unprocessed.sort_unstable_by_key(|id| u64::from(*id));
        for id in unprocessed {
            self.cancel(conn, id);
            self.events.push_back(ClientEvent::Rejected(id));
        }
    }

    /// Acts on a connection-level violation: closes the connection.
    fn settle(&mut self, conn: &mut Connection, r: Result<(), Violation>, now: std::time::Instant) {
        match r {
            Ok(()) | Err(Violation::Stream(_)) => {}
            Err(Violation::Connection(c, why)) => self.close(conn, c, why, now),
        }
    }

    fn close(&mut self, conn: &mut Connection, c: u64, why: &'static str, now: std::time::Instant) {
        self.closed = true;
        self.reading.clear();
        self.sending.clear();
        conn.close(now, varint(c), Bytes::from_static(why.as_bytes()));
        self.events.push_back(ClientEvent::Closed { code: c, why });
    }

    /// Reads request `id`'s response, at most `max` bytes of its stream (frames included, so
    /// no more than `max` body bytes), handing each part to `on`; once it returns
    /// [`Read::Done`] or [`Read::Failed`] the request is over and forgotten.
    pub fn read(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        max: usize,
        now: std::time::Instant,
        on: &mut impl FnMut(Part<'_>),
    ) -> Read {
        let Some(resp) = self.reading.get_mut(&id) else {
            return Read::Blocked;
        };
        let mut sections = Sections {
            decoder: &mut self.decoder,
            limit: self.config.max_field_section,
            fields: self.config.keep_fields.then_some(&mut self.fields),
        };
        let mut violation = None;
        let end = body::read_stream_up_to(conn, id, max, |chunk| {
            match resp.feed(&chunk.bytes, &mut sections, on) {
                Ok(()) => ControlFlow::Continue(()),
                Err(v) => {
                    violation = Some(v);
                    ControlFlow::Break(())
                }
            }
        });
        let outcome = match violation {
            Some(v) => Err(v),
            None => match end {
                ReadEnd::Blocked => return Read::Blocked,
                ReadEnd::Stopped => return Read::Paused,
                ReadEnd::Fin => resp.end(),
                ReadEnd::Reset(c) => {
                    let c = c.into_inner();
                    let failure = if c == code::REQUEST_REJECTED && !resp.begun() {
                        Failure::Rejected
                    } else {
                        Failure::Reset(c)
                    };
                    self.reading.remove(&id);
                    // Nothing more of the request is wanted either.
                    if self.sending.remove(&id).is_some() {
                        let _ = conn.send_stream(id).reset(varint(code::REQUEST_CANCELLED));
                    }
                    return Read::Failed(failure);
                }
            },
        };
        match outcome {
            Ok(()) => {
                self.reading.remove(&id);
                Read::Done
            }
            Err(Violation::Stream(c)) => {
                let why = resp.why();
                self.reading.remove(&id);
                self.sending.remove(&id);
                body::cancel(conn, id, varint(c));
                Read::Failed(Failure::Broken { code: c, why })
            }
            Err(Violation::Connection(c, why)) => {
                self.close(conn, c, why, now);
                Read::Failed(Failure::Closed { code: c, why })
            }
        }
    }
}

fn varint(c: u64) -> VarInt {
    VarInt::from_u64(c).unwrap_or(VarInt::MAX)
}

#[cfg(test)]
mod tests;
