//! Test fixtures shared by the workspace's tests and benchmarks.

#[cfg(feature = "msquic")]
pub mod msquic_peer;

pub mod process;
pub mod relay;
