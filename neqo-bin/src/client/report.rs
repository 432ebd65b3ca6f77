//! What a client did: [`ClientReport`] filled in from the driver, and the messages for what
//! went wrong.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use neqo_driver::Driver;
use neqo_report::ClientReport;
use quinn_proto::{ConnectionError, TransportErrorCode};

/// Adds the driver's and the sockets' counters, and the rate over `first_connect` to
/// `last_fin`.
pub(super) fn fill(
    report: &mut ClientReport,
    driver: &Driver,
    io: String,
    first_connect: Option<Instant>,
    last_fin: Option<Instant>,
) {
    let s = driver.socket_stats();
    report.socket = s;
    report.sockets_used = driver.path_stats().filter(|p| p.tx.datagrams > 0).count();
    report.rx_datagrams_per_syscall = s.rx.datagrams_per_syscall();
    report.tx_datagrams_per_syscall = s.tx.datagrams_per_syscall();
    report.kernel_drops = s.kernel_drops;
    report.pacing = driver.pacing();
    report.driver = crate::report::driver_counters(driver.counters());
    report.tls = crate::report::tls_counters(neqo_driver::tls::counters::snapshot());
    report.io = io;
    if let (Some(a), Some(b)) = (first_connect, last_fin) {
        report.seconds = b.saturating_duration_since(a).as_secs_f64();
    }
    if report.seconds > 0.0 {
        #[expect(clippy::cast_precision_loss, reason = "a rate")]
        let bits = (report.bytes_received + report.bytes_sent) as f64 * 8.0;
        report.gbps = bits / report.seconds / 1e9;
        #[expect(clippy::cast_precision_loss, reason = "a rate")]
        let requests = report.requests as f64;
        report.requests_per_second = requests / report.seconds;
    }
}

/// What to tell the user about a connection to `remote` that ended with `reason`.
pub(super) fn connection_error(
    remote: SocketAddr,
    alpn: &str,
    idle_timeout: Duration,
    reason: &ConnectionError,
) -> String {
    match reason {
        ConnectionError::TimedOut => {
            format!("no answer from {remote} within the idle timeout ({idle_timeout:?})")
        }
        ConnectionError::TransportError(e) if e.to_string().contains("certificate") => format!(
            "handshake with {remote} failed: the server's certificate is not trusted ({e}); pass --insecure to skip verification or --ca PEM to trust its issuer"
        ),
        ConnectionError::TransportError(e) => format!("connection to {remote} failed: {e}"),
        ConnectionError::ConnectionClosed(c) if c.error_code == TransportErrorCode::crypto(120) => {
            format!("{remote} does not offer ALPN {alpn:?} (no_application_protocol)")
        }
        ConnectionError::ConnectionClosed(c)
            if c.error_code == TransportErrorCode::CONNECTION_REFUSED =>
        {
            format!("{remote} refused the connection (CONNECTION_REFUSED: too many connections?)")
        }
        ConnectionError::ConnectionClosed(c) => format!("{remote} closed the connection: {c}"),
        other => format!("connection to {remote} failed: {other}"),
    }
}

/// What is wrong with a complete body of `received` bytes for `path` that should be `expected`
/// pattern bytes, if anything.
pub(super) fn body_error(
    path: &str,
    expected: u64,
    received: u64,
    pattern_ok: bool,
) -> Option<String> {
    if received < expected {
        Some(format!(
            "{path}: short body: {received} of {expected} bytes"
        ))
    } else if received > expected {
        Some(format!(
            "{path}: long body: {received} bytes, expected {expected}"
        ))
    } else if !pattern_ok {
        Some(format!("{path}: body differs from the generated pattern"))
    } else {
        None
    }
}
