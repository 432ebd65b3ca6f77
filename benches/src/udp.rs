//! UDP-level measurements: what recvmmsg, sendmmsg, GSO and GRO buy over one datagram per
//! syscall, on loopback.
//!
//! Receive: blocking std sender threads flood one [`Socket`] with 100-byte datagrams; the
//! receiver drains it in `Single` or `Batched` mode. Send: one [`Socket`] sends 1200-byte
//! datagrams one per syscall, 32 per `sendmmsg`, as GSO runs, or as `sendmmsg` of GSO runs,
//! to a receiver draining with GRO on another thread.

use std::{
    net::{SocketAddr, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use neqo_udp::{Config, IoMode, Socket, Transmit};

use crate::cpu;

/// Payload of the receive benchmark's datagrams.
pub const RECV_DATAGRAM: usize = 100;
/// Payload of the send benchmark's datagrams (a typical QUIC packet).
pub const SEND_DATAGRAM: usize = 1200;
/// Segments per GSO run in the send benchmark.
pub const GSO_SEGMENTS: usize = 32;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// What one receive window measured.
#[derive(Debug, Clone, Copy)]
pub struct RecvResult {
    pub mode: IoMode,
    pub senders: usize,
    pub datagrams: u64,
    pub elapsed: Duration,
    pub syscalls: u64,
    pub kernel_drops: u64,
    /// CPU time the receiving thread used.
    pub cpu: Duration,
}

impl RecvResult {
    #[must_use]
    pub fn datagrams_per_second(&self) -> f64 {
        self.datagrams as f64 / self.elapsed.as_secs_f64()
    }

    #[must_use]
    pub fn datagrams_per_syscall(&self) -> f64 {
        if self.syscalls == 0 {
            0.0
        } else {
            self.datagrams as f64 / self.syscalls as f64
        }
    }

    /// Receiver CPU nanoseconds per datagram.
    #[must_use]
    pub fn cpu_ns_per_datagram(&self) -> f64 {
        if self.datagrams == 0 {
            0.0
        } else {
            self.cpu.as_nanos() as f64 / self.datagrams as f64
        }
    }
}

/// Blocking sender threads flooding `target` until dropped.
#[derive(Debug)]
pub struct Flood {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<u64>>,
}

impl Flood {
    /// Starts `senders` threads sending `len`-byte datagrams to `target` as fast as they can.
    /// Each stops on [`Flood::stop`] (or drop), and at the latest after `limit`.
    #[must_use]
    pub fn start(target: SocketAddr, senders: usize, len: usize, limit: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..senders)
            .map(|i| {
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    let local: SocketAddr = if target.is_ipv4() {
                        "127.0.0.1:0".parse().unwrap()
                    } else {
                        "[::1]:0".parse().unwrap()
                    };
                    let sock = UdpSocket::bind(local).expect("sender bind");
                    let payload = vec![u8::try_from(i % 256).unwrap_or(0); len];
                    let end = Instant::now() + limit;
                    let mut sent = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // Check the clock every few hundred sends only.
                        for _ in 0..256 {
                            if sock.send_to(&payload, target).is_ok() {
                                sent += 1;
                            }
                        }
                        if Instant::now() >= end {
                            break;
                        }
                    }
                    sent
                })
            })
            .collect();
        Self { stop, threads }
    }

    /// Stops the senders; returns how many datagrams they sent.
    pub fn stop(mut self) -> u64 {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads.drain(..).map(|t| t.join().unwrap_or(0)).sum()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Drains `socket` until `done` says stop; returns datagrams received.
async fn drain_until(socket: &Socket, mut done: impl FnMut(u64) -> bool) -> u64 {
    let mut batch = socket.recv_batch();
    let mut got = 0u64;
    while !done(got) {
        match socket.recv(&mut batch) {
            Ok(summary) => {
                got += summary.datagrams as u64;
                // Hand each datagram up, as an endpoint would, and let it go.
                for d in batch.datagrams() {
                    std::hint::black_box(&d.data);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Bounded wait, so a window always ends even if the senders stall.
                let _ = tokio::time::timeout(Duration::from_millis(50), socket.readable()).await;
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    got
}

/// Receives for `window` with `senders` flooding threads, in `mode`.
#[must_use]
pub fn measure_recv(mode: IoMode, senders: usize, window: Duration) -> RecvResult {
    let rt = runtime();
    rt.block_on(async {
        let socket = Socket::bind(
            "127.0.0.1:0".parse().unwrap(),
            Config::default().with_mode(mode),
        )
        .expect("receiver bind");
        let flood = Flood::start(
            socket.local_addr().unwrap(),
            senders,
            RECV_DATAGRAM,
            window * 4 + Duration::from_secs(5),
        );
        // Warm up: let the queue fill and the senders get going.
        let warm = Instant::now();
        drain_until(&socket, |_| warm.elapsed() > window / 5).await;
        let before = socket.stats();
        let cpu_before = cpu::thread_time();
        let start = Instant::now();
        let datagrams = drain_until(&socket, |_| start.elapsed() >= window).await;
        let elapsed = start.elapsed();
        let cpu = cpu::thread_time() - cpu_before;
        let delta = socket.stats().since(&before);
        flood.stop();
        RecvResult {
            mode,
            senders,
            datagrams,
            elapsed,
            syscalls: delta.rx.syscalls,
            kernel_drops: delta.kernel_drops,
            cpu,
        }
    })
}

/// How the send benchmark hands datagrams to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendVariant {
    /// `sendmsg`, one datagram per syscall (`IoMode::Single`).
    OnePerSyscall,
    /// `sendmmsg` of 32 single-datagram messages.
    Sendmmsg,
    /// `sendmsg` of one GSO run of [`GSO_SEGMENTS`] datagrams.
    Gso,
    /// `sendmmsg` of 8 GSO runs of [`GSO_SEGMENTS`] datagrams.
    SendmmsgGso,
}

impl SendVariant {
    pub const ALL: [Self; 4] = [
        Self::OnePerSyscall,
        Self::Sendmmsg,
        Self::Gso,
        Self::SendmmsgGso,
    ];

    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::OnePerSyscall => "sendmsg x1",
            Self::Sendmmsg => "sendmmsg x32",
            Self::Gso => "GSO x32",
            Self::SendmmsgGso => "sendmmsg 8 x GSO x32",
        }
    }

    /// A short key for `key=value` output.
    #[must_use]
    pub const fn key(self) -> &'static str {
        match self {
            Self::OnePerSyscall => "single",
            Self::Sendmmsg => "sendmmsg",
            Self::Gso => "gso",
            Self::SendmmsgGso => "sendmmsg_gso",
        }
    }

    fn config(self) -> Config {
        match self {
            Self::OnePerSyscall => Config::default().with_mode(IoMode::Single),
            Self::Sendmmsg => Config::default().with_gso(false),
            Self::Gso | Self::SendmmsgGso => Config::default(),
        }
    }

    /// (transmits per call, segments per transmit)
    const fn shape(self) -> (usize, usize) {
        match self {
            Self::OnePerSyscall => (1, 1),
            Self::Sendmmsg => (32, 1),
            Self::Gso => (1, GSO_SEGMENTS),
            Self::SendmmsgGso => (8, GSO_SEGMENTS),
        }
    }

    /// Datagrams one call carries.
    #[must_use]
    pub const fn datagrams_per_call(self) -> usize {
        let (t, s) = self.shape();
        t * s
    }
}

/// What one send window measured.
#[derive(Debug, Clone, Copy)]
pub struct SendResult {
    pub variant: SendVariant,
    pub datagrams: u64,
    pub syscalls: u64,
    pub elapsed: Duration,
    /// CPU time the sending thread used.
    pub cpu: Duration,
}

impl SendResult {
    #[must_use]
    pub fn datagrams_per_second(&self) -> f64 {
        self.datagrams as f64 / self.elapsed.as_secs_f64()
    }

    #[must_use]
    pub fn gbps(&self) -> f64 {
        self.datagrams_per_second() * (SEND_DATAGRAM * 8) as f64 / 1e9
    }

    #[must_use]
    pub fn syscalls_per_second(&self) -> f64 {
        self.syscalls as f64 / self.elapsed.as_secs_f64()
    }

    #[must_use]
    pub fn cpu_ns_per_datagram(&self) -> f64 {
        if self.datagrams == 0 {
            0.0
        } else {
            self.cpu.as_nanos() as f64 / self.datagrams as f64
        }
    }
}

/// A sender socket and a receiver draining (with GRO) on its own thread.
#[derive(Debug)]
pub struct SendFixture {
    pub socket: Socket,
    variant: SendVariant,
    payload: Vec<u8>,
    dest: SocketAddr,
    stop: Arc<AtomicBool>,
    receiver: Option<thread::JoinHandle<()>>,
}

impl SendFixture {
    /// Must be called inside a tokio runtime (the sender registers with it).
    #[must_use]
    pub fn new(variant: SendVariant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let receiver = {
            let stop = Arc::clone(&stop);
            thread::spawn(move || {
                runtime().block_on(async move {
                    let sock = Socket::bind("127.0.0.1:0".parse().unwrap(), Config::default())
                        .expect("receiver bind");
                    tx.send(sock.local_addr().unwrap()).unwrap();
                    let end = Instant::now() + Duration::from_secs(600);
                    drain_until(&sock, |_| {
                        stop.load(Ordering::Relaxed) || Instant::now() > end
                    })
                    .await;
                });
            })
        };
        let dest = rx.recv().expect("receiver address");
        let socket =
            Socket::bind("127.0.0.1:0".parse().unwrap(), variant.config()).expect("sender bind");
        let (_, segments) = variant.shape();
        Self {
            socket,
            variant,
            payload: vec![0x5a; SEND_DATAGRAM * segments],
            dest,
            stop,
            receiver: Some(receiver),
        }
    }

    /// Sends at least `datagrams` datagrams; returns how many went.
    pub async fn send(&self, datagrams: u64) -> u64 {
        let (transmits, segments) = self.variant.shape();
        let t = Transmit::new(self.dest, &self.payload[..])
            .with_segment_size((segments > 1).then_some(SEND_DATAGRAM));
        let batch = vec![t; transmits];
        let mut sent = 0;
        while sent < datagrams {
            match self.socket.send(&batch) {
                Ok(s) => sent += (s.transmits * segments + s.partial / SEND_DATAGRAM) as u64,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.socket.writable().await.expect("writable");
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        sent
    }
}

impl Drop for SendFixture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.receiver.take() {
            let _ = r.join();
        }
    }
}

/// Sends for `window` in `variant`.
#[must_use]
pub fn measure_send(variant: SendVariant, window: Duration) -> SendResult {
    runtime().block_on(async {
        let fixture = SendFixture::new(variant);
        // Warm up.
        fixture.send(10_000).await;
        let before = fixture.socket.stats();
        let cpu_before = cpu::thread_time();
        let start = Instant::now();
        let step = (variant.datagrams_per_call() * 64) as u64;
        while start.elapsed() < window {
            fixture.send(step).await;
        }
        let elapsed = start.elapsed();
        let cpu = cpu::thread_time() - cpu_before;
        let delta = fixture.socket.stats().since(&before);
        SendResult {
            variant,
            datagrams: delta.tx.datagrams,
            syscalls: delta.tx.syscalls,
            elapsed,
            cpu,
        }
    })
}
