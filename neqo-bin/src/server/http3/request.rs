//! A request stream as it arrives (RFC 9114 section 4.1): HEADERS, then DATA, then optional
//! trailers, unknown frames ignored anywhere; the request head checked as section 4.3 asks.

use std::ops::ControlFlow;

use quinn_proto::{Connection, StreamId, VarInt};

use super::{
    MAX_FIELD_SECTION,
    frames::{FRAME_LIMIT, FrameReader, Step, Take, Violation, code, kind},
    qpack::{Decoder, Undecodable},
};
use crate::body::{self, ReadEnd};

/// The request methods the server tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
    Get,
    Head,
    Post,
    /// Any other, `CONNECT` included: answered 405.
    Other,
}

/// A request's head: what the server acts on.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) method: Method,
    /// `:path` (empty for `CONNECT`).
    pub(super) path: String,
    pub(super) content_length: Option<u64>,
}

/// Why a head was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// QPACK could not decode it: a connection error.
    Undecodable(&'static str),
    /// Decoded but malformed (section 4.1.2): the stream is reset with `H3_MESSAGE_ERROR`.
    Malformed(&'static str),
    /// Over `SETTINGS_MAX_FIELD_SECTION_SIZE`: answered 431.
    TooLarge,
}

impl From<Undecodable> for Refused {
    fn from(u: Undecodable) -> Self {
        Self::Undecodable(u.0)
    }
}

/// Fields an intermediary would act on, which HTTP/3 forbids (section 4.2).
const CONNECTION_SPECIFIC: [&[u8]; 5] = [
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
];

/// A field name HTTP/3 accepts: a token in lower case (section 4.2, RFC 9110 section 5.1).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&c)
        })
}

/// A field value HTTP/3 accepts: no NUL, CR or LF, no whitespace at either end.
fn valid_value(value: &[u8]) -> bool {
    !value.iter().any(|&c| matches!(c, 0 | b'\r' | b'\n'))
        && !value.first().is_some_and(|&c| c == b' ' || c == b'\t')
        && !value.last().is_some_and(|&c| c == b' ' || c == b'\t')
}

/// Decodes and checks a request's head.
pub(super) fn head(decoder: &mut Decoder, section: &[u8]) -> Result<Head, Refused> {
    let (mut method, mut scheme, mut path, mut authority) = (None, None, None, false);
    let (mut host, mut regular, mut content_length, mut size) = (false, false, None, 0usize);
    decoder.fields(section, |name, value| {
        // RFC 9114 section 4.2.2: names and values, and 32 bytes each.
        size += name.len() + value.len() + 32;
        if size > MAX_FIELD_SECTION as usize {
            return Err(Refused::TooLarge);
        }
        if !valid_value(value) {
            return Err(Refused::Malformed("a field value with a forbidden byte"));
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if regular {
                return Err(Refused::Malformed("a pseudo-header after a field"));
            }
            let slot = match pseudo {
                b"method" => &mut method,
                b"scheme" => &mut scheme,
                b"path" => &mut path,
                b"authority" if !authority => {
                    authority = true;
                    return Ok(());
                }
                b"authority" => return Err(Refused::Malformed("a second :authority")),
                _ => return Err(Refused::Malformed("a pseudo-header requests do not have")),
            };
            if slot.replace(value.to_vec()).is_some() {
                return Err(Refused::Malformed("a pseudo-header twice"));
            }
            return Ok(());
        }
        regular = true;
        if !valid_name(name) {
            return Err(Refused::Malformed(
                "a field name that is no lower-case token",
            ));
        }
        if CONNECTION_SPECIFIC.contains(&name) || (name == b"te" && value != b"trailers") {
            return Err(Refused::Malformed("a connection-specific field"));
        }
        if name == b"host" {
            host = true;
        } else if name == b"content-length" {
            let n = std::str::from_utf8(value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(Refused::Malformed("a content-length that is no number"))?;
            if content_length.replace(n).is_some_and(|was| was != n) {
                return Err(Refused::Malformed("content-lengths that differ"));
            }
        }
        Ok(())
    })?;
    let method = match method.as_deref() {
        Some(b"GET") => Method::Get,
        Some(b"HEAD") => Method::Head,
        Some(b"POST") => Method::Post,
        Some(b"CONNECT") => {
            return Ok(Head {
                method: Method::Other,
                path: String::new(),
                content_length,
            });
        }
        Some(m) if valid_name(&m.to_ascii_lowercase()) => Method::Other,
        _ => return Err(Refused::Malformed("no :method, or one that is no token")),
    };
    let (Some(scheme), Some(path)) = (scheme, path) else {
        return Err(Refused::Malformed("no :scheme or no :path"));
    };
    if (scheme == b"https" || scheme == b"http") && !authority && !host {
        return Err(Refused::Malformed("no :authority and no host"));
    }
    let path = String::from_utf8(path)
        .ok()
        .filter(|p| !p.is_empty())
        .ok_or(Refused::Malformed(
            "an empty :path, or one that is no UTF-8",
        ))?;
    Ok(Head {
        method,
        path,
        content_length,
    })
}

/// Where a request's frames have got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before its HEADERS.
    Headers,
    /// After its HEADERS: DATA.
    Body,
    /// After trailers: nothing but unknown frames.
    Trailers,
}

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
            phase: Phase::Headers,
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
                if self.phase == Phase::Headers {
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
    const UNEXPECTED: Violation = Violation::Connection(
        code::FRAME_UNEXPECTED,
        "a frame a request stream may not carry there",
    );
    match step {
        Step::Begins { kind, len } => match (kind, *phase) {
            (kind::DATA, Phase::Body) => Ok(Take::Pieces),
            (kind::DATA, _) => Err(UNEXPECTED),
            (kind::HEADERS, _) if len > FRAME_LIMIT => Err(Violation::Stream(code::EXCESSIVE_LOAD)),
            (kind::HEADERS, Phase::Headers) => {
                *phase = Phase::Body;
                if len > MAX_FIELD_SECTION {
                    // Read past, unread: with no dynamic table nothing depends on it.
                    arrived.too_large = true;
                    return Ok(Take::Skip);
                }
                Ok(Take::Whole)
            }
            (kind::HEADERS, Phase::Body) => {
                *phase = Phase::Trailers;
                Ok(Take::Whole)
            }
            (kind::HEADERS, Phase::Trailers) => Err(UNEXPECTED),
            (
                kind::CANCEL_PUSH
                | kind::SETTINGS
                | kind::PUSH_PROMISE
                | kind::GOAWAY
                | kind::MAX_PUSH_ID,
                _,
            ) => Err(UNEXPECTED),
            (k, _) if kind::is_http2(k) => Err(UNEXPECTED),
            _ => Ok(Take::Skip),
        },
        Step::Whole { payload, .. } => {
            if *phase == Phase::Trailers {
                return trailers(decoder, payload).map(|()| Take::Skip);
            }
            match self::head(decoder, payload) {
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
/// carries) and checked, then dropped.
fn trailers(decoder: &mut Decoder, section: &[u8]) -> Result<(), Violation> {
    decoder
        .fields(section, |name, value| {
            if name.starts_with(b":") || !valid_name(name) || !valid_value(value) {
                return Err(Refused::Malformed(
                    "a pseudo-header or bad field in trailers",
                ));
            }
            Ok(())
        })
        .map_err(|r| match r {
            Refused::Undecodable(why) => {
                Violation::Connection(code::QPACK_DECOMPRESSION_FAILED, why)
            }
            Refused::Malformed(_) | Refused::TooLarge => Violation::Stream(code::MESSAGE_ERROR),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A section of plain literals with literal names.
    fn section(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut s = vec![0, 0];
        for (n, v) in fields {
            assert!(n.len() < 7 + 127 && v.len() < 127);
            if n.len() < 7 {
                s.push(0x20 | n.len() as u8);
            } else {
                s.extend_from_slice(&[0x27, (n.len() - 7) as u8]);
            }
            s.extend_from_slice(n.as_bytes());
            s.push(v.len() as u8);
            s.extend_from_slice(v.as_bytes());
        }
        s
    }

    fn parse(fields: &[(&str, &str)]) -> Result<Head, Refused> {
        head(&mut Decoder::default(), &section(fields))
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", "/index.html"),
    ];

    #[test]
    fn a_well_formed_head_is_taken() {
        let h = parse(&GET).unwrap();
        assert_eq!((h.method, h.path.as_str()), (Method::Get, "/index.html"));
        let mut post = GET.to_vec();
        post[0].1 = "POST";
        post.push(("content-length", "12"));
        let h = parse(&post).unwrap();
        assert_eq!((h.method, h.content_length), (Method::Post, Some(12)));
        assert_eq!(
            parse(&[(":method", "CONNECT")]).unwrap().method,
            Method::Other
        );
    }

    #[test]
    fn malformed_heads_are_refused() {
        let cases: Vec<Vec<(&str, &str)>> = vec![
            GET[1..].to_vec(),                                       // no :method
            vec![GET[0], GET[2], GET[3]],                            // no :scheme
            vec![GET[0], GET[1], GET[2]],                            // no :path
            vec![GET[0], GET[1], GET[3]],                            // no authority, no host
            [&GET[..], &[GET[0]]].concat(),                          // :method twice
            vec![GET[0], ("accept", "*/*"), GET[1], GET[2], GET[3]], // pseudo after field
            [&GET[..], &[(":status", "200")]].concat(),              // a response's pseudo-header
            [&GET[..], &[("Accept", "x")]].concat(),                 // upper case
            [&GET[..], &[("upgrade", "h2c")]].concat(),              // connection-specific
            [&GET[..], &[("te", "gzip")]].concat(),                  // te other than trailers
            [&GET[..], &[("x", "a\nb")]].concat(),                   // a newline in a value
            [&GET[..], &[("content-length", "1x")]].concat(),
        ];
        for fields in cases {
            assert!(
                matches!(parse(&fields), Err(Refused::Malformed(_))),
                "{fields:?}"
            );
        }
        let mut host = vec![GET[0], GET[1], GET[3]];
        host.push(("host", "localhost"));
        assert!(parse(&host).is_ok(), "host in place of :authority");
    }

    #[test]
    fn a_head_over_the_field_section_limit_is_too_large() {
        let long = "a".repeat(100);
        let mut fields = GET.to_vec();
        // The four pseudo-headers count 185 bytes, each of these 133.
        for _ in 0..(MAX_FIELD_SECTION as usize - 185) / 133 {
            fields.push(("x", &long));
        }
        assert!(parse(&fields).is_ok());
        fields.push(("x", &long));
        assert_eq!(parse(&fields).unwrap_err(), Refused::TooLarge);
    }
}
