//! TLS and transport configuration shared by client and server.
//!
//! - `transport`: [`TransportOptions`], the transport settings both sides use, and the bound
//!   of path MTU discovery ([`mtu_bound`]).
//! - `identity`: the server's certificate and key ([`Identity`]), certificates from PEM.
//! - `suites`: the TLS 1.3 [`CipherSuite`]s and their order.
//! - `configs`: the rustls configs, QUIC and TLS over TCP, server and client ([`Trust`]).
//! - `verify`: the client's certificate verifiers (counting, `--insecure`).

mod configs;
mod identity;
mod suites;
mod transport;
mod verify;

pub use configs::{
    Secrets, Trust, client_crypto, client_crypto_with, server_crypto, server_crypto_with,
    stream_client_config, stream_server_config,
};
pub use identity::{Identity, read_certs};
pub use suites::CipherSuite;
pub use transport::{
    ACK_EVERY_MAX_DELAY, CLIENT_KEEP_ALIVE, CongestionControl, DEFAULT_MTU_BOUND,
    MAX_CONCURRENT_STREAMS, MAX_MTU_BOUND, MIN_MTU_BOUND, MTU_MINIMUM_CHANGE, ROUTE_MTU_CAP,
    TransportOptions, mtu_bound, qlog_label,
};

/// HTTP/0.9 over QUIC.
pub const ALPN_HQ: &str = "hq-interop";
/// HTTP/3 (RFC 9114).
pub const ALPN_H3: &str = "h3";
/// draft-banks-quic-performance.
pub const ALPN_PERF: &str = "perf";

/// The ALPN a connection negotiated.
#[must_use]
pub fn negotiated_alpn(conn: &quinn_proto::Connection) -> Option<String> {
    let data = conn.crypto_session().handshake_data()?;
    let hd = data
        .downcast::<quinn_proto::crypto::rustls::HandshakeData>()
        .ok()?;
    hd.protocol.and_then(|p| String::from_utf8(p).ok())
}
