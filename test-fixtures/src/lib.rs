//! The process harness of the workspace's tests, benchmarks and tools: start a server child
//! and wait (bounded) until it says where it listens, stop it with SIGTERM and a deadline,
//! run a client command to its end within a deadline, and measure each (exit code, wall time,
//! CPU time, peak RSS, the end of its output); find and build the workspace's binaries; and
//! (Linux) network namespaces to shape or resize a loopback device in ([`netns`]).
//!
//! The `interop` binary, the neqo/msquic interop matrix, is built on it.

mod capture;
mod child;
mod locate;
#[cfg(target_os = "linux")]
pub mod netns;
mod os;
mod peer;
mod server;

pub use capture::CAPTURE_LIMIT;
pub use child::{Measured, run};
pub use locate::{
    BUILD_MSQUIC_PEER, BUILD_NEQO_BINS, BUILD_RELAY, cargo_build, locate_binary, release_binary,
};
pub use peer::Impl;
pub use server::{STOP_GRACE, Server, StartError, parse_listening};
