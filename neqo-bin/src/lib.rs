//! A QUIC endpoint driver on `neqo-udp`'s batched [`Socket`](neqo_udp::Socket), with
//! `hq-interop` (HTTP/0.9) and `perf` servers and clients.
//!
//! - [`driver`]: the single-threaded endpoint driver, with its pacer and congestion
//!   controller.
//! - [`server`]: [`server::ServerHandle::start`] runs a server on its own thread.
//! - [`client`]: [`client::run`] runs a client to completion and reports.
//! - [`hq`], [`perf`], [`pattern`]: the two protocols' rules and the generated body, free of
//!   any QUIC stack so that other peers can share them.
//! - [`body`]: bodies in and out of quinn-proto streams; [`disk`]: file work off the driver
//!   thread.
//! - `testing` (feature `testing`): clients that tests of other crates share with ours.

pub mod body;
pub mod cli;
pub mod client;
pub mod disk;
pub mod driver;
pub mod hq;
pub mod idmap;
pub mod pattern;
pub mod perf;
pub mod report;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
pub mod tls_counters;
