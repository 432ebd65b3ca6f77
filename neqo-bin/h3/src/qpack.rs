//! QPACK (RFC 9204) as an endpoint that offers no dynamic table uses it: field sections
//! decoded against the static table alone, and encoded with static references and plain
//! literals. With `SETTINGS_QPACK_MAX_TABLE_CAPACITY` 0 (the default, which endpoints here
//! leave in place) a peer may reference no dynamic entry, so a section decodes on its own, in
//! any order, and nothing is kept between sections; and an encoder that uses no dynamic table
//! needs nothing from its peer's settings either.

/// The static table (RFC 9204 appendix A): (name, value) by index.
pub const STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains",
    ),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains; preload",
    ),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    (
        "content-security-policy",
        "script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// Static entries [`put_response`] names.
const STATUS: usize = 24;
const CONTENT_LENGTH: usize = 4;
const CONTENT_TYPE: usize = 44;
const LOCATION: usize = 12;

/// Why a field section could not be decoded: `QPACK_DECOMPRESSION_FAILED` (section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Undecodable(pub &'static str);

/// Decodes strings; reused between sections so that a section costs no allocation unless a
/// string is Huffman-coded.
#[derive(Debug, Default)]
pub struct Decoder {
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Decoder {
    /// Hands each field line of `section` to `field` as (name, value), in order.
    ///
    /// # Errors
    /// The section references a dynamic entry or one past the static table, or is cut short,
    /// or a Huffman string is invalid; or `field` refused a line (its error is returned).
    pub fn fields<E: From<Undecodable>>(
        &mut self,
        section: &[u8],
        mut field: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut b = section;
        let required_insert_count = int(&mut b, 8)?;
        if required_insert_count != 0 {
            return Err(Undecodable("a reference to a dynamic table of capacity 0").into());
        }
        // The base is meaningless without dynamic references.
        int(&mut b, 7)?;
        while let Some(&first) = b.first() {
            if first & 0x80 != 0 {
                // Indexed field line.
                let dynamic = first & 0x40 == 0;
                let (name, value) = static_entry(dynamic, int(&mut b, 6)?)?;
                field(name.as_bytes(), value.as_bytes())?;
            } else if first & 0x40 != 0 {
                // Literal field line with name reference.
                let dynamic = first & 0x10 == 0;
                let (name, _) = static_entry(dynamic, int(&mut b, 4)?)?;
                let value = string(&mut b, 7, &mut self.value)?.unwrap_or(&self.value);
                field(name.as_bytes(), value)?;
            } else if first & 0x20 != 0 {
                // Literal field line with literal name.
                let name = string(&mut b, 3, &mut self.name)?.unwrap_or(&self.name);
                let value = string(&mut b, 7, &mut self.value)?.unwrap_or(&self.value);
                field(name, value)?;
            } else {
                return Err(Undecodable("a post-base reference to a dynamic table").into());
            }
        }
        Ok(())
    }
}

fn static_entry(dynamic: bool, index: u64) -> Result<(&'static str, &'static str), Undecodable> {
    if dynamic {
        return Err(Undecodable("a reference to a dynamic table of capacity 0"));
    }
    usize::try_from(index)
        .ok()
        .and_then(|i| STATIC.get(i))
        .copied()
        .ok_or(Undecodable("a static index past the table"))
}

/// A prefixed integer (RFC 7541 section 5.1) with an `bits`-bit prefix, taken off `b`.
fn int(b: &mut &[u8], bits: u32) -> Result<u64, Undecodable> {
    const CUT: Undecodable = Undecodable("a field section cut short");
    let (&first, mut rest) = b.split_first().ok_or(CUT)?;
    let max = (1u64 << bits) - 1;
    let mut v = u64::from(first) & max;
    if v == max {
        let mut shift = 0;
        loop {
            let (&byte, r) = rest.split_first().ok_or(CUT)?;
            rest = r;
            if shift > 56 {
                return Err(Undecodable("an integer over 62 bits"));
            }
            v += u64::from(byte & 0x7F) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
    }
    *b = rest;
    Ok(v)
}

/// A string literal whose length has a `bits`-bit prefix, after the Huffman flag just above
/// it: a plain one borrowed from `b`, or `None` for a Huffman-coded one, decoded into
/// `scratch`.
fn string<'a>(
    b: &mut &'a [u8],
    bits: u32,
    scratch: &mut Vec<u8>,
) -> Result<Option<&'a [u8]>, Undecodable> {
    let huffman = b.first().is_some_and(|f| f & (1 << bits) != 0);
    let len = int(b, bits)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= b.len())
        .ok_or(Undecodable("a string past the section's end"))?;
    let (s, rest) = b.split_at(len);
    *b = rest;
    if !huffman {
        return Ok(Some(s));
    }
    scratch.clear();
    const INVALID: Undecodable = Undecodable("an invalid Huffman string");
    httlib_huffman::decode(s, scratch, httlib_huffman::DecoderSpeed::FourBits)
        .map_err(|_| INVALID)?;
    // RFC 7541 section 5.2: the padding is under 8 bits, all ones (the EOS code's first bits);
    // the decoder takes any short padding.
    let bits: usize = scratch
        .iter()
        .map(|&c| usize::from(httlib_huffman::encoder::table::ENCODE_TABLE[usize::from(c)].0))
        .sum();
    let padding = (8 * s.len())
        .checked_sub(bits)
        .filter(|&p| p < 8)
        .ok_or(INVALID)?;
    let ones = (1u8 << padding) - 1;
    if s.last().is_some_and(|&l| l & ones != ones) {
        return Err(INVALID);
    }
    Ok(None)
}

/// Appends a prefixed integer with a `bits`-bit prefix whose higher bits are `flags`.
fn put_int(flags: u8, bits: u32, v: u64, out: &mut Vec<u8>) {
    let max = (1u64 << bits) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = v - max;
    while rest >= 0x80 {
        out.push((rest & 0x7F) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends a field line for static entry `name` with `value`: the entry itself when it holds
/// that value, else a literal (not Huffman-coded) with its name.
fn put_field(name: usize, value: &str, out: &mut Vec<u8>) {
    put_named(name, value.as_bytes(), out);
}

/// The static entries with `name` (RFC 9204 appendix A), in order: a match, which the
/// compiler turns into a length switch and a few comparisons, rather than a scan of the
/// table for each line encoded.
const fn entries_named(name: &[u8]) -> &'static [u8] {
    match name {
        b":authority" => &[0],
        b":path" => &[1],
        b"age" => &[2],
        b"content-disposition" => &[3],
        b"content-length" => &[4],
        b"cookie" => &[5],
        b"date" => &[6],
        b"etag" => &[7],
        b"if-modified-since" => &[8],
        b"if-none-match" => &[9],
        b"last-modified" => &[10],
        b"link" => &[11],
        b"location" => &[12],
        b"referer" => &[13],
        b"set-cookie" => &[14],
        b":method" => &[15, 16, 17, 18, 19, 20, 21],
        b":scheme" => &[22, 23],
        b":status" => &[24, 25, 26, 27, 28, 63, 64, 65, 66, 67, 68, 69, 70, 71],
        b"accept" => &[29, 30],
        b"accept-encoding" => &[31],
        b"accept-ranges" => &[32],
        b"access-control-allow-headers" => &[33, 34, 75],
        b"access-control-allow-origin" => &[35],
        b"cache-control" => &[36, 37, 38, 39, 40, 41],
        b"content-encoding" => &[42, 43],
        b"content-type" => &[44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54],
        b"range" => &[55],
        b"strict-transport-security" => &[56, 57, 58],
        b"vary" => &[59, 60],
        b"x-content-type-options" => &[61],
        b"x-xss-protection" => &[62],
        b"accept-language" => &[72],
        b"access-control-allow-credentials" => &[73, 74],
        b"access-control-allow-methods" => &[76, 77, 78],
        b"access-control-expose-headers" => &[79],
        b"access-control-request-headers" => &[80],
        b"access-control-request-method" => &[81, 82],
        b"alt-svc" => &[83],
        b"authorization" => &[84],
        b"content-security-policy" => &[85],
        b"early-data" => &[86],
        b"expect-ct" => &[87],
        b"forwarded" => &[88],
        b"if-range" => &[89],
        b"origin" => &[90],
        b"purpose" => &[91],
        b"server" => &[92],
        b"timing-allow-origin" => &[93],
        b"upgrade-insecure-requests" => &[94],
        b"user-agent" => &[95],
        b"x-forwarded-for" => &[96],
        b"x-frame-options" => &[97, 98],
        _ => &[],
    }
}

/// [`put_field`] for any value: `name` is the first entry with that name.
fn put_named(name: usize, value: &[u8], out: &mut Vec<u8>) {
    put_line(entries_named(STATIC[name].0.as_bytes()), value, out);
}

/// Appends a field line for a name the static table holds at `entries` (not empty): the entry
/// that holds `value` too, else a literal with the first entry's name.
fn put_line(entries: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let exact = entries
        .iter()
        .find(|&&i| STATIC[usize::from(i)].1.as_bytes() == value);
    if let Some(&i) = exact {
        put_int(0xC0, 6, u64::from(i), out);
        return;
    }
    // Literal field line with name reference: N clear, T set (static).
    put_int(0x50, 4, u64::from(entries[0]), out);
    put_int(0x00, 7, value.len() as u64, out);
    out.extend_from_slice(value);
}

/// Appends a field section of `fields` (name, value) in order: each line the static entry that
/// holds it, or a literal with the static entry's name where one has it, or a literal with its
/// name; no string Huffman-coded. What the lines hold is not checked here: the head rules
/// ([`head`](crate::head)) say what a message may carry.
pub fn put_section<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, out: &mut Vec<u8>) {
    // Required Insert Count 0, Base 0.
    out.extend_from_slice(&[0, 0]);
    for (name, value) in fields {
        match entries_named(name) {
            [] => {
                // Literal field line with literal name: N clear, not Huffman-coded.
                put_int(0x20, 3, name.len() as u64, out);
                out.extend_from_slice(name);
                put_int(0x00, 7, value.len() as u64, out);
                out.extend_from_slice(value);
            }
            entries => put_line(entries, value, out),
        }
    }
}

/// Appends a response's field section: `:status`, `content-length`, and `content-type` when
/// given.
pub fn put_response(
    status: u16,
    content_length: u64,
    content_type: Option<&str>,
    out: &mut Vec<u8>,
) {
    // Required Insert Count 0, Base 0.
    out.extend_from_slice(&[0, 0]);
    let mut digits = itoa::Buffer::new();
    put_field(STATUS, digits.format(status), out);
    put_field(CONTENT_LENGTH, digits.format(content_length), out);
    if let Some(t) = content_type {
        put_field(CONTENT_TYPE, t, out);
    }
}

/// Appends a `location` field line (RFC 9110 section 10.2.2) to a section that
/// [`put_response`] began.
pub fn put_location(location: &str, out: &mut Vec<u8>) {
    put_field(LOCATION, location, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(section: &[u8]) -> Result<Vec<(String, String)>, Undecodable> {
        let mut out = Vec::new();
        Decoder::default().fields(section, |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ));
            Ok::<_, Undecodable>(())
        })?;
        Ok(out)
    }

    /// The name index the encoder uses is the static table's, entry for entry.
    #[test]
    fn entries_by_name_are_the_static_tables() {
        for (i, (name, _)) in STATIC.iter().enumerate() {
            let entries = entries_named(name.as_bytes());
            assert!(entries.contains(&u8::try_from(i).unwrap()), "{name}");
            let all: Vec<u8> = (0..99u8)
                .filter(|&j| STATIC[usize::from(j)].0 == *name)
                .collect();
            assert_eq!(entries, all.as_slice(), "{name}");
        }
        assert!(entries_named(b"x-not-there").is_empty());
        assert!(
            entries_named(b"Content-Length").is_empty(),
            "names are lower case"
        );
    }

    #[test]
    fn responses_decode_to_what_was_encoded() {
        let mut s = Vec::new();
        put_response(200, 12_345, Some("text/css"), &mut s);
        // :status 200 and the content-type are static entries, indexed: one byte each.
        assert_eq!(s[2], 0xC0 | 25);
        assert_eq!(*s.last().unwrap(), 0xC0 | 51);
        let want = [
            (":status", "200"),
            ("content-length", "12345"),
            ("content-type", "text/css"),
        ];
        let got = decode(&s).unwrap();
        assert_eq!(
            got,
            want.map(|(n, v)| (n.to_owned(), v.to_owned())).to_vec()
        );
        let mut s = Vec::new();
        put_response(431, 0, Some("application/octet-stream"), &mut s);
        assert_eq!(&s[2..4], &[0x5F, 0x09], "a literal with :status's name");
        assert_eq!(
            decode(&s).unwrap(),
            vec![
                (":status".into(), "431".into()),
                ("content-length".into(), "0".into()),
                ("content-type".into(), "application/octet-stream".into()),
            ]
        );
        let mut s = Vec::new();
        put_response(301, 0, None, &mut s);
        put_location("/a%20b/?x=1", &mut s);
        assert_eq!(
            decode(&s).unwrap(),
            vec![
                (":status".into(), "301".into()),
                ("content-length".into(), "0".into()),
                ("location".into(), "/a%20b/?x=1".into()),
            ]
        );
    }

    #[test]
    fn any_section_decodes_to_what_was_encoded() {
        let long = "v".repeat(300);
        let fields: Vec<(&str, &str)> = vec![
            (":method", "GET"),            // an exact entry
            (":status", "500"),            // an exact entry in :status's second run
            (":status", "299"),            // a literal with :status's name
            (":path", "/a?b=c"),           // a literal with a name reference
            ("x-custom-header", "1"),      // a literal name, over 7 bytes
            ("x", ""),                     // a short literal name, an empty value
            ("user-agent", long.as_str()), // a value over the 7-bit prefix
        ];
        let mut s = Vec::new();
        put_section(
            fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut s,
        );
        assert_eq!(s[2], 0xC0 | 17, ":method GET indexed");
        assert_eq!(
            &s[3..5],
            &[0xFF, 71 - 63],
            ":status 500 indexed, past the 6-bit prefix"
        );
        let got = decode(&s).unwrap();
        let want: Vec<_> = fields
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(got, want);
    }

    /// RFC 7541 appendix C.4.1's Huffman-coded "www.example.com", as the value of a QPACK
    /// literal with the literal name "x".
    #[test]
    fn huffman_strings_are_decoded() {
        let mut s = vec![0, 0, 0x21, b'x', 0x8C];
        s.extend_from_slice(&[0xF1, 0xE3, 0xC2, 0xE5, 0xF2, 0x3A, 0x6B, 0xA0, 0xAB, 0x90]);
        s.extend_from_slice(&[0xF4, 0xFF]);
        assert_eq!(
            decode(&s).unwrap(),
            vec![("x".into(), "www.example.com".into())]
        );
        // Padding that is not the EOS code's leading ones is refused.
        assert!(decode(&[0, 0, 0x21, b'x', 0x81, 0x00]).is_err());
        assert!(decode(&s[..s.len() - 1]).is_err(), "cut short");
    }

    #[test]
    fn dynamic_references_and_bad_indices_are_refused() {
        for section in [
            &[0x01, 0x00][..],               // Required Insert Count 1
            &[0x00, 0x00, 0x80],             // indexed, dynamic
            &[0x00, 0x00, 0xFF, 0x24],       // static 99: past the table
            &[0x00, 0x00, 0x10],             // indexed post-base
            &[0x00, 0x00, 0x40, 0x00],       // literal with dynamic name reference
            &[0x00, 0x00, 0x00, 0x00],       // literal with post-base name reference
            &[0x00, 0x00, 0x51, 0x05, b'a'], // a value cut short
            &[
                0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01,
            ],
        ] {
            assert!(decode(section).is_err(), "{section:02x?}");
        }
        assert_eq!(decode(&[0x00, 0x00]).unwrap(), Vec::new());
    }

    #[test]
    fn the_static_table_names_what_the_rfc_numbers() {
        assert_eq!(STATIC[0], (":authority", ""));
        assert_eq!(STATIC[17], (":method", "GET"));
        assert_eq!(STATIC[25], (":status", "200"));
        assert_eq!(STATIC[52], ("content-type", "text/html; charset=utf-8"));
        assert_eq!(STATIC[71], (":status", "500"));
        assert_eq!(STATIC[95], ("user-agent", ""));
        assert_eq!(STATIC[98], ("x-frame-options", "sameorigin"));
    }
}
