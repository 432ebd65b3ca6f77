//! [`bind_reuseport_group`]: UDP sockets sharing one address with `SO_REUSEPORT`, one per
//! worker, and (on Linux) a classic BPF program that steers each datagram to the socket of
//! the worker owning its QUIC connection.

use std::{
    fmt, io,
    net::{SocketAddr, UdpSocket},
};

use crate::{
    bind::new_udp_socket,
    config::MAX_GROUP_SOCKETS,
    error::{Refused, SetupError},
    sys::{self, UdpSockRef},
};

/// The first byte's type bits of a QUIC version 1 long header...
pub(crate) const LONG_TYPE_MASK: u8 = 0x30;
/// ...and their value in a Handshake packet.
pub(crate) const HANDSHAKE_TYPE: u8 = 0x20;

/// Where a datagram's worker index sits: byte `offset` of its QUIC destination connection ID
/// (DCID), in the packets whose DCID the server chose.
///
/// The steering program reads that byte and picks socket `byte % count` of the group. A
/// server with `count` workers therefore writes, into every connection ID worker `i` issues,
/// a byte at `offset` that is congruent to `i` modulo `count` (`i` itself, or `i + count * r`
/// for a random `r` where that stays below 256). Short-header and Handshake packets carry
/// such a connection ID, so every datagram of a connection reaches the worker that took it
/// once its handshake is under way, whatever the client's address or port (also after it
/// migrates).
///
/// Initial and 0-RTT packets carry a DCID the client chose (until it learns the server's),
/// and a client may choose every one with the same byte there: steered by it, a flood aimed
/// at one worker would find it. They go by the kernel's 4-tuple hash instead, which no
/// client picks: spoofed sources spread over the workers, and each client's Initials,
/// 0-RTT and Retry answers, from one address and port, reach one worker, the one that takes
/// the connection. So does anything else without the byte; see
/// [`socket_index`](Self::socket_index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CidSteering {
    /// The worker byte's position in the DCID, counted from its first byte.
    pub offset: u8,
}

impl CidSteering {
    /// Steering on byte `offset` of the DCID.
    #[must_use]
    pub const fn new(offset: u8) -> Self {
        Self { offset }
    }

    /// The socket the steering program picks, in a group of `count`, for a datagram with
    /// this UDP payload; `None` where it leaves the choice to the kernel's hash:
    /// - Handshake packet (a long header, first byte's top bit set, of type `0b10`): the DCID
    ///   length is byte 5 and the DCID starts at byte 6; a DCID of `offset` bytes or fewer
    ///   falls back;
    /// - every other long header (Initial, 0-RTT, Retry, other versions' packets) falls
    ///   back: its DCID may be the client's choice;
    /// - short header: the DCID starts at byte 1 (its length is the server's own, not on the
    ///   wire);
    /// - a datagram too short to hold the byte falls back.
    ///
    /// A server may use it to find datagrams that fell back to a worker other than the
    /// connection's (they can only be datagrams without the byte: new connections'
    /// Initials and 0-RTT packets, or malformed ones).
    #[must_use]
    pub fn socket_index(&self, datagram: &[u8], count: usize) -> Option<usize> {
        if count == 0 {
            return None;
        }
        let first = *datagram.first()?;
        let at = if first & 0x80 == 0 {
            1 + usize::from(self.offset)
        } else if first & LONG_TYPE_MASK == HANDSHAKE_TYPE && *datagram.get(5)? > self.offset {
            6 + usize::from(self.offset)
        } else {
            return None;
        };
        datagram.get(at).map(|&b| usize::from(b) % count)
    }
}

/// How the kernel picks a group's socket for each datagram.
#[derive(Debug)]
#[non_exhaustive]
pub enum Steering {
    /// The CID steering program is attached: socket `i` receives the datagrams whose worker
    /// byte is congruent to `i` modulo the group's size (and the kernel hashes the rest).
    Cid(CidSteering),
    /// No program: the kernel picks by a hash of the 4-tuple, so a connection's datagrams
    /// change socket when the client's address or port changes. With why.
    Hash(HashReason),
}

/// Why a group has no steering program ([`Steering::Hash`]). `Display` gives it as a
/// report line's clause ("no steering asked for", "attaching the CID steering program:
/// Operation not permitted (os error 1)").
#[derive(Debug)]
#[non_exhaustive]
pub enum HashReason {
    /// None was asked for.
    NotAsked,
    /// The platform has no steering program (all but Linux and Android).
    Unsupported,
    /// The kernel refused the program ([`Refused::SteeringProgram`], with its error): an
    /// unprivileged process in some sandboxes, a kernel without classic BPF for
    /// `SO_REUSEPORT` groups (before 4.5).
    Refused(SetupError),
}

impl fmt::Display for HashReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAsked => f.write_str("no steering asked for"),
            Self::Unsupported => {
                f.write_str("attaching the CID steering program: not supported on this platform")
            }
            Self::Refused(e) => write!(f, "{e}: {}", e.io_error()),
        }
    }
}

impl Steering {
    /// Whether the CID steering program is attached.
    #[must_use]
    pub const fn is_cid(&self) -> bool {
        matches!(self, Self::Cid(_))
    }
}

/// UDP sockets bound to one address with `SO_REUSEPORT`, in the kernel's group order:
/// `sockets[i]` is the socket steering picks with index `i`.
///
/// The order is bind order, and it holds only while every socket is open: when one closes,
/// the kernel moves the group's last socket into its place (net/core/sock_reuseport.c,
/// `__reuseport_detach_sock`), so the indices the program returns then name other sockets.
/// Keep every socket open for as long as any of them serves.
#[derive(Debug)]
#[non_exhaustive]
pub struct ReuseportGroup {
    /// The sockets, unconnected and blocking (as std makes them): hand each to
    /// [`Socket::from_std`](crate::Socket::from_std) or [`UdpSocketState::new`](crate::UdpSocketState::new),
    /// which configure them.
    pub sockets: Vec<UdpSocket>,
    /// How datagrams are spread over them.
    pub steering: Steering,
}

impl ReuseportGroup {
    /// The address all the sockets are bound to.
    ///
    /// # Errors
    /// As `getsockname`; `NotFound` once the sockets were taken out of the group.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sockets
            .first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the group has no sockets"))?
            .local_addr()
    }
}

/// Binds `count` UDP sockets to `addr`, each with `SO_REUSEPORT` set before its bind, so that
/// the kernel spreads the datagrams arriving at `addr` over them (one socket per worker
/// thread). A group of one is a plain socket, without `SO_REUSEPORT`, so that nobody else
/// can bind the port beside it. With port 0 the first socket's port is used for the rest. Bound to `[::]` they
/// are dual-stack, as with [`Socket::bind`](crate::Socket::bind).
///
/// With `steering`, a classic BPF program is attached to the group after every socket is
/// bound (`SO_ATTACH_REUSEPORT_CBPF`, Linux and Android) so that each datagram reaches socket
/// `worker byte % count` (see [`CidSteering`]). If the kernel refuses the program the group
/// is still returned, with [`HashReason::Refused`] and the kernel's error: the caller
/// decides whether the 4-tuple hash will do. Other platforms have no program
/// ([`HashReason::Unsupported`]); Apple's and the BSDs' `SO_REUSEPORT` does not even spread
/// unicast datagrams, so one socket gets them all. Windows has no `SO_REUSEPORT`: a group of
/// one is a plain socket there, larger ones are refused.
///
/// The kernel would let the group join `SO_REUSEPORT` sockets of the same user already bound
/// to `addr` (another server's, say), which would then take part of its datagrams and shift
/// its indices; so a port that anything holds is refused first, by binding it once without
/// the option (port 0 needs no such check).
///
/// # Errors
/// [`Refused::GroupSize`] for a `count` of 0 or above [`MAX_GROUP_SOCKETS`];
/// [`Refused::Option`] (`SO_REUSEPORT`, `Unsupported`) for more than one socket on a
/// platform without `SO_REUSEPORT`; [`Refused::GroupPort`] or [`Refused::GroupBind`] with
/// the bind error (`AddrInUse` where any socket holds the port), [`Refused::Bind`] for a
/// group of one.
pub fn bind_reuseport_group(
    addr: SocketAddr,
    count: usize,
    steering: Option<CidSteering>,
) -> Result<ReuseportGroup, SetupError> {
    if count == 0 || count > MAX_GROUP_SOCKETS {
        return Err(SetupError::new(
            Refused::GroupSize(count),
            io::ErrorKind::InvalidInput.into(),
        ));
    }
    if count > 1 && addr.port() != 0 {
        // Fails while any socket holds the port, with or without SO_REUSEPORT.
        new_udp_socket(addr)?
            .bind(&addr.into())
            .map_err(SetupError::of(Refused::GroupPort(addr)))?;
    }
    let mut sockets = Vec::with_capacity(count);
    let mut bind_to = addr;
    for index in 0..count {
        let sock = new_udp_socket(bind_to)?;
        let bound = if count > 1 {
            // A group of one shares nothing, and without the option a second server on the
            // port fails to bind instead of silently taking part of its datagrams.
            sys::set_reuse_port(UdpSockRef::from(&sock))
                .map_err(SetupError::of(Refused::Option("SO_REUSEPORT")))?;
            sock.bind(&bind_to.into())
                .map_err(SetupError::of(Refused::GroupBind {
                    addr: bind_to,
                    index,
                    count,
                }))
        } else {
            sock.bind(&bind_to.into())
                .map_err(SetupError::of(Refused::Bind(bind_to)))
        };
        bound?;
        if index == 0 {
            let local = sock
                .local_addr()
                .and_then(|a| {
                    a.as_socket().ok_or_else(|| {
                        io::Error::other("a UDP socket's local address is not an IP address")
                    })
                })
                .map_err(SetupError::of(Refused::LocalAddr))?;
            bind_to.set_port(local.port());
        }
        sockets.push(UdpSocket::from(sock));
    }
    let steering = match steering {
        None => Steering::Hash(HashReason::NotAsked),
        Some(_) if !sys::HAS_STEERING => Steering::Hash(HashReason::Unsupported),
        Some(cid) => {
            match sys::attach_cid_steering(UdpSockRef::from(&sockets[0]), cid.offset, count) {
                Ok(()) => Steering::Cid(cid),
                Err(e) => Steering::Hash(HashReason::Refused(SetupError::new(
                    Refused::SteeringProgram,
                    e,
                ))),
            }
        }
    };
    Ok(ReuseportGroup { sockets, steering })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_index_short_header() {
        let s = CidSteering::new(2);
        let p = [0x41, 9, 9, 13, 9, 9];
        assert_eq!(s.socket_index(&p, 4), Some(1));
        assert_eq!(s.socket_index(&p, 13), Some(0));
        assert_eq!(s.socket_index(&p, 1), Some(0));
        assert_eq!(s.socket_index(&p[..4], 4), Some(1));
        assert_eq!(s.socket_index(&p[..3], 4), None);
        assert_eq!(s.socket_index(&[], 4), None);
        assert_eq!(s.socket_index(&p, 0), None);
    }

    #[test]
    fn socket_index_long_header() {
        let s = CidSteering::new(1);
        // Handshake, version 1, DCID of 4 bytes whose byte 1 is 7.
        let p = [0xe3, 0, 0, 0, 1, 4, 0xff, 7, 0xff, 0xff, 0];
        assert_eq!(s.socket_index(&p, 4), Some(3));
        assert_eq!(s.socket_index(&p, 2), Some(1));
        assert_eq!(s.socket_index(&p[..8], 4), Some(3));
        assert_eq!(s.socket_index(&p[..7], 4), None);
        assert_eq!(s.socket_index(&p[..5], 4), None);
        let mut one_byte_dcid = p;
        one_byte_dcid[5] = 1;
        assert_eq!(s.socket_index(&one_byte_dcid, 4), None);
        assert_eq!(CidSteering::new(0).socket_index(&one_byte_dcid, 4), Some(3));
        // Initial (0b00), 0-RTT (0b01) and Retry (0b11): the client's DCID, never steered.
        for first in [0xc3, 0xd3, 0xf3] {
            let mut other = p;
            other[0] = first;
            assert_eq!(s.socket_index(&other, 4), None, "{first:#x}");
        }
    }
}
