//! Control messages and addresses, without syscalls: encoding a send's cmsgs, and turning
//! what the kernel wrote for one received message into [`SlotMeta`]. Pure memory work, so
//! the tests run under Miri too.

use std::{
    mem,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6},
    ptr,
};

use bytes::BytesMut;

use crate::{
    recv::SlotMeta,
    stats::RxDrop,
    transmit::{EcnCodepoint, Transmit, datagrams_in},
};

/// Control buffer for a send: `UDP_SEGMENT` (u16), `IP_TOS`/`IPV6_TCLASS` (int) and
/// `IPV6_PKTINFO` (20 bytes) take 24 + 24 + 40 bytes with headers and padding.
pub(super) const SEND_CMSG_LEN: usize = 96;

/// Control buffer for a receive. Ours take at most 112 bytes (TOS/TCLASS, PKTINFO, `UDP_GRO`,
/// `SO_RXQ_OVFL`); the rest is room for options a caller's socket may also have on
/// (timestamps, TTL, original destination), so that they never push ours out. If they do,
/// `MSG_CTRUNC` says so and the slot is dropped, never handed up without its GRO segment size.
pub(super) const RECV_CMSG_LEN: usize = 256;

/// A control-message buffer aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(super) struct CmsgBuf<const N: usize>(pub(super) [u8; N]);

/// Appends control messages to a send buffer.
struct CmsgWriter<'a> {
    hdr: &'a mut libc::msghdr,
    next: *mut libc::cmsghdr,
    used: usize,
}

impl<'a> CmsgWriter<'a> {
    /// `hdr.msg_control` must point at a zeroed, `cmsghdr`-aligned buffer of
    /// `hdr.msg_controllen` bytes that outlives the writer.
    fn new(hdr: &'a mut libc::msghdr) -> Self {
        // SAFETY: per the contract above the control buffer is valid; CMSG_FIRSTHDR only reads
        // the msghdr's control pointer and length.
        let next = unsafe { libc::CMSG_FIRSTHDR(hdr) };
        Self { hdr, next, used: 0 }
    }

    fn push<T: Copy>(&mut self, level: libc::c_int, ty: libc::c_int, value: T) {
        assert!(!self.next.is_null(), "send control buffer too small");
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(mem::size_of::<T>() as u32) } as usize;
        assert!(
            self.used + space <= self.hdr.msg_controllen,
            "send control buffer too small"
        );
        // SAFETY: `next` points into the control buffer with at least `space` bytes left
        // (checked above), so the header and payload writes stay in bounds; the payload may
        // be unaligned for T, hence write_unaligned.
        unsafe {
            (*self.next).cmsg_level = level;
            (*self.next).cmsg_type = ty;
            (*self.next).cmsg_len = libc::CMSG_LEN(mem::size_of::<T>() as u32) as usize;
            ptr::write_unaligned(libc::CMSG_DATA(self.next).cast::<T>(), value);
        }
        self.used += space;
        // CMSG_SPACE keeps every header aligned, so the next one starts right after this one.
        self.next = if self.used < self.hdr.msg_controllen {
            // SAFETY: `used < msg_controllen`, so the pointer stays inside the control buffer.
            unsafe { self.hdr.msg_control.cast::<u8>().add(self.used).cast() }
        } else {
            ptr::null_mut()
        };
    }

    fn finish(self) {
        self.hdr.msg_controllen = self.used;
        if self.used == 0 {
            self.hdr.msg_control = ptr::null_mut();
        }
    }
}

/// Whether a destination is reached over IPv4 (plain or v4-mapped on a dual-stack socket).
pub(super) fn is_v4_path(dest: &SocketAddr) -> bool {
    match dest.ip() {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
    }
}

/// Writes the control messages of message `t` (ECN, GSO segment size, source address) into
/// `ctrl` and points `hdr` at them (or at nothing when there are none).
pub(super) fn encode_send(
    t: &Transmit<&[u8]>,
    hdr: &mut libc::msghdr,
    ctrl: &mut CmsgBuf<SEND_CMSG_LEN>,
) {
    ctrl.0 = [0; SEND_CMSG_LEN];
    hdr.msg_control = ctrl.0.as_mut_ptr().cast();
    hdr.msg_controllen = SEND_CMSG_LEN;
    let mut w = CmsgWriter::new(hdr);
    if let Some(ecn) = t.ecn {
        let bits = libc::c_int::from(ecn.bits());
        if is_v4_path(&t.destination) {
            w.push(libc::IPPROTO_IP, libc::IP_TOS, bits);
        } else {
            w.push(libc::IPPROTO_IPV6, libc::IPV6_TCLASS, bits);
        }
    }
    if let Some(seg) = t.segment_size
        && seg < t.contents.len()
    {
        w.push(
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            u16::try_from(seg).unwrap_or(u16::MAX),
        );
    }
    match t.src_ip {
        Some(IpAddr::V4(v4)) => {
            let info = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            w.push(libc::IPPROTO_IP, libc::IP_PKTINFO, info);
        }
        Some(IpAddr::V6(v6)) => {
            let info = libc::in6_pktinfo {
                ipi6_ifindex: 0,
                ipi6_addr: libc::in6_addr {
                    s6_addr: v6.octets(),
                },
            };
            w.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, info);
        }
        None => {}
    }
    w.finish();
}

/// Reads a `T` at the start of `bytes`, if they hold one.
fn read<T: Copy>(bytes: &[u8]) -> Option<T> {
    // SAFETY: the length is checked, the read is unaligned-safe, and the T read here are plain
    // C structs and integers, valid for any bytes.
    (bytes.len() >= mem::size_of::<T>())
        .then(|| unsafe { ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Decodes the address the kernel wrote: the first `msg_namelen` bytes of the name buffer.
/// `None` for an unknown family or too few bytes for its address.
pub(super) fn decode_addr(name: &[u8]) -> Option<SocketAddr> {
    let family: libc::sa_family_t = read(name)?;
    match libc::c_int::from(family) {
        libc::AF_INET => {
            let a: libc::sockaddr_in = read(name)?;
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            let a: libc::sockaddr_in6 = read(name)?;
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Decodes the control messages the kernel wrote for a received message into `meta`
/// (ECN, destination address, GRO segment size). Returns the kernel's cumulative drop count
/// if it was reported. Any bytes are safe: lengths are checked, never trusted.
pub(super) fn decode_recv(control: &[u8], meta: &mut SlotMeta) -> Option<u64> {
    let header = mem::size_of::<libc::cmsghdr>();
    // SAFETY: CMSG_LEN is a pure size computation; CMSG_LEN(0) is the aligned header size.
    let data_offset = unsafe { libc::CMSG_LEN(0) } as usize;
    let align = mem::size_of::<usize>();
    let mut drops = None;
    let mut offset = 0usize;
    // Walk by offsets with checked arithmetic rather than CMSG_NXTHDR, whose pointer
    // arithmetic wraps on a corrupt cmsg_len (found by the cmsg_decode fuzz target).
    while let Some(cmsg) = control.get(offset..).and_then(read::<libc::cmsghdr>) {
        let (level, ty, len) = (cmsg.cmsg_level, cmsg.cmsg_type, cmsg.cmsg_len);
        if len < header {
            break;
        }
        // The payload the header claims, but never past the end of the buffer.
        let start = (offset + data_offset).min(control.len());
        let end = offset.saturating_add(len).min(control.len()).max(start);
        let data = &control[start..end];
        match (level, ty) {
            (libc::IPPROTO_IP, libc::IP_TOS) => {
                if let Some(&tos) = data.first() {
                    meta.ecn = EcnCodepoint::from_bits(tos);
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                if let Some(tc) = read::<libc::c_int>(data) {
                    meta.ecn = EcnCodepoint::from_bits((tc & 0b11) as u8);
                }
            }
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                if let Some(info) = read::<libc::in_pktinfo>(data) {
                    meta.destination = Some(IpAddr::V4(Ipv4Addr::from(
                        info.ipi_addr.s_addr.to_ne_bytes(),
                    )));
                }
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                if let Some(info) = read::<libc::in6_pktinfo>(data) {
                    meta.destination = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
                }
            }
            (libc::SOL_UDP, libc::UDP_GRO) => {
                if let Some(stride) = read::<libc::c_int>(data) {
                    meta.stride = usize::try_from(stride).unwrap_or(0);
                }
            }
            (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                if let Some(n) = read::<u32>(data) {
                    drops = Some(u64::from(n));
                }
            }
            _ => {}
        }
        let Some(next) = len
            .checked_add(align - 1)
            .map(|l| l & !(align - 1))
            .and_then(|l| offset.checked_add(l))
        else {
            break;
        };
        offset = next;
    }
    drops
}

/// What the kernel wrote for one received message.
#[derive(Debug, Clone, Copy)]
pub(super) struct Written<'a> {
    /// The length the call returned: the whole datagram (or GRO run) with `MSG_TRUNC`.
    pub(super) len: usize,
    /// `msg_flags`.
    pub(super) flags: libc::c_int,
    /// The first `msg_namelen` bytes of the name buffer.
    pub(super) name: &'a [u8],
    /// The first `msg_controllen` bytes of the control buffer.
    pub(super) control: &'a [u8],
}

/// Takes what the kernel wrote into `slot` for one message: sets the slot's length and its
/// metadata, or marks it dropped (truncated, control messages cut, empty, no source).
/// Returns the kernel's drop count if reported.
///
/// The slot's spare capacity must hold the `min(len, capacity)` bytes the kernel wrote.
pub(super) fn finish_recv(slot: &mut BytesMut, w: Written<'_>, meta: &mut SlotMeta) -> Option<u64> {
    *meta = SlotMeta::default();
    let drops = decode_recv(w.control, meta);
    let source = decode_addr(w.name);
    let dropped = if w.flags & libc::MSG_TRUNC != 0 {
        Some(RxDrop::Truncated)
    } else if w.flags & libc::MSG_CTRUNC != 0 {
        Some(RxDrop::CTrunc)
    } else if w.len == 0 {
        Some(RxDrop::Empty)
    } else if source.is_none() {
        Some(RxDrop::Other)
    } else {
        None
    };
    if let Some(why) = dropped {
        // Never hand up a partial datagram, nor a run that cannot be split.
        meta.dropped = Some((why, datagrams_in(w.len, meta.stride)));
        meta.stride = 0;
        return drops;
    }
    if let Some(source) = source {
        meta.source = source;
    }
    let len = w.len.min(slot.capacity() - slot.len());
    // SAFETY: per this function's contract, the kernel initialised `len` bytes of the spare
    // capacity (the length of the iovec it was given bounds what it wrote).
    unsafe { slot.set_len(slot.len() + len) };
    meta.len = len;
    if meta.stride == 0 || meta.stride > len {
        meta.stride = len;
    }
    drops
}

#[cfg(test)]
mod tests;
