//! A full send buffer, for real: loopback never pushes back (it hands datagrams straight to
//! the receiver), so this test makes its own network namespace whose loopback device has a
//! token-bucket qdisc. Datagrams wait in that queue, charged to the sender's tiny SO_SNDBUF,
//! until the kernel answers EAGAIN: `send` must report a partial count, and resending the
//! rest when writable must deliver everything, in order, once.
//!
//! Needs root (to create the namespace) and iproute2's `ip` and `tc`; `.ci/run` provides both.
#![cfg(target_os = "linux")]

mod common;

use std::{fs::File, net::SocketAddr, os::fd::AsRawFd, process::Command};

use common::*;
use neqo_udp::{Config, IoMode, Socket, Transmit};

struct Netns(String);

impl Netns {
    fn create(tag: &str) -> Self {
        let name = format!("neqo-udp-{tag}-{}", std::process::id());
        let ns = Self(name.clone());
        run(&["ip", "netns", "add", &name]);
        run(&[
            "ip", "netns", "exec", &name, "ip", "link", "set", "lo", "up",
        ]);
        // 100 Mbit/s: a 1200-byte datagram leaves every ~0.1 ms, so a send buffer of a few
        // datagrams fills at once and drains steadily.
        run(&[
            "ip", "netns", "exec", &name, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate",
            "100mbit", "burst", "16kb", "limit", "4mb",
        ]);
        ns
    }

    /// Runs `f` on a thread that has joined the namespace, on a current-thread runtime.
    fn run<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        let path = format!("/run/netns/{}", self.0);
        std::thread::spawn(move || {
            let ns = File::open(&path).expect("open namespace");
            // SAFETY: a valid namespace fd; setns only changes this thread's network namespace.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f);
        })
        .join()
        .expect("test thread");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

async fn fill_and_resend(ip: std::net::IpAddr, mode: IoMode, segments: Option<usize>) {
    let receiver = Socket::bind(SocketAddr::new(ip, 0), Config::with_mode(mode)).unwrap();
    let sender = Socket::bind(
        SocketAddr::new(ip, 0),
        Config {
            send_buffer_size: Some(4096),
            ..Config::with_mode(mode)
        },
    )
    .unwrap();
    let dest = addr_of(&receiver);
    const TRANSMITS: u16 = 300;
    let seg = 1200;
    let bodies: Vec<Vec<u8>> = (0..TRANSMITS)
        .map(|i| payload(1, i, segments.map_or(seg, |n| n * seg)))
        .collect();
    let ts: Vec<Transmit<'_>> = bodies
        .iter()
        .map(|b| Transmit {
            segment_size: segments.map(|_| seg),
            ..transmit(dest, b)
        })
        .collect();
    sender.writable().await.unwrap();
    let first = sender.send(&ts).unwrap();
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
                Ok(n) => done += n,
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
    assert!(stats.errors.would_block > 0);
    assert_eq!(stats.errors.serious(), 0, "{stats}");
    assert_eq!(receiver.stats().kernel_drops, 0);
}

#[test]
fn full_send_buffer_gives_partial_counts_and_loses_nothing() {
    if !is_root() {
        eprintln!("skipped: creating a network namespace needs root");
        return;
    }
    let ns = Netns::create("sndbuf");
    ns.run(async {
        for ip in [V4, V6] {
            fill_and_resend(ip, IoMode::Batched, None).await;
            fill_and_resend(ip, IoMode::Single, None).await;
            fill_and_resend(ip, IoMode::Batched, Some(8)).await;
        }
    });
}
