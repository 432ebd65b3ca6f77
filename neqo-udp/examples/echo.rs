//! A UDP echo server on [`neqo_udp::Socket`]: every datagram goes back to its sender, from
//! the address it came to and with its ECN codepoint, a batch per syscall both ways.
//!
//! ```text
//! cargo run --release -p neqo-udp --example echo -- 127.0.0.1:7777   # serve until Ctrl-C
//! cargo run --release -p neqo-udp --example echo -- --demo           # serve, and check it
//! ```
//!
//! `--demo` serves on 127.0.0.1 and runs a client in the same process that sends 10 000
//! datagrams of mixed sizes, in GSO runs, and checks every echo byte for byte; then both
//! print their socket statistics.

use std::{io, net::SocketAddr, time::Duration};

use neqo_udp::{Config, MAX_UDP_PAYLOAD, Socket, Transmit, TxQueue};

/// Receives a batch, queues an echo of each datagram, and sends the queue; forever.
async fn serve(socket: &Socket) -> io::Result<()> {
    let mut batch = socket.recv_batch();
    let mut queue = TxQueue::new(MAX_UDP_PAYLOAD);
    loop {
        socket.recv_async(&mut batch).await?;
        for d in batch.datagrams() {
            let mut buf = queue.take_buffer();
            buf.extend_from_slice(&d.data);
            queue.push(
                Transmit::new(d.source, buf)
                    .with_ecn(d.ecn)
                    .with_src_ip(d.destination),
            );
        }
        while !queue.is_empty() {
            match socket.flush(&mut queue) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => socket.writable().await?,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Sends 10 000 datagrams in runs of 10 and checks that every echo comes back whole.
async fn demo(server: SocketAddr) -> io::Result<()> {
    const RUNS: usize = 1000;
    let client = Socket::bind("127.0.0.1:0".parse().unwrap(), Config::default())?;
    let mut batch = client.recv_batch();
    let mut echoed = 0;
    for run in 0..RUNS {
        // Ten segments of 100 to 1300 bytes, the run's number in every byte.
        let seg = 100 + run % 1201;
        let body = vec![run as u8; seg * 10];
        let t = Transmit::new(server, &body[..]).with_segment_size(Some(seg));
        client.send_all(&[t]).await?;
        let mut got = 0;
        while got < 10 {
            tokio::time::timeout(Duration::from_secs(5), client.recv_async(&mut batch))
                .await
                .map_err(|_| io::Error::other(format!("run {run}: echoes lost")))??;
            for d in batch.datagrams() {
                assert_eq!(d.data.len(), seg, "run {run}: a datagram of the wrong size");
                assert!(
                    d.data.iter().all(|&b| b == run as u8),
                    "run {run}: wrong bytes"
                );
                got += 1;
            }
        }
        echoed += got;
    }
    println!("echo demo: {echoed} datagrams echoed, all byte-exact");
    println!("client {}", client.stats());
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> io::Result<()> {
    let arg = std::env::args().nth(1);
    let demo_mode = arg.as_deref() == Some("--demo");
    let addr: SocketAddr = match arg.as_deref() {
        None | Some("--demo") => "127.0.0.1:0".parse().unwrap(),
        Some(a) => a
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{a}: {e}")))?,
    };
    let socket = Socket::bind(addr, Config::default())?;
    let local = socket.local_addr()?;
    if demo_mode {
        tokio::select! {
            r = serve(&socket) => r?,
            r = demo(local) => r?,
        }
    } else {
        println!("echoing on {local}; Ctrl-C to stop");
        tokio::select! {
            r = serve(&socket) => r?,
            r = tokio::signal::ctrl_c() => r?,
        }
    }
    println!("server {}", socket.stats());
    Ok(())
}
