//! `msquic-peer server`.

use std::cell::{Cell, OnceCell, RefCell};
use std::ffi::c_void;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use msquic::ffi::{self, HQUIC, QUIC_STATUS};
use msquic::{
    BufferRef, Configuration, Credential, CredentialConfig, ListenerEvent, Registration,
    RegistrationConfig,
};
use neqo_protocols::{
    hq::{self, Target},
    perf,
};

use super::cert::CertFiles;
use super::raw;
use super::sender::{Body, BodySender};
use super::totals::Totals;
use super::{Alpn, LISTENING_PREFIX};
use neqo_report::Report as _;

/// Options of `msquic-peer server`.
#[derive(Debug)]
pub(crate) struct ServerOptions {
    pub(crate) listen: Vec<SocketAddr>,
    pub(crate) alpns: Vec<Alpn>,
    pub(crate) cert_key: Option<(PathBuf, PathBuf)>,
    pub(crate) root: Option<PathBuf>,
    /// Timeouts and ECN.
    pub(crate) tuning: raw::Tuning,
    /// Bidirectional streams a client may have open at once.
    pub(crate) max_streams: u16,
    /// Send every new client a Retry.
    pub(crate) retry_always: bool,
    /// Where to write the connections' totals at exit ([`Totals`]).
    pub(crate) json: Option<PathBuf>,
}

/// The totals of the connections that ended.
static TOTALS: Totals = Totals::new();

/// Runs the server until SIGINT or SIGTERM.
pub(crate) fn run(opts: &ServerOptions) -> Result<()> {
    // Block the signals before msquic starts its threads so that they are
    // delivered only to `sigwait` below.
    let signals = block_shutdown_signals()?;

    let root = opts
        .root
        .as_ref()
        .map(|r| {
            hq::canonical_root(r)
                .map(Arc::from)
                .with_context(|| format!("document root {}", r.display()))
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
    let mut settings = raw::settings(opts.tuning, Some(opts.max_streams));
    raw::offer_resumption(&mut settings);
    raw::apply_settings(&config, &settings).map_err(|e| anyhow!(e))?;
    if opts.retry_always {
        raw::retry_always().map_err(|e| anyhow!(e))?;
    }
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
                    v6: info.remote_address.as_socket().is_some_and(|a| a.is_ipv6()),
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
    if let Some(path) = &opts.json {
        let text = TOTALS.report().to_json().expect("plain numbers");
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
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
    /// Canonical ([`hq::canonical_root`]).
    root: Option<Arc<Path>>,
    /// Whether the client's address is IPv6 (msquic's path MTU counts the IP header).
    v6: bool,
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
            let request = match state.alpn {
                _ if unidirectional => Request::Reject,
                Some(Alpn::HqInterop) => Request::Hq(Vec::new()),
                Some(Alpn::Perf) => Request::Perf(perf::RequestReader::default()),
                None => Request::Reject,
            };
            let reject = matches!(request, Request::Reject);
            let stream_ctx =
                Box::into_raw(Box::new(ServerStream::new(request, state.root.clone())));
            // SAFETY: the stream handle is live; `server_stream_cb` frees the
            // context at the stream's SHUTDOWN_COMPLETE.
            unsafe {
                raw::set_callback(
                    started.Stream,
                    server_stream_cb as *mut c_void,
                    stream_ctx.cast(),
                );
            }
            if reject {
                // SAFETY: the stream is live; the shutdown is queued.
                drop(unsafe {
                    raw::stream_shutdown(started.Stream, raw::SHUTDOWN_ABORT, hq::BAD_REQUEST)
                });
            }
        }
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_CONNECTED => {
            // A ticket for the client's next connection (resumption, 0-RTT); a failure only
            // means it will not resume.
            // SAFETY: `conn` is live for the callback.
            let _ = unsafe { raw::send_resumption_ticket(conn) };
        }
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE => {
            // SAFETY: the union member matches the event type.
            let done = unsafe { event.__bindgen_anon_1.SHUTDOWN_COMPLETE };
            // SAFETY: `context` is the live ServerConn installed by the listener.
            let v6 = unsafe { &*context.cast::<ServerConn>() }.v6;
            // SAFETY: the handle is live until it is closed below.
            if let Some(stats) = unsafe { raw::statistics(conn) } {
                TOTALS.add(&stats, v6);
            }
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

/// The request bytes of a stream, as its protocol reads them.
enum Request {
    /// The bytes up to the first newline (or the FIN).
    Hq(Vec<u8>),
    Perf(perf::RequestReader),
    /// A stream the server does not serve (unidirectional, or no protocol negotiated), reset
    /// when it opens.
    Reject,
}

/// What a complete request is answered with: a body, or a reset with this code and reason.
type Answer = Result<Body, (u64, String)>;

/// The reset for an hq request refused with `e`.
fn refusal(e: &hq::Error) -> (u64, String) {
    (e.code(), e.to_string())
}

/// Per-stream context of the server.
struct ServerStream {
    /// Canonical ([`hq::canonical_root`]).
    root: Option<Arc<Path>>,
    request: RefCell<Request>,
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
    fn new(request: Request, root: Option<Arc<Path>>) -> Self {
        Self {
            root,
            request: RefCell::new(request),
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
                // SAFETY: the union member matches the event type.
                let code = unsafe { event.__bindgen_anon_1.PEER_SEND_ABORTED }.ErrorCode;
                // RFC 9000 section 3.5: the peer gave up on its request (RESET_STREAM), so
                // the response is not wanted either: reset with the peer's code. msquic leaves
                // the send direction open by itself, and the stream, and the peer's credit for
                // it, would stay taken until the connection ends.
                self.cancel(stream, code);
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_PEER_RECEIVE_ABORTED => {
                // SAFETY: the union member matches the event type.
                let code = unsafe { event.__bindgen_anon_1.PEER_RECEIVE_ABORTED }.ErrorCode;
                // RFC 9000 section 3.5: STOP_SENDING is answered with RESET_STREAM carrying
                // its code (msquic's own reset after this event would say NO_ERROR, see
                // `raw::abort_send`); a request still arriving (a perf upload) is not wanted
                // either.
                self.cancel(stream, code);
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
        if let Some(answer) = self.take(data) {
            self.answer(stream, answer);
        }
    }

    fn on_fin(&self, stream: HQUIC) {
        if self.responded.get() {
            return;
        }
        if let Some(answer) = self.at_fin() {
            self.answer(stream, answer);
        }
    }

    /// Takes request bytes; the answer once the request is complete.
    ///
    /// Decided with the request borrowed and acted on by the caller, after the borrow: sending
    /// may re-enter the stream callback.
    fn take(&self, data: &[u8]) -> Option<Answer> {
        match &mut *self.request.borrow_mut() {
            Request::Hq(request) => {
                // Checked before it grows so that a long request costs no more memory.
                if request.len() + data.len() > hq::MAX_REQUEST {
                    Some(Err(refusal(&hq::Error::TooLong)))
                } else {
                    request.extend_from_slice(data);
                    // Answered at the first newline (none arrived before), not at the FIN.
                    data.contains(&b'\n').then(|| self.hq_answer(request))
                }
            }
            // Upload bytes beyond the header are counted and dropped.
            Request::Perf(reader) => {
                reader.push(data);
                None
            }
            Request::Reject => None,
        }
    }

    /// The answer at the request's FIN, unless the stream is rejected.
    fn at_fin(&self) -> Option<Answer> {
        match &*self.request.borrow() {
            Request::Hq(request) => Some(self.hq_answer(request)),
            Request::Perf(reader) => Some(
                reader
                    .response_len()
                    .map(|len| Body::Pattern { len })
                    .map_err(|e| (hq::BAD_REQUEST, e.to_string())),
            ),
            Request::Reject => None,
        }
    }

    /// The answer to a complete hq request (opening its file, if it asks for one).
    fn hq_answer(&self, request: &[u8]) -> Answer {
        match hq::parse_request(request).map_err(|e| refusal(&e))? {
            Target::Generated(len) => Ok(Body::Pattern { len }),
            Target::File(path) => hq::open(self.root.as_deref(), path)
                .map(|(file, len)| Body::File { file, len })
                .map_err(|e| (e.code(), format!("{path:?}: {e}"))),
        }
    }

    fn answer(&self, stream: HQUIC, answer: Answer) {
        match answer {
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
            drop(unsafe { raw::stream_shutdown(stream, raw::SHUTDOWN_ABORT, hq::REFUSED) });
        }
    }

    /// The peer cancelled the stream: nothing more is answered or sent, and both directions
    /// are closed with `code`.
    fn cancel(&self, stream: HQUIC, code: u64) {
        self.responded.set(true);
        // SAFETY: called from this stream's callback (`on_event`) with its live handle; the
        // inline abort re-enters the callback only with SEND_COMPLETE, which touches the
        // sender's cells, and never frees the context.
        unsafe { raw::cancel_stream(stream, code) };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hq_stream(root: Option<&Path>) -> ServerStream {
        ServerStream::new(Request::Hq(Vec::new()), root.map(Arc::from))
    }

    /// The answer to `request`, sent in one piece and then its FIN.
    fn hq_request(root: Option<&Path>, request: &[u8]) -> Answer {
        let stream = hq_stream(root);
        stream
            .take(request)
            .unwrap_or_else(|| stream.at_fin().expect("answered at the FIN"))
    }

    fn generated(answer: &Answer) -> Option<u64> {
        match answer {
            Ok(Body::Pattern { len }) => Some(*len),
            _ => None,
        }
    }

    fn file_len(answer: &Answer) -> Option<u64> {
        match answer {
            Ok(Body::File { len, .. }) => Some(*len),
            _ => None,
        }
    }

    fn code(answer: &Answer) -> Option<u64> {
        answer.as_ref().err().map(|(code, _)| *code)
    }

    /// A canonical root holding `sub/ok.txt`, `a/b.txt`, `12a` and a link to a secret beside
    /// the root; removed on drop.
    struct Tree {
        dir: PathBuf,
        root: PathBuf,
    }

    impl Tree {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("msquic-peer-hq-test-{tag}-{}", std::process::id()));
            drop(std::fs::remove_dir_all(&dir));
            let root = dir.join("root");
            std::fs::create_dir_all(root.join("sub")).unwrap();
            std::fs::create_dir_all(root.join("a")).unwrap();
            std::fs::write(root.join("sub/ok.txt"), b"hello").unwrap();
            std::fs::write(root.join("a/b.txt"), b"b").unwrap();
            std::fs::write(root.join("12a"), b"twelve a").unwrap();
            std::fs::write(dir.join("secret.txt"), b"secret").unwrap();
            std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("link")).unwrap();
            let root = hq::canonical_root(&root).unwrap();
            Self { dir, root }
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            drop(std::fs::remove_dir_all(&self.dir));
        }
    }

    #[test]
    fn parses_requests() {
        let tree = Tree::new("parse");
        let root = Some(tree.root.as_path());
        assert_eq!(generated(&hq_request(root, b"GET /123\r\n")), Some(123));
        assert_eq!(generated(&hq_request(root, b"GET /0")), Some(0));
        assert_eq!(file_len(&hq_request(root, b"GET /a/b.txt\r\n")), Some(1));
        assert_eq!(file_len(&hq_request(root, b"GET /12a\n")), Some(8));
        assert_eq!(code(&hq_request(root, b"GET /\r\n")), Some(hq::REFUSED));
        // Without a root, only `/N` is served.
        assert_eq!(generated(&hq_request(None, b"GET /123\r\n")), Some(123));
        assert_eq!(
            code(&hq_request(None, b"GET /a/b.txt\r\n")),
            Some(hq::REFUSED)
        );
        for bad in [
            &b"POST /1\r\n"[..],
            b"GET\r\n",
            b"GET x\r\n",
            b"GET /99999999999999999999999\r\n",
            b"\xff\xfe",
        ] {
            assert_eq!(
                code(&hq_request(root, bad)),
                Some(hq::BAD_REQUEST),
                "{}",
                bad.escape_ascii()
            );
        }
    }

    #[test]
    fn refuses_escapes() {
        let tree = Tree::new("escapes");
        let root = Some(tree.root.as_path());
        let answer = |path: &str| hq_request(root, hq::request(path).as_bytes());
        assert_eq!(file_len(&answer("/sub/ok.txt")), Some(5));
        let absolute = format!("/{}", tree.dir.join("secret.txt").display());
        for bad in [
            "/../secret.txt",
            "/sub/../../secret.txt",
            "//etc/passwd",
            &absolute,
            "/link",
            "/sub",
            "/",
            "/nope",
        ] {
            assert_eq!(
                code(&answer(bad)),
                Some(hq::REFUSED),
                "{bad} must be refused"
            );
        }
    }

    /// An hq request is answered at its first newline; a longer one than `MAX_REQUEST` is
    /// refused as it arrives.
    #[test]
    fn hq_requests_are_answered_at_the_newline() {
        let stream = hq_stream(None);
        assert!(stream.take(b"GET /1").is_none());
        assert!(stream.take(b"0").is_none());
        assert_eq!(generated(&stream.take(b"0\r\n").unwrap()), Some(100));

        // Refused at its first byte too many, newline or not.
        let long = hq_stream(None);
        assert!(long.take(&[b' '; hq::MAX_REQUEST]).is_none());
        assert_eq!(code(&long.take(b" ").unwrap()), Some(hq::BAD_REQUEST));

        // Exactly MAX_REQUEST bytes is still a request.
        let fits = hq_stream(None);
        let mut request = b"GET /7".to_vec();
        request.resize(hq::MAX_REQUEST - 1, b' ');
        assert!(fits.take(&request).is_none());
        assert_eq!(generated(&fits.take(b"\n").unwrap()), Some(7));
    }

    #[test]
    fn perf_requests_are_answered_at_the_fin() {
        let header = perf::request_header(1000);
        let stream = ServerStream::new(Request::Perf(perf::RequestReader::default()), None);
        assert!(stream.take(&header[..5]).is_none());
        assert!(stream.take(&header[5..]).is_none());
        assert!(stream.take(&[0xaa; 5000]).is_none());
        assert_eq!(generated(&stream.at_fin().unwrap()), Some(1000));

        let short = ServerStream::new(Request::Perf(perf::RequestReader::default()), None);
        assert!(short.take(&header[..7]).is_none());
        assert_eq!(code(&short.at_fin().unwrap()), Some(hq::BAD_REQUEST));

        let rejected = ServerStream::new(Request::Reject, None);
        assert!(rejected.take(b"GET /1\r\n").is_none());
        assert!(rejected.at_fin().is_none());
    }
}
