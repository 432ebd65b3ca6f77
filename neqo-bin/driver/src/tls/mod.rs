//! The rustls configs for QUIC, server and client, and for TLS over TCP (a baseline that
//! measures the same TLS): provider, protocol version, cipher suites, certificates, key
//! logging, and counters of what the handshakes did.
//!
//! - `identity`: a certificate and its key ([`Identity`]), certificates from PEM.
//! - `certificates`: what a server serves ([`Certificates`]): several, chosen by SNI, and
//!   replaceable while it runs.
//! - `suites`: the TLS 1.3 [`CipherSuite`]s and their order.
//! - `configs`: the configs, QUIC and TLS over TCP, server and client ([`Trust`]).
//! - `verify`: the client's certificate verifiers (counting, insecure).
//! - [`counters`]: what the handshakes did, process-wide.

mod certificates;
mod configs;
pub mod counters;
mod identity;
mod suites;
mod verify;

pub use certificates::{Certificates, Replacements};
pub use configs::{
    Secrets, Trust, client_crypto, client_crypto_with, server_crypto, server_crypto_with,
    stream_client_config, stream_server_config,
};
pub use counters::TlsCounters;
pub use identity::{Identity, read_certs};
pub use suites::CipherSuite;

/// The ALPN a connection negotiated.
#[must_use]
pub fn negotiated_alpn(conn: &quinn_proto::Connection) -> Option<String> {
    let data = conn.crypto_session().handshake_data()?;
    let hd = data
        .downcast::<quinn_proto::crypto::rustls::HandshakeData>()
        .ok()?;
    hd.protocol.and_then(|p| String::from_utf8(p).ok())
}
