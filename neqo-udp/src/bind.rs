//! Creating and binding UDP sockets, shared by [`Socket::bind`](crate::Socket::bind) and
//! [`bind_reuseport_group`](crate::bind_reuseport_group).

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Type};

use crate::error::{Refused, SetupError};

/// A new, unbound UDP socket for `addr`'s family; for the unspecified IPv6 address (`[::]`)
/// it is dual-stack, so that IPv4 peers reach it as v4-mapped addresses.
pub(crate) fn new_udp_socket(addr: SocketAddr) -> Result<socket2::Socket, SetupError> {
    let sock = socket2::Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(SetupError::of(Refused::Socket))?;
    if let SocketAddr::V6(v6) = addr
        && v6.ip().is_unspecified()
    {
        sock.set_only_v6(false)
            .map_err(SetupError::of(Refused::DualStack))?;
    }
    Ok(sock)
}
