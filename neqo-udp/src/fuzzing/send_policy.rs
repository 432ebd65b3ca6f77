//! The send policy's fuzz harness: a [`TxQueue`] driven through the policy against a
//! scripted kernel.

use std::{
    cell::{Cell, RefCell},
    collections::HashMap,
    io,
    net::SocketAddr,
};

use crate::{
    queue::TxQueue,
    send::{MAX_FAILURES, SendPolicy},
    stats::Counters,
    transmit::Transmit,
};

/// Reads the fuzzer's bytes as small numbers; zeros once they run out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        *first
    }

    fn below(&mut self, n: usize) -> usize {
        let v = usize::from(self.byte()) << 8 | usize::from(self.byte());
        v % n.max(1)
    }
}

/// One step of the scripted kernel, taken by one syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Take at most this many messages (a full buffer part-way).
    Take(usize),
    /// `EAGAIN`.
    Full,
    /// A pending error of an earlier datagram: fails this call once, whatever it carries.
    /// More of them than a kernel could make, on purpose: a kernel keeps one (`sk_err`), set
    /// by an ICMP error answering a datagram already sent (and on Linux never for our
    /// unconnected sockets with `IP_RECVERR` off), so the calls of a send before anything
    /// went out could meet one at most, where this script may hold many. The policy relies
    /// only on a retry at once meeting no second one, and that is all this kernel keeps to.
    Pending(i32),
}

/// Datagram identity: which transmit, which segment.
type Id = (usize, usize);

/// Drives a [`TxQueue`] through the send policy against a scripted kernel, all invented by
/// the fuzzer: transmits (destinations, lengths, segment sizes, a bad source address), batch
/// size, GSO on or off, partial counts, full buffers and pending errors of any errno, and
/// rules under which the kernel fails a message every time (a broken GSO, a segment over
/// the MTU, a bad source). Checks that every datagram ends up sent or counted dropped,
/// exactly once, in order per destination; that only a message's own errors drop datagrams
/// (a pending one never does); that GSO is turned off only when GSO was at fault; and that
/// the syscalls are bounded. Panics on a violation.
pub fn send_policy(data: &[u8]) {
    const MTU: usize = 1500;
    let mut input = Input(data);
    let batch = 1 + input.below(crate::MAX_BATCH_SIZE);
    let gso = if input.byte() % 2 == 0 { 64 } else { 1 };
    let gso_broken = input.byte() % 4 == 0;
    let bad_src: std::net::IpAddr = "192.0.2.1".parse().unwrap();
    let mut queue = TxQueue::new(0);
    let mut ids: HashMap<Vec<u8>, Id> = HashMap::new();
    let mut expected: Vec<(Id, SocketAddr, bool)> = Vec::new();
    let transmits = 1 + input.below(24);
    for t in 0..transmits {
        let destination = SocketAddr::from(([127, 0, 0, 1], 1 + input.below(3) as u16));
        let len = input.below(5000);
        let segment_size = (input.byte() % 3 != 0).then(|| 1 + input.below(2000));
        let src_ip = (input.byte() % 8 == 0).then_some(bad_src);
        // Every datagram unique: its transmit and segment in its first bytes.
        let mut buf: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let stride = Transmit::new(destination, &buf[..]).stride();
        let stride = segment_size.filter(|&s| s < len).unwrap_or(stride);
        let mut at = 0;
        for seg in 0.. {
            let end = (at + stride.max(1)).min(len);
            let tag = [t as u8, (t >> 8) as u8, seg as u8, (seg >> 8) as u8];
            let n = tag.len().min(end - at);
            buf[at..at + n].copy_from_slice(&tag[..n]);
            // Datagrams too short to carry a whole tag are told apart by content anyway,
            // unless two are equal: then only the count can be checked for them.
            ids.entry(buf[at..end].to_vec()).or_insert((t, seg));
            // A lone datagram over the MTU, or a source the host does not have, fails on its
            // own every time.
            let own_failure = src_ip.is_some() || end - at > MTU;
            expected.push(((t, seg), destination, own_failure));
            at = end;
            if at >= len {
                break;
            }
        }
        queue.push(
            Transmit::new(destination, buf)
                .with_segment_size(segment_size)
                .with_src_ip(src_ip),
        );
    }
    let script: Vec<Step> = (0..input.below(64))
        .map(|_| match input.byte() % 6 {
            0 => Step::Full,
            1 => Step::Pending(
                [
                    libc::EMSGSIZE,
                    libc::EACCES,
                    libc::EINVAL,
                    libc::EIO,
                    libc::ENOBUFS,
                    libc::ECONNREFUSED,
                ][input.below(6)],
            ),
            _ => Step::Take(input.below(8)),
        })
        .collect();

    let policy = SendPolicy::new(batch, gso);
    let counters = Counters::default();
    let steps = RefCell::new(script.iter().copied());
    let after_pending = Cell::new(false);
    let calls = Cell::new(0usize);
    let delivered: RefCell<Vec<(Vec<u8>, SocketAddr)>> = RefCell::default();
    let kernel = |messages: &[Transmit<&[u8]>]| -> io::Result<usize> {
        calls.set(calls.get() + 1);
        // A pending error is consumed by the call that meets it: never two calls in a row.
        let step = steps
            .borrow_mut()
            .find(|s| !(after_pending.get() && matches!(s, Step::Pending(_))));
        after_pending.set(matches!(step, Some(Step::Pending(_))));
        let limit = match step {
            Some(Step::Full) => return Err(io::ErrorKind::WouldBlock.into()),
            Some(Step::Pending(code)) => return Err(io::Error::from_raw_os_error(code)),
            Some(Step::Take(n)) => n.max(1),
            None => usize::MAX,
        };
        let mut taken = 0;
        for m in messages.iter().take(limit) {
            assert!(m.contents.len() <= crate::MAX_UDP_PAYLOAD);
            let stride = m.stride();
            let own = if m.src_ip.is_some() {
                Some(libc::EINVAL)
            } else if m.datagrams() > 1 && gso_broken {
                Some(libc::EIO)
            } else if stride > MTU {
                Some(if m.datagrams() > 1 {
                    libc::EINVAL
                } else {
                    libc::EMSGSIZE
                })
            } else {
                None
            };
            if let Some(code) = own {
                if taken == 0 {
                    return Err(io::Error::from_raw_os_error(code));
                }
                break;
            }
            assert!(
                m.datagrams() <= 64,
                "no more segments than the kernel takes"
            );
            let mut out = delivered.borrow_mut();
            if m.contents.is_empty() {
                out.push((Vec::new(), m.destination));
            }
            for part in m.contents.chunks(stride.max(1)) {
                out.push((part.to_vec(), m.destination));
            }
            taken += 1;
        }
        Ok(taken)
    };
    let mut flushes = 0;
    while !queue.is_empty() {
        flushes += 1;
        assert!(flushes <= script.len() + 2, "a flush made no progress");
        match queue.flush(|ts| policy.send(&counters, ts, &kernel)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("send failed: {e}"),
        }
    }

    let stats = counters.snapshot();
    let delivered = delivered.into_inner();
    let total = expected.len() as u64;
    assert_eq!(queue.pushed_datagrams(), total);
    assert_eq!(stats.tx.datagrams, delivered.len() as u64);
    assert_eq!(
        stats.tx.datagrams + stats.tx_dropped.total(),
        total,
        "every datagram sent or dropped, once: {stats}"
    );
    // In order per destination, each at most once, and only own failures dropped (checked
    // where every datagram's contents are distinct: empty ones are not).
    let distinct = ids.len() == expected.len();
    let mut last: HashMap<SocketAddr, Id> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for (bytes, dest) in &delivered {
        let Some(&id) = ids.get(bytes) else {
            panic!("a datagram nobody sent: {} bytes", bytes.len());
        };
        if distinct && let Some(prev) = last.insert(*dest, id) {
            assert!(prev < id, "out of order to {dest}: {prev:?} then {id:?}");
        }
        seen.insert(id);
    }
    if distinct {
        for (id, _, own_failure) in &expected {
            assert!(
                seen.contains(id) || *own_failure,
                "datagram {id:?} dropped without an error of its own: {stats}"
            );
        }
    }
    if policy.gso_segments() < gso {
        assert!(gso_broken, "GSO turned off though it was not at fault");
    }
    let bound = script.len() + 2 * MAX_FAILURES as usize * expected.len() + flushes;
    assert!(
        calls.get() <= bound,
        "{} syscalls (bound {bound})",
        calls.get()
    );
}

#[cfg(test)]
mod tests {
    use super::{
        super::tests::{corpus, xorshift},
        send_policy,
    };

    /// A small deterministic stand-in for the fuzzer, run with the unit tests.
    #[test]
    fn random_send_scripts_keep_the_invariants() {
        let mut next = xorshift(0x9e37_79b9);
        for _ in 0..3000 {
            let input: Vec<u8> = (0..(next() % 400)).map(|_| next() as u8).collect();
            send_policy(&input);
        }
    }

    /// The input a 180-second run of the `send_policy` target crashed on (also in
    /// `fuzz/corpus/send_policy/`): batch 1, GSO on and broken, a run of four 1211-byte
    /// segments first, and a script in which a pending `ECONNREFUSED` comes between every two
    /// calls. The run's own `EIO` never came twice in a row, so the policy gave up after
    /// `MAX_FAILURES` and dropped all four segments as unreachable instead of sending them
    /// one by one.
    const GSO_RUN_AMONG_PENDING_ERRORS: [u8; 66] = [
        0x07, 0x00, 0x0c, 0x00, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, //
        0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95, //
        0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xa1, //
        0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, //
        0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, //
        0xba, 0xbb, 0xbc, 0xbd, 0xf4, 0x18,
    ];

    #[test]
    fn a_broken_gso_run_among_pending_errors_is_not_dropped() {
        send_policy(&GSO_RUN_AMONG_PENDING_ERRORS);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads files")]
    fn the_checked_in_corpus_keeps_the_invariants() {
        let inputs = corpus("send_policy");
        for input in &inputs {
            send_policy(input);
        }
        if !inputs.is_empty() {
            assert!(
                inputs.contains(&GSO_RUN_AMONG_PENDING_ERRORS.to_vec()),
                "the crash input is kept in the corpus"
            );
        }
    }
}
