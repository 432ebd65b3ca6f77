//! `--check`: a `digest/1` client over a real UDP socket on neqo-driver: `STREAMS` streams of
//! different lengths and contents at once, each answer checked against the hash computed
//! here.

use std::{collections::HashMap, net::SocketAddr, sync::Arc, time::Instant};

use bytes::Bytes;
use neqo_driver::{
    Application, Driver, DriverConfig,
    tls::{self, Trust},
};
use quinn_proto::{Connection, ConnectionHandle, Dir, Event, StreamEvent, StreamId};
use ring::digest::{SHA256, digest};
use rustls::pki_types::CertificateDer;

const STREAMS: usize = 64;

/// Stream `i`'s bytes: a length and content of its own (0 bytes for the first).
fn payload(i: usize) -> Bytes {
    (0..i * 37_501)
        .map(|k| (k * 31 + i * 7) as u8)
        .collect::<Vec<_>>()
        .into()
}

struct Client {
    server: SocketAddr,
    config: Option<quinn_proto::ClientConfig>,
    /// Each stream's bytes not yet written, and its answer so far.
    streams: HashMap<StreamId, (Bytes, Vec<u8>, String)>,
    right: usize,
    error: Option<String>,
    done: bool,
}

impl Client {
    fn write(conn: &mut Connection, id: StreamId, rest: &mut Bytes) {
        while !rest.is_empty() {
            match conn.send_stream(id).write(rest) {
                Ok(n) => drop(rest.split_to(n)),
                Err(_) => return,
            }
        }
        let _ = conn.send_stream(id).finish();
    }
}

impl Application for Client {
    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take()
            && let Err(e) = driver.connect(0, config, self.server, "localhost", now)
        {
            self.error = Some(e.to_string());
        }
        None
    }

    fn event(&mut self, _: ConnectionHandle, conn: &mut Connection, event: Event, now: Instant) {
        match event {
            Event::Connected => {
                for i in 0..STREAMS {
                    let Some(id) = conn.streams().open(Dir::Bi) else {
                        self.error = Some("the server allows too few streams".into());
                        return;
                    };
                    let mut body = payload(i);
                    let hash = digest(&SHA256, &body);
                    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
                    let want = hex + "\n";
                    Self::write(conn, id, &mut body);
                    self.streams.insert(id, (body, Vec::new(), want));
                }
            }
            Event::Stream(StreamEvent::Writable { id }) => {
                if let Some((rest, _, _)) = self.streams.get_mut(&id) {
                    Self::write(conn, id, rest);
                }
            }
            Event::Stream(StreamEvent::Readable { id }) => {
                let Some((_, got, want)) = self.streams.get_mut(&id) else {
                    return;
                };
                let mut stream = conn.recv_stream(id);
                let Ok(mut chunks) = stream.read(true) else {
                    return;
                };
                let finished = loop {
                    match chunks.next(usize::MAX) {
                        Ok(Some(c)) => got.extend_from_slice(&c.bytes),
                        Ok(None) => break true,
                        Err(_) => break false,
                    }
                };
                let _ = chunks.finalize();
                if finished {
                    if got != want.as_bytes() {
                        self.error = Some(format!("stream {id}: {got:?}, wanted {want}"));
                    }
                    self.right += 1;
                    if self.right == STREAMS {
                        conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
                    }
                }
            }
            Event::ConnectionLost { reason } if self.right < STREAMS => {
                self.error = Some(reason.to_string());
            }
            _ => {}
        }
    }

    fn drained(&mut self, _: ConnectionHandle, _: &Connection) {
        self.done = true;
    }

    fn done(&self) -> bool {
        self.done || self.error.is_some()
    }
}

pub fn run(
    server: SocketAddr,
    trust: Vec<CertificateDer<'static>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let crypto = tls::client_crypto(&Trust::Certs(trust), super::ALPN)?;
    let mut client = Client {
        server,
        config: Some(quinn_proto::ClientConfig::new(Arc::clone(&crypto) as _)),
        streams: HashMap::new(),
        right: 0,
        error: None,
        done: false,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let socket = neqo_udp::Socket::bind("127.0.0.1:0".parse()?, Default::default())?;
            let mut driver = Driver::client(vec![socket], DriverConfig::default());
            let limit = std::time::Duration::from_secs(30);
            tokio::time::timeout(limit, driver.run(&mut client, std::future::pending()))
                .await
                .map_err(|_| "no answer within 30 s")??;
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
    if let Some(e) = client.error {
        return Err(e.into());
    }
    let bytes: usize = (0..STREAMS).map(|i| payload(i).len()).sum();
    println!(
        "{} streams, {bytes} bytes, every SHA-256 right",
        client.right
    );
    Ok(())
}
