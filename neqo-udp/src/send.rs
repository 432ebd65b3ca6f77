//! The send policy: how a slice of transmits becomes syscalls, and what each error means.
//!
//! Transmits are cut into *pieces*, one message each: a run of at most the socket's GSO
//! segment count and at most [`MAX_UDP_PAYLOAD`] bytes, or a single datagram where GSO is off.
//! Up to `batch` pieces go in one syscall (`sendmmsg`). What a failed syscall means:
//!
//! | error | action |
//! |---|---|
//! | `EINTR` | retry |
//! | `EAGAIN` | stop: report how far the send got, or `WouldBlock` if nowhere |
//! | a broken socket (`EBADF`, `ENOTSOCK`, `EFAULT`) | return the error |
//! | anything else, the first time | retry at once: it may be a pending error of an earlier datagram, which this failure consumed |
//! | the same error again | the piece's own: drop it, counted per datagram by reason |
//! | `EIO`/`EINVAL` again on a GSO run | resend that run segment by segment; if a full-size segment then goes out, GSO was at fault and is off for the socket |
//! | never the same error twice in a row, [`MAX_FAILURES`] times | a GSO run that met `EIO`/`EINVAL` among them: resend it segment by segment, as above; anything else: drop it, counted under the last error's reason |
//!
//! The failure bound is there so that a send always ends. A retry at once meets at most one
//! pending error (the kernel keeps one and clears it when it reports it), so of two failures
//! in a row at least one is the piece's own; but pending errors arriving between the retries
//! can alternate with it, and which of two alternating errors is the piece's own cannot be
//! told. Splitting a run costs only syscalls (each segment then goes out or fails on its
//! own), so a run is split whenever either may have been GSO's fault.

use std::{
    io,
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
};

use crate::{
    config::MAX_BATCH_SIZE,
    stats::{Counters, Event, TxDrop},
    transmit::{MAX_UDP_PAYLOAD, Transmit},
};

/// How far a send got through the transmits it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sent {
    /// Transmits finished: every datagram of them sent, or dropped and counted.
    pub transmits: usize,
    /// Bytes of the next transmit finished, always whole segments: the kernel stopped
    /// (`EAGAIN`) in the middle of a run that had to be cut. Send the rest of it
    /// (`contents[partial..]`, same segment size) next.
    pub partial: usize,
}

impl Sent {
    /// `transmits` finished, and `partial` bytes of the next (whole segments): for a
    /// datapath of its own (a test double, a channel) that reports as a socket does.
    #[must_use]
    pub const fn new(transmits: usize, partial: usize) -> Self {
        Self { transmits, partial }
    }

    /// Whether anything at all was finished.
    #[must_use]
    pub const fn progressed(&self) -> bool {
        self.transmits > 0 || self.partial > 0
    }
}

/// Failures in a row after which a piece is dropped even if the errors differ each time.
pub(crate) const MAX_FAILURES: u32 = 8;

/// How the policy reads an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Interrupted,
    WouldBlock,
    /// The socket itself is unusable.
    Fatal,
    /// The message failed: the drop reason if it is its own, and whether GSO may be to blame.
    Failed {
        drop: TxDrop,
        gso_suspect: bool,
    },
}

/// What an error means for a send (and, but for `Failed`, for a receive).
pub(crate) fn classify(e: &io::Error) -> Class {
    match e.kind() {
        io::ErrorKind::Interrupted => return Class::Interrupted,
        io::ErrorKind::WouldBlock => return Class::WouldBlock,
        _ => {}
    }
    #[cfg(unix)]
    {
        let (drop, gso_suspect) = match e.raw_os_error() {
            Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT) => return Class::Fatal,
            Some(libc::EMSGSIZE) => (TxDrop::MsgSize, false),
            Some(libc::ENOBUFS) => (TxDrop::NoBuffers, false),
            Some(libc::EIO | libc::EINVAL) => (TxDrop::Other, true),
            Some(
                libc::ENETUNREACH
                | libc::EHOSTUNREACH
                | libc::ENETDOWN
                | libc::EHOSTDOWN
                | libc::ECONNREFUSED
                | libc::ECONNRESET
                | libc::EPROTO,
            ) => (TxDrop::Unreachable, false),
            _ => (TxDrop::Other, false),
        };
        Class::Failed { drop, gso_suspect }
    }
    #[cfg(not(unix))]
    {
        // WSAEBADF, WSAENOTSOCK: not a usable socket.
        #[cfg(windows)]
        if matches!(e.raw_os_error(), Some(10009 | 10038)) {
            return Class::Fatal;
        }
        let (drop, gso_suspect) = match e.kind() {
            io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable => (TxDrop::Unreachable, false),
            io::ErrorKind::InvalidInput => (TxDrop::Other, true),
            _ => (TxDrop::Other, false),
        };
        Class::Failed { drop, gso_suspect }
    }
}

/// Per-socket send state.
#[derive(Debug)]
pub(crate) struct SendPolicy {
    /// Messages per syscall.
    batch: usize,
    /// Segments per GSO message; 1 once GSO is off (or was never on).
    gso_segments: AtomicUsize,
}

/// Where a send stands: transmit `transmit`, its bytes before `offset` finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Cursor {
    transmit: usize,
    offset: usize,
}

impl Cursor {
    /// Whether a piece ending at `end` lies in the part of this cursor's transmit before it.
    fn covers_end(self, end: Self) -> bool {
        end.transmit == self.transmit && end.offset <= self.offset
    }
}

/// Failures in a row of the piece at the cursor.
#[derive(Debug, Default)]
struct Failures {
    count: u32,
    last: Option<Class>,
    /// Whether any of them may have been GSO's fault: one of them may be the piece's own.
    gso_suspect: bool,
}

impl SendPolicy {
    pub(crate) fn new(batch: usize, gso_segments: usize) -> Self {
        Self {
            batch: batch.clamp(1, MAX_BATCH_SIZE),
            gso_segments: AtomicUsize::new(gso_segments.max(1)),
        }
    }

    /// Segments one message may carry now.
    pub(crate) fn gso_segments(&self) -> usize {
        self.gso_segments.load(Relaxed)
    }

    /// Sends `transmits` through `sys`, which sends a prefix of the messages it is given (one
    /// syscall) and returns how many it took, or the error of the first.
    ///
    /// # Errors
    /// `WouldBlock` when nothing was finished; a broken socket's error.
    pub(crate) fn send(
        &self,
        counters: &Counters,
        transmits: &[Transmit<&[u8]>],
        mut sys: impl FnMut(&[Transmit<&[u8]>]) -> io::Result<usize>,
    ) -> io::Result<Sent> {
        if transmits.is_empty() {
            return Ok(Sent::default());
        }
        // One syscall's messages and where each ends; sized for a batch, which a whole
        // MAX_BATCH_SIZE array on the stack would cost in initialising on every call.
        let mut pieces = Vec::with_capacity(self.batch);
        let mut ends = Vec::with_capacity(self.batch);
        let mut at = Cursor::default();
        let mut failures = Failures::default();
        // The GSO run being resent segment by segment: where it ends, and its segment size.
        let mut split: Option<(Cursor, usize)> = None;
        while at.transmit < transmits.len() {
            let n = self.cut(transmits, at, split, &mut pieces, &mut ends);
            let pieces = &pieces[..n];
            let ends = &ends[..n];
            match sys(pieces) {
                Ok(taken) => {
                    let taken = taken.min(n);
                    if taken == 0 {
                        // No kernel does this; treat it as a full buffer rather than spin.
                        counters.event(Event::WouldBlock);
                        return would_block(transmits, at);
                    }
                    record(counters, &pieces[..taken]);
                    if let Some((s, stride)) = split
                        && (0..taken)
                            .any(|i| s.covers_end(ends[i]) && pieces[i].contents.len() == stride)
                    {
                        // A full-size segment of the refused run went out on its own: GSO was
                        // at fault. (A shorter last segment going out proves nothing: a kernel
                        // may refuse a segment size above the MTU only in a GSO run.)
                        if self.gso_segments.swap(1, Relaxed) > 1 {
                            tracing::info!("GSO send refused, segments accepted: GSO off");
                        }
                    }
                    at = ends[taken - 1];
                    failures = Failures::default();
                }
                Err(e) => match classify(&e) {
                    Class::Interrupted => counters.event(Event::Interrupted),
                    Class::WouldBlock => {
                        counters.event(Event::WouldBlock);
                        return would_block(transmits, at);
                    }
                    Class::Fatal => return Err(e),
                    class @ Class::Failed { drop, gso_suspect } => {
                        failures.count += 1;
                        failures.gso_suspect |= gso_suspect;
                        let repeated = failures.last == Some(class);
                        failures.last = Some(class);
                        if failures.count < MAX_FAILURES && !repeated {
                            counters.event(Event::Retried);
                            continue;
                        }
                        // The same error twice in a row is the piece's own. At the bound
                        // with errors alternating, any of them may be (see the module docs).
                        let gso_suspect = if repeated {
                            gso_suspect
                        } else {
                            failures.gso_suspect
                        };
                        let head = &pieces[0];
                        if gso_suspect && head.datagrams() > 1 && split.is_none() {
                            tracing::debug!("GSO run to {} refused ({e})", head.destination);
                            counters.event(Event::GsoFallback);
                            split = Some((ends[0], head.stride()));
                        } else {
                            tracing::debug!(
                                "dropping {} datagrams to {}: {e}",
                                head.datagrams(),
                                head.destination
                            );
                            counters.tx_dropped.add(drop, head.datagrams() as u64);
                            at = ends[0];
                        }
                        failures = Failures::default();
                    }
                },
            }
            // Normalise: a cursor at the end of a transmit is the start of the next.
            if at.transmit < transmits.len() && at.offset >= transmits[at.transmit].contents.len() {
                at = Cursor {
                    transmit: at.transmit + 1,
                    offset: 0,
                };
            }
            if split.is_some_and(|(s, _)| (at.transmit, at.offset) >= (s.transmit, s.offset)) {
                split = None;
            }
        }
        Ok(Sent {
            transmits: transmits.len(),
            partial: 0,
        })
    }

    /// Fills `pieces` with the messages of the next syscall from `at`, and `ends` with where
    /// each one ends (both cleared first); returns how many.
    fn cut<'a>(
        &self,
        transmits: &[Transmit<&'a [u8]>],
        mut at: Cursor,
        split: Option<(Cursor, usize)>,
        pieces: &mut Vec<Transmit<&'a [u8]>>,
        ends: &mut Vec<Cursor>,
    ) -> usize {
        pieces.clear();
        ends.clear();
        let gso_segments = self.gso_segments();
        while pieces.len() < self.batch && at.transmit < transmits.len() {
            let t = &transmits[at.transmit];
            let rest = &t.contents[at.offset..];
            let stride = t.stride();
            let in_split =
                split.is_some_and(|(s, _)| s.transmit == at.transmit && at.offset < s.offset);
            let segments = if in_split || stride == 0 {
                1
            } else {
                gso_segments.min(MAX_UDP_PAYLOAD / stride).max(1)
            };
            let len = rest.len().min(stride.saturating_mul(segments));
            let contents = &rest[..len];
            pieces.push(
                t.with_contents(contents)
                    .with_segment_size((len > stride).then_some(stride)),
            );
            let end = at.offset + len;
            ends.push(Cursor {
                transmit: at.transmit,
                offset: end,
            });
            at = if end >= t.contents.len() {
                Cursor {
                    transmit: at.transmit + 1,
                    offset: 0,
                }
            } else {
                Cursor {
                    transmit: at.transmit,
                    offset: end,
                }
            };
        }
        pieces.len()
    }
}

/// `WouldBlock` at `at`: the progress so far, or the error if there was none.
fn would_block(transmits: &[Transmit<&[u8]>], at: Cursor) -> io::Result<Sent> {
    let sent = Sent {
        transmits: at.transmit,
        partial: if at.transmit < transmits.len() {
            at.offset
        } else {
            0
        },
    };
    if sent.progressed() {
        Ok(sent)
    } else {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

/// Counts one syscall that sent `pieces`.
fn record(counters: &Counters, pieces: &[Transmit<&[u8]>]) {
    let (mut datagrams, mut bytes, mut offload) = (0, 0, 0);
    for p in pieces {
        let d = p.datagrams();
        datagrams += d;
        bytes += p.contents.len();
        if d > 1 {
            offload += d;
        }
    }
    counters.tx.record(datagrams, bytes, offload);
}

#[cfg(all(test, unix))]
mod tests;
