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

use std::{
    net::{SocketAddr, UdpSocket},
    sync::Arc,
    time::{Duration, Instant},
};

use neqo_bin::{
    server::{Budget, MAX_WINDOW, MIN_WINDOW, ServerConfig, ServerHandle},
    tls::{self, ALPN_HQ, TransportOptions, Trust},
};
use quinn_proto::{
    ClientConfig, Connection, ConnectionError, ConnectionHandle, DatagramEvent, Dir, Endpoint,
    EndpointConfig, Event, congestion::CubicConfig,
};

/// A hang guard for the handshake, never a speed check.
const DEADLINE: Duration = Duration::from_secs(20);

/// Streams each gap client uses: enough that their stream windows (16 MiB each at most)
/// never limit it before the connection window does.
const STREAMS: usize = 8;

struct GapClient {
    socket: UdpSocket,
    server: SocketAddr,
    endpoint: Endpoint,
    ch: ConnectionHandle,
    conn: Connection,
    buf: Vec<u8>,
}

impl GapClient {
    /// Connects to `server` from loopback address `127.0.0.host` (each its own source to the
    /// server's fair shares), in real time, every datagram delivered, until the handshake is
    /// done.
    ///
    /// # Errors
    /// The connection's end, if the server refuses it.
    fn connect(server: &ServerHandle, host: u8) -> Result<Self, ConnectionError> {
        let socket = UdpSocket::bind(SocketAddr::from(([127, 0, 0, host], 0))).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let crypto =
            tls::client_crypto(&Trust::Certs(server.certificate().to_vec()), ALPN_HQ).unwrap();
        let mut transport = TransportOptions::default().transport("gap").unwrap();
        // Nothing but flow control may hold the sender back: no congestion window to speak of,
        // and room to keep everything unacknowledged.
        let mut cubic = CubicConfig::default();
        cubic.initial_window(1 << 40);
        transport.congestion_controller_factory(Arc::new(cubic));
        transport.send_window(1 << 40);
        let mut config = ClientConfig::new(crypto);
        config.transport_config(Arc::new(transport));
        let (ch, conn) = endpoint
            .connect(Instant::now(), config, server.addr(), "localhost")
            .unwrap();
        let mut c = Self {
            socket,
            server: server.addr(),
            endpoint,
            ch,
            conn,
            buf: Vec::new(),
        };
        let limit = Instant::now() + DEADLINE;
        let mut connected = false;
        while !connected {
            assert!(Instant::now() < limit, "no handshake within {DEADLINE:?}");
            let now = Instant::now();
            if c.conn.poll_timeout().is_some_and(|t| t <= now) {
                c.conn.handle_timeout(now);
            }
            c.flush(now, true);
            c.receive(now);
            while let Some(e) = c.conn.poll() {
                if let Event::ConnectionLost { reason } = &e {
                    return Err(reason.clone());
                }
                connected |= matches!(e, Event::Connected);
            }
        }
        // What the server sends right after the handshake (HANDSHAKE_DONE, and MAX_DATA
        // raising the small window every connection is first told): until it goes quiet.
        let mut quiet = Instant::now();
        while quiet.elapsed() < Duration::from_millis(50) {
            assert!(Instant::now() < limit, "the server never went quiet");
            let now = Instant::now();
            if c.receive(now) {
                quiet = now;
            }
            c.flush(now, true);
        }
        Ok(c)
    }

    /// Sends (or, if `deliver` is false, drops) everything the connection has to send now.
    /// Returns whether anything was produced.
    fn flush(&mut self, now: Instant, deliver: bool) -> bool {
        let mut any = false;
        loop {
            self.buf.clear();
            let Some(t) = self.conn.poll_transmit(now, 1, &mut self.buf) else {
                return any;
            };
            any = true;
            if deliver {
                self.socket
                    .send_to(&self.buf[..t.size], self.server)
                    .unwrap();
            }
        }
    }

    /// Takes one datagram from the server, if one comes within 5 ms; returns whether one did.
    fn receive(&mut self, now: Instant) -> bool {
        let mut data = [0u8; 65_536];
        let Ok(n) = self.socket.recv(&mut data) else {
            return false;
        };
        let mut response = Vec::new();
        if let Some(DatagramEvent::ConnectionEvent(ch, event)) = self.endpoint.handle(
            now,
            self.server,
            None,
            None,
            data[..n].into(),
            &mut response,
        ) {
            assert_eq!(ch, self.ch);
            self.conn.handle_event(event);
            while let Some(e) = self.conn.poll_endpoint_events() {
                if let Some(back) = self.endpoint.handle_event(ch, e) {
                    self.conn.handle_event(back);
                }
            }
        }
        true
    }

    /// Leaves a one-byte gap at the start of [`STREAMS`] streams and fills them behind it as
    /// far as flow control allows; returns the bytes the streams took, all now sent.
    fn hold(&mut self) -> u64 {
        let mut now = Instant::now();
        let ids: Vec<_> = (0..STREAMS)
            .map(|_| {
                let id = self.conn.streams().open(Dir::Bi).expect("stream credit");
                self.conn.send_stream(id).write(b"G").unwrap();
                id
            })
            .collect();
        // The datagrams carrying every stream's first byte never leave.
        self.flush(now, false);
        let chunk = vec![0x55u8; 1 << 20];
        let mut taken = STREAMS as u64;
        for id in ids {
            while let Ok(n) = self.conn.send_stream(id).write(&chunk) {
                taken += n as u64;
            }
        }
        // quinn-proto's own pacer wants time to pass; its timers never run, so nothing is
        // retransmitted and the gaps stay open.
        let mut idle_rounds = 0;
        while idle_rounds < 100 {
            if self.flush(now, true) {
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
    let taken = GapClient::connect(&s, 1).unwrap().hold();
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
    drop(clients);
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
    drop((clients, other));
    let r = s.stop().unwrap();
    assert_eq!(r.refused_source_share, 1, "{}", r.summary());
}
