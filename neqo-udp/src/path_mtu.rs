//! [`max_udp_payload_to`]: how large a datagram the route to a peer carries, for a QUIC
//! stack's path MTU discovery to aim at.

use std::{
    io,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
};

use crate::sys::{self, UdpSockRef};

/// IPv4 and UDP headers.
const V4_HEADERS: usize = 20 + 8;
/// IPv6 and UDP headers.
const V6_HEADERS: usize = 40 + 8;

/// The largest UDP payload the route to `peer` carries in one IP packet: the route's MTU (its
/// interface's, or a smaller path MTU the kernel has learned for `peer`) less the IP and UDP
/// headers. Asks the kernel's routing table through a UDP socket connected to `peer`; nothing
/// is sent. A v4-mapped IPv6 address is taken as the IPv4 one it maps.
///
/// The answer is an upper bound for path MTU discovery (DPLPMTUD probes up to it), never a
/// size to send at without probing: routers further on may carry less.
///
/// # Errors
/// No route to `peer`, or a platform that does not say (`Unsupported`; Linux does).
pub fn max_udp_payload_to(peer: SocketAddr) -> io::Result<usize> {
    let peer = match peer {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => peer,
        },
        SocketAddr::V4(_) => peer,
    };
    let (local, headers): (SocketAddr, usize) = match peer {
        SocketAddr::V4(_) => ((Ipv4Addr::UNSPECIFIED, 0).into(), V4_HEADERS),
        SocketAddr::V6(_) => ((Ipv6Addr::UNSPECIFIED, 0).into(), V6_HEADERS),
    };
    let sock = UdpSocket::bind(local)?;
    sock.connect(peer)?;
    let mtu = sys::route_mtu(UdpSockRef::from(&sock), peer.is_ipv6())?;
    mtu.checked_sub(headers)
        .ok_or_else(|| io::Error::other(format!("a route MTU of {mtu} holds no UDP payload")))
}
