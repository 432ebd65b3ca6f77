//! [`DriverCounters`]: what the driver alone knows. What the sockets moved is in their
//! [`Stats`](neqo_udp::Stats), counted once, there.

/// Counters of the driver's own decisions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DriverCounters {
    /// Incoming connections accepted.
    pub accepted: u64,
    /// Incoming connections refused (`CONNECTION_REFUSED`).
    pub refused: u64,
    /// Retry packets sent (address validation).
    pub retries: u64,
    /// The most connections open at once (not yet drained).
    pub peak_connections: u64,
    /// Connections drained and dropped.
    pub drained: u64,
    /// Packets declared lost by drained connections.
    pub lost_packets: u64,
    /// Transmits (quinn-proto's, one or a GSO run of datagrams each) queued for the sockets.
    pub transmits: u64,
    /// The most datagrams one transmit carried.
    pub max_transmit_datagrams: u64,
    /// Times a connection had to wait for the driver's pacer.
    pub paced_waits: u64,
    /// Wake-ups for socket readiness.
    pub io_wakes: u64,
    /// Wake-ups for a timer.
    pub timer_wakes: u64,
    /// The timer the pacer waits on; `None` with pacing off.
    pub pacing_timer: Option<crate::pacer::PacingTimer>,
}
