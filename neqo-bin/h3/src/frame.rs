//! HTTP/3 framing (RFC 9114 section 7): QUIC variable-length integers, frame and error
//! codes, and frames read incrementally from a stream's chunks of any size.

/// Frame types (RFC 9114 section 7.2).
pub mod kind {
    /// A body's bytes.
    pub const DATA: u64 = 0x0;
    /// A field section: a head or trailers.
    pub const HEADERS: u64 = 0x1;
    /// A push cancelled (control stream).
    pub const CANCEL_PUSH: u64 = 0x3;
    /// The endpoint's settings, the control stream's first frame.
    pub const SETTINGS: u64 = 0x4;
    /// A push announced (request stream, server to client).
    pub const PUSH_PROMISE: u64 = 0x5;
    /// The end of the connection's new requests (control stream).
    pub const GOAWAY: u64 = 0x7;
    /// The pushes a client allows (control stream).
    pub const MAX_PUSH_ID: u64 = 0xd;

    /// HTTP/2's frame types that HTTP/3 reserves and forbids (section 7.2.8).
    pub const fn is_http2(kind: u64) -> bool {
        matches!(kind, 0x2 | 0x6 | 0x8 | 0x9)
    }
}

/// Error codes (RFC 9114 section 8.1, RFC 9204 section 6).
pub mod code {
    /// No error: a graceful close, or a stream not needed.
    pub const NO_ERROR: u64 = 0x100;
    /// The endpoint failed on its own.
    pub const INTERNAL_ERROR: u64 = 0x102;
    /// A stream of a type the peer may not open.
    pub const STREAM_CREATION_ERROR: u64 = 0x103;
    /// A control or QPACK stream ended.
    pub const CLOSED_CRITICAL_STREAM: u64 = 0x104;
    /// A frame not allowed on its stream or at that point.
    pub const FRAME_UNEXPECTED: u64 = 0x105;
    /// A frame whose layout is wrong.
    pub const FRAME_ERROR: u64 = 0x106;
    /// The peer generates more load than the endpoint takes.
    pub const EXCESSIVE_LOAD: u64 = 0x107;
    /// A stream or push ID used wrongly.
    pub const ID_ERROR: u64 = 0x108;
    /// A SETTINGS frame with an error.
    pub const SETTINGS_ERROR: u64 = 0x109;
    /// A control stream that does not open with SETTINGS.
    pub const MISSING_SETTINGS: u64 = 0x10a;
    /// A request the server did not process: the client may retry it.
    pub const REQUEST_REJECTED: u64 = 0x10b;
    /// A request or response no longer wanted.
    pub const REQUEST_CANCELLED: u64 = 0x10c;
    /// A request stream that ended before the request was whole.
    pub const REQUEST_INCOMPLETE: u64 = 0x10d;
    /// A malformed message (section 4.1.2).
    pub const MESSAGE_ERROR: u64 = 0x10e;
    /// A field section QPACK cannot decode.
    pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
    /// An encoder instruction the decoder refuses.
    pub const QPACK_ENCODER_STREAM_ERROR: u64 = 0x201;
    /// A decoder instruction the encoder refuses.
    pub const QPACK_DECODER_STREAM_ERROR: u64 = 0x202;
}

/// Unidirectional stream types (RFC 9114 section 6.2, RFC 9204 section 4.2).
pub mod stream_type {
    /// The control stream.
    pub const CONTROL: u64 = 0x0;
    /// A push stream, server to client.
    pub const PUSH: u64 = 0x1;
    /// QPACK's encoder stream.
    pub const ENCODER: u64 = 0x2;
    /// QPACK's decoder stream.
    pub const DECODER: u64 = 0x3;
}

/// The largest frame an endpoint here buffers whole (any but DATA, which streams, and unknown
/// types, which are skipped): a peer announcing more is refused at the frame's header, before
/// any of it is read.
pub const FRAME_LIMIT: u64 = 32 * 1024;

/// What a peer did wrong, and how far the damage reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// The connection is closed with this code and reason.
    Connection(u64, &'static str),
    /// The stream is reset and stopped with this code; the connection goes on.
    Stream(u64),
}

/// Appends `v` as a QUIC variable-length integer (RFC 9000 section 16).
///
/// `v` is below 2^62, the largest a varint holds (lengths and IDs an endpoint makes itself);
/// a larger one would be written with its top bits lost.
pub fn put_varint(v: u64, out: &mut Vec<u8>) {
    debug_assert!(v < 1 << 62, "{v} does not fit a varint");
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&(0x4000 | v as u16).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&(0x8000_0000 | v as u32).to_be_bytes());
    } else {
        out.extend_from_slice(&(0xC000_0000_0000_0000 | v).to_be_bytes());
    }
}

/// A variable-length integer at the start of `b` and its length; `None` if `b` ends first.
pub fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    let mut v = u64::from(first & 0x3F);
    for x in b.get(1..len)? {
        v = (v << 8) | u64::from(*x);
    }
    Some((v, len))
}

/// Appends a frame's header: its type and payload length.
pub fn put_frame_header(kind: u64, len: u64, out: &mut Vec<u8>) {
    put_varint(kind, out);
    put_varint(len, out);
}

/// What to do with a frame whose header was read ([`Step::Begins`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Hand over its payload whole ([`Step::Whole`]), buffered if it arrives in pieces.
    Whole,
    /// Hand over its payload as it arrives ([`Step::Piece`]), nothing buffered.
    Pieces,
    /// Read past it.
    Skip,
}

/// What [`FrameReader::feed`] found.
#[derive(Debug)]
pub enum Step<'a> {
    /// A frame begins: the answer says what to do with its payload.
    Begins {
        /// Its type ([`kind`]).
        kind: u64,
        /// Its payload's length, as the peer announced it.
        len: u64,
    },
    /// A frame taken [`Take::Whole`], complete.
    Whole {
        /// Its type ([`kind`]).
        kind: u64,
        /// Its payload.
        payload: &'a [u8],
    },
    /// Part of a frame taken [`Take::Pieces`].
    Piece(&'a [u8]),
}

/// The frame being read.
#[derive(Debug, Clone, Copy)]
struct Current {
    kind: u64,
    /// Payload bytes still to come.
    left: u64,
    take: Take,
}

/// Frames read from a stream whose bytes arrive in chunks of any size.
#[derive(Debug, Default)]
pub struct FrameReader {
    /// A frame header cut by a chunk's end (at most two 8-byte varints).
    header: Vec<u8>,
    current: Option<Current>,
    /// A whole-taken frame's payload cut by a chunk's end.
    buf: Vec<u8>,
}

impl FrameReader {
    /// Bytes it holds for frames not yet whole: at most a frame header cut by a chunk's end
    /// (16 bytes) and a [`Take::Whole`] frame's payload, which the caller bounds at
    /// [`Step::Begins`].
    #[must_use]
    pub fn held(&self) -> usize {
        self.buf.len() + self.header.len()
    }

    /// Whether the stream may end here: between frames.
    pub fn between_frames(&self) -> bool {
        self.current.is_none() && self.header.is_empty()
    }

    /// Reads `input`, telling `on` of each step; `on`'s answer to [`Step::Begins`] says what
    /// to do with that frame (its answer to other steps is not used).
    ///
    /// # Errors
    /// The first violation `on` returns; the reader is then not to be fed again.
    pub fn feed(
        &mut self,
        mut input: &[u8],
        on: &mut impl FnMut(Step<'_>) -> Result<Take, Violation>,
    ) -> Result<(), Violation> {
        while !input.is_empty() {
            let Some(cur) = &mut self.current else {
                let (kind, len, used) = if self.header.is_empty() {
                    match frame_header(input) {
                        Some(h) => h,
                        None => {
                            self.header.extend_from_slice(input);
                            return Ok(());
                        }
                    }
                } else {
                    let had = self.header.len();
                    self.header.extend_from_slice(&input[..input.len().min(16)]);
                    let Some((kind, len, used)) = frame_header(&self.header) else {
                        return Ok(());
                    };
                    self.header.clear();
                    (kind, len, used - had)
                };
                input = &input[used..];
                let take = on(Step::Begins { kind, len })?;
                if len == 0 {
                    if take == Take::Whole {
                        on(Step::Whole { kind, payload: &[] })?;
                    }
                    continue;
                }
                self.current = Some(Current {
                    kind,
                    left: len,
                    take,
                });
                continue;
            };
            let n = usize::try_from(cur.left).map_or(input.len(), |l| l.min(input.len()));
            let (part, rest) = input.split_at(n);
            input = rest;
            cur.left -= n as u64;
            let (kind, take, done) = (cur.kind, cur.take, cur.left == 0);
            if done {
                self.current = None;
            }
            match take {
                Take::Skip => {}
                Take::Pieces => {
                    on(Step::Piece(part))?;
                }
                Take::Whole if done && self.buf.is_empty() => {
                    on(Step::Whole {
                        kind,
                        payload: part,
                    })?;
                }
                Take::Whole => {
                    self.buf.extend_from_slice(part);
                    if done {
                        let payload = std::mem::take(&mut self.buf);
                        on(Step::Whole {
                            kind,
                            payload: &payload,
                        })?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A frame header at the start of `b`: type, length, and the bytes they took.
fn frame_header(b: &[u8]) -> Option<(u64, u64, usize)> {
    let (kind, n) = varint(b)?;
    let (len, m) = varint(&b[n..])?;
    Some((kind, len, n + m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_frame_header(kind, payload.len() as u64, &mut out);
        out.extend_from_slice(payload);
        out
    }

    /// Frames handed over whole, by type.
    type Wholes = Vec<(u64, Vec<u8>)>;

    /// Feeds `bytes` in pieces of `size`, taking HEADERS whole, DATA in pieces, skipping the
    /// rest; returns the whole ones, the DATA, and the most held at once.
    fn read_in_pieces(bytes: &[u8], size: usize) -> (Wholes, Vec<u8>, usize) {
        let mut r = FrameReader::default();
        let (mut whole, mut data, mut peak) = (Vec::new(), Vec::new(), 0);
        for piece in bytes.chunks(size) {
            r.feed(piece, &mut |step| {
                Ok(match step {
                    Step::Begins { kind, .. } => match kind {
                        kind::HEADERS => Take::Whole,
                        kind::DATA => Take::Pieces,
                        _ => Take::Skip,
                    },
                    Step::Whole { kind, payload } => {
                        whole.push((kind, payload.to_vec()));
                        Take::Skip
                    }
                    Step::Piece(p) => {
                        data.extend_from_slice(p);
                        Take::Skip
                    }
                })
            })
            .unwrap();
            peak = peak.max(r.held());
        }
        assert!(r.between_frames());
        (whole, data, peak)
    }

    #[test]
    fn frames_cut_anywhere_read_the_same() {
        let mut bytes = frame(kind::HEADERS, b"head");
        bytes.extend(frame(0x21, &[7; 300]));
        bytes.extend(frame(kind::DATA, &[1; 100]));
        bytes.extend(frame(kind::HEADERS, &[]));
        bytes.extend(frame(kind::DATA, &[2; 70]));
        let mut want_data = vec![1; 100];
        want_data.extend([2; 70]);
        for size in [1, 2, 3, 7, 64, 1000] {
            let (whole, data, peak) = read_in_pieces(&bytes, size);
            assert_eq!(
                whole,
                vec![
                    (kind::HEADERS, b"head".to_vec()),
                    (kind::HEADERS, Vec::new())
                ],
                "{size}"
            );
            assert_eq!(data, want_data, "{size}");
            // Only a HEADERS payload cut by a piece's end, or a header, is held; the skipped
            // frame and DATA never are.
            assert!(peak <= 16, "{size}: {peak}");
        }
    }

    #[test]
    fn a_violation_stops_the_reader() {
        let mut r = FrameReader::default();
        let bytes = frame(kind::DATA, b"x");
        let got = r.feed(&bytes, &mut |_| {
            Err(Violation::Stream(code::FRAME_UNEXPECTED))
        });
        assert_eq!(got, Err(Violation::Stream(code::FRAME_UNEXPECTED)));
    }

    #[test]
    fn a_stream_cut_inside_a_frame_is_not_between_frames() {
        let mut r = FrameReader::default();
        let bytes = frame(kind::HEADERS, b"abcdef");
        r.feed(&bytes[..4], &mut |_| Ok(Take::Whole)).unwrap();
        assert!(!r.between_frames());
        let mut r = FrameReader::default();
        r.feed(&[0x40], &mut |_| Ok(Take::Whole)).unwrap();
        assert!(!r.between_frames(), "half a header");
    }

    #[test]
    fn varints_round_trip_at_each_length() {
        for v in [
            0,
            63,
            64,
            16_383,
            16_384,
            (1 << 30) - 1,
            1 << 30,
            (1 << 62) - 1,
        ] {
            let mut b = Vec::new();
            put_varint(v, &mut b);
            assert_eq!(varint(&b), Some((v, b.len())), "{v}");
            assert_eq!(varint(&b[..b.len() - 1]), None, "{v} cut short");
        }
    }
}
