//! Measurement code shared by the criterion benchmarks and the table-printing binaries.

pub mod attack;
pub mod cpu;
pub mod procfs;
pub mod tcp_tls;
pub mod transfer;
pub mod udp;
