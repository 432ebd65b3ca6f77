//! The process harness of the workspace's tests, benchmarks and tools: start a server child
//! and wait (bounded) until it says where it listens, stop it with SIGTERM and a deadline,
//! run a client command to its end within a deadline, and measure each (exit code, wall time,
//! CPU time, peak RSS, the end of its output), all from `neqo-process`, which `neqo-loopback`
//! shares; find and build the workspace's binaries; and (Linux) network namespaces to shape or
//! resize a loopback device in ([`netns`]); and the metrics endpoint's exposition parsed
//! strictly ([`openmetrics`]).
//!
//! The `interop` binary, the neqo/msquic interop matrix, is built on it.

mod locate;
#[cfg(target_os = "linux")]
pub mod netns;
#[cfg(feature = "openmetrics")]
pub mod openmetrics;
mod peer;

pub use locate::{
    BUILD_MSQUIC_PEER, BUILD_NEQO_BINS, BUILD_RELAY, cargo_build, cargo_command, locate_binary,
    release_binary,
};
pub use neqo_process::{
    CAPTURE_LIMIT, Measured, STOP_GRACE, Server, StartError, parse_listening, run,
};
pub use peer::Impl;
