//! Every platform but Linux: quinn-udp's paths. On Apple platforms in batched mode that is
//! `recvmsg_x`/`sendmsg_x` (quinn-udp's `fast-apple-datapath`), elsewhere one datagram per
//! syscall. quinn-udp receives into initialised buffers, so each datagram is copied once into
//! its slot here; Linux, the platform this project measures, has no such copy.
//!
//! This machine only builds for Linux; keep this module a thin layer over quinn-udp.

use std::{
    io::{self, IoSliceMut},
    sync::Mutex,
};

use bytes::BytesMut;
use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};
use tokio::net::UdpSocket;

use crate::{
    config::{Config, IoMode, RECV_SLOT_SIZE},
    recv::SlotMeta,
};

/// What the platform supports for this socket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capabilities {
    pub(crate) gso_segments: usize,
    pub(crate) gro: bool,
}

/// quinn-udp's per-socket state and initialised receive buffers.
#[derive(Debug)]
pub(crate) struct Platform {
    state: UdpSocketState,
    scratch: Mutex<Vec<Vec<u8>>>,
}

pub(crate) fn new_platform(
    sock: &UdpSocket,
    config: &Config,
) -> io::Result<(Platform, Capabilities)> {
    let state = UdpSocketState::new(UdpSockRef::from(sock))?;
    #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "tvos",
        target_os = "visionos"
    ))]
    if config.mode == IoMode::Batched {
        // SAFETY: quinn-udp resolves sendmsg_x/recvmsg_x at run time and falls back to the
        // one-datagram path when the symbols are missing.
        unsafe { state.set_apple_fast_path() };
    }
    let gso_segments = if config.wants_gso() {
        state.max_gso_segments()
    } else {
        1
    };
    let caps = Capabilities {
        gso_segments,
        gro: config.wants_gro() && state.gro_segments() > 1,
    };
    let slots = config.effective_batch_size().min(quinn_udp::BATCH_SIZE);
    let scratch = Mutex::new(vec![vec![0u8; RECV_SLOT_SIZE]; slots]);
    Ok((Platform { state, scratch }, caps))
}

pub(crate) fn kernel_drops(_sock: &UdpSocket) -> io::Result<u64> {
    Ok(0)
}

pub(crate) fn drain_error_queue(_sock: &UdpSocket) -> u64 {
    0
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    pub(crate) filled: usize,
    pub(crate) kernel_drops: Option<u64>,
}

pub(crate) fn recv(
    p: &Platform,
    sock: &UdpSocket,
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
    let filled = p
        .state
        .recv(UdpSockRef::from(sock), &mut bufs, &mut metas)?;
    drop(bufs);
    for i in 0..filled {
        let m = &metas[i];
        slots[i].extend_from_slice(&scratch[i][..m.len]);
        meta[i] = SlotMeta {
            len: m.len,
            stride: m.stride,
            source: m.addr,
            destination: m.dst_ip,
            ecn: m.ecn,
            truncated: false,
        };
    }
    Ok(Received {
        filled,
        kernel_drops: None,
    })
}

pub(crate) fn send(
    p: &Platform,
    sock: &UdpSocket,
    transmits: &[Transmit<'_>],
    _gso: bool,
    _batched: bool,
) -> io::Result<usize> {
    let Some(t) = transmits.first() else {
        return Ok(0);
    };
    p.state.try_send(UdpSockRef::from(sock), t)?;
    Ok(1)
}
