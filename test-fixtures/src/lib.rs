//! Test fixtures shared by the workspace's tests and benchmarks.

pub mod relay;
