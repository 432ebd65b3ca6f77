//! `msquic-peer client`.

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::ffi::c_void;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use msquic::ffi::{self, HQUIC, QUIC_STATUS};
use msquic::{BufferRef, Configuration, CredentialConfig, CredentialFlags, Registration};
use neqo_protocols::{
    hq::{self, Target},
    pattern, perf,
};
use url::{Host, Url};

use super::Alpn;
use super::raw::{self, OwnedConnection};
use super::sender::{Body, BodySender};
use super::server::buffer_bytes;

/// Options of `msquic-peer client`.
#[derive(Debug)]
pub(crate) struct ClientOptions {
    pub(crate) urls: Vec<Url>,
    pub(crate) requests: u64,
    pub(crate) parallel: bool,
    pub(crate) connections: u64,
    pub(crate) alpn: Alpn,
    pub(crate) download: Option<u64>,
    pub(crate) upload: Option<u64>,
    pub(crate) insecure: bool,
    pub(crate) ca: Option<PathBuf>,
    pub(crate) output_dir: Option<PathBuf>,
    pub(crate) json: Option<PathBuf>,
    /// Timeouts and ECN.
    pub(crate) tuning: raw::Tuning,
}

/// What a response must look like.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Exactly N pattern bytes.
    Pattern(u64),
    /// Anything that ends with FIN (a file served by the peer).
    Any,
}

/// One request of the per-connection plan.
#[derive(Debug)]
struct RequestSpec {
    /// For hq: the request path; for perf: a description.
    label: String,
    /// Bytes sent before the body (hq request line or perf header).
    prefix: Vec<u8>,
    /// Upload bytes (perf only).
    upload: u64,
    expect: Expect,
    /// Where the first connection saves this response.
    save: Option<PathBuf>,
}

/// Result of the whole client run.
#[derive(Debug, Default)]
struct Totals {
    ok: u64,
    failures: Vec<String>,
    /// Why connections with failed requests were closed.
    notes: Vec<String>,
    bytes_rx: u64,
    bytes_tx: u64,
    connections: u64,
    lost_packets: u64,
    last_fin: Option<Instant>,
}

/// Runs the client; fails if any request failed.
pub(crate) fn run(opts: &ClientOptions) -> Result<()> {
    if opts.alpn == Alpn::HqInterop && (opts.download.is_some() || opts.upload.is_some()) {
        bail!("--download and --upload are only supported with --alpn perf");
    }
    if opts.alpn == Alpn::Perf && opts.output_dir.is_some() {
        bail!("--output-dir is only supported with --alpn hq-interop");
    }
    let (server_name, remote) = resolve_target(&opts.urls)?;
    let plan = Arc::new(build_plan(opts)?);

    let registration = Registration::new(
        &msquic::RegistrationConfig::new()
            .set_app_name("msquic-peer-client".into())
            .set_execution_profile(msquic::ExecutionProfile::LowLatency),
    )
    .map_err(|e| anyhow!("opening msquic registration: {}", raw::status_name(e.0)))?;
    let config = Configuration::open(&registration, &[BufferRef::from(opts.alpn.wire())], None)
        .map_err(|e| anyhow!("opening msquic configuration: {}", raw::status_name(e.0)))?;
    raw::apply_settings(&config, &raw::settings(opts.tuning, None)).map_err(|e| anyhow!(e))?;
    let mut credential = CredentialConfig::new_client();
    if opts.insecure {
        credential = credential.set_credential_flags(CredentialFlags::NO_CERTIFICATE_VALIDATION);
    } else if let Some(ca) = &opts.ca {
        // msquic hands the path to its TLS library, which reports a bad file only as a failed
        // handshake: check it here, with its name.
        let pem = std::fs::read_to_string(ca)
            .with_context(|| format!("cannot read CA certificate {}", ca.display()))?;
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            bail!("CA certificate {} holds no PEM certificate", ca.display());
        }
        credential = credential.set_ca_certificate_file(ca.to_string_lossy().into_owned());
    }
    config
        .load_credential(&credential)
        .map_err(|e| anyhow!("loading client credential: {}", raw::status_name(e.0)))?;

    let start = Instant::now();
    let mut totals = Totals::default();
    for index in 0..opts.connections {
        let shared = Arc::new(ClientConn::new(
            Arc::clone(&plan),
            opts.parallel,
            index == 0,
        ));
        run_connection(&registration, &config, &server_name, remote, &shared)
            .with_context(|| format!("connection {} to {remote} ({server_name})", index + 1))?;
        let st = shared.lock();
        totals.connections += 1;
        totals.ok += st.ok;
        totals.failures.extend(st.failures.iter().cloned());
        if let Some(reason) = st.close_reason.clone().filter(|_| !st.failures.is_empty()) {
            totals
                .notes
                .push(format!("connection {}: {reason}", index + 1));
        }
        totals.bytes_rx += st.bytes_rx;
        totals.bytes_tx += st.bytes_tx;
        totals.lost_packets += st.lost_packets;
        totals.last_fin = totals.last_fin.max(st.last_fin);
    }
    let end = totals.last_fin.unwrap_or_else(Instant::now);
    let seconds = end.duration_since(start).as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "byte counts far below 2^52")]
    let gbps = if seconds > 0.0 {
        (totals.bytes_rx + totals.bytes_tx) as f64 * 8.0 / seconds / 1e9
    } else {
        0.0
    };
    let perf = msquic::Api::get_perf().ok();
    let ratio = |num: i64, den: i64| {
        #[expect(clippy::cast_precision_loss, reason = "counters far below 2^52")]
        (den > 0).then(|| num as f64 / den as f64)
    };
    let rx_per_call = perf
        .as_ref()
        .and_then(|p| ratio(p.udp_recv, p.udp_recv_events));
    let tx_per_call = perf
        .as_ref()
        .and_then(|p| ratio(p.udp_send, p.udp_send_calls));
    drop(config);
    drop(registration);

    let total_requests = plan.len() as u64 * opts.connections;
    eprintln!(
        "msquic-peer: {}/{} requests ok over {} connection(s), {} bytes received, {} bytes sent in {seconds:.3} s ({gbps:.3} Gbit/s)",
        totals.ok, total_requests, totals.connections, totals.bytes_rx, totals.bytes_tx
    );
    if let Some(path) = &opts.json {
        let json = serde_json::json!({
            "alpn": opts.alpn.wire(),
            "bytes_received": totals.bytes_rx,
            "bytes_sent": totals.bytes_tx,
            "requests": totals.ok,
            "failed_requests": totals.failures.len(),
            "connections": totals.connections,
            "seconds": seconds,
            "gbps": gbps,
            "rx_datagrams_per_syscall": rx_per_call,
            "tx_datagrams_per_syscall": tx_per_call,
            "kernel_drops": serde_json::Value::Null,
            "lost_packets": totals.lost_packets,
        });
        let mut text = serde_json::to_string_pretty(&json).expect("serialisable");
        text.push('\n');
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if !totals.failures.is_empty() {
        for failure in totals.failures.iter().take(10) {
            eprintln!("msquic-peer: {failure}");
        }
        for note in totals.notes.iter().take(10) {
            eprintln!("msquic-peer: {note}");
        }
        bail!(
            "{} of {total_requests} requests failed",
            totals.failures.len()
        );
    }
    Ok(())
}

/// Host name (for SNI) and address of the server; all URLs must agree.
fn resolve_target(urls: &[Url]) -> Result<(String, SocketAddr)> {
    let first = urls.first().context("no URL given")?;
    let authority = |u: &Url| (u.host().map(|h| h.to_owned()), u.port_or_known_default());
    for u in urls {
        if authority(u) != authority(first) {
            bail!("all URLs must use the same host and port ({u} differs from {first})");
        }
    }
    let port = first.port_or_known_default().unwrap_or(443);
    let (name, ip) = match first.host() {
        Some(Host::Ipv4(ip)) => (ip.to_string(), Some(ip.into())),
        Some(Host::Ipv6(ip)) => (ip.to_string(), Some(ip.into())),
        Some(Host::Domain(d)) => (d.to_string(), None),
        None => bail!("URL {first} has no host"),
    };
    let addr = match ip {
        Some(ip) => SocketAddr::new(ip, port),
        None => (name.as_str(), port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {name}"))?
            .next()
            .with_context(|| format!("{name} has no address"))?,
    };
    Ok((name, addr))
}

fn build_plan(opts: &ClientOptions) -> Result<Vec<RequestSpec>> {
    if let Some(dir) = &opts.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut saved = HashSet::new();
    let mut plan = Vec::new();
    for url in &opts.urls {
        let mut path = url.path().to_string();
        if let Some(q) = url.query() {
            path = format!("{path}?{q}");
        }
        for _ in 0..opts.requests {
            let spec = match opts.alpn {
                Alpn::HqInterop => {
                    let prefix = hq::request(&path).into_bytes();
                    let expect = match hq::target(&path) {
                        Ok(Target::Generated(n)) => Expect::Pattern(n),
                        _ => Expect::Any,
                    };
                    let save = opts.output_dir.as_ref().and_then(|dir| {
                        let target = dir.join(hq::output_name(url.path()));
                        saved.insert(target.clone()).then_some(target)
                    });
                    RequestSpec {
                        label: path.clone(),
                        prefix,
                        upload: 0,
                        expect,
                        save,
                    }
                }
                Alpn::Perf => {
                    let download = opts.download.unwrap_or(0);
                    let upload = opts.upload.unwrap_or(0);
                    RequestSpec {
                        label: format!("perf download {download} upload {upload}"),
                        prefix: perf::request_header(download).to_vec(),
                        upload,
                        expect: Expect::Pattern(download),
                        save: None,
                    }
                }
            };
            plan.push(spec);
        }
    }
    Ok(plan)
}

fn run_connection(
    registration: &Registration,
    config: &Configuration,
    server_name: &str,
    remote: SocketAddr,
    shared: &Arc<ClientConn>,
) -> Result<()> {
    // SAFETY: `client_conn_cb` treats its context as `*const ClientConn` from
    // `Arc::into_raw` and never frees it.
    let conn = unsafe { OwnedConnection::open(registration, client_conn_cb, Arc::clone(shared)) }
        .map_err(|e| anyhow!(e))?;
    conn.set_remote_address(remote).map_err(|e| anyhow!(e))?;
    conn.start(config, server_name, remote)
        .map_err(|e| anyhow!(e))?;
    let mut st = shared.lock();
    while !st.shutdown_complete {
        st = shared
            .cv
            .wait(st)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    }
    drop(st);
    let lost = conn.statistics().map_or(0, |stats| {
        stats
            .SendSuspectedLostPackets
            .saturating_sub(stats.SendSpuriousLostPackets)
    });
    let mut st = shared.lock();
    st.lost_packets = lost;
    if !st.connected {
        let reason = st
            .close_reason
            .clone()
            .unwrap_or_else(|| "connection closed before the handshake completed".into());
        bail!("{reason}");
    }
    if let Some(reason) = &st.close_reason
        && st.ok + (st.failures.len() as u64) < shared.plan.len() as u64
    {
        bail!("connection closed early: {reason}");
    }
    drop(st);
    drop(conn);
    Ok(())
}

/// Connection-level state shared between the main thread and msquic callbacks.
#[derive(Debug)]
struct ClientConn {
    plan: Arc<Vec<RequestSpec>>,
    parallel: bool,
    save_files: bool,
    state: Mutex<ConnState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct ConnState {
    next: usize,
    finished: usize,
    connected: bool,
    shutdown_started: bool,
    shutdown_complete: bool,
    close_reason: Option<String>,
    ok: u64,
    failures: Vec<String>,
    bytes_rx: u64,
    bytes_tx: u64,
    last_fin: Option<Instant>,
    lost_packets: u64,
}

impl ClientConn {
    fn new(plan: Arc<Vec<RequestSpec>>, parallel: bool, save_files: bool) -> Self {
        Self {
            plan,
            parallel,
            save_files,
            state: Mutex::new(ConnState::default()),
            cv: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ConnState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts the given requests; failures to start count as failed requests.
    fn launch(self: &Arc<Self>, conn: HQUIC, first: Vec<usize>) {
        let mut queue: VecDeque<usize> = first.into();
        while let Some(idx) = queue.pop_front() {
            // SAFETY: `conn` is the live connection this state belongs to; we
            // run on its worker thread inside one of its callbacks.
            if let Err(e) = unsafe { start_request(conn, self, idx) } {
                queue.extend(self.finish(conn, idx, Err(e), 0, 0, None));
            }
        }
    }

    /// Records a finished request; returns the requests to start next and
    /// shuts the connection down once everything is done.
    fn finish(
        &self,
        conn: HQUIC,
        idx: usize,
        result: Result<(), String>,
        rx: u64,
        tx: u64,
        fin_at: Option<Instant>,
    ) -> Vec<usize> {
        let mut st = self.lock();
        st.finished += 1;
        st.bytes_rx += rx;
        st.bytes_tx += tx;
        st.last_fin = st.last_fin.max(fin_at);
        match result {
            Ok(()) => st.ok += 1,
            Err(e) => {
                let label = &self.plan[idx].label;
                st.failures
                    .push(format!("request {} ({label}): {e}", idx + 1));
            }
        }
        let mut next = Vec::new();
        if !self.parallel && st.next < self.plan.len() {
            next.push(st.next);
            st.next += 1;
        }
        let shutdown = st.finished == self.plan.len() && !st.shutdown_started;
        st.shutdown_started |= shutdown;
        drop(st);
        if shutdown {
            // SAFETY: `conn` is live; the shutdown is queued.
            unsafe { raw::connection_shutdown(conn, 0) };
        }
        next
    }
}

unsafe extern "C" fn client_conn_cb(
    conn: HQUIC,
    context: *mut c_void,
    event: *mut ffi::QUIC_CONNECTION_EVENT,
) -> QUIC_STATUS {
    let ptr = context.cast_const().cast::<ClientConn>();
    // SAFETY: the context is an `Arc<ClientConn>` reference owned by the
    // OwnedConnection, released only after ConnectionClose returned.  Taking
    // a new strong reference lets stream contexts hold the state.
    let shared = unsafe {
        Arc::increment_strong_count(ptr);
        Arc::from_raw(ptr)
    };
    // SAFETY: msquic passes a valid event for the duration of the callback.
    let event = unsafe { &*event };
    match event.Type {
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_CONNECTED => {
            let first = {
                let mut st = shared.lock();
                st.connected = true;
                let n = if shared.parallel {
                    shared.plan.len()
                } else {
                    1.min(shared.plan.len())
                };
                st.next = n;
                (0..n).collect()
            };
            shared.launch(conn, first);
        }
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_SHUTDOWN_INITIATED_BY_TRANSPORT => {
            // SAFETY: the union member matches the event type.
            let ev = unsafe { event.__bindgen_anon_1.SHUTDOWN_INITIATED_BY_TRANSPORT };
            let mut st = shared.lock();
            let what = if st.connected {
                "connection closed by transport"
            } else {
                "handshake failed"
            };
            let reason = format!(
                "{what}: {}",
                raw::transport_close_reason(ev.Status, ev.ErrorCode)
            );
            st.close_reason.get_or_insert(reason);
        }
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_SHUTDOWN_INITIATED_BY_PEER => {
            // SAFETY: the union member matches the event type.
            let ev = unsafe { event.__bindgen_anon_1.SHUTDOWN_INITIATED_BY_PEER };
            let mut st = shared.lock();
            let reason = format!(
                "closed by the server with application error 0x{:x}",
                ev.ErrorCode
            );
            st.close_reason.get_or_insert(reason);
        }
        ffi::QUIC_CONNECTION_EVENT_TYPE_QUIC_CONNECTION_EVENT_SHUTDOWN_COMPLETE => {
            shared.lock().shutdown_complete = true;
            shared.cv.notify_all();
        }
        _ => {}
    }
    ffi::QUIC_STATUS_SUCCESS
}

/// Opens, starts and feeds one request stream.
///
/// # Safety
/// `conn` must be a live connection handle owned by `shared`'s connection.
unsafe fn start_request(conn: HQUIC, shared: &Arc<ClientConn>, idx: usize) -> Result<(), String> {
    let spec = &shared.plan[idx];
    let file = match (&spec.save, shared.save_files) {
        (Some(path), true) => Some(BufWriter::new(
            File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?,
        )),
        _ => None,
    };
    let body = if spec.upload > 0 {
        Body::Pattern { len: spec.upload }
    } else {
        Body::Empty
    };
    let ctx = Box::into_raw(Box::new(ClientStream {
        conn: Arc::clone(shared),
        conn_handle: conn,
        idx,
        expect: spec.expect,
        received: Cell::new(0),
        mismatch: Cell::new(None),
        fin_at: Cell::new(None),
        reset: Cell::new(None),
        file: RefCell::new(file),
        error: RefCell::new(None),
        sender: BodySender::new(Some(spec.prefix.clone()), body),
    }));
    // SAFETY: `conn` is live; `client_stream_cb` frees `ctx` at SHUTDOWN_COMPLETE.
    let stream = match unsafe { raw::stream_open(conn, client_stream_cb, ctx.cast()) } {
        Ok(s) => s,
        Err(e) => {
            // SAFETY: the stream was not created, so we still own `ctx`.
            drop(unsafe { Box::from_raw(ctx) });
            return Err(e);
        }
    };
    // SAFETY: `stream` was just opened.
    if let Err(e) = unsafe { raw::stream_start(stream) } {
        // SAFETY: a stream that failed to start delivers no events; close it
        // and free the context ourselves.
        unsafe { raw::stream_close(stream) };
        // SAFETY: the closed stream never calls back, so we own `ctx` again.
        drop(unsafe { Box::from_raw(ctx) });
        return Err(e);
    }
    // SAFETY: the context lives until SHUTDOWN_COMPLETE, which cannot be
    // delivered while we are inside this callback; the stream is live.
    if let Err(e) = unsafe { (*ctx).sender.pump(stream) } {
        // SAFETY: as above.
        unsafe {
            *(*ctx).error.borrow_mut() = Some(e);
            drop(raw::stream_shutdown(stream, raw::SHUTDOWN_ABORT, 0));
        }
    }
    Ok(())
}

/// Per-request context of the client.
struct ClientStream {
    conn: Arc<ClientConn>,
    conn_handle: HQUIC,
    idx: usize,
    expect: Expect,
    received: Cell<u64>,
    mismatch: Cell<Option<u64>>,
    fin_at: Cell<Option<Instant>>,
    reset: Cell<Option<u64>>,
    file: RefCell<Option<BufWriter<File>>>,
    error: RefCell<Option<String>>,
    sender: BodySender,
}

unsafe extern "C" fn client_stream_cb(
    stream: HQUIC,
    context: *mut c_void,
    event: *mut ffi::QUIC_STREAM_EVENT,
) -> QUIC_STATUS {
    let ctx = context.cast::<ClientStream>();
    // SAFETY: msquic passes a valid event for the duration of the callback.
    let event = unsafe { &*event };
    // SAFETY: `stream` is this callback's handle; after `true` it is not used again.
    if unsafe { raw::stream_shutdown_complete(stream, event) } {
        // SAFETY: no further events follow and no other frame references it.
        let state = unsafe { Box::from_raw(ctx) };
        let result = state.outcome();
        let conn = state.conn_handle;
        let shared = Arc::clone(&state.conn);
        let (rx, tx, fin_at) = (
            state.received.get(),
            state.sender.queued(),
            state.fin_at.get(),
        );
        let idx = state.idx;
        drop(state);
        let next = shared.finish(conn, idx, result, rx, tx, fin_at);
        shared.launch(conn, next);
        return ffi::QUIC_STATUS_SUCCESS;
    }
    // SAFETY: the context lives until SHUTDOWN_COMPLETE; only shared
    // references are created, so re-entrant callbacks are sound.
    let state = unsafe { &*ctx };
    state.on_event(stream, event);
    ffi::QUIC_STATUS_SUCCESS
}

impl ClientStream {
    fn on_event(&self, stream: HQUIC, event: &ffi::QUIC_STREAM_EVENT) {
        match event.Type {
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_RECEIVE => {
                // SAFETY: the union member matches the event type.
                let rx = unsafe { event.__bindgen_anon_1.RECEIVE };
                for i in 0..rx.BufferCount as usize {
                    // SAFETY: msquic passes `BufferCount` valid buffers.
                    let buf = unsafe { &*rx.Buffers.add(i) };
                    // SAFETY: each buffer is valid for `Length` bytes.
                    self.on_data(unsafe { buffer_bytes(buf) });
                }
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_SEND_COMPLETE => {
                // SAFETY: the union member matches the event type.
                let sc = unsafe { event.__bindgen_anon_1.SEND_COMPLETE };
                // SAFETY: only the sender issues sends on this stream.
                unsafe { self.sender.complete(sc.ClientContext) };
                if sc.Canceled == 0 {
                    self.pump(stream);
                }
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_IDEAL_SEND_BUFFER_SIZE => {
                // SAFETY: the union member matches the event type.
                let bytes = unsafe { event.__bindgen_anon_1.IDEAL_SEND_BUFFER_SIZE }.ByteCount;
                self.sender.set_ideal(bytes);
                self.pump(stream);
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_PEER_SEND_SHUTDOWN => {
                self.fin_at.set(Some(Instant::now()));
                let file = self.file.borrow_mut().take();
                if let Some(mut file) = file
                    && let Err(e) = file.flush()
                {
                    self.error
                        .borrow_mut()
                        .get_or_insert(format!("writing output: {e}"));
                }
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_PEER_SEND_ABORTED => {
                // SAFETY: the union member matches the event type.
                let code = unsafe { event.__bindgen_anon_1.PEER_SEND_ABORTED }.ErrorCode;
                self.reset.set(Some(code));
                // The response was reset: nothing more of the request is wanted either (a
                // perf upload may still be going), so its send direction is reset with the
                // server's code (RFC 9000 section 3.5). msquic leaves it open by itself.
                // SAFETY: called from this stream's callback with its live handle; the inline
                // abort re-enters the callback only with SEND_COMPLETE and never frees the
                // context.
                unsafe { raw::cancel_stream(stream, code) };
            }
            ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_PEER_RECEIVE_ABORTED => {
                // SAFETY: the union member matches the event type.
                let code = unsafe { event.__bindgen_anon_1.PEER_RECEIVE_ABORTED }.ErrorCode;
                // RFC 9000 section 3.5: STOP_SENDING on a request still being sent (a perf
                // upload) is answered with RESET_STREAM carrying its code (msquic's own reset
                // after this event would say NO_ERROR, see `raw::abort_send`). The response
                // may still come, and says how the request ended.
                // SAFETY: as above.
                unsafe { raw::abort_send(stream, code) };
            }
            _ => {}
        }
    }

    fn on_data(&self, data: &[u8]) {
        let offset = self.received.get();
        self.received.set(offset + data.len() as u64);
        if let Expect::Pattern(n) = self.expect
            && self.mismatch.get().is_none()
            && offset < n
        {
            let in_range = usize::try_from(n - offset).map_or(data.len(), |r| r.min(data.len()));
            self.mismatch
                .set(pattern::first_mismatch(offset, &data[..in_range]));
        }
        let mut file = self.file.borrow_mut();
        if let Some(f) = file.as_mut()
            && let Err(e) = f.write_all(data)
        {
            self.error
                .borrow_mut()
                .get_or_insert(format!("writing output: {e}"));
            *file = None;
        }
    }

    fn pump(&self, stream: HQUIC) {
        // SAFETY: the stream is live and the sender lives in the boxed context
        // until SHUTDOWN_COMPLETE.
        if let Err(e) = unsafe { self.sender.pump(stream) } {
            self.error.borrow_mut().get_or_insert(e);
            // SAFETY: the stream is live; the shutdown is queued.
            drop(unsafe { raw::stream_shutdown(stream, raw::SHUTDOWN_ABORT, 0) });
        }
    }

    fn outcome(&self) -> Result<(), String> {
        let received = self.received.get();
        if let Some(code) = self.reset.get() {
            let name = hq::code_name(code).map_or_else(String::new, |n| format!(", {n}"));
            return Err(format!(
                "stream reset by the server (error 0x{code:x}{name}) after {received} bytes"
            ));
        }
        if let Some(e) = self.error.borrow().clone() {
            return Err(e);
        }
        if self.fin_at.get().is_none() {
            return Err(format!("stream ended without FIN after {received} bytes"));
        }
        match self.expect {
            Expect::Pattern(n) if received < n => {
                Err(format!("short body: {received} of {n} bytes"))
            }
            Expect::Pattern(n) if received > n => {
                Err(format!("long body: {received} bytes, expected {n}"))
            }
            Expect::Pattern(_) => match self.mismatch.get() {
                Some(at) => Err(format!("wrong body byte at offset {at}")),
                None => Ok(()),
            },
            Expect::Any => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(expect: Expect) -> ClientStream {
        ClientStream {
            conn: Arc::new(ClientConn::new(Arc::new(Vec::new()), false, false)),
            conn_handle: std::ptr::null_mut(),
            idx: 0,
            expect,
            received: Cell::new(0),
            mismatch: Cell::new(None),
            fin_at: Cell::new(None),
            reset: Cell::new(None),
            file: RefCell::new(None),
            error: RefCell::new(None),
            sender: BodySender::new(None, Body::Empty),
        }
    }

    fn body(offset: u64, len: u64) -> Vec<u8> {
        (offset..offset + len).map(pattern::byte_at).collect()
    }

    #[test]
    fn verifies_generated_bodies() {
        let exact = stream(Expect::Pattern(1000));
        exact.on_data(&body(0, 600));
        exact.on_data(&body(600, 400));
        exact.fin_at.set(Some(Instant::now()));
        assert_eq!(exact.outcome(), Ok(()));

        let short = stream(Expect::Pattern(1000));
        short.on_data(&body(0, 999));
        short.fin_at.set(Some(Instant::now()));
        assert!(short.outcome().unwrap_err().contains("short body"));

        let long = stream(Expect::Pattern(1000));
        long.on_data(&body(0, 1001));
        long.fin_at.set(Some(Instant::now()));
        assert!(long.outcome().unwrap_err().contains("long body"));

        let wrong = stream(Expect::Pattern(1000));
        let mut data = body(0, 1000);
        data[700] ^= 0x80;
        wrong.on_data(&data[..500]);
        wrong.on_data(&data[500..]);
        wrong.fin_at.set(Some(Instant::now()));
        assert_eq!(
            wrong.outcome(),
            Err("wrong body byte at offset 700".to_string())
        );

        let no_fin = stream(Expect::Pattern(10));
        no_fin.on_data(&body(0, 10));
        assert!(no_fin.outcome().unwrap_err().contains("without FIN"));

        let reset = stream(Expect::Any);
        reset.reset.set(Some(0x10));
        assert!(reset.outcome().unwrap_err().contains("reset"));
        assert!(
            reset
                .outcome()
                .unwrap_err()
                .contains("(error 0x10, refused)")
        );

        let any = stream(Expect::Any);
        any.on_data(b"whatever");
        any.fin_at.set(Some(Instant::now()));
        assert_eq!(any.outcome(), Ok(()));
    }

    /// A wrong byte is found however far into the body, and however the body is split.
    #[test]
    fn mismatch_is_located() {
        let long = 3 * pattern::MAX_SLICE as u64;
        let right = stream(Expect::Pattern(5 + long));
        right.on_data(&body(0, 5));
        right.on_data(&body(5, long));
        right.fin_at.set(Some(Instant::now()));
        assert_eq!(right.outcome(), Ok(()));

        // The body from offset 5 where offset 6 is expected: wrong at once.
        let shifted = stream(Expect::Pattern(6 + long));
        shifted.on_data(&body(0, 6));
        shifted.on_data(&body(5, long));
        shifted.fin_at.set(Some(Instant::now()));
        assert_eq!(
            shifted.outcome(),
            Err("wrong body byte at offset 6".to_string())
        );

        let flipped = stream(Expect::Pattern(5 + long));
        let mut data = body(5, long);
        data[pattern::MAX_SLICE + 17] ^= 1;
        flipped.on_data(&body(0, 5));
        flipped.on_data(&data);
        flipped.fin_at.set(Some(Instant::now()));
        assert_eq!(
            flipped.outcome(),
            Err(format!(
                "wrong body byte at offset {}",
                5 + pattern::MAX_SLICE + 17
            ))
        );
    }
}
