//! [`TlsCounters`]: what the handshakes of this process did, counted where quinn-proto and
//! rustls call into the crypto layer, so that a test can check a property (a Retry seen, a
//! session resumed, 0-RTT accepted, keys updated) from a JSON report instead of a packet
//! capture.
//!
//! The counts are process-wide: each binary runs one side, and the crypto configs are made
//! once per process, so one set of atomics serves every connection without a handle threaded
//! through the applications.

use std::{
    any::Any,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use quinn_proto::{
    ConnectError, ConnectionId, Side, TransportError,
    crypto::{self, ExportKeyingMaterialError, KeyPair, Keys, PacketKey, UnsupportedVersion},
    transport_parameters::TransportParameters,
};

/// What the handshakes did, as in the JSON reports' `tls`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TlsCounters {
    /// Client: Retry packets accepted (integrity tag valid), each followed by a new Initial.
    pub retries_accepted: u64,
    /// Client: handshakes in which the server's certificate was verified (or, with
    /// verifying nothing, would have been): the full ones. A resumed TLS 1.3 handshake carries no
    /// certificate, so connections minus these were resumed.
    pub full_handshakes: u64,
    /// Server: session tickets redeemed from its ticket store (a client resuming).
    pub tickets_redeemed: u64,
    /// Client: connections whose session ticket allowed 0-RTT (keys to send it with);
    /// server: connections that accepted the client's 0-RTT.
    pub zero_rtt_attempted: u64,
    /// Client: connections whose 0-RTT the server accepted.
    pub zero_rtt_accepted: u64,
    /// Key updates, either side: 1-RTT key generations after the first of each connection.
    /// quinn-proto derives the next generation at the handshake's end and one more at every
    /// update, initiated or answered, so this counts both. (quinn-proto also updates on its
    /// own after a random 10 to 1000 packets of the first key phase, to exercise its peers.)
    pub key_updates: u64,
    /// Client: key updates the application asked for and quinn-proto carried out.
    pub key_updates_forced: u64,
}

#[derive(Default)]
struct Atomics {
    retries_accepted: AtomicU64,
    full_handshakes: AtomicU64,
    tickets_redeemed: AtomicU64,
    zero_rtt_attempted: AtomicU64,
    zero_rtt_accepted: AtomicU64,
    key_updates: AtomicU64,
    key_updates_forced: AtomicU64,
}

static COUNTERS: Atomics = Atomics {
    retries_accepted: AtomicU64::new(0),
    full_handshakes: AtomicU64::new(0),
    tickets_redeemed: AtomicU64::new(0),
    zero_rtt_attempted: AtomicU64::new(0),
    zero_rtt_accepted: AtomicU64::new(0),
    key_updates: AtomicU64::new(0),
    key_updates_forced: AtomicU64::new(0),
};

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The counts so far.
#[must_use]
pub fn snapshot() -> TlsCounters {
    let c = &COUNTERS;
    TlsCounters {
        retries_accepted: c.retries_accepted.load(Ordering::Relaxed),
        full_handshakes: c.full_handshakes.load(Ordering::Relaxed),
        tickets_redeemed: c.tickets_redeemed.load(Ordering::Relaxed),
        zero_rtt_attempted: c.zero_rtt_attempted.load(Ordering::Relaxed),
        zero_rtt_accepted: c.zero_rtt_accepted.load(Ordering::Relaxed),
        key_updates: c.key_updates.load(Ordering::Relaxed),
        key_updates_forced: c.key_updates_forced.load(Ordering::Relaxed),
    }
}

/// A server certificate was verified: a full handshake.
pub(crate) fn count_full_handshake() {
    bump(&COUNTERS.full_handshakes);
}

/// Asks `conn` for a key update now; returns whether it updated (quinn-proto ignores the
/// request during the handshake and while the previous update is still in progress). An update
/// made here counts in [`TlsCounters::key_updates_forced`] as well as in `key_updates`, so that
/// a report tells the updates asked for from the peer's.
pub fn force_key_update(conn: &mut quinn_proto::Connection) -> bool {
    let before = COUNTERS.key_updates.load(Ordering::Relaxed);
    conn.force_key_update();
    // The update derives the next key generation inside the call, on this thread.
    let updated = COUNTERS.key_updates.load(Ordering::Relaxed) > before;
    if updated {
        bump(&COUNTERS.key_updates_forced);
    }
    updated
}

/// A server's ticket store that counts the tickets redeemed.
#[derive(Debug)]
pub(crate) struct CountingStore(pub(crate) Arc<dyn rustls::server::StoresServerSessions>);

impl rustls::server::StoresServerSessions for CountingStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.0.put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        // TLS 1.3 takes a ticket (single use, as 0-RTT requires) exactly when a client
        // offers it for resumption.
        let v = self.0.take(key);
        if v.is_some() {
            bump(&COUNTERS.tickets_redeemed);
        }
        v
    }

    fn can_cache(&self) -> bool {
        self.0.can_cache()
    }
}

/// A server crypto config whose sessions are counted.
pub(crate) struct CountingServer(pub(crate) Arc<dyn crypto::ServerConfig>);

impl crypto::ServerConfig for CountingServer {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &ConnectionId,
    ) -> Result<Keys, UnsupportedVersion> {
        self.0.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.0.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(
        self: Arc<Self>,
        version: u32,
        params: &TransportParameters,
    ) -> Box<dyn crypto::Session> {
        Box::new(CountingSession::new(
            self.0.clone().start_session(version, params),
            Side::Server,
        ))
    }
}

/// A client crypto config whose sessions are counted.
pub struct CountingClient(Arc<dyn crypto::ClientConfig>);

impl std::fmt::Debug for CountingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CountingClient")
    }
}

impl CountingClient {
    /// Wraps `inner`.
    #[must_use]
    pub fn wrap(inner: Arc<dyn crypto::ClientConfig>) -> Arc<Self> {
        Arc::new(Self(inner))
    }
}

impl crypto::ClientConfig for CountingClient {
    fn start_session(
        self: Arc<Self>,
        version: u32,
        server_name: &str,
        params: &TransportParameters,
    ) -> Result<Box<dyn crypto::Session>, ConnectError> {
        let inner = self.0.clone().start_session(version, server_name, params)?;
        Ok(Box::new(CountingSession::new(inner, Side::Client)))
    }
}

struct CountingSession {
    inner: Box<dyn crypto::Session>,
    side: Side,
    /// 1-RTT key generations handed out so far.
    generations: u64,
}

impl CountingSession {
    fn new(inner: Box<dyn crypto::Session>, side: Side) -> Self {
        Self {
            inner,
            side,
            generations: 0,
        }
    }
}

impl crypto::Session for CountingSession {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.inner.initial_keys(dst_cid, side)
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        self.inner.handshake_data()
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn crypto::HeaderKey>, Box<dyn PacketKey>)> {
        // quinn-proto asks once per connection: the client when it is created (keys if its
        // ticket allows 0-RTT), the server when the client's hello has been read (keys if it
        // accepted the client's early data).
        let keys = self.inner.early_crypto();
        if keys.is_some() {
            bump(&COUNTERS.zero_rtt_attempted);
        }
        keys
    }

    fn early_data_accepted(&self) -> Option<bool> {
        // Asked once, by a client that sent 0-RTT, when its handshake completes.
        let accepted = self.inner.early_data_accepted();
        if self.side == Side::Client && accepted == Some(true) {
            bump(&COUNTERS.zero_rtt_accepted);
        }
        accepted
    }

    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.inner.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        self.inner.write_handshake(buf)
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        let keys = self.inner.next_1rtt_keys();
        if keys.is_some() {
            if self.generations > 0 {
                bump(&COUNTERS.key_updates);
            }
            self.generations += 1;
        }
        keys
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        let valid = self.inner.is_valid_retry(orig_dst_cid, header, payload);
        if valid {
            bump(&COUNTERS.retries_accepted);
        }
        valid
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}
