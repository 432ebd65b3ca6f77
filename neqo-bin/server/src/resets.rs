//! The stream resets a shutdown sends (requests refused after it began, responses cut when
//! its drain period ended), kept until the client acknowledges each: a connection is closed
//! only once its resets are acknowledged (or the cut's grace is over). A reset and the close
//! read by the client in one batch would reach its requests after the connection's end,
//! which leaves it no way to tell a request refused unprocessed from one cut; and quinn-proto
//! sends nothing but the close once a connection is closed, so a reset queued with it would
//! be lost.

use neqo_driver::Driver;
use quinn_proto::{ConnectionHandle, StreamId};

/// Resets sent and not yet acknowledged.
#[derive(Debug, Default)]
pub(crate) struct Resets(Vec<(ConnectionHandle, StreamId)>);

impl Resets {
    /// `id` of `ch` was just reset.
    pub(crate) fn sent(&mut self, ch: ConnectionHandle, id: StreamId) {
        self.0.push((ch, id));
    }

    /// Whether every reset sent is acknowledged.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Forgets the resets acknowledged since the last look: quinn-proto frees a stream's
    /// sending half once its RESET_STREAM is acknowledged. A connection gone takes its
    /// resets with it.
    pub(crate) fn poll(&mut self, driver: &mut Driver) {
        self.0.retain(|&(ch, id)| {
            driver
                .update(ch, |conn| conn.send_stream(id).priority().is_ok())
                .unwrap_or(false)
        });
    }
}
