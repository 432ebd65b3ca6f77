use std::{cell::RefCell, collections::VecDeque};

use super::*;
use crate::stats::Stats;

fn err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// A scripted kernel. Each call first pops the next one-shot outcome of the script (`Ok(n)`:
/// take at most n messages; `Err(code)`: fail, like a pending error or `EAGAIN`); with the
/// script empty it takes every message, but stops before one that `own` fails (that
/// message's own error, every time) and reports the error if it is the first.
/// The error a message meets every time it is sent, if any.
type OwnError = Box<dyn Fn(&Transmit<&[u8]>) -> Option<i32>>;

struct FakeKernel {
    script: RefCell<VecDeque<Result<usize, i32>>>,
    own: OwnError,
    /// Every datagram accepted, GSO runs split.
    sent: RefCell<Vec<Vec<u8>>>,
    /// Every message accepted: its length and segment size.
    messages: RefCell<Vec<(usize, Option<usize>)>>,
    /// Every message offered, accepted or refused (by the script or its own error): its
    /// length and segment size.
    offered: RefCell<Vec<(usize, Option<usize>)>>,
    calls: RefCell<usize>,
}

impl FakeKernel {
    fn new(script: Vec<Result<usize, i32>>) -> Self {
        Self {
            script: RefCell::new(script.into()),
            own: Box::new(|_| None),
            sent: RefCell::default(),
            messages: RefCell::default(),
            offered: RefCell::default(),
            calls: RefCell::new(0),
        }
    }

    fn failing(mut self, own: impl Fn(&Transmit<&[u8]>) -> Option<i32> + 'static) -> Self {
        self.own = Box::new(own);
        self
    }

    fn call(&self, messages: &[Transmit<&[u8]>]) -> io::Result<usize> {
        *self.calls.borrow_mut() += 1;
        self.offered
            .borrow_mut()
            .extend(messages.iter().map(|m| (m.contents.len(), m.segment_size)));
        let limit = match self.script.borrow_mut().pop_front() {
            Some(Err(code)) => return Err(err(code)),
            Some(Ok(n)) => n,
            None => usize::MAX,
        };
        let mut taken = 0;
        for m in messages.iter().take(limit) {
            if let Some(code) = (self.own)(m) {
                if taken == 0 {
                    return Err(err(code));
                }
                break;
            }
            assert!(
                m.contents.len() <= MAX_UDP_PAYLOAD,
                "a message over the UDP limit"
            );
            if let Some(seg) = m.segment_size {
                assert!(seg < m.contents.len(), "a segment size on a lone datagram");
                assert!(
                    m.contents.len().div_ceil(seg) <= 64,
                    "over the segment limit"
                );
            }
            self.messages
                .borrow_mut()
                .push((m.contents.len(), m.segment_size));
            let stride = m.segment_size.unwrap_or(m.contents.len().max(1));
            if m.contents.is_empty() {
                self.sent.borrow_mut().push(Vec::new());
            }
            for part in m.contents.chunks(stride) {
                self.sent.borrow_mut().push(part.to_vec());
            }
            taken += 1;
        }
        Ok(taken)
    }
}

struct Harness {
    policy: SendPolicy,
    counters: Counters,
    kernel: FakeKernel,
}

impl Harness {
    fn new(batch: usize, gso_segments: usize, kernel: FakeKernel) -> Self {
        Self {
            policy: SendPolicy::new(batch, gso_segments),
            counters: Counters::default(),
            kernel,
        }
    }

    fn send(&self, transmits: &[Transmit<&[u8]>]) -> io::Result<Sent> {
        self.policy
            .send(&self.counters, transmits, |m| self.kernel.call(m))
    }

    fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    fn sent(&self) -> Vec<Vec<u8>> {
        self.kernel.sent.borrow().clone()
    }
}

fn datagram(tag: u8, len: usize) -> Vec<u8> {
    vec![tag; len]
}

fn transmit(contents: &[u8], seg: Option<usize>) -> Transmit<&[u8]> {
    Transmit {
        segment_size: seg,
        ..Transmit::new("127.0.0.1:9".parse().unwrap(), contents)
    }
}

fn all(n: usize) -> Sent {
    Sent {
        transmits: n,
        partial: 0,
    }
}

#[test]
fn batches_are_cut_at_batch_size() {
    let data: Vec<Vec<u8>> = (0..10).map(|i| datagram(i, 100)).collect();
    let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
    let h = Harness::new(4, 64, FakeKernel::new(vec![]));
    assert_eq!(h.send(&ts).unwrap(), all(10));
    assert_eq!(*h.kernel.calls.borrow(), 3, "4 + 4 + 2");
    assert_eq!(h.sent(), data);
    let s = h.stats();
    assert_eq!(s.tx.syscalls, 3);
    assert_eq!(s.tx.datagrams, 10);
    assert_eq!(s.tx.bytes, 1000);
}

#[test]
fn eintr_is_retried() {
    let d = datagram(1, 10);
    let h = Harness::new(
        32,
        64,
        FakeKernel::new(vec![Err(libc::EINTR), Err(libc::EINTR)]),
    );
    assert_eq!(h.send(&[transmit(&d, None)]).unwrap(), all(1));
    assert_eq!(h.sent(), vec![d]);
    assert_eq!(h.stats().events.interrupted, 2);
}

#[test]
fn would_block_first_is_an_error_later_is_a_partial_count() {
    let data: Vec<Vec<u8>> = (0..6).map(|i| datagram(i, 10)).collect();
    let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
    let h = Harness::new(32, 64, FakeKernel::new(vec![Err(libc::EAGAIN)]));
    let e = h.send(&ts).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    assert!(h.sent().is_empty());

    // Partial: the kernel takes 4, then the rest blocks.
    let h = Harness::new(32, 64, FakeKernel::new(vec![Ok(4), Err(libc::EAGAIN)]));
    assert_eq!(h.send(&ts).unwrap(), all(4));
    // The caller resends the rest: everything arrives, in order, once.
    assert_eq!(h.send(&ts[4..]).unwrap(), all(2));
    assert_eq!(h.sent(), data);
    assert_eq!(h.stats().events.would_block, 1);
}

/// A pending error of an earlier datagram fails the next send once, whatever its errno:
/// the retry sends the transmit that met it.
#[test]
fn a_pending_error_of_any_kind_costs_nothing() {
    let data: Vec<Vec<u8>> = (0..3).map(|i| datagram(i, 10)).collect();
    let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
    for code in [
        libc::EMSGSIZE,
        libc::EACCES,
        libc::ENOPROTOOPT,
        libc::EOPNOTSUPP,
        libc::EPERM,
        libc::ECONNREFUSED,
        libc::EHOSTUNREACH,
        libc::ENOBUFS,
        libc::EINVAL,
        libc::EIO,
    ] {
        let h = Harness::new(32, 64, FakeKernel::new(vec![Err(code)]));
        assert_eq!(h.send(&ts).unwrap(), all(3), "errno {code}");
        assert_eq!(h.sent(), data, "errno {code}");
        let s = h.stats();
        assert_eq!(s.tx_dropped.total(), 0, "errno {code}");
        assert_eq!(s.events.retried, 1);
        assert_eq!(s.events.gso_fallbacks, 0);
    }
}

#[test]
fn an_own_emsgsize_drops_only_that_transmit() {
    let small = datagram(1, 10);
    let huge = datagram(2, 2000);
    let ts = [
        transmit(&small, None),
        transmit(&huge, None),
        transmit(&small, None),
    ];
    let kernel =
        FakeKernel::new(vec![]).failing(|m| (m.contents.len() > 1500).then_some(libc::EMSGSIZE));
    let h = Harness::new(32, 64, kernel);
    assert_eq!(h.send(&ts).unwrap(), all(3));
    assert_eq!(h.sent(), vec![small.clone(), small]);
    let s = h.stats();
    assert_eq!(s.tx_dropped.msg_size, 1);
    assert_eq!(s.tx.datagrams + s.tx_dropped.total(), 3);
}

#[test]
fn enobufs_drops_that_transmit_and_is_not_would_block() {
    let data: Vec<Vec<u8>> = (0..3).map(|i| datagram(i, 10)).collect();
    let ts: Vec<_> = data.iter().map(|d| transmit(d, None)).collect();
    // The second message fails twice: its own.
    let h = Harness::new(
        32,
        64,
        FakeKernel::new(vec![Ok(1), Err(libc::ENOBUFS), Err(libc::ENOBUFS)]),
    );
    assert_eq!(h.send(&ts).unwrap(), all(3));
    assert_eq!(h.sent(), vec![data[0].clone(), data[2].clone()]);
    let s = h.stats();
    assert_eq!(s.tx_dropped.no_buffers, 1);
    assert_eq!(s.events.would_block, 0);
}

/// A whole run dropped counts every datagram of it, not one.
#[test]
fn drops_count_datagrams() {
    let run = vec![3u8; 1200 * 10];
    let kernel = FakeKernel::new(vec![]).failing(|_| Some(libc::EACCES));
    let h = Harness::new(32, 64, kernel);
    assert_eq!(h.send(&[transmit(&run, Some(1200))]).unwrap(), all(1));
    let s = h.stats();
    assert_eq!(s.tx_dropped.other, 10);
    assert_eq!(s.tx.datagrams, 0);
}

#[test]
fn gso_failure_turns_gso_off_after_the_segments_went_out() {
    let run: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let tail = datagram(9, 50);
    let ts = [transmit(&run, Some(1200)), transmit(&tail, None)];
    for code in [libc::EIO, libc::EINVAL] {
        let kernel = FakeKernel::new(vec![]).failing(move |m| m.segment_size.map(|_| code));
        let h = Harness::new(32, 64, kernel);
        assert_eq!(h.send(&ts).unwrap(), all(2));
        assert_eq!(h.policy.gso_segments(), 1, "GSO off");
        assert_eq!(
            h.sent(),
            vec![
                run[..1200].to_vec(),
                run[1200..2400].to_vec(),
                run[2400..].to_vec(),
                tail.clone()
            ]
        );
        let s = h.stats();
        assert_eq!(s.events.gso_fallbacks, 1);
        assert_eq!(s.tx_dropped.total(), 0);
        assert_eq!(*h.kernel.calls.borrow(), 3, "refused, refused, split");
        // Later runs are split before they reach the kernel. The fake kernel records only
        // messages it accepted, so count the calls and look at every message offered: a
        // policy ignoring `gso_segments()` would offer the run whole, be refused twice more
        // (3 calls, not 1) and fall back again.
        let calls = *h.kernel.calls.borrow();
        let offered = h.kernel.offered.borrow().len();
        assert_eq!(h.send(&ts).unwrap(), all(2));
        assert_eq!(
            *h.kernel.calls.borrow(),
            calls + 1,
            "three segments and the tail, single datagrams in one batched call"
        );
        assert_eq!(
            h.kernel.offered.borrow()[offered..],
            [(1200, None), (1200, None), (600, None), (50, None)]
        );
        assert!(
            h.kernel.offered.borrow()[offered..]
                .iter()
                .all(|(_, s)| s.is_none())
        );
        assert!(h.kernel.messages.borrow().iter().all(|(_, s)| s.is_none()));
        assert_eq!(h.sent().len(), 8);
        assert_eq!(h.sent()[4..], h.sent()[..4]);
        let s = h.stats();
        assert_eq!(s.events.gso_fallbacks, 1, "no second fallback");
        assert_eq!(s.tx_dropped.total(), 0);
        assert_eq!(h.policy.gso_segments(), 1);
    }
}

/// `EAGAIN` right after a GSO run was refused twice, before any segment went out: nothing
/// was finished (`WouldBlock`), nothing dropped, and GSO stays on, since no segment proved
/// it at fault. The caller's resend of the same transmit completes it, once, in order.
#[test]
fn a_full_buffer_right_after_a_gso_refusal() {
    let run: Vec<u8> = (0..2000).map(|i| (i % 251) as u8).collect();
    let kernel = FakeKernel::new(vec![Err(libc::EIO), Err(libc::EIO), Err(libc::EAGAIN)]);
    let h = Harness::new(32, 64, kernel);
    let t = transmit(&run, Some(1000));
    let e = h.send(&[t]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    assert!(h.sent().is_empty());
    assert_eq!(*h.kernel.calls.borrow(), 3, "the whole script was used");
    assert_eq!(
        *h.kernel.offered.borrow(),
        [
            (2000, Some(1000)),
            (2000, Some(1000)),
            (1000, None),
            (1000, None)
        ],
        "refused twice whole, then split into segments when EAGAIN came"
    );
    let s = h.stats();
    assert_eq!(s.tx_dropped.total(), 0);
    assert_eq!(s.tx.datagrams, 0);
    assert_eq!(s.events.gso_fallbacks, 1);
    assert_eq!(s.events.would_block, 1);
    assert_eq!(h.policy.gso_segments(), 64, "GSO still on");

    assert_eq!(h.send(&[t]).unwrap(), all(1));
    assert_eq!(h.sent(), vec![run[..1000].to_vec(), run[1000..].to_vec()]);
    assert_eq!(h.stats().tx_dropped.total(), 0);
    assert_eq!(h.policy.gso_segments(), 64, "GSO still on");
}

/// An errno the policy does not know, met every time by one transmit only (its own, as
/// `EACCES` from a firewall rule for one destination would be): that transmit is dropped and
/// counted per datagram under `other`; its neighbours in the same send go out.
#[test]
fn an_own_unknown_errno_drops_only_that_transmit() {
    const BAD: u8 = 0xba;
    let before = datagram(1, 10);
    let bad = datagram(BAD, 300);
    let after = datagram(2, 10);
    let ts = [
        transmit(&before, None),
        transmit(&bad, Some(100)),
        transmit(&after, None),
    ];
    let kernel = FakeKernel::new(vec![])
        .failing(|m| (m.contents.first() == Some(&BAD)).then_some(libc::EACCES));
    let h = Harness::new(32, 64, kernel);
    assert_eq!(h.send(&ts).unwrap(), all(3), "every transmit finished");
    assert_eq!(h.sent(), vec![before, after]);
    let s = h.stats();
    assert_eq!(s.tx_dropped.other, 3, "the bad run's three datagrams");
    assert_eq!(s.tx_dropped.total(), 3);
    assert_eq!(s.tx.datagrams, 2);
    assert_eq!(s.events.gso_fallbacks, 0);
    assert_eq!(h.policy.gso_segments(), 64);
}

/// `EINVAL` is not GSO-specific (a non-local source address, for one): when the segments
/// fail on their own too, they are dropped and GSO stays on for everything else.
#[test]
fn einval_that_is_not_gsos_fault_leaves_gso_on() {
    let bad: Vec<u8> = vec![1; 3600];
    let good: Vec<u8> = vec![2; 3600];
    let bad_src: std::net::IpAddr = "192.0.2.1".parse().unwrap();
    let kernel = FakeKernel::new(vec![])
        .failing(move |m| (m.src_ip == Some(bad_src)).then_some(libc::EINVAL));
    let h = Harness::new(32, 64, kernel);
    let ts = [
        Transmit {
            src_ip: Some(bad_src),
            ..transmit(&bad, Some(1200))
        },
        transmit(&good, Some(1200)),
    ];
    assert_eq!(h.send(&ts).unwrap(), all(2));
    assert_eq!(h.policy.gso_segments(), 64, "GSO stays on");
    assert_eq!(h.sent(), vec![vec![2; 1200]; 3]);
    let s = h.stats();
    assert_eq!(s.tx_dropped.other, 3);
    assert_eq!(
        s.tx.offload_segments, 3,
        "the good run went as one GSO message"
    );
}

/// A full buffer in the middle of a run sent segment by segment reports how far it got; the
/// rest, sent next, completes it in order.
#[test]
fn a_run_cut_short_reports_its_partial_progress() {
    let run: Vec<u8> = (0..4000).map(|i| (i % 251) as u8).collect();
    let kernel = FakeKernel::new(vec![
        Err(libc::EIO),
        Err(libc::EIO),
        Ok(1),
        Err(libc::EAGAIN),
    ]);
    let h = Harness::new(32, 64, kernel);
    let t = transmit(&run, Some(1000));
    let sent = h.send(&[t]).unwrap();
    assert_eq!(
        sent,
        Sent {
            transmits: 0,
            partial: 1000
        }
    );
    let rest = transmit(&run[sent.partial..], Some(1000));
    assert_eq!(h.send(&[rest]).unwrap(), all(1));
    let joined: Vec<u8> = h.sent().concat();
    assert_eq!(joined, run);
    assert_eq!(h.sent().len(), 4);
}

/// Runs longer than the kernel's segment limit or the UDP payload limit are cut before
/// they reach the kernel, never refused for it.
#[test]
fn long_runs_are_cut_to_the_limits() {
    let run = vec![7u8; 1200 * 100];
    let h = Harness::new(32, 64, FakeKernel::new(vec![]));
    assert_eq!(h.send(&[transmit(&run, Some(1200))]).unwrap(), all(1));
    // 65 507 / 1200 = 54 segments per message, then the remaining 46.
    assert_eq!(
        *h.kernel.messages.borrow(),
        vec![(54 * 1200, Some(1200)), (46 * 1200, Some(1200))]
    );
    let small = vec![7u8; 100 * 100];
    let h = Harness::new(32, 64, FakeKernel::new(vec![]));
    h.send(&[transmit(&small, Some(100))]).unwrap();
    assert_eq!(
        *h.kernel.messages.borrow(),
        vec![(6400, Some(100)), (3600, Some(100))],
        "64 segments at most"
    );
    assert_eq!(h.stats().tx.datagrams, 100);
}

#[test]
fn own_unreachable_errors_drop_the_transmit_and_the_next_goes() {
    let d = datagram(3, 10);
    let other = datagram(5, 10);
    let kernel = FakeKernel::new(vec![Err(libc::ENETUNREACH), Err(libc::ENETUNREACH)]);
    let h = Harness::new(32, 64, kernel);
    assert_eq!(
        h.send(&[transmit(&d, None), transmit(&other, None)])
            .unwrap(),
        all(2)
    );
    assert_eq!(h.sent(), vec![other]);
    assert_eq!(h.stats().tx_dropped.unreachable, 1);
}

/// Errors that differ every time are retried, but not forever.
#[test]
fn changing_errors_end_after_max_failures() {
    let d = datagram(3, 10);
    let script = (0..MAX_FAILURES)
        .map(|i| {
            Err(if i % 2 == 0 {
                libc::ECONNREFUSED
            } else {
                libc::EMSGSIZE
            })
        })
        .collect();
    let h = Harness::new(32, 64, FakeKernel::new(script));
    assert_eq!(h.send(&[transmit(&d, None)]).unwrap(), all(1));
    assert!(h.sent().is_empty());
    let s = h.stats();
    assert_eq!(s.events.retried, u64::from(MAX_FAILURES) - 1);
    assert_eq!(s.tx_dropped.total(), 1);
    assert_eq!(*h.kernel.calls.borrow(), MAX_FAILURES as usize);
}

#[test]
fn broken_sockets_fail() {
    let d = datagram(4, 10);
    let h = Harness::new(32, 64, FakeKernel::new(vec![Err(libc::EBADF)]));
    assert_eq!(
        h.send(&[transmit(&d, None)]).unwrap_err().raw_os_error(),
        Some(libc::EBADF)
    );
}

#[test]
fn segments_and_offload_are_counted() {
    let run = vec![0u8; 2500];
    let one = vec![0u8; 1200];
    let h = Harness::new(32, 64, FakeKernel::new(vec![]));
    h.send(&[transmit(&run, Some(1200)), transmit(&one, Some(1200))])
        .unwrap();
    let s = h.stats();
    assert_eq!(s.tx.datagrams, 4);
    assert_eq!(s.tx.offload_segments, 3);
    assert_eq!(s.tx.syscalls, 1);
}

#[test]
fn empty_datagrams_are_sent_and_nothing_is_a_no_op() {
    let h = Harness::new(32, 64, FakeKernel::new(vec![]));
    assert_eq!(h.send(&[]).unwrap(), all(0));
    assert_eq!(*h.kernel.calls.borrow(), 0);
    let d = datagram(1, 5);
    assert_eq!(
        h.send(&[transmit(&[], None), transmit(&d, None)]).unwrap(),
        all(2)
    );
    assert_eq!(h.sent(), vec![vec![], d]);
}

/// Only a full-size segment going out alone proves GSO at fault: an older kernel refuses a
/// GSO run whose segment size is above the MTU, and the run's shorter last segment may then
/// go out alone while the full-size ones fail on their own too.
#[test]
fn a_short_last_segment_going_out_proves_nothing() {
    const MTU: usize = 1500;
    // 1600-byte segments: the run is refused (EINVAL), each full segment is too big
    // (EMSGSIZE), the 1000-byte tail goes.
    let kernel = FakeKernel::new(vec![]).failing(|m| {
        if m.segment_size.is_some() {
            Some(libc::EINVAL)
        } else {
            (m.contents.len() > MTU).then_some(libc::EMSGSIZE)
        }
    });
    let h = Harness::new(32, 64, kernel);
    let run = vec![4u8; 1600 * 2 + 1000];
    assert_eq!(h.send(&[transmit(&run, Some(1600))]).unwrap(), all(1));
    assert_eq!(h.sent(), vec![vec![4u8; 1000]]);
    assert_eq!(h.stats().tx_dropped.msg_size, 2);
    assert_eq!(h.policy.gso_segments(), 64, "GSO was not at fault");
}

/// The `send_policy` fuzz target's crash, as a kernel script: a GSO run on a device that
/// cannot checksum it (`EIO` every time, its own), with a pending `ECONNREFUSED` met between
/// every two of its tries. Its own error never comes twice in a row; at the failure bound
/// the run must be sent segment by segment, as after `EIO` twice, not dropped as unreachable.
#[test]
fn a_gso_run_among_alternating_pending_errors_is_split_not_dropped() {
    let run: Vec<u8> = (0..4439).map(|i| (i % 251) as u8).collect();
    let pending = Err(libc::ECONNREFUSED);
    // `Ok(n)` lets the run meet its own error; `Err` is a pending one, consumed at once.
    let script = [
        Ok(2),
        pending,
        Ok(1),
        pending,
        Ok(6),
        pending,
        Ok(4),
        pending,
    ]
    .to_vec();
    assert_eq!(script.len(), MAX_FAILURES as usize);
    let kernel = FakeKernel::new(script).failing(|m| m.segment_size.map(|_| libc::EIO));
    let h = Harness::new(1, 64, kernel);
    assert_eq!(h.send(&[transmit(&run, Some(1211))]).unwrap(), all(1));
    assert_eq!(
        h.sent(),
        run.chunks(1211).map(<[u8]>::to_vec).collect::<Vec<_>>(),
        "every segment sent, in order"
    );
    let s = h.stats();
    assert_eq!(s.tx_dropped.total(), 0, "nothing dropped: {s}");
    assert_eq!(s.events.retried, u64::from(MAX_FAILURES) - 1);
    assert_eq!(s.events.gso_fallbacks, 1);
    assert_eq!(h.policy.gso_segments(), 1, "GSO was at fault: off");
}

/// The same with the pending errors coming as a kernel would make them: each the answer
/// (an ICMP port unreachable) to one datagram already sent, arriving while the run is
/// retried. Datagrams sent before the run are finished; the run is split, not dropped.
#[test]
fn pending_errors_of_earlier_datagrams_do_not_cost_a_gso_run() {
    let lone: Vec<Vec<u8>> = (0..4).map(|i| datagram(i, 100)).collect();
    let run: Vec<u8> = (0..3000).map(|i| (i % 251) as u8).collect();
    let mut ts: Vec<_> = lone.iter().map(|d| transmit(d, None)).collect();
    ts.push(transmit(&run, Some(1000)));
    let pending = Err(libc::ECONNREFUSED);
    let mut script = vec![Ok(1); 4];
    script.extend([
        Ok(1),
        pending,
        Ok(1),
        pending,
        Ok(1),
        pending,
        Ok(1),
        pending,
    ]);
    let kernel = FakeKernel::new(script).failing(|m| m.segment_size.map(|_| libc::EIO));
    let h = Harness::new(1, 64, kernel);
    assert_eq!(h.send(&ts).unwrap(), all(5));
    let mut expected = lone.clone();
    expected.extend(run.chunks(1000).map(<[u8]>::to_vec));
    assert_eq!(h.sent(), expected);
    assert_eq!(h.stats().tx_dropped.total(), 0);
    assert_eq!(h.policy.gso_segments(), 1);
}

/// At the bound, only a GSO-suspect error among the failures earns a GSO run the split: a
/// run refused for its destination (`EACCES`, its own) among pending `ECONNREFUSED`s is
/// dropped whole, under the last error's reason, and GSO stays on.
#[test]
fn alternating_errors_none_gsos_drop_the_run_at_the_bound() {
    let run = vec![6u8; 3000];
    let pending = Err(libc::ECONNREFUSED);
    let script = [
        Ok(1),
        pending,
        Ok(1),
        pending,
        Ok(1),
        pending,
        Ok(1),
        pending,
    ]
    .to_vec();
    let kernel = FakeKernel::new(script).failing(|_| Some(libc::EACCES));
    let h = Harness::new(1, 64, kernel);
    assert_eq!(h.send(&[transmit(&run, Some(1000))]).unwrap(), all(1));
    assert!(h.sent().is_empty());
    let s = h.stats();
    assert_eq!(s.tx_dropped.unreachable, 3, "the last error's reason: {s}");
    assert_eq!(s.events.gso_fallbacks, 0);
    assert_eq!(*h.kernel.calls.borrow(), MAX_FAILURES as usize);
    assert_eq!(h.policy.gso_segments(), 64);
}
