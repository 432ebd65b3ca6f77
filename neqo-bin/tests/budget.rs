//! Data held behind a gap: a client that never sends the first byte of its streams makes the
//! server buffer everything after it, up to the connection's receive window (QUIC flow
//! control). The server's receive budget bounds the sum of those windows, so 20 such
//! connections together hold no more than the budget.
//!
//! The gap client drives quinn-proto itself over a plain socket: after the handshake it drops
//! the datagrams carrying each stream's first byte, then sends as much as flow control lets
//! it, never reading the server's packets and never running its timers, so it neither learns
//! of the loss nor retransmits. What its streams accepted is what the server was willing to
//! buffer.

#[path = "support/raw_client.rs"]
mod raw_client;

use std::{
    net::{IpAddr, Ipv4Addr},
    sync::Arc,
    time::{Duration, Instant},
};

use neqo_driver::{
    TransportOptions,
    tls::{self, Trust},
};
use neqo_protocols::ALPN_HQ;
use neqo_server_core::{Budget, Limits, MAX_WINDOW, MIN_WINDOW, ServerConfig, ServerHandle};
use quinn_proto::{ClientConfig, ConnectionError, Dir, congestion::CubicConfig};
use raw_client::RawClient;

/// Streams each gap client uses: enough that their stream windows (16 MiB each at most)
/// never limit it before the connection window does.
const STREAMS: usize = 8;

/// The idle and handshake timeouts of both ends: a gap connection goes silent once it has
/// filled its window, and must stay open (its window counted) until the test ends, however
/// slowly the machine gets through the rest.
const IDLE: Duration = Duration::from_secs(300);

/// A client that leaves a gap at the start of each stream and fills the rest.
struct GapClient(RawClient);

impl GapClient {
    /// Connects to `server` from loopback address `127.0.host.1`, each its own source, in a
    /// /24 of its own, to the server's fair shares.
    ///
    /// # Errors
    /// The connection's end, if the server refuses it.
    fn connect(server: &ServerHandle, host: u8) -> Result<Self, ConnectionError> {
        let crypto =
            tls::client_crypto(&Trust::Certs(server.certificate().to_vec()), ALPN_HQ).unwrap();
        let mut transport = TransportOptions {
            idle_timeout: IDLE,
            ..TransportOptions::default()
        }
        .transport("gap")
        .unwrap();
        // Nothing but flow control may hold the sender back: no congestion window to speak of,
        // and room to keep everything unacknowledged.
        let mut cubic = CubicConfig::default();
        cubic.initial_window(1 << 40);
        transport.congestion_controller_factory(Arc::new(cubic));
        transport.send_window(1 << 40);
        let mut config = ClientConfig::new(crypto);
        config.transport_config(Arc::new(transport));
        let local = IpAddr::V4(Ipv4Addr::new(127, 0, host, 1));
        RawClient::connect(server.addr(), local, config).map(Self)
    }

    /// Leaves a one-byte gap at the start of [`STREAMS`] streams and fills them behind it as
    /// far as flow control allows; returns the bytes the streams took, all now sent.
    fn hold(&mut self) -> u64 {
        let mut now = Instant::now();
        let ids: Vec<_> = (0..STREAMS)
            .map(|_| {
                let id = self.0.conn.streams().open(Dir::Bi).expect("stream credit");
                self.0.conn.send_stream(id).write(b"G").unwrap();
                id
            })
            .collect();
        // The datagrams carrying every stream's first byte never leave.
        self.0.flush(now, false);
        let chunk = vec![0x55u8; 1 << 20];
        let mut taken = STREAMS as u64;
        for id in ids {
            while let Ok(n) = self.0.conn.send_stream(id).write(&chunk) {
                taken += n as u64;
            }
        }
        // quinn-proto's own pacer wants time to pass; its timers never run, so nothing is
        // retransmitted and the gaps stay open.
        let mut idle_rounds = 0;
        while idle_rounds < 100 {
            if self.0.flush(now, true) {
                idle_rounds = 0;
            } else {
                idle_rounds += 1;
            }
            now += Duration::from_millis(1);
        }
        taken
    }
}

fn server(budget: Budget) -> ServerHandle {
    ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        budget,
        transport: TransportOptions {
            idle_timeout: IDLE,
            ..TransportOptions::default()
        },
        limits: Limits {
            handshake_timeout: IDLE,
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .expect("server starts")
}

/// The gap client reaches the window: alone on a server with plenty of budget it gets the
/// largest one, and its streams take all of it (so what it measures below is the windows).
#[test]
fn a_gap_client_fills_its_whole_window() {
    let s = server(Budget {
        bytes: 8 << 30,
        floor_connections: 1,
    });
    let mut c = GapClient::connect(&s, 1).unwrap();
    let taken = c.hold();
    c.0.close();
    assert_eq!(taken, MAX_WINDOW, "the streams took the connection window");
    let r = s.stop().unwrap();
    assert_eq!(r.receive_budget, 8 << 30);
}

/// 20 connections from 20 hosts holding data behind gaps: each got a window out of a 64 MiB
/// budget, and all together they could make the server hold no more than the budget. With
/// the old fixed 64 MiB windows they would have held 1.25 GiB.
#[test]
fn twenty_gap_connections_stay_within_the_budget() {
    const BUDGET: u64 = 64 << 20;
    let s = server(Budget {
        bytes: BUDGET,
        floor_connections: 20,
    });
    let mut clients = Vec::new();
    let mut held = Vec::new();
    for host in 1..=20 {
        let mut c = GapClient::connect(&s, host).unwrap();
        held.push(c.hold());
        clients.push(c);
    }
    let total: u64 = held.iter().sum();
    eprintln!("held behind gaps: {total} bytes in all, per connection {held:?}");
    assert!(total <= BUDGET, "{total} bytes held: {held:?}");
    assert!(held.iter().all(|&h| h >= MIN_WINDOW), "{held:?}");
    assert!(held[0] > held[19], "a crowd gets smaller windows: {held:?}");
    for c in &mut clients {
        c.0.close();
    }
    let r = s.stop().unwrap();
    assert!(r.receive_windows <= BUDGET, "{}", r.summary());
}

/// One host holding data behind gaps on connection after connection gets a sixteenth of the
/// budget in large windows and half the floor's connections, and is then refused; another
/// host still gets a large window.
#[test]
fn one_host_takes_half_the_floor_and_its_share_at_most() {
    const BUDGET: u64 = 64 << 20;
    const FLOOR: u64 = 20;
    let s = server(Budget {
        bytes: BUDGET,
        floor_connections: FLOOR,
    });
    let mut clients = Vec::new();
    let mut held = Vec::new();
    let refused = loop {
        assert!(held.len() < 40, "never refused: {held:?}");
        match GapClient::connect(&s, 1) {
            Ok(mut c) => {
                held.push(c.hold());
                clients.push(c);
            }
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&refused, ConnectionError::ConnectionClosed(c)
            if c.error_code == quinn_proto::TransportErrorCode::CONNECTION_REFUSED),
        "{refused}"
    );
    eprintln!("one host held {held:?}");
    assert_eq!(held.len() as u64, FLOOR / 2, "{held:?}");
    let bonus: u64 = held.iter().map(|h| h - MIN_WINDOW).sum();
    assert!(bonus <= BUDGET / 16, "{held:?}");
    let mut other = GapClient::connect(&s, 2).expect("another host is served");
    let other_held = other.hold();
    assert!(other_held > MIN_WINDOW, "{other_held}");
    for c in clients.iter_mut().chain([&mut other]) {
        c.0.close();
    }
    let r = s.stop().unwrap();
    assert_eq!(r.refused_source_share, 1, "{}", r.summary());
}
