//! io_uring ([`IoMode::Uring`](crate::IoMode::Uring)): two small rings per socket.
//!
//! **Receive ring.** One multishot `IORING_OP_RECVMSG` request stays armed on the socket.
//! For each datagram (or GRO run) the kernel takes a buffer from a provided-buffer ring
//! (`IORING_REGISTER_PBUF_RING`, memory we map and own), writes an `io_uring_recvmsg_out`
//! header, the source address, the control messages and the payload into it, and posts a
//! completion naming the buffer. [`Uring::recv`] copies each payload into the caller's
//! [`RecvBatch`](crate::RecvBatch) slot, decodes the rest with the same code as `recvmmsg`
//! (`cmsg::finish_recv`), and hands the buffer back to the ring at once. The request ends
//! (a completion without `IORING_CQE_F_MORE`) when every buffer is in use (`-ENOBUFS`: the
//! datagrams wait in the socket's queue), on an empty datagram (the kernel ends a multishot
//! receive on a zero return), when its submitting thread exits (`-ECANCELED`) or on an error;
//! it is armed again, after the buffers have been handed back, by the same call that sees the
//! end. There is never more than one armed, so completions come in the socket's order.
//!
//! The ring's descriptor is readable while completions wait: that is the socket's read
//! readiness in this mode ([`Uring::fd`]).
//!
//! **Send ring.** Each send call is one submission of linked `IORING_OP_SENDMSG` requests
//! (`IOSQE_IO_LINK`: in order, and a failure cancels the rest), carrying the control messages
//! `sendmmsg` would (`msg::prepare_send`), and waits for every completion before it returns,
//! so the borrowed transmits are never referenced afterwards. The requests carry
//! `MSG_DONTWAIT`: without it, io_uring meets a full socket buffer by arming a poll and
//! waiting for room, which would block the caller. With it the request fails with `-EAGAIN`
//! like `sendmmsg`. Completions report the prefix of messages that went out, or the first
//! one's error: the same contract as `sendmmsg`, so the send policy in `send.rs` applies
//! unchanged.
//!
//! All the unsafe code of this mode is here.

use std::{
    collections::VecDeque,
    io,
    mem::{self, MaybeUninit},
    os::fd::{AsRawFd, BorrowedFd, RawFd},
    ptr::{self, NonNull},
    slice,
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU16, AtomicU64, Ordering},
    },
};

use bytes::BytesMut;
use io_uring::{IoUring, cqueue, opcode, register::Probe, squeue, types};

use super::{
    cmsg::{self, RECV_CMSG_LEN, Written},
    msg,
};
use crate::{
    config::{MAX_BATCH_SIZE, RECV_SLOT_SIZE},
    recv::SlotMeta,
    stats::RxDrop,
    sys::Received,
    transmit::Transmit,
};

/// `sizeof(struct io_uring_recvmsg_out)`: four `u32`s at the start of every buffer.
const RECVMSG_OUT_LEN: usize = 16;
/// Room for the source address in every buffer.
const NAME_LEN: usize = mem::size_of::<libc::sockaddr_storage>();
/// One provided buffer: header, address, control messages, a whole GRO run or datagram.
pub(crate) const BUF_SIZE: usize = RECVMSG_OUT_LEN + NAME_LEN + RECV_CMSG_LEN + RECV_SLOT_SIZE;
/// The buffer group of the provided-buffer ring (one per receive ring).
const BGID: u16 = 0;
/// `user_data` of the multishot receive and of its cancellation.
const RECV_TAG: u64 = 1;
const CANCEL_TAG: u64 = 2;
/// Re-arms one receive call may make before it returns what it has.
const MAX_REARMS_PER_CALL: usize = 4;

/// Provided buffers for a socket with this batch size: twice a batch, so that the kernel can
/// fill one batch while the caller copies out the last, as a power of two (the buffer ring
/// needs one), at least 8.
pub(crate) fn buffer_count(batch: usize) -> u16 {
    let n = (2 * batch.clamp(1, MAX_BATCH_SIZE))
        .next_power_of_two()
        .max(8);
    u16::try_from(n).unwrap_or(256)
}

/// Anonymous memory we map and unmap: the buffers and the buffer ring the kernel reads and
/// writes through our address space.
#[derive(Debug)]
struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain memory owned by this value, reachable only through the mutex
// of the ring that owns it (and by the kernel, which the ring's protocol orders).
unsafe impl Send for Region {}

impl Region {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; the
        // result is checked before use.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Self { ptr, len })
    }

    /// Never unmaps: for when the kernel might still write here.
    const fn leak(&mut self) {
        self.len = 0;
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping was made by `new` with this length and nothing refers to it
            // any more (the ring that used it was closed first, see `Rx`'s field order).
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}

/// `struct io_uring_buf`: one entry of the provided-buffer ring. The ring's tail is the
/// `resv` field of entry 0, which we therefore never write as part of an entry.
#[repr(C)]
struct BufEntry {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

/// The `msghdr` a multishot receive is armed with: only its name and control lengths count
/// (the kernel lays out each buffer by them), its pointers are null.
struct Template(libc::msghdr);

// SAFETY: the template's pointers are all null; it is plain data.
unsafe impl Send for Template {}

impl Template {
    fn new() -> Self {
        // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        hdr.msg_namelen = NAME_LEN as libc::socklen_t;
        hdr.msg_controllen = RECV_CMSG_LEN;
        Self(hdr)
    }
}

/// The receive side: the ring, the buffers and the one multishot request.
struct Rx {
    // Dropped first: closing the ring before the memory it used is unmapped.
    ring: IoUring,
    bufs: Region,
    buf_ring: Region,
    count: u16,
    /// The tail we have written up to (published with a release store).
    tail: u16,
    template: Template,
    armed: bool,
    /// Completions read while checking the first arm, not yet handed out.
    backlog: VecDeque<(u64, i32, u32)>,
    /// An error completion met after datagrams: reported by the next call.
    pending: Option<io::Error>,
}

/// The send side.
struct Tx {
    ring: IoUring,
    /// Submission queue entries: the most messages one submission carries.
    capacity: usize,
    /// Set when the ring failed in a way that might leave requests queued: it is never
    /// entered again.
    broken: bool,
}

/// A socket's two rings.
pub(crate) struct Uring {
    rx: Mutex<Rx>,
    tx: Mutex<Tx>,
    /// The receive ring's descriptor (owned by `rx.ring`), for readiness.
    rx_fd: RawFd,
    rearms: AtomicU64,
    no_buffers: AtomicU64,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uring")
            .field("rx_fd", &self.rx_fd)
            .field("rearms", &self.rearms)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a ring could not be set up, in words naming what is missing.
pub(crate) fn setup_error(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::EPERM) => io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "io_uring is disabled here: the kernel refused to create a ring ({e}; \
                 sysctl kernel.io_uring_disabled, or a seccomp or container policy)"
            ),
        ),
        Some(libc::ENOSYS) => io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this kernel has no io_uring ({e})"),
        ),
        _ => io::Error::new(e.kind(), format!("creating an io_uring: {e}")),
    }
}

fn unsupported(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("io_uring mode needs {what}, which this kernel refused: {e}"),
    )
}

impl Uring {
    /// Sets up both rings for `fd` and arms the receive. Fails, naming what is missing, where
    /// the kernel has no io_uring (or forbids it), no provided-buffer rings or no multishot
    /// `recvmsg`.
    pub(crate) fn new(fd: BorrowedFd<'_>, batch: usize) -> io::Result<Self> {
        let count = buffer_count(batch);
        // Completions never outnumber buffers plus the request's end and a cancellation, so
        // twice the buffers never overflows.
        let rx_ring = IoUring::builder()
            .setup_cqsize(2 * u32::from(count))
            .build(4)
            .map_err(|e| setup_error(&e))?;
        let mut probe = Probe::new();
        rx_ring
            .submitter()
            .register_probe(&mut probe)
            .map_err(|e| unsupported("IORING_REGISTER_PROBE (Linux 5.6)", e))?;
        for (code, name) in [
            (opcode::RecvMsgMulti::CODE, "IORING_OP_RECVMSG"),
            (opcode::SendMsg::CODE, "IORING_OP_SENDMSG"),
            (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
        ] {
            if !probe.is_supported(code) {
                return Err(unsupported(name, "not in the probe"));
            }
        }
        let entries = batch.clamp(1, MAX_BATCH_SIZE).next_power_of_two();
        // SUBMIT_ALL: a request that fails as it is read fails its link and the kernel
        // still takes the rest of the submission (cancelled with it), rather than leaving
        // them queued to go out as a chain of their own.
        let tx_ring = IoUring::builder()
            .setup_submit_all()
            .build(u32::try_from(entries).unwrap_or(128))
            .map_err(|e| setup_error(&e))?;
        let capacity = tx_ring.params().sq_entries() as usize;

        let bufs = Region::new(usize::from(count) * BUF_SIZE)?;
        let buf_ring = Region::new(usize::from(count) * mem::size_of::<BufEntry>())?;
        let rx_fd = rx_ring.as_raw_fd();
        let mut rx = Rx {
            ring: rx_ring,
            bufs,
            buf_ring,
            count,
            tail: 0,
            template: Template::new(),
            armed: false,
            backlog: VecDeque::new(),
            pending: None,
        };
        // SAFETY: `buf_ring` is page-aligned (mmap), zeroed, holds `count` entries (a power
        // of two) and lives as long as the ring: `Rx` closes the ring before unmapping it.
        unsafe {
            rx.ring.submitter().register_buf_ring_with_flags(
                rx.buf_ring.ptr.as_ptr() as u64,
                count,
                BGID,
                0,
            )
        }
        .map_err(|e| {
            unsupported(
                "provided-buffer rings (IORING_REGISTER_PBUF_RING, Linux 5.19)",
                e,
            )
        })?;
        for bid in 0..count {
            rx.give(bid);
        }
        rx.publish();
        rx.arm(fd.as_raw_fd())?;
        // A kernel without multishot recvmsg (before 6.0) fails the request at once.
        while let Some(cqe) = rx.ring.completion().next() {
            let (tag, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            if tag == RECV_TAG && res < 0 && !cqueue::more(flags) {
                rx.armed = false;
                let e = io::Error::from_raw_os_error(-res);
                if res == -libc::EINVAL || res == -libc::EOPNOTSUPP {
                    return Err(unsupported("multishot recvmsg (Linux 6.0)", e));
                }
                return Err(io::Error::new(
                    e.kind(),
                    format!("arming the io_uring receive: {e}"),
                ));
            }
            rx.backlog.push_back((tag, res, flags));
        }
        Ok(Self {
            rx: Mutex::new(rx),
            tx: Mutex::new(Tx {
                ring: tx_ring,
                capacity,
                broken: false,
            }),
            rx_fd,
            rearms: AtomicU64::new(0),
            no_buffers: AtomicU64::new(0),
        })
    }

    /// The receive ring's descriptor: readable while completions wait.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: `rx_fd` belongs to the receive ring, which lives as long as `self`.
        unsafe { BorrowedFd::borrow_raw(self.rx_fd) }
    }

    /// How often the multishot receive was armed again after it ended, and how many of those
    /// ends were `-ENOBUFS` (every buffer in use).
    pub(crate) fn rearms(&self) -> (u64, u64) {
        (
            self.rearms.load(Ordering::Relaxed),
            self.no_buffers.load(Ordering::Relaxed),
        )
    }

    /// Takes up to `slots.len()` completed receives: each datagram (or GRO run) into a slot,
    /// described in `meta` exactly as `recvmmsg` would. `WouldBlock` when none waits.
    pub(crate) fn recv(
        &self,
        fd: BorrowedFd<'_>,
        slots: &mut [BytesMut],
        meta: &mut [SlotMeta],
    ) -> io::Result<Received> {
        let mut rx = lock(&self.rx);
        if let Some(e) = rx.pending.take() {
            return Err(e);
        }
        let n = slots.len().min(meta.len());
        let mut filled = 0;
        let mut drops = None;
        let mut error = None;
        for _ in 0..=MAX_REARMS_PER_CALL {
            let ended = rx.harvest(
                &mut slots[..n],
                &mut meta[..n],
                &mut filled,
                &mut drops,
                &self.no_buffers,
            );
            if let Err(e) = ended {
                error = Some(e);
            }
            rx.publish();
            if rx.armed {
                break;
            }
            // Buffers handed back first, so the new request has them.
            match rx.arm(fd.as_raw_fd()) {
                Ok(()) => {
                    self.rearms.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    error.get_or_insert(e);
                    break;
                }
            }
            // The new request may have received at once what waited in the socket.
            if error.is_some() || filled == n {
                break;
            }
        }
        if let Some(e) = error {
            if filled == 0 {
                return Err(e);
            }
            rx.pending = Some(e);
        }
        if filled == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(Received {
            filled,
            kernel_drops: drops,
        })
    }

    /// Sends a prefix of `messages` as one submission of linked `sendmsg` requests and
    /// waits for all of them. Returns how many went out (at least 1), or the first one's
    /// error.
    pub(crate) fn send(&self, fd: BorrowedFd<'_>, messages: &[Transmit<'_>]) -> io::Result<usize> {
        let mut tx = lock(&self.tx);
        if tx.broken {
            return Err(io::Error::other(
                "the io_uring send ring failed earlier and is not used again",
            ));
        }
        let n = messages.len().min(tx.capacity).min(MAX_BATCH_SIZE);
        if n == 0 {
            return Ok(0);
        }
        let mut hdrs: [MaybeUninit<libc::msghdr>; MAX_BATCH_SIZE] =
            [const { MaybeUninit::uninit() }; MAX_BATCH_SIZE];
        let mut scratch = msg::SendScratch::new();
        let mut pushed = true;
        {
            let mut sq = tx.ring.submission();
            for (i, t) in messages[..n].iter().enumerate() {
                // SAFETY: all-zero is a valid msghdr.
                let hdr = hdrs[i].write(unsafe { mem::zeroed() });
                scratch.prepare(i, t, hdr);
                let mut sqe = opcode::SendMsg::new(types::Fd(fd.as_raw_fd()), ptr::from_ref(&*hdr))
                    .flags(libc::MSG_DONTWAIT as u32)
                    .build()
                    .user_data(i as u64);
                if i + 1 < n {
                    sqe = sqe.flags(squeue::Flags::IO_LINK);
                }
                // SAFETY: the header points at the iovec, name and control buffer of its slot
                // in `scratch` (in this frame, not moved) and at the transmit's contents, all of which outlive the wait below for every
                // completion of this submission. The queue was empty (every call waits for
                // all it submitted) and has `capacity >= n` entries.
                if unsafe { sq.push(&sqe) }.is_err() {
                    pushed = false;
                    break;
                }
            }
        }
        if !pushed {
            // Cannot happen (see above). What was queued refers to this frame: never submit it.
            tx.broken = true;
            return Err(io::Error::other("io_uring send ring full"));
        }
        let results = tx.wait_all(n)?;
        let ok = results[..n].iter().take_while(|&&r| r >= 0).count();
        if ok == 0 {
            Err(io::Error::from_raw_os_error(-results[0]))
        } else {
            Ok(ok)
        }
    }
}

impl Tx {
    /// Submits what is queued and waits until all `n` requests (tagged `0..n`) completed;
    /// their results by tag.
    fn wait_all(&mut self, n: usize) -> io::Result<[i32; MAX_BATCH_SIZE]> {
        let mut results = [i32::MIN; MAX_BATCH_SIZE];
        let mut done = 0;
        loop {
            for cqe in self.ring.completion() {
                let i = usize::try_from(cqe.user_data()).unwrap_or(usize::MAX);
                if i < n && results[i] == i32::MIN {
                    results[i] = cqe.result();
                    done += 1;
                }
            }
            if done == n {
                return Ok(results);
            }
            match self.ring.submitter().submit_and_wait(n - done) {
                Ok(_) => {}
                // Interrupted, or short of memory or completion room for a moment: the
                // requests are ours to wait for either way.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
                {
                    std::thread::yield_now();
                }
                Err(e) => {
                    let queued = self.ring.submission().len();
                    if n - done > queued {
                        // Requests in flight refer to the caller's buffers, and the ring
                        // cannot be waited on: returning would let the kernel read freed
                        // memory. No kernel does this to a healthy ring.
                        eprintln!(
                            "neqo-udp: io_uring send ring failed with requests in flight: {e}"
                        );
                        std::process::abort();
                    }
                    // Nothing in flight; what is still queued is never submitted: the ring
                    // is not entered again.
                    self.broken = true;
                    return Err(io::Error::new(e.kind(), format!("io_uring send: {e}")));
                }
            }
        }
    }
}

impl Rx {
    /// Hands buffer `bid` (back) to the kernel; visible to it after `publish`.
    fn give(&mut self, bid: u16) {
        debug_assert!(bid < self.count);
        let index = usize::from(self.tail & (self.count - 1));
        let addr = self.bufs.ptr.as_ptr() as u64 + (usize::from(bid) * BUF_SIZE) as u64;
        // SAFETY: `index < count`, so the entry lies in the ring's mapping; the kernel reads
        // entries only between its head and the published tail, and this one is past the
        // tail. The fields are written one by one so that entry 0's `resv`, which is the
        // tail, is never written here.
        unsafe {
            let entry = self.buf_ring.ptr.as_ptr().cast::<BufEntry>().add(index);
            ptr::addr_of_mut!((*entry).addr).write(addr);
            ptr::addr_of_mut!((*entry).len).write(BUF_SIZE as u32);
            ptr::addr_of_mut!((*entry).bid).write(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the entries written since the last call (release: entries before tail).
    fn publish(&self) {
        // SAFETY: the tail is the u16 at offset 14 of the page-aligned ring (so aligned),
        // which only we write and the kernel reads atomically.
        let tail = unsafe {
            AtomicU16::from_ptr(
                self.buf_ring
                    .ptr
                    .as_ptr()
                    .add(mem::offset_of!(BufEntry, resv))
                    .cast::<u16>(),
            )
        };
        tail.store(self.tail, Ordering::Release);
    }

    /// Arms the multishot receive on `fd` (or submits the arm left queued by a failure).
    fn arm(&mut self, fd: RawFd) -> io::Result<()> {
        if self.ring.submission().is_empty() {
            let sqe = opcode::RecvMsgMulti::new(types::Fd(fd), &raw const self.template.0, BGID)
                .flags(libc::MSG_TRUNC as u32)
                .build()
                .user_data(RECV_TAG);
            // SAFETY: the template lives as long as the ring (the kernel copies it while the
            // submission is made), and the buffer group it selects from is registered.
            unsafe { self.ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("receive ring full"))?;
        }
        loop {
            match self.ring.submit() {
                Ok(_) => {
                    self.armed = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn next_completion(&mut self) -> Option<(u64, i32, u32)> {
        self.backlog.pop_front().or_else(|| {
            self.ring
                .completion()
                .next()
                .map(|c| (c.user_data(), c.result(), c.flags()))
        })
    }

    /// Takes completions into the slots from `*filled` on until they are full or none
    /// waits. Returns the error of a failed request (which ended it), stopping there.
    fn harvest(
        &mut self,
        slots: &mut [BytesMut],
        meta: &mut [SlotMeta],
        filled: &mut usize,
        drops: &mut Option<u64>,
        no_buffers: &AtomicU64,
    ) -> io::Result<()> {
        while *filled < slots.len() {
            let Some((tag, res, flags)) = self.next_completion() else {
                break;
            };
            if tag != RECV_TAG {
                continue;
            }
            if !cqueue::more(flags) {
                self.armed = false;
            }
            if let Some(bid) = cqueue::buffer_select(flags) {
                if bid < self.count {
                    let d = self.take(bid, &mut slots[*filled], &mut meta[*filled]);
                    *drops = (*drops).max(d);
                    *filled += 1;
                    self.give(bid);
                }
                continue;
            }
            match -res {
                // Every buffer in use: the rest waits in the socket; armed again once the
                // buffers are back.
                libc::ENOBUFS => {
                    no_buffers.fetch_add(1, Ordering::Relaxed);
                }
                // The submitting thread exited, or we cancelled.
                libc::ECANCELED => {}
                e if e > 0 => return Err(io::Error::from_raw_os_error(e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Copies what the kernel wrote into buffer `bid` into `slot` and decodes it into `meta`.
    fn take(&self, bid: u16, slot: &mut BytesMut, meta: &mut SlotMeta) -> Option<u64> {
        // SAFETY: buffer `bid` lies in the mapping (bid < count), is initialised memory (a
        // zeroed mapping the kernel has written into), and is ours alone from its completion
        // until `give` hands it back, after this slice is gone.
        let buf = unsafe {
            slice::from_raw_parts(
                self.bufs.ptr.as_ptr().add(usize::from(bid) * BUF_SIZE),
                BUF_SIZE,
            )
        };
        let Ok(out) = types::RecvMsgOut::parse(buf, &self.template.0) else {
            *meta = SlotMeta {
                dropped: Some((RxDrop::Other, 1)),
                ..SlotMeta::default()
            };
            return None;
        };
        let len = out.incoming_payload_len() as usize;
        let payload = out.payload_data();
        let mut flags = out.flags() as libc::c_int;
        let spare = slot.spare_capacity_mut();
        if len > payload.len() || len > spare.len() {
            // Cut by the buffer (the kernel says so too) or too long for the caller's slot,
            // which recvmmsg would have truncated: dropped and counted alike.
            flags |= libc::MSG_TRUNC;
        } else {
            // SAFETY: `len <= payload.len()` and `len <= spare.len()`; the regions are
            // distinct (kernel buffer, slot allocation).
            unsafe {
                ptr::copy_nonoverlapping(payload.as_ptr(), spare.as_mut_ptr().cast::<u8>(), len);
            }
        }
        // `finish_recv` sets the slot's length to what was copied (its contract: the first
        // `min(len, spare)` bytes of spare capacity written, unless it drops the slot).
        cmsg::finish_recv(
            slot,
            Written {
                len,
                flags,
                name: out.name_data(),
                control: out.control_data(),
            },
            meta,
        )
    }

    /// Cancels the armed receive and waits (boundedly) for its end, after which the kernel
    /// no longer writes into our buffers. False if it did not end.
    fn quiesce(&mut self) -> bool {
        if !self.armed {
            return true;
        }
        let cancel = opcode::AsyncCancel::new(RECV_TAG)
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancellation refers to no memory.
        if unsafe { self.ring.submission().push(&cancel) }.is_err() {
            return false;
        }
        let timeout = types::Timespec::new().nsec(100_000_000);
        let args = types::SubmitArgs::new().timespec(&timeout);
        for _ in 0..50 {
            let _ = self.ring.submitter().submit_with_args(1, &args);
            while let Some((tag, _, flags)) = self.next_completion() {
                if tag == RECV_TAG && !cqueue::more(flags) {
                    self.armed = false;
                }
            }
            if !self.armed {
                return true;
            }
        }
        false
    }
}

impl Drop for Rx {
    fn drop(&mut self) {
        if self.quiesce() {
            let _ = self.ring.submitter().unregister_buf_ring(BGID);
        } else {
            // The request may still write into the buffers: never unmap them.
            tracing::warn!("io_uring receive did not end on cancellation; leaking its buffers");
            self.bufs.leak();
            self.buf_ring.leak();
        }
    }
}

/// Registers a duplicate of the receive ring's descriptor with tokio for read readiness
/// (the duplicate is owned by the `AsyncFd`, so no drop order ties it to the ring).
#[cfg(feature = "tokio")]
pub(crate) fn register_readiness(
    fd: BorrowedFd<'_>,
) -> io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    let owned = fd.try_clone_to_owned()?;
    // SAFETY: an `OwnedFd` is an open descriptor that stays open, and always reports the same
    // number, for as long as the `AsyncFd` owns it.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
    };
    registered.map_err(|e| e.into())
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;

    use super::*;

    /// What the kernel does with a `sendmsg` request on a non-blocking socket whose buffer is
    /// full: without `MSG_DONTWAIT` it arms a poll and completes once there is room (so a
    /// send that waited for its completions would block); with it, `-EAGAIN` at once.
    /// (A datagram Unix socket fills when its peer does not read; io_uring's `sendmsg` path
    /// is the same for every socket type.)
    #[test]
    fn full_socket_buffer_waits_unless_dontwait() {
        let (a, b) = UnixDatagram::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let body = [7u8; 512];
        while a.send(&body).is_ok() {}
        let mut ring = IoUring::new(8).unwrap();
        let mut iov = libc::iovec {
            iov_base: body.as_ptr().cast_mut().cast(),
            iov_len: body.len(),
        };
        // SAFETY: all-zero is a valid msghdr.
        let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
        hdr.msg_iov = &raw mut iov;
        hdr.msg_iovlen = 1;
        let send = |ring: &mut IoUring, flags: libc::c_int, tag: u64| {
            let sqe = opcode::SendMsg::new(types::Fd(a.as_raw_fd()), &raw const hdr)
                .flags(flags as u32)
                .build()
                .user_data(tag);
            // SAFETY: the header, iovec and body outlive every wait below.
            unsafe { ring.submission().push(&sqe) }.unwrap();
            ring.submit().unwrap();
        };

        send(&mut ring, libc::MSG_DONTWAIT, 1);
        let cqe = ring.completion().next().expect("completes inline");
        assert_eq!((cqe.user_data(), cqe.result()), (1, -libc::EAGAIN));

        send(&mut ring, 0, 2);
        assert!(
            ring.completion().next().is_none(),
            "without MSG_DONTWAIT the request waits for room"
        );
        // Drain the peer: the writer is woken once most of the buffer is free.
        b.set_nonblocking(true).unwrap();
        let mut sink = [0u8; 1024];
        while b.recv(&mut sink).is_ok() {}
        ring.submit_and_wait(1).unwrap();
        let cqe = ring.completion().next().unwrap();
        assert_eq!((cqe.user_data(), cqe.result()), (2, body.len() as i32));
    }

    #[test]
    fn setup_errors_name_what_is_missing() {
        let e = setup_error(&io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("io_uring_disabled"), "{e}");
        let e = setup_error(&io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(e.to_string().contains("no io_uring"), "{e}");
    }

    #[test]
    fn buffer_counts_are_powers_of_two() {
        assert_eq!(buffer_count(1), 8);
        assert_eq!(buffer_count(32), 64);
        assert_eq!(buffer_count(33), 128);
        assert_eq!(buffer_count(128), 256);
        assert_eq!(buffer_count(10_000), 256);
    }
}
