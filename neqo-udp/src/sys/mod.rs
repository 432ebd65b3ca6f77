//! Platform syscalls behind one narrow interface, the same on every platform:
//!
//! - `new_platform(sock, config)`: configures the socket, returns its per-socket state and
//!   [`Capabilities`];
//! - `recv(platform, sock, slots, meta, batched)`: one receive syscall into the slots;
//! - `send(platform, sock, messages, batched)`: one send syscall of a prefix of the messages;
//! - `kernel_drops(sock)`: the kernel's drop counter, where there is one.
//!
//! Linux and Android share their own module (the kernel is the same; all the crate's unsafe
//! code but Apple's fast-path switch); everything else goes through quinn-udp, which is
//! tested on those platforms.

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use linux::*;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod portable;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) use portable::*;

/// What the platform supports for a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// Segments one send message may carry; 1 when GSO is off or unsupported.
    pub(crate) gso_segments: usize,
    /// Whether the kernel coalesces received datagrams into GRO runs.
    pub(crate) gro: bool,
}

/// The result of one receive syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    /// Slots filled (including ones whose datagrams are dropped, which have length 0).
    pub(crate) filled: usize,
    /// Highest cumulative kernel drop count reported with the datagrams.
    pub(crate) kernel_drops: Option<u64>,
}

/// A borrowed UDP socket, of whatever type owns it (std, tokio, mio, socket2...), for the
/// calls of [`UdpSocketState`](crate::UdpSocketState).
#[derive(Debug, Clone, Copy)]
pub struct UdpSockRef<'a> {
    #[cfg(unix)]
    pub(crate) fd: std::os::fd::BorrowedFd<'a>,
    #[cfg(windows)]
    pub(crate) socket: std::os::windows::io::BorrowedSocket<'a>,
}

#[cfg(unix)]
impl<'a, T: std::os::fd::AsFd> From<&'a T> for UdpSockRef<'a> {
    fn from(socket: &'a T) -> Self {
        Self { fd: socket.as_fd() }
    }
}

#[cfg(windows)]
impl<'a, T: std::os::windows::io::AsSocket> From<&'a T> for UdpSockRef<'a> {
    fn from(socket: &'a T) -> Self {
        Self {
            socket: socket.as_socket(),
        }
    }
}

impl UdpSockRef<'_> {
    /// Runs `f` on a socket2 view of the socket (for its option setters and getters).
    pub(crate) fn with_socket2<R>(self, f: impl FnOnce(&socket2::SockRef<'_>) -> R) -> R {
        #[cfg(unix)]
        let sock = socket2::SockRef::from(&self.fd);
        #[cfg(windows)]
        let sock = socket2::SockRef::from(&self.socket);
        f(&sock)
    }
}
