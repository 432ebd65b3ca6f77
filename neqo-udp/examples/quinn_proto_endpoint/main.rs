//! A minimal QUIC endpoint that drives `quinn-proto` (sans-I/O) directly on
//! [`neqo_udp::Socket`]s: a server and a client in one task, each with its own socket. The
//! client opens a stream, sends a message, and the server echoes it back reversed.
//!
//! ```text
//! cargo run --release -p neqo-udp --features quinn-proto --example quinn_proto_endpoint
//! ```
//!
//! The data flow is the one every endpoint on this crate has: kernel -> `Socket::recv` ->
//! `Endpoint::handle` / `Connection::handle_event` -> the application -> `poll_transmit` ->
//! `TxQueue` -> `Socket::flush` -> kernel. neqo-bin's driver is the full version (many
//! connections, pacing, timers in one heap).

#[cfg(not(cross_check))]
mod endpoint;

#[cfg(not(cross_check))]
fn main() -> std::io::Result<()> {
    endpoint::run()
}

/// `.ci/run`'s type-check for other platforms compiles no C, so it leaves out this example's
/// TLS provider (ring) and builds this stand-in.
#[cfg(cross_check)]
fn main() {}
