//! Traffic a server must shrug off, made by the tools that measure it (`flood`, `soak`):
//! valid client Initials that are never followed up, as from spoofed addresses, and
//! datagrams of garbage.

use std::{
    io,
    net::{IpAddr, SocketAddr, UdpSocket},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use neqo_driver::tls::{self, Trust};
use neqo_protocols::ALPN_HQ;

/// `count` client Initials for `server`, each of a new connection with its own random IDs and
/// a real ClientHello.
///
/// # Errors
/// quinn-proto would not make one.
pub fn initials(count: usize, server: SocketAddr) -> anyhow::Result<Vec<Vec<u8>>> {
    let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ)?;
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        true,
        None,
    );
    let now = Instant::now();
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let config = quinn_proto::ClientConfig::new(crypto.clone());
        let (_, mut conn) = endpoint.connect(now, config, server, "localhost")?;
        let mut buf = Vec::new();
        let t = conn.poll_transmit(now, 1, &mut buf).context("no Initial")?;
        buf.truncate(t.size);
        out.push(buf);
    }
    Ok(out)
}

/// `count` datagrams of garbage: random bytes of random sizes (1 to 1500), the first byte
/// random too, so that some look like long headers, some like short ones.
#[must_use]
pub fn garbage(count: usize, rng: &mut impl rand::Rng) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let mut d = vec![0; rng.random_range(1..=1500)];
            rng.fill_bytes(&mut d);
            d
        })
        .collect()
}

/// Sends `datagrams` to `to` at `rate` a second, round robin over `sources` sockets on
/// address `from` (each its own source port, as many spoofed sources).
///
/// # Errors
/// A socket could not be bound.
pub fn send_paced(
    datagrams: &[Vec<u8>],
    to: SocketAddr,
    rate: u32,
    sources: usize,
    from: IpAddr,
) -> io::Result<()> {
    let sockets = (0..sources.max(1))
        .map(|_| UdpSocket::bind((from, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    let start = Instant::now();
    for (i, d) in datagrams.iter().enumerate() {
        #[expect(clippy::cast_precision_loss, reason = "a schedule")]
        let due = start + Duration::from_secs_f64(i as f64 / f64::from(rate.max(1)));
        let now = Instant::now();
        if due > now + Duration::from_micros(500) {
            std::thread::sleep(due - now);
        }
        // A full buffer (the server not reading) loses the datagram, as on a wire.
        let _ = sockets[i % sockets.len()].send_to(d, to);
    }
    Ok(())
}

/// The source connection ID of the first long-header packet in `datagram`: the ID a server
/// chose, which carries its worker byte.
#[must_use]
pub fn long_header_scid(datagram: &[u8]) -> Option<&[u8]> {
    // First byte, version (4), DCID length and DCID, SCID length and SCID.
    if datagram.first()? & 0x80 == 0 {
        return None;
    }
    let dcid_len = usize::from(*datagram.get(5)?);
    let at = 6 + dcid_len;
    let scid_len = usize::from(*datagram.get(at)?);
    datagram.get(at + 1..at + 1 + scid_len)
}

/// Learns, as an attacker can, which of its source ports the server steers to which worker:
/// binds `probes` sockets on `from`, sends a real Initial from each and reads the worker
/// from the reply's connection ID (the byte at `worker_offset`, modulo `workers`). Returns
/// each socket that got a reply, with its worker.
///
/// # Errors
/// A socket could not be bound, or no Initial could be made.
pub fn learn_workers(
    from: IpAddr,
    server: SocketAddr,
    probes: usize,
    worker_offset: usize,
    workers: usize,
) -> anyhow::Result<Vec<(UdpSocket, usize)>> {
    let initials = initials(probes, server)?;
    let mut learned = Vec::new();
    let mut buf = [0u8; 2048];
    for initial in &initials {
        let socket = UdpSocket::bind((from, 0))?;
        socket.set_read_timeout(Some(Duration::from_millis(500)))?;
        socket.send_to(initial, server)?;
        if let Ok((n, _)) = socket.recv_from(&mut buf)
            && let Some(&byte) = long_header_scid(&buf[..n]).and_then(|c| c.get(worker_offset))
        {
            learned.push((socket, usize::from(byte) % workers.max(1)));
        }
    }
    Ok(learned)
}

/// What one handshake of [`handshake`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Handshake {
    /// From the first datagram sent to the handshake's completion.
    pub took: Duration,
    /// The worker byte of the server's last long-header packet (the connection's worker,
    /// after a Retry too), modulo the workers.
    pub worker: Option<usize>,
}

/// One full handshake from a new socket on `from` to `server` with quinn-proto's client,
/// in real time (retransmissions included), giving up at `deadline`.
///
/// # Errors
/// The handshake failed or did not finish in time.
pub fn handshake(
    from: IpAddr,
    server: SocketAddr,
    worker_offset: usize,
    workers: usize,
    deadline: Duration,
) -> anyhow::Result<Handshake> {
    let crypto = tls::client_crypto(&Trust::Insecure, ALPN_HQ)?;
    let socket = UdpSocket::bind((from, 0))?;
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        true,
        None,
    );
    let started = Instant::now();
    let (ch, mut conn) = endpoint.connect(
        started,
        quinn_proto::ClientConfig::new(crypto),
        server,
        "localhost",
    )?;
    let mut worker = None;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        if now.duration_since(started) > deadline {
            anyhow::bail!("no handshake in {deadline:?}");
        }
        out.clear();
        while let Some(t) = conn.poll_transmit(now, 1, &mut out) {
            let _ = socket.send_to(&out[..t.size], t.destination);
            out.clear();
        }
        while let Some(event) = conn.poll() {
            match event {
                quinn_proto::Event::Connected => {
                    return Ok(Handshake {
                        took: now.duration_since(started),
                        worker,
                    });
                }
                quinn_proto::Event::ConnectionLost { reason } => {
                    anyhow::bail!("handshake failed: {reason}")
                }
                _ => {}
            }
        }
        let wait = conn
            .poll_timeout()
            .map_or(Duration::from_millis(100), |t| {
                t.saturating_duration_since(now)
            })
            .clamp(Duration::from_micros(100), Duration::from_millis(100));
        socket.set_read_timeout(Some(wait))?;
        match socket.recv_from(&mut buf) {
            Ok((n, peer)) => {
                if let Some(&byte) = long_header_scid(&buf[..n]).and_then(|c| c.get(worker_offset))
                {
                    worker = Some(usize::from(byte) % workers.max(1));
                }
                let mut response = Vec::new();
                let now = Instant::now();
                if let Some(quinn_proto::DatagramEvent::ConnectionEvent(_, e)) = endpoint.handle(
                    now,
                    peer,
                    None,
                    None,
                    bytes::BytesMut::from(&buf[..n]),
                    &mut response,
                ) {
                    conn.handle_event(e);
                }
                while let Some(e) = conn.poll_endpoint_events() {
                    if let Some(e) = endpoint.handle_event(ch, e) {
                        conn.handle_event(e);
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                conn.handle_timeout(Instant::now());
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends `datagrams` round robin over `sockets` to `to`, as fast as the sockets take them,
/// until `stop` is set, `until` has passed or `limit` datagrams have gone; returns how many
/// were sent.
#[must_use]
pub fn blast(
    datagrams: &[Vec<u8>],
    sockets: &[UdpSocket],
    to: SocketAddr,
    limit: u64,
    stop: &std::sync::atomic::AtomicBool,
    until: Instant,
) -> u64 {
    let mut sent = 0;
    if datagrams.is_empty() || sockets.is_empty() {
        return 0;
    }
    while sent < limit && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        if sent % 1024 == 0 && Instant::now() >= until {
            break;
        }
        #[expect(clippy::cast_possible_truncation, reason = "an index, wrapped")]
        let i = sent as usize;
        let _ = sockets[i % sockets.len()].send_to(&datagrams[i % datagrams.len()], to);
        sent += 1;
    }
    sent
}
