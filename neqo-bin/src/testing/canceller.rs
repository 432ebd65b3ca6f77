//! A quinn-proto client on `neqo-bin`'s driver that cancels requests on one connection, by
//! STOP_SENDING, RESET_STREAM or both (RFC 9000 section 3.5), then makes a final request and
//! checks its response byte by byte.
//!
//! Shared by `neqo-bin`'s `tests/cancel.rs` (against `neqo-server`, in process) and
//! `msquic-peer`'s `tests/cancel.rs` (against the `msquic-peer server` binary), so that both
//! servers meet the same client and the same checks.

use std::{
    collections::HashSet,
    net::SocketAddr,
    ops::ControlFlow,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use neqo_driver::{
    Application, Driver, TransportOptions, run_client,
    tls::{self, Trust},
};
use neqo_protocols::{
    ALPN_HQ,
    body::{self, ReadEnd},
    pattern,
};
use quinn_proto::{
    Connection, ConnectionHandle, ConnectionStats, Dir, Event, StreamEvent, StreamId, VarInt,
};

/// A hang guard for one connection's run (300 round trips and more, which a loaded machine
/// stretches), not a performance bound. The tests also bound their other waits with it (see
/// there).
pub const DEADLINE: Duration = Duration::from_secs(120);

/// The client's idle timeout: beyond [`DEADLINE`], so that the run ends by its own events or
/// the guard, never because the client waited its turn.
const IDLE: Duration = Duration::from_secs(600);

/// Cancellations per connection: three times the server's stream limit (100 for both servers).
const CANCELS: usize = 300;

/// The error code the client cancels with, and the server must answer with.
const CODE: VarInt = VarInt::from_u32(0x4e51);

/// The length of a response the client cancels: longer than [`STREAM_WINDOW`], so that it is
/// still being sent when it is cancelled.
const LONG_LEN: u64 = 10_000_000;

/// The client's stream receive window, which a cancelled response does not fit in. The client
/// reads none of a response it stops, so the server cannot send all of one: it is still in the
/// "Send" state when STOP_SENDING arrives, where RFC 9000 section 3.5 says it MUST answer with
/// RESET_STREAM. With a window the whole response fits in (`TransportOptions`' 16 MiB), a
/// client held off the CPU could let the server send the response up to its FIN before its
/// STOP_SENDING arrived, and acknowledge all of it before the server acted on that: the stream
/// was then done ("Data Recvd"), quinn-proto had freed it, the server's reset found it closed,
/// and no RESET_STREAM was owed. The canceller waited for it until the idle timeout.
const STREAM_WINDOW: u32 = 256 << 10;
const _: () = assert!((STREAM_WINDOW as u64) < LONG_LEN);

/// The request served whole after the cancellations.
const FINAL_LEN: u64 = 200_000;

/// How a request is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// The request is sent whole; the response is refused with STOP_SENDING once it starts.
    StopSending,
    /// The request is reset before it is complete.
    Reset,
    /// Both at once, before the request is complete.
    Both,
}

/// What the connection saw.
#[derive(Debug)]
pub struct Outcome {
    /// Streams cancelled.
    cancelled: usize,
    /// Responses the server reset with [`CODE`] that the client read (with `Reset` only: the
    /// others stop reading the response, and quinn-proto does not say how it ended).
    resets_read: usize,
    /// Bytes of the final request's response, and whether each was right.
    final_len: u64,
    final_ok: bool,
    stats: ConnectionStats,
}

impl Outcome {
    /// The checks that hold for any server: every stream was cancelled and freed, and the final
    /// request was served whole. `what` says what failed.
    pub fn assert_streams_freed(&self, how: Cancel, what: &str) {
        assert_eq!(self.cancelled, CANCELS, "{what}");
        assert!(self.final_ok, "{what}");
        assert_eq!(self.final_len, FINAL_LEN, "{what}");
        // The server raised the stream limit as it freed the cancelled streams.
        assert!(self.stats.frame_rx.max_streams_bidi > 0, "{what}");
        // It reset every cancelled response (with a STOP_SENDING the client asked for that).
        assert!(self.stats.frame_rx.reset_stream >= CANCELS as u64, "{what}");
        if how == Cancel::Reset {
            assert_eq!(self.resets_read, CANCELS, "{what}");
        }
    }
}

/// The tests, one for each way of cancelling, of the calling file's `$check(how: Cancel)`,
/// which runs a server and a [`Canceller`] and asserts what it saw. Exported from the crate
/// root under a hidden name (as `macro_rules!` must be) and re-exported here as
/// [`cancel_tests`].
#[doc(hidden)]
#[macro_export]
macro_rules! __cancel_tests {
    ($check:ident) => {
        #[test]
        fn stop_sending_is_answered_with_reset_stream() {
            $check($crate::testing::canceller::Cancel::StopSending);
        }

        #[test]
        fn a_reset_request_closes_the_response() {
            $check($crate::testing::canceller::Cancel::Reset);
        }

        #[test]
        fn reset_and_stop_sending_together() {
            $check($crate::testing::canceller::Cancel::Both);
        }
    };
}
pub use crate::__cancel_tests as cancel_tests;

/// The client: an [`Application`] with one connection, run by [`Canceller::run`].
#[derive(Debug)]
pub struct Canceller {
    remote: SocketAddr,
    trust: Trust,
    how: Cancel,
    ch: Option<ConnectionHandle>,
    cancelled: usize,
    /// Responses a `Reset` cancel waits to see reset.
    awaiting_reset: HashSet<StreamId>,
    resets_read: usize,
    /// The stream of a `StopSending` cancel, until its response starts.
    awaiting_data: Option<StreamId>,
    final_stream: Option<StreamId>,
    final_len: u64,
    final_ok: bool,
    result: Option<Result<Outcome, String>>,
    deadline: Instant,
}

impl Canceller {
    /// Makes [`CANCELS`] cancellations `how` on one connection to the hq-interop server at
    /// `remote`, trusting its certificate as `trust` says, then the final request.
    ///
    /// # Errors
    /// What went wrong on the connection: it was lost, a response ended otherwise than the
    /// cancel asks for, or [`DEADLINE`] passed.
    ///
    /// # Panics
    /// When the driver cannot run (no socket, no runtime): a test has nothing to check then.
    pub fn run(remote: SocketAddr, trust: Trust, how: Cancel) -> Result<Outcome, String> {
        let mut app = Self {
            remote,
            trust,
            how,
            ch: None,
            cancelled: 0,
            awaiting_reset: HashSet::new(),
            resets_read: 0,
            awaiting_data: None,
            final_stream: None,
            final_len: 0,
            final_ok: true,
            result: None,
            deadline: Instant::now() + DEADLINE,
        };
        run_client(&mut app, "127.0.0.1:0".parse().unwrap(), 1).expect("driver");
        app.result.expect("an outcome")
    }

    /// Opens the next stream, if the server's credit allows: a cancel, or the final request.
    fn next(&mut self, conn: &mut Connection) {
        if self.awaiting_data.is_some() || self.final_stream.is_some() {
            return;
        }
        while self.cancelled < CANCELS {
            let Some(id) = conn.streams().open(Dir::Bi) else {
                return; // Until StreamEvent::Available: the server freed streams.
            };
            self.cancelled += 1;
            let mut send = conn.send_stream(id);
            match self.how {
                Cancel::StopSending => {
                    let request = format!("GET /{LONG_LEN}\r\n");
                    send.write(request.as_bytes()).unwrap();
                    send.finish().unwrap();
                    self.awaiting_data = Some(id);
                    return;
                }
                Cancel::Reset | Cancel::Both => {
                    // Part of a request, then given up.
                    send.write(b"GET /100").unwrap();
                    send.reset(CODE).unwrap();
                    if self.how == Cancel::Both {
                        conn.recv_stream(id).stop(CODE).unwrap();
                    } else {
                        self.awaiting_reset.insert(id);
                    }
                }
            }
        }
        if let Some(id) = conn.streams().open(Dir::Bi) {
            let mut send = conn.send_stream(id);
            send.write(format!("GET /{FINAL_LEN}\r\n").as_bytes())
                .unwrap();
            send.finish().unwrap();
            self.final_stream = Some(id);
        }
    }

    fn readable(&mut self, conn: &mut Connection, id: StreamId, now: Instant) {
        if self.awaiting_data == Some(id) {
            // The response has started: refuse the rest of it.
            conn.recv_stream(id).stop(CODE).unwrap();
            self.awaiting_data = None;
            self.next(conn);
        } else if self.awaiting_reset.contains(&id) {
            match body::read_stream(conn, id, |_| ControlFlow::Continue(())) {
                ReadEnd::Reset(code) if code == CODE => {
                    self.awaiting_reset.remove(&id);
                    self.resets_read += 1;
                }
                ReadEnd::Blocked => {}
                other => {
                    self.fail(format!("response to a reset request ended {other:?}"));
                }
            }
        } else if self.final_stream == Some(id) {
            let (len, ok) = (&mut self.final_len, &mut self.final_ok);
            let end = body::read_stream(conn, id, |chunk| {
                *ok &= chunk.offset == *len && pattern::verify(chunk.offset, &chunk.bytes);
                *len += chunk.bytes.len() as u64;
                ControlFlow::Continue(())
            });
            match end {
                ReadEnd::Blocked => {}
                ReadEnd::Fin => self.finish(conn, now),
                other => self.fail(format!("the final request ended {other:?}")),
            }
        }
    }

    /// The final response is in; done once the resets a `Reset` cancel waits for are too, and
    /// the server's RESET_STREAM for every cancel has arrived (the last cancel's may come
    /// after the final response: the server answers both at once). Every cancel gets one: a
    /// `StopSending` cancel's response cannot be sent whole ([`STREAM_WINDOW`]).
    fn finish(&mut self, conn: &mut Connection, now: Instant) {
        if self.result.is_none()
            && self.final_len > 0
            && self.awaiting_reset.is_empty()
            && conn.stats().frame_rx.reset_stream >= CANCELS as u64
        {
            self.result = Some(Ok(Outcome {
                cancelled: self.cancelled,
                resets_read: self.resets_read,
                final_len: self.final_len,
                final_ok: self.final_ok,
                stats: conn.stats(),
            }));
            conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
        }
    }

    fn fail(&mut self, why: String) {
        if self.result.is_none() {
            self.result = Some(Err(why));
        }
    }
}

impl Application for Canceller {
    fn event(&mut self, _: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant) {
        match event {
            Event::Connected | Event::Stream(StreamEvent::Available { dir: Dir::Bi }) => {
                self.next(conn);
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                self.readable(conn, id, now);
                if self.final_len == FINAL_LEN {
                    self.finish(conn, now);
                }
            }
            Event::ConnectionLost { reason } if self.result.is_none() => {
                self.fail(format!(
                    "connection lost after {} cancels ({} RESET_STREAM frames of {CANCELS} \
                     received, final response {} bytes): {reason}",
                    self.cancelled,
                    conn.stats().frame_rx.reset_stream,
                    self.final_len
                ));
            }
            _ => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if self.ch.is_none() {
            let crypto = tls::client_crypto(&self.trust, ALPN_HQ).unwrap();
            let mut config = quinn_proto::ClientConfig::new(crypto);
            let mut transport = TransportOptions {
                idle_timeout: IDLE,
                ..TransportOptions::default()
            }
            .transport("cancel")
            .unwrap();
            transport.stream_receive_window(VarInt::from_u32(STREAM_WINDOW));
            config.transport_config(Arc::new(transport));
            self.ch = Some(
                driver
                    .connect(0, config, self.remote, "localhost", now)
                    .unwrap(),
            );
        }
        if self.final_len == FINAL_LEN
            && let Some(ch) = self.ch
        {
            // Resets still on their way when the final response completed.
            driver.update(ch, |conn| self.finish(conn, now));
        }
        if now > self.deadline {
            let why = format!(
                "deadline: {} of {CANCELS} cancels made, {} resets read, final response {} bytes",
                self.cancelled, self.resets_read, self.final_len
            );
            self.fail(why);
        }
        Some(now + Duration::from_millis(50))
    }

    fn done(&self) -> bool {
        self.result.is_some()
    }
}
