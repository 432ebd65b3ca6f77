//! A message's frames on a request stream (RFC 9114 section 4.1), whichever end reads: a head
//! (HEADERS), its body (DATA), optional trailers (HEADERS), unknown frames anywhere. A client
//! reading a response reads interim heads first ([`Phase::Head`] again after each); what the
//! sections hold is [`head`](crate::head)'s to say.

use crate::{
    control::Role,
    frame::{FRAME_LIMIT, Violation, code, kind},
};

/// Where a message's frames have got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before its (final) head.
    Head,
    /// After its head: DATA.
    Body,
    /// After its trailers: nothing but unknown frames.
    Trailers,
}

/// What to do with a frame that begins on a request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A head, within the reader's limit: taken whole and decoded.
    Head,
    /// Trailers, within the reader's limit: taken whole and decoded.
    Trailers,
    /// A head over the reader's `SETTINGS_MAX_FIELD_SECTION_SIZE`: read past unread (with no
    /// dynamic table nothing depends on it). A server answers 431.
    HeadTooLarge,
    /// Trailers over the limit: read past unread.
    TrailersTooLarge,
    /// DATA: its payload handed over as it arrives.
    Data,
    /// A frame type not known here (reserved, extensions): read past (section 9).
    Unknown,
}

/// A frame of type `kind` and payload length `len` begins on a request stream that `reader`
/// reads, whose field section limit is `limit`; `phase` moves on past a head or trailers.
///
/// # Errors
/// The frame may not come here: a connection error, or a stream error for a section too
/// large to skip.
pub fn begins(
    reader: Role,
    phase: &mut Phase,
    kind: u64,
    len: u64,
    limit: u64,
) -> Result<Frame, Violation> {
    const UNEXPECTED: Violation = Violation::Connection(
        code::FRAME_UNEXPECTED,
        "a frame a request stream may not carry there",
    );
    match (kind, *phase) {
        (kind::DATA, Phase::Body) => Ok(Frame::Data),
        (kind::DATA, _) => Err(UNEXPECTED),
        (kind::HEADERS, _) if len > FRAME_LIMIT => Err(Violation::Stream(code::EXCESSIVE_LOAD)),
        (kind::HEADERS, Phase::Head) => {
            *phase = Phase::Body;
            Ok(if len > limit {
                Frame::HeadTooLarge
            } else {
                Frame::Head
            })
        }
        (kind::HEADERS, Phase::Body) => {
            *phase = Phase::Trailers;
            Ok(if len > limit {
                Frame::TrailersTooLarge
            } else {
                Frame::Trailers
            })
        }
        (kind::HEADERS, Phase::Trailers) => Err(UNEXPECTED),
        // Section 4.6: a push ID past the MAX_PUSH_ID a client sends, and none here does.
        (kind::PUSH_PROMISE, _) if reader == Role::Client => Err(Violation::Connection(
            code::ID_ERROR,
            "a PUSH_PROMISE the client did not allow",
        )),
        (
            kind::CANCEL_PUSH
            | kind::SETTINGS
            | kind::PUSH_PROMISE
            | kind::GOAWAY
            | kind::MAX_PUSH_ID,
            _,
        ) => Err(UNEXPECTED),
        (k, _) if kind::is_http2(k) => Err(UNEXPECTED),
        _ => Ok(Frame::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_head_body_trailers() {
        let mut phase = Phase::Head;
        let r = |phase: &mut Phase, kind| begins(Role::Server, phase, kind, 10, 100);
        assert!(r(&mut phase, kind::DATA).is_err(), "DATA before the head");
        assert_eq!(r(&mut phase, 0x21), Ok(Frame::Unknown));
        assert_eq!(r(&mut phase, kind::HEADERS), Ok(Frame::Head));
        assert_eq!(r(&mut phase, kind::DATA), Ok(Frame::Data));
        assert_eq!(r(&mut phase, kind::DATA), Ok(Frame::Data));
        assert_eq!(r(&mut phase, kind::HEADERS), Ok(Frame::Trailers));
        assert_eq!(r(&mut phase, 0x21), Ok(Frame::Unknown));
        for k in [kind::DATA, kind::HEADERS, kind::SETTINGS, kind::GOAWAY, 0x2] {
            assert_eq!(
                r(&mut phase, k).unwrap_err(),
                Violation::Connection(
                    code::FRAME_UNEXPECTED,
                    "a frame a request stream may not carry there"
                ),
                "{k:#x} after trailers"
            );
        }
    }

    #[test]
    fn sections_over_the_limit_are_skipped_or_refused() {
        let mut phase = Phase::Head;
        assert_eq!(
            begins(Role::Server, &mut phase, kind::HEADERS, 101, 100),
            Ok(Frame::HeadTooLarge)
        );
        assert_eq!(
            begins(Role::Server, &mut phase, kind::HEADERS, 101, 100),
            Ok(Frame::TrailersTooLarge)
        );
        let mut phase = Phase::Head;
        assert_eq!(
            begins(
                Role::Client,
                &mut phase,
                kind::HEADERS,
                FRAME_LIMIT + 1,
                u64::MAX
            ),
            Err(Violation::Stream(code::EXCESSIVE_LOAD))
        );
    }

    #[test]
    fn push_promise_is_an_id_error_for_a_client() {
        let mut phase = Phase::Body;
        assert!(matches!(
            begins(Role::Client, &mut phase, kind::PUSH_PROMISE, 3, 100),
            Err(Violation::Connection(code::ID_ERROR, _))
        ));
        assert!(matches!(
            begins(Role::Server, &mut phase, kind::PUSH_PROMISE, 3, 100),
            Err(Violation::Connection(code::FRAME_UNEXPECTED, _))
        ));
    }
}
