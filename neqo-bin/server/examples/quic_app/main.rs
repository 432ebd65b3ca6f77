//! A protocol of your own on raw QUIC, behind neqo-server's machinery (workers, Retry,
//! admission, receive budgets, metrics, the drain at shutdown): ALPN `digest/1`. A client
//! sends any bytes on a bidirectional stream and finishes it; the server answers with their
//! SHA-256 in hex and a newline, hashing as the bytes arrive, so it holds none of them.
//!
//! `cargo run --release -p neqo-server-core --example quic_app [ADDR]` serves on ADDR
//! (default 127.0.0.1:4433) until Ctrl-C; `-- --check` serves on a free port, hashes 64
//! streams of its own through it and checks every answer.

mod check;

use std::{collections::HashMap, net::SocketAddr, task::Waker, time::Instant};

use neqo_server_core::{QuicApp, QuicSession, Server, ServerConfig, ServerHandle};
use quinn_proto::{Connection, Dir, Event, StreamEvent, StreamId};
use ring::digest::{Context, SHA256};

const ALPN: &str = "digest/1";

struct Digest;

impl QuicApp for Digest {
    fn session(&self, _peer: SocketAddr, _waker: Waker) -> Box<dyn QuicSession> {
        Box::new(Streams::default())
    }
}

/// Each open stream's hash so far.
#[derive(Default)]
struct Streams(HashMap<StreamId, Context>);

impl Streams {
    fn read(&mut self, conn: &mut Connection, id: StreamId) {
        let Some(hash) = self.0.get_mut(&id) else {
            return;
        };
        let mut stream = conn.recv_stream(id);
        let Ok(mut chunks) = stream.read(true) else {
            return;
        };
        let finished = loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => hash.update(&chunk.bytes),
                Ok(None) => break true,
                // Blocked (more to come) or reset by the client.
                Err(_) => break false,
            }
        };
        // Gives the client its flow-control credit back for what was read.
        let _ = chunks.finalize();
        if finished && let Some(hash) = self.0.remove(&id) {
            let hex: String = hash
                .finish()
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            // 65 bytes always fit a new stream's send window.
            let mut send = conn.send_stream(id);
            let _ = send.write(format!("{hex}\n").as_bytes());
            let _ = send.finish();
        }
    }
}

impl QuicSession for Streams {
    fn event(&mut self, conn: &mut Connection, event: &Event, _now: Instant) {
        match *event {
            Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                while let Some(id) = conn.streams().accept(Dir::Bi) {
                    self.0.insert(id, Context::new(&SHA256));
                    self.read(conn, id);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => self.read(conn, id),
            // A stream the client gave up on is forgotten.
            Event::Stream(StreamEvent::Stopped { id, .. }) => drop(self.0.remove(&id)),
            _ => {}
        }
    }
}

fn config(addr: SocketAddr) -> ServerConfig {
    let mut config = ServerConfig::quic(ALPN, Digest);
    config.listen = vec![addr];
    config
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("--check") {
        let server = ServerHandle::start(config("127.0.0.1:0".parse()?))?;
        check::run(server.addr(), server.certificate().to_vec())?;
        let report = server.stop()?;
        println!("checked: {}", report.summary());
        return Ok(());
    }
    let addr = arg.as_deref().unwrap_or("127.0.0.1:4433").parse()?;
    let server = Server::bind(config(addr))?;
    println!("listening on {:?}", server.local_addrs());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(server.run(async {
            let _ = tokio::signal::ctrl_c().await;
        }))?;
    Ok(())
}
