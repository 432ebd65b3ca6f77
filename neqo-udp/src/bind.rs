//! Creating and binding UDP sockets, shared by [`Socket::bind`](crate::Socket::bind) and
//! [`bind_reuseport_group`](crate::bind_reuseport_group).

use std::{io, net::SocketAddr};

use socket2::{Domain, Protocol, Type};

/// `e` with `what` in front of its message, of the same kind.
pub(crate) fn with_context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A new, unbound UDP socket for `addr`'s family; for the unspecified IPv6 address (`[::]`)
/// it is dual-stack, so that IPv4 peers reach it as v4-mapped addresses.
pub(crate) fn new_udp_socket(addr: SocketAddr) -> io::Result<socket2::Socket> {
    let sock = socket2::Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| with_context(e, "creating UDP socket"))?;
    if let SocketAddr::V6(v6) = addr
        && v6.ip().is_unspecified()
    {
        sock.set_only_v6(false)
            .map_err(|e| with_context(e, "making the socket dual-stack"))?;
    }
    Ok(sock)
}
