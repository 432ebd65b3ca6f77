//! neqo-udp on real loopback sockets: IPv4 and IPv6, batched and single mode.

mod common;

use std::{collections::HashMap, net::SocketAddr};

use common::*;
use neqo_udp::{Config, EcnCodepoint, IoMode, Socket, Transmit};

const MODES: [IoMode; 2] = [IoMode::Batched, IoMode::Single];

/// Sizes that cover tiny, typical QUIC, jumbo and near-maximum datagrams.
const SIZES: [usize; 9] = [3, 17, 100, 1200, 1252, 1472, 1500, 9000, 65_000];

async fn burst_from_several_senders(ip: std::net::IpAddr, mode: IoMode) {
    const SENDERS: u8 = 4;
    const PER_SENDER: u16 = 60;
    let receiver = bind(ip, mode);
    let dest = addr_of(&receiver);
    let senders: Vec<Socket> = (0..SENDERS).map(|_| bind(ip, mode)).collect();
    let payloads: Vec<Vec<Vec<u8>>> = (0..SENDERS)
        .map(|s| {
            (0..PER_SENDER)
                .map(|q| {
                    payload(
                        s,
                        q,
                        SIZES[(usize::from(q) * 7 + usize::from(s)) % SIZES.len()],
                    )
                })
                .collect()
        })
        .collect();
    // Interleave the senders: each sends its next 15 datagrams in one call.
    for round in 0..4 {
        for (s, sock) in senders.iter().enumerate() {
            let chunk = &payloads[s][round * 15..(round + 1) * 15];
            let ts: Vec<Transmit<&[u8]>> = chunk.iter().map(|p| transmit(dest, p)).collect();
            sock.send_all(&ts).await.unwrap();
        }
    }
    let total = usize::from(SENDERS) * usize::from(PER_SENDER);
    let got = recv_n(&receiver, total).await;
    assert_eq!(got.len(), total);
    let mut next_seq: HashMap<u8, u16> = HashMap::new();
    let sources: Vec<SocketAddr> = senders.iter().map(addr_of).collect();
    for d in &got {
        let sender = d.data[0];
        let seq = u16::from_be_bytes([d.data[1], d.data[2]]);
        let expected = next_seq.entry(sender).or_default();
        assert_eq!(seq, *expected, "datagrams of sender {sender} out of order");
        *expected += 1;
        assert_eq!(
            &d.data[..],
            &payloads[usize::from(sender)][usize::from(seq)][..],
            "content of {sender}/{seq}"
        );
        assert_eq!(d.source, sources[usize::from(sender)]);
        assert_eq!(d.destination, Some(ip), "local address reported");
    }
    let stats = receiver.stats();
    assert_eq!(stats.rx.datagrams, total as u64);
    assert_eq!(stats.kernel_drops, 0);
    if mode == IoMode::Single {
        assert_eq!(
            stats.rx.syscalls, stats.rx.datagrams,
            "single mode: one datagram per syscall"
        );
        assert_eq!(senders[0].stats().tx.syscalls, u64::from(PER_SENDER));
    } else if cfg!(any(target_os = "linux", target_os = "android")) {
        // Each send_all of 15 transmits is one sendmmsg.
        assert_eq!(senders[0].stats().tx.syscalls, 4);
    }
}

#[tokio::test]
async fn burst_v4_batched() {
    burst_from_several_senders(V4, IoMode::Batched).await;
}
#[tokio::test]
async fn burst_v4_single() {
    burst_from_several_senders(V4, IoMode::Single).await;
}
#[tokio::test]
async fn burst_v6_batched() {
    burst_from_several_senders(V6, IoMode::Batched).await;
}
#[tokio::test]
async fn burst_v6_single() {
    burst_from_several_senders(V6, IoMode::Single).await;
}

/// A GSO run of 11 segments (the last shorter) arrives as 11 datagrams, whatever the
/// receiver's mode; with GRO on, as one run split by the socket.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn gso_runs_arrive_as_their_segments() {
    for ip in [V4, V6] {
        for rx_mode in MODES {
            for gro in [true, false] {
                let receiver =
                    Socket::bind(SocketAddr::new(ip, 0), config(rx_mode).with_gro(gro)).unwrap();
                let sender = bind(ip, IoMode::Batched);
                assert!(sender.max_gso_segments() > 1, "kernel supports GSO");
                let run: Vec<u8> = (0..10_500u32).map(|i| (i * 31 % 251) as u8).collect();
                let t = transmit(addr_of(&receiver), &run).with_segment_size(Some(1000));
                sender.send_all(&[t]).await.unwrap();
                assert_eq!(sender.stats().tx.syscalls, 1);
                assert_eq!(sender.stats().tx.offload_segments, 11);
                let got = recv_n(&receiver, 11).await;
                let lens: Vec<usize> = got.iter().map(|d| d.data.len()).collect();
                assert_eq!(lens, [vec![1000; 10], vec![500]].concat());
                let joined: Vec<u8> = got.iter().flat_map(|d| d.data.iter().copied()).collect();
                assert_eq!(joined, run);
                let rx = receiver.stats();
                if gro && rx_mode == IoMode::Batched {
                    assert!(receiver.gro_enabled());
                    assert_eq!(rx.rx.offload_segments, 11, "one GRO run");
                    assert_eq!(rx.rx.syscalls, 1);
                } else {
                    assert!(!receiver.gro_enabled());
                    assert_eq!(rx.rx.offload_segments, 0);
                }
            }
        }
    }
}

/// One call, 32 transmits to three receivers with mixed GSO sizes: one sendmmsg, and every
/// receiver gets its datagrams complete and in order.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn one_sendmmsg_of_32_mixed_transmits() {
    for ip in [V4, V6] {
        let receivers: Vec<Socket> = (0..3).map(|_| bind(ip, IoMode::Batched)).collect();
        let sender = bind(ip, IoMode::Batched);
        let seg_sizes = [None, Some(1200), Some(1350), Some(500)];
        let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
        let bodies: Vec<(usize, Option<usize>, Vec<u8>)> = (0..32u16)
            .map(|i| {
                let r = usize::from(i) % 3;
                let seg = seg_sizes[usize::from(i) % 4];
                let len = seg.map_or(700 + usize::from(i), |s| s * (2 + usize::from(i) % 4) - 100);
                (r, seg, payload(r as u8, i, len))
            })
            .collect();
        let ts: Vec<Transmit<&[u8]>> = bodies
            .iter()
            .map(|(r, seg, body)| {
                let seg_size = seg.unwrap_or(body.len());
                for part in body.chunks(seg_size) {
                    expected[*r].push(part.to_vec());
                }
                transmit(addr_of(&receivers[*r]), body).with_segment_size(*seg)
            })
            .collect();
        sender.writable().await.unwrap();
        assert_eq!(
            sender.send(&ts).unwrap().transmits,
            32,
            "the kernel takes the whole batch"
        );
        let tx = sender.stats().tx;
        assert_eq!(tx.syscalls, 1, "one sendmmsg");
        assert_eq!(
            tx.datagrams,
            expected.iter().map(Vec::len).sum::<usize>() as u64
        );
        for (r, receiver) in receivers.iter().enumerate() {
            let got = recv_n(receiver, expected[r].len()).await;
            let got: Vec<Vec<u8>> = got.iter().map(|d| d.data.to_vec()).collect();
            assert_eq!(got, expected[r], "receiver {r}");
        }
    }
}

#[tokio::test]
async fn ecn_round_trips() {
    for ip in [V4, V6] {
        for mode in MODES {
            let receiver = bind(ip, mode);
            let sender = bind(ip, mode);
            let codepoints = [EcnCodepoint::Ect0, EcnCodepoint::Ect1, EcnCodepoint::Ce];
            let body = payload(1, 1, 100);
            let ts: Vec<Transmit<&[u8]>> = codepoints
                .iter()
                .map(|c| transmit(addr_of(&receiver), &body).with_ecn(Some(*c)))
                .chain(std::iter::once(transmit(addr_of(&receiver), &body)))
                .collect();
            sender.send_all(&ts).await.unwrap();
            let got: Vec<_> = recv_n(&receiver, 4)
                .await
                .into_iter()
                .map(|d| d.ecn)
                .collect();
            assert_eq!(
                got,
                vec![
                    Some(EcnCodepoint::Ect0),
                    Some(EcnCodepoint::Ect1),
                    Some(EcnCodepoint::Ce),
                    None
                ],
                "{ip} {mode}"
            );
        }
    }
}

/// A socket bound to [::] serves IPv4 peers (as v4-mapped addresses) and IPv6 peers.
#[tokio::test]
async fn dual_stack_socket() {
    let server = Socket::bind("[::]:0".parse().unwrap(), Config::default()).unwrap();
    let port = addr_of(&server).port();
    let v4 = bind(V4, IoMode::Batched);
    let v6 = bind(V6, IoMode::Batched);
    v4.send_all(&[transmit(SocketAddr::new(V4, port), b"four")])
        .await
        .unwrap();
    v6.send_all(&[transmit(SocketAddr::new(V6, port), b"six")])
        .await
        .unwrap();
    let got = recv_n(&server, 2).await;
    for d in &got {
        let reply: Vec<u8> = d.data.iter().rev().copied().collect();
        // Reply from the address the datagram came to.
        let t = transmit(d.source, &reply).with_src_ip(d.destination);
        server.send_all(&[t]).await.unwrap();
    }
    let four = got.iter().find(|d| &d.data[..] == b"four").unwrap();
    assert_eq!(
        four.source,
        SocketAddr::new("::ffff:127.0.0.1".parse().unwrap(), addr_of(&v4).port())
    );
    assert_eq!(&recv_n(&v4, 1).await[0].data[..], b"ruof");
    assert_eq!(&recv_n(&v6, 1).await[0].data[..], b"xis");
}

/// EMSGSIZE (an IPv4 datagram over 65 507 bytes) drops that transmit only.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn oversized_transmit_is_dropped_alone() {
    for mode in MODES {
        let receiver = bind(V4, mode);
        let sender = bind(V4, mode);
        let small = payload(0, 0, 50);
        let huge = vec![0u8; 65_508];
        let ts = [
            transmit(addr_of(&receiver), &small),
            transmit(addr_of(&receiver), &huge),
            transmit(addr_of(&receiver), &small),
        ];
        sender.send_all(&ts).await.unwrap();
        let got = recv_n(&receiver, 2).await;
        assert!(got.iter().all(|d| d.data[..] == small[..]));
        assert_eq!(sender.stats().tx_dropped.msg_size, 1, "{mode}");
        assert_eq!(sender.stats().tx.datagrams, 2);
    }
}

/// EINVAL on a GSO send (here forced with SO_NO_CHECK, which the kernel refuses to combine
/// with UDP_SEGMENT, as some NICs and VMs do) turns GSO off and resends the same transmit as
/// separate datagrams: nothing is lost. (Linux only: libc names `SO_NO_CHECK` for no other
/// target.)
#[cfg(target_os = "linux")]
#[tokio::test]
async fn gso_failure_falls_back_to_separate_datagrams() {
    let receiver = bind(V4, IoMode::Batched);
    let sender = bind(V4, IoMode::Batched);
    let one: libc::c_int = 1;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&std::os::fd::AsFd::as_fd(&sender));
    // SAFETY: a valid fd and a live c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            std::ptr::from_ref(&one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    let run: Vec<u8> = (0..6_000u32).map(|i| (i % 253) as u8).collect();
    let tail = payload(9, 9, 40);
    let ts = [
        transmit(addr_of(&receiver), &run).with_segment_size(Some(1200)),
        transmit(addr_of(&receiver), &tail),
    ];
    sender.send_all(&ts).await.unwrap();
    let got = recv_n(&receiver, 6).await;
    let joined: Vec<u8> = got[..5]
        .iter()
        .flat_map(|d| d.data.iter().copied())
        .collect();
    assert_eq!(joined, run);
    assert_eq!(&got[5].data[..], &tail[..]);
    let stats = sender.stats();
    assert_eq!(stats.events.gso_fallbacks, 1);
    assert_eq!(stats.tx_dropped.total(), 0);
    assert_eq!(sender.max_gso_segments(), 1, "GSO stays off");
    // Later GSO transmits are split too.
    sender.send_all(&ts[..1]).await.unwrap();
    assert_eq!(recv_n(&receiver, 5).await.len(), 5);
}

/// Datagrams longer than the receive slot are counted and dropped, never handed up short.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn truncated_datagrams_are_dropped() {
    for mode in MODES {
        let receiver = bind(V4, mode);
        let sender = bind(V4, mode);
        let long = payload(1, 1, 3000);
        let short = payload(1, 2, 500);
        sender
            .send_all(&[
                transmit(addr_of(&receiver), &long),
                transmit(addr_of(&receiver), &short),
            ])
            .await
            .unwrap();
        let mut batch =
            neqo_udp::RecvBatch::with_slots(if mode == IoMode::Single { 1 } else { 4 }, 1024);
        let mut got = Vec::new();
        tokio::time::timeout(DEADLINE, async {
            while receiver.stats().rx_dropped.truncated + (got.len() as u64) < 2 {
                receiver.recv_async(&mut batch).await.unwrap();
                got.extend(batch.datagrams());
            }
        })
        .await
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(&got[0].data[..], &short[..]);
        assert_eq!(receiver.stats().rx_dropped.truncated, 1);
    }
}

#[tokio::test]
async fn empty_datagrams_are_skipped() {
    for mode in MODES {
        let receiver = bind(V6, mode);
        let sender = bind(V6, mode);
        let body = payload(2, 2, 10);
        sender
            .send_all(&[
                transmit(addr_of(&receiver), &[]),
                transmit(addr_of(&receiver), &body),
            ])
            .await
            .unwrap();
        let got = recv_n(&receiver, 1).await;
        assert_eq!(&got[0].data[..], &body[..]);
        assert_eq!(receiver.stats().rx_dropped.empty, 1);
    }
}

/// ICMP port unreachable (from sending to a closed port) never reaches the socket: the kernel
/// does generate it (a plain socket with `IP_RECVERR` on sees it fail its next send), but
/// ours leaves ICMP errors off, so its sends never fail with one and it keeps working both
/// ways.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn icmp_errors_never_reach_the_socket() {
    for ip in [V4, V6] {
        for mode in MODES {
            let sock = bind(ip, mode);
            let dead = {
                let s = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
                s.local_addr().unwrap()
            };
            let peer = bind(ip, mode);
            let body = payload(3, 3, 64);
            let control = icmp_reporting_socket(ip);
            let mut reported = false;
            for _ in 0..100 {
                sock.send_all(&[transmit(dead, &body)]).await.unwrap();
                control.send_to(&body, dead).unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                let _ = recv_now(&sock).await;
                if control.send_to(&body, dead).is_err() {
                    reported = true;
                    break;
                }
            }
            assert!(reported, "the kernel generated ICMP errors ({ip} {mode})");
            // Still works both ways, and no send or receive ever met an error.
            sock.send_all(&[transmit(addr_of(&peer), &body)])
                .await
                .unwrap();
            assert_eq!(&recv_n(&peer, 1).await[0].data[..], &body[..]);
            peer.send_all(&[transmit(addr_of(&sock), &body)])
                .await
                .unwrap();
            assert_eq!(&recv_n(&sock, 1).await[0].data[..], &body[..]);
            let stats = sock.stats();
            assert_eq!(stats.tx_dropped.total(), 0, "{ip} {mode}: {stats}");
            assert_eq!(stats.events.retried, 0, "{ip} {mode}: {stats}");
            assert_eq!(stats.events.recv_errors, 0, "{ip} {mode}: {stats}");
        }
    }
}

/// A receiver with a tiny SO_RCVBUF, flooded without reading, drops datagrams, and both the
/// per-receive report (SO_RXQ_OVFL) and the socket stats (SO_MEMINFO) say so.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn kernel_drops_are_reported() {
    for mode in MODES {
        let receiver = Socket::bind(
            SocketAddr::new(V4, 0),
            config(mode).with_recv_buffer_size(Some(4096)),
        )
        .unwrap();
        let sender = bind(V4, IoMode::Batched);
        let body = payload(4, 4, 1200);
        let ts: Vec<Transmit<&[u8]>> = (0..500)
            .map(|_| transmit(addr_of(&receiver), &body))
            .collect();
        sender.send_all(&ts).await.unwrap();
        // Loopback delivers in the sender's softirq, or later from ksoftirqd on a busy
        // machine: each of the 500 is counted once it is either received or dropped.
        let started = std::time::Instant::now();
        let mut kept = 0;
        let stats = loop {
            kept += recv_now(&receiver).await.len();
            let stats = receiver.stats();
            if kept as u64 + stats.kernel_drops >= 500 {
                break stats;
            }
            assert!(started.elapsed() < DEADLINE, "{mode}: {kept} kept, {stats}");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        };
        assert!(stats.kernel_drops > 0, "{mode}: drops seen by SO_MEMINFO");
        assert!(kept > 0 && kept < 500);
        // One more datagram after the drops carries the drop count in its SO_RXQ_OVFL cmsg.
        sender.send_all(&ts[..1]).await.unwrap();
        let mut batch = receiver.recv_batch();
        let summary = tokio::time::timeout(DEADLINE, receiver.recv_async(&mut batch))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            summary.kernel_drops, stats.kernel_drops,
            "{mode}: drops reported with the datagram"
        );
        assert_eq!(kept as u64 + stats.kernel_drops, 500);
    }
}

#[tokio::test]
async fn bind_errors_name_the_address() {
    let a = bind(V4, IoMode::Batched);
    let err = Socket::bind(addr_of(&a), Config::default()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert_eq!(err.what(), neqo_udp::Refused::Bind(addr_of(&a)));
    assert!(err.to_string().contains(&addr_of(&a).to_string()), "{err}");
    // Into an io::Error, as `?` makes it: the same kind, what and the OS error in its text.
    let os = err.io_error().to_string();
    let io = std::io::Error::from(err);
    assert_eq!(io.kind(), std::io::ErrorKind::AddrInUse);
    assert_eq!(io.to_string(), format!("binding UDP {}: {os}", addr_of(&a)));
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn buffer_sizes_are_reported() {
    let s = Socket::bind(
        SocketAddr::new(V4, 0),
        Config::default()
            .with_recv_buffer_size(Some(1 << 20))
            .with_send_buffer_size(Some(1 << 19)),
    )
    .unwrap();
    let b = s.buffer_sizes();
    // Linux doubles the request for bookkeeping.
    assert_eq!(b.recv, 2 << 20);
    assert_eq!(b.send, 2 << 19);
}

/// Sends to a closed port from a second handle on the same socket, from another thread, while
/// every datagram to a live peer must arrive in order: with `IP_RECVERR` on, the kernel
/// failed the next send with each port-unreachable error, whichever datagram it met (a policy
/// that retried too few times lost about one run in 60 here). With ICMP errors off, no send
/// meets one at all. The socket is handed in with `IP_RECVERR` on, as a caller's may be: the
/// crate must turn it off. The provocations race the sends, but at most [`AHEAD`] of them
/// run ahead of the datagrams that arrived: a flood sent flat out filled the loopback's
/// per-CPU backlog on a loaded machine, which then dropped one of the test's own datagrams.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn provoked_icmp_errors_never_cost_a_transmit() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    };
    const DATAGRAMS: u16 = 2000;
    const PROVOCATIONS: u64 = 200_000;
    /// Provocations allowed ahead of each datagram that arrived.
    const AHEAD: u64 = 100;
    /// A hang guard over the whole exchange, not a speed bound.
    const GUARD: std::time::Duration = std::time::Duration::from_secs(120);
    for ip in [V4, V6] {
        for mode in MODES {
            // A caller's socket with ICMP error reporting on: the crate must turn it off.
            let std_sock = icmp_reporting_socket(ip);
            let provoker = std_sock.try_clone().unwrap();
            let sock = Socket::from_std(std_sock, config(mode)).unwrap();
            let (level, name) = if ip.is_ipv4() {
                (libc::IPPROTO_IP, libc::IP_RECVERR)
            } else {
                (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
            };
            let mut recverr: libc::c_int = -1;
            let mut len = size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: a valid fd (a second handle on the same socket) and a live c_int of
            // the stated size.
            let rc = unsafe {
                libc::getsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&provoker),
                    level,
                    name,
                    std::ptr::from_mut(&mut recverr).cast(),
                    &raw mut len,
                )
            };
            assert_eq!(rc, 0);
            assert_eq!(recverr, 0, "{ip} {mode}: ICMP error reporting turned off");
            let dead = {
                let s = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
                s.local_addr().unwrap()
            };
            let peer = bind(ip, mode);
            let stop = Arc::new(AtomicBool::new(false));
            let provoked = Arc::new(AtomicU64::new(0));
            let provoker_errors = Arc::new(AtomicU64::new(0));
            // How many provocations may have been sent by now: paced by the arrivals.
            let allowed = Arc::new(AtomicU64::new(2 * AHEAD));
            let flood = {
                let (stop, provoked, errors, allowed) = (
                    Arc::clone(&stop),
                    Arc::clone(&provoked),
                    Arc::clone(&provoker_errors),
                    Arc::clone(&allowed),
                );
                std::thread::spawn(move || {
                    for sent in 0..PROVOCATIONS {
                        while sent >= allowed.load(Ordering::Relaxed) {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            std::thread::yield_now();
                        }
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        match provoker.send_to(b"x", dead) {
                            Ok(_) => provoked.fetch_add(1, Ordering::Relaxed),
                            Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
            };
            let mut batch = peer.recv_batch();
            let mut next = 0u16;
            tokio::time::timeout(GUARD, async {
                while provoked.load(Ordering::Relaxed) < AHEAD && !flood.is_finished() {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                for seq in 0..DATAGRAMS {
                    let body = payload(9, seq, 64);
                    sock.send_all(&[transmit(addr_of(&peer), &body)])
                        .await
                        .unwrap();
                    while next <= seq {
                        peer.recv_async(&mut batch).await.unwrap();
                        for d in batch.datagrams() {
                            assert_eq!(&d.data[..], &payload(9, next, 64)[..], "{ip} {mode}");
                            next += 1;
                        }
                        allowed.store((u64::from(next) + 2) * AHEAD, Ordering::Relaxed);
                    }
                }
            })
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{ip} {mode}: {next} of {DATAGRAMS} arrived; sender {}",
                    sock.stats()
                )
            });
            stop.store(true, Ordering::Relaxed);
            flood.join().unwrap();
            let stats = sock.stats();
            assert!(provoked.load(Ordering::Relaxed) >= AHEAD, "the flood ran");
            assert_eq!(stats.tx_dropped.total(), 0, "{ip} {mode}: {stats}");
            assert_eq!(
                stats.events.retried, 0,
                "{ip} {mode}: no pending error: {stats}"
            );
            assert_eq!(
                provoker_errors.load(Ordering::Relaxed),
                0,
                "{ip} {mode}: not even the provoking handle meets one"
            );
        }
    }
}

/// A connected socket is refused: the kernel would report ICMP errors on it as pending
/// socket errors.
#[tokio::test]
async fn connected_sockets_are_refused() {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect("127.0.0.1:9").unwrap();
    let err = Socket::from_std(s, Config::default()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(err.what(), neqo_udp::Refused::Connected);
    assert!(err.to_string().contains("connected"), "{err}");
}

/// A socket that cannot take the options every socket gets is refused, naming the option:
/// here a Unix datagram socket, which has no IPv6 options to read.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn a_refused_option_is_named() {
    let (sock, _peer) = std::os::unix::net::UnixDatagram::pair().unwrap();
    let err = neqo_udp::UdpSocketState::new((&sock).into(), Config::default()).unwrap_err();
    assert_eq!(
        err.what(),
        neqo_udp::Refused::Option("IPV6_V6ONLY"),
        "{err:?}"
    );
    assert!(
        err.io_error().raw_os_error().is_some(),
        "the OS error: {err:?}"
    );
    assert_eq!(err.to_string(), "socket option IPV6_V6ONLY");
}

/// A caller's socket with more receive options on (timestamps, TTL, original destination)
/// gets more control messages per datagram: they must not push out the GRO segment size,
/// ECN or destination address. With a control buffer sized for ours alone, the kernel cut
/// them (`MSG_CTRUNC`) and a GRO run could be handed up as one datagram.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[tokio::test]
async fn extra_receive_options_cost_no_control_message() {
    for ip in [V4, V6] {
        let std_sock = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&std_sock);
        let opts: &[(libc::c_int, libc::c_int)] = if ip.is_ipv4() {
            &[
                (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS),
                (libc::IPPROTO_IP, libc::IP_RECVTTL),
                (libc::IPPROTO_IP, libc::IP_RECVORIGDSTADDR),
                (libc::IPPROTO_IP, libc::IP_RECVOPTS),
            ]
        } else {
            &[
                (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS),
                (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT),
                (libc::IPPROTO_IPV6, libc::IPV6_RECVORIGDSTADDR),
            ]
        };
        for &(level, name) in opts {
            let one: libc::c_int = 1;
            // SAFETY: a valid fd and a live c_int of the stated size.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    level,
                    name,
                    std::ptr::from_ref(&one).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "option {level}/{name}");
        }
        let receiver = Socket::from_std(std_sock, Config::default()).unwrap();
        assert!(receiver.gro_enabled());
        let sender = bind(ip, IoMode::Batched);
        let run: Vec<u8> = (0..12_000u32).map(|i| (i % 241) as u8).collect();
        let t = transmit(addr_of(&receiver), &run)
            .with_segment_size(Some(1200))
            .with_ecn(Some(EcnCodepoint::Ect0));
        sender.send_all(&[t]).await.unwrap();
        let got = recv_n(&receiver, 10).await;
        assert!(
            got.iter().all(|d| d.data.len() == 1200),
            "{ip}: split at 1200"
        );
        assert!(
            got.iter().all(|d| d.ecn == Some(EcnCodepoint::Ect0)),
            "{ip}: ECN kept"
        );
        assert!(
            got.iter().all(|d| d.destination == Some(ip)),
            "{ip}: destination kept"
        );
        let joined: Vec<u8> = got.iter().flat_map(|d| d.data.iter().copied()).collect();
        assert_eq!(joined, run);
        let stats = receiver.stats();
        assert_eq!(stats.rx_dropped.total(), 0, "{ip}: {stats}");
        assert_eq!(stats.rx.offload_segments, 10, "{ip}: one GRO run");
    }
}
