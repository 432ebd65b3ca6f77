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
use neqo_bin::tls::{self, ALPN_HQ, Trust};

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
