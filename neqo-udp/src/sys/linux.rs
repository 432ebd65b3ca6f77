//! Linux: `recvmmsg`/`sendmmsg` (or `recvmsg`/`sendmsg` in single mode) with per-message
//! control messages: `UDP_SEGMENT` (GSO), `UDP_GRO`, `IP_TOS`/`IPV6_TCLASS` (ECN),
//! `IP_PKTINFO`/`IPV6_PKTINFO` (local address), `SO_RXQ_OVFL` (kernel drops).
//!
//! Everything unsafe in the crate is here. The scratch arrays (headers, addresses, iovecs,
//! control buffers) live on the stack of each call and only their used prefix is written.

use std::{
    io,
    mem::{self, MaybeUninit},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6},
    os::fd::{AsRawFd, BorrowedFd},
    ptr,
};

use bytes::BytesMut;
use quinn_udp::{EcnCodepoint, Transmit};
use socket2::{SockAddr, SockRef};

use crate::{config::MAX_BATCH_SIZE, recv::SlotMeta};

/// Most segments one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS` on every kernel
/// since GSO was added; newer ones allow 128).
const GSO_MAX_SEGMENTS: usize = 64;

/// Control buffer for a send: `UDP_SEGMENT` (u16), `IP_TOS`/`IPV6_TCLASS` (int) and
/// `IPV6_PKTINFO` (20 bytes) take 24 + 24 + 40 bytes with headers and padding.
const SEND_CMSG_LEN: usize = 96;
/// Control buffer for a receive: TOS/TCLASS, PKTINFO, `UDP_GRO`, `SO_RXQ_OVFL`: 24 + 40 +
/// 24 + 24 bytes, with room to spare so a new cmsg never truncates the ones we read.
const RECV_CMSG_LEN: usize = 160;

/// A control-message buffer aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgBuf<const N: usize>([u8; N]);

/// What the kernel supports for this socket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capabilities {
    /// Segments per GSO send; 1 when GSO is off or unsupported.
    pub(crate) gso_segments: usize,
    /// Whether `UDP_GRO` is on.
    pub(crate) gro: bool,
}

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

/// Whether the kernel knows `UDP_SEGMENT` for this socket.
fn gso_supported(fd: BorrowedFd<'_>) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and `len` holds the size of `value`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            ptr::from_mut(&mut value).cast(),
            &raw mut len,
        )
    };
    rc == 0
}

/// Sets the options every socket gets (local address and ECN reporting, no fragmentation,
/// kernel drop counts, ICMP error queue) and the offloads the config asks for.
pub(crate) fn configure(
    fd: BorrowedFd<'_>,
    want_gso: bool,
    want_gro: bool,
) -> io::Result<Capabilities> {
    let sock = SockRef::from(&fd);
    let local = sock.local_addr()?;
    let is_v4 = local.is_ipv4();
    let dual_stack = !is_v4 && !sock.only_v6()?;
    use libc::{IPPROTO_IP, IPPROTO_IPV6, SOL_SOCKET};
    if is_v4 || dual_stack {
        set_opt(fd, IPPROTO_IP, libc::IP_PKTINFO, 1)?;
        set_opt(fd, IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        // Path MTU discovery by probing: never fragment, never lower the MTU on ICMP.
        set_opt(
            fd,
            IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )?;
        set_opt(fd, IPPROTO_IP, libc::IP_RECVERR, 1)?;
    }
    if !is_v4 {
        set_opt(fd, IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
        set_opt(fd, IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
        set_opt(
            fd,
            IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_PROBE,
        )?;
        set_opt(fd, IPPROTO_IPV6, libc::IPV6_DONTFRAG, 1)?;
        set_opt(fd, IPPROTO_IPV6, libc::IPV6_RECVERR, 1)?;
    }
    // Kernel drop counter on every received datagram; an old kernel without it only costs
    // us the count.
    if let Err(e) = set_opt(fd, SOL_SOCKET, libc::SO_RXQ_OVFL, 1) {
        tracing::debug!("SO_RXQ_OVFL unavailable: {e}");
    }
    let gro = want_gro && set_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
    if !want_gro {
        // A socket handed in by the caller may have had GRO on: without it our slots could
        // receive runs we are not expecting. Failure means the kernel has no GRO at all.
        let _ = set_opt(fd, libc::SOL_UDP, libc::UDP_GRO, 0);
    }
    let gso_segments = if want_gso && gso_supported(fd) {
        GSO_MAX_SEGMENTS
    } else {
        1
    };
    Ok(Capabilities { gso_segments, gro })
}

/// The kernel's count of datagrams dropped on this socket (`SO_MEMINFO`'s `SK_MEMINFO_DROPS`).
pub(crate) fn kernel_drops(sock: &tokio::net::UdpSocket) -> io::Result<u64> {
    let fd = std::os::fd::AsFd::as_fd(sock);
    // SK_MEMINFO_VARS: the drops counter is the last of the nine.
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: `info` is a live array and `len` its size in bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from(info[libc::SK_MEMINFO_DROPS as usize]))
}

/// Reads and discards the socket's error queue (ICMP errors queued by `IP_RECVERR`), which
/// otherwise holds receive buffer space. Returns how many errors it took.
pub(crate) fn drain_error_queue(sock: &tokio::net::UdpSocket) -> u64 {
    let fd = std::os::fd::AsFd::as_fd(sock);
    let mut drained = 0;
    // Bounded: the queue is limited by the receive buffer, this just guards against a flood.
    for _ in 0..1024 {
        let mut data = [0u8; 64];
        let mut ctrl = CmsgBuf([0u8; 256]);
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        hdr.msg_iov = &raw mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = ctrl.0.as_mut_ptr().cast();
        hdr.msg_controllen = ctrl.0.len();
        // SAFETY: `hdr` points at live buffers of the lengths it states, for this call only.
        let n = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &raw mut hdr,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        drained += 1;
    }
    drained
}

/// Encodes `addr` as a `sockaddr`.
fn encode_addr(addr: SocketAddr) -> SockAddr {
    SockAddr::from(addr)
}

/// Decodes a `sockaddr` the kernel wrote.
fn decode_addr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large and
            // aligned enough for.
            let a = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*ptr::from_ref(storage).cast::<libc::sockaddr_in6>() };
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
fn is_v4_path(dest: &SocketAddr) -> bool {
    match dest.ip() {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
    }
}

/// Fills `hdr` for sending `t`, pointing at `name`, `iov` and `ctrl`.
fn prepare_send(
    t: &Transmit<'_>,
    gso: bool,
    hdr: &mut libc::msghdr,
    iov: &mut libc::iovec,
    name: &SockAddr,
    ctrl: &mut CmsgBuf<SEND_CMSG_LEN>,
) {
    // The kernel reads but never writes through these pointers on send.
    iov.iov_base = t.contents.as_ptr().cast_mut().cast();
    iov.iov_len = t.contents.len();
    hdr.msg_name = name.as_ptr().cast_mut().cast();
    hdr.msg_namelen = name.len();
    hdr.msg_iov = iov;
    hdr.msg_iovlen = 1;
    hdr.msg_flags = 0;
    ctrl.0 = [0; SEND_CMSG_LEN];
    hdr.msg_control = ctrl.0.as_mut_ptr().cast();
    hdr.msg_controllen = SEND_CMSG_LEN;
    let mut w = CmsgWriter::new(hdr);
    if let Some(ecn) = t.ecn {
        let bits = ecn as libc::c_int;
        if is_v4_path(&t.destination) {
            w.push(libc::IPPROTO_IP, libc::IP_TOS, bits);
        } else {
            w.push(libc::IPPROTO_IPV6, libc::IPV6_TCLASS, bits);
        }
    }
    if gso
        && let Some(seg) = t.segment_size
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

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// Sends `transmits[0]` with one `sendmsg`. Returns 1 or the error.
pub(crate) fn send_single(fd: BorrowedFd<'_>, t: &Transmit<'_>, gso: bool) -> io::Result<usize> {
    // SAFETY: all-zero is a valid msghdr/iovec.
    let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut iov: libc::iovec = unsafe { mem::zeroed() };
    let mut ctrl = CmsgBuf([0u8; SEND_CMSG_LEN]);
    let name = encode_addr(t.destination);
    prepare_send(t, gso, &mut hdr, &mut iov, &name, &mut ctrl);
    // SAFETY: `hdr` points at `iov`, `name`, `ctrl` and the transmit's contents, all alive for
    // the call; the kernel only reads them.
    let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &raw const hdr, 0) };
    if n < 0 { Err(last_error()) } else { Ok(1) }
}

/// Sends up to `MAX_BATCH_SIZE` transmits with one `sendmmsg`. Returns how many the kernel
/// took (at least 1) or the error of the first.
pub(crate) fn send_batch(
    fd: BorrowedFd<'_>,
    transmits: &[Transmit<'_>],
    gso: bool,
) -> io::Result<usize> {
    let n = transmits.len().min(MAX_BATCH_SIZE);
    if n == 0 {
        return Ok(0);
    }
    let mut hdrs: [MaybeUninit<libc::mmsghdr>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    let mut iovs: [MaybeUninit<libc::iovec>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    let mut names: [MaybeUninit<SockAddr>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    let mut ctrls: [MaybeUninit<CmsgBuf<SEND_CMSG_LEN>>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    for (i, t) in transmits[..n].iter().enumerate() {
        // SAFETY: all-zero is a valid mmsghdr and iovec.
        let hdr = hdrs[i].write(unsafe { mem::zeroed() });
        // SAFETY: as above.
        let iov = iovs[i].write(unsafe { mem::zeroed() });
        let name = names[i].write(encode_addr(t.destination));
        let ctrl = ctrls[i].write(CmsgBuf([0u8; SEND_CMSG_LEN]));
        prepare_send(t, gso, &mut hdr.msg_hdr, iov, name, ctrl);
    }
    // SAFETY: the first `n` headers were initialised above and point at initialised iovecs,
    // names and control buffers in this frame and at the transmits' contents; all outlive the
    // call, and the kernel reads `n` headers and writes only their `msg_len`.
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            0,
        )
    };
    if rc < 0 {
        Err(last_error())
    } else {
        Ok(rc as usize)
    }
}

/// Decodes the control messages of a received message into `meta`. Returns the kernel's
/// cumulative drop count if it was reported.
fn decode_recv_cmsgs(hdr: &libc::msghdr, meta: &mut SlotMeta) -> Option<u64> {
    let mut drops = None;
    if hdr.msg_control.is_null() || hdr.msg_controllen == 0 {
        return None;
    }
    // Walk the buffer by offsets with checked arithmetic rather than CMSG_NXTHDR, whose
    // pointer arithmetic wraps on a corrupt cmsg_len (found by the cmsg_decode fuzz target).
    let base = hdr.msg_control.cast::<u8>().cast_const();
    let total = hdr.msg_controllen;
    let header = mem::size_of::<libc::cmsghdr>();
    // SAFETY: CMSG_LEN is a pure size computation; CMSG_LEN(0) is the aligned header size.
    let data_offset = unsafe { libc::CMSG_LEN(0) } as usize;
    let align = mem::size_of::<usize>();
    let mut offset = 0usize;
    while offset.checked_add(header).is_some_and(|end| end <= total) {
        // SAFETY: `offset + header <= total`, so the header lies inside the buffer; the read
        // is unaligned-safe.
        let cmsg = unsafe { ptr::read_unaligned(base.add(offset).cast::<libc::cmsghdr>()) };
        let (level, ty, len) = (cmsg.cmsg_level, cmsg.cmsg_type, cmsg.cmsg_len);
        if len < header {
            break;
        }
        // The payload the header claims, but never past the end of the buffer: the kernel
        // writes consistent lengths, arbitrary (fuzzed) bytes need not.
        let start = offset + data_offset;
        let payload = len
            .saturating_sub(data_offset)
            .min(total.saturating_sub(start));
        // SAFETY: `start <= offset + len` and the reads below never exceed `payload` bytes
        // from it, which stay within `total`; when `payload` is 0 nothing is read.
        let data = unsafe { base.add(start.min(total)) };
        let read_int = || -> Option<libc::c_int> {
            // SAFETY: see `data`; the length is checked first.
            (payload >= mem::size_of::<libc::c_int>())
                .then(|| unsafe { ptr::read_unaligned(data.cast::<libc::c_int>()) })
        };
        match (level, ty) {
            (libc::IPPROTO_IP, libc::IP_TOS) if payload >= 1 => {
                // SAFETY: one byte is present (checked).
                let tos = unsafe { *data };
                meta.ecn = EcnCodepoint::from_bits(tos & 0b11);
            }
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                if let Some(tc) = read_int() {
                    meta.ecn = EcnCodepoint::from_bits((tc & 0b11) as u8);
                }
            }
            (libc::IPPROTO_IP, libc::IP_PKTINFO)
                if payload >= mem::size_of::<libc::in_pktinfo>() =>
            {
                // SAFETY: the payload holds an in_pktinfo (checked length).
                let info = unsafe { ptr::read_unaligned(data.cast::<libc::in_pktinfo>()) };
                meta.destination = Some(IpAddr::V4(Ipv4Addr::from(
                    info.ipi_addr.s_addr.to_ne_bytes(),
                )));
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
                if payload >= mem::size_of::<libc::in6_pktinfo>() =>
            {
                // SAFETY: the payload holds an in6_pktinfo (checked length).
                let info = unsafe { ptr::read_unaligned(data.cast::<libc::in6_pktinfo>()) };
                meta.destination = Some(IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr)));
            }
            (libc::SOL_UDP, libc::UDP_GRO) => {
                if let Some(stride) = read_int() {
                    meta.stride = usize::try_from(stride).unwrap_or(0);
                }
            }
            (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) if payload >= 4 => {
                // SAFETY: four bytes are present (checked).
                drops = Some(u64::from(unsafe {
                    ptr::read_unaligned(data.cast::<u32>())
                }));
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

/// Fills `hdr` to receive into `slot`'s spare capacity.
fn prepare_recv(
    slot: &mut BytesMut,
    hdr: &mut libc::msghdr,
    iov: &mut libc::iovec,
    name: &mut MaybeUninit<libc::sockaddr_storage>,
    ctrl: &mut MaybeUninit<CmsgBuf<RECV_CMSG_LEN>>,
) {
    let spare = slot.spare_capacity_mut();
    iov.iov_base = spare.as_mut_ptr().cast();
    iov.iov_len = spare.len();
    hdr.msg_name = name.as_mut_ptr().cast();
    hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    hdr.msg_iov = iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = ctrl.as_mut_ptr().cast();
    hdr.msg_controllen = RECV_CMSG_LEN;
    hdr.msg_flags = 0;
}

/// Takes what the kernel wrote for one message: sets the slot's length and its metadata.
/// Returns the drop count if reported.
fn finish_recv(
    slot: &mut BytesMut,
    hdr: &libc::msghdr,
    len: usize,
    name: &MaybeUninit<libc::sockaddr_storage>,
    meta: &mut SlotMeta,
) -> Option<u64> {
    *meta = SlotMeta::default();
    meta.truncated = hdr.msg_flags & libc::MSG_TRUNC != 0;
    // SAFETY: the kernel wrote the source address for every received message.
    let storage = unsafe { name.assume_init_ref() };
    meta.source = decode_addr(storage).unwrap_or(meta.source);
    let drops = decode_recv_cmsgs(hdr, meta);
    if meta.truncated {
        // Never hand up a partial datagram.
        meta.len = 0;
        return drops;
    }
    let len = len.min(slot.capacity() - slot.len());
    // SAFETY: the kernel initialised `len` bytes of the spare capacity (bounded above by the
    // iovec length it was given).
    unsafe { slot.set_len(len) };
    meta.len = len;
    if meta.stride == 0 {
        meta.stride = len;
    }
    drops
}

/// The result of one receive syscall.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    /// Slots filled (including truncated or empty ones, which have length 0).
    pub(crate) filled: usize,
    /// Highest cumulative kernel drop count reported.
    pub(crate) kernel_drops: Option<u64>,
}

/// Receives into `slots[0]` with one `recvmsg`.
pub(crate) fn recv_single(
    fd: BorrowedFd<'_>,
    slot: &mut BytesMut,
    meta: &mut SlotMeta,
) -> io::Result<Received> {
    // SAFETY: all-zero is a valid msghdr/iovec.
    let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut iov: libc::iovec = unsafe { mem::zeroed() };
    let mut name = MaybeUninit::uninit();
    let mut ctrl = MaybeUninit::uninit();
    prepare_recv(slot, &mut hdr, &mut iov, &mut name, &mut ctrl);
    // SAFETY: `hdr` points at the slot's spare capacity, `name` and `ctrl`, all alive and
    // writable for the call, with the lengths stated.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &raw mut hdr, libc::MSG_TRUNC) };
    if n < 0 {
        return Err(last_error());
    }
    let kernel_drops = finish_recv(slot, &hdr, n as usize, &name, meta);
    Ok(Received {
        filled: 1,
        kernel_drops,
    })
}

/// Receives into up to `MAX_BATCH_SIZE` slots with one `recvmmsg`.
pub(crate) fn recv_batch(
    fd: BorrowedFd<'_>,
    slots: &mut [BytesMut],
    meta: &mut [SlotMeta],
) -> io::Result<Received> {
    let n = slots.len().min(meta.len()).min(MAX_BATCH_SIZE);
    let mut hdrs: [MaybeUninit<libc::mmsghdr>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    let mut iovs: [MaybeUninit<libc::iovec>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    let mut names: [MaybeUninit<libc::sockaddr_storage>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    let mut ctrls: [MaybeUninit<CmsgBuf<RECV_CMSG_LEN>>; MAX_BATCH_SIZE] =
        [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
    for i in 0..n {
        // SAFETY: all-zero is a valid mmsghdr and iovec.
        let hdr = hdrs[i].write(unsafe { mem::zeroed() });
        // SAFETY: as above.
        let iov = iovs[i].write(unsafe { mem::zeroed() });
        // Control buffers are not zeroed: the kernel writes `msg_controllen` bytes of them
        // and nothing else is read.
        prepare_recv(
            &mut slots[i],
            &mut hdr.msg_hdr,
            iov,
            &mut names[i],
            &mut ctrls[i],
        );
    }
    // SAFETY: the first `n` headers are initialised and point at writable buffers (slot spare
    // capacity, names, control buffers) that outlive the call; MSG_TRUNC only changes the
    // reported length. No timeout pointer.
    let rc = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            libc::MSG_TRUNC,
            ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(last_error());
    }
    let filled = rc as usize;
    let mut kernel_drops = None;
    for i in 0..filled {
        // SAFETY: initialised above; the kernel filled in msg_len/msg_flags/controllen.
        let hdr = unsafe { hdrs[i].assume_init_ref() };
        let d = finish_recv(
            &mut slots[i],
            &hdr.msg_hdr,
            hdr.msg_len as usize,
            &names[i],
            &mut meta[i],
        );
        kernel_drops = kernel_drops.max(d);
    }
    Ok(Received {
        filled,
        kernel_drops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_cmsgs_fit_and_are_well_formed() {
        // Encode the largest combination and walk it back with the kernel's macros.
        let t = Transmit {
            destination: "[::1]:9".parse().unwrap(),
            ecn: Some(EcnCodepoint::Ect0),
            contents: &[0u8; 3000],
            segment_size: Some(1200),
            src_ip: Some("::1".parse().unwrap()),
        };
        // SAFETY: all-zero is a valid msghdr/iovec.
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut iov: libc::iovec = unsafe { mem::zeroed() };
        let mut ctrl = CmsgBuf([0u8; SEND_CMSG_LEN]);
        let name = encode_addr(t.destination);
        prepare_send(&t, true, &mut hdr, &mut iov, &name, &mut ctrl);
        let mut seen = Vec::new();
        // SAFETY: prepare_send wrote well-formed cmsgs into `ctrl`, described by `hdr`.
        let mut c = unsafe { libc::CMSG_FIRSTHDR(&raw const hdr) };
        while !c.is_null() {
            // SAFETY: `c` is a header inside the buffer.
            unsafe {
                seen.push(((*c).cmsg_level, (*c).cmsg_type));
                c = libc::CMSG_NXTHDR(&raw const hdr, c);
            }
        }
        assert_eq!(
            seen,
            vec![
                (libc::IPPROTO_IPV6, libc::IPV6_TCLASS),
                (libc::SOL_UDP, libc::UDP_SEGMENT),
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
            ]
        );
        assert!(hdr.msg_controllen <= SEND_CMSG_LEN);

        // Without GSO, without ECN and source: no control messages at all.
        let plain = Transmit {
            ecn: None,
            src_ip: None,
            ..t
        };
        prepare_send(&plain, false, &mut hdr, &mut iov, &name, &mut ctrl);
        assert_eq!(hdr.msg_controllen, 0);
        assert!(hdr.msg_control.is_null());
    }

    #[test]
    fn v4_mapped_destinations_take_ip_tos() {
        assert!(is_v4_path(&"127.0.0.1:1".parse().unwrap()));
        assert!(is_v4_path(&"[::ffff:127.0.0.1]:1".parse().unwrap()));
        assert!(!is_v4_path(&"[::1]:1".parse().unwrap()));
    }

    #[test]
    fn addresses_round_trip() {
        for a in ["127.0.0.1:4433", "[::1]:443", "[::ffff:10.0.0.1]:1"] {
            let addr: SocketAddr = a.parse().unwrap();
            let sa = encode_addr(addr);
            // SAFETY: SockAddr's storage is a sockaddr_storage.
            let storage = unsafe { &*sa.as_ptr().cast::<libc::sockaddr_storage>() };
            assert_eq!(decode_addr(storage), Some(addr));
        }
    }
}

/// Linux keeps no per-socket platform state.
#[derive(Debug)]
pub(crate) struct Platform;

pub(crate) fn new_platform(
    sock: &tokio::net::UdpSocket,
    config: &crate::Config,
) -> io::Result<(Platform, Capabilities)> {
    use std::os::fd::AsFd;
    let caps = configure(sock.as_fd(), config.wants_gso(), config.wants_gro())?;
    Ok((Platform, caps))
}

pub(crate) fn recv(
    _p: &Platform,
    sock: &tokio::net::UdpSocket,
    slots: &mut [BytesMut],
    meta: &mut [SlotMeta],
    batched: bool,
) -> io::Result<Received> {
    use std::os::fd::AsFd;
    if batched {
        recv_batch(sock.as_fd(), slots, meta)
    } else {
        recv_single(sock.as_fd(), &mut slots[0], &mut meta[0])
    }
}

pub(crate) fn send(
    _p: &Platform,
    sock: &tokio::net::UdpSocket,
    transmits: &[Transmit<'_>],
    gso: bool,
    batched: bool,
) -> io::Result<usize> {
    use std::os::fd::AsFd;
    match transmits {
        [] => Ok(0),
        // One message: sendmsg, whatever the mode (sendmmsg would only add its loop).
        [t] => send_single(sock.as_fd(), t, gso),
        [t, ..] if !batched => send_single(sock.as_fd(), t, gso),
        _ => send_batch(sock.as_fd(), transmits, gso),
    }
}

/// Decodes arbitrary bytes as a received control buffer, for the fuzz target: returns the
/// metadata found and the drop count.
pub(crate) fn decode_control_bytes(bytes: &[u8]) -> (SlotMeta, Option<u64>) {
    // An aligned copy, as the kernel's buffer would be.
    let mut ctrl = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: `ctrl` holds at least `bytes.len()` bytes; the regions do not overlap.
    unsafe {
        ptr::copy_nonoverlapping(bytes.as_ptr(), ctrl.as_mut_ptr().cast::<u8>(), bytes.len())
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
    hdr.msg_control = ctrl.as_mut_ptr().cast();
    hdr.msg_controllen = bytes.len();
    let mut meta = SlotMeta::default();
    let drops = decode_recv_cmsgs(&hdr, &mut meta);
    (meta, drops)
}
