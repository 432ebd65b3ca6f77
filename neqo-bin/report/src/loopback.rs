//! `neqo-loopback --json`: a [`LoopbackRow`] per I/O mode.

use crate::{ClientReport, ServerReport};

/// One I/O mode's transfer: the figures `neqo-loopback` prints, and both sides' reports whole.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoopbackRow {
    /// `batched` or `single`.
    pub mode: String,
    /// Whether the driver paced, on both sides.
    pub pacing: bool,
    /// Response bytes the client received.
    pub bytes: u64,
    /// The client's transfer time.
    pub seconds: f64,
    /// The client's rate.
    pub gbps: f64,
    /// Server sending, client receiving: the data direction.
    pub server_tx_per_syscall: f64,
    pub client_rx_per_syscall: f64,
    /// Acknowledgements the other way.
    pub client_tx_per_syscall: f64,
    pub server_rx_per_syscall: f64,
    /// CPU seconds (user and system) of each process.
    pub client_cpu_s: f64,
    pub server_cpu_s: f64,
    /// Both sides' kernel drops.
    pub kernel_drops: u64,
    /// Both sides' lost packets.
    pub lost_packets: u64,
    /// The largest path MTU the server's discovery reached: the data's datagram size, which
    /// sets much of the cost per byte.
    pub server_path_mtu: u64,
    /// The client's report.
    pub client: ClientReport,
    /// The server's report.
    pub server: ServerReport,
}
