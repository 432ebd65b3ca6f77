//! Conversions between this crate's types and quinn-proto 0.11's (feature `quinn-proto`), so
//! that an endpoint driving `quinn_proto` on these sockets needs no conversions of its own:
//!
//! - [`EcnCodepoint`] and `quinn_proto::EcnCodepoint`: `From` both ways (the same three
//!   codepoints);
//! - a `quinn_proto::Transmit` and the buffer quinn-proto wrote it into: a [`Transmit`] that
//!   borrows the buffer, to send at once ([`transmit`]), or one that owns it, to queue
//!   ([`queued`]);
//! - a received [`Datagram`]: handed to `quinn_proto::Endpoint::handle` with its source,
//!   local address and ECN codepoint ([`handle`]).
//!
//! # Example
//!
//! One turn of an endpoint: every received datagram into quinn-proto, every reply and every
//! connection's packets into the socket's queue. (`examples/quinn_proto_endpoint` in the
//! repository is a whole one.)
//!
//! ```
//! use std::time::Instant;
//!
//! use neqo_udp::{RecvBatch, TxQueue, quinn};
//! use quinn_proto::{Connection, DatagramEvent, Endpoint};
//!
//! fn turn(
//!     endpoint: &mut Endpoint,
//!     conn: &mut Connection,
//!     batch: &mut RecvBatch,
//!     queue: &mut TxQueue,
//!     now: Instant,
//! ) {
//!     for datagram in batch.datagrams() {
//!         let mut buf = queue.take_buffer();
//!         match quinn::handle(endpoint, now, datagram, &mut buf) {
//!             Some(DatagramEvent::Response(t)) => queue.push(quinn::queued(&t, buf)),
//!             Some(DatagramEvent::ConnectionEvent(_, event)) => {
//!                 conn.handle_event(event);
//!                 queue.recycle(buf);
//!             }
//!             _ => queue.recycle(buf),
//!         }
//!     }
//!     let mut buf = queue.take_buffer();
//!     while let Some(t) = conn.poll_transmit(now, 10, &mut buf) {
//!         queue.push(quinn::queued(&t, buf));
//!         buf = queue.take_buffer();
//!     }
//!     queue.recycle(buf);
//! }
//! ```

use std::time::Instant;

use crate::{EcnCodepoint, recv::Datagram, transmit::Transmit};

impl From<EcnCodepoint> for quinn_proto::EcnCodepoint {
    fn from(ecn: EcnCodepoint) -> Self {
        match ecn {
            EcnCodepoint::Ect0 => Self::Ect0,
            EcnCodepoint::Ect1 => Self::Ect1,
            EcnCodepoint::Ce => Self::Ce,
        }
    }
}

impl From<quinn_proto::EcnCodepoint> for EcnCodepoint {
    fn from(ecn: quinn_proto::EcnCodepoint) -> Self {
        match ecn {
            quinn_proto::EcnCodepoint::Ect0 => Self::Ect0,
            quinn_proto::EcnCodepoint::Ect1 => Self::Ect1,
            quinn_proto::EcnCodepoint::Ce => Self::Ce,
        }
    }
}

/// quinn-proto's transmit `t` with the buffer it was written into, owned, to queue in a
/// [`TxQueue`](crate::TxQueue): `buf` is cut to its first `t.size` bytes.
///
/// # Panics
/// If `buf` holds fewer than `t.size` bytes: it is not the buffer `t` was written into.
#[must_use]
pub fn queued(t: &quinn_proto::Transmit, mut buf: Vec<u8>) -> Transmit<Vec<u8>> {
    assert!(
        buf.len() >= t.size,
        "not the buffer the transmit was written into"
    );
    buf.truncate(t.size);
    Transmit::new(t.destination, buf)
        .with_ecn(t.ecn.map(Into::into))
        .with_segment_size(t.segment_size)
        .with_src_ip(t.src_ip)
}

/// quinn-proto's transmit `t` with its bytes, the first `t.size` of `buf` (the buffer
/// `poll_transmit`, `handle` or `accept` wrote it into), to send at once.
///
/// # Panics
/// If `buf` holds fewer than `t.size` bytes: it is not the buffer `t` was written into.
#[must_use]
pub fn transmit<'a>(t: &quinn_proto::Transmit, buf: &'a [u8]) -> Transmit<&'a [u8]> {
    Transmit::new(t.destination, &buf[..t.size])
        .with_ecn(t.ecn.map(Into::into))
        .with_segment_size(t.segment_size)
        .with_src_ip(t.src_ip)
}

/// Hands a received datagram to `endpoint`: its payload, its source as the remote address,
/// the local address it was sent to and its ECN codepoint, as `Endpoint::handle` takes them.
/// `buf` is where a reply is written (see `DatagramEvent::Response`).
pub fn handle(
    endpoint: &mut quinn_proto::Endpoint,
    now: Instant,
    datagram: Datagram,
    buf: &mut Vec<u8>,
) -> Option<quinn_proto::DatagramEvent> {
    endpoint.handle(
        now,
        datagram.source,
        datagram.destination,
        datagram.ecn.map(Into::into),
        datagram.data,
        buf,
    )
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, SocketAddr};

    use super::*;

    #[test]
    fn ecn_codepoints_map_to_the_same_bits() {
        for bits in 0..4u8 {
            let ours = EcnCodepoint::from_bits(bits);
            let theirs = quinn_proto::EcnCodepoint::from_bits(bits);
            assert_eq!(
                ours.map(quinn_proto::EcnCodepoint::from),
                theirs,
                "{bits:#b}"
            );
            assert_eq!(theirs.map(EcnCodepoint::from), ours, "{bits:#b}");
        }
    }

    fn quinn_transmit() -> quinn_proto::Transmit {
        quinn_proto::Transmit {
            destination: "[::1]:4433".parse().unwrap(),
            ecn: Some(quinn_proto::EcnCodepoint::Ce),
            size: 2500,
            segment_size: Some(1200),
            src_ip: Some(IpAddr::from([127, 0, 0, 2])),
        }
    }

    #[test]
    fn a_transmit_keeps_everything_but_the_bytes_beyond_its_size() {
        let buf: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
        let q = quinn_transmit();
        let t = transmit(&q, &buf);
        assert_eq!(t.destination, q.destination);
        assert_eq!(t.ecn, Some(EcnCodepoint::Ce));
        assert_eq!(t.contents, &buf[..2500]);
        assert_eq!(t.segment_size, Some(1200));
        assert_eq!(t.src_ip, q.src_ip);
        assert_eq!(t.datagrams(), 3);
        let owned = queued(&q, buf.clone());
        assert_eq!(owned.borrowed(), t, "the same transmit, its buffer owned");
    }

    #[test]
    #[should_panic(expected = "range end index 2500 out of range")]
    fn a_buffer_shorter_than_the_transmit_is_refused() {
        let _ = transmit(&quinn_transmit(), &[0; 100]);
    }

    #[test]
    #[should_panic(expected = "not the buffer the transmit was written into")]
    fn an_owned_buffer_shorter_than_the_transmit_is_refused() {
        let _ = queued(&quinn_transmit(), vec![0; 100]);
    }

    /// A reset key that needs no crypto provider: the test below looks at addresses only.
    struct PlainKey;

    impl quinn_proto::crypto::HmacKey for PlainKey {
        fn sign(&self, data: &[u8], signature_out: &mut [u8]) {
            for (out, byte) in signature_out.iter_mut().zip(data.iter().cycle()) {
                *out = *byte;
            }
        }

        fn signature_len(&self) -> usize {
            32
        }

        fn verify(&self, _: &[u8], _: &[u8]) -> Result<(), quinn_proto::crypto::CryptoError> {
            Err(quinn_proto::crypto::CryptoError)
        }
    }

    /// A short-header packet of no connection gets a stateless reset, addressed to the
    /// datagram's source from the address it was sent to: `handle` passes both on.
    #[test]
    fn handle_passes_the_datagram_on() {
        let mut config = quinn_proto::EndpointConfig::new(std::sync::Arc::new(PlainKey));
        // Connection IDs of any bytes are valid (the default generator's carry a hash).
        config.cid_generator(|| Box::new(quinn_proto::RandomConnectionIdGenerator::new(8)));
        let mut endpoint =
            quinn_proto::Endpoint::new(std::sync::Arc::new(config), None, true, None);
        let source: SocketAddr = "192.0.2.7:5555".parse().unwrap();
        let local = IpAddr::from([192, 0, 2, 1]);
        // A short header with an 8-byte DCID (quinn-proto's default length), padded.
        let mut packet = vec![0x40];
        packet.extend_from_slice(&[7; 8]);
        packet.resize(1200, 0x55);
        let mut datagram = Datagram::new(bytes::BytesMut::from(&packet[..]), source);
        datagram.destination = Some(local);
        datagram.ecn = Some(EcnCodepoint::Ect0);
        let mut buf = Vec::new();
        let event = handle(&mut endpoint, Instant::now(), datagram, &mut buf);
        let Some(quinn_proto::DatagramEvent::Response(t)) = event else {
            panic!("no stateless reset");
        };
        assert_eq!(t.destination, source);
        assert_eq!(t.src_ip, Some(local));
        assert!(
            t.size < packet.len() && buf[0] & 0xc0 == 0x40,
            "a stateless reset"
        );
    }
}
