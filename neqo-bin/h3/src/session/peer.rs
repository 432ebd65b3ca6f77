//! The peer's unidirectional streams (RFC 9114 section 6.2), read off the connection and
//! taken by [`uni`](crate::uni)'s rules: its control stream for the connection's life, its
//! QPACK streams, which with no dynamic table carry almost nothing; unknown types are stopped.

use std::ops::ControlFlow;

use neqo_driver::IdMap;
use neqo_protocols::body::{self, ReadEnd};
use quinn_proto::{Connection, StreamId};

use crate::{
    control::{PeerControl, Role},
    frame::{Violation, code},
    uni::{Fed, PeerStreams, UniStream},
};

/// The peer's unidirectional streams.
#[derive(Debug)]
pub struct PeerUni {
    streams: IdMap<StreamId, UniStream>,
    rules: PeerStreams,
}

impl PeerUni {
    /// The peer's streams, read by `role`.
    #[must_use]
    pub fn new(role: Role) -> Self {
        Self {
            streams: IdMap::default(),
            rules: PeerStreams::new(role),
        }
    }

    /// What the peer's control stream told so far.
    #[must_use]
    pub const fn control(&self) -> &PeerControl {
        self.rules.control()
    }

    /// Streams it keeps.
    #[must_use]
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Bytes it holds for frames not yet whole.
    #[must_use]
    pub fn held(&self) -> usize {
        self.streams.values().map(UniStream::held).sum()
    }

    /// Takes the peer's new unidirectional streams and reads what they have.
    ///
    /// # Errors
    /// What the peer did wrong: always a connection error here.
    pub fn accept(&mut self, conn: &mut Connection) -> Result<(), Violation> {
        while let Some(id) = conn.streams().accept(quinn_proto::Dir::Uni) {
            self.streams.insert(id, UniStream::default());
            self.read(conn, id)?;
        }
        Ok(())
    }

    /// Reads what stream `id` has.
    ///
    /// # Errors
    /// What the peer did wrong: always a connection error here.
    pub fn read(&mut self, conn: &mut Connection, id: StreamId) -> Result<(), Violation> {
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
