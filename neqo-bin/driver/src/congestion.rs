//! The congestion controller every connection gets: quinn-proto's ([`CongestionControl`](crate::CongestionControl)), whose window does
//! not fall below its initial window until the connection's first [`FLOOR_ACKED`]
//! ack-eliciting packets are acknowledged.
//!
//! Why: under heavy loss in the handshake, quinn-proto 0.11 can deadlock a server. Its
//! Initial packets carrying the ServerHello are declared lost, and each loss cuts the
//! window; its Handshake packets, which the client cannot read without the ServerHello and
//! so never acknowledges, stay in flight and fill that window; the ServerHello's
//! retransmission is then held by congestion control for good, while the probe timer, with
//! nothing of the Initial space in flight, only probes the Handshake space. The client never
//! gets its keys and the handshake times out, however long it is given (`docs/guides/interop.md` has
//! the case that found it, `handshakeloss`). Before the handshake is done the
//! server's sending is bounded by the anti-amplification limit and its flights are a few
//! packets, so keeping the initial window through them lets lost crypto data go again at no
//! cost to the network that the initial window does not already allow.

use std::{any::Any, sync::Arc, time::Instant};

use quinn_proto::{
    RttEstimator,
    congestion::{Controller, ControllerFactory, ControllerMetrics},
};

/// Acknowledged ack-eliciting packets after which the window is the controller's own: more
/// than a handshake's flights (an Initial, a few Handshake packets, the first 1-RTT ones)
/// even when every one of them had to be sent twice.
pub const FLOOR_ACKED: u64 = 20;

/// The floor's rule, apart from quinn-proto's types so that it can be tested alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    floor: u64,
    acked: u64,
}

impl Floor {
    /// A floor at `initial_window` bytes.
    #[must_use]
    pub const fn new(initial_window: u64) -> Self {
        Self {
            floor: initial_window,
            acked: 0,
        }
    }

    /// An ack-eliciting packet was acknowledged.
    pub const fn acked(&mut self) {
        self.acked = self.acked.saturating_add(1);
    }

    /// The window to use when the controller says `window`.
    #[must_use]
    pub fn window(&self, window: u64) -> u64 {
        if self.acked < FLOOR_ACKED {
            window.max(self.floor)
        } else {
            window
        }
    }
}

/// Builds [`HandshakeFloor`]s around the controllers `inner` builds.
pub struct HandshakeFloorFactory {
    inner: Arc<dyn ControllerFactory + Send + Sync>,
}

impl HandshakeFloorFactory {
    #[must_use]
    pub fn new(inner: Arc<dyn ControllerFactory + Send + Sync>) -> Self {
        Self { inner }
    }
}

impl ControllerFactory for HandshakeFloorFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let inner = Arc::clone(&self.inner).build(now, current_mtu);
        let floor = Floor::new(inner.initial_window());
        Box::new(HandshakeFloor { inner, floor })
    }
}

/// A controller whose window is at least its initial window until [`FLOOR_ACKED`] packets
/// are acknowledged; otherwise `inner`'s, which sees every event unchanged.
pub struct HandshakeFloor {
    inner: Box<dyn Controller>,
    floor: Floor,
}

impl Controller for HandshakeFloor {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.floor.acked();
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.floor.window(self.inner.window())
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = self.inner.metrics();
        m.congestion_window = self.window();
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Self {
            inner: self.inner.clone_box(),
            floor: self.floor,
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn_proto::congestion::{CubicConfig, NewRenoConfig};

    #[test]
    fn the_floor_holds_until_enough_packets_are_acknowledged() {
        let mut f = Floor::new(12_000);
        assert_eq!(f.window(4116), 12_000, "a window cut by handshake losses");
        assert_eq!(
            f.window(30_000),
            30_000,
            "a larger window is the controller's"
        );
        for _ in 1..FLOOR_ACKED {
            f.acked();
        }
        assert_eq!(f.window(4116), 12_000, "one packet short");
        f.acked();
        assert_eq!(f.window(4116), 4116, "then the controller's own");
    }

    #[test]
    fn a_cut_window_is_floored_for_every_controller() {
        let factories: [Arc<dyn ControllerFactory + Send + Sync>; 2] = [
            Arc::new(NewRenoConfig::default()),
            Arc::new(CubicConfig::default()),
        ];
        for inner in factories {
            let factory = Arc::new(HandshakeFloorFactory::new(inner));
            let now = Instant::now();
            let mut c = factory.build(now, 1200);
            let initial = c.initial_window();
            assert_eq!(c.window(), initial);
            // Three losses in a row, as the server's Initials in the deadlock, then
            // persistent congestion: the inner window falls to its minimum, ours does not.
            // (A controller ignores losses of packets sent before its last cut.)
            let ms = |n| now + std::time::Duration::from_millis(n);
            for n in 1..=3 {
                c.on_congestion_event(ms(10 * n), ms(10 * n - 5), false, 1200);
            }
            c.on_congestion_event(ms(100), ms(95), true, 1200);
            assert_eq!(c.window(), initial);
            assert_eq!(c.metrics().congestion_window, initial);
            assert_eq!(c.clone_box().window(), initial, "a clone keeps the floor");
            let inner = c.into_any().downcast::<HandshakeFloor>().unwrap().inner;
            assert!(inner.window() < initial, "{}", inner.window());
        }
    }
}
