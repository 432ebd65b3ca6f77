//! A quinn-proto client driven by hand over a plain socket, in real time: the tests that need
//! to do what no well-behaved client does (keep data behind a gap, forge packets after the
//! handshake) step it themselves. Included as a module by the tests that use it.

use std::{
    net::{IpAddr, SocketAddr, UdpSocket},
    sync::Arc,
    time::{Duration, Instant},
};

use quinn_proto::{
    ClientConfig, Connection, ConnectionError, ConnectionHandle, DatagramEvent, Endpoint,
    EndpointConfig, Event,
};

/// A hang guard for the handshake, never a speed check.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(60);

pub struct RawClient {
    pub socket: UdpSocket,
    pub server: SocketAddr,
    pub endpoint: Endpoint,
    pub ch: ConnectionHandle,
    pub conn: Connection,
    /// The source connection ID of the server's latest long-header packet: the destination
    /// connection ID of this client's short-header packets.
    pub server_cid: Vec<u8>,
    /// The source connection ID of this client's first packet: the destination connection
    /// ID of the server's short-header packets.
    pub client_cid: Vec<u8>,
    buf: Vec<u8>,
}

impl RawClient {
    /// Connects to `server` from `local` (an address on loopback: each its own source to the
    /// server's fair shares), every datagram delivered, until the handshake is done and what
    /// the server sent with its HANDSHAKE_DONE has been taken in: the window every connection
    /// gets once accepted goes out in the same turn.
    ///
    /// # Errors
    /// The connection's end, if the server refuses it.
    pub fn connect(
        server: SocketAddr,
        local: IpAddr,
        config: ClientConfig,
    ) -> Result<Self, ConnectionError> {
        let socket = UdpSocket::bind(SocketAddr::new(local, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let mut endpoint = Endpoint::new(Arc::new(EndpointConfig::default()), None, true, None);
        let (ch, conn) = endpoint
            .connect(Instant::now(), config, server, "localhost")
            .unwrap();
        let mut c = Self {
            socket,
            server,
            endpoint,
            ch,
            conn,
            server_cid: Vec::new(),
            client_cid: Vec::new(),
            buf: Vec::new(),
        };
        let limit = Instant::now() + HANDSHAKE_DEADLINE;
        let mut connected = false;
        // The server confirms the handshake with HANDSHAKE_DONE and, in the same turn, sets
        // the connection's window from its budget: waiting for the frame, not for a quiet
        // spell, is what makes the window below the server's and not the initial one.
        while !connected || c.conn.stats().frame_rx.handshake_done == 0 {
            assert!(
                Instant::now() < limit,
                "no handshake within {HANDSHAKE_DEADLINE:?}"
            );
            let now = Instant::now();
            if c.conn.poll_timeout().is_some_and(|t| t <= now) {
                c.conn.handle_timeout(now);
            }
            c.flush(now, true);
            c.receive(now);
            while let Some(e) = c.conn.poll() {
                if let Event::ConnectionLost { reason } = e {
                    return Err(reason);
                }
                connected |= matches!(e, Event::Connected);
            }
        }
        // Whatever else that turn sent is already queued at the socket.
        for _ in 0..1000 {
            let now = Instant::now();
            let got = c.receive(now);
            c.flush(now, true);
            if !got {
                break;
            }
        }
        while let Some(e) = c.conn.poll() {
            if let Event::ConnectionLost { reason } = e {
                return Err(reason);
            }
        }
        Ok(c)
    }

    /// Closes the connection (code 0) and sends the CONNECTION_CLOSE, so that the server
    /// lets go of it at once rather than at its idle timeout.
    #[allow(dead_code, reason = "not every test that includes this module closes")]
    pub fn close(&mut self) {
        let now = Instant::now();
        self.conn
            .close(now, 0u32.into(), bytes::Bytes::from_static(b"done"));
        self.flush(now, true);
    }

    /// Sends (or, if `deliver` is false, drops) everything the connection has to send now.
    /// Returns whether anything was produced.
    pub fn flush(&mut self, now: Instant, deliver: bool) -> bool {
        let mut any = false;
        loop {
            self.buf.clear();
            let Some(t) = self.conn.poll_transmit(now, 1, &mut self.buf) else {
                return any;
            };
            any = true;
            if self.client_cid.is_empty()
                && let Some(scid) = long_header_scid(&self.buf[..t.size])
            {
                self.client_cid = scid.to_vec();
            }
            if deliver {
                self.socket
                    .send_to(&self.buf[..t.size], self.server)
                    .unwrap();
            }
        }
    }

    /// Takes one datagram from the server, if one comes within 5 ms; returns whether one did.
    pub fn receive(&mut self, now: Instant) -> bool {
        let mut data = [0u8; 65_536];
        let Ok(n) = self.socket.recv(&mut data) else {
            return false;
        };
        if let Some(scid) = long_header_scid(&data[..n]) {
            self.server_cid = scid.to_vec();
        }
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
}

/// The source connection ID of a QUIC version 1 long-header packet (not a Retry's, which
/// carries no connection of ours yet).
fn long_header_scid(d: &[u8]) -> Option<&[u8]> {
    if d.first()? & 0x80 == 0 || d.first()? & 0x30 == 0x30 {
        return None;
    }
    let dcid_len = usize::from(*d.get(5)?);
    let scid_at = 6 + dcid_len;
    let scid_len = usize::from(*d.get(scid_at)?);
    d.get(scid_at + 1..scid_at + 1 + scid_len)
}
