//! `--key-update`: each connection updates its 1-RTT keys once, early, so that the rest of
//! the transfer runs on the next key phase (the interop runner's `keyupdate` case).

use quinn_proto::Connection;

/// The key update of one connection.
#[derive(Debug)]
pub(super) struct KeyUpdate {
    wanted: bool,
    done: bool,
}

impl KeyUpdate {
    pub(super) const fn new(wanted: bool) -> Self {
        Self {
            wanted,
            done: false,
        }
    }

    /// Updates the keys if due. Called as response data arrives, which is early in the
    /// transfer and after the handshake. RFC 9001 section 6.1 forbids an update before the
    /// handshake is confirmed, which for a client is when HANDSHAKE_DONE arrives; quinn-proto
    /// only checks that the handshake is complete, so the frame count is checked here.
    pub(super) fn poll(&mut self, conn: &mut Connection) {
        if self.wanted && !self.done && conn.stats().frame_rx.handshake_done > 0 {
            // Not done if quinn-proto was still in its own update: tried again next time.
            self.done = neqo_driver::tls::counters::force_key_update(conn);
        }
    }
}
