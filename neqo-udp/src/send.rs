//! The send policy: how a batch of transmits becomes syscalls, and what each error means.
//!
//! It drives a syscall function (`sendmmsg` or `sendmsg` in production, a scripted double in
//! tests) and decides, per error, whether to retry, drop one transmit, turn GSO off, or stop:
//!
//! | error | action |
//! |---|---|
//! | `EINTR` | retry the same call |
//! | `EAGAIN` | stop; report what was taken so far (or `WouldBlock` if nothing) |
//! | `EMSGSIZE` | drop that one transmit (an oversized PMTU probe), count it, clear the error queue |
//! | `ENOBUFS` | drop that one transmit, count it: no writable wake-up would follow |
//! | `EIO`/`EINVAL` on a GSO transmit | GSO off for the socket; resend that transmit as separate datagrams |
//! | ICMP-driven (`ECONNREFUSED`, unreachable, ...) | a pending error of an earlier datagram: drain the error queue, retry; drop the transmit only if the error is its own (nothing was pending) and keeps coming |
//! | a broken socket (`EBADF`, `ENOTSOCK`, `EFAULT`) | return the error |
//! | anything else | drop that transmit, count it |

use std::{
    collections::VecDeque,
    io,
    net::{IpAddr, SocketAddr},
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
};

use quinn_udp::{EcnCodepoint, Transmit};

use crate::stats::{Counters, ErrorKind};

/// A datagram copied out of a GSO transmit that the kernel refused to segment. Rare: only
/// transmits built before GSO was found broken end up here.
#[derive(Debug, Clone)]
pub(crate) struct Owned {
    destination: SocketAddr,
    ecn: Option<EcnCodepoint>,
    src_ip: Option<IpAddr>,
    contents: Vec<u8>,
}

impl Owned {
    fn as_transmit(&self) -> Transmit<'_> {
        Transmit {
            destination: self.destination,
            ecn: self.ecn,
            contents: &self.contents,
            segment_size: None,
            src_ip: self.src_ip,
        }
    }
}

/// How the policy reads an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendError {
    Interrupted,
    WouldBlock,
    MsgSize,
    NoBuffers,
    /// `EIO`/`EINVAL`: GSO unsupported by the device or path, or a bad argument.
    IoOrInvalid,
    Icmp,
    Fatal,
    Other,
}

pub(crate) fn classify(e: &io::Error) -> SendError {
    match e.kind() {
        io::ErrorKind::Interrupted => return SendError::Interrupted,
        io::ErrorKind::WouldBlock => return SendError::WouldBlock,
        _ => {}
    }
    #[cfg(unix)]
    {
        match e.raw_os_error() {
            Some(libc::EMSGSIZE) => SendError::MsgSize,
            Some(libc::ENOBUFS) => SendError::NoBuffers,
            Some(libc::EIO | libc::EINVAL) => SendError::IoOrInvalid,
            Some(
                libc::ECONNREFUSED
                | libc::ECONNRESET
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::ENETDOWN
                | libc::EPROTO,
            ) => SendError::Icmp,
            Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT) => SendError::Fatal,
            _ => SendError::Other,
        }
    }
    #[cfg(not(unix))]
    {
        match e.kind() {
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable => SendError::Icmp,
            _ => SendError::Other,
        }
    }
}

/// How often an ICMP-class error that is the transmit's own may hit it before it is dropped.
///
/// On an unconnected socket an ICMP error arrives after the datagram that caused it was sent,
/// so the kernel fails the *next* send with it and queues it (`IP_RECVERR`). Such a pending
/// error is no reason to drop the transmit that met it: the retry after draining the queue
/// sends it. But the route lookup can fail a send with the same codes (`ENETUNREACH`,
/// `EHOSTUNREACH`) on every attempt, and then nothing was queued: those are the errors counted
/// here.
const MAX_OWN_ICMP_RETRIES: u32 = 3;

/// How many pending ICMP errors in a row a transmit may meet before it is dropped anyway.
///
/// Errors of earlier datagrams can keep arriving while a transmit is retried (another thread
/// sending on the same socket, a peer that went away mid-burst): a streak of four was seen
/// on loopback. This bound only guarantees progress if something keeps the queue full.
const MAX_PENDING_ICMP_RETRIES: u32 = 64;

/// Number of datagrams a transmit carries when sent with segment size `seg`.
pub(crate) fn segments_of(t: &Transmit<'_>) -> usize {
    match t.segment_size {
        Some(seg) if seg > 0 && seg < t.contents.len() => t.contents.len().div_ceil(seg),
        _ => 1,
    }
}

fn is_multi_segment(t: &Transmit<'_>) -> bool {
    segments_of(t) > 1
}

/// Per-socket send state.
#[derive(Debug)]
pub(crate) struct SendPolicy {
    /// Messages per syscall.
    pub(crate) batch: usize,
    /// Segments per GSO send; 1 once GSO is off.
    pub(crate) gso_segments: AtomicUsize,
}

/// Everything one send call works on.
pub(crate) struct SendCall<'a, F, D>
where
    F: FnMut(&[Transmit<'_>], bool) -> io::Result<usize>,
    D: FnMut() -> u64,
{
    pub(crate) policy: &'a SendPolicy,
    pub(crate) counters: &'a Counters,
    pub(crate) backlog: &'a mut VecDeque<Owned>,
    /// The syscall: sends a prefix of the transmits (GSO on if the flag says so), returns how
    /// many it took or the error of the first.
    pub(crate) sys: F,
    /// Drains the ICMP error queue, returns how many errors it held.
    pub(crate) drain_errors: D,
}

/// ICMP-class errors met in a row by the transmit at the head of a send.
#[derive(Debug, Default)]
struct IcmpRetries {
    /// Errors that were the transmit's own: nothing was queued when it failed.
    own: u32,
    /// Errors of earlier datagrams, drained from the queue.
    pending: u32,
}

impl IcmpRetries {
    /// Records one more error; whether the transmit should now be dropped.
    fn give_up(&mut self, pending: bool) -> bool {
        if pending {
            self.pending += 1;
        } else {
            self.own += 1;
        }
        self.own > MAX_OWN_ICMP_RETRIES || self.pending > MAX_PENDING_ICMP_RETRIES
    }
}

enum Step {
    /// `n` transmits (of the slice given) are done: sent or deliberately dropped.
    Done(usize),
    Retry,
    WouldBlock(io::Error),
}

impl<F, D> SendCall<'_, F, D>
where
    F: FnMut(&[Transmit<'_>], bool) -> io::Result<usize>,
    D: FnMut() -> u64,
{
    fn gso_on(&self) -> bool {
        self.policy.gso_segments.load(Relaxed) > 1
    }

    fn record(&self, sent: &[Transmit<'_>]) {
        let mut datagrams = 0;
        let mut bytes = 0;
        let mut offload = 0;
        for t in sent {
            let segs = segments_of(t);
            datagrams += segs;
            bytes += t.contents.len();
            if segs > 1 {
                offload += segs;
            }
        }
        self.counters.tx.record(datagrams, bytes, offload);
    }

    /// One syscall over `chunk` and what its outcome means. `icmp_retries` counts the ICMP
    /// errors seen in a row on `chunk[0]`.
    fn attempt(
        &mut self,
        chunk: &[Transmit<'_>],
        icmp_retries: &mut IcmpRetries,
    ) -> io::Result<Step> {
        let gso = self.gso_on();
        match (self.sys)(chunk, gso) {
            Ok(n) => {
                let n = n.min(chunk.len());
                self.record(&chunk[..n]);
                *icmp_retries = IcmpRetries::default();
                Ok(Step::Done(n))
            }
            Err(e) => {
                let first = &chunk[0];
                match classify(&e) {
                    SendError::Interrupted => {
                        self.counters.error(ErrorKind::Interrupted);
                        Ok(Step::Retry)
                    }
                    SendError::WouldBlock => {
                        self.counters.error(ErrorKind::WouldBlock);
                        Ok(Step::WouldBlock(e))
                    }
                    SendError::MsgSize => {
                        tracing::debug!(
                            "dropping {}-byte transmit to {}: {e}",
                            first.contents.len(),
                            first.destination
                        );
                        self.counters.error(ErrorKind::MsgSize);
                        // With IP_RECVERR the kernel also queues this error and leaves it
                        // pending on the socket, where the next send would inherit it.
                        let _ = (self.drain_errors)();
                        Ok(Step::Done(1))
                    }
                    SendError::NoBuffers => {
                        self.counters.error(ErrorKind::NoBuffers);
                        let _ = (self.drain_errors)();
                        Ok(Step::Done(1))
                    }
                    SendError::IoOrInvalid if gso && is_multi_segment(first) => {
                        tracing::info!("GSO send failed ({e}); GSO off for this socket");
                        self.policy.gso_segments.store(1, Relaxed);
                        self.counters.error(ErrorKind::GsoFallback);
                        // The next attempt sees GSO off and splits this transmit.
                        Ok(Step::Retry)
                    }
                    SendError::Icmp => {
                        self.counters.error(ErrorKind::Icmp);
                        let pending = (self.drain_errors)() > 0;
                        if icmp_retries.give_up(pending) {
                            tracing::debug!(
                                "dropping transmit to {} after repeated {e}",
                                first.destination
                            );
                            *icmp_retries = IcmpRetries::default();
                            self.counters.error(ErrorKind::SendDroppedOther);
                            Ok(Step::Done(1))
                        } else {
                            Ok(Step::Retry)
                        }
                    }
                    SendError::Fatal => {
                        self.counters.error(ErrorKind::Other);
                        Err(e)
                    }
                    SendError::IoOrInvalid | SendError::Other => {
                        tracing::debug!("dropping transmit to {}: {e}", first.destination);
                        self.counters.error(ErrorKind::SendDroppedOther);
                        let _ = (self.drain_errors)();
                        Ok(Step::Done(1))
                    }
                }
            }
        }
    }

    /// Sends what the backlog holds. `Err(WouldBlock)` if it could not be emptied.
    fn flush_backlog(&mut self) -> io::Result<()> {
        let mut icmp_retries = IcmpRetries::default();
        while !self.backlog.is_empty() {
            let n = self.backlog.len().min(self.policy.batch);
            let owned: Vec<Owned> = self.backlog.iter().take(n).cloned().collect();
            let chunk: Vec<Transmit<'_>> = owned.iter().map(Owned::as_transmit).collect();
            match self.attempt(&chunk, &mut icmp_retries)? {
                Step::Done(k) => {
                    self.backlog.drain(..k);
                }
                Step::Retry => {}
                Step::WouldBlock(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends `transmits` in batches. Returns how many were taken (sent, or dropped on a
    /// per-transmit error); `Err(WouldBlock)` only when none was.
    pub(crate) fn send(&mut self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        self.flush_backlog()?;
        let mut done = 0;
        let mut icmp_retries = IcmpRetries::default();
        while done < transmits.len() {
            let first = &transmits[done];
            if !self.gso_on() && is_multi_segment(first) {
                // GSO is off (found broken after this transmit was built): send its segments
                // one by one. They go to the backlog so that a full send buffer loses nothing.
                let seg = first.segment_size.unwrap_or(first.contents.len());
                for part in first.contents.chunks(seg) {
                    self.backlog.push_back(Owned {
                        destination: first.destination,
                        ecn: first.ecn,
                        src_ip: first.src_ip,
                        contents: part.to_vec(),
                    });
                }
                done += 1;
                match self.flush_backlog() {
                    Ok(()) => continue,
                    Err(e) if classify(&e) == SendError::WouldBlock => return Ok(done),
                    Err(e) => return Err(e),
                }
            }
            // A run of transmits the kernel can take as they are.
            let gso = self.gso_on();
            let end = transmits[done..]
                .iter()
                .take(self.policy.batch)
                .position(|t| !gso && is_multi_segment(t))
                .map_or_else(
                    || (done + self.policy.batch).min(transmits.len()),
                    |p| done + p,
                );
            match self.attempt(&transmits[done..end], &mut icmp_retries)? {
                Step::Done(k) => done += k,
                Step::Retry => {}
                Step::WouldBlock(e) => {
                    return if done == 0 { Err(e) } else { Ok(done) };
                }
            }
        }
        Ok(done)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::{cell::RefCell, collections::VecDeque};

    use super::*;

    fn err(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    /// A scripted kernel: each call pops the next outcome; `Ok(None)` means "take all".
    /// Records every datagram it accepted (splitting GSO runs) and the GSO flag of each call.
    struct FakeKernel {
        script: RefCell<VecDeque<Result<Option<usize>, i32>>>,
        sent: RefCell<Vec<Vec<u8>>>,
        gso_flags: RefCell<Vec<bool>>,
    }

    impl FakeKernel {
        fn new(script: Vec<Result<Option<usize>, i32>>) -> Self {
            Self {
                script: RefCell::new(script.into()),
                sent: RefCell::default(),
                gso_flags: RefCell::default(),
            }
        }

        fn call(&self, chunk: &[Transmit<'_>], gso: bool) -> io::Result<usize> {
            self.gso_flags.borrow_mut().push(gso);
            let step = self.script.borrow_mut().pop_front().unwrap_or(Ok(None));
            let n = match step {
                Ok(None) => chunk.len(),
                Ok(Some(n)) => n.min(chunk.len()),
                Err(code) => return Err(err(code)),
            };
            for t in &chunk[..n] {
                assert!(
                    gso || !is_multi_segment(t),
                    "GSO transmit sent with GSO off"
                );
                let seg = t.segment_size.unwrap_or(t.contents.len()).max(1);
                for part in t.contents.chunks(seg) {
                    self.sent.borrow_mut().push(part.to_vec());
                }
            }
            Ok(n)
        }
    }

    struct Harness {
        policy: SendPolicy,
        counters: Counters,
        backlog: VecDeque<Owned>,
        kernel: FakeKernel,
        drained: RefCell<u32>,
        /// What each drain of the error queue finds in it.
        queued: u64,
    }

    impl Harness {
        fn new(batch: usize, gso_segments: usize, script: Vec<Result<Option<usize>, i32>>) -> Self {
            Self {
                policy: SendPolicy {
                    batch,
                    gso_segments: AtomicUsize::new(gso_segments),
                },
                counters: Counters::default(),
                backlog: VecDeque::new(),
                kernel: FakeKernel::new(script),
                drained: RefCell::new(0),
                queued: 1,
            }
        }

        fn send(&mut self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
            let kernel = &self.kernel;
            let drained = &self.drained;
            let queued = self.queued;
            SendCall {
                policy: &self.policy,
                counters: &self.counters,
                backlog: &mut self.backlog,
                sys: |c: &[Transmit<'_>], g: bool| kernel.call(c, g),
                drain_errors: || {
                    *drained.borrow_mut() += 1;
                    queued
                },
            }
            .send(transmits)
        }
    }

    fn datagram(tag: u8, len: usize) -> Vec<u8> {
        vec![tag; len]
    }

    fn transmit(contents: &[u8], seg: Option<usize>) -> Transmit<'_> {
        Transmit {
            destination: "127.0.0.1:9".parse().unwrap(),
            ecn: None,
            contents,
            segment_size: seg,
            src_ip: None,
        }
    }

    #[test]
    fn batches_are_cut_at_batch_size() {
        let data: Vec<Vec<u8>> = (0..10).map(|i| datagram(i, 100)).collect();
        let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
        let mut h = Harness::new(4, 64, vec![]);
        assert_eq!(h.send(&ts).unwrap(), 10);
        assert_eq!(h.kernel.gso_flags.borrow().len(), 3, "4 + 4 + 2");
        assert_eq!(*h.kernel.sent.borrow(), data);
        let s = h.counters.snapshot();
        assert_eq!(s.tx.syscalls, 3);
        assert_eq!(s.tx.datagrams, 10);
        assert_eq!(s.tx.bytes, 1000);
    }

    #[test]
    fn eintr_is_retried() {
        let d = datagram(1, 10);
        let mut h = Harness::new(32, 64, vec![Err(libc::EINTR), Err(libc::EINTR)]);
        assert_eq!(h.send(&[transmit(&d, None)]).unwrap(), 1);
        assert_eq!(h.kernel.sent.borrow().len(), 1);
        assert_eq!(h.counters.snapshot().errors.interrupted, 2);
    }

    #[test]
    fn would_block_first_is_an_error_later_is_a_partial_count() {
        let data: Vec<Vec<u8>> = (0..6).map(|i| datagram(i, 10)).collect();
        let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
        let mut h = Harness::new(32, 64, vec![Err(libc::EAGAIN)]);
        let e = h.send(&ts).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(h.kernel.sent.borrow().is_empty());

        // Partial: kernel takes 4, then the retry of the rest blocks.
        let mut h = Harness::new(32, 64, vec![Ok(Some(4)), Err(libc::EAGAIN)]);
        assert_eq!(h.send(&ts).unwrap(), 4);
        // The caller resends the rest: everything arrives, in order, once.
        assert_eq!(h.send(&ts[4..]).unwrap(), 2);
        assert_eq!(*h.kernel.sent.borrow(), data);
    }

    #[test]
    fn emsgsize_drops_only_that_transmit() {
        let data: Vec<Vec<u8>> = (0..3).map(|i| datagram(i, 10)).collect();
        let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
        // First message of the batch fails, the rest then go in one call.
        let mut h = Harness::new(32, 64, vec![Err(libc::EMSGSIZE)]);
        assert_eq!(h.send(&ts).unwrap(), 3);
        assert_eq!(*h.kernel.sent.borrow(), data[1..].to_vec());
        assert_eq!(h.counters.snapshot().errors.msg_size, 1);
    }

    #[test]
    fn enobufs_drops_that_transmit_and_is_not_would_block() {
        let data: Vec<Vec<u8>> = (0..3).map(|i| datagram(i, 10)).collect();
        let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
        // Second message fails: the kernel first reports 1 sent, then the error.
        let mut h = Harness::new(32, 64, vec![Ok(Some(1)), Err(libc::ENOBUFS)]);
        assert_eq!(h.send(&ts).unwrap(), 3);
        assert_eq!(
            *h.kernel.sent.borrow(),
            vec![data[0].clone(), data[2].clone()]
        );
        let s = h.counters.snapshot();
        assert_eq!(s.errors.no_buffers, 1);
        assert_eq!(s.errors.would_block, 0);
    }

    #[test]
    fn gso_failure_turns_gso_off_and_resends_segments() {
        let run: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        let tail = datagram(9, 50);
        let ts = [transmit(&run, Some(1200)), transmit(&tail, None)];
        for code in [libc::EIO, libc::EINVAL] {
            let mut h = Harness::new(32, 64, vec![Err(code)]);
            assert_eq!(h.send(&ts).unwrap(), 2);
            assert_eq!(h.policy.gso_segments.load(Relaxed), 1, "GSO off");
            let sent = h.kernel.sent.borrow().clone();
            assert_eq!(
                sent,
                vec![
                    run[..1200].to_vec(),
                    run[1200..2400].to_vec(),
                    run[2400..].to_vec(),
                    tail.clone()
                ]
            );
            assert_eq!(h.counters.snapshot().errors.gso_fallback, 1);
            assert!(h.backlog.is_empty());
            // Later GSO transmits are split too, and no call carries GSO any more.
            h.send(&ts).unwrap();
            assert_eq!(h.kernel.sent.borrow().len(), 8);
            assert!(!h.kernel.gso_flags.borrow()[1..].iter().any(|g| *g));
        }
    }

    #[test]
    fn gso_fallback_survives_a_full_send_buffer() {
        let run: Vec<u8> = (0..3000).map(|i| (i % 251) as u8).collect();
        let ts = [transmit(&run, Some(1000))];
        // GSO fails, then the split segments hit a full buffer after one.
        let mut h = Harness::new(32, 64, vec![Err(libc::EIO), Ok(Some(1)), Err(libc::EAGAIN)]);
        assert_eq!(
            h.send(&ts).unwrap(),
            1,
            "the transmit is taken: its rest waits in the backlog"
        );
        assert_eq!(h.backlog.len(), 2);
        // Next call flushes the backlog before anything new.
        let later = datagram(7, 10);
        assert_eq!(h.send(&[transmit(&later, None)]).unwrap(), 1);
        assert_eq!(
            *h.kernel.sent.borrow(),
            vec![
                run[..1000].to_vec(),
                run[1000..2000].to_vec(),
                run[2000..].to_vec(),
                later
            ]
        );
    }

    #[test]
    fn backlog_that_cannot_drain_blocks_new_transmits() {
        let run: Vec<u8> = vec![1; 2000];
        let mut h = Harness::new(
            32,
            64,
            vec![Err(libc::EIO), Err(libc::EAGAIN), Err(libc::EAGAIN)],
        );
        assert_eq!(h.send(&[transmit(&run, Some(1000))]).unwrap(), 1);
        let next = datagram(2, 10);
        let e = h.send(&[transmit(&next, None)]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(h.send(&[transmit(&next, None)]).unwrap(), 1);
        assert_eq!(h.kernel.sent.borrow().len(), 3);
    }

    #[test]
    fn icmp_errors_are_retried_and_never_fatal() {
        let d = datagram(3, 10);
        let mut h = Harness::new(
            32,
            64,
            vec![Err(libc::ECONNREFUSED), Err(libc::EHOSTUNREACH)],
        );
        assert_eq!(h.send(&[transmit(&d, None)]).unwrap(), 1);
        assert_eq!(*h.kernel.sent.borrow(), vec![d.clone()]);
        assert_eq!(h.counters.snapshot().errors.icmp, 2);
        assert_eq!(*h.drained.borrow(), 2);

        // Errors of earlier datagrams (each found queued) may keep arriving while one
        // transmit is retried: it is still sent, not dropped.
        let streak = MAX_OWN_ICMP_RETRIES as usize + 5;
        let mut h = Harness::new(32, 64, vec![Err(libc::ECONNREFUSED); streak]);
        assert_eq!(h.send(&[transmit(&d, None)]).unwrap(), 1);
        assert_eq!(*h.kernel.sent.borrow(), vec![d.clone()]);
        assert_eq!(h.counters.snapshot().errors.send_dropped_other, 0);
        assert_eq!(h.counters.snapshot().errors.icmp, streak as u64);

        // An error that is the transmit's own (nothing queued: a failed route lookup) and
        // keeps coming drops that transmit rather than spin; the next one goes out.
        let script = vec![Err(libc::ENETUNREACH); MAX_OWN_ICMP_RETRIES as usize + 1];
        let mut h = Harness::new(32, 64, script);
        h.queued = 0;
        let other = datagram(5, 10);
        assert_eq!(
            h.send(&[transmit(&d, None), transmit(&other, None)])
                .unwrap(),
            2
        );
        assert_eq!(*h.kernel.sent.borrow(), vec![other.clone()]);
        assert_eq!(h.counters.snapshot().errors.send_dropped_other, 1);

        // Pending errors without end still cannot hold a send forever.
        let script = vec![Err(libc::ECONNREFUSED); MAX_PENDING_ICMP_RETRIES as usize + 1];
        let mut h = Harness::new(32, 64, script);
        assert_eq!(
            h.send(&[transmit(&d, None), transmit(&other, None)])
                .unwrap(),
            2
        );
        assert_eq!(*h.kernel.sent.borrow(), vec![other]);
        assert_eq!(h.counters.snapshot().errors.send_dropped_other, 1);
    }

    #[test]
    fn unknown_errors_drop_one_transmit_broken_sockets_fail() {
        let d = datagram(4, 10);
        let mut h = Harness::new(32, 64, vec![Err(libc::EPERM)]);
        assert_eq!(
            h.send(&[transmit(&d, None), transmit(&d, None)]).unwrap(),
            2
        );
        assert_eq!(h.kernel.sent.borrow().len(), 1);
        assert_eq!(h.counters.snapshot().errors.send_dropped_other, 1);

        let mut h = Harness::new(32, 64, vec![Err(libc::EBADF)]);
        assert_eq!(
            h.send(&[transmit(&d, None)]).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn segments_and_offload_are_counted() {
        let run = vec![0u8; 2500];
        let one = vec![0u8; 1200];
        let mut h = Harness::new(32, 64, vec![]);
        h.send(&[transmit(&run, Some(1200)), transmit(&one, Some(1200))])
            .unwrap();
        let s = h.counters.snapshot();
        assert_eq!(s.tx.datagrams, 4);
        assert_eq!(s.tx.offload_segments, 3);
        assert_eq!(s.tx.syscalls, 1);
    }
}
