//! The two simple request protocols every peer here speaks, and the body they generate, free
//! of any QUIC stack so that neqo's server and client, the other stacks' peers (quinn,
//! quiche, msquic) and the TCP+TLS baseline share one copy of each rule:
//!
//! - [`hq`]: `hq-interop`, HTTP/0.9 over QUIC: the request line, the paths a server serves,
//!   the stream error codes.
//! - [`web`]: how a web file server reads a request's target (query, %-escapes, index,
//!   the names it refuses), for every HTTP version.
//! - [`perf`]: draft-banks-quic-performance as secnetperf speaks it.
//! - [`pattern`]: the generated body of `/N` responses and `perf` transfers, and its check.
//! - `body` (feature `quinn-proto`): bodies sent into and read out of quinn-proto streams,
//!   chunk by chunk, generated or fed from elsewhere.
//!
//! Beside them, the ALPN of each protocol the peers here speak.

#[cfg(feature = "quinn-proto")]
pub mod body;
pub mod hq;
pub mod pattern;
pub mod perf;
pub mod web;

/// HTTP/0.9 over QUIC.
pub const ALPN_HQ: &str = "hq-interop";
/// draft-banks-quic-performance.
pub const ALPN_PERF: &str = "perf";
/// HTTP/3 (RFC 9114), whose rules live with its implementations (neqo-server's own, and
/// neqo-h3 on the `h3` crate).
pub const ALPN_H3: &str = "h3";
