//! Three `neqo-server`s behind one address, routed by nftables as `docs/guides/fleet.nft` says (the
//! QUIC-LB server ID of short-header and Handshake packets; the 4-tuple's hash for the
//! rest), in a network namespace the test makes, on its loopback: the servers on
//! 127.0.1.1 to .3, the address clients use 127.0.2.1. Clients download through a relay that
//! gives each a new address and port at every 4th of its short-header datagrams, and every
//! byte arrives (a packet routed
//! to another server would get a stateless reset); a server restarted with its `--key-file`
//! resets its old clients at once; a server taken out of the hash keeps its connections and
//! gets no new ones. Needs root and `nft`; skipped otherwise.
#![cfg(target_os = "linux")]

#[path = "support/raw_client.rs"]
mod raw_client;

mod common;

use std::{
    io::Write as _,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use neqo_bin::client::{self, ClientConfig};
use neqo_driver::{
    TransportOptions,
    tls::{self, Trust},
};
use neqo_protocols::ALPN_HQ;
use neqo_relay::{Impairment, Rebind, RebindEvery, Relay, RelayConfig};
use quinn_proto::{ConnectionError, Event};
use raw_client::RawClient;
use test_fixtures::{
    Server,
    netns::{Netns, is_root},
};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
/// A hang guard, not a speed bound.
const DEADLINE: Duration = Duration::from_secs(60);
/// The idle timeout of the servers and every client, in seconds: the hand-driven clients sit
/// idle across steps (a restart, a ruleset reload) that a loaded machine stretches.
const IDLE: u64 = 300;
const PORT: u16 = 4433;
const VIP: Ipv4Addr = Ipv4Addr::new(127, 0, 2, 1);
const RULESET: &str = include_str!("../../docs/guides/fleet.nft");

fn server_ip(id: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, id)
}

/// `docs/guides/fleet.nft` for this namespace: its addresses ours, its hook `output` (the clients
/// are local), and new connections hashed over `hashed` (server IDs) only.
fn ruleset(hashed: &[u8]) -> String {
    let mut r = RULESET
        .replace("203.0.113.10", &VIP.to_string())
        .replace("udp dport 443", &format!("udp dport {PORT}"))
        .replace("hook prerouting", "hook output");
    for id in 1..=3 {
        r = r.replace(&format!("10.0.0.{id}"), &server_ip(id).to_string());
    }
    let map: Vec<String> = hashed
        .iter()
        .enumerate()
        .map(|(i, &id)| format!("{i} : {}", server_ip(id)))
        .collect();
    let hash = r
        .lines()
        .find(|l| l.contains("jhash"))
        .expect("the hash rule")
        .to_owned();
    let ours = format!(
        "\t\tdnat to jhash ip saddr . udp sport . ip daddr . udp dport mod {} map {{ {} }}",
        hashed.len(),
        map.join(", ")
    );
    r.replace(&hash, &ours)
}

fn load(ns: &Netns, rules: &str) {
    let mut nft = ns
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft runs");
    nft.stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    let out = nft.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn has_nft() -> bool {
    Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

struct Fleet {
    ns: Netns,
    dir: PathBuf,
    servers: Vec<Option<Server>>,
}

impl Fleet {
    fn start() -> Self {
        let ns = Netns::create("neqo-fleet").unwrap();
        load(&ns, &ruleset(&[1, 2, 3]));
        let dir = std::env::temp_dir().join(format!("neqo-fleet-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut fleet = Self {
            ns,
            dir,
            servers: Vec::new(),
        };
        for id in 1..=3 {
            let s = fleet.server(id);
            fleet.servers.push(Some(s));
        }
        fleet
    }

    /// Server `id` (1 to 3): its own address and server ID, and the fleet's key file. One
    /// key for all: any server recognises the others' connection IDs, so a packet routed to
    /// the wrong one is answered with a stateless reset (and the test fails), and a client of
    /// a server that is gone is reset by whichever server its packets reach.
    fn server(&self, id: u8) -> Server {
        let key = self.dir.join("key");
        Server::start(
            self.ns.command(SERVER).args([
                "--listen",
                &SocketAddr::new(server_ip(id).into(), PORT).to_string(),
                "--server-id",
                &format!("{id:02x}"),
                "--key-file",
                key.to_str().unwrap(),
                "--workers",
                "1",
                "--idle-timeout",
                &IDLE.to_string(),
                "--handshake-timeout",
                "120",
            ]),
            DEADLINE,
        )
        .unwrap_or_else(|e| panic!("server {id} did not start: {e}"))
    }

    fn path(&self) -> PathBuf {
        self.ns.path()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `f` on a thread inside the namespace at `path` (so are the threads it starts).
fn inside<T: Send + 'static>(path: &Path, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = path.to_owned();
    common::with_deadline("a step in the namespace", DEADLINE, move || {
        test_fixtures::netns::enter(&path).unwrap();
        f()
    })
}

fn vip() -> SocketAddr {
    SocketAddr::new(VIP.into(), PORT)
}

/// A hand-driven client from its own port on 127.0.0.1, connected through the balancer;
/// and the server ID its connection ID carries (the server it reached).
fn connect() -> (RawClient, u8) {
    let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ).unwrap();
    let mut config = quinn_proto::ClientConfig::new(crypto);
    config.transport_config(Arc::new(
        TransportOptions {
            idle_timeout: Duration::from_secs(IDLE),
            ..TransportOptions::default()
        }
        .transport("fleet")
        .unwrap(),
    ));
    let c = RawClient::connect(vip(), IpAddr::V4(Ipv4Addr::LOCALHOST), config)
        .expect("handshake through the balancer");
    // The first octet (QUIC-LB's config rotation and length), then the server ID.
    let id = c.server_cid[1];
    (c, id)
}

/// Sends a PING and reads (bounded) until the server acknowledges something new: `Ok`, or
/// `Err` with the end of the connection if it ends first.
fn ping(c: &mut RawClient) -> Result<(), ConnectionError> {
    let acks = c.conn.stats().frame_rx.acks;
    c.conn.ping();
    let limit = Instant::now() + DEADLINE;
    loop {
        assert!(Instant::now() < limit, "no answer to a PING");
        let now = Instant::now();
        c.flush(now, true);
        c.receive(now);
        if c.conn.poll_timeout().is_some_and(|t| t <= now) {
            c.conn.handle_timeout(now);
        }
        while let Some(e) = c.conn.poll() {
            if let Event::ConnectionLost { reason } = e {
                return Err(reason);
            }
        }
        if c.conn.stats().frame_rx.acks > acks {
            return Ok(());
        }
    }
}

#[test]
fn a_fleet_routes_by_server_id_through_rebinding_restarts_and_drains() {
    if !is_root() || !has_nft() {
        eprintln!("skipped: needs root and nft");
        return;
    }
    let mut fleet = Fleet::start();

    // 12 clients, each from its own port through the relay, which gives each a new address
    // and port at every 4th of its short-header datagrams; 3 downloads of 1 MB each,
    // verified byte by byte. Each client sends more than 4: its requests after the first
    // and an ACK per round of the server's slow start (1 MB is dozens of initial windows),
    // so every one of them is rebound, however fast the machine.
    let (report, relay) = inside(&fleet.path(), || {
        let mut relay = RelayConfig::symmetric(
            "127.0.0.1:0".parse().unwrap(),
            vip(),
            Impairment::default(),
            1,
        );
        relay.rebind = Some(Rebind {
            every: RebindEvery::Datagrams(4),
            addr: true,
            limit: None,
        });
        let relay = Relay::start(relay).unwrap();
        let mut c = ClientConfig::new(common::url(relay.local_addr(), "/1000000"), Trust::Insecure);
        c.requests = 3;
        c.transport.idle_timeout = Duration::from_secs(IDLE);
        c.connections = 12;
        c.concurrency = 12;
        c.sockets = 12;
        let report = client::run(c);
        (report, relay.stop().unwrap())
    });
    let report = report.expect("every download through the rebinding relay");
    assert_eq!(
        (
            report.requests,
            report.failed_requests,
            report.bytes_received
        ),
        (36, 0, 36_000_000)
    );
    assert!(relay.rebinds >= 12, "every client rebound: {relay:?}");
    println!(
        "fleet: {} requests through {} rebinds, byte-exact",
        report.requests, relay.rebinds
    );

    // A connection per server at least: hand-driven clients until each server has one.
    let mut by_server: [Vec<RawClient>; 3] = Default::default();
    let held = inside(&fleet.path(), || {
        let mut held: [Vec<RawClient>; 3] = Default::default();
        for _ in 0..60 {
            if held.iter().all(|h| !h.is_empty()) {
                break;
            }
            let (c, id) = connect();
            assert!((1..=3).contains(&id), "server ID {id}");
            held[usize::from(id) - 1].push(c);
        }
        held
    });
    for (i, h) in held.into_iter().enumerate() {
        assert!(!h.is_empty(), "no connection reached server {}", i + 1);
        by_server[i] = h;
    }

    // Server 2 out of the hash: its connection lives on, new ones go to 1 and 3.
    load(&fleet.ns, &ruleset(&[1, 3]));
    let mut on_two = by_server[1].pop().unwrap();
    let (on_two, new_ids) = inside(&fleet.path(), move || {
        let alive = ping(&mut on_two);
        let ids: Vec<u8> = (0..20).map(|_| connect().1).collect();
        (alive.map(|()| on_two), ids)
    });
    let on_two = on_two.expect("the drained server's connection lives on");
    assert!(
        new_ids.iter().all(|&id| id != 2),
        "new connections reached the drained server: {new_ids:?}"
    );

    // Server 1 crashes and comes back with its key file: its old client is reset at once
    // (a reset it recognises: the same key signs it), rather than waiting out its idle
    // timeout.
    drop(fleet.servers[0].take());
    fleet.servers[0] = Some(fleet.server(1));
    let mut on_one = by_server[0].pop().unwrap();
    let end = inside(&fleet.path(), move || ping(&mut on_one).err());
    assert!(
        matches!(end, Some(ConnectionError::Reset)),
        "server 1's old client: {end:?}"
    );
    drop(on_two);
}
