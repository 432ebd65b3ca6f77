//! What a caller hands the socket to send: [`Transmit`], and its ECN codepoint.

use std::net::{IpAddr, SocketAddr};

/// Largest UDP payload that fits any IP version a socket may use: IPv4's 65 535 minus the
/// 20-byte IP and 8-byte UDP headers. (IPv6 allows 65 527; a dual-stack socket may send both.)
/// A GSO run is cut so that no syscall carries more than this.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// The ECN codepoint of an IP header (RFC 3168), without the "not ECT" value, which is `None`
/// wherever an `Option<EcnCodepoint>` appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EcnCodepoint {
    /// ECT(0), `0b10`.
    Ect0 = 0b10,
    /// ECT(1), `0b01`.
    Ect1 = 0b01,
    /// Congestion experienced, `0b11`.
    Ce = 0b11,
}

impl EcnCodepoint {
    /// The codepoint of the two low bits of a TOS or traffic-class byte; `None` for not-ECT.
    #[must_use]
    pub const fn from_bits(bits: u8) -> Option<Self> {
        match bits & 0b11 {
            0b10 => Some(Self::Ect0),
            0b01 => Some(Self::Ect1),
            0b11 => Some(Self::Ce),
            _ => None,
        }
    }

    /// The two bits of the codepoint.
    #[must_use]
    pub const fn bits(self) -> u8 {
        self as u8
    }
}

/// One or more datagrams to one destination: a single datagram, or, with `segment_size`, a
/// run of equal-size segments (the last may be shorter) that the kernel splits (GSO) or the
/// socket sends one by one where GSO is off.
///
/// The contents are borrowed (`Transmit<&[u8]>`) to send at once, or owned
/// (`Transmit<Vec<u8>>`) to wait in a [`TxQueue`](crate::TxQueue). Made with
/// [`Transmit::new`] and the `with_` setters (or by setting the fields):
///
/// ```
/// # use neqo_udp::{EcnCodepoint, Transmit};
/// let peer = "192.0.2.1:4433".parse().unwrap();
/// let payload = [0u8; 3000];
/// let run = Transmit::new(peer, &payload[..])
///     .with_segment_size(Some(1200))
///     .with_ecn(Some(EcnCodepoint::Ect0));
/// assert_eq!(run.datagrams(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transmit<C> {
    /// Where to send it.
    pub destination: SocketAddr,
    /// ECN codepoint to mark every datagram with.
    pub ecn: Option<EcnCodepoint>,
    /// The payload: one datagram, or the segments back to back.
    pub contents: C,
    /// Segment size of a run; `None` (or a size not below the length) means one datagram.
    pub segment_size: Option<usize>,
    /// Source address to send from (`IP_PKTINFO`), for a socket bound to a wildcard address.
    pub src_ip: Option<IpAddr>,
}

impl<C> Transmit<C> {
    /// One datagram of `contents` to `destination`, no ECN, no source address.
    #[must_use]
    pub const fn new(destination: SocketAddr, contents: C) -> Self {
        Self {
            destination,
            ecn: None,
            contents,
            segment_size: None,
            src_ip: None,
        }
    }

    /// The same transmit with every datagram marked with `ecn`.
    #[must_use]
    pub fn with_ecn(mut self, ecn: Option<EcnCodepoint>) -> Self {
        self.ecn = ecn;
        self
    }

    /// The same transmit cut into segments of `segment_size` bytes (`None`: one datagram).
    #[must_use]
    pub fn with_segment_size(mut self, segment_size: Option<usize>) -> Self {
        self.segment_size = segment_size;
        self
    }

    /// The same transmit sent from `src_ip`.
    #[must_use]
    pub fn with_src_ip(mut self, src_ip: Option<IpAddr>) -> Self {
        self.src_ip = src_ip;
        self
    }

    /// The same destination, ECN, segment size and source with `contents` instead.
    #[must_use]
    pub fn with_contents<D>(&self, contents: D) -> Transmit<D> {
        Transmit {
            destination: self.destination,
            ecn: self.ecn,
            contents,
            segment_size: self.segment_size,
            src_ip: self.src_ip,
        }
    }
}

impl<C: AsRef<[u8]>> Transmit<C> {
    /// The transmit with its contents borrowed, to send.
    #[must_use]
    pub fn borrowed(&self) -> Transmit<&[u8]> {
        self.with_contents(self.contents.as_ref())
    }

    /// The length of each datagram but the last: the segment size of a run, else the length.
    #[must_use]
    pub fn stride(&self) -> usize {
        let len = self.contents.as_ref().len();
        match self.segment_size {
            Some(seg) if seg > 0 && seg < len => seg,
            _ => len,
        }
    }

    /// Datagrams this transmit carries (an empty one is one empty datagram).
    #[must_use]
    pub fn datagrams(&self) -> usize {
        datagrams_in(self.contents.as_ref().len(), self.stride())
    }
}

/// Datagrams in `len` bytes cut at `stride` (at least one: an empty datagram is a datagram).
pub(crate) const fn datagrams_in(len: usize, stride: usize) -> usize {
    if stride == 0 || len <= stride {
        1
    } else {
        len.div_ceil(stride)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_bits_round_trip() {
        for e in [EcnCodepoint::Ect0, EcnCodepoint::Ect1, EcnCodepoint::Ce] {
            assert_eq!(EcnCodepoint::from_bits(e.bits()), Some(e));
            // The upper six bits (DSCP) are ignored.
            assert_eq!(EcnCodepoint::from_bits(e.bits() | 0b1010_1000), Some(e));
        }
        assert_eq!(EcnCodepoint::from_bits(0), None);
    }

    #[test]
    fn datagram_counts() {
        let dest = "127.0.0.1:1".parse().unwrap();
        let data = [0u8; 2500];
        let t = |seg| Transmit::new(dest, &data).with_segment_size(seg);
        assert_eq!(t(None).datagrams(), 1);
        assert_eq!(t(Some(1200)).datagrams(), 3);
        assert_eq!(t(Some(1200)).stride(), 1200);
        assert_eq!(t(Some(2500)).datagrams(), 1);
        assert_eq!(t(Some(9000)).stride(), 2500);
        assert_eq!(
            t(Some(0)).datagrams(),
            1,
            "a zero segment size means one datagram"
        );
        assert_eq!(Transmit::new(dest, &[]).datagrams(), 1);
        assert_eq!(datagrams_in(2400, 1200), 2);
    }

    #[test]
    fn setters_set_their_field() {
        let dest = "127.0.0.1:1".parse().unwrap();
        let src = "127.0.0.2".parse().unwrap();
        let t = Transmit::new(dest, b"abc")
            .with_ecn(Some(EcnCodepoint::Ce))
            .with_segment_size(Some(1))
            .with_src_ip(Some(src));
        assert_eq!(
            t,
            Transmit {
                destination: dest,
                ecn: Some(EcnCodepoint::Ce),
                contents: b"abc",
                segment_size: Some(1),
                src_ip: Some(src),
            }
        );
    }
}
