//! Linux and Android (the same kernel): `recvmmsg`/`sendmmsg` (or `recvmsg`/`sendmsg` in
//! single mode) with per-message control messages: `UDP_SEGMENT` (GSO), `UDP_GRO`,
//! `IP_TOS`/`IPV6_TCLASS` (ECN), `IP_PKTINFO`/`IPV6_PKTINFO` (local address), `SO_RXQ_OVFL`
//! (kernel drops).
//!
//! Everything unsafe in the crate is in this module: socket options here, the syscalls in
//! `msg`, control messages and addresses in `cmsg`, the `SO_REUSEPORT` steering program in
//! `reuseport`, and in `abi` what libc declares for Linux but not for Android.
//!
//! ICMP errors are not asked for (`IP_RECVERR` stays off): on an unconnected socket the
//! kernel then never turns one into a pending socket error, so an off-path attacker's
//! spoofed "unreachable" or "fragmentation needed" cannot fail the next send to some other
//! peer, nor leave epoll reporting `EPOLLERR` (which tokio keeps as write-closed readiness
//! for good). What is lost: learning of unreachable peers and path-MTU reports from ICMP,
//! neither of which a QUIC stack acts on (it probes the path MTU itself, RFC 8899, and an
//! unreachable peer shows as loss). For the same reason connected sockets are refused.

mod abi;
mod cmsg;
mod msg;
mod reuseport;

use std::{
    io, mem,
    os::fd::{AsRawFd, BorrowedFd},
    ptr,
};

use bytes::BytesMut;

pub(crate) use reuseport::{HAS_STEERING, attach_cid_steering, set_reuse_port};

use super::{Capabilities, Received, UdpSockRef};
use crate::{
    config::Config,
    error::{Refused, SetupError},
    recv::SlotMeta,
    transmit::Transmit,
};

/// Most segments one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS` on every kernel
/// since GSO was added; newer ones allow 128).
const GSO_MAX_SEGMENTS: usize = 64;

fn set_opt(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size; the kernel only reads
    // it during the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::from_ref(&value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An integer option's value.
fn get_opt(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and `len` holds the size of `value`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::from_mut(&mut value).cast(),
            &raw mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the options every socket gets (local address and ECN reporting, no fragmentation,
/// no ICMP error reporting, kernel drop counts) and the offloads the config asks for.
fn configure(
    sock: UdpSockRef<'_>,
    want_gso: bool,
    want_gro: bool,
) -> Result<Capabilities, SetupError> {
    let fd = sock.fd;
    // Sets an option every socket needs; a refusal names it.
    macro_rules! require {
        ($level:ident, $name:ident, $value:expr) => {
            set_opt(fd, libc::$level, libc::$name, $value)
                .map_err(SetupError::of(Refused::Option(stringify!($name))))?
        };
    }
    let (local, dual_stack, connected) = sock.with_socket2(|s| {
        let local = s.local_addr().map_err(SetupError::of(Refused::LocalAddr))?;
        let dual_stack = !local.is_ipv4()
            && !s
                .only_v6()
                .map_err(SetupError::of(Refused::Option("IPV6_V6ONLY")))?;
        Ok::<_, SetupError>((local, dual_stack, s.peer_addr().is_ok()))
    })?;
    if connected {
        return Err(SetupError::new(
            Refused::Connected,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the kernel reports ICMP errors on it as pending socket errors, which any send \
                 or wake-up would then meet",
            ),
        ));
    }
    let is_v4 = local.is_ipv4();
    if is_v4 || dual_stack {
        require!(IPPROTO_IP, IP_PKTINFO, 1);
        require!(IPPROTO_IP, IP_RECVTOS, 1);
        // Path MTU discovery by probing: never fragment, never lower the MTU on ICMP.
        require!(IPPROTO_IP, IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE);
        // Off even if a caller's socket had it on (see the module docs).
        require!(IPPROTO_IP, IP_RECVERR, 0);
    }
    if !is_v4 {
        require!(IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
        require!(IPPROTO_IPV6, IPV6_RECVTCLASS, 1);
        require!(IPPROTO_IPV6, IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_PROBE);
        require!(IPPROTO_IPV6, IPV6_DONTFRAG, 1);
        require!(IPPROTO_IPV6, IPV6_RECVERR, 0);
    }
    // Kernel drop counter on every received datagram; an old kernel without it only costs
    // us the count.
    if let Err(e) = set_opt(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1) {
        tracing::debug!("SO_RXQ_OVFL unavailable: {e}");
    }
    let gro = want_gro && set_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
    if !want_gro {
        // A socket handed in by the caller may have had GRO on: without it our slots could
        // receive runs we are not expecting. Failure means the kernel has no GRO at all.
        let _ = set_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 0);
    }
    let gso_segments = if want_gso && get_opt(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok() {
        GSO_MAX_SEGMENTS
    } else {
        1
    };
    Ok(Capabilities { gso_segments, gro })
}

/// Sets a socket buffer past the `rmem_max`/`wmem_max` cap (`SO_RCVBUFFORCE`,
/// `SO_SNDBUFFORCE`), which needs `CAP_NET_ADMIN`; `EPERM` without it.
pub(crate) fn force_buffer(sock: UdpSockRef<'_>, recv: bool, size: usize) -> io::Result<()> {
    let name = if recv {
        libc::SO_RCVBUFFORCE
    } else {
        libc::SO_SNDBUFFORCE
    };
    let size = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    set_opt(sock.fd, libc::SOL_SOCKET, name, size)
}

/// The MTU of the route a connected socket's datagrams take (`IP_MTU`, `IPV6_MTU`): the
/// outgoing interface's, or a smaller path MTU the kernel has learned for the destination.
pub(crate) fn route_mtu(sock: UdpSockRef<'_>, v6: bool) -> io::Result<usize> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let mtu = get_opt(sock.fd, level, name)?;
    usize::try_from(mtu).map_err(|_| io::Error::other(format!("a route MTU of {mtu}")))
}

/// The kernel's count of datagrams dropped on this socket (`SO_MEMINFO`'s `SK_MEMINFO_DROPS`).
pub(crate) fn kernel_drops(sock: UdpSockRef<'_>) -> io::Result<u64> {
    // SK_MEMINFO_VARS: the drops counter is the last of the nine.
    let mut info = [0u32; abi::SK_MEMINFO_DROPS as usize + 1];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is a live array and `len` its size in bytes.
    let rc = unsafe {
        libc::getsockopt(
            sock.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            abi::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from(info[abi::SK_MEMINFO_DROPS as usize]))
}

/// Linux keeps no per-socket platform state.
#[derive(Debug)]
pub(crate) struct Platform;

pub(crate) fn new_platform(
    sock: UdpSockRef<'_>,
    config: &Config,
) -> Result<(Platform, Capabilities), SetupError> {
    let caps = configure(sock, config.gso(), config.gro())?;
    Ok((Platform, caps))
}

pub(crate) fn recv(
    _p: &Platform,
    sock: UdpSockRef<'_>,
    slots: &mut [BytesMut],
    meta: &mut [SlotMeta],
    batched: bool,
) -> io::Result<Received> {
    if batched {
        msg::recv_batch(sock.fd, slots, meta)
    } else {
        msg::recv_single(sock.fd, &mut slots[0], &mut meta[0])
    }
}

pub(crate) fn send(
    _p: &Platform,
    sock: UdpSockRef<'_>,
    messages: &[Transmit<&[u8]>],
    batched: bool,
) -> io::Result<usize> {
    match messages {
        [] => Ok(0),
        // One message: sendmsg, whatever the mode (sendmmsg would only add its loop).
        [t] => msg::send_single(sock.fd, t),
        [t, ..] if !batched => msg::send_single(sock.fd, t),
        _ => msg::send_batch(sock.fd, messages),
    }
}

/// Decodes arbitrary bytes as a received control buffer, for the fuzz target: returns the
/// metadata found and the drop count.
#[cfg(any(fuzzing, test))]
pub(crate) fn decode_control_bytes(bytes: &[u8]) -> (SlotMeta, Option<u64>) {
    let mut meta = SlotMeta::default();
    let drops = cmsg::decode_recv(bytes, &mut meta);
    (meta, drops)
}
