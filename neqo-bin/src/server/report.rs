//! What a server did: [`ServerReport`].

use super::AdmissionCounters;
use crate::driver::{Driver, DriverCounters};

/// What a server did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ServerReport {
    /// Requests answered completely.
    pub requests: u64,
    /// Requests refused or reset (malformed, bad path, escape, unknown or unreadable file).
    pub refused_requests: u64,
    /// Response bytes written.
    pub bytes_sent: u64,
    /// Request bytes read (perf uploads included).
    pub bytes_received: u64,
    /// Datagrams per receive syscall.
    pub rx_datagrams_per_syscall: f64,
    /// Datagrams per send syscall.
    pub tx_datagrams_per_syscall: f64,
    /// Kernel drops on the server's sockets.
    pub kernel_drops: u64,
    /// Packets the server's connections declared lost (drained ones and live ones at exit).
    pub lost_packets: u64,
    /// Driver counters (connections accepted and refused, Retries sent, transmits, pacing
    /// waits).
    pub driver: DriverCounters,
    /// Half-open connections, refusals by reason, handshake timeouts.
    pub admission: AdmissionCounters,
    /// The receive budget, bytes.
    pub receive_budget: u64,
    /// The receive windows granted now, summed: the most received data the open connections
    /// could make the server hold.
    pub receive_windows: u64,
    /// Connections refused because the budget had no window left for them.
    pub refused_budget: u64,
    /// Connections open (accepted, not yet drained) when the report was made. The server's
    /// per-connection state lives no longer than the driver's connection, so 0 means none.
    pub open_connections: u64,
    /// What the handshakes did: tickets redeemed (resumptions), 0-RTT accepted, key
    /// updates.
    pub tls: crate::tls_counters::TlsCounters,
    /// Socket statistics.
    #[serde(serialize_with = "crate::report::serialize_stats")]
    pub socket: neqo_udp::Stats,
}

impl ServerReport {
    /// One line for humans.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "receive windows {} of {} B (refused {}), connections accepted {} refused {} (half-open limit {}) retries {} half-open {} (peak {}, timed out {}) open-at-exit {}, requests {} refused {}, sent {} B, received {} B, lost packets {}\n{}",
            self.receive_windows,
            self.receive_budget,
            self.refused_budget,
            self.driver.accepted,
            self.driver.refused,
            self.admission.refused_half_open,
            self.driver.retries,
            self.admission.half_open,
            self.admission.peak_half_open,
            self.admission.handshake_timeouts,
            self.driver.accepted.saturating_sub(self.driver.drained),
            self.requests,
            self.refused_requests,
            self.bytes_sent,
            self.bytes_received,
            self.lost_packets,
            self.socket
        )
    }

    /// Adds the driver's and the sockets' counters; `live_lost` are the packets lost by
    /// connections still open.
    pub(super) fn fill(&mut self, driver: &Driver, live_lost: u64) {
        let s = driver.socket_stats();
        self.socket = s;
        self.rx_datagrams_per_syscall = s.rx.datagrams_per_syscall();
        self.tx_datagrams_per_syscall = s.tx.datagrams_per_syscall();
        self.kernel_drops = s.kernel_drops;
        self.driver = driver.counters();
        self.tls = crate::tls_counters::snapshot();
        self.open_connections = driver.open_connections() as u64;
        self.lost_packets = self.driver.lost_packets + live_lost;
    }
}
