//! A full send buffer, for real: loopback never pushes back (it hands datagrams straight to
//! the receiver), so this test makes its own network namespace whose loopback device has a
//! token-bucket qdisc. Datagrams wait in that queue, charged to the sender's tiny SO_SNDBUF,
//! until the kernel answers EAGAIN: `send` must report a partial count, and resending the
//! rest when writable must deliver everything, in order, once.
//!
//! Needs root (to create the namespace) and iproute2's `ip` and `tc`; `.ci/run` provides both.
#![cfg(target_os = "linux")]

mod common;

use std::net::SocketAddr;

use common::netns::{Netns, is_root};
use common::*;
use neqo_udp::{Config, IoMode, Socket, Transmit, TxQueue};

async fn fill_and_resend(ip: std::net::IpAddr, mode: IoMode, segments: Option<usize>) {
    let receiver = Socket::bind(SocketAddr::new(ip, 0), Config::default().with_mode(mode)).unwrap();
    let sender = Socket::bind(
        SocketAddr::new(ip, 0),
        Config::default()
            .with_mode(mode)
            .with_send_buffer_size(Some(4096)),
    )
    .unwrap();
    let dest = addr_of(&receiver);
    const TRANSMITS: u16 = 300;
    let seg = 1200;
    let bodies: Vec<Vec<u8>> = (0..TRANSMITS)
        .map(|i| payload(1, i, segments.map_or(seg, |n| n * seg)))
        .collect();
    let ts: Vec<Transmit<&[u8]>> = bodies
        .iter()
        .map(|b| transmit(dest, b).with_segment_size(segments.map(|_| seg)))
        .collect();
    sender.writable().await.unwrap();
    let first = sender.send(&ts).unwrap().transmits;
    assert!(
        first > 0 && first < ts.len(),
        "{mode}: the first call is partial ({first} of {})",
        ts.len()
    );
    let mut done = first;
    let mut calls = 1;
    tokio::time::timeout(DEADLINE, async {
        while done < ts.len() {
            sender.writable().await.unwrap();
            match sender.send(&ts[done..]) {
                Ok(sent) => {
                    assert_eq!(sent.partial, 0, "runs within the limits are never cut");
                    done += sent.transmits;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("send: {e}"),
            }
            calls += 1;
        }
    })
    .await
    .expect("the rest goes out as the queue drains");
    assert!(calls > 2, "the buffer filled more than once");
    let per_transmit = segments.unwrap_or(1);
    let expected: Vec<Vec<u8>> = bodies
        .iter()
        .flat_map(|b| b.chunks(seg).map(<[u8]>::to_vec))
        .collect();
    let got = recv_n(&receiver, usize::from(TRANSMITS) * per_transmit).await;
    let got: Vec<Vec<u8>> = got.iter().map(|d| d.data.to_vec()).collect();
    assert!(got == expected, "{mode}: everything arrives in order, once");
    let stats = sender.stats();
    assert!(stats.events.would_block > 0);
    assert_eq!(stats.tx_dropped.total(), 0, "{stats}");
    assert_eq!(stats.events.retried, 0, "{stats}");
    assert_eq!(receiver.stats().kernel_drops, 0);
}

/// The same through a [`TxQueue`] whose GSO runs are longer than one message may carry (the
/// socket cuts them, and a full buffer can stop it in the middle of one): at every step,
/// every datagram handed in is sent, dropped or still queued, and in the end all arrive.
async fn queue_accounts_for_every_datagram(ip: std::net::IpAddr) {
    let receiver = Socket::bind(SocketAddr::new(ip, 0), Config::default()).unwrap();
    let sender = Socket::bind(
        SocketAddr::new(ip, 0),
        Config::default().with_send_buffer_size(Some(4096)),
    )
    .unwrap();
    let dest = addr_of(&receiver);
    let seg = 1000;
    let mut queue = TxQueue::new(0);
    let mut expected = Vec::new();
    for i in 0..40u16 {
        // 1 to 100 segments: beyond 64 (and 65 507 bytes) a run takes two messages.
        let body = payload(3, i, seg * (1 + usize::from(i) * 5 % 100));
        expected.extend(body.chunks(seg).map(<[u8]>::to_vec));
        queue.push(Transmit::new(dest, body).with_segment_size(Some(seg)));
    }
    let account = |queue: &TxQueue| {
        let s = sender.stats();
        assert_eq!(
            queue.pushed_datagrams(),
            s.tx.datagrams + s.tx_dropped.total() + queue.queued_datagrams() as u64,
            "handed in = sent + dropped + queued: {s}"
        );
    };
    account(&queue);
    let mut calls = 0;
    tokio::time::timeout(DEADLINE, async {
        while !queue.is_empty() {
            sender.writable().await.unwrap();
            match sender.flush(&mut queue) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("flush: {e}"),
            }
            calls += 1;
            account(&queue);
        }
    })
    .await
    .expect("the queue drains");
    assert!(calls > 2, "the buffer filled more than once");
    let got = recv_n(&receiver, expected.len()).await;
    let got: Vec<Vec<u8>> = got.iter().map(|d| d.data.to_vec()).collect();
    assert!(got == expected, "everything arrives in order, once");
    assert_eq!(sender.stats().tx_dropped.total(), 0);
}

#[test]
fn full_send_buffer_gives_partial_counts_and_loses_nothing() {
    if !is_root() {
        eprintln!("skipped: creating a network namespace needs root");
        return;
    }
    let ns = Netns::create("sndbuf");
    ns.throttle_loopback();
    ns.run(async {
        for ip in [V4, V6] {
            fill_and_resend(ip, IoMode::Batched, None).await;
            fill_and_resend(ip, IoMode::Single, None).await;
            fill_and_resend(ip, IoMode::Batched, Some(8)).await;
            queue_accounts_for_every_datagram(ip).await;
        }
    });
}
