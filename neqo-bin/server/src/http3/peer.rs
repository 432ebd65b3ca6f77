//! The client's unidirectional streams (RFC 9114 section 6.2), read off the connection and
//! taken by [`neqo_h3::uni`]'s rules: its control stream for the connection's life, its QPACK
//! streams, which with no dynamic table carry almost nothing; unknown types are stopped.

use std::ops::ControlFlow;

use neqo_h3::{
    control::Role,
    frame::{Violation, code},
    uni::{Fed, PeerStreams, UniStream},
};
use neqo_protocols::body::{self, ReadEnd};
use quinn_proto::{Connection, StreamId};

/// The client's unidirectional streams.
#[derive(Debug)]
pub(super) struct Peer {
    streams: neqo_driver::IdMap<StreamId, UniStream>,
    rules: PeerStreams,
}

impl Default for Peer {
    fn default() -> Self {
        Self {
            streams: neqo_driver::IdMap::default(),
            rules: PeerStreams::new(Role::Server),
        }
    }
}

impl Peer {
    /// Streams it keeps.
    #[cfg(test)]
    pub(super) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Bytes it holds for frames not yet whole.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.streams.values().map(UniStream::held).sum()
    }

    /// The client opened stream `id`.
    pub(super) fn opened(&mut self, id: StreamId) {
        self.streams.insert(id, UniStream::default());
    }

    /// Reads what stream `id` has.
    ///
    /// # Errors
    /// What the client did wrong: always a connection error here.
    pub(super) fn read(&mut self, conn: &mut Connection, id: StreamId) -> Result<(), Violation> {
        let Some(mut uni) = self.streams.remove(&id) else {
            return Ok(());
        };
        let mut taken = Ok(Fed::More);
        let end = body::read_stream(conn, id, |chunk| {
            taken = self.rules.feed(&mut uni, &chunk.bytes);
            match taken {
                Ok(Fed::More) => ControlFlow::Continue(()),
                _ => ControlFlow::Break(()),
            }
        });
        if taken? == Fed::Unknown {
            // RFC 9114 section 6.2: a type it does not know is not read.
            let _ = conn.recv_stream(id).stop(
                quinn_proto::VarInt::from_u64(code::STREAM_CREATION_ERROR).unwrap_or_default(),
            );
            return Ok(());
        }
        match end {
            ReadEnd::Fin | ReadEnd::Reset(_) => self.rules.ended(&uni),
            _ => {
                self.streams.insert(id, uni);
                Ok(())
            }
        }
    }
}
