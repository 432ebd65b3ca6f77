//! An endpoint's own control stream (RFC 9114 section 6.2.1) on its connection: it opens with
//! SETTINGS once the peer allows a unidirectional stream, and ends the connection's life with
//! GOAWAY (a server's). What the peer's carries is read in [`peer`](super::peer), by
//! [`control`](crate::control)'s rules.

use quinn_proto::{Connection, StreamId};

use crate::{
    control::{CRITICAL_CLOSED, opening},
    frame::Violation,
};

/// An endpoint's control stream: what it has not yet taken.
#[derive(Debug, Default)]
pub struct OwnControl {
    id: Option<StreamId>,
    pending: Vec<u8>,
}

impl OwnControl {
    /// Opens the stream with SETTINGS (once the peer allows a stream), taking field sections
    /// of up to `max_field_section` bytes.
    ///
    /// # Errors
    /// The stream is gone: a connection error.
    pub fn start(
        &mut self,
        conn: &mut Connection,
        max_field_section: u64,
    ) -> Result<(), Violation> {
        self.pending = opening(max_field_section);
        self.flush(conn)
    }

    /// Whether `id` is this stream.
    #[must_use]
    pub fn is(&self, id: StreamId) -> bool {
        self.id == Some(id)
    }

    /// Whether all it was given is written.
    #[must_use]
    pub fn flushed(&self) -> bool {
        self.pending.is_empty()
    }

    /// Sends `bytes` after what is pending.
    ///
    /// # Errors
    /// The stream is gone: a connection error.
    pub fn send(&mut self, conn: &mut Connection, bytes: &[u8]) -> Result<(), Violation> {
        self.pending.extend_from_slice(bytes);
        self.flush(conn)
    }

    /// Writes what the stream takes (on `Writable`, and on `Available` for unidirectional
    /// streams while it is not yet open).
    ///
    /// # Errors
    /// The stream is gone: a connection error.
    pub fn flush(&mut self, conn: &mut Connection) -> Result<(), Violation> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let id = match self.id {
            Some(id) => id,
            None => match conn.streams().open(quinn_proto::Dir::Uni) {
                Some(id) => *self.id.insert(id),
                // Once the peer allows one: `Available`.
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
