//! `hq-interop` (HTTP/0.9), HTTP/3 and `perf` servers and clients on `neqo-driver`'s endpoint
//! driver and `neqo-udp`'s batched sockets.
//!
//! - [`client`]: `client::run` runs a client to completion and reports.
//! - [`cli`]: the binaries' command lines, checks and logging.
//! - [`report`]: the driver's and the server's counters as `neqo_report`'s types, which the
//!   JSON reports are written as.
//! - `testing` (feature `testing`): clients that tests of other crates share with ours.
//!
//! The libraries under them are crates of their own: `neqo-driver` (the endpoint driver),
//! `neqo-protocols`, `neqo-h3` and `neqo-server-core` (the server's machinery).

pub mod cli;
pub mod client;
pub mod report;
#[cfg(feature = "testing")]
pub mod testing;
