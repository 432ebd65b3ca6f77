//! A protocol of your own on the driver: a QUIC stream echo.
//!
//! The server echoes every bidirectional stream back to its sender and finishes it when the
//! sender does; the client opens `STREAMS` streams at once, sends `BYTES` seeded bytes on
//! each, checks that every byte comes back in order, and closes. Both ends are a
//! [`Driver`] over one neqo-udp socket on 127.0.0.1, each on its own thread and runtime:
//! what the application writes is an [`Application`] (events in, `poll` for its own timing,
//! `done` to stop); the driver does the rest (batched receive and send, pacing, timers).
//!
//! `cargo run --release -p neqo-driver --example stream_echo [STREAMS] [BYTES]`.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::Arc,
    time::Instant,
};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use neqo_driver::{
    Application, Driver, DriverConfig, TransportOptions,
    tls::{self, Identity, Trust},
};
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, StreamEvent, StreamId};

const ALPN: &str = "echo";

/// Byte `offset` of stream `id`'s payload: differs between streams, so that a mixed-up
/// stream shows.
fn byte_at(id: StreamId, offset: u64) -> u8 {
    let x = (u64::from(id) + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(offset.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    (x >> 56) as u8
}

/// The server: each stream's data, still to be echoed, and whether its sender finished.
#[derive(Default)]
struct EchoServer {
    pending: HashMap<(ConnectionHandle, StreamId), (VecDeque<Bytes>, bool)>,
    connections: u64,
    drained: u64,
    echoed: u64,
}

impl EchoServer {
    /// Reads what `id` has (while there is room to echo it) and writes what it can.
    fn pump(&mut self, ch: ConnectionHandle, conn: &mut Connection, id: StreamId) {
        let Some((queue, fin)) = self.pending.get_mut(&(ch, id)) else {
            return;
        };
        // Echo first: reading only while the queue is short keeps flow control honest (a
        // client that does not read its echo is held back by its own stream window).
        while let Some(chunk) = queue.front_mut() {
            match conn.send_stream(id).write(chunk) {
                Ok(n) => {
                    self.echoed += n as u64;
                    let _ = chunk.split_to(n);
                    if chunk.is_empty() {
                        queue.pop_front();
                    }
                }
                Err(_) => break,
            }
        }
        if queue.is_empty() && !*fin {
            let mut rs = conn.recv_stream(id);
            if let Ok(mut chunks) = rs.read(true) {
                loop {
                    match chunks.next(64 * 1024) {
                        Ok(Some(c)) => queue.push_back(c.bytes),
                        Ok(None) => {
                            *fin = true;
                            break;
                        }
                        Err(_) => break,
                    }
                    if queue.len() >= 16 {
                        break;
                    }
                }
                let _ = chunks.finalize();
            }
            if !queue.is_empty() {
                // Written what it read at once, as far as the send window allows.
                return self.pump(ch, conn, id);
            }
        }
        if queue.is_empty() && *fin {
            let _ = conn.send_stream(id).finish();
            self.pending.remove(&(ch, id));
        }
    }
}

impl Application for EchoServer {
    fn accepted(&mut self, _: ConnectionHandle, _: &mut Connection, _: Instant) {
        self.connections += 1;
    }

    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, event: Event, _: Instant) {
        match event {
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    self.pending.insert((ch, id), (VecDeque::new(), false));
                    self.pump(ch, conn, id);
                }
            }
            Event::Stream(StreamEvent::Readable { id } | StreamEvent::Writable { id }) => {
                self.pump(ch, conn, id);
            }
            _ => {}
        }
    }

    fn drained(&mut self, ch: ConnectionHandle, _: &Connection) {
        self.pending.retain(|k, _| k.0 != ch);
        self.drained += 1;
    }

    /// One client, then done.
    fn done(&self) -> bool {
        self.connections > 0 && self.drained == self.connections
    }
}

/// The client: each stream's bytes sent and echoed.
struct EchoClient {
    server: SocketAddr,
    config: Option<quinn_proto::ClientConfig>,
    streams: usize,
    bytes: u64,
    /// Stream -> (sent, received back).
    progress: HashMap<StreamId, (u64, u64)>,
    complete: usize,
    wrong: u64,
    closed: bool,
    error: Option<String>,
    drained: bool,
}

impl EchoClient {
    fn send(&mut self, conn: &mut Connection, id: StreamId) {
        let Some((sent, _)) = self.progress.get_mut(&id) else {
            return;
        };
        let mut s = conn.send_stream(id);
        while *sent < self.bytes {
            let n = (self.bytes - *sent).min(16 * 1024);
            let chunk: Vec<u8> = (*sent..*sent + n).map(|k| byte_at(id, k)).collect();
            match s.write(&chunk) {
                Ok(w) => *sent += w as u64,
                Err(_) => return,
            }
        }
        let _ = s.finish();
    }

    fn receive(&mut self, conn: &mut Connection, id: StreamId, now: Instant) {
        let Some((_, got)) = self.progress.get_mut(&id) else {
            return;
        };
        let mut rs = conn.recv_stream(id);
        let Ok(mut chunks) = rs.read(true) else {
            return;
        };
        let mut finished = false;
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(c)) => {
                    if c.offset != *got {
                        self.wrong += 1;
                    }
                    for (k, b) in c.bytes.iter().enumerate() {
                        if *b != byte_at(id, c.offset + k as u64) {
                            self.wrong += 1;
                        }
                    }
                    *got += c.bytes.len() as u64;
                }
                Ok(None) => {
                    finished = true;
                    break;
                }
                Err(_) => break,
            }
        }
        let _ = chunks.finalize();
        if finished {
            if *got != self.bytes {
                self.wrong += 1;
            }
            self.complete += 1;
            if self.complete == self.streams {
                conn.close(now, 0u32.into(), Bytes::from_static(b"echoed"));
                self.closed = true;
            }
        }
    }
}

impl Application for EchoClient {
    fn event(&mut self, _: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant) {
        match event {
            Event::Connected => {
                for _ in 0..self.streams {
                    let id = conn.streams().open(Dir::Bi).expect("stream credit for all");
                    self.progress.insert(id, (0, 0));
                    self.send(conn, id);
                }
            }
            Event::Stream(StreamEvent::Writable { id }) => self.send(conn, id),
            Event::Stream(StreamEvent::Readable { id }) => self.receive(conn, id, now),
            Event::ConnectionLost { reason } if !self.closed => {
                self.error = Some(format!("the connection failed: {reason}"));
            }
            _ => {}
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take()
            && let Err(e) = driver.connect(0, config, self.server, "localhost", now)
        {
            self.error = Some(format!("cannot connect: {e}"));
        }
        None
    }

    fn drained(&mut self, _: ConnectionHandle, _: &Connection) {
        self.drained = true;
    }

    fn done(&self) -> bool {
        self.drained || self.error.is_some()
    }
}

/// A runtime of its own on this thread.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let streams: usize = args
        .next()
        .map_or(Ok(16), |s| s.parse())
        .context("STREAMS")?;
    let bytes: u64 = args
        .next()
        .map_or(Ok(4 << 20), |s| s.parse())
        .context("BYTES")?;
    if !(1..=100).contains(&streams) {
        bail!("STREAMS: 1 to 100 (the streams the server allows at once)");
    }

    let identity = Identity::self_signed()?;
    let options = TransportOptions::default();
    let mut server_config =
        quinn_proto::ServerConfig::with_crypto(tls::server_crypto(&identity, &[ALPN.into()])?);
    server_config.transport_config(Arc::new(options.transport("server")?));
    let mut client_config =
        quinn_proto::ClientConfig::new(tls::client_crypto(&Trust::Certs(identity.chain), ALPN)?);
    client_config.transport_config(Arc::new(options.transport("client")?));

    // The server's socket is bound here, so that its port is known before the client starts.
    let local: SocketAddr = "127.0.0.1:0".parse()?;
    let server_socket = std::net::UdpSocket::bind(local)?;
    let server_addr = server_socket.local_addr()?;
    let server = std::thread::spawn(move || -> anyhow::Result<_> {
        runtime()?.block_on(async {
            let socket = neqo_udp::Socket::from_std(server_socket, neqo_udp::Config::default())?;
            let mut driver = Driver::server(
                vec![socket],
                quinn_proto::EndpointConfig::default(),
                Arc::new(server_config),
                DriverConfig::default(),
            );
            let mut app = EchoServer::default();
            driver.run(&mut app, std::future::pending()).await?;
            Ok((app.echoed, driver.socket_stats()))
        })
    });

    let started = Instant::now();
    let mut client = EchoClient {
        server: server_addr,
        config: Some(client_config),
        streams,
        bytes,
        progress: HashMap::new(),
        complete: 0,
        wrong: 0,
        closed: false,
        error: None,
        drained: false,
    };
    let client_stats = runtime()?.block_on(async {
        let socket = neqo_udp::Socket::bind(local, neqo_udp::Config::default())?;
        let mut driver = Driver::client(vec![socket], DriverConfig::default());
        driver.run(&mut client, std::future::pending()).await?;
        anyhow::Ok(driver.socket_stats())
    })?;
    let took = started.elapsed();
    let (echoed, server_stats) = server.join().expect("the server thread")?;

    if let Some(e) = client.error {
        bail!("{e}");
    }
    let total = bytes * streams as u64;
    if client.wrong > 0 || client.complete != streams || echoed != total {
        bail!(
            "echo wrong: {} streams of {streams} complete, {} bytes wrong, {echoed} of {total} echoed",
            client.complete,
            client.wrong
        );
    }
    println!(
        "{streams} streams x {bytes} B echoed byte-exact in {:.0} ms ({:.2} Gbit/s each way)",
        took.as_secs_f64() * 1e3,
        total as f64 * 8.0 / took.as_secs_f64() / 1e9
    );
    for (who, s) in [("client", client_stats), ("server", server_stats)] {
        println!(
            "{who}: sent {} datagrams in {} syscalls ({:.1} each), received {} in {} ({:.1} each)",
            s.tx.datagrams,
            s.tx.syscalls,
            s.tx.datagrams_per_syscall(),
            s.rx.datagrams,
            s.rx.syscalls,
            s.rx.datagrams_per_syscall()
        );
    }
    Ok(())
}
