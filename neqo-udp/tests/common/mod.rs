//! Helpers shared by the loopback tests.
#![allow(dead_code, unreachable_pub, unused_imports)]

#[cfg(target_os = "linux")]
pub mod netns;

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use neqo_udp::{Config, Datagram, IoMode, Socket, Transmit};

/// Every wait in these tests is bounded by this; it is a hang guard, never a speed check.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
pub const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

pub fn config(mode: IoMode) -> Config {
    Config::default().with_mode(mode)
}

pub fn bind(ip: IpAddr, mode: IoMode) -> Socket {
    Socket::bind(SocketAddr::new(ip, 0), config(mode)).expect("bind on loopback")
}

/// Payload of datagram `seq` from `sender`, `len` bytes (at least 3): the sender and sequence
/// number up front, then bytes that depend on all three, so any mix-up shows.
pub fn payload(sender: u8, seq: u16, len: usize) -> Vec<u8> {
    assert!(len >= 3);
    let mut v = Vec::with_capacity(len);
    v.push(sender);
    v.extend_from_slice(&seq.to_be_bytes());
    let mut x = u32::from(sender) * 7919 + u32::from(seq) * 104_729 + len as u32;
    while v.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        v.push((x >> 16) as u8);
    }
    v
}

pub fn transmit(destination: SocketAddr, contents: &[u8]) -> Transmit<&[u8]> {
    Transmit::new(destination, contents)
}

/// Receives until `n` datagrams arrived (or fails at the deadline).
pub async fn recv_n(socket: &Socket, n: usize) -> Vec<Datagram> {
    let mut batch = socket.recv_batch();
    let mut got = Vec::with_capacity(n);
    tokio::time::timeout(DEADLINE, async {
        while got.len() < n {
            socket.recv_async(&mut batch).await.expect("recv");
            got.extend(batch.datagrams());
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "only {} of {n} datagrams arrived; receiver {}",
            got.len(),
            socket.stats()
        )
    });
    got
}

/// Receives whatever is queued now. Yields to the runtime first so that its reactor learns
/// of readiness (a socket reports `WouldBlock` until tokio has seen it readable).
pub async fn recv_now(socket: &Socket) -> Vec<Datagram> {
    tokio::task::yield_now().await;
    let mut batch = socket.recv_batch();
    let mut got = Vec::new();
    loop {
        match socket.recv(&mut batch) {
            Ok(_) => got.extend(batch.datagrams()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return got,
            Err(e) => panic!("recv: {e}"),
        }
    }
}

/// Target address on `ip` for a socket bound elsewhere (mapped for dual-stack cases).
pub fn addr_of(socket: &Socket) -> SocketAddr {
    socket.local_addr().unwrap()
}

/// A plain socket with `IP_RECVERR`/`IPV6_RECVERR` on: the kernel fails its next send with
/// the error of an ICMP message that came back for an earlier one.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn icmp_reporting_socket(ip: std::net::IpAddr) -> std::net::UdpSocket {
    let s = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
    let (level, name) = if ip.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_RECVERR)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    };
    let one: libc::c_int = 1;
    // SAFETY: a valid fd and a live c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            level,
            name,
            std::ptr::from_ref(&one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
    s
}
