//! A request's head as RFC 9114 section 4.3 wants it: the pseudo-headers a request has, each
//! once and before the fields; field names lower-case tokens; no connection-specific fields;
//! a content-length that is a number.

use super::{
    MAX_FIELD_SECTION,
    qpack::{Decoder, Undecodable},
};

/// The request methods the server tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    Post,
    /// Any other, `CONNECT` included: answered 405.
    Other,
}

impl Method {
    /// As the access log spells it.
    pub(super) const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Other => "OTHER",
        }
    }
}

/// A request's head: what the server acts on.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) method: Method,
    /// `:path` (empty for `CONNECT`).
    pub(crate) path: String,
    pub(crate) content_length: Option<u64>,
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

/// A token's character (RFC 9110 section 5.6.2).
fn tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// A field name HTTP/3 accepts: a token in lower case (section 4.2, RFC 9110 section 5.1).
pub(super) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&c| tchar(c) && !c.is_ascii_uppercase())
}

/// A field value HTTP/3 accepts: no NUL, CR or LF, no whitespace at either end.
pub(super) fn valid_value(value: &[u8]) -> bool {
    !value.iter().any(|&c| matches!(c, 0 | b'\r' | b'\n'))
        && !value.first().is_some_and(|&c| c == b' ' || c == b'\t')
        && !value.last().is_some_and(|&c| c == b' ' || c == b'\t')
}

/// Decodes and checks a request's head.
pub(super) fn head(decoder: &mut Decoder, section: &[u8]) -> Result<Head, Refused> {
    // The pseudo-headers as read, without a copy but for the path: the method (and whether
    // it is CONNECT, whose requests have no :scheme or :path), and whether the scheme is one
    // that needs an authority.
    let (mut method, mut scheme, mut path, mut authority) =
        (None::<(Method, bool)>, None::<bool>, None::<String>, false);
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
            const TWICE: Refused = Refused::Malformed("a pseudo-header twice");
            let twice = match pseudo {
                b"method" => {
                    let m = match value {
                        b"GET" => Method::Get,
                        b"HEAD" => Method::Head,
                        b"POST" => Method::Post,
                        v if !v.is_empty() && v.iter().all(|&c| tchar(c)) => Method::Other,
                        _ => return Err(Refused::Malformed("a :method that is no token")),
                    };
                    method.replace((m, value == b"CONNECT")).is_some()
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
                    path.replace(p.to_owned()).is_some()
                }
                b"authority" => std::mem::replace(&mut authority, true),
                _ => return Err(Refused::Malformed("a pseudo-header requests do not have")),
            };
            return if twice { Err(TWICE) } else { Ok(()) };
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
    let Some((method, connect)) = method else {
        return Err(Refused::Malformed("no :method"));
    };
    if connect {
        return Ok(Head {
            method,
            path: String::new(),
            content_length,
        });
    }
    let (Some(needs_authority), Some(path)) = (scheme, path) else {
        return Err(Refused::Malformed("no :scheme or no :path"));
    };
    if needs_authority && !authority && !host {
        return Err(Refused::Malformed("no :authority and no host"));
    }
    Ok(Head {
        method,
        path,
        content_length,
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
            vec![(":method", "G T"), GET[1], GET[2], GET[3]],        // no token
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
