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
    /// Datagrams opening with an Initial packet that the application shed, unread by
    /// quinn-proto, while the driver was behind ([`Application::screen_initial`]).
    ///
    /// [`Application::screen_initial`]: super::Application::screen_initial
    pub initials_shed: u64,
    /// Replies no connection owns (Version Negotiation, Retry, refusals, stateless resets)
    /// dropped because the path's transmit queue was at its limit (a write-blocked socket).
    pub stateless_dropped: u64,
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
    pub pacing_timer: Option<super::pacer::PacingTimer>,
    /// Datagrams queued for the sockets, by the ECN codepoint quinn-proto asked for.
    pub tx_ecn: EcnCounts,
    /// Datagrams received, by the ECN codepoint the socket reported.
    pub rx_ecn: EcnCounts,
    /// PATH_CHALLENGE frames the connections sent: a peer's address changed (or ours did) and
    /// the new path was probed.
    pub path_challenges: u64,
    /// PATH_RESPONSE frames the connections received: probes answered.
    pub path_responses: u64,
    /// The largest UDP payload any connection's path MTU discovery reached (quinn-proto's
    /// `current_mtu`): 1200 until a probe of a larger size is acknowledged.
    pub max_path_mtu: u16,
    /// Path MTU black holes quinn-proto declared (more than three bursts of lost packets
    /// above the minimum MTU that no later delivery explains), each resetting that path's MTU
    /// to 1200 bytes for a minute: on loopback, drops at the receiving socket can look like one.
    pub mtu_black_holes: u64,
    /// Client connections that ended without their handshake confirmed: no HANDSHAKE_DONE
    /// came from the server (RFC 9001 section 4.1.2). One whose handshake completed here
    /// had its last flight lost on the way, or discarded by a server that saw it come from a
    /// new address before its own handshake was done (RFC 9000 section 9 allows that).
    pub unconfirmed: u64,
}

impl DriverCounters {
    /// Adds another driver's counts to these (a server's workers): sums, but for the largest
    /// transmit and the peak, which is the larger of the two (a lower bound of the peak of
    /// both drivers together).
    pub fn add(&mut self, other: &Self) {
        self.accepted += other.accepted;
        self.refused += other.refused;
        self.retries += other.retries;
        self.stateless_dropped += other.stateless_dropped;
        self.initials_shed += other.initials_shed;
        self.peak_connections = self.peak_connections.max(other.peak_connections);
        self.drained += other.drained;
        self.lost_packets += other.lost_packets;
        self.transmits += other.transmits;
        self.max_transmit_datagrams = self
            .max_transmit_datagrams
            .max(other.max_transmit_datagrams);
        self.paced_waits += other.paced_waits;
        self.io_wakes += other.io_wakes;
        self.timer_wakes += other.timer_wakes;
        self.pacing_timer = self.pacing_timer.or(other.pacing_timer);
        self.tx_ecn.add_counts(&other.tx_ecn);
        self.rx_ecn.add_counts(&other.rx_ecn);
        self.path_challenges += other.path_challenges;
        self.path_responses += other.path_responses;
        self.max_path_mtu = self.max_path_mtu.max(other.max_path_mtu);
        self.mtu_black_holes += other.mtu_black_holes;
        self.unconfirmed += other.unconfirmed;
    }

    /// Adds a connection's path validation frames and its path MTU.
    pub(super) fn add_paths(&mut self, stats: &quinn_proto::ConnectionStats) {
        self.path_challenges += stats.frame_tx.path_challenge;
        self.path_responses += stats.frame_rx.path_response;
        self.max_path_mtu = self.max_path_mtu.max(stats.path.current_mtu);
        self.mtu_black_holes += stats.path.black_holes_detected;
    }
}

/// Datagrams by ECN codepoint. quinn-proto marks every packet ECT(0) until an ACK arrives
/// without ECN counts or with counts that do not add up, and then stops for the path; so a
/// sender whose datagrams are all ECT(0) (but for the unmarked probes of a path change) has
/// had its marks counted back by the peer's ACK_ECN frames.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct EcnCounts {
    /// Not ECN-capable.
    pub not_ect: u64,
    /// ECT(0).
    pub ect0: u64,
    /// ECT(1).
    pub ect1: u64,
    /// Congestion experienced.
    pub ce: u64,
}

impl EcnCounts {
    /// Adds `other`'s counts.
    pub const fn add_counts(&mut self, other: &Self) {
        self.not_ect += other.not_ect;
        self.ect0 += other.ect0;
        self.ect1 += other.ect1;
        self.ce += other.ce;
    }

    /// Counts `datagrams` marked `ecn`.
    pub(super) fn add(&mut self, ecn: Option<quinn_proto::EcnCodepoint>, datagrams: u64) {
        let slot = match ecn {
            None => &mut self.not_ect,
            Some(quinn_proto::EcnCodepoint::Ect0) => &mut self.ect0,
            Some(quinn_proto::EcnCodepoint::Ect1) => &mut self.ect1,
            Some(quinn_proto::EcnCodepoint::Ce) => &mut self.ce,
        };
        *slot += datagrams;
    }
}
