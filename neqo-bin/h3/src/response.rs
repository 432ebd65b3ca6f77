//! A response as a client reads it (RFC 9114 section 4.1), from a request stream's bytes in
//! chunks of any size: interim heads, the final head, DATA (empty frames too) and trailers,
//! each section held to [`head`]'s rules and the frames to
//! [`message`]'s; a body of exactly its `content-length`, none for `HEAD`,
//! 204 and 304. No QUIC stack is needed: the client session feeds it a stream's chunks, a
//! fuzzer any bytes.

use crate::{
    control::Role,
    frame::{FrameReader, Step, Take, Violation, code},
    head::{self, Refused, ResponseHead},
    message::{self, Frame, Phase},
    qpack::Decoder,
};

/// The fields of a section, in order, when kept ([`Sections::fields`]).
pub type Fields = [(Vec<u8>, Vec<u8>)];

/// A part of a response, as it is read.
#[derive(Debug)]
pub enum Part<'a> {
    /// An interim (1xx) response; the final one follows.
    Interim {
        /// Its head.
        head: ResponseHead,
        /// Its fields (pseudo-headers included), when kept.
        fields: &'a Fields,
    },
    /// The final response's head.
    Head {
        /// Its head.
        head: ResponseHead,
        /// Its fields (pseudo-headers included), when kept.
        fields: &'a Fields,
    },
    /// Body bytes, in order.
    Data(&'a [u8]),
    /// The trailers, when within the limit (over it they are skipped unread).
    Trailers {
        /// Their fields, when kept.
        fields: &'a Fields,
    },
}

/// What reading a response's sections takes, shared by a connection's responses.
#[derive(Debug)]
pub struct Sections<'a> {
    /// The connection's QPACK decoder.
    pub decoder: &'a mut Decoder,
    /// The largest section taken (the reader's `SETTINGS_MAX_FIELD_SECTION_SIZE`).
    pub limit: u64,
    /// Where a section's fields go when the caller keeps them, cleared for each; without it
    /// reading a head allocates nothing.
    pub fields: Option<&'a mut Vec<(Vec<u8>, Vec<u8>)>>,
}

/// A response as it arrives.
#[derive(Debug)]
pub struct ResponseReader {
    frames: FrameReader,
    message: Message,
}

/// What a response's frames told so far.
#[derive(Debug)]
struct Message {
    phase: Phase,
    /// The request was `HEAD`: no body, whatever `content-length` says.
    head_request: bool,
    /// Set with the final head: no body may come (`HEAD`, 204, 304).
    bodiless: bool,
    content_length: Option<u64>,
    /// DATA payload bytes received.
    body: u64,
    /// Some of it (a head, interim or final) has come.
    begun: bool,
    /// What broke the rules, for a stream error.
    why: &'static str,
}

impl ResponseReader {
    /// The response to a request; `head_request` when that was `HEAD` (no body comes,
    /// whatever `content-length` says).
    #[must_use]
    pub fn new(head_request: bool) -> Self {
        Self {
            frames: FrameReader::default(),
            message: Message {
                phase: Phase::Head,
                head_request,
                bodiless: false,
                content_length: None,
                body: 0,
                begun: false,
                why: "",
            },
        }
    }

    /// Whether any of it (a head, interim or final) has come: a reset now is no rejection.
    #[must_use]
    pub const fn begun(&self) -> bool {
        self.message.begun
    }

    /// Bytes it holds for a frame not yet whole: a frame header, or a section up to the
    /// limit.
    #[must_use]
    pub fn held(&self) -> usize {
        self.frames.held()
    }

    /// What was wrong, after a stream error ([`Violation::Stream`]).
    #[must_use]
    pub const fn why(&self) -> &'static str {
        match self.message.why.len() {
            0 => "a HEADERS frame over the limit",
            _ => self.message.why,
        }
    }

    /// Takes the next bytes of the stream, handing each part to `on`.
    ///
    /// # Errors
    /// The response broke the rules; it is not to be fed again.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        sections: &mut Sections<'_>,
        on: &mut impl FnMut(Part<'_>),
    ) -> Result<(), Violation> {
        let msg = &mut self.message;
        self.frames
            .feed(bytes, &mut |s: Step<'_>| on_step(s, msg, sections, on))
    }

    /// The stream ended (FIN).
    ///
    /// # Errors
    /// The response is not whole.
    pub fn end(&mut self) -> Result<(), Violation> {
        if !self.frames.between_frames() {
            return Err(Violation::Connection(
                code::FRAME_ERROR,
                "a response stream ended inside a frame",
            ));
        }
        let msg = &mut self.message;
        if msg.phase == Phase::Head {
            return Err(broken(msg, "the stream ended before the final head"));
        }
        if !msg.bodiless && msg.content_length.is_some_and(|l| l != msg.body) {
            return Err(broken(msg, "a body shorter than its content-length"));
        }
        Ok(())
    }
}

/// A malformed response (section 4.1.2): a stream error, `why` kept for the caller.
fn broken(msg: &mut Message, why: &'static str) -> Violation {
    msg.why = why;
    Violation::Stream(code::MESSAGE_ERROR)
}

fn on_step(
    step: Step<'_>,
    msg: &mut Message,
    sections: &mut Sections<'_>,
    on: &mut impl FnMut(Part<'_>),
) -> Result<Take, Violation> {
    match step {
        Step::Begins { kind, len } => Ok(
            match message::begins(Role::Client, &mut msg.phase, kind, len, sections.limit)? {
                Frame::Data => Take::Pieces,
                Frame::Head | Frame::Trailers => Take::Whole,
                // A head is not skipped: what it says is needed.
                Frame::HeadTooLarge => return Err(Violation::Stream(code::EXCESSIVE_LOAD)),
                Frame::TrailersTooLarge | Frame::Unknown => Take::Skip,
            },
        ),
        Step::Whole { payload, .. } => {
            const NONE: &Fields = &[];
            let mut kept = sections.fields.as_deref_mut();
            if let Some(f) = kept.as_deref_mut() {
                f.clear();
            }
            let mut line = |n: &[u8], v: &[u8]| {
                if let Some(f) = kept.as_deref_mut() {
                    f.push((n.to_vec(), v.to_vec()));
                }
            };
            let (decoder, limit) = (&mut *sections.decoder, sections.limit);
            if msg.phase == Phase::Trailers {
                head::trailers(decoder, payload, limit, &mut line).map_err(|r| refused(msg, r))?;
                let fields = sections.fields.as_deref().map_or(NONE, Vec::as_slice);
                on(Part::Trailers { fields });
                return Ok(Take::Skip);
            }
            let head =
                head::response(decoder, payload, limit, &mut line).map_err(|r| refused(msg, r))?;
            let fields = sections.fields.as_deref().map_or(NONE, Vec::as_slice);
            msg.begun = true;
            if head.is_interim() {
                // Section 4.1: the final response follows.
                msg.phase = Phase::Head;
                on(Part::Interim { head, fields });
            } else {
                msg.content_length = head.content_length;
                msg.bodiless = msg.head_request || head.status == 204 || head.status == 304;
                on(Part::Head { head, fields });
            }
            Ok(Take::Skip)
        }
        Step::Piece(p) => {
            if msg.bodiless {
                return Err(broken(msg, "a body where the response has none"));
            }
            let before = msg.body;
            msg.body += p.len() as u64;
            if let Some(l) = msg.content_length.filter(|&l| msg.body > l) {
                // What is within the length is handed over however the bytes were cut, so
                // that the caller sees the same body whatever the packets were.
                let within = usize::try_from(l - before).unwrap_or(usize::MAX);
                if within > 0 {
                    on(Part::Data(&p[..within]));
                }
                return Err(broken(msg, "a body longer than its content-length"));
            }
            on(Part::Data(p));
            Ok(Take::Skip)
        }
    }
}

/// What a section refused means for the stream.
fn refused(msg: &mut Message, r: Refused) -> Violation {
    match r {
        Refused::Undecodable(why) => Violation::Connection(code::QPACK_DECOMPRESSION_FAILED, why),
        Refused::Malformed(why) => broken(msg, why),
        Refused::TooLarge => Violation::Stream(code::EXCESSIVE_LOAD),
    }
}
