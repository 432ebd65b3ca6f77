//! A request stream as it arrives (RFC 9114 section 4.1): HEADERS, then DATA, then optional
//! trailers, unknown frames ignored anywhere.

use std::ops::ControlFlow;

use neqo_protocols::body::{self, ReadEnd};
use quinn_proto::{Connection, StreamId, VarInt};

use neqo_h3::{
    control::Role,
    frame::{FrameReader, Step, Take, Violation, code},
    head::{self, Refused, RequestHead as Head},
    message::{self, Frame, Phase},
    qpack::Decoder,
};

use super::MAX_FIELD_SECTION;

/// What a read brought.
#[derive(Debug, Default)]
pub(super) struct Arrived {
    /// The head arrived this read ([`Incoming::head`]).
    pub(super) head: bool,
    /// The head is over the limit: answer 431.
    pub(super) too_large: bool,
    /// The request ended (FIN), every byte read.
    pub(super) fin: bool,
    /// The client reset the stream with this code.
    pub(super) reset: Option<VarInt>,
}

/// A request as it arrives.
#[derive(Debug)]
pub(super) struct Incoming {
    frames: FrameReader,
    phase: Phase,
    pub(super) head: Option<Head>,
    /// DATA payload bytes received.
    pub(super) body: u64,
    /// The FIN was read.
    pub(super) ended: bool,
}

impl Incoming {
    pub(super) fn new() -> Self {
        Self {
            frames: FrameReader::default(),
            phase: Phase::Head,
            head: None,
            body: 0,
            ended: false,
        }
    }

    /// Bytes held for frames not yet whole.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.frames.held()
    }

    /// Reads what stream `id` has.
    ///
    /// # Errors
    /// What the client did wrong.
    pub(super) fn read(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        decoder: &mut Decoder,
    ) -> Result<Arrived, Violation> {
        let mut arrived = Arrived::default();
        let mut violation = None;
        let Self {
            frames,
            phase,
            head,
            body,
            ..
        } = self;
        let end = body::read_stream(conn, id, |chunk| {
            let mut on = |step: Step<'_>| on_step(step, phase, head, body, decoder, &mut arrived);
            match frames.feed(&chunk.bytes, &mut on) {
                Ok(()) => ControlFlow::Continue(()),
                Err(v) => {
                    violation = Some(v);
                    ControlFlow::Break(())
                }
            }
        });
        if let Some(v) = violation {
            return Err(v);
        }
        match end {
            ReadEnd::Fin => {
                if !self.frames.between_frames() {
                    return Err(Violation::Connection(
                        code::FRAME_ERROR,
                        "a request stream ended inside a frame",
                    ));
                }
                if self.phase == Phase::Head {
                    return Err(Violation::Stream(code::REQUEST_INCOMPLETE));
                }
                let length = self.head.as_ref().and_then(|h| h.content_length);
                if length.is_some_and(|l| l != self.body) {
                    return Err(Violation::Stream(code::MESSAGE_ERROR));
                }
                self.ended = true;
                arrived.fin = true;
            }
            ReadEnd::Reset(code) => arrived.reset = Some(code),
            ReadEnd::Blocked | ReadEnd::Stopped => {}
        }
        Ok(arrived)
    }
}

fn on_step(
    step: Step<'_>,
    phase: &mut Phase,
    head: &mut Option<Head>,
    body: &mut u64,
    decoder: &mut Decoder,
    arrived: &mut Arrived,
) -> Result<Take, Violation> {
    match step {
        Step::Begins { kind, len } => {
            Ok(
                match message::begins(Role::Server, phase, kind, len, MAX_FIELD_SECTION)? {
                    Frame::Data => Take::Pieces,
                    Frame::Head | Frame::Trailers => Take::Whole,
                    Frame::HeadTooLarge => {
                        arrived.too_large = true;
                        Take::Skip
                    }
                    // Trailers are dropped: over the limit they are not even read.
                    Frame::TrailersTooLarge | Frame::Unknown => Take::Skip,
                },
            )
        }
        Step::Whole { payload, .. } => {
            if *phase == Phase::Trailers {
                return trailers(decoder, payload).map(|()| Take::Skip);
            }
            match head::request(decoder, payload, MAX_FIELD_SECTION, |_, _| {}) {
                Ok(h) => {
                    *head = Some(h);
                    arrived.head = true;
                }
                Err(Refused::TooLarge) => arrived.too_large = true,
                Err(Refused::Malformed(_)) => return Err(Violation::Stream(code::MESSAGE_ERROR)),
                Err(Refused::Undecodable(why)) => {
                    return Err(Violation::Connection(code::QPACK_DECOMPRESSION_FAILED, why));
                }
            }
            Ok(Take::Skip)
        }
        Step::Piece(p) => {
            *body += p.len() as u64;
            let length = head.as_ref().and_then(|h| h.content_length);
            if length.is_some_and(|l| *body > l) {
                return Err(Violation::Stream(code::MESSAGE_ERROR));
            }
            Ok(Take::Skip)
        }
    }
}

/// Trailers: decoded (a section QPACK cannot decode is a connection error whatever it
/// carries) and checked, then dropped; over the limit, dropped unread, as a frame over it is.
fn trailers(decoder: &mut Decoder, section: &[u8]) -> Result<(), Violation> {
    match head::trailers(decoder, section, MAX_FIELD_SECTION, |_, _| {}) {
        Ok(()) | Err(Refused::TooLarge) => Ok(()),
        Err(Refused::Undecodable(why)) => {
            Err(Violation::Connection(code::QPACK_DECOMPRESSION_FAILED, why))
        }
        Err(Refused::Malformed(_)) => Err(Violation::Stream(code::MESSAGE_ERROR)),
    }
}
