//! `neqo-server` under the attacks that once got through, each bounded in count and time, on
//! loopback or in a network namespace the test makes:
//! - authenticated clients sending DATAGRAM frames the server never asked for (it used to
//!   buffer them, and every frame kept its 64 KiB receive slot alive);
//! - a flood of packets that each ask for a stateless reply while the server's socket is
//!   write-blocked (it used to queue every reply, 66 KB each, without a bound);
//! - one address replaying a Retry token with a new connection ID each time (it used to fill
//!   the half-open table, and everyone else was refused);
//! - a flood of Initials whose connection IDs all name one worker (it used to land on that
//!   worker alone).
//!
//! What each test prints (`--nocapture`) is the attack's figure (what it cost the server);
//! what it asserts is behaviour and memory, never speed.

// The authenticated client's helpers serve the tests that run only on Linux (`process`):
// elsewhere they are built and unused.
#![cfg_attr(not(target_os = "linux"), allow(dead_code, unused_imports))]

#[path = "support/initials.rs"]
mod initials;
#[path = "support/raw_client.rs"]
mod raw_client;

mod common;

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use common::{scrape, stop_and_report, url, with_deadline};
use initials::{Replayed, retry_token};
use neqo_bin::client::{self, ClientConfig};
use neqo_driver::{
    TransportOptions,
    tls::{self, CipherSuite, Trust},
};
use neqo_protocols::ALPN_HQ;
use neqo_server_core::{Limits, RetryPolicy, ServerConfig, ServerHandle};
use quinn_proto::TransportErrorCode;
use raw_client::RawClient;

/// A hang guard for a whole test step, not a performance bound.
const DEADLINE: Duration = Duration::from_secs(90);

/// The idle and handshake timeouts of the servers and clients where a test is not about
/// them: longer than a step, so that a loaded machine never reaches them.
const IDLE: Duration = Duration::from_secs(120);

/// One test at a time: each loads both cores, and memory figures want a quiet machine.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn loopback(host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, host))
}

// ---------------------------------------------------------------------------------------------
// Forged 1-RTT packets: a client that completed its handshake, whose traffic secret the test
// learns through the TLS key log, seals whatever frames it likes.

/// The 1-RTT traffic secrets, as rustls logs them.
#[derive(Debug, Default)]
struct KeyCapture(Mutex<Secrets>);

#[derive(Debug, Default, Clone)]
struct Secrets {
    client: Option<Vec<u8>>,
    server: Option<Vec<u8>>,
}

impl rustls::KeyLog for KeyCapture {
    fn log(&self, label: &str, _client_random: &[u8], secret: &[u8]) {
        let mut s = self.0.lock().unwrap();
        match label {
            "CLIENT_TRAFFIC_SECRET_0" => s.client = Some(secret.to_vec()),
            "SERVER_TRAFFIC_SECRET_0" => s.server = Some(secret.to_vec()),
            _ => {}
        }
    }

    fn will_log(&self, label: &str) -> bool {
        label.ends_with("_TRAFFIC_SECRET_0")
    }
}

/// A client config offering AES-128-GCM only (so the 1-RTT keys are known), logging its
/// traffic secret into `capture`.
fn key_logging_config(capture: Arc<KeyCapture>) -> quinn_proto::ClientConfig {
    let suites = [CipherSuite::Aes128gcm];
    let mut tls = (*tls::stream_client_config(&Trust::Insecure, &suites).unwrap()).clone();
    tls.alpn_protocols = vec![ALPN_HQ.as_bytes().to_vec()];
    tls.key_log = capture;
    let initial = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(rustls::Tls13CipherSuite::quic_suite)
        .unwrap();
    let crypto =
        quinn_proto::crypto::rustls::QuicClientConfig::with_initial(Arc::new(tls), initial)
            .unwrap();
    quinn_proto::ClientConfig::new(Arc::new(crypto))
}

/// HKDF-Expand-Label (RFC 8446 section 7.1) with an empty context, `len` bytes.
fn expand_label(secret: &ring::hkdf::Prk, label: &str, len: usize) -> Vec<u8> {
    struct Len(usize);
    impl ring::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    let full = format!("tls13 {label}");
    let info = [
        &u16::try_from(len).unwrap().to_be_bytes()[..],
        &[u8::try_from(full.len()).unwrap()],
        full.as_bytes(),
        &[0],
    ];
    let mut out = vec![0; len];
    secret
        .expand(&info, Len(len))
        .unwrap()
        .fill(&mut out)
        .unwrap();
    out
}

/// One direction's 1-RTT packet protection (RFC 9001 section 5), AES-128-GCM.
struct OneRttKeys {
    aead: ring::aead::LessSafeKey,
    iv: Vec<u8>,
    hp: ring::aead::quic::HeaderProtectionKey,
}

impl OneRttKeys {
    fn from_secret(secret: &[u8]) -> Self {
        let prk = ring::hkdf::Prk::new_less_safe(ring::hkdf::HKDF_SHA256, secret);
        let key = expand_label(&prk, "quic key", 16);
        let hp = expand_label(&prk, "quic hp", 16);
        Self {
            aead: ring::aead::LessSafeKey::new(
                ring::aead::UnboundKey::new(&ring::aead::AES_128_GCM, &key).unwrap(),
            ),
            iv: expand_label(&prk, "quic iv", 12),
            hp: ring::aead::quic::HeaderProtectionKey::new(&ring::aead::quic::AES_128, &hp)
                .unwrap(),
        }
    }

    fn nonce(&self, pn: u64) -> ring::aead::Nonce {
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&self.iv);
        for (n, p) in nonce[4..].iter_mut().zip(pn.to_be_bytes()) {
            *n ^= p;
        }
        ring::aead::Nonce::assume_unique_for_key(nonce)
    }

    /// The packet number and frames of a short-header packet to a `dcid_len`-byte
    /// connection ID, its number decoded as following `largest` (RFC 9000 appendix A.3);
    /// `None` if it does not open.
    fn open(&self, packet: &[u8], dcid_len: usize, largest: u64) -> Option<(u64, Vec<u8>)> {
        let mut p = packet.to_vec();
        let pn_at = 1 + dcid_len;
        if p.first()? & 0xc0 != 0x40 || p.len() < pn_at + 20 {
            return None;
        }
        let mask = self.hp.new_mask(&p[pn_at + 4..pn_at + 20]).ok()?;
        p[0] ^= mask[0] & 0x1f;
        let pn_len = usize::from(p[0] & 3) + 1;
        let mut truncated = 0u64;
        for (b, m) in p[pn_at..pn_at + pn_len].iter_mut().zip(&mask[1..]) {
            *b ^= m;
            truncated = truncated << 8 | u64::from(*b);
        }
        let window = 1u64 << (8 * pn_len);
        let expected = largest + 1;
        let mut pn = (expected & !(window - 1)) | truncated;
        if pn + window / 2 <= expected {
            pn += window;
        } else if pn > expected + window / 2 && pn >= window {
            pn -= window;
        }
        let (header, body) = p.split_at_mut(pn_at + pn_len);
        let frames = self
            .aead
            .open_in_place(self.nonce(pn), ring::aead::Aad::from(&*header), body)
            .ok()?;
        Some((pn, frames.to_vec()))
    }

    /// A short-header packet to `dcid` with packet number `pn` (sent as 4 bytes) carrying
    /// `frames`, sealed and header-protected.
    fn seal(&self, dcid: &[u8], pn: u32, frames: &[u8]) -> Vec<u8> {
        // Fixed bit, key phase 0, a 4-byte packet number.
        let mut packet = vec![0x43];
        packet.extend_from_slice(dcid);
        let pn_at = packet.len();
        packet.extend_from_slice(&pn.to_be_bytes());
        let header_len = packet.len();
        let mut payload = frames.to_vec();
        let tag = self
            .aead
            .seal_in_place_separate_tag(
                self.nonce(u64::from(pn)),
                ring::aead::Aad::from(&packet[..header_len]),
                &mut payload,
            )
            .unwrap();
        packet.extend_from_slice(&payload);
        packet.extend_from_slice(tag.as_ref());
        let sample = &packet[pn_at + 4..pn_at + 20];
        let mask = self.hp.new_mask(sample).unwrap();
        packet[0] ^= mask[0] & 0x1f;
        for (b, m) in packet[pn_at..pn_at + 4].iter_mut().zip(&mask[1..]) {
            *b ^= m;
        }
        packet
    }
}

/// A DATAGRAM frame (RFC 9221, type 0x31: with a length) of `len` bytes.
fn datagram_frame(len: usize) -> Vec<u8> {
    let mut f = vec![0x31];
    // The length as a four-byte varint (RFC 9000 section 16).
    let len32 = u32::try_from(len).unwrap();
    assert!(len32 < 1 << 30);
    f.extend_from_slice(&(0x8000_0000 | len32).to_be_bytes());
    f.resize(f.len() + len, 0xd7);
    f
}

/// A QUIC variable-length integer at the front of `b`, and the rest.
fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let len = 1 << (b.first()? >> 6);
    let mut v = u64::from(b[0] & 0x3f);
    for x in b.get(1..len)? {
        v = v << 8 | u64::from(*x);
    }
    Some((v, &b[len..]))
}

/// The error code of the CONNECTION_CLOSE frame (type 0x1c, a transport error) among
/// `frames`, looking past the frames a closing packet may carry before it (PADDING, PING,
/// ACK); `None` if there is none.
fn transport_close(mut frames: &[u8]) -> Option<u64> {
    loop {
        let (ty, rest) = varint(frames)?;
        frames = match ty {
            0x00 | 0x01 => rest,
            0x02 | 0x03 => {
                // Largest, delay, range count, first range; then the ranges; ECN counts.
                let (_, r) = varint(rest)?;
                let (_, r) = varint(r)?;
                let (ranges, r) = varint(r)?;
                let (_, mut r) = varint(r)?;
                for _ in 0..ranges * 2 + if ty == 0x03 { 3 } else { 0 } {
                    r = varint(r)?.1;
                }
                r
            }
            0x1c => return varint(rest).map(|(code, _)| code),
            _ => return None,
        };
    }
}

/// Reads the server's packets to `c` (bounded), opening them with the server's 1-RTT keys,
/// until one carries a transport CONNECTION_CLOSE: its error code. (Read raw: the client's
/// own quinn-proto would object to the ACKs of packets it never sent before it read it.)
fn server_close(c: &RawClient, keys: &OneRttKeys) -> u64 {
    let limit = Instant::now() + DEADLINE;
    let mut largest = 0;
    let mut d = vec![0u8; 65_536];
    loop {
        assert!(
            Instant::now() < limit,
            "the server never closed the connection"
        );
        let Ok(n) = c.socket.recv(&mut d) else {
            continue;
        };
        if let Some((pn, frames)) = keys.open(&d[..n], c.client_cid.len(), largest) {
            largest = largest.max(pn);
            if let Some(code) = transport_close(&frames) {
                return code;
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod process {
    use std::process::Command;

    use test_fixtures::{
        Server,
        netns::{Netns, is_root},
    };

    use super::*;

    const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");

    fn json_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("neqo-hostile-{}-{name}.json", std::process::id()))
    }

    /// Starts `cmd` (a `neqo-server` command line) and waits until it listens.
    fn start(cmd: &mut Command) -> Server {
        Server::start(cmd, DEADLINE).unwrap_or_else(|e| panic!("server did not start: {e}"))
    }

    /// `VmRSS` and `VmHWM` (peak RSS) of a process from /proc, in MiB.
    fn memory_mib(pid: u32) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {name} in {status}"))
        };
        (field("VmRSS:") / 1024.0, field("VmHWM:") / 1024.0)
    }

    /// Three authenticated clients each send 13 000 DATAGRAM frames of 65 000 B to a server
    /// that never advertised them (default flags): each connection is closed with
    /// PROTOCOL_VIOLATION (RFC 9221 section 3), the server's memory stays low, and a new
    /// client is served afterwards. Before, the server buffered the frames: 519 MB for one
    /// such client, 2.5 GB for three.
    #[test]
    fn datagram_frames_nobody_asked_for_close_the_connection_and_cost_no_memory() {
        const CLIENTS: u8 = 3;
        const FRAMES: u32 = 13_000;
        const FRAME: usize = 65_000;
        let _serial = serial();
        let json = json_path("datagrams");
        let timeout = IDLE.as_secs().to_string();
        let server = start(Command::new(SERVER).args([
            "--listen",
            "127.0.0.1:0",
            "--idle-timeout",
            &timeout,
            "--handshake-timeout",
            &timeout,
            "--json",
            json.to_str().unwrap(),
        ]));
        let addr = server.addr();
        let (idle, _) = memory_mib(server.id());
        let frame = datagram_frame(FRAME);
        for k in 0..CLIENTS {
            let capture = Arc::new(KeyCapture::default());
            let c = RawClient::connect(
                addr,
                loopback(10 + k),
                key_logging_config(Arc::clone(&capture)),
            )
            .expect("handshake");
            let secrets = capture.0.lock().unwrap().clone();
            let keys = OneRttKeys::from_secret(&secrets.client.expect("the client's secret"));
            let server_keys =
                OneRttKeys::from_secret(&secrets.server.expect("the server's secret"));
            let started = Instant::now();
            for i in 0..FRAMES {
                assert!(started.elapsed() < DEADLINE, "sending took too long");
                let packet = keys.seal(&c.server_cid, (1 << 20) + i, &frame);
                assert!(packet.len() <= 65_527);
                // A full socket buffer on either side drops datagrams; the attack is what is
                // offered.
                let _ = c.socket.send_to(&packet, addr);
            }
            let code = server_close(&c, &server_keys);
            assert_eq!(
                code,
                u64::from(TransportErrorCode::PROTOCOL_VIOLATION),
                "client {k}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
        let (rss, peak) = memory_mib(server.id());
        println!(
            "DATAGRAM frames: {CLIENTS} clients x {FRAMES} x {FRAME} B offered; server RSS idle {idle:.1} MiB, after {rss:.1} MiB, peak {peak:.1} MiB"
        );
        assert!(peak < 100.0, "server peak RSS {peak:.1} MiB");
        let mut c = ClientConfig::new(url(addr, "/100000"), Trust::Insecure);
        c.transport.idle_timeout = IDLE;
        let r = with_deadline("a new client", DEADLINE, move || client::run(c))
            .expect("served after the attack");
        assert_eq!(r.bytes_received, 100_000);
        let report = stop_and_report(server, &json);
        assert_eq!(report.driver.accepted, u64::from(CLIENTS) + 1, "{report:?}");
    }

    /// A server whose replies are throttled to 1 Mbit/s (its port's datagrams, in a network
    /// namespace) meets a flood of 1200-byte packets of an unknown version, 60 000 a second
    /// for 5 s from 64 ports, each asking for a Version Negotiation reply: the replies it
    /// cannot send are dropped and counted, its memory stays under 100 MiB and is given back
    /// to under 50 MiB after. Before, it queued every reply in a 66 KB buffer: 1.84 GB in
    /// 20 s, kept after. Needs root; skipped otherwise.
    #[test]
    fn a_write_blocked_server_drops_stateless_replies_and_gives_memory_back() {
        const PORT: u16 = 4433;
        const RATE: u32 = 60_000;
        const SECONDS: u32 = 5;
        const SOURCES: usize = 64;
        if !is_root() {
            eprintln!("skipped: needs root for a network namespace");
            return;
        }
        let _serial = serial();
        let ns = Netns::create("neqo-hostile-vn").unwrap();
        ns.throttle_source_port(PORT, "1mbit").unwrap();
        let json = json_path("vn");
        let server = start(ns.command(SERVER).args([
            "--listen",
            &format!("127.0.0.1:{PORT}"),
            "--json",
            json.to_str().unwrap(),
        ]));
        let pid = server.id();
        let (idle, _) = memory_mib(pid);
        let path = ns.path();
        let flood = std::thread::spawn(move || {
            test_fixtures::netns::enter(&path).unwrap();
            let target = SocketAddr::from(([127, 0, 0, 1], PORT));
            let socks: Vec<UdpSocket> = (0..SOURCES)
                .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
                .collect();
            let mut packet = vec![0xc0, 0x0a, 0x1a, 0x2a, 0x3a, 8];
            packet.extend_from_slice(&[0x11; 8]);
            packet.push(8);
            packet.extend_from_slice(&[0x22; 8]);
            packet.resize(1200, 0);
            // Sent in slices of 10 ms, each slice's share at once.
            let per_slice = RATE / 100;
            let started = Instant::now();
            let mut sent = 0u64;
            for slice in 0..SECONDS * 100 {
                for i in 0..per_slice {
                    packet[6..10].copy_from_slice(&(slice * per_slice + i).to_be_bytes());
                    let s = &socks[(i as usize) % SOURCES];
                    if s.send_to(&packet, target).is_ok() {
                        sent += 1;
                    }
                }
                let due = started + Duration::from_millis(u64::from(slice + 1) * 10);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            (sent, started.elapsed())
        });
        let mut peak_during: f64 = 0.0;
        while !flood.is_finished() {
            peak_during = peak_during.max(memory_mib(pid).0);
            std::thread::sleep(Duration::from_millis(100));
        }
        let (sent, took) = flood.join().unwrap();
        // The queue empties at 1 Mbit/s and the allocator returns what it held: a wait for
        // the resting figure, with a hang guard of a minute.
        let mut after = memory_mib(pid).0;
        for _ in 0..600 {
            if after < 50.0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            after = memory_mib(pid).0;
        }
        let (_, peak) = memory_mib(pid);
        let report = stop_and_report(server, &json);
        let dropped = report.driver.stateless_dropped;
        let replied = report.socket.tx.datagrams;
        println!(
            "stateless flood: {sent} packets in {took:.1?}; server RSS idle {idle:.1} MiB, peak {peak:.1} MiB, after {after:.1} MiB; replies sent {replied}, dropped {dropped}"
        );
        assert!(
            dropped > 0,
            "the replies never met a full queue: {report:?}"
        );
        assert!(peak < 100.0, "peak RSS {peak:.1} MiB");
        assert!(after < 50.0, "RSS after the flood {after:.1} MiB");
    }

    /// Per-thread CPU time of `pid`'s threads named `name`, in seconds.
    fn thread_cpu(pid: u32, name: &str) -> f64 {
        let ticks = 100.0; // USER_HZ
        let mut total = 0.0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
        {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
            // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let t = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<f64>().ok());
            total += t(14).unwrap_or(0.0) + t(15).unwrap_or(0.0);
        }
        total / ticks
    }

    /// Waits (a hang guard of [`DEADLINE`]) until no socket bound to `addr`'s port has a
    /// datagram queued (`/proc/net/udp`'s `rx_queue`).
    fn wait_for_empty_rx_queues(addr: SocketAddr) {
        let port = format!(":{:04X}", addr.port());
        let started = Instant::now();
        loop {
            let table = std::fs::read_to_string("/proc/net/udp").unwrap();
            let queued: Vec<&str> = table
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    let rx = f.get(4)?.split_once(':')?.1;
                    (f.get(1)?.ends_with(&port) && u64::from_str_radix(rx, 16).ok()? > 0)
                        .then_some(l)
                })
                .collect();
            if queued.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "datagrams still queued at the server: {queued:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// 20 480 Initials from 256 ports whose connection IDs all carry worker byte 0: with two
    /// workers, by the kernel's program or the dispatcher, they reach both, neither more than
    /// twice the other's share. Before, every one reached worker 0.
    #[test]
    fn initials_aimed_at_one_worker_reach_both() {
        const SOURCES: usize = 256;
        const PER_SOURCE: usize = 80;
        let _serial = serial();
        for steering in ["bpf", "channel"] {
            let json = json_path(&format!("aim-{steering}"));
            let server = start(Command::new(SERVER).args([
                "--listen",
                "127.0.0.1:0",
                "--workers",
                "2",
                "--steering",
                steering,
                "--json",
                json.to_str().unwrap(),
            ]));
            let target = server.addr();
            let socks: Vec<UdpSocket> = (0..SOURCES)
                .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
                .collect();
            // An Initial of QUIC v1 whose 8-byte DCID has worker byte 0 after its first octet
            // (no server ID), the rest of it varying; its payload fails the AEAD.
            let mut packet = vec![0xc0, 0, 0, 0, 1, 8, 0xe0, 0];
            packet.extend_from_slice(&[0; 6]);
            packet.extend_from_slice(&[8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x44, 0x9e]);
            packet.resize(1200, 0x5a);
            let started = Instant::now();
            for round in 0..PER_SOURCE {
                for (i, s) in socks.iter().enumerate() {
                    let n = (round * SOURCES + i) as u64;
                    packet[8..14].copy_from_slice(&n.to_be_bytes()[2..]);
                    s.send_to(&packet, target).unwrap();
                }
                // About 20 000 a second: what the sockets take without drops.
                let due = started + Duration::from_millis(12 * (round as u64 + 1));
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            // Stopped only once the server has taken in, or the kernel dropped (counted),
            // every datagram: what is still queued at its sockets at the stop counts nowhere.
            wait_for_empty_rx_queues(target);
            let cpu: Vec<f64> = (0..2)
                .map(|w| thread_cpu(server.id(), &format!("neqo-server-{w}")))
                .collect();
            let report = stop_and_report(server, &json);
            // What each worker was steered: with the kernel's program, what it read from its
            // own socket and what the kernel dropped there; with the dispatcher, what it handed
            // to the worker's channel (read or not by the stop) and dropped at its full
            // channel. A slow machine drops more, but not the steering's choice, so the counts
            // hold on any machine; only the dispatcher's own socket drops before choosing.
            let steered: Vec<u64> = match &report.dispatch {
                Some(d) => d
                    .datagrams
                    .iter()
                    .zip(&d.dropped)
                    .map(|(h, d)| h + d)
                    .collect(),
                None => report
                    .workers
                    .iter()
                    .map(|w| w.rx_datagrams + w.kernel_drops)
                    .collect(),
            };
            assert_eq!(steered.len(), 2, "{report:?}");
            let before_steering = report
                .dispatch
                .as_ref()
                .map_or(0, |d| d.socket.kernel_drops);
            let sent = (SOURCES * PER_SOURCE) as u64;
            println!(
                "aimed Initials ({steering}): {sent} sent; steered per worker {steered:?} \
                 ({before_steering} dropped before steering); worker CPU {cpu:.2?} s"
            );
            let arrived = steered[0] + steered[1] + before_steering;
            assert!(arrived >= sent * 9 / 10, "most arrive: {arrived} of {sent}");
            assert!(
                steered[0] + steered[1] >= sent / 4,
                "{steering}: too few steered to judge: {steered:?} of {sent}"
            );
            let (lo, hi) = (steered[0].min(steered[1]), steered[0].max(steered[1]));
            assert!(2 * lo >= hi, "{steering}: {steered:?} of {sent}");
        }
    }
}

/// One address replays a Retry token (valid for its lifetime, bound to the address and
/// port) with a new connection ID each time, 300 times a second, and never finishes a
/// handshake; meanwhile, once the replays fill the half-open table, clients from another
/// address connect one after another. Every one of them is served: a newcomer that finds
/// the half-open table full takes the place of the replaying source's oldest handshake.
/// Before, the replays filled the table and newcomers were refused.
#[test]
fn one_address_replaying_a_retry_token_keeps_nobody_else_out() {
    const MAX_HALF_OPEN: usize = 100;
    const RATE: u32 = 300;
    /// Rounds of 10 client connections at most, until 10 have taken a replay's place: the
    /// count a worker publishes is up to a second old, and a round takes milliseconds.
    const ROUNDS: usize = 5000;
    let _serial = serial();
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        limits: Limits {
            retry: RetryPolicy::Always,
            max_half_open: MAX_HALF_OPEN,
            handshake_timeout: IDLE,
            ..Limits::default()
        },
        transport: TransportOptions {
            idle_timeout: IDLE,
            ..TransportOptions::default()
        },
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..ServerConfig::default()
    })
    .expect("server starts");
    let addr = server.addr();
    let metrics = server.metrics_addr().expect("a metrics endpoint");
    // A live gauge (half-open) or a worker's published counter (evictions), summed.
    let metric = move |name: &str| -> f64 {
        scrape(metrics)
            .iter()
            .filter(|(k, _)| k.split('{').next() == Some(name))
            .map(|(_, v)| v)
            .sum()
    };
    let handshakes = |what: &'static str| {
        let mut c = ClientConfig::new(url(addr, "/1000"), Trust::Insecure);
        c.connections = 10;
        c.transport.idle_timeout = IDLE;
        let r = with_deadline(what, DEADLINE, move || client::run(c))
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        assert_eq!((r.requests, r.failed_requests), (10, 0), "{what}");
        r.handshake_ms.expect("handshake times")
    };
    let idle = handshakes("clients of an idle server");
    let stop = Arc::new(AtomicBool::new(false));
    let attack = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || replay_retry_token(addr, RATE, &stop))
    };
    let started = Instant::now();
    while metric("neqo_server_connections_half_open") < MAX_HALF_OPEN as f64 {
        assert!(
            started.elapsed() < DEADLINE && !attack.is_finished(),
            "the replays never filled the half-open table"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Clients come while the replays go on, until 10 of their connections found the table
    // full and took a replay's place (a connection that comes while a place is free takes
    // it without evicting).
    let mut during = Vec::new();
    while during.is_empty() || metric("neqo_server_evicted_half_open_total") < 10.0 {
        assert!(
            during.len() < ROUNDS && started.elapsed() < DEADLINE,
            "too few evictions in {} rounds",
            during.len()
        );
        during.push(handshakes("clients during the replay"));
        eprintln!(
            "DEBUG {} {} {:?}",
            metric("neqo_server_evicted_half_open_total"),
            metric("neqo_server_connections_half_open"),
            scrape(metrics)
                .iter()
                .filter(|(k, _)| k.contains("evict") || k.contains("refused_conn"))
                .collect::<Vec<_>>()
        );
    }
    stop.store(true, Ordering::Relaxed);
    let replays = attack.join().unwrap();
    let r = server.stop().unwrap();
    println!(
        "Retry token replayed {replays} times at {RATE}/s; clients' handshake p50 idle {:.2} ms, during {} rounds of 10 at most {:.2} ms; evicted {}, refused {}",
        idle.p50,
        during.len(),
        during.iter().map(|p| p.p50).fold(0.0, f64::max),
        r.admission.evicted_half_open,
        r.admission.refused_half_open,
    );
    assert!(!during.is_empty());
    assert!(
        r.admission.evicted_half_open >= 10,
        "newcomers took replayed handshakes' places: {}",
        r.summary()
    );
    assert!(
        r.admission.refused_half_open > 0,
        "the replaying source was refused once the table was its own: {}",
        r.summary()
    );
}

/// From one address and port (127.0.0.2): an Initial to get a Retry, then `rate` Initials a
/// second until `stop` is set (for [`DEADLINE`] at most), each of a new connection carrying
/// that Retry's token; nothing answered. Returns how many were sent.
fn replay_retry_token(server: SocketAddr, rate: u32, stop: &AtomicBool) -> u32 {
    let socket = UdpSocket::bind(SocketAddr::new(loopback(2), 0)).unwrap();
    // A hang guard: a loaded server answers late.
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        true,
        None,
    );
    let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ).unwrap();
    let mut first_initial = |config: quinn_proto::ClientConfig| {
        let (_, mut conn) = endpoint
            .connect(Instant::now(), config, server, "localhost")
            .unwrap();
        let mut buf = Vec::new();
        let t = conn.poll_transmit(Instant::now(), 1, &mut buf).unwrap();
        socket.send_to(&buf[..t.size], server).unwrap();
    };
    first_initial(quinn_proto::ClientConfig::new(crypto.clone()));
    let mut d = [0u8; 2048];
    let token = loop {
        let n = socket.recv(&mut d).expect("a Retry");
        if let Some(token) = retry_token(&d[..n]) {
            break Bytes::copy_from_slice(token);
        }
    };
    let mut config = quinn_proto::ClientConfig::new(crypto);
    config.token_store(Arc::new(Replayed(token)));
    socket.set_nonblocking(true).unwrap();
    let started = Instant::now();
    let mut sent = 0;
    for i in 0..rate * DEADLINE.as_secs() as u32 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        first_initial(config.clone());
        sent += 1;
        while socket.recv(&mut d).is_ok() {}
        let due = started + Duration::from_secs(1) * (i + 1) / rate;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    sent
}
