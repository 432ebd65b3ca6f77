//! Thin helpers over msquic's raw API table.
//!
//! The `msquic` crate's closure-based wrappers drop a handle's callback closure
//! while that closure is still running when the handle is closed from its own
//! `SHUTDOWN_COMPLETE` event.  The peer therefore installs plain `extern "C"`
//! callbacks with its own boxed contexts, so that a context is freed only after
//! every reference into it is gone.

use std::ffi::{CString, c_void};
use std::net::SocketAddr;

use msquic::ffi::{self, HQUIC, QUIC_STATUS};
use msquic::{Api, Status};

/// The process-wide msquic API table (opened on first use).
pub(crate) fn api() -> &'static ffi::QUIC_API_TABLE {
    Api::get_ffi()
}

/// `QUIC_SUCCEEDED()`: success and pending statuses are not failures.
pub(crate) fn succeeded(status: QUIC_STATUS) -> bool {
    // On POSIX msquic statuses are negated errno values (or 0 / -1 / -2 for
    // success / continue / pending), so anything <= 0 is a success.
    status.cast_signed() <= 0
}

/// Base of msquic's POSIX error statuses (`ERROR_BASE` in `msquic_posix.h`).
const ERROR_BASE: QUIC_STATUS = 200_000_000;
/// `QUIC_STATUS_TLS_ALERT(0)`.
const TLS_ERROR_BASE: QUIC_STATUS = ERROR_BASE + 256;
/// Base of certificate validation errors.
const CERT_ERROR_BASE: QUIC_STATUS = ERROR_BASE + 512;

/// A human readable name for an msquic status.
pub(crate) fn status_name(status: QUIC_STATUS) -> String {
    match Status(status).try_as_status_code() {
        Ok(code) => format!("{code:?}"),
        Err(_) if (TLS_ERROR_BASE..CERT_ERROR_BASE).contains(&status) => {
            format!("TLS alert {}", status - TLS_ERROR_BASE)
        }
        Err(_) => format!("status 0x{status:x}"),
    }
}

/// Explains why the transport shut a connection down.
pub(crate) fn transport_close_reason(status: QUIC_STATUS, code: u64) -> String {
    let mut text = status_name(status);
    if code >= 2 {
        text = format!("{text}, {}", close_code_name(code));
    }
    let hint = match Status(status).try_as_status_code() {
        Ok(msquic::StatusCode::QUIC_STATUS_UNREACHABLE) => {
            " - server unreachable (is anything listening on that port?)"
        }
        Ok(msquic::StatusCode::QUIC_STATUS_CONNECTION_TIMEOUT) => {
            " - no response from the server before the handshake timeout"
        }
        Ok(msquic::StatusCode::QUIC_STATUS_CONNECTION_IDLE) => {
            " - idle timeout: nothing received from the peer (is it a QUIC server?)"
        }
        _ if (0x12a..=0x130).contains(&code)
            || (CERT_ERROR_BASE..CERT_ERROR_BASE + 256).contains(&status) =>
        {
            " - certificate rejected (use --insecure for self-signed certificates)"
        }
        _ => "",
    };
    format!("{text}{hint}")
}

/// Converts a raw status into a `Result`.
pub(crate) fn check(status: QUIC_STATUS, what: &str) -> Result<(), String> {
    if succeeded(status) {
        Ok(())
    } else {
        Err(format!("{what} failed: {}", status_name(status)))
    }
}

/// Names a QUIC transport/application error code as seen in a CONNECTION_CLOSE.
pub(crate) fn close_code_name(code: u64) -> String {
    match code {
        0x0 => "NO_ERROR".into(),
        0x1 => "INTERNAL_ERROR".into(),
        0x2 => "CONNECTION_REFUSED".into(),
        0x3 => "FLOW_CONTROL_ERROR".into(),
        0xa => "PROTOCOL_VIOLATION".into(),
        0x100..=0x1ff => {
            let alert = code - 0x100;
            let name = match alert {
                40 => "handshake_failure",
                42 => "bad_certificate",
                46 => "certificate_unknown",
                48 => "unknown_ca",
                80 => "internal_error",
                109 => "missing_extension",
                120 => "no_application_protocol (ALPN mismatch)",
                _ => "tls alert",
            };
            format!("CRYPTO_ERROR 0x{code:x}: TLS alert {alert} {name}")
        }
        _ => format!("error code 0x{code:x}"),
    }
}

/// The callback signature shared by stream handlers.
pub(crate) type StreamCallback =
    unsafe extern "C" fn(HQUIC, *mut c_void, *mut ffi::QUIC_STREAM_EVENT) -> QUIC_STATUS;

/// The callback signature shared by connection handlers.
pub(crate) type ConnectionCallback =
    unsafe extern "C" fn(HQUIC, *mut c_void, *mut ffi::QUIC_CONNECTION_EVENT) -> QUIC_STATUS;

/// Installs `handler` with `context` on a stream or connection handle.
///
/// # Safety
/// `handle` must be a live stream or connection handle, `handler` must have the
/// callback signature matching the handle type and `context` must stay valid
/// until the handler frees it.
pub(crate) unsafe fn set_callback(handle: HQUIC, handler: *mut c_void, context: *mut c_void) {
    let f = api().SetCallbackHandler.expect("SetCallbackHandler");
    // SAFETY: forwarded from the caller's contract.
    unsafe { f(handle, handler, context) };
}

/// Opens a bidirectional stream on `conn` with a raw callback.
///
/// # Safety
/// `conn` must be a live connection handle; `context` must stay valid until the
/// stream's `SHUTDOWN_COMPLETE` (or until the caller frees it after an error).
pub(crate) unsafe fn stream_open(
    conn: HQUIC,
    handler: StreamCallback,
    context: *mut c_void,
) -> Result<HQUIC, String> {
    let mut stream: HQUIC = std::ptr::null_mut();
    let f = api().StreamOpen.expect("StreamOpen");
    // SAFETY: forwarded from the caller's contract; `stream` is a valid out pointer.
    let status = unsafe {
        f(
            conn,
            ffi::QUIC_STREAM_OPEN_FLAGS_QUIC_STREAM_OPEN_FLAG_NONE,
            Some(handler),
            context,
            &raw mut stream,
        )
    };
    check(status, "StreamOpen")?;
    Ok(stream)
}

/// Starts a stream (always asynchronous in msquic).
///
/// # Safety
/// `stream` must be a live, not yet started stream handle.
pub(crate) unsafe fn stream_start(stream: HQUIC) -> Result<(), String> {
    let f = api().StreamStart.expect("StreamStart");
    // SAFETY: forwarded from the caller's contract.
    let status = unsafe {
        f(
            stream,
            ffi::QUIC_STREAM_START_FLAGS_QUIC_STREAM_START_FLAG_NONE,
        )
    };
    check(status, "StreamStart")
}

/// Shuts a stream down (queued, never inline).
///
/// # Safety
/// `stream` must be a live stream handle.
pub(crate) unsafe fn stream_shutdown(stream: HQUIC, flags: u32, code: u64) -> Result<(), String> {
    let f = api().StreamShutdown.expect("StreamShutdown");
    // SAFETY: forwarded from the caller's contract.
    let status = unsafe { f(stream, flags, code) };
    check(status, "StreamShutdown")
}

/// Graceful shutdown of the send direction (sends FIN).
pub(crate) const SHUTDOWN_GRACEFUL: u32 =
    ffi::QUIC_STREAM_SHUTDOWN_FLAGS_QUIC_STREAM_SHUTDOWN_FLAG_GRACEFUL;
/// Abort both directions (RESET_STREAM + STOP_SENDING).
pub(crate) const SHUTDOWN_ABORT: u32 =
    ffi::QUIC_STREAM_SHUTDOWN_FLAGS_QUIC_STREAM_SHUTDOWN_FLAG_ABORT;
/// Abort only the send direction (RESET_STREAM).
const SHUTDOWN_ABORT_SEND: u32 =
    ffi::QUIC_STREAM_SHUTDOWN_FLAGS_QUIC_STREAM_SHUTDOWN_FLAG_ABORT_SEND;
/// Abort only the receive direction (STOP_SENDING).
const SHUTDOWN_ABORT_RECEIVE: u32 =
    ffi::QUIC_STREAM_SHUTDOWN_FLAGS_QUIC_STREAM_SHUTDOWN_FLAG_ABORT_RECEIVE;
/// Done before `StreamShutdown` returns rather than queued, when called on the connection's
/// worker thread (from one of its callbacks); queued otherwise.
const SHUTDOWN_INLINE: u32 = ffi::QUIC_STREAM_SHUTDOWN_FLAGS_QUIC_STREAM_SHUTDOWN_FLAG_INLINE;

/// From a stream's callback: aborts its send direction with `code` (RESET_STREAM), inline.
///
/// Inline because of STOP_SENDING (RFC 9000 section 3.5): right after the
/// `PEER_RECEIVE_ABORTED` event returns, msquic aborts the send direction by itself, but with
/// NO_ERROR (`QuicStreamProcessStopSendingFrame` in `stream_recv.c`); a queued abort would come
/// after that one and be ignored, and the peer's code lost. An inline send abort cancels the
/// pending sends (their `SEND_COMPLETE`s re-enter the callback) but never completes the
/// stream's shutdown, so the callback's context outlives the call.
///
/// # Safety
/// `stream` must be the live handle of the stream whose callback is running on this thread.
pub(crate) unsafe fn abort_send(stream: HQUIC, code: u64) {
    // SAFETY: forwarded from the caller's contract. An error (a code above 2^62) leaves the
    // stream to msquic's own reset or to the idle timeout; there is nothing better to do.
    drop(unsafe { stream_shutdown(stream, SHUTDOWN_ABORT_SEND | SHUTDOWN_INLINE, code) });
}

/// From a stream's callback: closes both directions that are still open, with `code`: the
/// send direction inline ([`abort_send`]), the receive direction (STOP_SENDING) queued. Once
/// msquic has both directions closed it completes the stream's shutdown, frees it and returns
/// the peer its stream credit (MAX_STREAMS).
///
/// The receive abort is queued because, inline, it can complete the shutdown at once (a FIN
/// received but not yet delivered is treated as an acknowledged reset) and deliver
/// `SHUTDOWN_COMPLETE`, which frees the callback's context, inside the caller's callback.
///
/// # Safety
/// As [`abort_send`].
pub(crate) unsafe fn cancel_stream(stream: HQUIC, code: u64) {
    // SAFETY: forwarded from the caller's contract.
    unsafe { abort_send(stream, code) };
    // SAFETY: the stream is live (its callback is running); the shutdown is queued, and the
    // queued operation holds its own reference on the stream.
    drop(unsafe { stream_shutdown(stream, SHUTDOWN_ABORT_RECEIVE, code) });
}

/// Closes a stream handle.
///
/// # Safety
/// `stream` must be a live stream handle that is not used afterwards.
pub(crate) unsafe fn stream_close(stream: HQUIC) {
    let f = api().StreamClose.expect("StreamClose");
    // SAFETY: forwarded from the caller's contract.
    unsafe { f(stream) };
}

/// For a stream callback: whether `event` is SHUTDOWN_COMPLETE, the last event of the stream.
/// If so the stream is closed (unless the application is already closing it), as msquic
/// documents, and the callback frees its context.
///
/// # Safety
/// `stream` must be the live handle the callback was called for, not used after `true`.
pub(crate) unsafe fn stream_shutdown_complete(
    stream: HQUIC,
    event: &ffi::QUIC_STREAM_EVENT,
) -> bool {
    if event.Type != ffi::QUIC_STREAM_EVENT_TYPE_QUIC_STREAM_EVENT_SHUTDOWN_COMPLETE {
        return false;
    }
    // SAFETY: the union member matches the event type.
    let done = unsafe { event.__bindgen_anon_1.SHUTDOWN_COMPLETE };
    if done.AppCloseInProgress() == 0 {
        // SAFETY: closing from SHUTDOWN_COMPLETE is the documented pattern; the caller does not
        // use the handle again.
        unsafe { stream_close(stream) };
    }
    true
}

/// Starts the shutdown of a connection (queued).
///
/// # Safety
/// `conn` must be a live connection handle.
pub(crate) unsafe fn connection_shutdown(conn: HQUIC, code: u64) {
    let f = api().ConnectionShutdown.expect("ConnectionShutdown");
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        f(
            conn,
            ffi::QUIC_CONNECTION_SHUTDOWN_FLAGS_QUIC_CONNECTION_SHUTDOWN_FLAG_NONE,
            code,
        );
    };
}

/// Sends a connected client a session ticket: an msquic server issues none unless asked,
/// even with resumption enabled ([`offer_resumption`]).
///
/// # Safety
/// `conn` must be a live server connection handle.
pub(crate) unsafe fn send_resumption_ticket(conn: HQUIC) -> QUIC_STATUS {
    let f = api()
        .ConnectionSendResumptionTicket
        .expect("ConnectionSendResumptionTicket");
    // SAFETY: forwarded from the caller's contract; no application data goes with it.
    unsafe {
        f(
            conn,
            ffi::QUIC_SEND_RESUMPTION_FLAGS_QUIC_SEND_RESUMPTION_FLAG_NONE,
            0,
            std::ptr::null(),
        )
    }
}

/// A connection's statistics (v2).
///
/// # Safety
/// `conn` must be a live connection handle.
pub(crate) unsafe fn statistics(conn: HQUIC) -> Option<ffi::QUIC_STATISTICS_V2> {
    // SAFETY: the caller keeps the handle live; QUIC_STATISTICS_V2 is a plain C struct.
    unsafe {
        Api::get_param_auto::<ffi::QUIC_STATISTICS_V2>(conn, ffi::QUIC_PARAM_CONN_STATISTICS_V2)
    }
    .ok()
}

/// Closes a connection handle.
///
/// # Safety
/// `conn` must be a live connection handle that is not used afterwards.
pub(crate) unsafe fn connection_close(conn: HQUIC) {
    let f = api().ConnectionClose.expect("ConnectionClose");
    // SAFETY: forwarded from the caller's contract.
    unsafe { f(conn) };
}

/// What the peer sets beyond msquic's defaults, on either side.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    /// `IdleTimeoutMs`; 0 disables it.
    pub(crate) idle_timeout_ms: u64,
    /// `HandshakeIdleTimeoutMs`, at most the idle timeout.
    pub(crate) handshake_timeout_ms: u64,
    /// `EcnEnabled`: mark the datagrams sent ECT(0).
    pub(crate) ecn: bool,
}

/// Builds the `QUIC_SETTINGS` the peer uses on both sides: msquic's defaults (msquic's
/// docs/Settings.md) but for the settings named here, each for the reason given. Everything
/// else a comparison measures (execution profile `LowLatency`, congestion control, path MTU
/// discovery up to `MaximumMtu` 1500, flow-control windows, pacing, ACK delay) is msquic's own.
pub(crate) fn settings(tuning: Tuning, peer_bidi_streams: Option<u16>) -> ffi::QUIC_SETTINGS {
    // SAFETY: QUIC_SETTINGS is a plain C struct for which all-zero means "nothing set".
    let mut s: ffi::QUIC_SETTINGS = unsafe { std::mem::zeroed() };
    // SAFETY: `IsSet` is the bitfield view of the `IsSetFlags` union; both are plain integers.
    let is_set = unsafe { &mut s.__bindgen_anon_1.IsSet };
    // Timeouts are the command line's (msquic: 30 s idle, 10 s handshake), as neqo's are.
    is_set.set_IdleTimeoutMs(1);
    is_set.set_HandshakeIdleTimeoutMs(1);
    is_set.set_DisconnectTimeoutMs(1);
    // `SendBufferingEnabled` off (msquic's default is on): the sender keeps its buffers until
    // SEND_COMPLETE and msquic sends from them instead of copying each byte first, as
    // msquic's own secnetperf does. It is the cheaper of the two for msquic (docs/records/
    // many-connections.md has the figures), so the anchor is msquic at its best.
    is_set.set_SendBufferingEnabled(1);
    // `EcnEnabled` (msquic's default is off) only where asked: the interop runner's `ecn`
    // case needs both directions marked. msquic reports the marks it receives either way.
    is_set.set_EcnEnabled(1);
    // `PeerBidiStreamCount` (msquic's default is 0, no streams for the peer): a server must
    // let its clients open their requests.
    if peer_bidi_streams.is_some() {
        is_set.set_PeerBidiStreamCount(1);
    }
    s.IdleTimeoutMs = tuning.idle_timeout_ms;
    // A handshake never outlives the idle timeout (when there is one).
    s.HandshakeIdleTimeoutMs = if tuning.idle_timeout_ms == 0 {
        tuning.handshake_timeout_ms
    } else {
        tuning.handshake_timeout_ms.min(tuning.idle_timeout_ms)
    };
    // How long msquic waits for an ACK before giving the path up (its default 16 s): at
    // least as long as a handshake may wait, or heavy loss ends the handshake before its
    // timeout does.
    s.DisconnectTimeoutMs = u32::try_from(s.HandshakeIdleTimeoutMs.max(16_000))
        .unwrap_or(600_000)
        .min(600_000);
    s.set_SendBufferingEnabled(0);
    s.set_EcnEnabled(u8::from(tuning.ecn));
    if let Some(n) = peer_bidi_streams {
        s.PeerBidiStreamCount = n;
    }
    s
}

/// A server's settings: it issues session tickets and accepts resumption and 0-RTT with
/// them, as neqo-server does (msquic's default is neither).
pub(crate) fn offer_resumption(s: &mut ffi::QUIC_SETTINGS) {
    // SAFETY: `IsSet` is the bitfield view of the `IsSetFlags` union; both are plain integers.
    let is_set = unsafe { &mut s.__bindgen_anon_1.IsSet };
    is_set.set_ServerResumptionLevel(1);
    s.set_ServerResumptionLevel(
        u8::try_from(ffi::QUIC_SERVER_RESUMPTION_LEVEL_QUIC_SERVER_RESUME_AND_ZERORTT)
            .expect("a small enum"),
    );
}

/// Makes msquic send a Retry to every new client (address validation from the first
/// packet), process-wide: the retry memory limit, in percent of memory, is set to 0.
pub(crate) fn retry_always() -> Result<(), String> {
    let percent: u16 = 0;
    let len = u32::try_from(std::mem::size_of::<u16>()).expect("two bytes");
    // SAFETY: a global parameter takes a null handle; `percent` is a live u16 of `len`
    // bytes for the call.
    unsafe {
        Api::set_param(
            std::ptr::null_mut(),
            ffi::QUIC_PARAM_GLOBAL_RETRY_MEMORY_PERCENT,
            len,
            std::ptr::from_ref(&percent).cast(),
        )
    }
    .map_err(|e| format!("setting msquic's retry memory limit: {}", status_name(e.0)))
}

/// Applies `settings` to a configuration handle.
pub(crate) fn apply_settings(
    config: &msquic::Configuration,
    settings: &ffi::QUIC_SETTINGS,
) -> Result<(), String> {
    let len = u32::try_from(std::mem::size_of::<ffi::QUIC_SETTINGS>()).expect("small struct");
    // SAFETY: the configuration handle is live for the borrow and `settings`
    // points to a fully initialised QUIC_SETTINGS of `len` bytes.
    unsafe {
        Api::set_param(
            config.as_raw(),
            ffi::QUIC_PARAM_CONFIGURATION_SETTINGS,
            len,
            std::ptr::from_ref(settings).cast(),
        )
    }
    .map_err(|e| format!("setting msquic configuration: {}", status_name(e.0)))
}

/// An owned client connection handle whose callback context is an `Arc<T>`;
/// the context reference is released after the handle is closed.
#[derive(Debug)]
pub(crate) struct OwnedConnection<T> {
    handle: HQUIC,
    context: *const T,
}

impl<T> OwnedConnection<T> {
    /// Opens a connection whose callback context is `context`.
    ///
    /// # Safety
    /// `handler` must be a connection callback that treats its context as a
    /// `*const T` obtained from `Arc::into_raw` and never frees it.
    pub(crate) unsafe fn open(
        registration: &msquic::Registration,
        handler: ConnectionCallback,
        context: std::sync::Arc<T>,
    ) -> Result<Self, String> {
        let context = std::sync::Arc::into_raw(context);
        let mut handle: HQUIC = std::ptr::null_mut();
        let f = api().ConnectionOpen.expect("ConnectionOpen");
        // SAFETY: the registration is live; `handle` is a valid out pointer.
        let status = unsafe {
            f(
                registration.as_raw(),
                Some(handler),
                context.cast_mut().cast(),
                &raw mut handle,
            )
        };
        if let Err(e) = check(status, "ConnectionOpen") {
            // SAFETY: msquic did not take the context; release our reference.
            drop(unsafe { std::sync::Arc::from_raw(context) });
            return Err(e);
        }
        Ok(Self { handle, context })
    }

    /// Sets the remote address explicitly (skips name resolution in msquic).
    pub(crate) fn set_remote_address(&self, addr: SocketAddr) -> Result<(), String> {
        let addr = msquic::Addr::from(addr);
        let len = u32::try_from(std::mem::size_of::<msquic::Addr>()).expect("small struct");
        // SAFETY: the handle is live and `addr` is a valid QUIC_ADDR of `len` bytes.
        unsafe {
            Api::set_param(
                self.handle,
                ffi::QUIC_PARAM_CONN_REMOTE_ADDRESS,
                len,
                std::ptr::from_ref(&addr).cast(),
            )
        }
        .map_err(|e| format!("setting remote address {addr:?}: {}", status_name(e.0)))
    }

    /// Starts the handshake.
    pub(crate) fn start(
        &self,
        config: &msquic::Configuration,
        server_name: &str,
        remote: SocketAddr,
    ) -> Result<(), String> {
        let name = CString::new(server_name).map_err(|_| "server name contains NUL".to_string())?;
        let family = if remote.is_ipv4() {
            ffi::QUIC_ADDRESS_FAMILY_INET
        } else {
            ffi::QUIC_ADDRESS_FAMILY_INET6
        };
        let f = api().ConnectionStart.expect("ConnectionStart");
        // SAFETY: both handles are live; `name` outlives the call (msquic copies it).
        let status = unsafe {
            f(
                self.handle,
                config.as_raw(),
                ffi::QUIC_ADDRESS_FAMILY::try_from(family).expect("family fits"),
                name.as_ptr(),
                remote.port(),
            )
        };
        check(status, "ConnectionStart")
    }

    /// Connection statistics (v2).
    pub(crate) fn statistics(&self) -> Option<ffi::QUIC_STATISTICS_V2> {
        // SAFETY: the handle is live while `self` is.
        unsafe { statistics(self.handle) }
    }
}

impl<T> Drop for OwnedConnection<T> {
    fn drop(&mut self) {
        // SAFETY: the handle is owned by `self` and not used afterwards;
        // ConnectionClose returns only after the last callback finished.
        unsafe { connection_close(self.handle) };
        // SAFETY: `context` came from `Arc::into_raw` in `open`; no callback can
        // use it any more.
        drop(unsafe { std::sync::Arc::from_raw(self.context) });
    }
}
