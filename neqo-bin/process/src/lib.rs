//! Child processes, run and measured: a server child started and waited for (bounded) until it
//! says where it listens, then stopped with SIGTERM and a deadline ([`Server`]); a command run
//! to its end within a deadline ([`run`]); for each, how it ended and what it used (exit code,
//! wall and CPU time, peak RSS, the end of its output: [`Measured`]).
//!
//! `neqo-loopback` runs its server and client with it; so do the workspace's tests, benchmarks
//! and tools, through `test-fixtures`, which re-exports it. It is a crate of its own so that a
//! product binary needs nothing of the test harness.

mod capture;
mod child;
mod os;
mod server;

pub use capture::CAPTURE_LIMIT;
pub use child::{Measured, run};
pub use server::{STOP_GRACE, Server, StartError, parse_listening};
