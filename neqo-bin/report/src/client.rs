//! What a client did: [`ClientReport`] of `neqo-client --json`, and [`TransferFigures`], the
//! part of it every client the benches drive reports.

use neqo_udp::Stats;

/// What a client did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
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
    #[serde(deserialize_with = "Option::deserialize")]
    pub handshake_ms: Option<Percentiles>,
    /// From a request's stream being opened to its response read, verified and saved
    /// (successful requests).
    #[serde(deserialize_with = "Option::deserialize")]
    pub request_ms: Option<Percentiles>,
    /// Fairness: each completed connection's Gbit/s (request and response bytes from its
    /// connect to its last response).
    #[serde(deserialize_with = "Option::deserialize")]
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
    pub driver: DriverCounters,
    /// What the handshakes did: Retries, full handshakes (the rest resumed), 0-RTT, key
    /// updates.
    pub tls: TlsCounters,
    /// What went wrong, one message each.
    pub errors: Vec<String>,
    /// Socket statistics.
    pub socket: Stats,
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
}

/// Percentiles of a set of durations, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl std::fmt::Display for Percentiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.2} p90 {:.2} p99 {:.2} max {:.2} ms ({} samples)",
            self.p50, self.p90, self.p99, self.max, self.count
        )
    }
}

/// Smallest, median and largest of a set of per-connection figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    /// Connections.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "min {:.3} median {:.3} max {:.3} ({} connections)",
            self.min, self.median, self.max, self.count
        )
    }
}

/// Counters of the driver's own decisions: `neqo_driver::DriverCounters` as reported, field for
/// field. The producers convert with an exhaustive destructuring, so that a field added there
/// fails to compile until it is added here.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DriverCounters {
    /// Incoming connections accepted.
    pub accepted: u64,
    /// Incoming connections refused (`CONNECTION_REFUSED`).
    pub refused: u64,
    /// Retry packets sent (address validation).
    pub retries: u64,
    /// Datagrams opening with an Initial packet that the application shed, unread by
    /// quinn-proto, while the driver was behind (`Application::screen_initial`).
    pub initials_shed: u64,
    /// Replies no connection owns (Version Negotiation, Retry, refusals, stateless resets)
    /// dropped because the path's transmit queue was at its limit (a write-blocked socket).
    pub stateless_dropped: u64,
    /// The most connections open at once (not yet drained).
    pub peak_connections: u64,
    /// Connections drained and dropped.
    pub drained: u64,
    /// Packets declared lost by drained connections.
    pub lost_packets: u64,
    /// Transmits (quinn-proto's, one or a GSO run of datagrams each) queued for the sockets.
    pub transmits: u64,
    /// The most datagrams one transmit carried.
    pub max_transmit_datagrams: u64,
    /// Times a connection had to wait for the driver's pacer.
    pub paced_waits: u64,
    /// Wake-ups for socket readiness.
    pub io_wakes: u64,
    /// Wake-ups for a timer.
    pub timer_wakes: u64,
    /// The timer the pacer waits on; `None` with pacing off.
    #[serde(deserialize_with = "Option::deserialize")]
    pub pacing_timer: Option<PacingTimer>,
    /// Datagrams queued for the sockets, by the ECN codepoint quinn-proto asked for.
    pub tx_ecn: EcnCounts,
    /// Datagrams received, by the ECN codepoint the socket reported.
    pub rx_ecn: EcnCounts,
    /// PATH_CHALLENGE frames the connections sent: a peer's address changed (or ours did) and
    /// the new path was probed.
    pub path_challenges: u64,
    /// PATH_RESPONSE frames the connections received: probes answered.
    pub path_responses: u64,
    /// The largest UDP payload any connection's path MTU discovery reached (quinn-proto's
    /// `current_mtu`): 1200 until a probe of a larger size is acknowledged.
    pub max_path_mtu: u16,
    /// Path MTU black holes quinn-proto declared (more than three bursts of lost packets
    /// above the minimum MTU that no later delivery explains), each resetting that path's MTU
    /// to 1200 bytes for a minute: on loopback, drops at the receiving socket can look like one.
    pub mtu_black_holes: u64,
    /// Client connections that ended without their handshake confirmed: no HANDSHAKE_DONE
    /// came from the server (RFC 9001 section 4.1.2). One whose handshake completed here
    /// had its last flight lost on the way, or discarded by a server that saw it come from a
    /// new address before its own handshake was done (RFC 9000 section 9 allows that).
    pub unconfirmed: u64,
}

/// Datagrams by ECN codepoint. quinn-proto marks every packet ECT(0) until an ACK arrives
/// without ECN counts or with counts that do not add up, and then stops for the path; so a
/// sender whose datagrams are all ECT(0) (but for the unmarked probes of a path change) has
/// had its marks counted back by the peer's ACK_ECN frames.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EcnCounts {
    /// Not ECN-capable.
    pub not_ect: u64,
    /// ECT(0).
    pub ect0: u64,
    /// ECT(1).
    pub ect1: u64,
    /// Congestion experienced.
    pub ce: u64,
}

/// What the pacer waits on for release times nearer than 2 ms (`neqo_driver`'s, as reported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PacingTimer {
    /// A `timerfd` where there is one (Linux); tokio's timers elsewhere.
    #[default]
    Precise,
    /// tokio's timers and their 1 ms grid, as on platforms without a precise timer: bursts of
    /// about a millisecond of the rate, one wake-up per millisecond at most.
    Tokio,
}

/// What the handshakes did, as in the JSON reports' `tls` (`neqo_driver`'s `TlsCounters`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsCounters {
    /// Client: Retry packets accepted (integrity tag valid), each followed by a new Initial.
    pub retries_accepted: u64,
    /// Client: handshakes in which the server's certificate was verified (or, with
    /// `--insecure`, would have been): the full ones. A resumed TLS 1.3 handshake carries no
    /// certificate, so connections minus these were resumed.
    pub full_handshakes: u64,
    /// Server: session tickets redeemed from its ticket store (a client resuming).
    pub tickets_redeemed: u64,
    /// Client: connections whose session ticket allowed 0-RTT (keys to send it with);
    /// server: connections that accepted the client's 0-RTT.
    pub zero_rtt_attempted: u64,
    /// Client: connections whose 0-RTT the server accepted.
    pub zero_rtt_accepted: u64,
    /// Key updates, either side: 1-RTT key generations after the first of each connection.
    /// quinn-proto derives the next generation at the handshake's end and one more at every
    /// update, initiated or answered, so this counts both. (quinn-proto also updates on its
    /// own after a random 10 to 1000 packets of the first key phase, to exercise its peers.)
    pub key_updates: u64,
    /// Client: key updates `--key-update` asked for and quinn-proto carried out.
    pub key_updates_forced: u64,
}

/// What every client the benches drive reports of a transfer (`neqo-client`, the msquic
/// peer's client, `quinn-load`, `tcp-tls`): the keys they share with [`ClientReport`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TransferFigures {
    /// Response body bytes received.
    pub bytes_received: u64,
    /// Requests completed and verified.
    pub requests: u64,
    /// Gbit/s over the transfer; `None` from a client that does not say (`quinn-load`) or
    /// has no figure (a `null`).
    pub gbps: Option<f64>,
    /// Datagrams per receive syscall; `None` from a client without a UDP socket of its own
    /// to count (`tcp-tls`, `quinn-load`) or that has no figure.
    pub rx_datagrams_per_syscall: Option<f64>,
    /// TCP's maximum segment size: `tcp-tls` only.
    pub tcp_mss: Option<u32>,
}

impl TransferFigures {
    /// `gbps`, when it is a positive figure.
    #[must_use]
    pub fn positive_gbps(&self) -> Option<f64> {
        positive(self.gbps)
    }

    /// `rx_datagrams_per_syscall`, when it is a positive figure.
    #[must_use]
    pub fn positive_rx_datagrams_per_syscall(&self) -> Option<f64> {
        positive(self.rx_datagrams_per_syscall)
    }
}

fn positive(v: Option<f64>) -> Option<f64> {
    v.filter(|v| v.is_finite() && *v > 0.0)
}
