//! What a server did: [`ServerReport`] of `neqo-server --json`, the same fields as
//! `neqo_server_core`'s. `neqo_bin::report` converts those into these, destructuring every type
//! it can name (a field added there fails to compile until it is added here) and comparing the
//! JSON of both in a test for the rest.

use neqo_udp::Stats;

use crate::{DriverCounters, TlsCounters};

/// One worker's share of the work.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkerSummary {
    /// Connections it accepted.
    pub accepted: u64,
    /// The most it held at once.
    pub peak_connections: u64,
    /// Requests it answered completely.
    pub requests: u64,
    /// Response bytes it wrote.
    pub bytes_sent: u64,
    /// Datagrams that reached it (from its sockets, or from the dispatcher).
    pub rx_datagrams: u64,
    /// Datagrams its sockets sent.
    pub tx_datagrams: u64,
    /// Kernel drops on its sockets (0 with channel steering: its socket is the dispatcher's,
    /// whose drops are in [`ServerReport::dispatch`]).
    pub kernel_drops: u64,
    /// Datagrams for it the dispatcher dropped because its channel was full (channel steering).
    pub dispatch_dropped: u64,
    /// Initials it shed unread while behind (`initial_shed`).
    pub initials_shed: u64,
}

/// What a server did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ServerReport {
    /// Requests answered completely (the response handed to the transport whole).
    pub requests: u64,
    /// Requests refused or reset (malformed, bad path, escape, unknown or unreadable file).
    pub refused_requests: u64,
    /// Requests under way when the shutdown's drain period ended: cut, their streams reset
    /// where the protocol allows, so that no client takes one for unprocessed.
    #[serde(default)]
    pub cut_at_shutdown: u64,
    /// Panics caught in the server's applications' code (services, raw-QUIC sessions): each
    /// cost its request or its connection, and the server served on.
    #[serde(default)]
    pub app_panics: u64,
    /// Response bytes written.
    pub bytes_sent: u64,
    /// Request bytes read (perf uploads included).
    pub bytes_received: u64,
    /// Datagrams per receive syscall.
    pub rx_datagrams_per_syscall: f64,
    /// Datagrams per send syscall.
    pub tx_datagrams_per_syscall: f64,
    /// Kernel drops on the server's sockets.
    pub kernel_drops: u64,
    /// Packets the server's connections declared lost (drained ones and live ones at exit).
    pub lost_packets: u64,
    /// Driver counters (connections accepted and refused, Retries sent, transmits, pacing
    /// waits).
    pub driver: DriverCounters,
    /// Half-open connections, refusals by reason, handshake timeouts.
    pub admission: AdmissionCounters,
    /// The receive budget, bytes.
    pub receive_budget: u64,
    /// The receive windows granted now, summed: the most received data the open connections
    /// could make the server hold.
    pub receive_windows: u64,
    /// Connections refused because the budget had no window left for them.
    pub refused_budget: u64,
    /// Connections refused because half the budget was granted and their source (an IPv4
    /// address, an IPv6 /64) held its share of it already.
    pub refused_source_share: u64,
    /// Connections open (accepted, not yet drained) when the report was made. The server's
    /// per-connection state lives no longer than the driver's connection, so 0 means none.
    pub open_connections: u64,
    /// What the handshakes did: tickets redeemed (resumptions), 0-RTT accepted, key
    /// updates.
    pub tls: TlsCounters,
    /// Socket statistics.
    pub socket: Stats,
    /// How datagrams reached the workers.
    pub steering: String,
    /// With channel steering, what the dispatcher did: datagrams handed to each worker and
    /// dropped on its full channel, and the receive side of the listening sockets (their
    /// receive syscalls and kernel drops, which [`socket`](Self::socket) then reports).
    #[serde(deserialize_with = "Option::deserialize")]
    pub dispatch: Option<DispatchReport>,
    /// The HTTP/3 requests (counted in the totals above too).
    pub http3: Http3Counters,
    /// Each worker's share, in worker order (the rest of the report adds them up).
    pub workers: Vec<WorkerSummary>,
}

/// The gate's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdmissionCounters {
    /// Handshakes in progress now.
    pub half_open: usize,
    /// The most handshakes in progress at once.
    pub peak_half_open: usize,
    /// Retries decided (the driver counts those it sent).
    pub retries: u64,
    /// Connections refused for `--max-half-open`.
    pub refused_half_open: u64,
    /// Connections refused for `--max-connections`.
    pub refused_full: u64,
    /// Handshakes given up at their timeout.
    pub handshake_timeouts: u64,
    /// Handshakes evicted from a full table to make room for another source's newcomer.
    pub evicted_half_open: u64,
    /// How long the completed handshakes took, from accepting the connection.
    pub handshakes: HandshakeTimes,
}

/// The upper bounds of [`HandshakeTimes`]'s buckets, in milliseconds (the last bucket counts
/// what is longer).
pub const HANDSHAKE_BUCKETS_MS: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/// Handshake durations, counted in buckets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HandshakeTimes {
    /// Handshakes completed.
    pub count: u64,
    /// Their durations added up, in microseconds.
    pub sum_us: u64,
    /// Bucket `i` counts the handshakes longer than bucket `i - 1`'s bound and at most
    /// [`HANDSHAKE_BUCKETS_MS`]`[i]`; the last one those longer than every bound.
    pub buckets: [u64; HANDSHAKE_BUCKETS_MS.len() + 1],
}

/// What the dispatcher did, for the server's report.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DispatchReport {
    /// Datagrams each worker's channel holds at most.
    pub capacity: usize,
    /// Datagrams handed to each worker, in worker order.
    pub datagrams: Vec<u64>,
    /// Datagrams dropped because the worker's channel was full (or the worker had stopped),
    /// in worker order.
    pub dropped: Vec<u64>,
    /// Datagrams without a worker byte, placed by the hash of their source address.
    pub by_source: u64,
    /// The dispatcher's sockets (the listening ones): receive syscalls and kernel drops.
    pub socket: Stats,
}

/// What the HTTP/3 requests did, for the server's report (which also counts them in its
/// totals: `requests`, `refused_requests`, `bytes_sent`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Http3Counters {
    /// Successful responses (200) handed to the transport whole (the access log says whether
    /// the client acknowledged them).
    pub responses: u64,
    /// Body bytes sent.
    pub body_bytes: u64,
    /// Request body bytes received (`POST`).
    pub uploaded_bytes: u64,
    /// Requests answered with an error status (4xx, 5xx).
    pub error_statuses: u64,
    /// Requests that ended without a whole response: cancelled by the client, or a stream
    /// or connection error.
    pub cancelled: u64,
    /// Requests refused unprocessed after the server's GOAWAY (`H3_REQUEST_REJECTED`): the
    /// client may retry them elsewhere.
    pub rejected: u64,
}
