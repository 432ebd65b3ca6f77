//! What a peer may send on each stream, checked as the mailbox reads it, before `h3` sees it.
//!
//! `h3` 0.0.8 buffers every frame other than DATA whole before it looks at it, whatever
//! length the frame announces (a HEADERS frame that says a gigabyte is read for as long as
//! the peer sends), and it never reads the QPACK streams. So the mailbox reads each stream
//! through a `Guard` that follows its layout (RFC 9114 sections 6.2 and 7.1, RFC 9204
//! section 4):
//! - a frame other than DATA longer than [`FRAME_LIMIT`] is refused as soon as its length is
//!   read: on a request stream a stream error, on the control stream a connection error,
//!   both `H3_EXCESSIVE_LOAD`;
//! - the peer's QPACK encoder and decoder streams are checked and consumed here: `h3` uses
//!   no dynamic table (it advertises a capacity of 0), so the encoder may only set that
//!   capacity to 0, and the decoder may only cancel streams (RFC 9204 sections 4.3 and 4.4);
//!   anything else is a connection error of type `QPACK_ENCODER_STREAM_ERROR` or
//!   `QPACK_DECODER_STREAM_ERROR`;
//! - the bytes handed to `h3` are cut at the ends of frames (and of a DATA frame's header), so
//!   that `h3` never takes more than the frame it is reading: what it holds is the frame it
//!   has not all of, which the mailbox counts.

use h3::error::Code;

/// The longest frame other than DATA taken: four times the largest header section a server
/// here accepts, so a header section too large is still read and answered with a status.
pub const FRAME_LIMIT: u64 = 32 * 1024;

const DATA: u64 = 0x0;
/// A frame with no length: the rest of the stream belongs to a WebTransport session.
const WEBTRANSPORT_STREAM: u64 = 0x41;
const CONTROL_STREAM: u64 = 0x0;
const PUSH_STREAM: u64 = 0x1;
const ENCODER_STREAM: u64 = 0x2;
const DECODER_STREAM: u64 = 0x3;
/// RFC 9204 section 4.3.1, Set Dynamic Table Capacity (`001` and a 5-bit prefix) to 0.
const SET_CAPACITY_ZERO: u8 = 0x20;
const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
const QPACK_DECODER_STREAM_ERROR: u64 = 0x202;

/// A piece of a stream's bytes, and what `h3` does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// Part of something `h3` can act on only once it has all of it (a frame other than
    /// DATA, a frame's header, a stream's type): `h3` holds it until then.
    Partial,
    /// Ends such a thing, or is DATA that `h3` hands on as it comes.
    Complete,
    /// Checked here and dropped: `h3` never reads it.
    Discard,
}

/// A length of the bytes scanned and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cut {
    pub(super) len: usize,
    pub(super) take: Take,
}

/// What the peer did wrong, and the error it ends in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Violation {
    /// The stream is ended with this code; the connection goes on.
    Stream(u64),
    /// The connection is closed with this code and reason.
    Connection(u64, &'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A unidirectional stream's type.
    StreamType,
    FrameType,
    FrameLength {
        ty: u64,
    },
    /// A frame's payload: DATA's goes to `h3` as it comes, any other's whole.
    Payload {
        left: u64,
        data: bool,
    },
    Encoder,
    /// Between the peer's QPACK decoder instructions.
    Decoder,
    /// In a Stream Cancellation's stream ID, after its prefix.
    DecoderInteger {
        continuations: u8,
    },
    /// Bytes the guard does not look into, handed to `h3` as they come.
    Opaque,
    /// A unidirectional stream of a type `h3` does not read: dropped as it comes.
    Skipped,
}

/// A QUIC variable-length integer (RFC 9000 section 16) read a byte at a time.
#[derive(Debug, Default, Clone, Copy)]
struct Varint {
    value: u64,
    read: usize,
    len: usize,
}

impl Varint {
    /// Takes `b`; the integer once it is complete.
    fn push(&mut self, b: u8) -> Option<u64> {
        if self.read == 0 {
            self.len = 1 << (b >> 6);
            self.value = u64::from(b & 0x3f);
        } else {
            self.value = (self.value << 8) | u64::from(b);
        }
        self.read += 1;
        (self.read == self.len).then(|| std::mem::take(self).value)
    }
}

/// One stream's reader: where in the stream's layout it is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Guard {
    state: State,
    varint: Varint,
    /// A unidirectional stream: its frames are the control stream's.
    uni: bool,
    /// A client's unidirectional stream, read by a server: never a push stream.
    from_client: bool,
}

impl Default for Guard {
    fn default() -> Self {
        Self::bidi()
    }
}

impl Guard {
    /// For a bidirectional stream: frames from its first byte.
    pub(super) fn bidi() -> Self {
        Self {
            state: State::FrameType,
            varint: Varint::default(),
            uni: false,
            from_client: false,
        }
    }

    /// For a unidirectional stream: its type, then what the type says.
    pub(super) fn uni() -> Self {
        Self {
            state: State::StreamType,
            varint: Varint::default(),
            uni: true,
            from_client: false,
        }
    }

    /// For a client's unidirectional stream at a server: as [`uni`](Self::uni), and a push
    /// stream is refused.
    pub(super) fn client_uni() -> Self {
        Self {
            from_client: true,
            ..Self::uni()
        }
    }

    /// Scans the stream's next `bytes`: appends their pieces to `cuts` (their lengths add up
    /// to `bytes.len()`), or says what the peer did wrong.
    pub(super) fn scan(&mut self, bytes: &[u8], cuts: &mut Vec<Cut>) -> Result<(), Violation> {
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            let (len, take) = match self.state {
                State::Payload { left, data } => {
                    let n = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::FrameType
                    } else {
                        State::Payload { left, data }
                    };
                    let take = if data || left == 0 {
                        Take::Complete
                    } else {
                        Take::Partial
                    };
                    (n, take)
                }
                State::Opaque => (rest.len(), Take::Complete),
                State::Skipped => (rest.len(), Take::Discard),
                State::Encoder => {
                    // Only a capacity of 0 can be set in a table of capacity 0 (RFC 9204
                    // section 4.3.1); an insertion or duplication has no room (section 3.2.2).
                    if rest.iter().any(|&b| b != SET_CAPACITY_ZERO) {
                        return Err(Violation::Connection(
                            QPACK_ENCODER_STREAM_ERROR,
                            "an encoder instruction for a table of capacity 0",
                        ));
                    }
                    (rest.len(), Take::Discard)
                }
                State::Decoder | State::DecoderInteger { .. } => {
                    self.decoder(rest[0])?;
                    (1, Take::Discard)
                }
                State::StreamType | State::FrameType | State::FrameLength { .. } => {
                    (1, self.header(rest[0])?)
                }
            };
            push(cuts, len, take);
            at += len;
        }
        Ok(())
    }

    /// A byte of a stream type or a frame's header.
    fn header(&mut self, b: u8) -> Result<Take, Violation> {
        let Some(v) = self.varint.push(b) else {
            return Ok(Take::Partial);
        };
        match self.state {
            State::StreamType => {
                self.state = match v {
                    CONTROL_STREAM => State::FrameType,
                    ENCODER_STREAM => State::Encoder,
                    DECODER_STREAM => State::Decoder,
                    // RFC 9114 section 6.2.2: only servers push.
                    PUSH_STREAM if self.from_client => {
                        return Err(Violation::Connection(
                            Code::H3_STREAM_CREATION_ERROR.value(),
                            "a push stream from a client",
                        ));
                    }
                    // Push streams (a server's, never asked for here), WebTransport, reserved
                    // and unknown types: `h3` stops reading them, and what they carry is
                    // dropped as it arrives (section 6.2), never held.
                    _ => State::Skipped,
                };
                Ok(Take::Complete)
            }
            State::FrameType if v == WEBTRANSPORT_STREAM && !self.uni => {
                self.state = State::Opaque;
                Ok(Take::Complete)
            }
            State::FrameType => {
                self.state = State::FrameLength { ty: v };
                Ok(Take::Partial)
            }
            State::FrameLength { ty } => {
                let data = ty == DATA;
                if !data && v > FRAME_LIMIT {
                    return Err(if self.uni {
                        Violation::Connection(
                            Code::H3_EXCESSIVE_LOAD.value(),
                            "a control frame over the size limit",
                        )
                    } else {
                        Violation::Stream(Code::H3_EXCESSIVE_LOAD.value())
                    });
                }
                self.state = if v == 0 {
                    State::FrameType
                } else {
                    State::Payload { left: v, data }
                };
                // A header waits for its payload's first bytes (all of them but for DATA):
                // `h3` can do nothing with a header alone, and a header and its payload in
                // one piece are one record, not two.
                Ok(if v == 0 {
                    Take::Complete
                } else {
                    Take::Partial
                })
            }
            _ => unreachable!("a header state"),
        }
    }

    /// A byte of the peer's QPACK decoder stream (RFC 9204 section 4.4).
    fn decoder(&mut self, b: u8) -> Result<(), Violation> {
        match self.state {
            State::Decoder if b & 0xc0 == 0x40 => {
                // Stream Cancellation, a stream ID with a 6-bit prefix: more bytes follow
                // when the prefix is full.
                if b & 0x3f == 0x3f {
                    self.state = State::DecoderInteger { continuations: 0 };
                }
                Ok(())
            }
            State::Decoder => Err(Violation::Connection(
                QPACK_DECODER_STREAM_ERROR,
                if b & 0x80 == 0 {
                    "an insert count increment, with nothing inserted"
                } else {
                    "a section acknowledgment, with no dynamic reference sent"
                },
            )),
            State::DecoderInteger { continuations } => {
                // A stream ID is below 2^62: at most nine 7-bit continuations.
                if continuations >= 9 {
                    return Err(Violation::Connection(
                        QPACK_DECODER_STREAM_ERROR,
                        "a stream ID past 2^62",
                    ));
                }
                self.state = if b & 0x80 == 0 {
                    State::Decoder
                } else {
                    State::DecoderInteger {
                        continuations: continuations + 1,
                    }
                };
                Ok(())
            }
            _ => unreachable!("a decoder state"),
        }
    }
}

/// Appends a piece, joining it to the last when that one is unfinished (a piece that waits
/// for more is always followed by more of the same frame) or when both are dropped.
fn push(cuts: &mut Vec<Cut>, len: usize, take: Take) {
    if let Some(last) = cuts.last_mut()
        && (last.take == Take::Partial && take != Take::Discard
            || last.take == Take::Discard && take == Take::Discard)
    {
        last.len += len;
        last.take = take;
        return;
    }
    cuts.push(Cut { len, take });
}

#[cfg(test)]
mod tests {
    use super::{Cut, FRAME_LIMIT, Guard, Take, Violation};

    const HEADERS: u64 = 0x1;
    const EXCESSIVE_LOAD: u64 = 0x107;

    fn varint(v: u64, out: &mut Vec<u8>) {
        match v {
            0..64 => out.push(u8::try_from(v).unwrap()),
            64..16_384 => {
                out.extend_from_slice(&(0x4000 | u16::try_from(v).unwrap()).to_be_bytes())
            }
            16_384..1_073_741_824 => {
                out.extend_from_slice(&(0x8000_0000 | u32::try_from(v).unwrap()).to_be_bytes());
            }
            _ => out.extend_from_slice(&(0xc000_0000_0000_0000 | v).to_be_bytes()),
        }
    }

    fn frame(ty: u64, len: u64, payload: &[u8], out: &mut Vec<u8>) {
        varint(ty, out);
        varint(len, out);
        out.extend_from_slice(payload);
    }

    /// Scans `bytes` in chunks of `step`: the pieces, with the pieces of a chunk joined to
    /// the last one's when it waits for more.
    fn scan(guard: &mut Guard, bytes: &[u8], step: usize) -> Result<Vec<Cut>, Violation> {
        let mut all: Vec<Cut> = Vec::new();
        for chunk in bytes.chunks(step) {
            let mut cuts = Vec::new();
            guard.scan(chunk, &mut cuts)?;
            assert_eq!(cuts.iter().map(|c| c.len).sum::<usize>(), chunk.len());
            for c in cuts {
                super::push(&mut all, c.len, c.take);
            }
        }
        Ok(all)
    }

    fn cut(len: usize, take: Take) -> Cut {
        Cut { len, take }
    }

    #[test]
    fn a_request_stream_is_cut_at_each_frame_and_within_data_however_it_arrives() {
        let mut bytes = Vec::new();
        frame(HEADERS, 300, &[7; 300], &mut bytes); // 1 + 2 + 300
        frame(0x0, 5, b"hello", &mut bytes); // DATA: 2, then 5
        frame(0x21, 3, b"abc", &mut bytes); // a reserved type: 1 + 1 + 3
        frame(0x0, 0, &[], &mut bytes); // an empty DATA frame
        // Where `h3` can act: after the HEADERS frame, the DATA payload (within it as it
        // comes, but not before its first byte: its header waits for it), the reserved
        // frame, the empty DATA frame.
        let payload = 306..310;
        for step in [1, 2, 3, 7, 64, 301, bytes.len()] {
            let got = scan(&mut Guard::bidi(), &bytes, step).unwrap();
            let mut ends = Vec::new();
            let mut at = 0;
            for c in &got {
                at += c.len;
                assert_ne!(c.take, Take::Discard);
                if c.take == Take::Complete && !payload.contains(&at) {
                    ends.push(at);
                }
                if c.take == Take::Partial {
                    assert!(!payload.contains(&at), "{got:?}");
                }
            }
            assert_eq!(ends, [303, 310, 315, 317], "in chunks of {step}: {got:?}");
        }
        // Cut short inside the HEADERS frame: all of it waits for the rest.
        let mut g = Guard::bidi();
        assert_eq!(
            scan(&mut g, &bytes[..100], 100).unwrap(),
            vec![cut(100, Take::Partial)]
        );
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_at_its_length_and_data_is_not() {
        let mut big = Vec::new();
        varint(HEADERS, &mut big);
        varint(FRAME_LIMIT + 1, &mut big);
        assert_eq!(
            scan(&mut Guard::bidi(), &big, 1),
            Err(Violation::Stream(EXCESSIVE_LOAD))
        );
        let mut at_limit = Vec::new();
        frame(HEADERS, FRAME_LIMIT, &[], &mut at_limit);
        assert!(scan(&mut Guard::bidi(), &at_limit, 1).is_ok());
        let mut data = Vec::new();
        frame(0x0, 1 << 40, &[0; 100], &mut data);
        assert_eq!(
            scan(&mut Guard::bidi(), &data, 50).unwrap(),
            vec![
                cut(50, Take::Complete),
                cut(50, Take::Complete),
                cut(9, Take::Complete)
            ]
        );
        // On the control stream, an unknown frame over the limit closes the connection.
        let mut control = vec![0x0];
        frame(0x21, 1 << 20, &[], &mut control);
        assert!(matches!(
            scan(&mut Guard::uni(), &control, 3),
            Err(Violation::Connection(EXCESSIVE_LOAD, _))
        ));
    }

    #[test]
    fn qpack_streams_are_checked_and_dropped() {
        // The encoder may set the capacity to 0, and nothing else.
        let mut g = Guard::uni();
        assert_eq!(
            scan(&mut g, &[0x02, 0x20, 0x20], 1).unwrap(),
            vec![cut(1, Take::Complete), cut(2, Take::Discard)]
        );
        for insert in [0x3f_u8, 0x80, 0x40, 0x00, 0x21] {
            let mut g = Guard::uni();
            assert!(
                matches!(
                    scan(&mut g, &[0x02, 0x20, insert], 3),
                    Err(Violation::Connection(0x201, _))
                ),
                "{insert:#x}"
            );
        }
        // The decoder may cancel streams (a 6-bit prefix, then continuations), nothing else.
        let mut g = Guard::uni();
        assert_eq!(
            scan(&mut g, &[0x03, 0x44, 0x7f, 0x80, 0x80, 0x01, 0x40], 2).unwrap(),
            vec![cut(1, Take::Complete), cut(6, Take::Discard)]
        );
        for (bytes, what) in [
            (&[0x03, 0x81][..], "a section acknowledgment"),
            (&[0x03, 0x01][..], "an insert count increment"),
            (
                &[
                    0x03, 0x7f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                ],
                "past 2^62",
            ),
        ] {
            assert!(
                matches!(
                    scan(&mut Guard::uni(), bytes, 1),
                    Err(Violation::Connection(0x202, _))
                ),
                "{what}"
            );
        }
    }

    #[test]
    fn unknown_streams_are_dropped_unread_and_webtransport_passed() {
        // A reserved stream type (0x21, two bytes), then anything: dropped.
        let mut bytes = vec![0x40, 0x21];
        bytes.extend_from_slice(&[0xff; 10]);
        for guard in [Guard::uni(), Guard::client_uni()] {
            let got = scan(&mut guard.clone(), &bytes, 1).unwrap();
            assert_eq!(got[0], cut(2, Take::Complete));
            assert!(got[1..].iter().all(|c| c.take == Take::Discard), "{got:?}");
            assert_eq!(got[1..].iter().map(|c| c.len).sum::<usize>(), 10);
        }
        // A push stream: a server's is dropped too (never asked for), a client's refused.
        assert_eq!(
            scan(&mut Guard::uni(), &[0x01, 0x00, 0x05], 3).unwrap(),
            vec![cut(1, Take::Complete), cut(2, Take::Discard)]
        );
        assert!(matches!(
            scan(&mut Guard::client_uni(), &[0x01, 0x00], 2),
            Err(Violation::Connection(0x103, _))
        ));
        let mut wt = vec![0x40, 0x41];
        wt.extend_from_slice(&[0xff; 10]);
        let got = scan(&mut Guard::bidi(), &wt, 100).unwrap();
        assert_eq!(got, vec![cut(2, Take::Complete), cut(10, Take::Complete)]);
    }
}
