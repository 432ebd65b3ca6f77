//! What only uring mode has: provided buffers running out, linked send submissions, the
//! multishot receive's lifetime. The behaviour every mode shares is tested in `loopback.rs`
//! (which runs its tests in uring mode too) and `send_buffer.rs`.
#![cfg(target_os = "linux")]

mod common;

use std::net::SocketAddr;

use common::*;
use neqo_udp::{Config, IoMode, Socket, Transmit};

fn uring(ip: std::net::IpAddr, batch_size: usize) -> Socket {
    Socket::bind(
        SocketAddr::new(ip, 0),
        Config {
            batch_size,
            ..Config::with_mode(IoMode::Uring)
        },
    )
    .expect("io_uring mode binds on this kernel")
}

#[tokio::test]
async fn binds_in_uring_mode() {
    let s = bind(V4, IoMode::Uring);
    assert_eq!(s.mode(), IoMode::Uring);
    assert!(s.state().uring_fd().is_some());
    assert_eq!(s.state().uring_rearms(), Some((0, 0)));
    assert_eq!(s.batch_size(), neqo_udp::DEFAULT_BATCH_SIZE);
    assert!(s.max_gso_segments() > 1 && s.gro_enabled());
    let b = bind(V4, IoMode::Batched);
    assert!(b.state().uring_fd().is_none());
    assert_eq!(b.state().uring_rearms(), None);
}

/// Batch size 4 gives 8 provided buffers. 300 datagrams sent before the receiver reads any
/// take every buffer; the kernel ends the multishot receive with ENOBUFS and the rest wait
/// in the socket's queue until the receive is armed again: all arrive, in order, intact.
#[tokio::test]
async fn more_datagrams_than_buffers_all_arrive_in_order() {
    const N: u16 = 300;
    for ip in [V4, V6] {
        let receiver = uring(ip, 4);
        let sender = bind(ip, IoMode::Batched);
        let bodies: Vec<Vec<u8>> = (0..N)
            .map(|i| payload(5, i, 3 + usize::from(i) * 37 % 1400))
            .collect();
        let ts: Vec<Transmit<'_>> = bodies
            .iter()
            .map(|b| transmit(addr_of(&receiver), b))
            .collect();
        sender.send_all(&ts).await.unwrap();
        let got = recv_n(&receiver, usize::from(N)).await;
        let got: Vec<Vec<u8>> = got.iter().map(|d| d.data.to_vec()).collect();
        assert!(got == bodies, "{ip}: every datagram, in order, intact");
        let (rearms, no_buffers) = receiver.state().uring_rearms().unwrap();
        assert!(no_buffers > 0, "{ip}: the buffers ran out");
        assert!(
            rearms >= no_buffers,
            "{ip}: and the receive was armed again"
        );
        let stats = receiver.stats();
        assert_eq!(stats.rx.datagrams, u64::from(N));
        assert_eq!(stats.kernel_drops, 0, "{stats}");
        assert!(
            stats.rx.syscalls >= u64::from(N) / 4,
            "at most a batch per call"
        );
    }
}

/// Batch size 8: a send ring of 8 entries. One call with 100 transmits is 13 submissions,
/// in order.
#[tokio::test]
async fn send_batch_larger_than_the_send_ring() {
    for ip in [V4, V6] {
        let receiver = bind(ip, IoMode::Batched);
        let sender = uring(ip, 8);
        let bodies: Vec<Vec<u8>> = (0..100u16).map(|i| payload(6, i, 1200)).collect();
        let ts: Vec<Transmit<'_>> = bodies
            .iter()
            .map(|b| transmit(addr_of(&receiver), b))
            .collect();
        sender.writable().await.unwrap();
        let sent = sender.send(&ts).unwrap();
        assert_eq!(sent.transmits, 100);
        let tx = sender.stats().tx;
        assert_eq!(tx.syscalls, 13, "ceil(100 / 8) submissions");
        assert_eq!(tx.datagrams, 100);
        assert_eq!(tx.per_syscall[3], 12, "twelve of 8 datagrams");
        assert_eq!(tx.per_syscall[2], 1, "one of 4");
        let got = recv_n(&receiver, 100).await;
        let got: Vec<Vec<u8>> = got.iter().map(|d| d.data.to_vec()).collect();
        assert!(got == bodies, "{ip}: in order");
    }
}

/// An oversized transmit in the middle of a linked submission: the kernel fails it
/// (EMSGSIZE) and cancels the requests linked after it, which the next submission sends.
/// The send policy drops the oversized one alone (after one retry, as for sendmmsg).
#[tokio::test]
async fn oversized_transmit_is_dropped_alone_mid_submission() {
    let receiver = bind(V4, IoMode::Batched);
    let sender = bind(V4, IoMode::Uring);
    let bodies: Vec<Vec<u8>> = (0..6u16).map(|i| payload(7, i, 100)).collect();
    let huge = vec![0u8; 65_508];
    let mut ts: Vec<Transmit<'_>> = bodies
        .iter()
        .map(|b| transmit(addr_of(&receiver), b))
        .collect();
    ts.insert(3, transmit(addr_of(&receiver), &huge));
    sender.writable().await.unwrap();
    assert_eq!(sender.send(&ts).unwrap().transmits, 7);
    let got = recv_n(&receiver, 6).await;
    let got: Vec<Vec<u8>> = got.iter().map(|d| d.data.to_vec()).collect();
    assert!(got == bodies, "the others arrive, in order");
    let stats = sender.stats();
    assert_eq!(stats.tx_dropped.msg_size, 1, "{stats}");
    assert_eq!(stats.tx_dropped.total(), 1, "{stats}");
    assert_eq!(stats.tx.datagrams, 6);
    assert_eq!(stats.events.retried, 1, "{stats}");
    assert_eq!(
        stats.tx.syscalls, 2,
        "three before it, three after it: {stats}"
    );
}

/// Dropping a socket cancels its armed receive: the ring lets go of the socket, whose port
/// is then free again, even with datagrams completed and not taken.
#[tokio::test]
async fn dropping_the_socket_ends_the_receive() {
    let receiver = bind(V4, IoMode::Uring);
    let addr = addr_of(&receiver);
    let sender = bind(V4, IoMode::Batched);
    let body = payload(8, 0, 500);
    let ts: Vec<Transmit<'_>> = (0..20).map(|_| transmit(addr, &body)).collect();
    sender.send_all(&ts).await.unwrap();
    drop(receiver);
    let again = Socket::bind(addr, Config::with_mode(IoMode::Uring)).expect("the port is free");
    sender.send_all(&ts[..1]).await.unwrap();
    assert_eq!(&recv_n(&again, 1).await[0].data[..], &body[..]);
}

/// The kernel ties a request to the thread that submitted it and cancels it when that
/// thread exits (`-ECANCELED`). A socket made on a thread that then ends is re-armed by the
/// first receive that sees the end, on the thread that calls it, and loses nothing.
#[tokio::test]
async fn receive_survives_the_arming_thread_exiting() {
    let handle = tokio::runtime::Handle::current();
    let receiver = std::thread::spawn(move || {
        let _guard = handle.enter();
        bind(V4, IoMode::Uring)
    })
    .join()
    .unwrap();
    let sender = bind(V4, IoMode::Batched);
    let bodies: Vec<Vec<u8>> = (0..50u16).map(|i| payload(9, i, 700)).collect();
    let ts: Vec<Transmit<'_>> = bodies
        .iter()
        .map(|b| transmit(addr_of(&receiver), b))
        .collect();
    sender.send_all(&ts).await.unwrap();
    let got = recv_n(&receiver, 50).await;
    let got: Vec<Vec<u8>> = got.iter().map(|d| d.data.to_vec()).collect();
    assert!(got == bodies);
    let (rearms, _) = receiver.state().uring_rearms().unwrap();
    assert!(rearms >= 1, "armed again after the thread's exit");
}

/// An empty datagram ends the multishot receive (the kernel ends one on a zero-length
/// return, observed on Linux 6.18): it is counted and skipped, the receive is armed again,
/// and what follows arrives.
#[tokio::test]
async fn empty_datagram_ends_the_receive_and_nothing_is_lost() {
    let receiver = bind(V6, IoMode::Uring);
    let sender = bind(V6, IoMode::Batched);
    let body = payload(10, 1, 40);
    let dest = addr_of(&receiver);
    sender
        .send_all(&[
            transmit(dest, &[]),
            transmit(dest, &body),
            transmit(dest, &[]),
        ])
        .await
        .unwrap();
    sender.send_all(&[transmit(dest, &body)]).await.unwrap();
    let got = recv_n(&receiver, 2).await;
    assert!(got.iter().all(|d| d.data[..] == body[..]));
    assert_eq!(receiver.stats().rx_dropped.empty, 2);
    let (rearms, no_buffers) = receiver.state().uring_rearms().unwrap();
    assert_eq!(
        (rearms, no_buffers),
        (2, 0),
        "armed again after each empty one"
    );
}
