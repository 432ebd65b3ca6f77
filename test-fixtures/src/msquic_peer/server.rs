//! `msquic-peer server`.

use std::cell::{Cell, OnceCell, RefCell};
use std::ffi::c_void;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use msquic::ffi::{self, HQUIC, QUIC_STATUS};
use msquic::{
    BufferRef, Configuration, Credential, CredentialConfig, ListenerEvent, Registration,
    RegistrationConfig,
};

use super::cert::CertFiles;
use super::hq::{self, Target};
use super::raw;
use super::sender::{Body, BodySender};
use super::{Alpn, LISTENING_PREFIX};

/// Stream error code used to reset hq requests the server refuses.
pub const HQ_REQUEST_REFUSED: u64 = 0x10;
/// Stream error code used to reset malformed requests (hq and perf).
pub const BAD_REQUEST: u64 = 0x11;

/// Bidirectional streams a client may have open at once.
const PEER_BIDI_STREAMS: u16 = 1024;

/// Options of `msquic-peer server`.
#[derive(Debug)]
pub(crate) struct ServerOptions {
    pub(crate) listen: Vec<SocketAddr>,
    pub(crate) alpns: Vec<Alpn>,
    pub(crate) cert_key: Option<(PathBuf, PathBuf)>,
    pub(crate) root: Option<PathBuf>,
    pub(crate) idle_timeout_ms: u64,
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) fn run(opts: &ServerOptions) -> Result<()> {
    // Block the signals before msquic starts its threads so that they are
    // delivered only to `sigwait` below.
    let signals = block_shutdown_signals()?;

    let root = opts
        .root
        .as_ref()
        .map(|r| {
            let c = r
                .canonicalize()
                .with_context(|| format!("document root {}", r.display()))?;
            if !c.is_dir() {
                bail!("document root {} is not a directory", r.display());
            }
            Ok(Arc::new(c))
        })
        .transpose()?;
    let cert = match &opts.cert_key {
        Some((cert, key)) => CertFiles::existing(cert, key)?,
        None => CertFiles::self_signed()?,
    };

    let registration = Registration::new(
        &RegistrationConfig::new()
            .set_app_name("msquic-peer-server".into())
            .set_execution_profile(msquic::ExecutionProfile::LowLatency),
    )
    .map_err(|e| anyhow!("opening msquic registration: {}", raw::status_name(e.0)))?;
    let alpn_buffers: Vec<BufferRef> = opts
        .alpns
        .iter()
        .map(|a| BufferRef::from(a.wire()))
        .collect();
    let config = Configuration::open(&registration, &alpn_buffers, None)
        .map_err(|e| anyhow!("opening msquic configuration: {}", raw::status_name(e.0)))?;
    raw::apply_settings(
        &config,
        &raw::settings(opts.idle_timeout_ms, Some(PEER_BIDI_STREAMS)),
    )
    .map_err(|e| anyhow!(e))?;
    let credential = CredentialConfig::new().set_credential(Credential::CertificateFile(
        msquic::CertificateFile::new(
            cert.key.display().to_string(),
            cert.cert.display().to_string(),
        ),
    ));
    config.load_credential(&credential).map_err(|e| {
        anyhow!(
            "loading certificate {} / key {}: {}",
            cert.cert.display(),
            cert.key.display(),
            raw::status_name(e.0)
        )
    })?;
    drop(cert);
    let config = Arc::new(config);

    let mut listeners = Vec::new();
    for addr in &opts.listen {
        ensure_port_free(*addr)?;
        let config = Arc::clone(&config);
        let root = root.clone();
        let listener = msquic::Listener::open(&registration, move |_, event| {
            if let ListenerEvent::NewConnection { info, connection } = event {
                let alpn = Alpn::from_wire(info.negotiated_alpn);
                let ctx = Box::into_raw(Box::new(ServerConn {
                    alpn,
                    root: root.clone(),
                }));
                // SAFETY: the connection handle is live; `server_conn_cb` frees
                // `ctx` at SHUTDOWN_COMPLETE.
                unsafe {
                    raw::set_callback(
                        connection.as_raw(),
                        server_conn_cb as *mut c_void,
                        ctx.cast(),
                    );
                }
                connection.set_configuration(&config)?;
            }
            Ok(())
        })
        .map_err(|e| anyhow!("opening listener: {}", raw::status_name(e.0)))?;
        listener
            .start(&alpn_buffers, Some(&listen_addr(*addr)))
            .map_err(|e| anyhow!("cannot listen on {addr}: {}", raw::status_name(e.0)))?;
        // With port 0, msquic reports the port it bound.
        let port = listener
            .get_local_addr()
            .map(|a| a.port())
            .ok()
            .filter(|p| *p != 0)
            .unwrap_or(addr.port());
        println!("{LISTENING_PREFIX}{}", SocketAddr::new(addr.ip(), port));
        listeners.push(listener);
    }

    let signal = wait_for_signal(&signals)?;
    eprintln!("msquic-peer: received signal {signal}, shutting down");
    for listener in &listeners {
        listener.stop();
    }
    drop(listeners);
    registration.shutdown();
    drop(config);
    // Dropping the registration waits for all connections to be closed.
    drop(registration);
    Ok(())
}

/// The msquic listen address for `addr`.  msquic matches listeners by address
/// family, so an IPv6 wildcard listener would refuse IPv4 clients arriving on
/// its dual-stack socket; `[::]` therefore becomes the family-less wildcard,
/// which accepts both (like a dual-stack socket bound to `[::]`).
fn listen_addr(addr: SocketAddr) -> msquic::Addr {
    let mut quic_addr = msquic::Addr::from(addr);
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        quic_addr.ipv4.sin_family =
            libc::sa_family_t::try_from(libc::AF_UNSPEC).expect("AF_UNSPEC fits in sa_family_t");
    }
    quic_addr
}

/// msquic binds listeners with `SO_REUSEPORT`, so a second server on a busy
/// port would silently share it.  Probe with a plain socket first.
fn ensure_port_free(addr: SocketAddr) -> Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    std::net::UdpSocket::bind(addr)
        .map(drop)
        .with_context(|| format!("cannot listen on {addr}"))
}

fn shutdown_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
    }
    set
}

fn block_shutdown_signals() -> Result<libc::sigset_t> {
    let set = shutdown_sigset();
    // SAFETY: `set` is a valid, initialised sigset_t.
    let rc =
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) };
    if rc != 0 {
        bail!("pthread_sigmask: {}", std::io::Error::from_raw_os_error(rc));
    }
    Ok(set)
}

fn wait_for_signal(set: &libc::sigset_t) -> Result<i32> {
    let mut sig = 0;
    // SAFETY: `set` is a valid sigset_t and `sig` a valid out pointer.
    let rc = unsafe { libc::sigwait(set, &raw mut sig) };
    if rc != 0 {
        bail!("sigwait: {}", std::io::Error::from_raw_os_error(rc));
    }
    Ok(sig)
}

/// Per-connection context of the server.
struct ServerConn {
    alpn: Option<Alpn>,
    root: Option<Arc<PathBuf>>,
}

unsafe extern "C" fn server_conn_cb(
    conn: HQUIC,
    context: *mut c_void,
    event: *mut ffi::QUIC_CONNECTION_EVENT,
) -> QUIC_STATUS {
    // SAFETY: msquic passes a valid event for the duration of the callback.
    let event = unsafe { &*event };
    match event.Type {
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_PEER_STREAM_STARTED => {
            // SAFETY: the union member matches the event type.
            let started = unsafe { event.__bindgen_anon_1.PEER_STREAM_STARTED };
            // SAFETY: `context` is the live ServerConn installed by the listener.
            let state = unsafe { &*context.cast::<ServerConn>() };
            let unidirectional = started.Flags
                & ffi::QUIC_STREAM_OPEN_FLAGS_QUIC_STREAM_OPEN_FLAG_UNIDIRECTIONAL
                != 0;
            let kind = match state.alpn {
                _ if unidirectional => Kind::Reject,
                Some(Alpn::HqInterop) => Kind::Hq,
                Some(Alpn::Perf) => Kind::Perf,
                None => Kind::Reject,
            };
            let stream_ctx = Box::into_raw(Box::new(ServerStream::new(kind, state.root.clone())));
            // SAFETY: the stream handle is live; `server_stream_cb` frees the
            // context at the stream's SHUTDOWN_COMPLETE.
            unsafe {
                raw::set_callback(
                    started.Stream,
                    server_stream_cb as *mut c_void,
                    stream_ctx.cast(),
                );
            }
            if kind == Kind::Reject {
                // SAFETY: the stream is live; the shutdown is queued.
                drop(unsafe {
                    raw::stream_shutdown(started.Stream, raw::SHUTDOWN_ABORT, BAD_REQUEST)
                });
            }
        }
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE => {
            // SAFETY: the union member matches the event type.
            let done = unsafe { event.__bindgen_anon_1.SHUTDOWN_COMPLETE };
            if done.AppCloseInProgress() == 0 {
                // SAFETY: closing from SHUTDOWN_COMPLETE is the documented pattern.
                unsafe { raw::connection_close(conn) };
            }
            // SAFETY: no more events follow SHUTDOWN_COMPLETE; nothing else
            // references the context.
            drop(unsafe { Box::from_raw(context.cast::<ServerConn>()) });
        }
        _ => {}
    }
    ffi::QUIC_STATUS_SUCCESS
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Hq,
    Perf,
    Reject,
}

/// Per-stream context of the server.
struct ServerStream {
    kind: Kind,
    root: Option<Arc<PathBuf>>,
    request: RefCell<Vec<u8>>,
    responded: Cell<bool>,
    ideal: Cell<u64>,
    sender: OnceCell<BodySender>,
}

unsafe extern "C" fn server_stream_cb(
    stream: HQUIC,
    context: *mut c_void,
    event: *mut ffi::QUIC_STREAM_EVENT,
) -> QUIC_STATUS {
    let ctx = context.cast::<ServerStream>();
    // SAFETY: msquic passes a valid event for the duration of the callback.
    let event = unsafe { &*event };
    // SAFETY: `stream` is this callback's handle; after `true` it is not used again.
    if unsafe { raw::stream_shutdown_complete(stream, event) } {
        // SAFETY: all sends completed before SHUTDOWN_COMPLETE and no other
        // frame references the context.
        drop(unsafe { Box::from_raw(ctx) });
        return ffi::QUIC_STATUS_SUCCESS;
    }
    // SAFETY: the context lives until SHUTDOWN_COMPLETE; only shared references
    // are created, so re-entrant callbacks are sound.
    let state = unsafe { &*ctx };
    state.on_event(stream, event);
    ffi::QUIC_STATUS_SUCCESS
}

impl ServerStream {
    fn new(kind: Kind, root: Option<Arc<PathBuf>>) -> Self {
        Self {
            kind,
            root,
            request: RefCell::new(Vec::new()),
            responded: Cell::new(false),
            ideal: Cell::new(0),
            sender: OnceCell::new(),
        }
    }

    fn on_event(&self, stream: HQUIC, event: &ffi::QUIC_STREAM_EVENT) {
        match event.Type {
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_RECEIVE => {
                // SAFETY: the union member matches the event type.
                let rx = unsafe { event.__bindgen_anon_1.RECEIVE };
                for i in 0..rx.BufferCount as usize {
                    // SAFETY: msquic passes `BufferCount` valid buffers.
                    let buf = unsafe { &*rx.Buffers.add(i) };
                    // SAFETY: each buffer is valid for `Length` bytes.
                    let data = unsafe { buffer_bytes(buf) };
                    self.on_data(stream, data);
                }
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_SEND_COMPLETE => {
                // SAFETY: the union member matches the event type.
                let sc = unsafe { event.__bindgen_anon_1.SEND_COMPLETE };
                if let Some(sender) = self.sender.get() {
                    // SAFETY: only the sender issues sends on this stream.
                    unsafe { sender.complete(sc.ClientContext) };
                    if sc.Canceled == 0 {
                        self.pump(stream);
                    }
                }
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN => self.on_fin(stream),
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_PEER_SEND_ABORTED => {
                // SAFETY: the stream is live; the shutdown is queued.
                drop(unsafe { raw::stream_shutdown(stream, raw::SHUTDOWN_ABORT, 0) });
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_PEER_RECEIVE_ABORTED => {
                // SAFETY: the stream is live; the shutdown is queued.
                drop(unsafe { raw::stream_shutdown(stream, raw::SHUTDOWN_ABORT_SEND, 0) });
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_IDEAL_SEND_BUFFER_SIZE => {
                // SAFETY: the union member matches the event type.
                let bytes = unsafe { event.__bindgen_anon_1.IDEAL_SEND_BUFFER_SIZE }.ByteCount;
                self.ideal.set(bytes);
                if let Some(sender) = self.sender.get() {
                    sender.set_ideal(bytes);
                    self.pump(stream);
                }
            }
            _ => {}
        }
    }

    fn on_data(&self, stream: HQUIC, data: &[u8]) {
        if self.responded.get() {
            return;
        }
        match self.kind {
            Kind::Hq => {
                let complete = {
                    let mut req = self.request.borrow_mut();
                    req.extend_from_slice(data);
                    if req.len() > hq::MAX_REQUEST {
                        None
                    } else {
                        Some(req.contains(&b'\n'))
                    }
                };
                match complete {
                    None => self.refuse(stream, BAD_REQUEST, "request line too long"),
                    Some(true) => self.respond_hq(stream),
                    Some(false) => {}
                }
            }
            Kind::Perf => {
                let mut req = self.request.borrow_mut();
                let need = 8usize.saturating_sub(req.len());
                req.extend_from_slice(&data[..need.min(data.len())]);
                // Upload bytes beyond the header are read and discarded.
            }
            Kind::Reject => {}
        }
    }

    fn on_fin(&self, stream: HQUIC) {
        if self.responded.get() {
            return;
        }
        match self.kind {
            Kind::Hq => self.respond_hq(stream),
            Kind::Perf => {
                let header = self.request.borrow().clone();
                match <[u8; 8]>::try_from(header.as_slice()) {
                    Ok(n) => self.respond(
                        stream,
                        Body::Pattern {
                            len: u64::from_be_bytes(n),
                        },
                    ),
                    Err(_) => self.refuse(stream, BAD_REQUEST, "perf request shorter than 8 bytes"),
                }
            }
            Kind::Reject => {}
        }
    }

    fn respond_hq(&self, stream: HQUIC) {
        let request = self.request.borrow().clone();
        let body = match hq::parse_request(&request) {
            Ok(Target::Generated(len)) => Ok(Body::Pattern { len }),
            Ok(Target::File(rel)) => match &self.root {
                Some(root) => hq::open_under_root(root, rel)
                    .map(|(file, len)| Body::File { file, len })
                    .map_err(|e| (HQ_REQUEST_REFUSED, e)),
                None => Err((
                    HQ_REQUEST_REFUSED,
                    format!("no --root given, cannot serve /{rel}"),
                )),
            },
            Err(e) => Err((BAD_REQUEST, e)),
        };
        match body {
            Ok(body) => self.respond(stream, body),
            Err((code, reason)) => self.refuse(stream, code, &reason),
        }
    }

    fn respond(&self, stream: HQUIC, body: Body) {
        self.responded.set(true);
        let sender = BodySender::new(None, body);
        sender.set_ideal(self.ideal.get());
        if self.sender.set(sender).is_err() {
            unreachable!("responded at most once");
        }
        self.pump(stream);
    }

    fn pump(&self, stream: HQUIC) {
        let Some(sender) = self.sender.get() else {
            return;
        };
        // SAFETY: the stream is live and the sender lives inside the boxed
        // stream context until SHUTDOWN_COMPLETE.
        if let Err(e) = unsafe { sender.pump(stream) } {
            eprintln!("msquic-peer: response failed: {e}");
            // SAFETY: the stream is live; the shutdown is queued.
            drop(unsafe { raw::stream_shutdown(stream, raw::SHUTDOWN_ABORT, HQ_REQUEST_REFUSED) });
        }
    }

    fn refuse(&self, stream: HQUIC, code: u64, reason: &str) {
        self.responded.set(true);
        eprintln!("msquic-peer: resetting stream: {reason}");
        // SAFETY: the stream is live; the shutdown is queued.
        drop(unsafe { raw::stream_shutdown(stream, raw::SHUTDOWN_ABORT, code) });
    }
}

/// The bytes of a msquic buffer.
///
/// # Safety
/// `buf` must describe `Length` readable bytes that outlive the returned slice.
pub(crate) unsafe fn buffer_bytes(buf: &ffi::QUIC_BUFFER) -> &[u8] {
    if buf.Length == 0 {
        &[]
    } else {
        // SAFETY: forwarded from the caller's contract.
        unsafe { std::slice::from_raw_parts(buf.Buffer, buf.Length as usize) }
    }
}
