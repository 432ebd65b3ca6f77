//! The impairment relay on loopback, at the UDP level: an echo server behind it, clients in
//! front. Every wait is bounded; the fixed seeds make every count deterministic.

use std::{
    collections::HashSet,
    net::SocketAddr,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use neqo_relay::{Impairment, Rebind, RebindEvery, Relay, RelayConfig, RelayStats};
use neqo_udp::{Config, Socket, Transmit};
use test_fixtures::run;

const DEADLINE: Duration = Duration::from_secs(20);

/// An echo server on its own thread; stops when dropped.
struct Echo {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Echo {
    fn start(ip: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let ip: std::net::IpAddr = ip.parse().unwrap();
        let s = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let sock = Socket::bind(SocketAddr::new(ip, 0), Config::default()).unwrap();
                tx.send(sock.local_addr().unwrap()).unwrap();
                let mut batch = sock.recv_batch();
                let end = Instant::now() + Duration::from_secs(120);
                while !s.load(Ordering::Relaxed) && Instant::now() < end {
                    let Ok(Ok(_)) = tokio::time::timeout(
                        Duration::from_millis(50),
                        sock.recv_async(&mut batch),
                    )
                    .await
                    else {
                        continue;
                    };
                    let got: Vec<_> = batch.datagrams().collect();
                    let ts: Vec<Transmit<&[u8]>> = got
                        .iter()
                        .map(|d| Transmit::new(d.source, &d.data[..]))
                        .collect();
                    sock.send_all(&ts).await.unwrap();
                }
            });
        });
        Self {
            addr: rx.recv().unwrap(),
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn payload(seq: u16, len: usize) -> Vec<u8> {
    let mut v = seq.to_be_bytes().to_vec();
    v.extend((0..len.saturating_sub(2)).map(|i| (i as u16 ^ seq) as u8));
    v
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Sends `n` datagrams through the relay from one client, one at a time in order, and
/// collects the echoes until the relay has nothing left in flight.
fn exchange(relay: &Relay, ip: &str, n: u16, len: usize) -> Vec<Vec<u8>> {
    runtime().block_on(async {
        let client = Socket::bind(
            format!("{ip}:0")
                .replace("::1:0", "[::1]:0")
                .parse()
                .unwrap(),
            Config::default(),
        )
        .unwrap();
        let bodies: Vec<Vec<u8>> = (0..n).map(|i| payload(i, len)).collect();
        for chunk in bodies.chunks(16) {
            let ts: Vec<Transmit<&[u8]>> = chunk
                .iter()
                .map(|b| Transmit::new(relay.local_addr(), &b[..]))
                .collect();
            client.send_all(&ts).await.unwrap();
        }
        let mut got = Vec::new();
        let mut batch = client.recv_batch();
        let end = Instant::now() + DEADLINE;
        loop {
            let s = relay.stats();
            let settled = s.to_server.received == u64::from(n)
                && s.to_server.queued == 0
                && s.to_client.queued == 0
                && s.to_client.received == s.to_server.forwarded
                && got.len() as u64 == s.to_client.forwarded;
            if settled {
                break;
            }
            assert!(
                Instant::now() < end,
                "relay did not settle: {s:?}, {} echoes",
                got.len()
            );
            if let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_millis(20), client.recv_async(&mut batch)).await
            {
                got.extend(batch.datagrams().map(|d| d.data.to_vec()));
            }
        }
        got
    })
}

#[test]
fn passes_everything_through_both_ways_v4_and_v6() {
    for ip in ["127.0.0.1", "::1"] {
        let echo = Echo::start(ip);
        let listen: SocketAddr = if ip == "::1" {
            "[::1]:0".parse().unwrap()
        } else {
            "127.0.0.1:0".parse().unwrap()
        };
        let relay = Relay::start(RelayConfig::symmetric(
            listen,
            echo.addr,
            Impairment::default(),
            1,
        ))
        .unwrap();
        let got = exchange(&relay, ip, 500, 1200);
        let expected: Vec<Vec<u8>> = (0..500).map(|i| payload(i, 1200)).collect();
        assert_eq!(got, expected, "{ip}: every datagram, intact, in order");
        let stats = relay.stop().unwrap();
        assert_eq!(stats.to_server.forwarded, 500);
        assert_eq!(stats.to_client.forwarded, 500);
        assert_eq!(stats.sessions_total, 1);
    }
}

#[test]
fn each_client_gets_its_own_upstream_socket() {
    let echo = Echo::start("127.0.0.1");
    let relay = Relay::start(RelayConfig::symmetric(
        "127.0.0.1:0".parse().unwrap(),
        echo.addr,
        Impairment::default(),
        1,
    ))
    .unwrap();
    runtime().block_on(async {
        let clients: Vec<Socket> = (0..3)
            .map(|_| Socket::bind("127.0.0.1:0".parse().unwrap(), Config::default()).unwrap())
            .collect();
        for (i, c) in clients.iter().enumerate() {
            let body = [i as u8; 100];
            c.send_all(&[Transmit::new(relay.local_addr(), &body[..])])
                .await
                .unwrap();
        }
        for (i, c) in clients.iter().enumerate() {
            let mut batch = c.recv_batch();
            tokio::time::timeout(DEADLINE, c.recv_async(&mut batch))
                .await
                .unwrap()
                .unwrap();
            let d = batch.datagrams().next().unwrap();
            assert_eq!(
                &d.data[..],
                &vec![i as u8; 100][..],
                "client {i} gets its own echo"
            );
        }
    });
    assert_eq!(relay.stats().sessions, 3);
}

fn lossy_run(seed: u64) -> (HashSet<u16>, RelayStats) {
    let echo = Echo::start("127.0.0.1");
    let imp = Impairment {
        loss: 0.2,
        ..Impairment::default()
    };
    let relay = Relay::start(RelayConfig::symmetric(
        "127.0.0.1:0".parse().unwrap(),
        echo.addr,
        imp,
        seed,
    ))
    .unwrap();
    let got = exchange(&relay, "127.0.0.1", 1000, 200);
    let stats = relay.stop().unwrap();
    (
        got.iter()
            .map(|d| u16::from_be_bytes([d[0], d[1]]))
            .collect(),
        stats,
    )
}

#[test]
fn loss_is_counted_and_replays_with_the_seed() {
    let (a, sa) = lossy_run(42);
    let (b, _) = lossy_run(42);
    let (c, _) = lossy_run(43);
    assert_eq!(a, b, "the same seed loses the same datagrams");
    assert_ne!(a, c);
    assert_eq!(sa.to_server.forwarded, 1000 - sa.to_server.lost);
    assert_eq!(
        sa.to_client.forwarded,
        sa.to_client.received - sa.to_client.lost
    );
    assert_eq!(a.len() as u64, sa.to_client.forwarded);
    // 20 % each way: about 64 % survive; fixed seed, so deterministic.
    assert!((550..730).contains(&a.len()), "{}", a.len());
}

#[test]
fn corruption_flips_one_bit_per_datagram() {
    let echo = Echo::start("127.0.0.1");
    let mut config = RelayConfig::symmetric(
        "127.0.0.1:0".parse().unwrap(),
        echo.addr,
        Impairment::default(),
        5,
    );
    config.to_server.corrupt = 1.0;
    let relay = Relay::start(config).unwrap();
    let got = exchange(&relay, "127.0.0.1", 200, 300);
    assert_eq!(got.len(), 200);
    for d in &got {
        // The sequence number may be the flipped bit: find the original by Hamming distance.
        let best = (0..200u16)
            .map(|i| {
                payload(i, 300)
                    .iter()
                    .zip(d)
                    .map(|(a, b)| (a ^ b).count_ones())
                    .sum::<u32>()
            })
            .min()
            .unwrap();
        assert_eq!(best, 1);
    }
    assert_eq!(relay.stop().unwrap().to_server.corrupted, 200);
}

#[test]
fn duplication_reordering_and_delay_lose_nothing() {
    let echo = Echo::start("127.0.0.1");
    let imp = Impairment {
        delay: Duration::from_millis(2),
        jitter: Duration::from_millis(1),
        duplicate: 0.05,
        reorder: 0.1,
        rate_mbit: Some(200.0),
        ..Impairment::default()
    };
    let relay = Relay::start(RelayConfig::symmetric(
        "127.0.0.1:0".parse().unwrap(),
        echo.addr,
        imp,
        9,
    ))
    .unwrap();
    let got = exchange(&relay, "127.0.0.1", 400, 1000);
    let stats = relay.stop().unwrap();
    let seqs: HashSet<u16> = got
        .iter()
        .map(|d| u16::from_be_bytes([d[0], d[1]]))
        .collect();
    assert_eq!(seqs.len(), 400, "every datagram arrives");
    assert!(stats.to_server.duplicated + stats.to_client.duplicated > 0);
    assert_eq!(
        got.len() as u64,
        stats.to_client.forwarded,
        "every echo the relay forwarded arrived"
    );
    assert_eq!(
        stats.to_client.forwarded,
        400 + stats.to_server.duplicated + stats.to_client.duplicated
    );
    assert_eq!(stats.to_server.queue_drops + stats.to_client.queue_drops, 0);
}

#[test]
fn bad_impairments_and_busy_ports_are_refused() {
    let echo = Echo::start("127.0.0.1");
    let imp = Impairment {
        loss: 2.0,
        ..Impairment::default()
    };
    let err = Relay::start(RelayConfig::symmetric(
        "127.0.0.1:0".parse().unwrap(),
        echo.addr,
        imp,
        1,
    ))
    .unwrap_err();
    assert!(err.to_string().contains("loss"), "{err}");
    let relay = Relay::start(RelayConfig::symmetric(
        "127.0.0.1:0".parse().unwrap(),
        echo.addr,
        Impairment::default(),
        1,
    ))
    .unwrap();
    let err = Relay::start(RelayConfig::symmetric(
        relay.local_addr(),
        echo.addr,
        Impairment::default(),
        1,
    ))
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
}

#[test]
fn cli_rejects_bad_arguments() {
    let exe = env!("CARGO_BIN_EXE_neqo-relay");
    for args in [
        vec!["--listen", "127.0.0.1:0"],
        vec!["--listen", "nonsense", "--upstream", "127.0.0.1:1"],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:1",
            "--loss",
            "150%",
        ],
        vec![
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:1",
            "--rate",
            "-3",
        ],
    ]
    .into_iter()
    .chain(
        [
            &["--rebind-after", "0"][..],
            &["--rebind-every", "0"],
            &["--rebind-every", "100", "--rebind-after", "4"],
            &["--rebind-addr"],
            &["--rebind-limit", "1"],
            &["--rebind-after", "4", "--rebind-limit", "0"],
        ]
        .map(|rebind| {
            let mut args = vec!["--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:1"];
            args.extend(rebind);
            args
        }),
    ) {
        let out = run(Command::new(exe).args(&args), DEADLINE).unwrap();
        assert!(!out.success() && !out.killed, "{args:?} accepted");
        assert!(!out.stderr.is_empty(), "{args:?}: says why");
    }
}

/// The binary says where it listens, relays a datagram both ways, and on SIGTERM exits
/// cleanly with its counts.
#[cfg(unix)]
#[test]
fn cli_relays_and_stops_on_sigterm() {
    let echo = Echo::start("127.0.0.1");
    let relay = test_fixtures::Server::start(
        Command::new(env!("CARGO_BIN_EXE_neqo-relay")).args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &echo.addr.to_string(),
        ]),
        DEADLINE,
    )
    .unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(DEADLINE)).unwrap();
    sock.send_to(b"ping", relay.addr()).unwrap();
    let mut buf = [0; 16];
    let (n, from) = sock.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"ping"[..], relay.addr()));
    let out = relay.stop().unwrap();
    assert!(
        out.success() && !out.killed,
        "{}: {}",
        out.ending(),
        out.stderr
    );
    assert!(
        out.stdout.contains("| client -> server | 1 | 1 |"),
        "{}",
        out.stdout
    );
}

/// A datagram from a blocking client socket through the relay every 10 ms, until `done`
/// says so (given the datagrams echoed so far, by sequence number) or 2000 have gone.
fn ping_until(relay: &Relay, done: impl Fn(&[u16]) -> bool) -> Vec<u16> {
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let mut echoed = Vec::new();
    let mut buf = [0u8; 64];
    for seq in 0..2000u16 {
        client
            .send_to(&payload(seq, 32), relay.local_addr())
            .unwrap();
        while let Ok((n, _)) = client.recv_from(&mut buf) {
            assert!(n >= 2);
            echoed.push(u16::from_be_bytes([buf[0], buf[1]]));
        }
        if done(&echoed) {
            break;
        }
    }
    echoed
}

/// The blackhole is a window of the relay's own clock (from 500 ms after the first client
/// datagram, for 500 ms; each long against a loopback echo's round trip on a loaded
/// machine): datagrams sent every 10 ms are echoed before it, swallowed in it and echoed
/// after it, each accounted for.
#[test]
fn a_blackhole_swallows_both_ways_then_lets_through() {
    let echo = Echo::start("127.0.0.1");
    let relay = Relay::start(RelayConfig {
        blackhole: Some((Duration::from_millis(500), Duration::from_millis(500))),
        ..RelayConfig::symmetric(
            "127.0.0.1:0".parse().unwrap(),
            echo.addr,
            Impairment::default(),
            1,
        )
    })
    .unwrap();
    // Until echoes have stopped (a gap in the sequence) and come back for 5 datagrams.
    let echoed = ping_until(&relay, |e| {
        let gap = e.windows(2).position(|w| w[1] > w[0] + 1);
        gap.is_some_and(|g| e.len() >= g + 6)
    });
    let stats = relay.stop().unwrap();
    let gap = echoed
        .windows(2)
        .position(|w| w[1] > w[0] + 1)
        .expect("a gap in the echoes");
    assert_eq!(echoed[0], 0, "the first datagrams pass: {echoed:?}");
    assert!(
        echoed.len() >= gap + 6,
        "echoes resume after the gap: {echoed:?}"
    );
    // Every datagram sent is echoed, swallowed on its way or its echo swallowed.
    let missing = u64::from(echoed[echoed.len() - 1]) + 1 - echoed.len() as u64;
    assert!(stats.blackholed >= missing, "{stats:?}, {missing} missing");
    assert_eq!(stats.to_server.lost + stats.to_client.lost, 0);
}

/// A plain UDP server (reads time out after `wait`), a relay in front of it rebinding as
/// `rebind` says, and a client socket.
fn rebinding(rebind: Rebind, wait: Duration) -> (std::net::UdpSocket, Relay, std::net::UdpSocket) {
    let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    server.set_read_timeout(Some(wait)).unwrap();
    let relay = Relay::start(RelayConfig {
        rebind: Some(rebind),
        ..RelayConfig::symmetric(
            "127.0.0.1:0".parse().unwrap(),
            server.local_addr().unwrap(),
            Impairment::default(),
            1,
        )
    })
    .unwrap();
    let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    (server, relay, client)
}

/// Where the datagrams a plain UDP server receives come from, until `count` differ (or
/// 2000 datagrams), through a relay rebinding as `rebind` says.
fn sources_through_rebinding(rebind: Rebind, count: usize) -> (Vec<SocketAddr>, RelayStats) {
    let (server, relay, client) = rebinding(rebind, Duration::from_millis(10));
    let mut sources: Vec<SocketAddr> = Vec::new();
    let mut buf = [0u8; 64];
    for seq in 0..2000u16 {
        client
            .send_to(&payload(seq, 32), relay.local_addr())
            .unwrap();
        while let Ok((_, from)) = server.recv_from(&mut buf) {
            if !sources.contains(&from) {
                sources.push(from);
            }
        }
        if sources.len() >= count {
            break;
        }
    }
    (sources, relay.stop().unwrap())
}

#[test]
fn rebinding_gives_the_client_new_ports() {
    let rebind = Rebind {
        every: RebindEvery::Interval(Duration::from_millis(50)),
        addr: false,
        limit: None,
    };
    let (sources, stats) = sources_through_rebinding(rebind, 3);
    assert_eq!(sources.len(), 3, "{sources:?}");
    assert!(
        sources.iter().all(|s| s.ip() == sources[0].ip()),
        "{sources:?}"
    );
    assert!(stats.rebinds >= 2, "{stats:?}");
}

#[test]
fn address_rebinding_gives_the_client_new_addresses() {
    let rebind = Rebind {
        every: RebindEvery::Interval(Duration::from_millis(50)),
        addr: true,
        limit: None,
    };
    let (sources, stats) = sources_through_rebinding(rebind, 3);
    assert_eq!(sources.len(), 3, "{sources:?}");
    let ips: HashSet<_> = sources.iter().map(SocketAddr::ip).collect();
    assert_eq!(ips.len(), 3, "{sources:?}");
    assert!(stats.rebinds >= 2, "{stats:?}");
}

/// The source of each of `datagrams`, sent one at a time through a relay rebinding as
/// `rebind` says, as a plain UDP server saw it.
fn source_of_each(rebind: Rebind, datagrams: &[Vec<u8>]) -> (Vec<SocketAddr>, RelayStats) {
    let (server, relay, client) = rebinding(rebind, Duration::from_secs(10));
    let mut buf = [0u8; 64];
    let sources = datagrams
        .iter()
        .map(|d| {
            client.send_to(d, relay.local_addr()).unwrap();
            let (len, from) = server.recv_from(&mut buf).expect("the relay forwards it");
            assert_eq!(&buf[..len], &d[..]);
            from
        })
        .collect();
    (sources, relay.stop().unwrap())
}

/// Rebinding by count: a long-header datagram, then 12 short-header ones, at every 4th
/// short header a new source, from that datagram on.
fn rebinding_after_datagrams(addr: bool) -> Vec<SocketAddr> {
    let mut datagrams = vec![{
        let mut long = payload(0, 32);
        long[0] = 0xc0;
        long
    }];
    datagrams.extend((1..=12).map(|seq| payload(seq, 32)));
    let rebind = Rebind {
        every: RebindEvery::Datagrams(4),
        addr,
        limit: None,
    };
    let (sources, stats) = source_of_each(rebind, &datagrams);
    assert_eq!(stats.rebinds, 3, "{stats:?}");
    let mut distinct: Vec<SocketAddr> = Vec::new();
    for s in &sources {
        if distinct.last() != Some(s) {
            distinct.push(*s);
        }
    }
    assert_eq!(distinct.len(), 4, "{sources:?}");
    let expect: Vec<SocketAddr> = [4, 4, 4, 1]
        .iter()
        .zip(&distinct)
        .flat_map(|(&n, &s)| std::iter::repeat_n(s, n))
        .collect();
    assert_eq!(sources, expect, "a new source at short headers 4, 8 and 12");
    distinct
}

/// A rebinding at every datagram, 400 times on one address: 400 different ports. The kernel
/// hands a closed socket's port out again (without the relay's check this failed three runs
/// in three), and a 4-tuple met again is one a middlebox may still route where it went before
/// (docs/guides/fleet.md).
#[test]
fn a_rebinding_never_reuses_an_address_and_port() {
    let datagrams: Vec<Vec<u8>> = (1..=400).map(|seq| payload(seq, 32)).collect();
    let rebind = Rebind {
        every: RebindEvery::Datagrams(1),
        addr: false,
        limit: None,
    };
    let (sources, stats) = source_of_each(rebind, &datagrams);
    assert_eq!(stats.rebinds, 400, "{stats:?}");
    let distinct: HashSet<_> = sources.iter().collect();
    assert_eq!(distinct.len(), sources.len(), "a source seen twice");
}

/// With a limit of one, the client is rebound at its 4th short header and not again.
#[test]
fn a_rebinding_limit_stops_the_count() {
    let datagrams: Vec<Vec<u8>> = (1..=12).map(|seq| payload(seq, 32)).collect();
    let rebind = Rebind {
        every: RebindEvery::Datagrams(4),
        addr: false,
        limit: Some(1),
    };
    let (sources, stats) = source_of_each(rebind, &datagrams);
    assert_eq!(stats.rebinds, 1, "{stats:?}");
    assert_eq!(sources[..3], [sources[0]; 3]);
    assert_eq!(sources[3..], [sources[3]; 9]);
    assert_ne!(sources[0], sources[3]);
}

#[test]
fn rebinding_by_count_gives_a_new_port_at_every_nth_short_header() {
    let distinct = rebinding_after_datagrams(false);
    assert!(
        distinct.iter().all(|s| s.ip() == distinct[0].ip()),
        "{distinct:?}"
    );
}

#[test]
fn address_rebinding_by_count_gives_a_new_address_at_every_nth_short_header() {
    let distinct = rebinding_after_datagrams(true);
    let ips: HashSet<_> = distinct.iter().map(SocketAddr::ip).collect();
    assert_eq!(ips.len(), 4, "{distinct:?}");
}

#[test]
fn the_amplification_window_lets_one_client_datagram_through_and_counts_the_answers() {
    let echo = Echo::start("127.0.0.1");
    let relay = Relay::start(RelayConfig {
        amplification_window: Some(Duration::from_secs(30)),
        ..RelayConfig::symmetric(
            "127.0.0.1:0".parse().unwrap(),
            echo.addr,
            Impairment::default(),
            1,
        )
    })
    .unwrap();
    // Until the first datagram's echo is back and nine more have been held back.
    let echoed = ping_until(&relay, |e| !e.is_empty() && relay.stats().blackholed >= 9);
    let stats = relay.stop().unwrap();
    assert_eq!(echoed, [0], "only the first datagram passes");
    assert_eq!(stats.window_client_bytes, 32);
    assert_eq!(stats.window_server_bytes, 32);
    assert!(stats.blackholed >= 9, "{stats:?}");
}
