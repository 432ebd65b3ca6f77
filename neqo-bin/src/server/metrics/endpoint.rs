//! The metrics endpoint: a thread that answers `GET /metrics` on a TCP address with the
//! [`Board`]'s exposition, one request at a time, within a short timeout and request size.

use std::{
    fmt::Write as _,
    io::{self, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::Context as _;

use super::Board;

/// The most bytes of a request's head the endpoint reads.
const MAX_REQUEST: usize = 4096;

/// How long the endpoint waits for a request's head, or to write its answer.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// How long it reads what is left of a request it refused before it closes.
const LINGER: Duration = Duration::from_millis(200);

/// The endpoint: a thread answering scrapes until dropped.
#[derive(Debug)]
pub(in crate::server) struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` and serves `board` there.
    ///
    /// # Errors
    /// The bind error, naming the flag.
    pub(in crate::server) fn start(addr: SocketAddr, board: Arc<Board>) -> anyhow::Result<Self> {
        let listener =
            TcpListener::bind(addr).with_context(|| format!("--metrics {addr}: cannot listen"))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("neqo-server-metrics".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if stopped.load(Ordering::Acquire) {
                        break;
                    }
                    if let Ok(stream) = stream
                        && let Err(e) = answer(stream, &board)
                    {
                        tracing::debug!("metrics request: {e}");
                    }
                }
            })?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub(in crate::server) const fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // The thread waits in accept: one connection wakes it to see the flag.
        let _ = TcpStream::connect_timeout(&self.addr, IO_TIMEOUT);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request's head (bounded in size and time) and answers it.
fn answer(mut stream: TcpStream, board: &Board) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            respond(&mut stream, "431 Request Header Fields Too Large", "", "")?;
            // Closing with unread input would reset the connection before the client reads
            // the answer: end our side, and take a bounded part of the rest first.
            stream.shutdown(std::net::Shutdown::Write)?;
            stream.set_read_timeout(Some(LINGER))?;
            let _ = io::copy(&mut (&mut stream).take(64 << 10), &mut io::sink());
            return Ok(());
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (parts.next(), parts.next());
    match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => respond(
            &mut stream,
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            &board.render(),
        ),
        (Some(b"GET"), _) => respond(&mut stream, "404 Not Found", "", ""),
        _ => respond(&mut stream, "405 Method Not Allowed", "", ""),
    }
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !content_type.is_empty() {
        let _ = write!(head, "Content-Type: {content_type}\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}
