//! The reports of the benches' clients of other stacks, which `compare` reads as
//! [`TransferFigures`](crate::TransferFigures) beside `neqo-client`'s.

/// `tcp-tls client --json`: one download over kernel TCP and rustls, with the keys
/// `neqo-client`'s report has for the same figures.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TcpTlsReport {
    /// Response body bytes received.
    pub bytes_received: u64,
    /// Request bytes sent.
    pub bytes_sent: u64,
    /// Requests: one.
    pub requests: u64,
    /// Connections: one.
    pub connections: u64,
    /// From the connect to the body's end.
    pub seconds: f64,
    /// (received + sent) bits per second / 1e9 over `seconds`.
    pub gbps: f64,
    /// The TCP and TLS handshakes, milliseconds.
    pub handshake_ms: f64,
    /// The negotiated suite, as rustls names it (`TLS13_AES_128_GCM_SHA256`).
    pub cipher_suite: String,
    /// TCP's maximum segment size on the connection (`TCP_MAXSEG`): the payload of its
    /// segments, beside a QUIC stack's datagram size; `None` where it cannot be read.
    #[serde(deserialize_with = "Option::deserialize")]
    pub tcp_mss: Option<u32>,
}

/// `quinn-load --json`: what quinn's own client verified of its requests.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QuinnLoadReport {
    /// Requests completed with whole, verified bodies.
    pub requests: u64,
    /// Body bytes received.
    pub bytes_received: u64,
    /// From the first connect to the last body.
    pub seconds: f64,
    /// Datagrams quinn's endpoint sent.
    pub datagrams_sent: u64,
    /// Datagrams quinn's endpoint received.
    pub datagrams_received: u64,
    /// Why the load failed, if it did (the counts are then zeros).
    #[serde(deserialize_with = "Option::deserialize")]
    pub error: Option<String>,
}

/// `msquic-peer server --json`: what its connections did, summed from msquic's statistics
/// (`QUIC_STATISTICS_V2`) as each ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MsquicServerReport {
    /// Connections that ended.
    pub connections: u64,
    /// The largest path MTU any connection reached (`SendPathMtu`: IP packet bytes).
    pub max_path_mtu: u64,
    /// The largest UDP payload that path MTU carries (without the IP and UDP headers): the
    /// figure beside neqo's `max_path_mtu`, which counts UDP payload.
    pub max_udp_payload: u64,
    /// QUIC packets sent.
    pub packets_sent: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// QUIC packets received.
    pub packets_received: u64,
    /// Packets declared lost, minus those later found spurious.
    pub lost_packets: u64,
}
