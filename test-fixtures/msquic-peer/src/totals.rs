//! What the server's connections did, summed as each ends: `msquic-peer server --json FILE`
//! writes it at exit, so that a comparison can say what datagram size msquic used.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use msquic::ffi;
use neqo_report::MsquicServerReport;

/// IPv4 and UDP headers: msquic's path MTU counts them, a UDP payload does not.
const V4_HEADERS: u64 = 20 + 8;
/// IPv6 and UDP headers.
const V6_HEADERS: u64 = 40 + 8;

/// Sums over the connections that ended, from msquic's `QUIC_STATISTICS_V2`.
#[derive(Debug)]
pub(crate) struct Totals {
    connections: AtomicU64,
    /// The largest `SendPathMtu` (IP packet size) any connection reached.
    max_path_mtu: AtomicU64,
    /// The largest UDP payload that path MTU allowed: what msquic's datagrams could carry.
    max_udp_payload: AtomicU64,
    packets_sent: AtomicU64,
    /// UDP payload bytes sent.
    bytes_sent: AtomicU64,
    packets_received: AtomicU64,
    /// Packets declared lost, minus those later found spurious.
    lost_packets: AtomicU64,
}

impl Totals {
    pub(crate) const fn new() -> Self {
        Self {
            connections: AtomicU64::new(0),
            max_path_mtu: AtomicU64::new(0),
            max_udp_payload: AtomicU64::new(0),
            packets_sent: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            packets_received: AtomicU64::new(0),
            lost_packets: AtomicU64::new(0),
        }
    }

    /// Adds one ended connection's statistics; `v6` is its path's address family.
    pub(crate) fn add(&self, s: &ffi::QUIC_STATISTICS_V2, v6: bool) {
        let mtu = u64::from(s.SendPathMtu);
        let headers = if v6 { V6_HEADERS } else { V4_HEADERS };
        self.connections.fetch_add(1, Relaxed);
        self.max_path_mtu.fetch_max(mtu, Relaxed);
        self.max_udp_payload
            .fetch_max(mtu.saturating_sub(headers), Relaxed);
        self.packets_sent.fetch_add(s.SendTotalPackets, Relaxed);
        self.bytes_sent.fetch_add(s.SendTotalBytes, Relaxed);
        self.packets_received.fetch_add(s.RecvTotalPackets, Relaxed);
        self.lost_packets.fetch_add(
            s.SendSuspectedLostPackets
                .saturating_sub(s.SendSpuriousLostPackets),
            Relaxed,
        );
    }

    /// The totals as `--json` writes them.
    pub(crate) fn report(&self) -> MsquicServerReport {
        let get = |a: &AtomicU64| a.load(Relaxed);
        MsquicServerReport {
            connections: get(&self.connections),
            max_path_mtu: get(&self.max_path_mtu),
            max_udp_payload: get(&self.max_udp_payload),
            packets_sent: get(&self.packets_sent),
            bytes_sent: get(&self.bytes_sent),
            packets_received: get(&self.packets_received),
            lost_packets: get(&self.lost_packets),
        }
    }
}

#[cfg(test)]
mod tests {
    use msquic::ffi;
    use neqo_report::MsquicServerReport;

    use super::Totals;

    fn stats(mtu: u16, sent: u64, lost: u64, spurious: u64) -> ffi::QUIC_STATISTICS_V2 {
        // SAFETY: QUIC_STATISTICS_V2 is a plain C struct of integers; all-zero is valid.
        let mut s: ffi::QUIC_STATISTICS_V2 = unsafe { std::mem::zeroed() };
        s.SendPathMtu = mtu;
        s.SendTotalPackets = sent;
        s.SendTotalBytes = sent * 1000;
        s.SendSuspectedLostPackets = lost;
        s.SendSpuriousLostPackets = spurious;
        s
    }

    #[test]
    fn sums_counts_and_keeps_the_largest_path_by_family() {
        let t = Totals::new();
        t.add(&stats(1500, 10, 3, 1), false);
        t.add(&stats(1280, 5, 0, 0), true);
        t.add(&stats(1500, 1, 1, 2), true);
        assert_eq!(
            t.report(),
            MsquicServerReport {
                connections: 3,
                max_path_mtu: 1500,
                // 1500 - 28 over IPv4 beats 1500 - 48 over IPv6.
                max_udp_payload: 1472,
                packets_sent: 16,
                bytes_sent: 16_000,
                packets_received: 0,
                // More spurious than suspected counts as none lost, not a wrap.
                lost_packets: 2,
            }
        );
    }
}
