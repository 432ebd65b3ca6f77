//! `perf`: draft-banks-quic-performance as secnetperf speaks it. One bidirectional stream per
//! request; the client sends an 8-byte big-endian response length ([`request_header`]), then
//! any number of upload bytes, then FIN; the server reads to FIN and answers with that many
//! pattern bytes ([`crate::pattern`]) and FIN. A stream that ends before its 8 bytes is
//! malformed (neqo-server resets it with [`crate::hq::BAD_REQUEST`]).
//!
//! Nothing here depends on a QUIC stack.

use std::fmt;

/// Length of the request header.
pub const HEADER_LEN: usize = 8;

/// The request header asking for `download` response bytes.
#[must_use]
pub const fn request_header(download: u64) -> [u8; HEADER_LEN] {
    download.to_be_bytes()
}

/// A request stream ended before its header was complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortHeader {
    /// Header bytes that did arrive.
    pub received: usize,
}

impl fmt::Display for ShortHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "perf request ended after {} of its {HEADER_LEN} header bytes",
            self.received
        )
    }
}

impl std::error::Error for ShortHeader {}

/// The server's side of a request stream: fed the stream's bytes in order, it keeps the header
/// and counts (and drops) the upload.
#[derive(Debug, Clone, Default)]
pub struct RequestReader {
    header: [u8; HEADER_LEN],
    header_len: usize,
    uploaded: u64,
}

impl RequestReader {
    /// Takes the next bytes of the stream.
    pub fn push(&mut self, data: &[u8]) {
        let take = (HEADER_LEN - self.header_len).min(data.len());
        self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
        self.header_len += take;
        self.uploaded += (data.len() - take) as u64;
    }

    /// Upload bytes seen so far (the bytes after the header).
    #[must_use]
    pub const fn uploaded(&self) -> u64 {
        self.uploaded
    }

    /// At the stream's FIN: the response length asked for.
    ///
    /// # Errors
    /// The stream ended before the header was complete.
    pub const fn response_len(&self) -> Result<u64, ShortHeader> {
        if self.header_len < HEADER_LEN {
            return Err(ShortHeader {
                received: self.header_len,
            });
        }
        Ok(u64::from_be_bytes(self.header))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_in_any_split() {
        let header = request_header(0x0102_0304_0506_0708);
        assert_eq!(header, [1, 2, 3, 4, 5, 6, 7, 8]);
        for split in 0..=HEADER_LEN {
            let mut r = RequestReader::default();
            r.push(&header[..split]);
            r.push(&[]);
            r.push(&header[split..]);
            assert_eq!(r.response_len(), Ok(0x0102_0304_0506_0708), "{split}");
            assert_eq!(r.uploaded(), 0);
        }
    }

    #[test]
    fn short_header_is_an_error() {
        let mut r = RequestReader::default();
        assert_eq!(r.response_len(), Err(ShortHeader { received: 0 }));
        r.push(&[0; 7]);
        assert_eq!(r.response_len(), Err(ShortHeader { received: 7 }));
        assert!(
            r.response_len()
                .unwrap_err()
                .to_string()
                .contains("7 of its 8")
        );
    }

    #[test]
    fn bytes_after_the_header_are_upload() {
        let mut r = RequestReader::default();
        let mut stream = request_header(1000).to_vec();
        stream.extend(std::iter::repeat_n(0xaa, 5000));
        for piece in stream.chunks(3) {
            r.push(piece);
        }
        assert_eq!(r.response_len(), Ok(1000));
        assert_eq!(r.uploaded(), 5000);
        let mut max = RequestReader::default();
        max.push(&request_header(u64::MAX));
        assert_eq!(max.response_len(), Ok(u64::MAX));
    }
}
