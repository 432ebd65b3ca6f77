//! TLS over kernel TCP: the baseline QUIC is weighed against. A blocking server (a thread per
//! connection) and a blocking client, rustls with ring, TLS 1.3 with the QUIC pair's cipher
//! suites, provider and certificate verification ([`neqo_driver::tls`]).
//!
//! The protocol is hq-interop's over one TLS connection:
//!
//! - The client sends `GET /N\r\n` ([`hq::request`]). The request is what arrives up to its
//!   first `\n` or the client's `close_notify`, at most [`hq::MAX_REQUEST`] bytes, and must
//!   arrive within [`REQUEST_TIMEOUT`] of the connection being accepted. It is read by
//!   [`hq::parse_request`], so its rules are neqo-server's.
//! - The server answers `/N` with N bytes of [`pattern`], then `close_notify`, then closes.
//!   Any other request (anything hq refuses, and any path but `/N`: no files are served here)
//!   is logged and the connection reset (a TCP RST, no `close_notify`), so that a client
//!   cannot take a refusal for an empty body.
//! - The client checks every byte against the pattern and the body's exact length: a body
//!   longer or shorter than N, or one that ends without `close_notify`, is an error.
//!
//! Both sides avoid copies a tuned TCP+TLS peer would not make: the server writes 256 KiB of
//! plaintext at a time through rustls's buffered API (each record's plaintext copied once,
//! into the record it is encrypted in; 16 records per `writev`); the client uses rustls's
//! unbuffered API and checks the body where it is decrypted ([`download`]).

use std::{
    fmt,
    io::{self, BufReader, Read, Write},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use neqo_driver::tls::{self, CipherSuite, Identity, Trust};
use neqo_protocols::{
    hq::{self, Target},
    pattern,
};
use rustls::{
    ServerConnection,
    client::UnbufferedClientConnection,
    pki_types::ServerName,
    unbuffered::{
        AppDataRecord, ConnectionState, EncodeError, EncryptError, InsufficientSizeError,
        UnbufferedStatus,
    },
};

/// How long a client has, from being accepted, to complete its handshake and its request,
/// unless the server is told otherwise ([`Server::with_request_timeout`]).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long either side waits for the other to take or send anything once the request is in.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a stopping server waits for the connections it is serving to end.
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// Connections a server serves at once unless told otherwise; more are reset.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100;

/// The client's receive buffer, and the server's socket read buffer (rustls's buffered API
/// reads at most 4 KiB from its transport per call: unbuffered, a record would take several
/// syscalls).
const READ_BUFFER: usize = 256 * 1024;

/// Plaintext per write, and the limit of rustls's outgoing buffer: 16 records, sent with one
/// `writev`.
const WRITE_CHUNK: usize = pattern::MAX_SLICE;

/// A TCP stream with buffered reads, for the server's rustls connection, and a deadline for
/// every read until it is lifted: rustls may read many times within one call (a handshake
/// trickled in byte by byte), so a timeout per read would not bound the whole.
struct Io<'a> {
    rd: BufReader<&'a TcpStream>,
    wr: &'a TcpStream,
    deadline: Option<Instant>,
}

impl<'a> Io<'a> {
    fn new(tcp: &'a TcpStream, deadline: Instant) -> Self {
        Self {
            rd: BufReader::with_capacity(READ_BUFFER, tcp),
            wr: tcp,
            deadline: Some(deadline),
        }
    }

    /// No deadline from now on: reads wait [`IDLE_TIMEOUT`] each.
    fn lift_deadline(&mut self) -> io::Result<()> {
        self.deadline = None;
        self.wr.set_read_timeout(Some(IDLE_TIMEOUT))
    }
}

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(deadline) = self.deadline
            && self.rd.buffer().is_empty()
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.wr.set_read_timeout(Some(left))?;
        }
        self.rd.read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.wr.write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.wr.write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.wr.flush()
    }
}

/// What a server has done, counted as connections end.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests answered in full.
    pub served: AtomicU64,
    /// Requests refused: malformed, not `/N`, too slow, or over the connection limit.
    pub refused: AtomicU64,
    /// Connections that failed otherwise (handshake, I/O, the client going away).
    pub failed: AtomicU64,
    /// Body bytes sent in full responses.
    pub bytes: AtomicU64,
    /// Connections being served now (each counted above once it ends).
    pub open: AtomicUsize,
}

impl Counters {
    /// Waits until no connection is being served, at most `within`; whether none is.
    pub fn wait_idle(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.open.load(Ordering::Acquire) == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// `served S (B bytes), refused R, failed F`.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "served {} ({} bytes), refused {}, failed {}",
            self.served.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed)
        )
    }
}

/// Why a connection was not served.
#[derive(Debug)]
enum ServeError {
    /// A request refused, and why.
    Refused(String),
    /// The handshake or the connection failed.
    Failed(io::Error),
}

impl From<io::Error> for ServeError {
    fn from(e: io::Error) -> Self {
        Self::Failed(e)
    }
}

/// A listening TCP+TLS server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    max_connections: usize,
    request_timeout: Duration,
    counters: Arc<Counters>,
}

impl Server {
    /// Listens on `addr` with `identity`, accepting `suites`, serving at most
    /// `max_connections` at once.
    ///
    /// # Errors
    /// No suite, a key that does not fit the certificate, or an address it cannot bind.
    pub fn bind(
        addr: SocketAddr,
        identity: &Identity,
        suites: &[CipherSuite],
        max_connections: usize,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            max_connections > 0,
            "at least one connection must be allowed"
        );
        let config = tls::stream_server_config(identity, suites)?;
        let listener =
            TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
        Ok(Self {
            listener,
            config,
            max_connections,
            request_timeout: REQUEST_TIMEOUT,
            counters: Arc::default(),
        })
    }

    /// Gives clients `timeout` instead of [`REQUEST_TIMEOUT`] from the accept to the end of
    /// their request.
    #[must_use]
    pub const fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Where it listens.
    ///
    /// # Errors
    /// When the socket cannot say.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Its counters, updated as connections end.
    #[must_use]
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// Accepts connections, each served on its own thread, until `stop` is set (it is looked
    /// at after each accept: connect once to wake it).
    pub fn run(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            let (tcp, peer) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors or memory: the next accept may go better, but not at
                    // once.
                    eprintln!("tcp-tls server: accept: {e}");
                    thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if stop.load(Ordering::Acquire) {
                break;
            }
            let open = &self.counters.open;
            if open.fetch_add(1, Ordering::AcqRel) >= self.max_connections {
                open.fetch_sub(1, Ordering::AcqRel);
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "tcp-tls server: {peer}: refused: {} connections open already",
                    self.max_connections
                );
                reset(&tcp);
                continue;
            }
            let (config, counters) = (Arc::clone(&self.config), Arc::clone(&self.counters));
            let timeout = self.request_timeout;
            let spawned = thread::Builder::new()
                .name(format!("tcp-tls {peer}"))
                .spawn(move || {
                    serve_logged(&tcp, peer, (config, timeout), &counters);
                    drop(tcp);
                    counters.open.fetch_sub(1, Ordering::AcqRel);
                });
            if let Err(e) = spawned {
                open.fetch_sub(1, Ordering::AcqRel);
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                eprintln!("tcp-tls server: {peer}: no thread for it: {e}");
            }
        }
    }
}

/// Ends a connection with a TCP RST: the client sees a reset, not a clean (empty) end.
fn reset(tcp: &TcpStream) {
    let _ = socket2::SockRef::from(tcp).set_linger(Some(Duration::ZERO));
}

fn serve_logged(
    tcp: &TcpStream,
    peer: SocketAddr,
    (config, timeout): (Arc<rustls::ServerConfig>, Duration),
    c: &Counters,
) {
    match serve(tcp, config, timeout) {
        Ok(n) => {
            c.served.fetch_add(1, Ordering::Relaxed);
            c.bytes.fetch_add(n, Ordering::Relaxed);
        }
        Err(ServeError::Refused(why)) => {
            c.refused.fetch_add(1, Ordering::Relaxed);
            eprintln!("tcp-tls server: {peer}: refused: {why}");
            reset(tcp);
        }
        Err(ServeError::Failed(e)) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
            eprintln!("tcp-tls server: {peer}: failed: {e}");
        }
    }
}

/// Serves one connection, its request due within `timeout`; returns the body bytes sent.
fn serve(
    tcp: &TcpStream,
    config: Arc<rustls::ServerConfig>,
    timeout: Duration,
) -> Result<u64, ServeError> {
    let deadline = Instant::now() + timeout;
    tcp.set_nodelay(true)?;
    tcp.set_write_timeout(Some(IDLE_TIMEOUT))?;
    let mut conn = ServerConnection::new(config).map_err(io::Error::other)?;
    conn.set_buffer_limit(Some(WRITE_CHUNK));
    let mut io = Io::new(tcp, deadline);
    let mut tls = rustls::Stream::new(&mut conn, &mut io);
    let request = read_request(&mut tls, timeout)?;
    tls.sock.lift_deadline()?;
    let size = match hq::parse_request(&request) {
        Ok(Target::Generated(n)) => n,
        Ok(Target::File(path)) => {
            return Err(ServeError::Refused(format!(
                "{path:?}: only /N is served here"
            )));
        }
        Err(e) => return Err(ServeError::Refused(e.to_string())),
    };
    let mut offset = 0;
    while offset < size {
        let piece = pattern::slice(offset, size - offset);
        tls.write_all(piece)?;
        offset += piece.len() as u64;
    }
    conn.send_close_notify();
    while conn.wants_write() {
        conn.write_tls(&mut io)?;
    }
    tcp.shutdown(Shutdown::Write)?;
    Ok(size)
}

/// The request: what arrives up to the first `\n` (included) or the client's
/// `close_notify`, cut short once it is longer than [`hq::MAX_REQUEST`] (which
/// [`hq::parse_request`] then refuses). A read past the transport's deadline (or its read
/// timeout: `WouldBlock` on Unix) means the client was too slow.
fn read_request(tls: &mut impl Read, timeout: Duration) -> Result<Vec<u8>, ServeError> {
    let mut request = Vec::new();
    let mut buf = [0; 1024];
    while request.len() <= hq::MAX_REQUEST {
        let n = match tls.read(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ServeError::Refused(format!(
                    "no complete request within {:?}",
                    timeout
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break;
        }
        let start = request.len();
        request.extend_from_slice(&buf[..n]);
        if let Some(i) = request[start..].iter().position(|&b| b == b'\n') {
            request.truncate(start + i + 1);
            break;
        }
    }
    Ok(request)
}

/// A server on its own thread, for benchmarks and tests: 127.0.0.1, a self-signed
/// certificate, every suite.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    identity: Identity,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<thread::JoinHandle<()>>,
}

impl ServerHandle {
    /// Starts it.
    ///
    /// # Errors
    /// When the certificate cannot be made or the socket bound.
    pub fn start() -> anyhow::Result<Self> {
        let identity = Identity::self_signed()?;
        let server = Server::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &identity,
            &CipherSuite::ALL,
            DEFAULT_MAX_CONNECTIONS,
        )?;
        let addr = server.local_addr()?;
        let counters = server.counters();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("tcp-tls server".to_owned())
            .spawn(move || server.run(&flag))?;
        Ok(Self {
            addr,
            identity,
            stop,
            counters,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    #[must_use]
    pub const fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A client config that trusts this server's certificate (only), offering `suites`.
    ///
    /// # Errors
    /// No suite.
    pub fn client_config(
        &self,
        suites: &[CipherSuite],
    ) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        Ok(tls::stream_client_config(
            &Trust::Certs(self.identity.chain.clone()),
            suites,
        )?)
    }

    /// Its counters.
    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Stops accepting, waits up to [`STOP_WAIT`] for the connections being served, and
    /// returns the counters.
    #[must_use]
    pub fn stop(mut self) -> Arc<Counters> {
        self.shut();
        Arc::clone(&self.counters)
    }

    fn shut(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            // Wakes the accept; if nothing can connect, the thread is left behind.
            if TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).is_ok() {
                let _ = t.join();
            }
            self.counters.wait_idle(STOP_WAIT);
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shut();
    }
}

/// What a download did.
#[derive(Debug, Clone)]
pub struct Download {
    /// Body bytes received (all verified).
    pub bytes_received: u64,
    /// Request bytes sent.
    pub bytes_sent: u64,
    /// From the start of the connect to the server's `close_notify`.
    pub seconds: f64,
    /// From the start of the connect to the handshake's end.
    pub handshake: Duration,
    /// The negotiated cipher suite, e.g. `TLS13_AES_128_GCM_SHA256`.
    pub cipher_suite: String,
    /// TCP's maximum segment size on the connection, where it can be read.
    pub mss: Option<u32>,
}

impl Download {
    /// (received + sent) bits per second / 1e9, as neqo-client counts.
    #[must_use]
    pub fn gbps(&self) -> f64 {
        #[expect(clippy::cast_precision_loss, reason = "a rate")]
        let bits = (self.bytes_received + self.bytes_sent) as f64 * 8.0;
        if self.seconds > 0.0 {
            bits / self.seconds / 1e9
        } else {
            0.0
        }
    }

    /// The line the client prints.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "received {} B, sent {} B in {:.3} s = {:.3} Gbit/s; handshake {:.2} ms; {}",
            self.bytes_received,
            self.bytes_sent,
            self.seconds,
            self.gbps(),
            self.handshake.as_secs_f64() * 1e3,
            self.cipher_suite
        )
    }

    /// The JSON report (`--json`): the keys neqo-client's report has for the same figures.
    #[must_use]
    pub fn report(&self) -> neqo_report::TcpTlsReport {
        neqo_report::TcpTlsReport {
            bytes_received: self.bytes_received,
            bytes_sent: self.bytes_sent,
            requests: 1,
            connections: 1,
            seconds: self.seconds,
            gbps: self.gbps(),
            handshake_ms: self.handshake.as_secs_f64() * 1e3,
            cipher_suite: self.cipher_suite.clone(),
            tcp_mss: self.mss,
        }
    }
}

/// Why a download failed.
#[derive(Debug)]
pub enum DownloadError {
    /// The TCP connect failed.
    Connect(io::Error),
    /// The handshake failed.
    Handshake(io::Error),
    /// The connection failed after the handshake, `received` body bytes in.
    Io { received: u64, error: io::Error },
    /// Body byte `offset` is not the pattern's.
    Mismatch { offset: u64 },
    /// The body went on past `expected` bytes.
    Long { expected: u64 },
    /// The body ended cleanly after `received` of `expected` bytes.
    Short { received: u64, expected: u64 },
}

impl fmt::Display for DownloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect(e) => write!(f, "connect: {e}"),
            Self::Handshake(e) => write!(f, "TLS handshake: {e}"),
            Self::Io { received, error } if error.kind() == io::ErrorKind::ConnectionReset => {
                write!(
                    f,
                    "connection reset by the server after {received} body bytes (request refused?)"
                )
            }
            Self::Io { received, error } if error.kind() == io::ErrorKind::UnexpectedEof => write!(
                f,
                "connection closed without close_notify after {received} body bytes (truncated)"
            ),
            Self::Io { received, error } => {
                write!(f, "after {received} body bytes: {error}")
            }
            Self::Mismatch { offset } => {
                write!(f, "body byte {offset} differs from the pattern")
            }
            Self::Long { expected } => write!(f, "body longer than the {expected} bytes asked for"),
            Self::Short { received, expected } => {
                write!(f, "body ended after {received} of {expected} bytes")
            }
        }
    }
}

impl std::error::Error for DownloadError {}

/// Downloads `/size` from `addr` (named `name` for the certificate check) and verifies it.
///
/// With rustls's unbuffered API: the socket is read straight into one buffer, records are
/// decrypted where they lie and the body is checked there, so no byte is copied after the
/// kernel's copy (the buffered API copies each record's plaintext twice more).
///
/// # Errors
/// Any failure, and any body that is not exactly `size` pattern bytes.
pub fn download(
    addr: SocketAddr,
    name: ServerName<'static>,
    size: u64,
    config: Arc<rustls::ClientConfig>,
) -> Result<Download, DownloadError> {
    let t0 = Instant::now();
    let tcp = TcpStream::connect_timeout(&addr, IDLE_TIMEOUT).map_err(DownloadError::Connect)?;
    let setup = || {
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(IDLE_TIMEOUT))?;
        tcp.set_write_timeout(Some(IDLE_TIMEOUT))
    };
    setup().map_err(DownloadError::Connect)?;
    let mss = segment_size(&tcp);
    let mut conn = UnbufferedClientConnection::new(config, name)
        .map_err(|e| DownloadError::Handshake(io::Error::other(e)))?;
    let request = hq::request(&format!("/{size}"));
    let mut incoming = vec![0; READ_BUFFER];
    let mut used = 0;
    let mut outgoing = Vec::new();
    let mut handshake = None;
    let mut sent = false;
    let mut received = 0u64;
    // Before the handshake's end a failure is the handshake's, after it the connection's.
    let fail = |handshake: Option<Duration>, received, error| match handshake {
        None => DownloadError::Handshake(error),
        Some(_) => DownloadError::Io { received, error },
    };
    let tls_error = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
    loop {
        let UnbufferedStatus { mut discard, state } =
            conn.process_tls_records(&mut incoming[..used]);
        let state = state.map_err(|e| fail(handshake, received, tls_error(e)))?;
        let mut read_more = false;
        match state {
            ConnectionState::ReadTraffic(mut records) => {
                while let Some(record) = records.next_record() {
                    let AppDataRecord {
                        discard: d,
                        payload,
                    } = record.map_err(|e| fail(handshake, received, tls_error(e)))?;
                    discard += d;
                    let n = payload.len() as u64;
                    if received + n > size {
                        return Err(DownloadError::Long { expected: size });
                    }
                    if let Some(offset) = pattern::first_mismatch(received, payload) {
                        return Err(DownloadError::Mismatch { offset });
                    }
                    received += n;
                }
            }
            ConnectionState::EncodeTlsData(mut state) => {
                let at = outgoing.len();
                outgoing.resize(at + 4096, 0);
                let n = loop {
                    match state.encode(&mut outgoing[at..]) {
                        Ok(n) => break n,
                        Err(EncodeError::InsufficientSize(InsufficientSizeError {
                            required_size,
                        })) => outgoing.resize(at + required_size, 0),
                        Err(e) => return Err(fail(handshake, received, io::Error::other(e))),
                    }
                };
                outgoing.truncate(at + n);
            }
            ConnectionState::TransmitTlsData(state) => {
                (&tcp)
                    .write_all(&outgoing)
                    .map_err(|e| fail(handshake, received, e))?;
                outgoing.clear();
                state.done();
            }
            ConnectionState::BlockedHandshake => read_more = true,
            ConnectionState::WriteTraffic(mut state) => {
                if handshake.is_none() {
                    handshake = Some(t0.elapsed());
                }
                if sent {
                    read_more = true;
                } else {
                    let mut out = vec![0; request.len() + 1024];
                    let n = loop {
                        match state.encrypt(request.as_bytes(), &mut out) {
                            Ok(n) => break n,
                            Err(EncryptError::InsufficientSize(InsufficientSizeError {
                                required_size,
                            })) => out.resize(required_size, 0),
                            Err(e) => return Err(fail(handshake, 0, io::Error::other(e))),
                        }
                    };
                    (&tcp)
                        .write_all(&out[..n])
                        .map_err(|e| fail(handshake, 0, e))?;
                    sent = true;
                }
            }
            ConnectionState::PeerClosed | ConnectionState::Closed => break,
            _ => {
                return Err(fail(
                    handshake,
                    received,
                    io::Error::other("unexpected TLS connection state"),
                ));
            }
        }
        if discard > 0 {
            incoming.copy_within(discard..used, 0);
            used -= discard;
        }
        if read_more {
            if used == incoming.len() {
                let e = io::Error::other("a TLS message larger than the receive buffer");
                return Err(fail(handshake, received, e));
            }
            match (&tcp).read(&mut incoming[used..]) {
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::UnexpectedEof, "closed by the server");
                    return Err(fail(handshake, received, e));
                }
                Ok(n) => used += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(fail(handshake, received, e)),
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    if received < size {
        return Err(DownloadError::Short {
            received,
            expected: size,
        });
    }
    let cipher_suite = conn.negotiated_cipher_suite().map_or_else(
        || "unknown suite".to_owned(),
        |s| format!("{:?}", s.suite()),
    );
    Ok(Download {
        bytes_received: received,
        bytes_sent: request.len() as u64,
        seconds,
        handshake: handshake.unwrap_or_default(),
        cipher_suite,
        mss,
    })
}

/// TCP's maximum segment size on `tcp` (`TCP_MAXSEG`).
#[cfg(unix)]
fn segment_size(tcp: &TcpStream) -> Option<u32> {
    socket2::SockRef::from(tcp).tcp_mss().ok()
}

/// Not read where `TCP_MAXSEG` is not offered.
#[cfg(not(unix))]
const fn segment_size(_: &TcpStream) -> Option<u32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn localhost() -> ServerName<'static> {
        ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())
    }

    #[test]
    fn downloads_are_verified_and_counted() {
        let server = ServerHandle::start().unwrap();
        let config = server.client_config(&CipherSuite::ALL).unwrap();
        for size in [0, 1, 255, 16 * 1024 + 1, (1 << 20) + 7] {
            let d = download(server.addr(), localhost(), size, Arc::clone(&config)).unwrap();
            assert_eq!(d.bytes_received, size);
            assert_eq!(d.bytes_sent, hq::request(&format!("/{size}")).len() as u64);
            assert_eq!(d.cipher_suite, "TLS13_AES_128_GCM_SHA256");
            assert!(d.summary().contains("TLS13_AES_128_GCM_SHA256"));
            // Loopback's MTU less the IP and TCP headers and options, whatever the host set the
            // MTU to (1500 or its default 64 KiB): read, and within those.
            #[cfg(unix)]
            assert!(
                d.mss.is_some_and(|m| (1400..65_536).contains(&m)),
                "{:?}",
                d.mss
            );
        }
        let c = server.stop();
        assert_eq!(c.served.load(Ordering::Relaxed), 5);
        assert_eq!(
            c.bytes.load(Ordering::Relaxed),
            1 + 255 + 16 * 1024 + 1 + (1 << 20) + 7
        );
        assert_eq!(c.refused.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_client_picks_the_suite() {
        let server = ServerHandle::start().unwrap();
        for (suite, name) in [
            (CipherSuite::Aes256gcm, "TLS13_AES_256_GCM_SHA384"),
            (CipherSuite::Chacha20, "TLS13_CHACHA20_POLY1305_SHA256"),
        ] {
            let config = server.client_config(&[suite]).unwrap();
            let d = download(server.addr(), localhost(), 1000, config).unwrap();
            assert_eq!(d.cipher_suite, name);
        }
    }

    #[test]
    fn an_untrusted_certificate_fails_the_handshake() {
        let server = ServerHandle::start().unwrap();
        let other = Identity::self_signed().unwrap();
        let config =
            tls::stream_client_config(&Trust::Certs(other.chain), &CipherSuite::ALL).unwrap();
        let e = download(server.addr(), localhost(), 10, config).unwrap_err();
        assert!(matches!(e, DownloadError::Handshake(_)), "{e}");
        let nobody = tls::stream_client_config(&Trust::Nobody, &CipherSuite::ALL).unwrap();
        let e = download(server.addr(), localhost(), 10, nobody).unwrap_err();
        assert!(matches!(e, DownloadError::Handshake(_)), "{e}");
    }
}
