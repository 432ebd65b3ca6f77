//! What a client did: [`ClientReport`], and the messages for what went wrong.

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use neqo_driver::Driver;
use quinn_proto::{ConnectionError, TransportErrorCode};

use super::{Percentiles, Spread};

/// What a client did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ClientReport {
    /// The application protocol the connections spoke (`hq-interop`, `perf` or `h3`).
    pub alpn: String,
    /// Response body bytes received.
    pub bytes_received: u64,
    /// Request bytes sent (request lines, perf headers and uploads).
    pub bytes_sent: u64,
    /// Requests completed and verified.
    pub requests: u64,
    /// Requests that failed.
    pub failed_requests: u64,
    /// h3: requests the server refused unprocessed after its GOAWAY (`H3_REQUEST_REJECTED`,
    /// or not sent once the GOAWAY came): not failed, and safe to retry elsewhere; `errors`
    /// says how many.
    pub rejected_requests: u64,
    /// h3: requests given up on by `--cancel-after` (not failed).
    pub cancelled_requests: u64,
    /// Connections completed.
    pub connections: u64,
    /// Connections allowed open at once.
    pub concurrency: usize,
    /// The most connections making requests at once.
    pub peak_concurrency: usize,
    /// From the first connect to the last FIN.
    pub seconds: f64,
    /// (received + sent) bits per second / 1e9 over `seconds`.
    pub gbps: f64,
    /// Completed requests per second over `seconds`.
    pub requests_per_second: f64,
    /// From a connection's connect to its handshake's completion.
    pub handshake_ms: Option<Percentiles>,
    /// From a request's stream being opened to its response read, verified and saved
    /// (successful requests).
    pub request_ms: Option<Percentiles>,
    /// Fairness: each completed connection's Gbit/s (request and response bytes from its
    /// connect to its last response).
    pub connection_gbps: Option<Spread>,
    /// Local sockets the connections were spread over that sent anything.
    pub sockets_used: usize,
    /// Datagrams per receive syscall.
    pub rx_datagrams_per_syscall: f64,
    /// Datagrams per send syscall.
    pub tx_datagrams_per_syscall: f64,
    /// Kernel drops on the client's socket.
    pub kernel_drops: u64,
    /// Packets the client's connections declared lost.
    pub lost_packets: u64,
    /// Whether the driver paced.
    pub pacing: bool,
    /// The I/O mode.
    pub io: String,
    /// Driver counters (transmits, pacing waits, wake-ups).
    pub driver: neqo_driver::DriverCounters,
    /// What the handshakes did: Retries, full handshakes (the rest resumed), 0-RTT, key
    /// updates.
    pub tls: neqo_driver::tls::counters::TlsCounters,
    /// What went wrong, one message each.
    pub errors: Vec<String>,
    /// Socket statistics.
    pub socket: neqo_udp::Stats,
}

impl ClientReport {
    /// A short human summary; with more than one connection at once, a second line on the
    /// load (requests per second, handshakes, latencies, fairness).
    #[must_use]
    pub fn summary(&self) -> String {
        let mut s = self.transfer_summary();
        if self.concurrency > 1 {
            s.push_str(&format!(
                "\nload: {:.0} requests/s",
                self.requests_per_second
            ));
            if let Some(h) = &self.handshake_ms {
                s.push_str(&format!("; handshake {h}"));
            }
            if let Some(r) = &self.request_ms {
                s.push_str(&format!("; request {r}"));
            }
            if let Some(c) = &self.connection_gbps {
                s.push_str(&format!("; per-connection Gbit/s {c}"));
            }
        }
        s
    }

    /// One line: requests, failures, bytes, time and rate (what a client prints after every
    /// run).
    #[must_use]
    pub fn line(&self) -> String {
        let plural = |n: u64, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        let rate = if self.gbps >= 1.0 {
            format!("{:.2} Gbit/s", self.gbps)
        } else {
            format!("{:.1} Mbit/s", self.gbps * 1e3)
        };
        let mut others = String::new();
        if self.rejected_requests > 0 {
            others.push_str(&format!(", {} rejected", self.rejected_requests));
        }
        if self.cancelled_requests > 0 {
            others.push_str(&format!(", {} cancelled", self.cancelled_requests));
        }
        format!(
            "{} ({} failed{others}) on {}: received {} B in {:.3} s, {rate}",
            plural(
                self.requests
                    + self.failed_requests
                    + self.rejected_requests
                    + self.cancelled_requests,
                "request"
            ),
            self.failed_requests,
            plural(self.connections, "connection"),
            self.bytes_received,
            self.seconds,
        )
    }

    fn transfer_summary(&self) -> String {
        format!(
            "{} requests ({} failed) on {} connections: received {} B, sent {} B in {:.3} s = {:.3} Gbit/s; datagrams/syscall rx {:.2} tx {:.2}; kernel drops {}; lost packets {}",
            self.requests,
            self.failed_requests,
            self.connections,
            self.bytes_received,
            self.bytes_sent,
            self.seconds,
            self.gbps,
            self.rx_datagrams_per_syscall,
            self.tx_datagrams_per_syscall,
            self.kernel_drops,
            self.lost_packets
        )
    }

    /// Adds the driver's and the sockets' counters, and the rate over `first_connect` to
    /// `last_fin`.
    pub(super) fn fill(
        &mut self,
        driver: &Driver,
        io: String,
        first_connect: Option<Instant>,
        last_fin: Option<Instant>,
    ) {
        let s = driver.socket_stats();
        self.socket = s;
        self.sockets_used = driver.path_stats().filter(|p| p.tx.datagrams > 0).count();
        self.rx_datagrams_per_syscall = s.rx.datagrams_per_syscall();
        self.tx_datagrams_per_syscall = s.tx.datagrams_per_syscall();
        self.kernel_drops = s.kernel_drops;
        self.pacing = driver.pacing();
        self.driver = driver.counters();
        self.tls = neqo_driver::tls::counters::snapshot();
        self.io = io;
        if let (Some(a), Some(b)) = (first_connect, last_fin) {
            self.seconds = b.saturating_duration_since(a).as_secs_f64();
        }
        if self.seconds > 0.0 {
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            let bits = (self.bytes_received + self.bytes_sent) as f64 * 8.0;
            self.gbps = bits / self.seconds / 1e9;
            #[expect(clippy::cast_precision_loss, reason = "a rate")]
            let requests = self.requests as f64;
            self.requests_per_second = requests / self.seconds;
        }
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
