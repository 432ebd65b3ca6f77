//! The endpoint of the `quinn_proto_endpoint` example (see `main.rs`).

use std::{
    collections::HashMap,
    io,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use neqo_udp::{Config, MAX_UDP_PAYLOAD, Socket, TxQueue, quinn};
use quinn_proto::{
    ClientConfig, Connection, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig,
    Event, ServerConfig, StreamEvent,
    crypto::rustls::{QuicClientConfig, QuicServerConfig},
};

const MESSAGE: &[u8] = b"hello from a neqo-udp socket";

/// One side: its socket, quinn-proto endpoint, connections and transmit queue.
struct Side {
    socket: Socket,
    endpoint: Endpoint,
    conns: HashMap<ConnectionHandle, Connection>,
    queue: TxQueue,
}

impl Side {
    fn new(server: Option<Arc<ServerConfig>>) -> io::Result<Self> {
        Ok(Self {
            socket: Socket::bind("127.0.0.1:0".parse().unwrap(), Config::default())?,
            endpoint: Endpoint::new(Arc::new(EndpointConfig::default()), server, true, None),
            conns: HashMap::new(),
            queue: TxQueue::new(MAX_UDP_PAYLOAD),
        })
    }

    /// Feeds every datagram the socket holds to the endpoint and its connections.
    fn receive(&mut self, now: Instant) -> io::Result<()> {
        let mut batch = self.socket.recv_batch();
        loop {
            match self.socket.recv(&mut batch) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
            for d in batch.datagrams() {
                let mut response = self.queue.take_buffer();
                match quinn::handle(&mut self.endpoint, now, d, &mut response) {
                    Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                        self.conns.get_mut(&ch).unwrap().handle_event(event);
                    }
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        match self.endpoint.accept(incoming, now, &mut response, None) {
                            Ok((ch, conn)) => {
                                self.conns.insert(ch, conn);
                            }
                            Err(e) => println!("refused a connection: {}", e.cause),
                        }
                    }
                    Some(DatagramEvent::Response(t)) => {
                        push(&mut self.queue, response, &t);
                        continue;
                    }
                    None => {}
                }
                self.queue.recycle(response);
            }
        }
    }

    /// Fires timers, routes endpoint events, and queues and sends every connection's packets.
    fn transmit(&mut self, now: Instant) -> io::Result<()> {
        let max = self.socket.max_segments_for(1500);
        for (&ch, conn) in &mut self.conns {
            if conn.poll_timeout().is_some_and(|t| t <= now) {
                conn.handle_timeout(now);
            }
            while let Some(ev) = conn.poll_endpoint_events() {
                if let Some(back) = self.endpoint.handle_event(ch, ev) {
                    conn.handle_event(back);
                }
            }
            loop {
                let mut buf = self.queue.take_buffer();
                let Some(t) = conn.poll_transmit(now, max, &mut buf) else {
                    self.queue.recycle(buf);
                    break;
                };
                push(&mut self.queue, buf, &t);
            }
        }
        match self.socket.flush(&mut self.queue) {
            Ok(_) => Ok(()),
            // Loopback rarely pushes back; what is left goes next round.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn next_timeout(&mut self) -> Option<Instant> {
        self.conns
            .values_mut()
            .filter_map(Connection::poll_timeout)
            .min()
    }
}

/// Queues quinn-proto's transmit, whose bytes are in `buf`.
fn push(queue: &mut TxQueue, buf: Vec<u8>, t: &quinn_proto::Transmit) {
    queue.push(quinn::queued(t, buf));
}

fn crypto() -> (Arc<ServerConfig>, ClientConfig) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key.into())
        .unwrap();
    server.alpn_protocols = vec![b"echo".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"echo".to_vec()];
    (
        Arc::new(ServerConfig::with_crypto(Arc::new(
            QuicServerConfig::try_from(server).unwrap(),
        ))),
        ClientConfig::new(Arc::new(QuicClientConfig::try_from(client).unwrap())),
    )
}

/// Runs the exchange and checks the echo.
#[tokio::main(flavor = "current_thread")]
pub async fn run() -> io::Result<()> {
    let (server_config, client_config) = crypto();
    let mut server = Side::new(Some(server_config))?;
    let mut client = Side::new(None)?;
    let (ch, conn) = client
        .endpoint
        .connect(
            Instant::now(),
            client_config,
            server.socket.local_addr()?,
            "localhost",
        )
        .expect("connect");
    client.conns.insert(ch, conn);
    let mut server_got = Vec::new();
    let mut echo = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !client.conns.is_empty() {
        assert!(Instant::now() < deadline, "the exchange took too long");
        let now = Instant::now();
        server.receive(now)?;
        client.receive(now)?;
        // The applications: the client sends once connected; the server echoes each stream
        // reversed once it has all of it; the client closes once the echo is complete.
        for conn in server.conns.values_mut() {
            while let Some(event) = conn.poll() {
                if let Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) = event
                    && let Some(id) = conn.streams().accept(Dir::Bi)
                {
                    server_got.push((id, Vec::new()));
                }
            }
            for (id, got) in &mut server_got {
                let mut stream = conn.recv_stream(*id);
                let Ok(mut chunks) = stream.read(true) else {
                    continue;
                };
                let mut fin = false;
                loop {
                    match chunks.next(usize::MAX) {
                        Ok(Some(c)) => got.extend_from_slice(&c.bytes),
                        Ok(None) => {
                            fin = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let _ = chunks.finalize();
                if fin {
                    let reply: Vec<u8> = got.iter().rev().copied().collect();
                    let mut send = conn.send_stream(*id);
                    send.write_chunks(&mut [Bytes::from(reply)]).unwrap();
                    send.finish().unwrap();
                }
            }
        }
        for conn in client.conns.values_mut() {
            while let Some(event) = conn.poll() {
                match event {
                    Event::Connected => {
                        let id = conn.streams().open(Dir::Bi).unwrap();
                        let mut send = conn.send_stream(id);
                        send.write(MESSAGE).unwrap();
                        send.finish().unwrap();
                    }
                    Event::Stream(StreamEvent::Readable { id }) => {
                        let mut stream = conn.recv_stream(id);
                        let mut chunks = stream.read(true).unwrap();
                        while let Ok(Some(c)) = chunks.next(usize::MAX) {
                            echo.extend_from_slice(&c.bytes);
                        }
                        let _ = chunks.finalize();
                        if echo.len() == MESSAGE.len() {
                            conn.close(now, 0u32.into(), Bytes::from_static(b"done"));
                        }
                    }
                    Event::ConnectionLost { reason } => println!("client: closed ({reason})"),
                    _ => {}
                }
            }
        }
        server.transmit(now)?;
        client.transmit(now)?;
        client.conns.retain(|_, c| !c.is_drained());
        server.conns.retain(|_, c| !c.is_drained());
        // Wait for either socket or the earliest timer.
        let timeout = [server.next_timeout(), client.next_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_millis(100));
        tokio::select! {
            _ = server.socket.readable() => {}
            _ = client.socket.readable() => {}
            () = tokio::time::sleep_until(timeout.into()) => {}
        }
    }
    let reversed: Vec<u8> = MESSAGE.iter().rev().copied().collect();
    assert_eq!(echo, reversed, "the echo came back reversed");
    println!(
        "quinn-proto over neqo-udp: sent {:?}, got {:?}",
        String::from_utf8_lossy(MESSAGE),
        String::from_utf8_lossy(&echo)
    );
    println!("client {}", client.socket.stats());
    println!("server {}", server.socket.stats());
    Ok(())
}
