//! The server's control stream (RFC 9114 section 6.2.1) on its connection: it opens with
//! SETTINGS once the client allows a stream, and ends the connection's life with GOAWAY. What
//! the client's carries is read in [`peer`](super::peer), by [`neqo_h3::control`]'s rules.

use neqo_h3::{
    control::{CRITICAL_CLOSED, opening},
    frame::Violation,
};
use quinn_proto::{Connection, StreamId};

use super::MAX_FIELD_SECTION;

/// The server's control stream: what it has not yet taken.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    id: Option<StreamId>,
    pending: Vec<u8>,
}

impl Outgoing {
    /// Opens the stream with SETTINGS (once the client allows a stream).
    pub(super) fn start(&mut self, conn: &mut Connection) -> Result<(), Violation> {
        self.pending = opening(MAX_FIELD_SECTION);
        self.flush(conn)
    }

    /// Whether `id` is this stream.
    pub(super) fn is(&self, id: StreamId) -> bool {
        self.id == Some(id)
    }

    /// Whether all it was given is written.
    pub(super) fn flushed(&self) -> bool {
        self.pending.is_empty()
    }

    /// Sends `bytes` after what is pending.
    pub(super) fn send(&mut self, conn: &mut Connection, bytes: &[u8]) -> Result<(), Violation> {
        self.pending.extend_from_slice(bytes);
        self.flush(conn)
    }

    /// Writes what the stream takes.
    pub(super) fn flush(&mut self, conn: &mut Connection) -> Result<(), Violation> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let id = match self.id {
            Some(id) => id,
            None => match conn.streams().open(quinn_proto::Dir::Uni) {
                Some(id) => *self.id.insert(id),
                // Once the client allows one: `Available`.
                None => return Ok(()),
            },
        };
        match conn.send_stream(id).write(&self.pending) {
            Ok(n) => {
                self.pending.drain(..n);
                Ok(())
            }
            Err(quinn_proto::WriteError::Blocked) => Ok(()),
            Err(_) => Err(CRITICAL_CLOSED),
        }
    }
}
