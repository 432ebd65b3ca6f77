//! quiche, Cloudflare's sans-I/O QUIC stack, on `neqo-udp`'s [`Socket`]: the second stack on
//! the same I/O layer as the project's own driver (quinn-proto), which shows the layer is
//! not tied to one. Feature `quiche` (it builds BoringSSL); without it the crate is empty.
//!
//! [`get`] makes one hq-interop request (HTTP/0.9 over a QUIC stream, what `neqo-server`
//! serves) and reads the response. What the stack asks for maps onto the socket directly:
//! - each receive batch (`recvmmsg`, GRO runs already split by neqo-udp) is handed to
//!   `Connection::recv` datagram by datagram;
//! - the packets `Connection::send` produces are laid back to back, consecutive ones of one
//!   size forming a GSO run, and a whole batch of runs goes in one `sendmmsg`;
//! - quiche's timer is the loop's wake-up, and what it paces is left to it (`SendInfo::at`
//!   is not waited for: the loop sends what the congestion window allows at once).
#![cfg(feature = "quiche")]

use std::{
    io,
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use neqo_udp::{Socket, Stats, Transmit};
use rand::RngCore as _;

/// The stream the request goes on: the client's first bidirectional one.
const STREAM: u64 = 0;

/// Most bytes of packets laid out per send call: a batch of full GSO runs.
const SEND_AREA: usize = 32 * 64 * 1024;

/// What a request got.
#[derive(Debug)]
pub struct Outcome {
    /// Response bytes received.
    pub bytes: u64,
    /// Whether every byte was the generated body's (`neqo_protocols::pattern`) at its offset.
    pub pattern_ok: bool,
    /// From the first packet to the response's end.
    pub elapsed: Duration,
    /// What the socket did (datagrams per syscall each way).
    pub socket: Stats,
    /// What quiche counted.
    pub quic: quiche::Stats,
}

/// Requests `path` (an hq-interop path, e.g. `/1048576`) from the hq-interop server at
/// `server` over a neqo-udp socket with `config`, without verifying its certificate; gives
/// up after `limit`.
///
/// # Errors
/// The socket's, quiche's, a connection that ended before the response did, or the limit.
pub async fn get(
    server: SocketAddr,
    path: &str,
    config: neqo_udp::Config,
    limit: Duration,
) -> anyhow::Result<Outcome> {
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let socket = Socket::bind(bind, config)?;
    let local = SocketAddr::new(
        if server.ip().is_loopback() {
            server.ip()
        } else {
            bind.ip()
        },
        socket.local_addr()?.port(),
    );
    let mut qc = quiche_config()?;
    let mut scid = [0u8; quiche::MAX_CONN_ID_LEN];
    rand::rng().fill_bytes(&mut scid);
    let scid = quiche::ConnectionId::from_ref(&scid);
    let mut conn = quiche::connect(Some("localhost"), &scid, local, server, &mut qc)?;

    let started = Instant::now();
    let deadline = started + limit;
    let mut batch = socket.recv_batch();
    let mut area = vec![0u8; SEND_AREA];
    let mut read = vec![0u8; 64 * 1024];
    let (mut requested, mut bytes, mut pattern_ok, mut done) = (false, 0u64, true, None);
    loop {
        send_all(&socket, &mut conn, &mut area).await?;
        if conn.is_closed() {
            break;
        }
        if Instant::now() >= deadline {
            bail!("no response within {limit:?}");
        }
        let wake = conn.timeout().unwrap_or(limit).min(limit);
        tokio::select! {
            r = socket.readable() => r?,
            () = tokio::time::sleep(wake) => conn.on_timeout(),
        }
        loop {
            match socket.recv(&mut batch) {
                Ok(_) => {
                    for mut d in batch.datagrams() {
                        let info = quiche::RecvInfo {
                            from: d.source,
                            to: local,
                        };
                        // A datagram quiche cannot use (a stray, a duplicate) is its to drop.
                        let _ = conn.recv(&mut d.data, info);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        if conn.is_established() && !requested {
            let request = neqo_protocols::hq::request(path);
            conn.stream_send(STREAM, request.as_bytes(), true)?;
            requested = true;
        }
        while let Ok((n, fin)) = conn.stream_recv(STREAM, &mut read) {
            pattern_ok &= neqo_protocols::pattern::verify(bytes, &read[..n]);
            bytes += n as u64;
            if fin && done.is_none() {
                done = Some(started.elapsed());
                conn.close(true, 0, b"done")?;
            }
        }
    }
    let Some(elapsed) = done else {
        bail!(
            "the connection ended first: {:?} / {:?}",
            conn.peer_error(),
            conn.local_error()
        );
    };
    Ok(Outcome {
        bytes,
        pattern_ok,
        elapsed,
        socket: socket.stats(),
        quic: conn.stats(),
    })
}

/// A client config: hq-interop, no certificate verification (the server's is self-signed),
/// windows as large as neqo-client's.
fn quiche_config() -> anyhow::Result<quiche::Config> {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION)?;
    c.verify_peer(false);
    c.set_application_protos(&[neqo_protocols::ALPN_HQ.as_bytes()])?;
    c.set_max_idle_timeout(10_000);
    c.set_max_recv_udp_payload_size(65_527);
    c.set_max_send_udp_payload_size(1_452);
    c.set_initial_max_data(64 << 20);
    c.set_initial_max_stream_data_bidi_local(16 << 20);
    c.set_initial_max_stream_data_bidi_remote(16 << 20);
    c.set_initial_max_streams_bidi(100);
    c.set_initial_max_streams_uni(3);
    c.set_disable_active_migration(true);
    Ok(c)
}

/// Sends everything `conn` has now: its packets laid out back to back in `area`, each run of
/// equal-size packets (the last may be shorter) one GSO transmit, all in as few `sendmmsg`
/// calls as the socket needs.
async fn send_all(
    socket: &Socket,
    conn: &mut quiche::Connection,
    area: &mut [u8],
) -> anyhow::Result<()> {
    loop {
        // (start, len, segment size) of each run laid out in `area`.
        let mut runs: Vec<(usize, usize, usize)> = Vec::new();
        let mut at = 0;
        let mut to = None;
        while area.len() - at >= 65_536 {
            let (n, info) = match conn.send(&mut area[at..]) {
                Ok(sent) => sent,
                Err(quiche::Error::Done) => break,
                Err(e) => return Err(e).context("quiche send"),
            };
            to = Some(info.to);
            match runs.last_mut() {
                // A run goes on while its packets are of its size and it fits one message.
                Some((_, len, seg)) if *len % *seg == 0 && n <= *seg && *len + n <= 65_000 => {
                    *len += n;
                }
                _ => runs.push((at, n, n)),
            }
            at += n;
        }
        let Some(to) = to else {
            return Ok(());
        };
        let transmits: Vec<Transmit<&[u8]>> = runs
            .iter()
            .map(|&(start, len, seg)| {
                Transmit::new(to, &area[start..start + len])
                    .with_segment_size((len > seg).then_some(seg))
            })
            .collect();
        socket.send_all(&transmits).await?;
    }
}
