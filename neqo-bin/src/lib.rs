//! A QUIC endpoint driver on `neqo-udp`'s batched [`Socket`](neqo_udp::Socket), with
//! `hq-interop` (HTTP/0.9) and `perf` servers and clients.
//!
//! - [`driver`]: the single-threaded endpoint driver.
//! - [`server`]: [`server::ServerHandle::start`] runs a server on its own thread.
//! - [`client`]: [`client::run`] runs a client to completion and reports.
//! - [`hq`], [`perf`], [`pattern`]: the two protocols' rules and the generated body, free of
//!   any QUIC stack so that other peers can share them.
//! - [`body`]: bodies in and out of quinn-proto streams; [`disk`]: file work off the driver
//!   thread.
//! - [`congestion`]: the congestion controller every connection gets (`--cc`, with a floor
//!   through the handshake).

pub mod body;
pub mod cli;
pub mod client;
pub mod congestion;
pub mod disk;
pub mod driver;
pub mod hq;
pub mod idmap;
pub mod pacer;
pub mod pattern;
pub mod perf;
pub mod precise_timer;
pub mod report;
pub mod server;
pub mod tls;
pub mod tls_counters;
