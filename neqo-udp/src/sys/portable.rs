//! Every platform but Linux and Android: quinn-udp's paths. On Apple platforms in batched
//! mode receives use `recvmsg_x` (quinn-udp's `fast-apple-datapath`), elsewhere one datagram
//! per syscall. quinn-udp receives into initialised buffers, so each datagram is copied once
//! into its slot here; Linux, the platform this project measures, has no such copy.
//!
//! Sends carry one datagram per message everywhere here (no GSO): quinn-udp's `sendmsg_x`
//! path ignores a partial count, which would lose the tail of a batch while it counts as
//! sent, and Windows' USO is not exercised by anything this project can test.
//!
//! Linux is where this project is measured; other platforms are type-checked on Linux and
//! tested only by the GitHub workflow, so this module stays a thin layer over quinn-udp.

use std::{
    io::{self, IoSliceMut},
    sync::Mutex,
};

use bytes::BytesMut;
use quinn_udp::{RecvMeta, UdpSocketState};

use super::{Capabilities, Received, UdpSockRef};
use crate::{
    config::{Config, RECV_SLOT_SIZE},
    error::{Refused, SetupError},
    recv::SlotMeta,
    stats::RxDrop,
    transmit::{EcnCodepoint, Transmit},
};

/// quinn-udp's per-socket state and initialised receive buffers.
#[derive(Debug)]
pub(crate) struct Platform {
    state: UdpSocketState,
    scratch: Mutex<Vec<Vec<u8>>>,
}

fn quinn_sock<'a>(sock: &'a UdpSockRef<'_>) -> quinn_udp::UdpSockRef<'a> {
    #[cfg(unix)]
    return quinn_udp::UdpSockRef::from(&sock.fd);
    #[cfg(windows)]
    return quinn_udp::UdpSockRef::from(&sock.socket);
}

pub(crate) fn new_platform(
    sock: UdpSockRef<'_>,
    config: &Config,
) -> Result<(Platform, Capabilities), SetupError> {
    if sock.with_socket2(|s| s.peer_addr().is_ok()) {
        return Err(SetupError::new(
            Refused::Connected,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "ICMP errors would reach it as pending socket errors",
            ),
        ));
    }
    let state =
        UdpSocketState::new(quinn_sock(&sock)).map_err(SetupError::of(Refused::Platform))?;
    #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "tvos",
        target_os = "visionos"
    ))]
    if config.mode() == crate::IoMode::Batched {
        // SAFETY: quinn-udp resolves sendmsg_x/recvmsg_x at run time and falls back to the
        // one-datagram path when the symbols are missing.
        unsafe { state.set_apple_fast_path() };
    }
    let caps = Capabilities {
        gso_segments: 1,
        gro: config.gro() && state.gro_segments() > 1,
    };
    let slots = config.batch_size().min(quinn_udp::BATCH_SIZE);
    let scratch = Mutex::new(vec![vec![0u8; RECV_SLOT_SIZE]; slots]);
    Ok((Platform { state, scratch }, caps))
}

/// Sets `SO_REUSEPORT` where the platform has it.
pub(crate) fn set_reuse_port(sock: UdpSockRef<'_>) -> io::Result<()> {
    #[cfg(all(
        unix,
        not(any(
            target_os = "solaris",
            target_os = "illumos",
            target_os = "cygwin",
            target_os = "nuttx",
            target_os = "wasi"
        ))
    ))]
    return sock.with_socket2(|s| s.set_reuse_port(true));
    #[cfg(not(all(
        unix,
        not(any(
            target_os = "solaris",
            target_os = "illumos",
            target_os = "cygwin",
            target_os = "nuttx",
            target_os = "wasi"
        ))
    )))]
    {
        let _ = sock;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "SO_REUSEPORT is not available on this platform",
        ))
    }
}

/// The CID steering program is Linux's `SO_ATTACH_REUSEPORT_CBPF`: none here.
pub(crate) const HAS_STEERING: bool = false;

/// Not called where [`HAS_STEERING`] is false; says so if it is.
pub(crate) fn attach_cid_steering(
    _sock: UdpSockRef<'_>,
    _offset: u8,
    _count: usize,
) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "not supported on this platform",
    ))
}

pub(crate) fn force_buffer(_sock: UdpSockRef<'_>, _recv: bool, _size: usize) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no way past the system's buffer cap on this platform",
    ))
}

pub(crate) fn route_mtu(_sock: UdpSockRef<'_>, _v6: bool) -> io::Result<usize> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the route's MTU is not known on this platform",
    ))
}

pub(crate) fn kernel_drops(_sock: UdpSockRef<'_>) -> io::Result<u64> {
    Ok(0)
}

pub(crate) fn recv(
    p: &Platform,
    sock: UdpSockRef<'_>,
    slots: &mut [BytesMut],
    meta: &mut [SlotMeta],
    _batched: bool,
) -> io::Result<Received> {
    let mut scratch = p
        .scratch
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = slots.len().min(scratch.len());
    let mut bufs: Vec<IoSliceMut<'_>> = scratch[..n]
        .iter_mut()
        .map(|b| IoSliceMut::new(b))
        .collect();
    let mut metas = vec![RecvMeta::default(); n];
    let filled = p.state.recv(quinn_sock(&sock), &mut bufs, &mut metas)?;
    drop(bufs);
    for i in 0..filled {
        let m = &metas[i];
        meta[i] = SlotMeta {
            source: m.addr,
            destination: m.dst_ip,
            ecn: m.ecn.and_then(|e| EcnCodepoint::from_bits(e as u8)),
            ..SlotMeta::default()
        };
        if m.len == 0 {
            meta[i].dropped = Some((RxDrop::Empty, 1));
        } else {
            slots[i].extend_from_slice(&scratch[i][..m.len]);
            meta[i].len = m.len;
            meta[i].stride = if m.stride == 0 { m.len } else { m.stride };
        }
    }
    Ok(Received {
        filled,
        kernel_drops: None,
    })
}

pub(crate) fn send(
    p: &Platform,
    sock: UdpSockRef<'_>,
    messages: &[Transmit<&[u8]>],
    _batched: bool,
) -> io::Result<usize> {
    let Some(t) = messages.first() else {
        return Ok(0);
    };
    let transmit = quinn_udp::Transmit {
        destination: t.destination,
        ecn: t
            .ecn
            .and_then(|e| quinn_udp::EcnCodepoint::from_bits(e.bits())),
        contents: t.contents,
        segment_size: None,
        src_ip: t.src_ip,
    };
    p.state.try_send(quinn_sock(&sock), &transmit)?;
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One datagram per send message here, whatever the config asks: quinn-udp's
    /// `sendmsg_x` path would drop the tail of a batch the kernel took only part of.
    #[test]
    fn sends_are_one_datagram_per_message() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (_, caps) = new_platform(UdpSockRef::from(&sock), &Config::default()).unwrap();
        assert_eq!(caps.gso_segments, 1);
    }
}
