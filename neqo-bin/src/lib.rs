//! A QUIC endpoint driver on `neqo-udp`'s batched [`Socket`](neqo_udp::Socket), with
//! `hq-interop` (HTTP/0.9) and `perf` servers and clients.
//!
//! - [`driver`]: the single-threaded endpoint driver.
//! - [`server`]: [`server::ServerHandle::start`] runs a server on its own thread.
//! - [`client`]: [`client::run`] runs a client to completion and reports.

pub mod body;
pub mod cli;
pub mod client;
pub mod driver;
pub mod idmap;
pub mod pacer;
pub mod pattern;
pub mod precise_timer;
pub mod server;
pub mod timers;
pub mod tls;
