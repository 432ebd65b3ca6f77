//! The properties the fuzz targets check (`fuzz/fuzz_targets/h3_*.rs`, `qpack_section.rs`),
//! here so that the unit tests replay the checked-in corpora with them. Each takes arbitrary
//! bytes and panics where a rule of this crate is broken:
//!
//! - [`request_stream`]: the bytes as a request stream (HEADERS, DATA, trailers, anything),
//!   read by the [`FrameReader`] with the head and trailer rules, fed whole, cut in two at
//!   every byte, and one byte at a time: the same frames, the same body, the same heads and
//!   the same verdict each way, and never more held than a frame header and the one frame
//!   taken whole.
//! - [`response_stream`]: the first byte says whether the request was `HEAD`, the rest is a
//!   response stream read by the client's [`ResponseReader`], fed the same three ways: the
//!   same parts (interim heads, head, trailers with their fields), the same body and the same
//!   verdict each way (a body over its content-length is handed over up to it, wherever it
//!   was cut); a body never past its content-length, and a whole one exactly it.
//! - [`uni_streams`]: the bytes as a peer's unidirectional stream, read by a server and by a
//!   client ([`PeerStreams`]), fed the same three ways: the same verdict each way.
//! - [`qpack_section`]: the bytes as a field section: every prefix decodes to an error or to a
//!   prefix of the whole's lines; what decodes re-encodes ([`put_section`]) to a section that
//!   decodes to the same lines; a head the rules take, re-encoded from the lines they handed
//!   on, is taken again as the same head; the request rules on the decoded lines
//!   ([`head::request_lines`]) say what they say on the section.
//!
//! An input is read up to [`MAX_INPUT`] bytes: cutting at every byte costs its square.

use crate::{
    control::Role,
    frame::{FrameReader, Step, Take, Violation, kind},
    head::{self, Refused},
    qpack::{Decoder, put_section},
    response::{Part, ResponseReader, Sections},
    uni::{Fed, PeerStreams, UniStream},
};

/// The most of an input read.
pub const MAX_INPUT: usize = 1024;

/// The field section limit the properties read with: small, so that inputs reach it.
const LIMIT: u64 = 512;

/// The bytes an input gives, in the three ways each is fed: whole, cut at `at`, one byte at
/// a time.
fn ways(data: &[u8]) -> impl Iterator<Item = Vec<&[u8]>> {
    let whole = std::iter::once(vec![data]);
    let cuts = (1..data.len()).map(move |at| {
        let (a, b) = data.split_at(at);
        vec![a, b]
    });
    let bytes = std::iter::once(data.chunks(1).collect());
    whole.chain(cuts).chain(bytes)
}

/// What a request stream's reading saw, with the body's pieces joined (they depend on the
/// cuts), for comparison between ways of feeding it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    frames: Vec<(u64, u64)>,
    heads: Vec<Result<head::RequestHead, Refused>>,
    trailers: Vec<Result<(), Refused>>,
    body: Vec<u8>,
    verdict: Option<Violation>,
    between_frames: bool,
}

/// Reads `pieces` as a request stream: HEADERS taken whole up to the limit (the first a head,
/// later ones trailers), DATA in pieces, the rest skipped.
fn read_request(pieces: &[&[u8]]) -> Seen {
    let mut reader = FrameReader::default();
    let mut decoder = Decoder::default();
    let mut seen = Seen::default();
    for piece in pieces {
        let fed = reader.feed(piece, &mut |step| {
            Ok(match step {
                Step::Begins { kind, len } => {
                    seen.frames.push((kind, len));
                    match kind {
                        kind::HEADERS if len <= LIMIT => Take::Whole,
                        kind::HEADERS => {
                            return Err(Violation::Stream(crate::frame::code::EXCESSIVE_LOAD));
                        }
                        kind::DATA => Take::Pieces,
                        _ => Take::Skip,
                    }
                }
                Step::Whole { payload, .. } => {
                    if seen.heads.is_empty() {
                        let mut lines = Vec::new();
                        let got = head::request(&mut decoder, payload, LIMIT, |n, v| {
                            lines.push((n.to_vec(), v.to_vec()));
                        });
                        check_lines(&lines);
                        seen.heads.push(got);
                    } else {
                        let got = head::trailers(&mut decoder, payload, LIMIT, |_, _| {});
                        seen.trailers.push(got);
                    }
                    Take::Skip
                }
                Step::Piece(p) => {
                    seen.body.extend_from_slice(p);
                    Take::Skip
                }
            })
        });
        assert!(
            reader.held() <= 16 + LIMIT as usize,
            "held {} bytes",
            reader.held()
        );
        if let Err(v) = fed {
            seen.verdict = Some(v);
            break;
        }
    }
    seen.between_frames = seen.verdict.is_none() && reader.between_frames();
    seen
}

/// Lines the head rules handed on are ones they allow.
fn check_lines(lines: &[(Vec<u8>, Vec<u8>)]) {
    for (n, v) in lines {
        let name = n.strip_prefix(b":").unwrap_or(n);
        assert!(head::valid_name(name), "a name handed on: {n:02x?}");
        assert!(head::valid_value(v), "a value handed on: {v:02x?}");
    }
}

/// See the [module](self).
///
/// # Panics
/// Where the reading differs between ways of feeding it, or holds too much.
pub fn request_stream(data: &[u8]) {
    let data = &data[..data.len().min(MAX_INPUT)];
    let want = read_request(&[data]);
    for pieces in ways(data) {
        let got = read_request(&pieces);
        assert_eq!(
            got,
            want,
            "fed as {:?}",
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>()
        );
    }
}

/// What the client's reading of a response saw, with the body's pieces joined.
#[derive(Debug, Default, PartialEq, Eq)]
struct Response {
    /// Each section: its kind ('I'nterim, 'H'ead, 'T'railers), status and fields.
    sections: Vec<(char, u16, Lines)>,
    body: Vec<u8>,
    content_length: Option<u64>,
    verdict: Option<Result<(), Violation>>,
    why: Option<&'static str>,
}

/// Reads `pieces` as a response stream to a `HEAD` request or not, then ends it.
fn read_response(head_request: bool, pieces: &[&[u8]]) -> Response {
    let mut reader = ResponseReader::new(head_request);
    let mut decoder = Decoder::default();
    let mut fields = Vec::new();
    let mut sections = Sections {
        decoder: &mut decoder,
        limit: LIMIT,
        fields: Some(&mut fields),
    };
    let mut seen = Response::default();
    let mut fed = Ok(());
    for piece in pieces {
        fed = reader.feed(piece, &mut sections, &mut |part| match part {
            Part::Interim { head, fields } => {
                seen.sections.push(('I', head.status, fields.to_vec()))
            }
            Part::Head { head, fields } => {
                seen.content_length = head.content_length;
                seen.sections.push(('H', head.status, fields.to_vec()));
            }
            Part::Trailers { fields } => seen.sections.push(('T', 0, fields.to_vec())),
            Part::Data(d) => seen.body.extend_from_slice(d),
        });
        assert!(
            reader.held() <= 16 + LIMIT as usize,
            "held {} bytes",
            reader.held()
        );
        if fed.is_err() {
            break;
        }
    }
    let verdict = fed.and_then(|()| reader.end());
    if let Some(n) = seen.content_length {
        assert!(
            seen.body.len() as u64 <= n,
            "a body past its content-length"
        );
        if verdict.is_ok() && !head_request && !seen.body.is_empty() {
            assert_eq!(
                seen.body.len() as u64,
                n,
                "a whole body is its content-length"
            );
        }
    }
    if matches!(verdict, Err(Violation::Stream(_))) {
        seen.why = Some(reader.why());
    }
    for (_, _, lines) in &seen.sections {
        check_lines(lines);
    }
    seen.verdict = Some(verdict);
    seen
}

/// See the [module](self).
///
/// # Panics
/// Where the reading differs between ways of feeding it, holds too much, or takes a body
/// that is not its content-length.
pub fn response_stream(data: &[u8]) {
    let data = &data[..data.len().min(MAX_INPUT)];
    let Some((&flags, stream)) = data.split_first() else {
        return;
    };
    let head_request = flags & 1 == 1;
    let want = read_response(head_request, &[stream]);
    for pieces in ways(stream) {
        let got = read_response(head_request, &pieces);
        assert_eq!(
            got,
            want,
            "fed as {:?}",
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>()
        );
    }
}

/// Feeds `pieces` as one unidirectional stream to a reader of `role`, then ends it.
fn read_uni(role: Role, pieces: &[&[u8]]) -> Result<Fed, Violation> {
    let mut peer = PeerStreams::new(role);
    let mut stream = UniStream::default();
    for piece in pieces {
        if peer.feed(&mut stream, piece)? == Fed::Unknown {
            return Ok(Fed::Unknown);
        }
        assert!(stream.held() <= 16 + crate::frame::FRAME_LIMIT as usize);
    }
    peer.ended(&stream)?;
    Ok(Fed::More)
}

/// See the [module](self).
///
/// # Panics
/// Where the verdict differs between ways of feeding it.
pub fn uni_streams(data: &[u8]) {
    let data = &data[..data.len().min(MAX_INPUT)];
    for role in [Role::Server, Role::Client] {
        let want = read_uni(role, &[data]);
        for pieces in ways(data) {
            assert_eq!(
                read_uni(role, &pieces),
                want,
                "{role:?}, {} pieces",
                pieces.len()
            );
        }
    }
}

type Lines = Vec<(Vec<u8>, Vec<u8>)>;

fn decode(section: &[u8]) -> Result<Lines, crate::qpack::Undecodable> {
    let mut lines = Vec::new();
    Decoder::default().fields(section, |n, v| {
        lines.push((n.to_vec(), v.to_vec()));
        Ok::<_, crate::qpack::Undecodable>(())
    })?;
    Ok(lines)
}

fn encode(lines: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    put_section(
        lines.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
        &mut out,
    );
    out
}

/// See the [module](self).
///
/// # Panics
/// Where decoding, encoding or the head rules disagree with themselves.
pub fn qpack_section(data: &[u8]) {
    let data = &data[..data.len().min(MAX_INPUT)];
    let whole = decode(data);
    for at in 0..data.len() {
        if let (Ok(part), Ok(all)) = (decode(&data[..at]), &whole) {
            assert!(
                all.starts_with(&part),
                "a prefix of {at} bytes decoded to other lines"
            );
        }
    }
    let Ok(lines) = whole else { return };
    assert_eq!(decode(&encode(&lines)).as_ref(), Ok(&lines), "re-encoded");
    let mut handed = Vec::new();
    let request = head::request(&mut Decoder::default(), data, LIMIT, |n, v| {
        handed.push((n.to_vec(), v.to_vec()));
    });
    let as_lines = head::request_lines(
        lines.iter().map(|(n, v)| (n.as_slice(), v.as_slice())),
        LIMIT,
    );
    // The lines' head has no path: its caller has it.
    let pathless = request.clone().map(|h| head::RequestHead {
        path: String::new(),
        ..h
    });
    assert_eq!(
        as_lines, pathless,
        "the rules on the lines and on the section"
    );
    if let Ok(h) = request {
        check_lines(&handed);
        assert_eq!(handed, lines, "a request head taken hands on every line");
        let again = head::request(&mut Decoder::default(), &encode(&handed), LIMIT, |_, _| {});
        assert_eq!(again, Ok(h), "a request head re-encoded");
    }
    let mut handed = Vec::new();
    if let Ok(h) = head::response(&mut Decoder::default(), data, LIMIT, |n, v| {
        handed.push((n.to_vec(), v.to_vec()));
    }) {
        check_lines(&handed);
        assert!((100..600).contains(&h.status) && h.status != 101);
        let again = head::response(&mut Decoder::default(), &encode(&handed), LIMIT, |_, _| {});
        assert_eq!(again, Ok(h), "a response head re-encoded");
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::frame::{Violation, kind};

    /// Every checked-in input of `target`'s corpus, through `property`.
    fn replay(target: &str, property: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus")
            .join(target);
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            property(&std::fs::read(&path).unwrap());
            n += 1;
        }
        assert!(n > 0, "no inputs in {}", dir.display());
    }

    /// The reading the properties compare sees what a request stream holds.
    #[test]
    fn a_request_stream_is_read_as_frames_heads_and_body() {
        use crate::frame::{code, put_frame_header};
        let mut section = Vec::new();
        crate::qpack::put_section(
            [
                (&b":method"[..], &b"POST"[..]),
                (b":scheme", b"https"),
                (b":authority", b"h"),
                (b":path", b"/up"),
            ],
            &mut section,
        );
        let mut stream = Vec::new();
        put_frame_header(kind::HEADERS, section.len() as u64, &mut stream);
        stream.extend_from_slice(&section);
        put_frame_header(kind::DATA, 0, &mut stream);
        put_frame_header(kind::DATA, 3, &mut stream);
        stream.extend_from_slice(b"abc");
        let seen = super::read_request(&[&stream]);
        assert_eq!(seen.heads.len(), 1);
        assert_eq!(seen.heads[0].as_ref().unwrap().path, "/up");
        assert_eq!(
            (seen.body.as_slice(), seen.between_frames),
            (&b"abc"[..], true)
        );
        super::request_stream(&stream);
        put_frame_header(kind::HEADERS, super::LIMIT + 1, &mut stream);
        let seen = super::read_request(&[&stream]);
        assert_eq!(seen.verdict, Some(Violation::Stream(code::EXCESSIVE_LOAD)));
    }

    #[test]
    fn the_request_stream_corpus_holds() {
        replay("h3_request_stream", super::request_stream);
    }

    /// The reading the response property compares sees interim heads, the head, the body and
    /// trailers, and a body short of its content-length as a stream error.
    #[test]
    fn a_response_stream_is_read_as_its_parts() {
        use crate::frame::{code, put_frame_header};
        let section = |fields: &[(&[u8], &[u8])]| {
            let mut s = Vec::new();
            crate::qpack::put_section(fields.iter().copied(), &mut s);
            let mut f = Vec::new();
            put_frame_header(kind::HEADERS, s.len() as u64, &mut f);
            f.extend(s);
            f
        };
        let mut stream = section(&[(b":status", b"103")]);
        stream.extend(section(&[(b":status", b"200"), (b"content-length", b"3")]));
        put_frame_header(kind::DATA, 0, &mut stream);
        put_frame_header(kind::DATA, 3, &mut stream);
        stream.extend_from_slice(b"abc");
        stream.extend(section(&[(b"x-t", b"1")]));
        let seen = super::read_response(false, &[&stream]);
        let kinds: Vec<(char, u16)> = seen.sections.iter().map(|s| (s.0, s.1)).collect();
        assert_eq!(kinds, [('I', 103), ('H', 200), ('T', 0)]);
        assert_eq!(seen.body, b"abc");
        assert_eq!(seen.verdict, Some(Ok(())));
        let mut input = vec![0];
        input.extend(&stream);
        super::response_stream(&input);
        // Without the last DATA frame and the trailers.
        let cut = &stream[..stream.len() - section(&[(b"x-t", b"1")]).len() - 5];
        let seen = super::read_response(false, &[cut]);
        assert_eq!(
            seen.verdict,
            Some(Err(Violation::Stream(code::MESSAGE_ERROR)))
        );
        assert_eq!(seen.why, Some("a body shorter than its content-length"));
    }

    #[test]
    fn the_response_stream_corpus_holds() {
        replay("h3_response_stream", super::response_stream);
    }

    #[test]
    fn the_uni_streams_corpus_holds() {
        replay("h3_uni_streams", super::uni_streams);
    }

    #[test]
    fn the_qpack_section_corpus_holds() {
        replay("qpack_section", super::qpack_section);
    }
}
