//! Transport settings both sides use: idle timeout, windows, stream limits, congestion
//! control, path MTU discovery's bound, ACK frequency and qlog, made into quinn-proto's
//! `TransportConfig` in one place so that client and server cannot drift apart.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use quinn_proto::{
    AckFrequencyConfig, IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt,
    congestion::{BbrConfig, ControllerFactory, CubicConfig, NewRenoConfig},
};

use crate::{ConfigError, congestion::HandshakeFloorFactory};

/// Congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum CongestionControl {
    /// RFC 9002 NewReno.
    Newreno,
    /// CUBIC (RFC 9438).
    #[default]
    Cubic,
    /// quinn-proto's experimental BBR.
    Bbr,
}

/// Transport settings both sides use.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    pub idle_timeout: Duration,
    pub cc: CongestionControl,
    /// Directory for one qlog file per connection.
    pub qlog_dir: Option<PathBuf>,
    /// Bytes the peer may send ahead of what we have read, over all streams: the connection
    /// receive window, and the `initial_max_data` it is told. (The server advertises a small
    /// one, the same for every connection so that 0-RTT stays valid, and raises it per
    /// connection from its receive budget.)
    pub receive_window: u64,
    /// Send a PING when nothing ack-eliciting went out for this long. A client that only
    /// receives sends nothing but ACKs, and none once the server's packets stop reaching it:
    /// if its address changed (a NAT rebinding it) just after its last ACK, the server goes
    /// on sending to the old address and the connection stalls until the idle timeout. The
    /// PING brings the server the new address.
    pub keep_alive: Option<Duration>,
    /// The most UDP payload path MTU discovery may probe for (1200 to
    /// [`MAX_MTU_BOUND`], within the route's MTU; [`mtu_bound`]); `None`: the route's, up to
    /// [`ROUTE_MTU_CAP`].
    pub max_mtu: Option<u16>,
    /// The largest UDP payload path MTU discovery probes up to (quinn-proto's
    /// `MtuDiscoveryConfig::upper_bound`; it starts at 1200), as [`mtu_bound`] picked it from
    /// `max_mtu` and the route: the client sets it for its server, the server for its listen
    /// addresses and, where they reach other hosts, for each peer at admission.
    pub mtu_upper_bound: u16,
    /// Ask the peer to acknowledge every N ack-eliciting packets rather than
    /// every second one, and at the latest after [`ACK_EVERY_MAX_DELAY`] (the ACK frequency
    /// extension; a peer without it ignores the request). `None`: RFC 9000's every second.
    pub ack_every: Option<u32>,
    /// Unidirectional streams the peer may open at once: none for `hq-interop` and `perf`,
    /// at least three for HTTP/3 (its control and QPACK streams, RFC 9114
    /// section 6.2).
    pub uni_streams: u32,
}

/// How long a peer asked for fewer ACKs ([`TransportOptions::ack_every`]) may hold one back: short, because a
/// flight of fewer than N packets (slow start, a small window after loss) waits this long for
/// its ACK, which delays the window's growth; the peer's default (25 ms) would cost a
/// round trip of that length each time.
pub const ACK_EVERY_MAX_DELAY: Duration = Duration::from_millis(2);

/// The MTU discovery bound where the route is not known (a server's wildcard address before
/// a peer is known): 1452 bytes of UDP payload fit a 1500-byte Ethernet MTU over IPv4 and
/// IPv6 (quinn-proto's default).
pub const DEFAULT_MTU_BOUND: u16 = 1452;

/// The most the search goes to by default where the route is known: a jumbo frame's payload
/// (a 9000-byte MTU less the IPv4 and UDP headers). Loopback's 64 KiB route would ask for
/// probes of 30 to 65 KB each, which short connections cannot afford
/// (`docs/records/path-mtu.md`); `max_mtu` asks for more.
pub const ROUTE_MTU_CAP: u16 = 8972;

/// The search stops once the next probe would change the MTU by less than this (quinn-proto
/// halves the gap; its default is 20 bytes): two or three probes fewer per connection, for a
/// result at most this far short of what the path carries.
pub const MTU_MINIMUM_CHANGE: u16 = 64;

/// The least: every QUIC path carries 1200-byte datagrams (RFC 9000 section 14).
pub const MIN_MTU_BOUND: u16 = 1200;

/// Most bytes of UDP payload QUIC sends (RFC 9000's `max_udp_payload_size` limit).
pub const MAX_MTU_BOUND: u16 = 65_527;

/// The bound for path MTU discovery towards `peer`: what the route to `peer` carries where
/// that is known ([`neqo_udp::max_udp_payload_to`]), up to `max_mtu`, or by
/// default up to [`ROUTE_MTU_CAP`]; where it is not, `max_mtu` or [`DEFAULT_MTU_BOUND`].
/// So by default 1472 bytes on an Ethernet route, 8972 on a jumbo-frame one and on
/// loopback; a `max_mtu` of 65527 probes up to loopback's 65507.
///
/// Probing above the path MTU is safe (lost probes only end the search) but not free: each
/// probe is a padded datagram of the size tried, sent up to three times if lost, so the
/// bound and [`MTU_MINIMUM_CHANGE`] set what a connection's search costs
/// (`docs/records/path-mtu.md` has the figures).
#[must_use]
pub fn mtu_bound(peer: Option<SocketAddr>, max_mtu: Option<u16>) -> u16 {
    let route = peer
        .and_then(|p| neqo_udp::max_udp_payload_to(p).ok())
        .map(|m| u16::try_from(m).unwrap_or(MAX_MTU_BOUND));
    match (route, max_mtu) {
        (Some(r), Some(max)) => r.min(max),
        (Some(r), None) => r.min(ROUTE_MTU_CAP),
        (None, Some(max)) => max,
        (None, None) => DEFAULT_MTU_BOUND,
    }
    .max(MIN_MTU_BOUND)
}

/// Requests (bidirectional streams) a peer may have open at once on a connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// The client's default [`TransportOptions::keep_alive`]: a stalled path recovers within it,
/// for one small datagram a second on an idle connection.
pub const CLIENT_KEEP_ALIVE: Duration = Duration::from_secs(1);

impl Default for TransportOptions {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(10),
            cc: CongestionControl::default(),
            qlog_dir: None,
            receive_window: 64 << 20,
            keep_alive: None,
            max_mtu: None,
            mtu_upper_bound: DEFAULT_MTU_BOUND,
            ack_every: None,
            uni_streams: 0,
        }
    }
}

impl TransportOptions {
    /// A transport config; with a qlog stream named after `label` when `qlog_dir` is set.
    ///
    /// # Errors
    /// An idle timeout out of range, or a qlog file that cannot be created.
    pub fn transport(&self, label: &str) -> Result<TransportConfig, ConfigError> {
        let mut t = TransportConfig::default();
        t.max_idle_timeout(Some(
            IdleTimeout::try_from(self.idle_timeout).map_err(|_| ConfigError::IdleTimeout)?,
        ));
        // Loopback with two busy cores sees millisecond RTTs under load: large windows.
        t.stream_receive_window(VarInt::from_u32(16 << 20));
        t.receive_window(
            VarInt::from_u64(self.receive_window).map_err(|_| ConfigError::ReceiveWindow)?,
        );
        t.send_window(32 << 20);
        t.max_concurrent_bidi_streams(VarInt::from_u32(MAX_CONCURRENT_STREAMS));
        t.max_concurrent_uni_streams(VarInt::from_u32(self.uni_streams));
        // No protocol here uses DATAGRAM frames (RFC 9221): not advertising them makes a peer
        // that sends one a protocol violation, where quinn-proto's default would buffer
        // about 1.25 MB of them per connection that nothing ever reads.
        t.datagram_receive_buffer_size(None);
        t.keep_alive_interval(self.keep_alive);
        if let Some(n) = self.ack_every {
            let mut ack = AckFrequencyConfig::default();
            ack.ack_eliciting_threshold(VarInt::from_u32(n.saturating_sub(1)))
                .max_ack_delay(Some(ACK_EVERY_MAX_DELAY));
            t.ack_frequency_config(Some(ack));
        }
        let mut mtud = MtuDiscoveryConfig::default();
        mtud.upper_bound(self.mtu_upper_bound)
            .minimum_change(MTU_MINIMUM_CHANGE);
        t.mtu_discovery_config(Some(mtud));
        let cc: Arc<dyn ControllerFactory + Send + Sync> = match self.cc {
            CongestionControl::Newreno => Arc::new(NewRenoConfig::default()),
            CongestionControl::Cubic => Arc::new(CubicConfig::default()),
            CongestionControl::Bbr => Arc::new(BbrConfig::default()),
        };
        t.congestion_controller_factory(Arc::new(HandshakeFloorFactory::new(cc)));
        if let Some(dir) = &self.qlog_dir {
            std::fs::create_dir_all(dir).map_err(|e| ConfigError::Qlog(dir.clone(), e))?;
            let path = dir.join(format!("{label}.sqlog"));
            let file =
                std::fs::File::create(&path).map_err(|e| ConfigError::Qlog(path.clone(), e))?;
            let mut q = quinn_proto::QlogConfig::default();
            q.writer(Box::new(std::io::BufWriter::new(file)))
                .title(Some(label.to_owned()));
            t.qlog_stream(q.into_stream());
        }
        Ok(t)
    }
}

/// A qlog file name unique in this process: `SIDE-PID-N`.
#[must_use]
pub fn qlog_label(side: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{side}-{}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn the_bound_follows_a_known_route_up_to_the_cap_or_max_mtu() {
        // Loopback's route carries 65 507 bytes of UDP payload over IPv4, 65 488 over IPv6.
        let v4: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let v6: SocketAddr = "[::1]:443".parse().unwrap();
        assert_eq!(mtu_bound(Some(v4), None), ROUTE_MTU_CAP);
        assert_eq!(mtu_bound(Some(v4), Some(MAX_MTU_BOUND)), 65_507);
        assert_eq!(mtu_bound(Some(v4), Some(1400)), 1400);
        if neqo_udp::max_udp_payload_to(v6).is_ok() {
            assert_eq!(mtu_bound(Some(v6), None), ROUTE_MTU_CAP);
            assert_eq!(mtu_bound(Some(v6), Some(MAX_MTU_BOUND)), 65_488);
        }
    }

    #[test]
    fn without_a_route_the_bound_is_max_mtu_or_the_default() {
        assert_eq!(mtu_bound(None, None), DEFAULT_MTU_BOUND);
        assert_eq!(mtu_bound(None, Some(9000)), 9000);
        assert_eq!(mtu_bound(None, Some(1000)), MIN_MTU_BOUND);
    }
}
