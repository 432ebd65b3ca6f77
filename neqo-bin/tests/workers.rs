//! A server of several workers: connections spread over them, each stays on its worker when
//! its client's address changes, and every connection ID the server issues carries its
//! QUIC-LB server ID, also after the IDs are rotated. The spreading and rebinding tests run
//! twice: with the default steering (the kernel's program, on Linux) and with
//! `Steering::Channel` forced, the dispatcher that other platforms get, so that CI on Linux
//! covers it too.

mod common;

use std::{
    collections::HashSet,
    net::{SocketAddr, UdpSocket},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use common::{url, with_deadline};
use neqo_bin::client::{self, ClientConfig};
use neqo_driver::tls::Trust;
use neqo_relay::{Impairment, Rebind, RebindEvery, Relay, RelayConfig};
use neqo_server_core::{
    ServerConfig, ServerHandle, ServerId, ServerReport, Steering, quic_lb_server_id,
};

/// The idle and handshake timeouts of both ends: 64 connections at once on a loaded machine
/// wait their turns longer than the defaults (5 s for a handshake, 10 s idle).
const LONG: Duration = Duration::from_secs(120);

fn server_with(workers: usize, f: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        workers,
        ..ServerConfig::default()
    };
    cfg.transport.idle_timeout = LONG;
    cfg.limits.handshake_timeout = LONG;
    f(&mut cfg);
    ServerHandle::start(cfg).expect("server starts")
}

fn client_for(server: &ServerHandle, to: SocketAddr, path: &str) -> ClientConfig {
    let mut c = ClientConfig::new(url(to, path), Trust::Certs(server.certificate().to_vec()));
    c.transport.idle_timeout = LONG;
    c
}

fn accepted_per_worker(r: &ServerReport) -> Vec<u64> {
    r.workers.iter().map(|w| w.accepted).collect()
}

/// 64 connections over 2 workers steered by `steering`: every byte arrives, both workers take
/// connections and the report adds them up.
fn connections_spread_over_both_workers(steering: Steering) -> ServerReport {
    const BODY: u64 = 300_000;
    let s = server_with(2, |c| c.steering = steering);
    let mut c = client_for(&s, s.addr(), &format!("/{BODY}"));
    c.connections = 64;
    c.concurrency = 64;
    c.sockets = 16;
    c.requests = 2;
    let r = with_deadline("64 connections", Duration::from_secs(120), move || {
        client::run(c)
    })
    .expect("every request succeeds");
    assert_eq!(r.connections, 64);
    assert_eq!(r.failed_requests, 0);
    assert_eq!(r.bytes_received, 128 * BODY, "every body verified");
    let sr = s.stop().unwrap();
    let accepted = accepted_per_worker(&sr);
    assert_eq!(accepted.len(), 2, "{:?}", sr.workers);
    assert!(
        accepted.iter().all(|&a| a > 0),
        "both workers took connections: {accepted:?}"
    );
    assert_eq!(accepted.iter().sum::<u64>(), 64);
    assert_eq!(sr.driver.accepted, 64, "the report adds the workers up");
    assert_eq!(sr.requests, 128);
    assert_eq!(
        sr.workers.iter().map(|w| w.requests).sum::<u64>(),
        128,
        "each worker answered its own connections' requests"
    );
    assert!(sr.driver.peak_connections <= 64);
    assert!(sr.steering.contains("connection ID"), "{}", sr.steering);
    sr
}

#[test]
fn connections_spread_over_both_workers_and_every_byte_arrives() {
    let sr = connections_spread_over_both_workers(Steering::Auto);
    if cfg!(target_os = "linux") {
        assert!(sr.steering.contains("BPF"), "{}", sr.steering);
        assert!(sr.dispatch.is_none());
    }
}

#[test]
fn connections_spread_over_both_workers_through_the_dispatcher() {
    let sr = connections_spread_over_both_workers(Steering::Channel);
    assert!(sr.steering.contains("dispatcher"), "{}", sr.steering);
    let d = sr.dispatch.as_ref().expect("the dispatcher's report");
    assert_eq!(d.capacity, neqo_server_core::CHANNEL_CAPACITY);
    assert_eq!((d.datagrams.len(), d.dropped.len()), (2, 2));
    for (i, w) in sr.workers.iter().enumerate() {
        // What a worker received came from its channel; a few may still have been in it at
        // the stop.
        assert!(w.rx_datagrams > 0, "{:?}", sr.workers);
        assert!(d.datagrams[i] >= w.rx_datagrams, "{d:?} {:?}", sr.workers);
        assert_eq!(w.dispatch_dropped, d.dropped[i]);
        assert_eq!(w.kernel_drops, 0, "the dispatcher's socket counts those");
    }
    // The listening socket's receive side is the dispatcher's: every datagram it handed over
    // or dropped, it received.
    assert_eq!(
        sr.socket.rx.datagrams,
        d.datagrams.iter().sum::<u64>() + d.dropped.iter().sum::<u64>()
    );
    assert_eq!(sr.kernel_drops, d.socket.kernel_drops);
}

/// The relay gives the client a new address at every this many of its short-header
/// datagrams. A 256 MiB download through a 16 MiB stream window alone takes 15 window
/// updates, each in a datagram of its own (each follows data the last one let through),
/// besides the request and the ACKs: 3 rebindings at least on any machine, however fast.
const REBIND_AFTER: u64 = 5;

/// A download of `bytes` through `neqo-relay` giving the client a new address every
/// [`REBIND_AFTER`] datagrams,
/// from a server of 2 workers steered by `steering`: it completes byte-exact on one worker,
/// and the other receives nothing.
fn a_download_stays_on_its_worker_through_rebinding(
    steering: Steering,
    bytes: u64,
) -> ServerReport {
    let s = server_with(2, |c| c.steering = steering);
    let relay = Relay::start(RelayConfig {
        rebind: Some(Rebind {
            every: RebindEvery::Datagrams(REBIND_AFTER),
            addr: true,
            limit: None,
        }),
        ..RelayConfig::symmetric(
            "127.0.0.1:0".parse().unwrap(),
            s.addr(),
            Impairment::default(),
            1,
        )
    })
    .expect("relay starts");
    let c = client_for(&s, relay.local_addr(), &format!("/{bytes}"));
    let result = with_deadline(
        "a download through rebinding",
        Duration::from_secs(300),
        move || client::run(c),
    );
    // The server first: a datagram left in the relay would keep it draining.
    let sr = s.stop().unwrap();
    let relay = relay.stop().expect("relay stops");
    let r = result.unwrap_or_else(|e| panic!("{e:#}\n{relay}\n{:?}", sr.workers));
    assert_eq!(r.bytes_received, bytes, "byte-exact");
    println!("rebinding: {relay}");
    assert!(relay.rebinds >= 3, "the client's address changed: {relay}");
    assert!(
        sr.driver.path_challenges >= 1,
        "the server validated the new paths"
    );
    // The one connection and every datagram of it stayed on one worker, whatever the
    // client's address: the other worker received nothing.
    let (owner, other): (Vec<_>, Vec<_>) = sr.workers.iter().partition(|w| w.accepted == 1);
    assert_eq!((owner.len(), other.len()), (1, 1), "{:?}", sr.workers);
    assert_eq!(owner[0].bytes_sent, bytes);
    assert_eq!(
        (other[0].accepted, other[0].rx_datagrams),
        (0, 0),
        "{:?}",
        sr.workers
    );
    sr
}

#[test]
fn a_download_stays_on_its_worker_through_nat_rebinding_every_5_datagrams() {
    a_download_stays_on_its_worker_through_rebinding(Steering::Auto, 256 << 20);
}

#[test]
fn a_download_through_the_dispatcher_stays_on_its_worker_through_nat_rebinding() {
    let sr = a_download_stays_on_its_worker_through_rebinding(Steering::Channel, 256 << 20);
    let d = sr.dispatch.expect("the dispatcher's report");
    let other = usize::from(sr.workers[0].accepted == 1);
    assert_eq!(
        (d.datagrams[other], d.dropped[other]),
        (0, 0),
        "the dispatcher handed the other worker nothing: {d:?}"
    );
}

/// (first byte, destination connection ID) of a client datagram's first packet.
type Seen = (u8, Vec<u8>);

/// Forwards one client's datagrams to the server and back, reading the destination
/// connection ID of every client datagram as a QUIC-LB load balancer would.
struct Observer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Observer {
    fn start(server: SocketAddr, short_cid_len: usize) -> Self {
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        }
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let client = Arc::new(Mutex::new(None::<SocketAddr>));
        let (front2, back2) = (front.try_clone().unwrap(), back.try_clone().unwrap());
        let up = {
            let (stop, seen, client) = (stop.clone(), seen.clone(), client.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = front.recv_from(&mut buf) else {
                        continue;
                    };
                    *client.lock().unwrap() = Some(from);
                    let d = &buf[..n];
                    let dcid = if d[0] & 0x80 != 0 {
                        let len = usize::from(d[5]);
                        d[6..6 + len].to_vec()
                    } else {
                        d[1..1 + short_cid_len].to_vec()
                    };
                    seen.lock().unwrap().push((d[0], dcid));
                    let _ = back.send_to(d, server);
                }
            })
        };
        let down = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, _)) = back2.recv_from(&mut buf) else {
                        continue;
                    };
                    if let Some(to) = *client.lock().unwrap() {
                        let _ = front2.send_to(&buf[..n], to);
                    }
                }
            })
        };
        Self {
            addr,
            stop,
            threads: vec![up, down],
            seen,
        }
    }

    fn stop(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        std::mem::take(&mut self.seen.lock().unwrap())
    }
}

#[test]
fn every_connection_id_carries_the_quic_lb_server_id_also_after_rotation() {
    let id: ServerId = "c0ffee".parse().unwrap();
    // The first octet, the server ID, then the 8-byte nonce.
    let cid_len = 1 + 3 + 8;
    let s = server_with(2, |c| {
        c.server_id = Some(id.clone());
        c.cid_lifetime = Some(Duration::from_millis(100));
    });
    // A 400 Mbit/s bottleneck between the observer and the server: 64 MiB take at least
    // 1.3 s through it, a dozen connection ID lifetimes, on any machine (alone on a fast one,
    // 128 MiB without it took 0.35 s, and the client had followed one rotation).
    let bottleneck = Relay::start(RelayConfig::symmetric(
        "127.0.0.1:0".parse().unwrap(),
        s.addr(),
        Impairment {
            rate_mbit: Some(400.0),
            ..Impairment::default()
        },
        1,
    ))
    .expect("relay starts");
    let observer = Observer::start(bottleneck.local_addr(), cid_len);
    let mut c = client_for(&s, observer.addr, "/8388608");
    c.requests = 8;
    let result = with_deadline(
        "downloads through the observer",
        Duration::from_secs(120),
        move || client::run(c),
    );
    let seen = observer.stop();
    bottleneck.stop().expect("relay stops");
    s.stop().unwrap();
    let r = result.expect("the downloads complete");
    assert_eq!(r.bytes_received, 8 << 23);
    // The client's first Initial goes to a DCID of its own choosing (and so do its 0-RTT
    // packets and repeated Initials until the server answers); every other DCID is one the
    // server issued.
    let (first, client_chosen) = seen.first().cloned().expect("datagrams seen");
    assert!(first & 0x80 != 0, "a long header first");
    let mut issued = HashSet::new();
    let mut short = HashSet::new();
    for (b0, dcid) in &seen {
        if *dcid == client_chosen {
            assert!(b0 & 0x80 != 0, "only long headers use the client's DCID");
            continue;
        }
        assert_eq!(
            quic_lb_server_id(dcid, 3),
            Some(id.as_bytes()),
            "{dcid:02x?} carries the server ID"
        );
        assert_eq!(dcid.len(), cid_len);
        issued.insert(dcid.clone());
        if b0 & 0x80 == 0 {
            short.insert(dcid.clone());
        }
    }
    assert!(
        short.len() >= 3,
        "the server rotated its connection IDs (NEW_CONNECTION_ID, Retire Prior To) and the \
         client followed: {} seen",
        short.len()
    );
    eprintln!(
        "{} datagrams, {} server-issued connection IDs seen, {} in short headers",
        seen.len(),
        issued.len(),
        short.len()
    );
}
