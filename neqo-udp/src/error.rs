//! [`SetupError`]: what binding or configuring a socket was refused, and the OS error.

use std::{fmt, io, net::SocketAddr};

use crate::config::MAX_GROUP_SOCKETS;

/// What the system (or the crate, for a request that cannot work) refused while a socket
/// was bound or configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refused {
    /// Creating a UDP socket.
    Socket,
    /// Making a socket bound to `[::]` dual-stack (clearing `IPV6_V6ONLY`).
    DualStack,
    /// Binding a socket to this address.
    Bind(SocketAddr),
    /// Binding a socket to this address without `SO_REUSEPORT`, before a group of several
    /// binds it: something holds the port, and a group would share it or fail part-way.
    GroupPort(SocketAddr),
    /// Binding socket `index` (from 0) of a `SO_REUSEPORT` group of `count` to `addr`.
    GroupBind {
        /// The group's address.
        addr: SocketAddr,
        /// The socket's index in the group.
        index: usize,
        /// The group's size.
        count: usize,
    },
    /// A `SO_REUSEPORT` group of this many sockets: it has 1 to [`MAX_GROUP_SOCKETS`].
    GroupSize(usize),
    /// Setting or reading the socket option of this name (`IP_PKTINFO`, `SO_REUSEPORT`...).
    Option(&'static str),
    /// Reading the socket's local address (`getsockname`).
    LocalAddr,
    /// A connected socket: the kernel reports ICMP errors on it as pending socket errors,
    /// which any send or wake-up would then meet (see the crate's docs on errors).
    Connected,
    /// Making the socket non-blocking.
    NonBlocking,
    /// Registering the socket with the tokio runtime's reactor.
    Runtime,
    /// Setting the socket up through quinn-udp (the platforms without a module of this
    /// crate's own).
    Platform,
    /// Attaching the CID steering program to a `SO_REUSEPORT` group
    /// (`SO_ATTACH_REUSEPORT_CBPF`).
    SteeringProgram,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Socket => f.write_str("creating UDP socket"),
            Self::DualStack => f.write_str("making the socket dual-stack"),
            Self::Bind(addr) => write!(f, "binding UDP {addr}"),
            Self::GroupPort(addr) => write!(
                f,
                "binding UDP {addr} for a SO_REUSEPORT group (something holds the port)"
            ),
            Self::GroupBind { addr, index, count } => write!(
                f,
                "binding UDP {addr} with SO_REUSEPORT, socket {} of {count}",
                index + 1
            ),
            Self::GroupSize(count) => write!(
                f,
                "a SO_REUSEPORT group has 1 to {MAX_GROUP_SOCKETS} sockets, not {count}"
            ),
            Self::Option(name) => write!(f, "socket option {name}"),
            Self::LocalAddr => f.write_str("reading the socket's local address"),
            Self::Connected => f.write_str("a connected UDP socket is not supported"),
            Self::NonBlocking => f.write_str("making the socket non-blocking"),
            Self::Runtime => f.write_str("registering the socket with the tokio runtime"),
            Self::Platform => f.write_str("setting the socket up through quinn-udp"),
            Self::SteeringProgram => f.write_str("attaching the CID steering program"),
        }
    }
}

/// Binding or configuring a socket failed: [`what`](Self::what) was refused, with the OS
/// error (or, for requests refused before any syscall, an error of the same kind) as its
/// [`source`](std::error::Error::source).
///
/// `Display` says what was refused and, as the standard library's errors do not repeat their
/// source, leaves the OS error to `source()`: print the chain (`{:#}` with anyhow), or turn
/// it into an [`io::Error`] (`?` in a function returning `io::Result` does), whose message
/// has both.
///
/// ```
/// use neqo_udp::{Config, Refused, UdpSocketState};
/// let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// sock.connect("127.0.0.1:9").unwrap();
/// let e = UdpSocketState::new((&sock).into(), Config::default()).unwrap_err();
/// assert_eq!(e.what(), Refused::Connected);
/// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
/// let io: std::io::Error = e.into();
/// assert!(io.to_string().starts_with("a connected UDP socket is not supported: "));
/// ```
#[derive(Debug)]
pub struct SetupError {
    what: Refused,
    source: io::Error,
}

impl SetupError {
    /// `what` was refused with `source`.
    #[must_use]
    pub const fn new(what: Refused, source: io::Error) -> Self {
        Self { what, source }
    }

    /// What was refused.
    #[must_use]
    pub const fn what(&self) -> Refused {
        self.what
    }

    /// The OS error (or the crate's, of the same kind, for a request that cannot work).
    #[must_use]
    pub const fn io_error(&self) -> &io::Error {
        &self.source
    }

    /// The OS error's kind (`AddrInUse`, `PermissionDenied`, `InvalidInput`...).
    #[must_use]
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// `e` as a refusal of `what`.
    pub(crate) fn of(what: Refused) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::new(what, source)
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.what.fmt(f)?;
        if let Refused::GroupBind { .. } = self.what
            && self.source.kind() == io::ErrorKind::AddrInUse
        {
            f.write_str(" (held by a socket without SO_REUSEPORT, or another user's)")?;
        }
        Ok(())
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<SetupError> for io::Error {
    /// An error of the OS error's kind whose message says what was refused and the OS error.
    fn from(e: SetupError) -> Self {
        Self::new(e.kind(), format!("{e}: {}", e.source))
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn display_says_what_and_source_is_the_os_error() {
        let addr: SocketAddr = "127.0.0.1:4433".parse().unwrap();
        let os = io::Error::from(io::ErrorKind::AddrInUse);
        let os_text = os.to_string();
        let e = SetupError::new(Refused::Bind(addr), os);
        assert_eq!(e.to_string(), "binding UDP 127.0.0.1:4433");
        assert_eq!(e.source().unwrap().to_string(), os_text);
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        let io = io::Error::from(e);
        assert_eq!(io.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(
            io.to_string(),
            format!("binding UDP 127.0.0.1:4433: {os_text}")
        );
    }

    #[test]
    fn a_group_bind_in_use_names_who_may_hold_the_port() {
        let addr: SocketAddr = "[::1]:443".parse().unwrap();
        let what = Refused::GroupBind {
            addr,
            index: 1,
            count: 4,
        };
        let in_use = SetupError::new(what, io::ErrorKind::AddrInUse.into());
        assert_eq!(
            in_use.to_string(),
            "binding UDP [::1]:443 with SO_REUSEPORT, socket 2 of 4 (held by a socket \
             without SO_REUSEPORT, or another user's)"
        );
        let denied = SetupError::new(what, io::ErrorKind::PermissionDenied.into());
        assert_eq!(
            denied.to_string(),
            "binding UDP [::1]:443 with SO_REUSEPORT, socket 2 of 4"
        );
    }
}
