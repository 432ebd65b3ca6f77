//! What a message's field sections may hold (RFC 9114 sections 4.1.2-4.4), in one place for
//! both directions: a request's head as a server takes it, a response's head and either
//! side's trailers as their reader takes them. The pseudo-headers a message has, each once and
//! before the fields; field names lower-case tokens; values without NUL, CR, LF or whitespace
//! at their ends; no connection-specific fields; one content-length, all digits; for `http`
//! and `https`, an authority (`:authority` or `host`, the same when both) that is not empty
//! and has no user information, and a path that is absolute (or `*` for `OPTIONS`); for
//! `CONNECT`, an authority and no scheme or path.
//!
//! Each function decodes a section with a [`Decoder`], checks every line as it comes, and hands
//! each line it takes to `line`, pseudo-headers included, so that a caller that keeps the
//! fields (an `http::HeaderMap`) and one that keeps only what it acts on (the built-in file
//! server) share the rules; what it acts on comes back checked ([`RequestHead`],
//! [`ResponseHead`]). A malformed message is a stream error (`H3_MESSAGE_ERROR`), one QPACK
//! cannot decode a connection error, and one over the reader's
//! `SETTINGS_MAX_FIELD_SECTION_SIZE` is refused before it is all decoded.

use crate::qpack::{Decoder, Undecodable};

/// The request methods the rules and the built-in file server tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// `POST`.
    Post,
    /// `OPTIONS`, which alone may ask for the path `*`.
    Options,
    /// `CONNECT`: an authority, no scheme or path (section 4.4).
    Connect,
    /// Any other token.
    Other,
}

impl Method {
    /// How an access log spells it: the method's name, or `OTHER`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Options => "OPTIONS",
            Self::Connect => "CONNECT",
            Self::Other => "OTHER",
        }
    }
}

/// A request's head: what a server acts on, checked. The lines themselves went to the
/// caller's `line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `:method`.
    pub method: Method,
    /// `:path` (empty for `CONNECT`).
    pub path: String,
    /// `content-length`, if the request has one.
    pub content_length: Option<u64>,
}

/// A response's head, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    /// `:status`, 100 to 599 (101 excepted: HTTP/3 has no upgrade).
    pub status: u16,
    /// `content-length`, if the response has one.
    pub content_length: Option<u64>,
}

impl ResponseHead {
    /// Whether it is an interim response (1xx), which a final one follows on the same stream.
    #[must_use]
    pub const fn is_interim(&self) -> bool {
        self.status < 200
    }
}

/// Why a field section was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// QPACK could not decode it: a connection error (`QPACK_DECOMPRESSION_FAILED`).
    Undecodable(&'static str),
    /// Decoded but malformed (section 4.1.2): the stream is reset with `H3_MESSAGE_ERROR`.
    Malformed(&'static str),
    /// Over the reader's `SETTINGS_MAX_FIELD_SECTION_SIZE`: a server answers 431.
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

/// A token's character (RFC 9110 section 5.6.2).
const fn tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// A field name HTTP/3 accepts: a token in lower case (section 4.2, RFC 9110 section 5.1).
#[must_use]
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&c| tchar(c) && !c.is_ascii_uppercase())
}

/// A field value HTTP/3 accepts: no NUL, CR or LF, no whitespace at either end.
#[must_use]
pub fn valid_value(value: &[u8]) -> bool {
    !value.iter().any(|&c| matches!(c, 0 | b'\r' | b'\n'))
        && !value.first().is_some_and(|&c| c == b' ' || c == b'\t')
        && !value.last().is_some_and(|&c| c == b' ' || c == b'\t')
}

/// A `content-length` value: digits only, no sign, no list, no space (RFC 9110 section 8.6).
fn content_length(value: &[u8]) -> Result<u64, Refused> {
    std::str::from_utf8(value)
        .ok()
        .filter(|v| !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or(Refused::Malformed("a content-length that is no number"))
}

/// Which section is read: what its pseudo-headers may be, and whether `te` may appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Request,
    Response,
    Trailers,
}

/// The checks every line of a section goes through, and what the regular fields said.
#[derive(Debug)]
struct Lines {
    section: Section,
    limit: u64,
    size: u64,
    regular: bool,
    content_length: Option<u64>,
    /// Every `host` value, the first kept to compare the others (and `:authority`) with.
    host: Option<Vec<u8>>,
}

impl Lines {
    const fn new(section: Section, limit: u64) -> Self {
        Self {
            section,
            limit,
            size: 0,
            regular: false,
            content_length: None,
            host: None,
        }
    }

    /// Checks a line; `Ok(Some(pseudo))` for a pseudo-header (its name without the colon),
    /// which the section's own rules take, `Ok(None)` for a regular field, taken.
    fn check<'a>(&mut self, name: &'a [u8], value: &[u8]) -> Result<Option<&'a [u8]>, Refused> {
        // Section 4.2.2: names and values, and 32 bytes each.
        self.size += name.len() as u64 + value.len() as u64 + 32;
        if self.size > self.limit {
            return Err(Refused::TooLarge);
        }
        if !valid_value(value) {
            return Err(Refused::Malformed("a field value with a forbidden byte"));
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular {
                return Err(Refused::Malformed("a pseudo-header after a field"));
            }
            if self.section == Section::Trailers {
                return Err(Refused::Malformed("a pseudo-header in trailers"));
            }
            return Ok(Some(pseudo));
        }
        self.regular = true;
        if !valid_name(name) {
            return Err(Refused::Malformed(
                "a field name that is no lower-case token",
            ));
        }
        // Section 4.2: TE, with "trailers" only, is the one exception, and only in requests.
        let te_allowed = self.section == Section::Request && value == b"trailers";
        if CONNECTION_SPECIFIC.contains(&name) || (name == b"te" && !te_allowed) {
            return Err(Refused::Malformed("a connection-specific field"));
        }
        if self.section == Section::Trailers {
            return Ok(None);
        }
        if name == b"content-length" {
            let n = content_length(value)?;
            if self.content_length.replace(n).is_some_and(|was| was != n) {
                return Err(Refused::Malformed("content-lengths that differ"));
            }
        } else if name == b"host" && self.section == Section::Request {
            match &self.host {
                Some(was) if was.as_slice() != value => {
                    return Err(Refused::Malformed("host fields that differ"));
                }
                Some(_) => {}
                None => self.host = Some(value.to_vec()),
            }
        }
        Ok(None)
    }
}

/// Whether an authority names user information, which HTTP/3 forbids (section 4.3.1).
fn has_userinfo(authority: &[u8]) -> bool {
    authority.contains(&b'@')
}

/// An authority kept to compare with a later `host` field: inline up to 64 bytes, so that a
/// head with an ordinary one costs no allocation.
#[derive(Debug)]
enum Kept {
    Inline { bytes: [u8; 64], len: u8 },
    Heap(Vec<u8>),
}

impl Kept {
    fn new(v: &[u8]) -> Self {
        let mut bytes = [0; 64];
        match (bytes.get_mut(..v.len()), u8::try_from(v.len())) {
            (Some(to), Ok(len)) => {
                to.copy_from_slice(v);
                Self::Inline { bytes, len }
            }
            _ => Self::Heap(v.to_vec()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Inline { bytes, len } => &bytes[..usize::from(*len)],
            Self::Heap(v) => v,
        }
    }
}

/// A request's `:path`, as the rules need it.
#[derive(Debug)]
struct Path {
    /// The path itself, when kept ([`RequestHead::path`]).
    kept: String,
    absolute: bool,
    asterisk: bool,
}

/// A request head's rules, line by line: what [`request`] decodes a section into and what
/// [`request_lines`] takes as it is, one copy of them.
struct RequestRules {
    lines: Lines,
    /// Whether the path is kept for the head (a server's), or only checked (a client's own).
    keep_path: bool,
    // The pseudo-headers as read: the method, whether the scheme is one that needs an
    // authority, the path, and the authority (kept only to compare with `host`).
    method: Option<Method>,
    scheme: Option<bool>,
    path: Option<Path>,
    authority: Option<Kept>,
}

impl RequestRules {
    const fn new(limit: u64, keep_path: bool) -> Self {
        Self {
            lines: Lines::new(Section::Request, limit),
            keep_path,
            method: None,
            scheme: None,
            path: None,
            authority: None,
        }
    }

    /// Takes one line.
    fn take(&mut self, name: &[u8], value: &[u8]) -> Result<(), Refused> {
        const TWICE: Refused = Refused::Malformed("a pseudo-header twice");
        let Some(pseudo) = self.lines.check(name, value)? else {
            return Ok(());
        };
        let Self {
            method,
            scheme,
            path,
            authority,
            keep_path,
            ..
        } = self;
        let twice = match pseudo {
            b"method" => {
                let m = match value {
                    b"GET" => Method::Get,
                    b"HEAD" => Method::Head,
                    b"POST" => Method::Post,
                    b"OPTIONS" => Method::Options,
                    b"CONNECT" => Method::Connect,
                    v if !v.is_empty() && v.iter().all(|&c| tchar(c)) => Method::Other,
                    _ => return Err(Refused::Malformed("a :method that is no token")),
                };
                method.replace(m).is_some()
            }
            b"scheme" => scheme
                .replace(value == b"https" || value == b"http")
                .is_some(),
            b"path" => {
                let p = std::str::from_utf8(value)
                    .ok()
                    .filter(|p| !p.is_empty())
                    .ok_or(Refused::Malformed(
                        "an empty :path, or one that is no UTF-8",
                    ))?;
                let seen = Path {
                    kept: if *keep_path {
                        p.to_owned()
                    } else {
                        String::new()
                    },
                    absolute: p.starts_with('/'),
                    asterisk: p == "*",
                };
                path.replace(seen).is_some()
            }
            b"authority" => authority.replace(Kept::new(value)).is_some(),
            _ => return Err(Refused::Malformed("a pseudo-header requests do not have")),
        };
        if twice {
            return Err(TWICE);
        }
        Ok(())
    }

    /// The head, once every line is taken.
    fn finish(self) -> Result<RequestHead, Refused> {
        let Self {
            lines,
            method,
            scheme,
            path,
            authority,
            ..
        } = self;
        let Some(method) = method else {
            return Err(Refused::Malformed("no :method"));
        };
        if let (Some(a), Some(h)) = (&authority, &lines.host)
            && a.as_slice() != h.as_slice()
        {
            return Err(Refused::Malformed(":authority and host differ"));
        }
        let authority = authority
            .as_ref()
            .map(Kept::as_slice)
            .or(lines.host.as_deref());
        if authority.is_some_and(has_userinfo) {
            return Err(Refused::Malformed("an authority with user information"));
        }
        if method == Method::Connect {
            // Section 4.4: no :scheme or :path, and an authority.
            if scheme.is_some() || path.is_some() {
                return Err(Refused::Malformed("a CONNECT with a :scheme or a :path"));
            }
            if authority.is_none_or(|a| a.is_empty()) {
                return Err(Refused::Malformed("a CONNECT without an authority"));
            }
            return Ok(RequestHead {
                method,
                path: String::new(),
                content_length: lines.content_length,
            });
        }
        let (Some(http), Some(path)) = (scheme, path) else {
            return Err(Refused::Malformed("no :scheme or no :path"));
        };
        if http {
            // Section 4.3.1: an authority that is not empty, and an origin-form path (or the
            // asterisk-form, for OPTIONS).
            if authority.is_none_or(|a| a.is_empty()) {
                return Err(Refused::Malformed(
                    "no :authority and no host, or an empty one",
                ));
            }
            let asterisk = path.asterisk && method == Method::Options;
            if !path.absolute && !asterisk {
                return Err(Refused::Malformed("a :path that is not absolute"));
            }
        }
        Ok(RequestHead {
            method,
            path: path.kept,
            content_length: lines.content_length,
        })
    }
}

/// Decodes and checks a request's head, within a `SETTINGS_MAX_FIELD_SECTION_SIZE` of
/// `limit`; each line taken goes to `line`.
///
/// # Errors
/// Why it was not taken.
pub fn request(
    decoder: &mut Decoder,
    section: &[u8],
    limit: u64,
    mut line: impl FnMut(&[u8], &[u8]),
) -> Result<RequestHead, Refused> {
    let mut rules = RequestRules::new(limit, true);
    decoder.fields(section, |name, value| {
        rules.take(name, value)?;
        line(name, value);
        Ok::<_, Refused>(())
    })?;
    rules.finish()
}

/// Checks a request's head given as its lines, by the rules [`request`] holds a decoded one to
/// (a client checks its own before sending it), within a limit of `limit`. The head it returns
/// has no path: the caller has it.
///
/// # Errors
/// Why it would not be taken.
pub fn request_lines<'a>(
    lines: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    limit: u64,
) -> Result<RequestHead, Refused> {
    let mut rules = RequestRules::new(limit, false);
    for (name, value) in lines {
        rules.take(name, value)?;
    }
    rules.finish()
}

/// Decodes and checks a response's head (interim or final), within a
/// `SETTINGS_MAX_FIELD_SECTION_SIZE` of `limit`; each line taken goes to `line`.
///
/// # Errors
/// Why it was not taken.
pub fn response(
    decoder: &mut Decoder,
    section: &[u8],
    limit: u64,
    mut line: impl FnMut(&[u8], &[u8]),
) -> Result<ResponseHead, Refused> {
    let mut lines = Lines::new(Section::Response, limit);
    let mut status = None::<u16>;
    decoder.fields(section, |name, value| {
        let Some(pseudo) = lines.check(name, value)? else {
            line(name, value);
            return Ok(());
        };
        if pseudo != b"status" {
            return Err(Refused::Malformed("a pseudo-header responses do not have"));
        }
        // RFC 9110 section 15: three digits, 100 to 599.
        let s = match value {
            &[a @ b'1'..=b'5', b, c] if b.is_ascii_digit() && c.is_ascii_digit() => {
                u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
            }
            _ => return Err(Refused::Malformed("a :status that is no status code")),
        };
        if s == 101 {
            // Section 4.5: HTTP/3 has no Upgrade.
            return Err(Refused::Malformed("a 101 Switching Protocols"));
        }
        if status.replace(s).is_some() {
            return Err(Refused::Malformed("a pseudo-header twice"));
        }
        line(name, value);
        Ok(())
    })?;
    let status = status.ok_or(Refused::Malformed("no :status"))?;
    Ok(ResponseHead {
        status,
        content_length: lines.content_length,
    })
}

/// Decodes and checks a trailer section (either direction), within a
/// `SETTINGS_MAX_FIELD_SECTION_SIZE` of `limit`; each line taken goes to `line`.
///
/// # Errors
/// Why it was not taken.
pub fn trailers(
    decoder: &mut Decoder,
    section: &[u8],
    limit: u64,
    mut line: impl FnMut(&[u8], &[u8]),
) -> Result<(), Refused> {
    let mut lines = Lines::new(Section::Trailers, limit);
    decoder.fields(section, |name, value| {
        lines.check(name, value)?;
        line(name, value);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qpack::put_section;

    /// A request's field section limit in these tests, as neqo-server's.
    const LIMIT: u64 = 8192;

    fn section(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut s = Vec::new();
        put_section(
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut s,
        );
        s
    }

    /// The request's head and the lines handed on.
    fn parse(fields: &[(&str, &str)]) -> Result<(RequestHead, usize), Refused> {
        let mut n = 0;
        let h = request(&mut Decoder::default(), &section(fields), LIMIT, |_, _| {
            n += 1;
        })?;
        Ok((h, n))
    }

    fn parse_response(fields: &[(&str, &str)]) -> Result<ResponseHead, Refused> {
        response(&mut Decoder::default(), &section(fields), LIMIT, |_, _| {})
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "localhost"),
        (":path", "/index.html"),
    ];

    #[test]
    fn a_well_formed_head_is_taken_and_every_line_handed_on() {
        let (h, n) = parse(&GET).unwrap();
        assert_eq!(
            (h.method, h.path.as_str(), n),
            (Method::Get, "/index.html", 4)
        );
        let mut post = GET.to_vec();
        post[0].1 = "POST";
        post.push(("content-length", "12"));
        post.push(("content-length", "12"));
        let (h, n) = parse(&post).unwrap();
        assert_eq!((h.method, h.content_length, n), (Method::Post, Some(12), 6));
        let connect = [(":method", "CONNECT"), (":authority", "example.com:443")];
        assert_eq!(parse(&connect).unwrap().0.method, Method::Connect);
        let options = [(":method", "OPTIONS"), GET[1], GET[2], (":path", "*")];
        assert_eq!(parse(&options).unwrap().0.method, Method::Options);
        let mut both = GET.to_vec();
        both.push(("host", "localhost"));
        assert!(parse(&both).is_ok(), ":authority and host that agree");
        let mut host = vec![GET[0], GET[1], GET[3]];
        host.push(("host", "localhost"));
        assert!(parse(&host).is_ok(), "host in place of :authority");
        let other = [(":method", "GET"), (":scheme", "ftp"), (":path", "x")];
        assert!(
            parse(&other).is_ok(),
            "a scheme with no authority of its own"
        );
        let mut te = GET.to_vec();
        te.push(("te", "trailers"));
        assert!(parse(&te).is_ok());
    }

    #[test]
    fn malformed_heads_are_refused() {
        let cases: Vec<Vec<(&str, &str)>> = vec![
            GET[1..].to_vec(),                                       // no :method
            vec![(":method", "G T"), GET[1], GET[2], GET[3]],        // no token
            vec![GET[0], GET[2], GET[3]],                            // no :scheme
            vec![GET[0], GET[1], GET[2]],                            // no :path
            vec![GET[0], GET[1], GET[3]],                            // no authority, no host
            vec![GET[0], GET[1], (":authority", ""), GET[3]],        // an empty authority
            vec![GET[0], GET[1], (":authority", "u@h"), GET[3]],     // user information
            vec![GET[0], GET[1], GET[2], (":path", "index.html")],   // not absolute
            vec![GET[0], GET[1], GET[2], (":path", "*")],            // * but not OPTIONS
            [&GET[..], &[GET[0]]].concat(),                          // :method twice
            [&GET[..], &[(":path", "/other")]].concat(),             // :path twice
            vec![GET[0], ("accept", "*/*"), GET[1], GET[2], GET[3]], // pseudo after field
            [&GET[..], &[(":status", "200")]].concat(),              // a response's pseudo-header
            [&GET[..], &[(":protocol", "websocket")]].concat(),      // no extended CONNECT
            [&GET[..], &[("Accept", "x")]].concat(),                 // upper case
            [&GET[..], &[("upgrade", "h2c")]].concat(),              // connection-specific
            [&GET[..], &[("transfer-encoding", "chunked")]].concat(),
            [&GET[..], &[("connection", "close")]].concat(),
            [&GET[..], &[("te", "gzip")]].concat(), // te other than trailers
            [&GET[..], &[("x", "a\nb")]].concat(),  // a newline in a value
            [&GET[..], &[("x", " a")]].concat(),    // leading whitespace
            [&GET[..], &[("content-length", "1x")]].concat(),
            [&GET[..], &[("content-length", "abc")]].concat(),
            [&GET[..], &[("content-length", "+1")]].concat(),
            [&GET[..], &[("content-length", "1, 1")]].concat(),
            [
                &GET[..],
                &[("content-length", "1"), ("content-length", "2")],
            ]
            .concat(),
            [&GET[..], &[("host", "elsewhere")]].concat(), // differs from :authority
            [&GET[..], &[("host", "localhost"), ("host", "x")]].concat(),
            vec![(":method", "CONNECT")], // no authority
            vec![(":method", "CONNECT"), GET[1], GET[2], GET[3]], // with :scheme and :path
        ];
        for fields in cases {
            assert!(
                matches!(parse(&fields), Err(Refused::Malformed(_))),
                "{fields:?}: {:?}",
                parse(&fields)
            );
        }
    }

    #[test]
    fn a_head_over_the_field_section_limit_is_too_large() {
        let long = "a".repeat(100);
        let mut fields = GET.to_vec();
        // The four pseudo-headers count 185 bytes, each of these 133.
        for _ in 0..(LIMIT as usize - 185) / 133 {
            fields.push(("x", &long));
        }
        assert!(parse(&fields).is_ok());
        fields.push(("x", &long));
        assert_eq!(parse(&fields).unwrap_err(), Refused::TooLarge);
    }

    #[test]
    fn responses_get_the_response_rules() {
        let ok = parse_response(&[(":status", "200"), ("content-length", "12")]).unwrap();
        assert_eq!(
            (ok.status, ok.content_length, ok.is_interim()),
            (200, Some(12), false)
        );
        let early = parse_response(&[(":status", "103"), ("link", "</a.css>")]).unwrap();
        assert!(early.is_interim());
        for fields in [
            vec![],                                       // no :status
            vec![(":status", "20")],                      // two digits
            vec![(":status", "600")],                     // past 599
            vec![(":status", "099")],                     // under 100
            vec![(":status", "2x0")],                     // no number
            vec![(":status", "101")],                     // no upgrade in HTTP/3
            vec![(":status", "200"), (":status", "200")], // twice
            vec![(":status", "200"), (":path", "/")],     // a request's pseudo-header
            vec![("server", "x"), (":status", "200")],    // pseudo after a field
            vec![(":status", "200"), ("te", "trailers")], // te in a response
            vec![(":status", "200"), ("transfer-encoding", "chunked")],
            vec![(":status", "200"), ("content-length", "-1")],
            vec![
                (":status", "200"),
                ("content-length", "1"),
                ("content-length", "2"),
            ],
        ] {
            assert!(
                matches!(parse_response(&fields), Err(Refused::Malformed(_))),
                "{fields:?}"
            );
        }
    }

    #[test]
    fn trailers_have_no_pseudo_headers() {
        let take = |fields: &[(&str, &str)]| {
            trailers(&mut Decoder::default(), &section(fields), LIMIT, |_, _| {})
        };
        assert_eq!(take(&[("grpc-status", "0")]), Ok(()));
        assert!(matches!(
            take(&[(":status", "200")]),
            Err(Refused::Malformed(_))
        ));
        assert!(matches!(
            take(&[("connection", "x")]),
            Err(Refused::Malformed(_))
        ));
        assert!(matches!(
            take(&[("Upper", "x")]),
            Err(Refused::Malformed(_))
        ));
    }
}
