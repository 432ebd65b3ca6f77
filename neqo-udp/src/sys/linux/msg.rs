//! The send and receive syscalls: `sendmsg`/`sendmmsg`, `recvmsg`/`recvmmsg`. The scratch
//! arrays (headers, addresses, iovecs, control buffers) live on the stack of each call and
//! only their used prefix is written.

use std::{
    io,
    mem::{self, MaybeUninit},
    os::fd::{AsRawFd, BorrowedFd},
    ptr, slice,
};

use bytes::BytesMut;
use socket2::SockAddr;

use super::{
    abi,
    cmsg::{self, CmsgBuf, RECV_CMSG_LEN, SEND_CMSG_LEN, Written},
};
use crate::{config::MAX_BATCH_SIZE, recv::SlotMeta, sys::Received, transmit::Transmit};

/// Fills `hdr` for sending `t`, pointing at `name`, `iov` and `ctrl`.
fn prepare_send(
    t: &Transmit<&[u8]>,
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
    cmsg::encode_send(t, hdr, ctrl);
}

/// Sends one message with `sendmsg`. Returns 1 or the error.
pub(super) fn send_single(fd: BorrowedFd<'_>, t: &Transmit<&[u8]>) -> io::Result<usize> {
    // SAFETY: all-zero is a valid msghdr/iovec.
    let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut iov: libc::iovec = unsafe { mem::zeroed() };
    let mut ctrl = CmsgBuf([0u8; SEND_CMSG_LEN]);
    let name = SockAddr::from(t.destination);
    prepare_send(t, &mut hdr, &mut iov, &name, &mut ctrl);
    // SAFETY: `hdr` points at `iov`, `name`, `ctrl` and the transmit's contents, all alive for
    // the call; the kernel only reads them.
    let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &raw const hdr, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(1)
    }
}

/// Sends up to `MAX_BATCH_SIZE` messages with one `sendmmsg`. Returns how many the kernel
/// took (at least 1) or the error of the first.
pub(super) fn send_batch(fd: BorrowedFd<'_>, messages: &[Transmit<&[u8]>]) -> io::Result<usize> {
    let n = messages.len().min(MAX_BATCH_SIZE);
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
    for (i, t) in messages[..n].iter().enumerate() {
        // SAFETY: all-zero is a valid mmsghdr and iovec.
        let hdr = hdrs[i].write(unsafe { mem::zeroed() });
        // SAFETY: as above.
        let iov = iovs[i].write(unsafe { mem::zeroed() });
        let name = names[i].write(SockAddr::from(t.destination));
        let ctrl = ctrls[i].write(CmsgBuf([0u8; SEND_CMSG_LEN]));
        prepare_send(t, &mut hdr.msg_hdr, iov, name, ctrl);
    }
    // SAFETY: the first `n` headers were initialised above and point at initialised iovecs,
    // names and control buffers in this frame and at the messages' contents; all outlive the
    // call, and the kernel reads `n` headers and writes only their `msg_len`.
    let rc = unsafe {
        abi::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            0,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
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

/// Hands what the kernel wrote for one message to [`cmsg::finish_recv`].
///
/// # Safety
/// `hdr` was prepared by `prepare_recv` for `slot`, `name` and `ctrl`, and the kernel has
/// filled it in for a message of `len` bytes.
unsafe fn finish(
    slot: &mut BytesMut,
    hdr: &libc::msghdr,
    len: usize,
    meta: &mut SlotMeta,
) -> Option<u64> {
    let namelen = (hdr.msg_namelen as usize).min(mem::size_of::<libc::sockaddr_storage>());
    let controllen = hdr.msg_controllen.min(RECV_CMSG_LEN);
    // SAFETY: per the contract, the kernel wrote `msg_namelen` bytes of the name and
    // `msg_controllen` bytes of control messages into the buffers `hdr` points at; both are
    // clamped to the buffers' sizes.
    let (name, control) = unsafe {
        (
            slice::from_raw_parts(hdr.msg_name.cast::<u8>().cast_const(), namelen),
            if controllen == 0 {
                &[][..]
            } else {
                slice::from_raw_parts(hdr.msg_control.cast::<u8>().cast_const(), controllen)
            },
        )
    };
    let written = Written {
        len,
        flags: hdr.msg_flags,
        name,
        control,
    };
    cmsg::finish_recv(slot, written, meta)
}

/// Receives into `slot` with one `recvmsg`.
pub(super) fn recv_single(
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
    // writable for the call, with the lengths stated. MSG_TRUNC only changes the length
    // reported.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &raw mut hdr, libc::MSG_TRUNC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: prepared above and filled in by the kernel.
    let kernel_drops = unsafe { finish(slot, &hdr, n as usize, meta) };
    Ok(Received {
        filled: 1,
        kernel_drops,
    })
}

/// Receives into up to `MAX_BATCH_SIZE` slots with one `recvmmsg`.
pub(super) fn recv_batch(
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
        // Names and control buffers are not zeroed: only what the kernel reports writing
        // (msg_namelen, msg_controllen) is read.
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
        abi::recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
            n as libc::c_uint,
            libc::MSG_TRUNC,
            ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let filled = rc as usize;
    let mut kernel_drops = None;
    for i in 0..filled {
        // SAFETY: initialised above; the kernel filled in msg_len, msg_flags, msg_namelen and
        // msg_controllen for the first `filled` messages.
        let d = unsafe {
            let hdr = hdrs[i].assume_init_ref();
            finish(
                &mut slots[i],
                &hdr.msg_hdr,
                hdr.msg_len as usize,
                &mut meta[i],
            )
        };
        kernel_drops = kernel_drops.max(d);
    }
    Ok(Received {
        filled,
        kernel_drops,
    })
}
