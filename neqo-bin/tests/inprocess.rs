//! Client and server in one process over loopback: transfers, the I/O and pacing matrix,
//! garbage datagrams, path escapes and handshake failures.

use std::{
    net::{SocketAddr, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use neqo_bin::client::{self, ClientConfig, Save};
use neqo_driver::{CongestionControl, TransportOptions, tls::Trust};
use neqo_protocols::{ALPN_HQ, ALPN_PERF};
use neqo_server_core::{ServerConfig, ServerHandle};
use neqo_udp::IoMode;

/// The idle and handshake timeouts of both ends where a test is not about them: a loaded
/// machine never reaches them.
const LONG: Duration = Duration::from_secs(120);

/// A server on `listen` with [`LONG`] timeouts, and then `f`.
fn server_with(listen: &str, f: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let mut cfg = ServerConfig {
        listen: vec![listen.parse().unwrap()],
        ..ServerConfig::default()
    };
    cfg.transport.idle_timeout = LONG;
    cfg.limits.handshake_timeout = LONG;
    f(&mut cfg);
    ServerHandle::start(cfg).expect("server starts")
}

fn server() -> ServerHandle {
    server_with("127.0.0.1:0", |_| {})
}

fn url(addr: SocketAddr, path: &str) -> url::Url {
    url::Url::parse(&format!("https://{addr}{path}")).unwrap()
}

fn client_for(server: &ServerHandle, path: &str) -> ClientConfig {
    patient(ClientConfig::new(
        url(server.addr(), path),
        Trust::Certs(server.certificate().to_vec()),
    ))
}

/// `c` with an idle timeout of [`LONG`].
fn patient(mut c: ClientConfig) -> ClientConfig {
    c.transport.idle_timeout = LONG;
    c
}

#[test]
fn download_50mb_verified() {
    let s = server();
    let report = client::run(client_for(&s, "/52428800")).expect("download");
    assert_eq!(report.bytes_received, 52_428_800);
    assert_eq!(report.requests, 1);
    assert!(report.seconds > 0.0 && report.gbps > 0.0);
    assert!(report.rx_datagrams_per_syscall >= 1.0);
    let sr = s.stop().unwrap();
    assert_eq!(sr.bytes_sent, 52_428_800);
    assert_eq!(sr.requests, 1);
    assert!(sr.tx_datagrams_per_syscall >= 1.0);
}

#[test]
fn io_pacing_and_address_family_matrix() {
    for listen in ["127.0.0.1:0", "[::1]:0"] {
        for mode in [IoMode::Batched, IoMode::Single] {
            for pacing in [true, false] {
                let s = server_with(listen, |c| {
                    c.socket = neqo_udp::Config::default().with_mode(mode);
                    c.driver.pacing = pacing;
                });
                let mut c = client_for(&s, "/3000000");
                c.socket = neqo_udp::Config::default().with_mode(mode);
                c.driver.pacing = pacing;
                let what = format!("{listen} {mode} pacing {pacing}");
                let r = client::run(c).unwrap_or_else(|e| panic!("{what}: {e:#}"));
                assert_eq!(r.bytes_received, 3_000_000, "{what}");
                assert_eq!(r.pacing, pacing);
                if mode == IoMode::Single {
                    assert!((r.rx_datagrams_per_syscall - 1.0).abs() < 1e-9, "{what}");
                    assert!((r.tx_datagrams_per_syscall - 1.0).abs() < 1e-9, "{what}");
                }
                let sr = s.stop().unwrap();
                assert_eq!(sr.requests, 1, "{what}");
            }
        }
    }
}

#[test]
fn dual_stack_server_takes_both_families() {
    let s = server_with("[::]:0", |_| {});
    let port = s.addr().port();
    for host in ["127.0.0.1", "[::1]"] {
        let u = url::Url::parse(&format!("https://{host}:{port}/100000")).unwrap();
        let r = client::run(patient(ClientConfig::new(
            u,
            Trust::Certs(s.certificate().to_vec()),
        )))
        .unwrap();
        assert_eq!(r.bytes_received, 100_000);
    }
}

/// A host name is resolved (asynchronously): `localhost` reaches a dual-stack server whichever
/// family it resolves to first.
#[test]
fn host_names_resolve() {
    let s = server_with("[::]:0", |_| {});
    let u = url::Url::parse(&format!("https://localhost:{}/100000", s.addr().port())).unwrap();
    let r = client::run(patient(ClientConfig::new(
        u,
        Trust::Certs(s.certificate().to_vec()),
    )))
    .unwrap();
    assert_eq!(r.bytes_received, 100_000);
}

#[test]
fn thousand_parallel_one_byte_requests() {
    let s = server();
    let mut c = client_for(&s, "/1");
    c.requests = 1000;
    c.parallel = true;
    let r = client::run(c).expect("parallel requests");
    assert_eq!(r.requests, 1000);
    assert_eq!(r.bytes_received, 1000);
    assert_eq!(r.connections, 1);
    assert_eq!(s.stop().unwrap().driver.accepted, 1);
}

#[test]
fn fifty_sequential_connections() {
    let s = server();
    let mut c = client_for(&s, "/1000");
    c.connections = 50;
    c.requests = 2;
    let r = client::run(c).expect("50 connections");
    assert_eq!(r.connections, 50);
    assert_eq!(r.requests, 100);
    assert_eq!(r.bytes_received, 100_000);
    assert_eq!(s.stop().unwrap().driver.accepted, 50);
}

#[test]
fn perf_upload_20mb_and_download() {
    let s = server();
    let mut c = client_for(&s, "/");
    c.alpn = ALPN_PERF.to_owned();
    c.upload = 20_000_000;
    c.download = 1000;
    let r = client::run(c).expect("perf upload");
    assert_eq!(r.bytes_received, 1000);
    assert_eq!(r.bytes_sent, 20_000_008);
    let mut c = client_for(&s, "/");
    c.alpn = ALPN_PERF.to_owned();
    c.download = 5_000_000;
    c.requests = 3;
    c.parallel = true;
    let r = client::run(c).expect("perf download");
    assert_eq!(r.bytes_received, 15_000_000);
    let sr = s.stop().unwrap();
    assert_eq!(sr.bytes_received, 20_000_008 + 3 * 8);
    assert_eq!(sr.requests, 4);
}

#[test]
fn both_alpns_on_one_server_and_alpn_mismatch() {
    let s = server();
    let r = client::run(client_for(&s, "/10")).unwrap();
    assert_eq!(r.bytes_received, 10);
    let mut c = client_for(&s, "/");
    c.alpn = ALPN_PERF.to_owned();
    c.download = 10;
    assert_eq!(client::run(c).unwrap().bytes_received, 10);

    let hq_only = server_with("127.0.0.1:0", |c| c.alpns = vec![ALPN_HQ.to_owned()]);
    let mut c = client_for(&hq_only, "/");
    c.alpn = ALPN_PERF.to_owned();
    c.download = 10;
    let err = client::run(c).unwrap_err().to_string();
    assert!(err.contains("ALPN"), "{err}");
}

#[test]
fn untrusted_certificate_names_the_flags() {
    let s = server();
    let c = ClientConfig::new(url(s.addr(), "/10"), Trust::Nobody);
    let err = client::run(c).unwrap_err().to_string();
    assert!(err.contains("--insecure") && err.contains("--ca"), "{err}");
    let c = ClientConfig::new(url(s.addr(), "/10"), Trust::Insecure);
    assert_eq!(client::run(c).unwrap().bytes_received, 10);
}

#[test]
fn no_answer_times_out() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut c = ClientConfig::new(url(silent.local_addr().unwrap(), "/10"), Trust::Insecure);
    c.transport = TransportOptions {
        idle_timeout: Duration::from_millis(500),
        ..TransportOptions::default()
    };
    let started = Instant::now();
    let err = client::run(c).unwrap_err().to_string();
    assert!(err.contains("no answer"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn max_connections_refuses_extra_ones() {
    let s = server_with("127.0.0.1:0", |c| c.limits.max_connections = Some(0));
    let err = client::run(client_for(&s, "/10")).unwrap_err().to_string();
    assert!(err.contains("refused"), "{err}");
    assert_eq!(s.stop().unwrap().driver.refused, 1);
}

/// Garbage, empty and truncated long-header datagrams at the server during a transfer.
#[test]
fn garbage_during_transfer() {
    let s = server();
    let target = s.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let noise = std::thread::spawn(move || {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = 0u32;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop2.load(Ordering::Relaxed) && sent < 200_000 && Instant::now() < deadline {
            let i = sent;
            let datagram: Vec<u8> = match i % 5 {
                0 => vec![],
                1 => vec![0xc0, 0, 0, 0, 1, 8],
                2 => (0..1200u32)
                    .map(|k| (k.wrapping_mul(31) ^ i) as u8)
                    .collect(),
                3 => {
                    let mut d = vec![0xc3, 0, 0, 0, 1, 20];
                    d.extend((0..40u32).map(|k| (k ^ i) as u8));
                    d
                }
                _ => vec![0x40; 1 + (i as usize % 60)],
            };
            let _ = sock.send_to(&datagram, target);
            sent += 1;
            if sent.is_multiple_of(64) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        sent
    });
    let r = client::run(client_for(&s, "/20000000"));
    stop.store(true, Ordering::Relaxed);
    let sent = noise.join().unwrap();
    let r = r.expect("transfer completes despite garbage");
    assert_eq!(r.bytes_received, 20_000_000);
    assert!(sent > 0);
    // Still accepting new connections.
    let r = client::run(client_for(&s, "/1000")).expect("new connection after garbage");
    assert_eq!(r.bytes_received, 1000);
}

#[test]
fn path_escapes_are_refused_and_serving_goes_on() {
    let base = std::env::temp_dir().join(format!("neqo-bin-root-{}", std::process::id()));
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("hello.txt"), b"hello, world\n").unwrap();
    std::fs::write(base.join("secret"), b"secret").unwrap();
    std::fs::write(root.join("77"), b"a file named 77").unwrap();
    let _ = std::fs::remove_file(root.join("link"));
    // A link out of the root; Windows lets only privileged users make one, and there "/link"
    // is refused as missing instead.
    #[cfg(unix)]
    std::os::unix::fs::symlink(base.join("secret"), root.join("link")).unwrap();
    let s = server_with("127.0.0.1:0", |c| c.root = Some(root.clone()));
    for path in ["//etc/passwd", "/link", "/missing", "/%2e%2e/secret"] {
        let err = client::run(client_for(&s, path)).unwrap_err().to_string();
        assert!(err.contains("reset"), "{path}: {err}");
    }
    let out = base.join("out");
    let mut c = client_for(&s, "/hello.txt");
    c.save = Save::Dir(out.clone());
    client::run(c).expect("file inside the root");
    assert_eq!(
        std::fs::read(out.join("hello.txt")).unwrap(),
        b"hello, world\n"
    );
    // `/N` always means N generated bytes, even with a file named N under the root: saved
    // and verified against the pattern either way.
    let mut c = client_for(&s, "/77");
    c.save = Save::Dir(out.clone());
    client::run(c).expect("/77 is generated, not the file named 77");
    let generated: Vec<u8> = (0..77u8).collect();
    assert_eq!(std::fs::read(out.join("77")).unwrap(), generated);
    assert_eq!(
        client::run(client_for(&s, "/77")).unwrap().bytes_received,
        77
    );
    assert_eq!(
        client::run(client_for(&s, "/1234")).unwrap().bytes_received,
        1234
    );
    let sr = s.stop().unwrap();
    assert_eq!(sr.refused_requests, 4);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn bad_urls_are_rejected() {
    for u in [
        "http://127.0.0.1:4433/1",
        "https://no-such-host.invalid:4433/1",
    ] {
        let c = ClientConfig::new(url::Url::parse(u).unwrap(), Trust::Insecure);
        assert!(
            client::run(c).unwrap_err().to_string().contains("bad URL"),
            "{u}"
        );
    }
}

#[test]
fn port_in_use_is_an_error() {
    let s = server();
    let mut cfg = ServerConfig {
        listen: vec![s.addr()],
        ..ServerConfig::default()
    };
    cfg.socket = neqo_udp::Config::default();
    let err = ServerHandle::start(cfg).unwrap_err();
    assert!(
        matches!(&err, neqo_server_core::ServerError::Bind { addr, .. } if *addr == s.addr()),
        "{err:?}"
    );
    // The kernel's own reason, down the chain of causes.
    let mut cause = std::error::Error::source(&err);
    let mut in_use = false;
    while let Some(e) = cause {
        in_use |= e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse);
        cause = e.source();
    }
    assert!(in_use, "{err:?}");
}

#[test]
fn congestion_controllers_and_qlog() {
    let dir = std::env::temp_dir().join(format!("neqo-bin-qlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for cc in [
        CongestionControl::Newreno,
        CongestionControl::Cubic,
        CongestionControl::Bbr,
    ] {
        let transport = TransportOptions {
            cc,
            qlog_dir: Some(dir.clone()),
            idle_timeout: LONG,
            ..TransportOptions::default()
        };
        let t2 = transport.clone();
        let s = server_with("127.0.0.1:0", |c| c.transport = t2);
        let mut c = client_for(&s, "/2000000");
        c.transport = transport;
        let r = client::run(c).unwrap_or_else(|e| panic!("{cc:?}: {e:#}"));
        assert_eq!(r.bytes_received, 2_000_000);
        s.stop().unwrap();
    }
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let clients = files
        .iter()
        .filter(|p| p.to_string_lossy().contains("client-"))
        .count();
    let servers = files
        .iter()
        .filter(|p| p.to_string_lossy().contains("server-"))
        .count();
    assert_eq!((clients, servers), (3, 3), "{files:?}");
    for f in &files {
        assert!(
            std::fs::metadata(f).unwrap().len() > 0,
            "{} is empty",
            f.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// On loopback both pacing modes move 20 MB; no transmit exceeds what the socket allows, and
/// with pacing off runs grow beyond the paced limit of 10. (Paced runs grow too here, where
/// 250 us of the rate exceeds 10 datagrams: `Pacer::run_limit`. The impaired tests check that
/// paced runs stay within 10 on a 100 Mbit/s path.) At Ethernet's datagram size
/// (`--max-mtu 1452`): loopback's default 8972 bytes fit 7 to a 64 KiB send.
#[test]
fn pacing_switch_bounds_bursts() {
    let probe = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        neqo_udp::Socket::bind("127.0.0.1:0".parse().unwrap(), neqo_udp::Config::default())
            .unwrap()
            .max_segments_for(1200)
    };
    for pacing in [true, false] {
        let s = server_with("127.0.0.1:0", |c| {
            c.driver.pacing = pacing;
            c.transport.max_mtu = Some(1452);
        });
        let mut c = client_for(&s, "/20000000");
        c.driver.pacing = pacing;
        c.transport.max_mtu = Some(1452);
        client::run(c).unwrap();
        let d = s.stop().unwrap().driver;
        let burst = neqo_driver::BURST_DATAGRAMS as u64;
        assert!(d.max_transmit_datagrams <= probe as u64, "{d:?}");
        if !pacing && probe > neqo_driver::BURST_DATAGRAMS {
            assert!(d.max_transmit_datagrams > burst, "{d:?}");
        }
    }
}

#[test]
fn several_listen_addresses() {
    let s = server_with("127.0.0.1:0", |c| c.listen.push("[::1]:0".parse().unwrap()));
    assert_eq!(s.addrs().len(), 2);
    for addr in s.addrs().to_vec() {
        let c = patient(ClientConfig::new(
            url(addr, "/500000"),
            Trust::Certs(s.certificate().to_vec()),
        ));
        assert_eq!(client::run(c).unwrap().bytes_received, 500_000, "{addr}");
    }
    assert_eq!(s.stop().unwrap().driver.accepted, 2);
}
