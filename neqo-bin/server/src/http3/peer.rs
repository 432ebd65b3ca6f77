//! The client's unidirectional streams (RFC 9114 section 6.2): its control stream, read for
//! the connection's life ([`control`](super::control)), and its QPACK streams, which with no
//! dynamic table carry almost nothing; a push stream is an error, unknown types are stopped.

use neqo_protocols::body::{self, ReadEnd};
use quinn_proto::{Connection, StreamId};

use super::{
    control::{CONTROL, CRITICAL_CLOSED, Told, control_step},
    frames::{FrameReader, Violation, code, varint},
};

const PUSH: u64 = 0x1;
const ENCODER: u64 = 0x2;
const DECODER: u64 = 0x3;

/// The only encoder instruction a table of capacity 0 allows: Set Dynamic Table Capacity 0
/// (RFC 9204 section 4.3.1).
const SET_CAPACITY_ZERO: u8 = 0x20;

/// One of the client's unidirectional streams.
#[derive(Debug)]
enum Uni {
    /// Its type not yet all here.
    Typing(Vec<u8>),
    Control(FrameReader),
    Encoder,
    /// Inside a Stream Cancellation's stream ID, past its first byte.
    Decoder {
        in_integer: bool,
    },
}

/// The client's unidirectional streams.
#[derive(Debug, Default)]
pub(super) struct Peer {
    streams: neqo_driver::IdMap<StreamId, Uni>,
    control: bool,
    encoder: bool,
    decoder: bool,
    told: Told,
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
        self.streams
            .values()
            .map(|u| match u {
                Uni::Typing(b) => b.len(),
                Uni::Control(r) => r.held(),
                Uni::Encoder | Uni::Decoder { .. } => 0,
            })
            .sum()
    }

    /// The client opened stream `id`.
    pub(super) fn opened(&mut self, id: StreamId) {
        self.streams.insert(id, Uni::Typing(Vec::new()));
    }

    /// Reads what stream `id` has.
    ///
    /// # Errors
    /// What the client did wrong: always a connection error here.
    pub(super) fn read(&mut self, conn: &mut Connection, id: StreamId) -> Result<(), Violation> {
        let Some(mut uni) = self.streams.remove(&id) else {
            return Ok(());
        };
        let mut violation = None;
        let mut unknown = false;
        let end = body::read_stream(conn, id, |chunk| {
            let mut bytes: &[u8] = &chunk.bytes;
            if let Uni::Typing(typed) = &mut uni {
                let had = typed.len();
                typed.extend_from_slice(&bytes[..bytes.len().min(8)]);
                let Some((kind, used)) = varint(typed) else {
                    return std::ops::ControlFlow::Continue(());
                };
                bytes = &bytes[used - had..];
                match self.typed(kind) {
                    Ok(Some(u)) => uni = u,
                    Ok(None) => {
                        unknown = true;
                        return std::ops::ControlFlow::Break(());
                    }
                    Err(v) => {
                        violation = Some(v);
                        return std::ops::ControlFlow::Break(());
                    }
                }
            }
            match self.take(&mut uni, bytes) {
                Ok(()) => std::ops::ControlFlow::Continue(()),
                Err(v) => {
                    violation = Some(v);
                    std::ops::ControlFlow::Break(())
                }
            }
        });
        if let Some(v) = violation {
            return Err(v);
        }
        if unknown {
            // RFC 9114 section 6.2: a type it does not know is not read.
            let _ = conn.recv_stream(id).stop(
                quinn_proto::VarInt::from_u64(code::STREAM_CREATION_ERROR).unwrap_or_default(),
            );
            return Ok(());
        }
        match (end, &uni) {
            (ReadEnd::Fin | ReadEnd::Reset(_), Uni::Typing(_)) => Ok(()),
            (ReadEnd::Fin | ReadEnd::Reset(_), _) => Err(CRITICAL_CLOSED),
            _ => {
                self.streams.insert(id, uni);
                Ok(())
            }
        }
    }

    /// The stream's type is known: what it becomes, or `None` for a type that is not read.
    fn typed(&mut self, kind: u64) -> Result<Option<Uni>, Violation> {
        const SECOND: Violation =
            Violation::Connection(code::STREAM_CREATION_ERROR, "a second critical stream");
        let seen = match kind {
            CONTROL => &mut self.control,
            ENCODER => &mut self.encoder,
            DECODER => &mut self.decoder,
            PUSH => {
                return Err(Violation::Connection(
                    code::STREAM_CREATION_ERROR,
                    "a push stream from a client",
                ));
            }
            _ => return Ok(None),
        };
        if std::mem::replace(seen, true) {
            return Err(SECOND);
        }
        Ok(Some(match kind {
            CONTROL => Uni::Control(FrameReader::default()),
            ENCODER => Uni::Encoder,
            _ => Uni::Decoder { in_integer: false },
        }))
    }

    /// Takes bytes of a typed stream.
    fn take(&mut self, uni: &mut Uni, bytes: &[u8]) -> Result<(), Violation> {
        match uni {
            Uni::Typing(_) => Ok(()),
            Uni::Control(reader) => {
                let told = &mut self.told;
                reader.feed(bytes, &mut |step| control_step(step, told))
            }
            Uni::Encoder => {
                if bytes.iter().all(|&b| b == SET_CAPACITY_ZERO) {
                    Ok(())
                } else {
                    Err(Violation::Connection(
                        code::QPACK_ENCODER_STREAM_ERROR,
                        "an encoder instruction for a table of capacity 0",
                    ))
                }
            }
            Uni::Decoder { in_integer } => {
                for &b in bytes {
                    if *in_integer {
                        *in_integer = b & 0x80 != 0;
                    } else if b & 0xC0 == 0x40 {
                        // Stream Cancellation: allowed, and nothing to cancel.
                        *in_integer = b & 0x3F == 0x3F;
                    } else {
                        // A Section Acknowledgment or Insert Count Increment: nothing was
                        // asked for or inserted.
                        return Err(Violation::Connection(
                            code::QPACK_DECODER_STREAM_ERROR,
                            "a decoder instruction for a table of capacity 0",
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}
