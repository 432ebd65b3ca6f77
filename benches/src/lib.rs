//! Measurement code shared by the criterion benchmarks and the table-printing binaries, and
//! the value parsers of those binaries' command lines (`args`).

pub mod args;
pub mod attack;
pub mod cpu;
pub mod procfs;
pub mod tcp_tls;
pub mod transfer;
pub mod udp;
