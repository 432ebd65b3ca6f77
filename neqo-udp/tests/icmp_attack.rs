//! An off-path attacker who knows a socket's address sends it forged ICMP errors (from a raw
//! socket, in a network namespace the test makes): fragmentation needed / packet too big,
//! administratively prohibited, port unreachable, each quoting an earlier datagram of the
//! socket. None of them may cost a datagram to a live peer, shrink what the socket sends, or
//! make a full send buffer spin.
//!
//! Needs root (for the namespace and the raw socket) and iproute2; `.ci/run` provides both.
#![cfg(target_os = "linux")]

mod common;

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use common::{
    netns::{Netns, enter, is_root},
    *,
};
use neqo_udp::{Config, IoMode, Socket, Transmit};
use socket2::{Domain, Protocol, Type};

/// A forged ICMP error: its type and code (ICMPv4 or ICMPv6 by the address family), the
/// MTU field for "too big", and the errno the kernel reports for it to a socket that asks.
#[derive(Debug, Clone, Copy)]
struct Forged {
    name: &'static str,
    v4: (u8, u8),
    v6: (u8, u8),
    mtu: u32,
    errno_v4: i32,
    errno_v6: i32,
}

const FORGED: [Forged; 3] = [
    Forged {
        name: "fragmentation needed / packet too big",
        v4: (3, 4),
        v6: (2, 0),
        mtu: 576,
        errno_v4: libc::EMSGSIZE,
        errno_v6: libc::EMSGSIZE,
    },
    Forged {
        name: "administratively prohibited",
        v4: (3, 13),
        v6: (1, 1),
        mtu: 0,
        errno_v4: libc::EHOSTUNREACH,
        errno_v6: libc::EACCES,
    },
    Forged {
        name: "port unreachable",
        v4: (3, 3),
        v6: (1, 4),
        mtu: 0,
        errno_v4: libc::ECONNREFUSED,
        errno_v6: libc::ECONNREFUSED,
    },
];

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The ICMP message (without the outer IP header, which the raw socket adds) reporting an
/// error for a 64-byte UDP datagram from `victim` to `peer`.
fn icmp_error(f: Forged, victim: SocketAddr, peer: SocketAddr) -> Vec<u8> {
    let udp_len = 8 + 64u16;
    let mut udp = Vec::new();
    udp.extend_from_slice(&victim.port().to_be_bytes());
    udp.extend_from_slice(&peer.port().to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    match (victim.ip(), peer.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&(20 + udp_len).to_be_bytes());
            ip.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, 17, 0, 0]);
            ip.extend_from_slice(&src.octets());
            ip.extend_from_slice(&dst.octets());
            let c = checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let mut m = vec![f.v4.0, f.v4.1, 0, 0, 0, 0];
            m.extend_from_slice(&(f.mtu as u16).to_be_bytes());
            m.extend_from_slice(&ip);
            m.extend_from_slice(&udp);
            let c = checksum(&m);
            m[2..4].copy_from_slice(&c.to_be_bytes());
            m
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&udp_len.to_be_bytes());
            ip.extend_from_slice(&[17, 64]);
            ip.extend_from_slice(&src.octets());
            ip.extend_from_slice(&dst.octets());
            // The kernel fills in an ICMPv6 raw socket's checksum.
            let mut m = vec![f.v6.0, f.v6.1, 0, 0];
            m.extend_from_slice(&f.mtu.max(1280).to_be_bytes());
            if f.v6.0 != 2 {
                m[4..8].fill(0);
            }
            m.extend_from_slice(&ip);
            m.extend_from_slice(&udp);
            m
        }
        _ => unreachable!("one family"),
    }
}

/// A raw ICMP socket that sends forged errors to `ip`.
fn raw_sender(ip: IpAddr) -> socket2::Socket {
    let (domain, proto) = if ip.is_ipv4() {
        (Domain::IPV4, Protocol::ICMPV4)
    } else {
        (Domain::IPV6, Protocol::ICMPV6)
    };
    socket2::Socket::new(domain, Type::RAW, Some(proto)).expect("raw socket (root)")
}

fn inject(raw: &socket2::Socket, f: Forged, victim: SocketAddr, peer: SocketAddr) {
    let to = SocketAddr::new(victim.ip(), 0);
    raw.send_to(&icmp_error(f, victim, peer), &to.into())
        .expect("sending a forged ICMP error");
}

/// The forged error is one the kernel takes: a socket that asks for ICMP errors has its next
/// send failed with the expected errno. (Else the test below would prove nothing.)
async fn kernel_accepts(raw: &socket2::Socket, f: Forged, ip: IpAddr, peer: SocketAddr) {
    let control = icmp_reporting_socket(ip);
    let expected = if ip.is_ipv4() { f.errno_v4 } else { f.errno_v6 };
    inject(raw, f, control.local_addr().unwrap(), peer);
    for _ in 0..200 {
        if let Err(e) = control.send_to(b"probe", peer) {
            assert_eq!(e.raw_os_error(), Some(expected), "{}: {e}", f.name);
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!(
        "{} ({ip}): the kernel never reported the forged error",
        f.name
    );
}

async fn forged_errors_cost_nothing(ip: IpAddr, mode: IoMode) {
    let raw = raw_sender(ip);
    for f in FORGED {
        let victim = bind(ip, mode);
        let peer = bind(ip, mode);
        let dest = addr_of(&peer);
        kernel_accepts(&raw, f, ip, dest).await;
        let gso_before = victim.max_gso_segments();
        // An earlier datagram, then errors quoting it.
        let first = payload(1, 0, 64);
        victim.send_all(&[transmit(dest, &first)]).await.unwrap();
        assert_eq!(&recv_n(&peer, 1).await[0].data[..], &first[..]);
        for _ in 0..3 {
            inject(&raw, f, addr_of(&victim), dest);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Then datagrams to the live peer, a GSO run of segments above the forged MTU among them.
        let singles: Vec<Vec<u8>> = (1..6).map(|i| payload(1, i, 1400)).collect();
        let run: Vec<u8> = (0..14_000u32).map(|i| (i % 249) as u8).collect();
        let mut ts: Vec<Transmit<&[u8]>> = singles.iter().map(|p| transmit(dest, p)).collect();
        ts.insert(2, transmit(dest, &run).with_segment_size(Some(1400)));
        victim.send_all(&ts).await.unwrap();
        let mut expected: Vec<Vec<u8>> = singles[..2].to_vec();
        expected.extend(run.chunks(1400).map(<[u8]>::to_vec));
        expected.extend(singles[2..].iter().cloned());
        let got: Vec<Vec<u8>> = recv_n(&peer, expected.len())
            .await
            .iter()
            .map(|d| d.data.to_vec())
            .collect();
        assert!(
            got == expected,
            "{} ({ip} {mode}): all arrive, in order",
            f.name
        );
        let stats = victim.stats();
        let what = format!("{} ({ip} {mode}): {stats}", f.name);
        assert_eq!(stats.tx_dropped.total(), 0, "{what}");
        assert_eq!(stats.events.retried, 0, "no send met an error: {what}");
        assert_eq!(stats.events.gso_fallbacks, 0, "{what}");
        assert_eq!(victim.max_gso_segments(), gso_before, "{what}");
    }
}

#[test]
fn forged_icmp_errors_cost_no_datagram() {
    if !is_root() {
        eprintln!("skipped: a network namespace and a raw socket need root");
        return;
    }
    let ns = Netns::create("icmp");
    ns.run(async {
        for ip in [V4, V6] {
            for mode in [IoMode::Batched, IoMode::Single] {
                forged_errors_cost_nothing(ip, mode).await;
            }
        }
    });
}

/// A send buffer that fills (a 100 Mbit/s qdisc on the namespace's loopback) while forged
/// port-unreachable errors keep arriving: every wake-up for writability must find room.
/// With ICMP errors reported to the socket, epoll's EPOLLERR made tokio report it writable
/// for good, and a sender spun on EAGAIN: thousands of fruitless sends per useful one.
#[test]
fn a_full_send_buffer_under_icmp_errors_never_spins() {
    if !is_root() {
        eprintln!("skipped: a network namespace and a raw socket need root");
        return;
    }
    let ns = Netns::create("icmpspin");
    ns.throttle_loopback();
    let path = ns.path();
    for ip in [V4, V6] {
        let path = path.clone();
        ns.run(async move {
            let receiver = bind(ip, IoMode::Batched);
            let sender = Socket::bind(
                SocketAddr::new(ip, 0),
                Config::default().with_send_buffer_size(Some(4096)),
            )
            .unwrap();
            let (victim, dest) = (addr_of(&sender), addr_of(&receiver));
            let stop = Arc::new(AtomicBool::new(false));
            let injected_now = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let attacker = {
                let (stop, injected_now) = (Arc::clone(&stop), Arc::clone(&injected_now));
                std::thread::spawn(move || {
                    enter(&path).expect("joining the namespace");
                    let raw = raw_sender(ip);
                    let mut sent = 0;
                    while !stop.load(Ordering::Relaxed) && sent < 20_000 {
                        inject(&raw, FORGED[2], victim, dest);
                        sent += 1;
                        injected_now.store(sent, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    sent
                })
            };
            // The sends begin once the attack is under way, however late its thread starts.
            tokio::time::timeout(DEADLINE, async {
                while injected_now.load(Ordering::Relaxed) <= 10 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the attack starts");
            const DATAGRAMS: u16 = 1500;
            let bodies: Vec<Vec<u8>> = (0..DATAGRAMS).map(|i| payload(2, i, 1200)).collect();
            let ts: Vec<Transmit<&[u8]>> = bodies.iter().map(|b| transmit(dest, b)).collect();
            let (mut done, mut useful, mut fruitless) = (0, 0u64, 0u64);
            tokio::time::timeout(DEADLINE, async {
                while done < ts.len() {
                    sender.writable().await.unwrap();
                    match sender.send(&ts[done..]) {
                        Ok(sent) => {
                            done += sent.transmits;
                            useful += 1;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => fruitless += 1,
                        Err(e) => panic!("send: {e}"),
                    }
                }
            })
            .await
            .unwrap_or_else(|_| {
                panic!("{ip}: {done} sent; {useful} useful, {fruitless} fruitless wake-ups")
            });
            stop.store(true, Ordering::Relaxed);
            let injected = attacker.join().unwrap();
            eprintln!("{ip}: {useful} useful, {fruitless} fruitless sends; {injected} errors");
            assert!(injected > 10, "the attack ran ({injected} errors)");
            assert!(useful > 2, "{ip}: the buffer filled ({useful} sends)");
            assert!(
                fruitless <= useful + 10,
                "{ip}: {fruitless} fruitless wake-ups for {useful} useful ones"
            );
            let got = recv_n(&receiver, ts.len()).await;
            if let Some(i) = got
                .iter()
                .zip(&bodies)
                .position(|(d, b)| d.data[..] != b[..])
            {
                let seqs: Vec<String> = got[i.saturating_sub(3)..(i + 6).min(got.len())]
                    .iter()
                    .map(|d| {
                        format!(
                            "{}:{}:{}",
                            d.data[0],
                            u16::from_be_bytes([d.data[1], d.data[2]]),
                            d.data.len()
                        )
                    })
                    .collect();
                panic!(
                    "{ip}: mismatch at {i}: {seqs:?} receiver {}",
                    receiver.stats()
                );
            }
            let stats = sender.stats();
            assert_eq!(stats.tx_dropped.total(), 0, "{ip}: {stats}");
        });
    }
}
