//! Measurement code shared by the criterion benchmarks and the table-printing binaries, and
//! the value parsers of those binaries' command lines (`args`).

pub mod args;
pub mod attack;
pub mod cpu;
pub mod procfs;
pub mod tcp_tls;
pub mod transfer;
pub mod udp;

/// The README's Rust code, compiled by `cargo test --doc -p benches` so that the snippet a
/// reader copies first is the API as it is.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct Readme;
