//! The server config of each connection: the endpoint's, unless the connection needs one of
//! its own, for a qlog stream (`TransportOptions::qlog_dir`) or for the path MTU bound of the route to its
//! peer ([`neqo_driver::mtu_bound`]) where a listen address reaches other hosts.

use std::{collections::HashMap, net::SocketAddr, sync::Arc};

use neqo_driver::TransportOptions;
use quinn_proto::ServerConfig;

use super::MIN_WINDOW;

/// Configs kept by MTU bound: routes have few distinct MTUs, but the kernel's path MTU cache
/// takes values from ICMP messages anyone can send, so the cache is bounded; beyond it a
/// connection gets a config made for it.
const CACHED_BOUNDS: usize = 16;

pub(super) struct ConnectionConfigs {
    base: Arc<ServerConfig>,
    /// The endpoint's transport options; its `mtu_upper_bound` is the base config's.
    transport: TransportOptions,
    /// Whether each peer's route is looked up: some listen address reaches other hosts, so
    /// no one bound fits every peer.
    per_peer: bool,
    /// Configs without a qlog stream, by MTU bound.
    by_bound: HashMap<u16, Arc<ServerConfig>>,
}

impl ConnectionConfigs {
    pub(super) fn new(
        base: Arc<ServerConfig>,
        transport: TransportOptions,
        listen: &[SocketAddr],
    ) -> Self {
        Self {
            base,
            transport: TransportOptions {
                // As the endpoint's: every connection is told the same, then raised.
                receive_window: MIN_WINDOW,
                ..transport
            },
            per_peer: listen.iter().any(|a| !a.ip().is_loopback()),
            by_bound: HashMap::new(),
        }
    }

    /// The config for a connection from `peer`, or `None` where the endpoint's will do (or a
    /// qlog stream cannot be made: logged).
    pub(super) fn for_peer(&mut self, peer: SocketAddr) -> Option<Arc<ServerConfig>> {
        let bound = if self.per_peer {
            neqo_driver::mtu_bound(Some(peer), self.transport.max_mtu)
        } else {
            self.transport.mtu_upper_bound
        };
        self.for_bound(bound)
    }

    fn for_bound(&mut self, bound: u16) -> Option<Arc<ServerConfig>> {
        if self.transport.qlog_dir.is_some() {
            return self.make(bound, &neqo_driver::qlog_label("server"));
        }
        if bound == self.transport.mtu_upper_bound {
            return None;
        }
        if let Some(c) = self.by_bound.get(&bound) {
            return Some(Arc::clone(c));
        }
        let c = self.make(bound, "server")?;
        if self.by_bound.len() < CACHED_BOUNDS {
            self.by_bound.insert(bound, Arc::clone(&c));
        }
        Some(c)
    }

    fn make(&self, bound: u16, label: &str) -> Option<Arc<ServerConfig>> {
        let options = TransportOptions {
            mtu_upper_bound: bound,
            ..self.transport.clone()
        };
        match options.transport(label) {
            Ok(t) => {
                let mut sc = (*self.base).clone();
                sc.transport_config(Arc::new(t));
                Some(Arc::new(sc))
            }
            Err(e) => {
                tracing::warn!("connection config: {e:#}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neqo_driver::{ROUTE_MTU_CAP, tls::Identity};
    use neqo_protocols::ALPN_HQ;

    fn configs(listen: &str, max_mtu: Option<u16>) -> ConnectionConfigs {
        let identity = Identity::self_signed().unwrap();
        let crypto = neqo_driver::tls::server_crypto(&identity, &[ALPN_HQ.to_owned()]).unwrap();
        let base = Arc::new(ServerConfig::with_crypto(crypto));
        let listen: Vec<SocketAddr> = vec![listen.parse().unwrap()];
        let transport = TransportOptions {
            max_mtu,
            mtu_upper_bound: super::super::listen_mtu_bound(&listen, max_mtu),
            ..TransportOptions::default()
        };
        ConnectionConfigs::new(base, transport, &listen)
    }

    #[test]
    fn a_loopback_listener_uses_the_endpoint_config() {
        let mut c = configs("127.0.0.1:0", None);
        assert_eq!(c.transport.mtu_upper_bound, ROUTE_MTU_CAP);
        assert!(c.for_peer("127.0.0.1:5000".parse().unwrap()).is_none());
        assert!(c.by_bound.is_empty());
    }

    #[test]
    fn a_wildcard_listener_looks_up_each_peers_route_and_keeps_the_config() {
        let mut c = configs("0.0.0.0:0", None);
        assert_eq!(c.transport.mtu_upper_bound, neqo_driver::DEFAULT_MTU_BOUND);
        // Loopback's route carries 64 KiB: the default cap applies.
        let first = c.for_peer("127.0.0.1:5000".parse().unwrap()).unwrap();
        let again = c.for_peer("127.0.0.2:5001".parse().unwrap()).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(
            c.by_bound.keys().copied().collect::<Vec<_>>(),
            [ROUTE_MTU_CAP]
        );
        // A max_mtu of 1400: within it, and the endpoint's bound already says so.
        let mut c = configs("0.0.0.0:0", Some(1400));
        assert_eq!(c.transport.mtu_upper_bound, 1400);
        assert!(c.for_peer("127.0.0.1:5000".parse().unwrap()).is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut c = configs("0.0.0.0:0", None);
        for bound in 1300..1400 {
            assert!(c.for_bound(bound).is_some(), "{bound}");
        }
        assert_eq!(c.by_bound.len(), CACHED_BOUNDS);
        assert!(c.for_bound(neqo_driver::DEFAULT_MTU_BOUND).is_none());
    }
}
