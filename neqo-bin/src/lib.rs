//! `hq-interop` (HTTP/0.9), HTTP/3 and `perf` servers and clients on `neqo-driver`'s endpoint
//! driver and `neqo-udp`'s batched sockets.
//!
//! - [`server`]: [`server::ServerHandle::start`] runs a server on its own thread.
//! - `client` (feature `cli`): `client::run` runs a client to completion and reports.
//! - `cli` (feature `cli`): the binaries' command lines, checks and logging.
//! - [`disk`]: the server's files, read off the driver thread.
//! - `testing` (feature `testing`): clients that tests of other crates share with ours.
//!
//! The feature `cli` (default) is the command-line stack: clap, the client's progress bar
//! (indicatif) and latency percentiles (hdrhistogram), tracing-subscriber, and the process
//! harness `neqo-loopback` runs its children with. Without it the library is the driver, the
//! server and the protocols, for embedding. The client goes with it as a whole: its load
//! report is one thing with its percentiles, and a report whose fields depend on a feature
//! would be two clients.

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
pub mod client;
pub mod disk;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;
