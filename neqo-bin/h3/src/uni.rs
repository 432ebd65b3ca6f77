//! A peer's unidirectional streams (RFC 9114 section 6.2): each one's type read first, then
//! its control stream ([`control`](crate::control)) or QPACK's encoder and decoder streams,
//! which with no dynamic table on either side carry almost nothing (RFC 9204 section 4.2). A
//! second critical stream of a type, or a critical stream's end, closes the connection; push
//! streams are an error (neither end here allows pushes); a type not known is for the caller
//! to stop reading ([`Fed::Unknown`]).

use crate::{
    control::{CRITICAL_CLOSED, PeerControl, Role},
    frame::{FrameReader, Violation, code, stream_type, varint},
};

/// The only encoder instruction a table of capacity 0 allows: Set Dynamic Table Capacity 0
/// (RFC 9204 section 4.3.1).
const SET_CAPACITY_ZERO: u8 = 0x20;

/// One of the peer's unidirectional streams, as far as it was read.
#[derive(Debug, Default)]
pub struct UniStream(State);

#[derive(Debug, Default)]
enum State {
    /// Its type not yet all here: at most 8 bytes.
    #[default]
    Typing,
    TypingPart(Vec<u8>),
    Control(FrameReader),
    Encoder,
    /// Inside a Stream Cancellation's stream ID, past its first byte, or not.
    Decoder {
        in_integer: bool,
    },
}

impl UniStream {
    /// Bytes it holds: a type cut by a chunk's end, or a control frame not yet whole.
    #[must_use]
    pub fn held(&self) -> usize {
        match &self.0 {
            State::TypingPart(b) => b.len(),
            State::Control(r) => r.held(),
            State::Typing | State::Encoder | State::Decoder { .. } => 0,
        }
    }
}

/// A stream's type, once all of it is here (with what of `bytes` follows it); until then the
/// part that came, kept in `state`.
fn typed_at<'a>(state: &mut State, bytes: &'a [u8]) -> Option<(u64, &'a [u8])> {
    if let State::TypingPart(typed) = state {
        let had = typed.len();
        typed.extend_from_slice(&bytes[..bytes.len().min(8)]);
        let (kind, used) = varint(typed)?;
        return Some((kind, &bytes[used - had..]));
    }
    let Some((kind, used)) = varint(bytes) else {
        *state = State::TypingPart(bytes.to_vec());
        return None;
    };
    Some((kind, &bytes[used..]))
}

/// What [`PeerStreams::feed`] made of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fed {
    /// Taken; more may come.
    More,
    /// A stream type this endpoint does not know: the caller stops the stream
    /// (`H3_STREAM_CREATION_ERROR`, section 6.2) and reads no more of it.
    Unknown,
}

/// A peer's unidirectional streams: which critical ones it opened, and its control stream's
/// rules.
#[derive(Debug)]
pub struct PeerStreams {
    role: Role,
    control: bool,
    encoder: bool,
    decoder: bool,
    told: PeerControl,
}

impl PeerStreams {
    /// The peer's streams, read by `role`.
    #[must_use]
    pub const fn new(role: Role) -> Self {
        Self {
            role,
            control: false,
            encoder: false,
            decoder: false,
            told: PeerControl::new(role),
        }
    }

    /// What the peer's control stream told.
    #[must_use]
    pub const fn control(&self) -> &PeerControl {
        &self.told
    }

    /// Takes a chunk of `stream`'s bytes.
    ///
    /// # Errors
    /// What the peer did wrong: always a connection error here. The stream is then not fed
    /// again.
    pub fn feed(&mut self, stream: &mut UniStream, mut bytes: &[u8]) -> Result<Fed, Violation> {
        if let s @ (State::Typing | State::TypingPart(_)) = &mut stream.0 {
            let Some((kind, rest)) = typed_at(s, bytes) else {
                return Ok(Fed::More);
            };
            bytes = rest;
            match self.typed(kind)? {
                Some(state) => *s = state,
                None => return Ok(Fed::Unknown),
            }
        }
        self.take(&mut stream.0, bytes)?;
        Ok(Fed::More)
    }

    /// `stream` ended (finished or reset by the peer).
    ///
    /// # Errors
    /// It was critical (section 6.2.1, RFC 9204 section 4.2).
    pub const fn ended(&self, stream: &UniStream) -> Result<(), Violation> {
        match stream.0 {
            State::Typing | State::TypingPart(_) => Ok(()),
            _ => Err(CRITICAL_CLOSED),
        }
    }

    /// The stream's type is known: what it becomes, or `None` for a type not read.
    fn typed(&mut self, kind: u64) -> Result<Option<State>, Violation> {
        use stream_type::{CONTROL, DECODER, ENCODER, PUSH};
        let seen = match kind {
            CONTROL => &mut self.control,
            ENCODER => &mut self.encoder,
            DECODER => &mut self.decoder,
            PUSH if self.role == Role::Server => {
                return Err(Violation::Connection(
                    code::STREAM_CREATION_ERROR,
                    "a push stream from a client",
                ));
            }
            // Section 4.6: a push ID past the client's MAX_PUSH_ID, and it sent none.
            PUSH => {
                return Err(Violation::Connection(
                    code::ID_ERROR,
                    "a push stream the client did not allow",
                ));
            }
            _ => return Ok(None),
        };
        if std::mem::replace(seen, true) {
            return Err(Violation::Connection(
                code::STREAM_CREATION_ERROR,
                "a second critical stream",
            ));
        }
        Ok(Some(match kind {
            CONTROL => State::Control(FrameReader::default()),
            ENCODER => State::Encoder,
            _ => State::Decoder { in_integer: false },
        }))
    }

    /// Takes bytes of a typed stream.
    fn take(&mut self, state: &mut State, bytes: &[u8]) -> Result<(), Violation> {
        match state {
            State::Typing | State::TypingPart(_) => Ok(()),
            State::Control(reader) => {
                let told = &mut self.told;
                reader.feed(bytes, &mut |step| told.step(step))
            }
            State::Encoder => {
                if bytes.iter().all(|&b| b == SET_CAPACITY_ZERO) {
                    Ok(())
                } else {
                    Err(Violation::Connection(
                        code::QPACK_ENCODER_STREAM_ERROR,
                        "an encoder instruction for a table of capacity 0",
                    ))
                }
            }
            State::Decoder { in_integer } => {
                for &b in bytes {
                    if *in_integer {
                        *in_integer = b & 0x80 != 0;
                    } else if b & 0xC0 == 0x40 {
                        // Stream Cancellation: allowed, and nothing to cancel.
                        *in_integer = b & 0x3F == 0x3F;
                    } else {
                        // A Section Acknowledgment or Insert Count Increment: nothing was
                        // asked for or inserted.
                        return Err(Violation::Connection(
                            code::QPACK_DECODER_STREAM_ERROR,
                            "a decoder instruction for a table of capacity 0",
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{control::opening, frame::put_varint};

    /// Feeds each stream's bytes in pieces of `size`; the first violation, or what the last
    /// piece of each was taken as.
    fn feed_all(
        role: Role,
        streams: &[Vec<u8>],
        size: usize,
    ) -> Result<(PeerStreams, Vec<Fed>), Violation> {
        let mut peer = PeerStreams::new(role);
        let mut fed = Vec::new();
        for bytes in streams {
            let mut s = UniStream::default();
            let mut last = Fed::More;
            for piece in bytes.chunks(size) {
                last = peer.feed(&mut s, piece)?;
                if last == Fed::Unknown {
                    break;
                }
            }
            assert!(s.held() <= 16);
            fed.push(last);
        }
        Ok((peer, fed))
    }

    fn typed(kind: u64, rest: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        put_varint(kind, &mut b);
        b.extend_from_slice(rest);
        b
    }

    #[test]
    fn streams_cut_anywhere_read_the_same() {
        let control = opening(100);
        let encoder = typed(stream_type::ENCODER, &[SET_CAPACITY_ZERO]);
        // A Stream Cancellation of stream 100: a 6-bit prefix overflowed, then one byte.
        let decoder = typed(stream_type::DECODER, &[0x7F, 0x25]);
        let grease = typed(0x1F * 7 + 0x21, b"anything");
        for size in [1, 2, 3, 100] {
            let (peer, fed) = feed_all(
                Role::Server,
                &[
                    control.clone(),
                    encoder.clone(),
                    decoder.clone(),
                    grease.clone(),
                ],
                size,
            )
            .unwrap();
            assert_eq!(
                fed,
                [Fed::More, Fed::More, Fed::More, Fed::Unknown],
                "{size}"
            );
            assert_eq!(
                peer.control().settings().unwrap().max_field_section_size,
                Some(100)
            );
        }
    }

    #[test]
    fn critical_streams_once_each_and_never_ended() {
        let control = opening(100);
        let second = feed_all(Role::Client, &[control.clone(), control.clone()], 7);
        assert_eq!(
            second.err(),
            Some(Violation::Connection(
                code::STREAM_CREATION_ERROR,
                "a second critical stream"
            ))
        );
        let mut peer = PeerStreams::new(Role::Server);
        let mut s = UniStream::default();
        assert_eq!(peer.ended(&s), Ok(()), "untyped: no critical stream yet");
        peer.feed(&mut s, &control).unwrap();
        assert_eq!(peer.ended(&s), Err(CRITICAL_CLOSED));
    }

    #[test]
    fn push_streams_and_qpack_instructions_are_refused() {
        let push = typed(stream_type::PUSH, &[0]);
        let code_of = |r: Result<(PeerStreams, Vec<Fed>), Violation>| match r {
            Err(Violation::Connection(c, _)) => Some(c),
            _ => None,
        };
        assert_eq!(
            code_of(feed_all(Role::Server, std::slice::from_ref(&push), 1)),
            Some(code::STREAM_CREATION_ERROR)
        );
        assert_eq!(
            code_of(feed_all(Role::Client, &[push], 1)),
            Some(code::ID_ERROR)
        );
        // An Insert With Literal Name, a Section Acknowledgment, an Insert Count Increment.
        for (kind, bytes, want) in [
            (
                stream_type::ENCODER,
                &[0x41, b'a', 0][..],
                code::QPACK_ENCODER_STREAM_ERROR,
            ),
            (
                stream_type::DECODER,
                &[0x84],
                code::QPACK_DECODER_STREAM_ERROR,
            ),
            (
                stream_type::DECODER,
                &[0x01],
                code::QPACK_DECODER_STREAM_ERROR,
            ),
        ] {
            assert_eq!(
                code_of(feed_all(Role::Server, &[typed(kind, bytes)], 1)),
                Some(want),
                "{kind} {bytes:02x?}"
            );
        }
    }
}
