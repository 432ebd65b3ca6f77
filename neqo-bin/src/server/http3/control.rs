//! The client's unidirectional streams (RFC 9114 section 6.2): its control stream, read for
//! the connection's life, and its QPACK streams, which with no dynamic table carry almost
//! nothing; unknown types are stopped. What the server sends on its own control stream.

use quinn_proto::{Connection, StreamId};

use super::{
    MAX_FIELD_SECTION,
    frames::{
        FRAME_LIMIT, FrameReader, Step, Take, Violation, code, kind, put_frame_header, put_varint,
        varint,
    },
};
use crate::body::{self, ReadEnd};

const CONTROL: u64 = 0x0;
const PUSH: u64 = 0x1;
const ENCODER: u64 = 0x2;
const DECODER: u64 = 0x3;

/// `SETTINGS_MAX_FIELD_SECTION_SIZE` (RFC 9114 section 7.2.4.1).
const MAX_FIELD_SECTION_SIZE: u64 = 0x6;
/// The only encoder instruction a table of capacity 0 allows: Set Dynamic Table Capacity 0
/// (RFC 9204 section 4.3.1).
const SET_CAPACITY_ZERO: u8 = 0x20;

const CRITICAL_CLOSED: Violation =
    Violation::Connection(code::CLOSED_CRITICAL_STREAM, "a critical stream closed");

/// The server's control stream's opening: its type and SETTINGS.
pub(super) fn opening() -> Vec<u8> {
    let mut settings = Vec::new();
    put_varint(MAX_FIELD_SECTION_SIZE, &mut settings);
    put_varint(MAX_FIELD_SECTION, &mut settings);
    let mut out = Vec::new();
    put_varint(CONTROL, &mut out);
    put_frame_header(kind::SETTINGS, settings.len() as u64, &mut out);
    out.extend_from_slice(&settings);
    out
}

/// A GOAWAY frame naming `id`, the first request that will not be processed.
pub(super) fn goaway(id: u64) -> Vec<u8> {
    let mut payload = Vec::new();
    put_varint(id, &mut payload);
    let mut out = Vec::new();
    put_frame_header(kind::GOAWAY, payload.len() as u64, &mut out);
    out.extend_from_slice(&payload);
    out
}

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

/// What the client's control stream told so far.
#[derive(Debug, Default)]
struct Told {
    settings: bool,
    max_push_id: Option<u64>,
    goaway: Option<u64>,
}

/// The client's unidirectional streams.
#[derive(Debug, Default)]
pub(super) struct Peer {
    streams: crate::idmap::IdMap<StreamId, Uni>,
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

fn control_step(step: Step<'_>, told: &mut Told) -> Result<Take, Violation> {
    const UNEXPECTED: Violation = Violation::Connection(
        code::FRAME_UNEXPECTED,
        "a frame the control stream may not carry",
    );
    match step {
        Step::Begins { kind, len } => {
            if !told.settings && kind != kind::SETTINGS {
                return Err(Violation::Connection(
                    code::MISSING_SETTINGS,
                    "a control stream without SETTINGS first",
                ));
            }
            if len > FRAME_LIMIT {
                return Err(Violation::Connection(
                    code::EXCESSIVE_LOAD,
                    "a control frame over the limit",
                ));
            }
            match kind {
                kind::SETTINGS if told.settings => Err(UNEXPECTED),
                kind::SETTINGS => {
                    told.settings = true;
                    Ok(Take::Whole)
                }
                kind::GOAWAY | kind::MAX_PUSH_ID | kind::CANCEL_PUSH => Ok(Take::Whole),
                kind::DATA | kind::HEADERS | kind::PUSH_PROMISE => Err(UNEXPECTED),
                k if kind::is_http2(k) => Err(UNEXPECTED),
                _ => Ok(Take::Skip),
            }
        }
        Step::Whole { kind, payload } => {
            if kind == kind::SETTINGS {
                return settings(payload).map(|()| Take::Skip);
            }
            let id = one_varint(payload)?;
            let raised = |was: Option<u64>, now: u64| was.is_some_and(|w| now > w);
            match kind {
                kind::GOAWAY if raised(told.goaway, id) => {
                    return Err(Violation::Connection(
                        code::ID_ERROR,
                        "a GOAWAY that raises its ID",
                    ));
                }
                kind::GOAWAY => told.goaway = Some(id),
                kind::MAX_PUSH_ID if told.max_push_id.is_some_and(|m| id < m) => {
                    return Err(Violation::Connection(
                        code::ID_ERROR,
                        "a MAX_PUSH_ID that lowers it",
                    ));
                }
                kind::MAX_PUSH_ID => told.max_push_id = Some(id),
                // CANCEL_PUSH: the server never pushes, but one within the allowed IDs is no
                // error.
                _ if told.max_push_id.is_none_or(|m| id > m) => {
                    return Err(Violation::Connection(
                        code::ID_ERROR,
                        "a CANCEL_PUSH past MAX_PUSH_ID",
                    ));
                }
                _ => {}
            }
            Ok(Take::Skip)
        }
        Step::Piece(_) => Ok(Take::Skip),
    }
}

/// A frame payload that is exactly one varint.
fn one_varint(payload: &[u8]) -> Result<u64, Violation> {
    match varint(payload) {
        Some((v, n)) if n == payload.len() => Ok(v),
        _ => Err(Violation::Connection(
            code::FRAME_ERROR,
            "a malformed control frame",
        )),
    }
}

/// The client's SETTINGS: identifiers once each, none of HTTP/2's (RFC 9114 section 7.2.4).
/// The server needs none of their values: it sends nothing a default setting forbids.
fn settings(mut payload: &[u8]) -> Result<(), Violation> {
    let mut ids = Vec::new();
    while !payload.is_empty() {
        let pair = varint(payload).and_then(|(id, n)| Some((id, n, varint(&payload[n..])?.1)));
        let Some((id, n, m)) = pair else {
            return Err(Violation::Connection(
                code::FRAME_ERROR,
                "a SETTINGS frame cut short",
            ));
        };
        if (0x2..=0x5).contains(&id) {
            return Err(Violation::Connection(
                code::SETTINGS_ERROR,
                "an HTTP/2 setting",
            ));
        }
        ids.push(id);
        payload = &payload[n + m..];
    }
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err(Violation::Connection(
            code::SETTINGS_ERROR,
            "a setting twice",
        ));
    }
    Ok(())
}

/// The server's control stream: what it has not yet taken.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    id: Option<StreamId>,
    pending: Vec<u8>,
}

impl Outgoing {
    /// Opens the stream with SETTINGS (once the client allows a stream).
    pub(super) fn start(&mut self, conn: &mut Connection) -> Result<(), Violation> {
        self.pending = opening();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn control(frames: &[(u64, Vec<u8>)]) -> Result<(), Violation> {
        let mut bytes = Vec::new();
        for (k, p) in frames {
            put_frame_header(*k, p.len() as u64, &mut bytes);
            bytes.extend_from_slice(p);
        }
        let mut told = Told::default();
        FrameReader::default().feed(&bytes, &mut |s| control_step(s, &mut told))
    }

    fn conn_code(r: Result<(), Violation>) -> Option<u64> {
        match r {
            Err(Violation::Connection(c, _)) => Some(c),
            _ => None,
        }
    }

    #[test]
    fn control_frames_get_the_reactions_rfc_9114_names() {
        let settings = (kind::SETTINGS, Vec::new());
        assert_eq!(control(&[settings.clone(), (0x21, vec![0; 5])]), Ok(()));
        assert_eq!(
            conn_code(control(&[(kind::GOAWAY, vec![0])])),
            Some(code::MISSING_SETTINGS)
        );
        assert_eq!(
            conn_code(control(&[settings.clone(), settings.clone()])),
            Some(code::FRAME_UNEXPECTED)
        );
        for k in [
            kind::DATA,
            kind::HEADERS,
            kind::PUSH_PROMISE,
            0x2,
            0x6,
            0x8,
            0x9,
        ] {
            assert_eq!(
                conn_code(control(&[settings.clone(), (k, vec![0])])),
                Some(code::FRAME_UNEXPECTED),
                "{k:#x}"
            );
        }
        assert_eq!(
            conn_code(control(&[(kind::SETTINGS, vec![0x6, 0x1, 0x6, 0x2])])),
            Some(code::SETTINGS_ERROR),
            "a setting twice"
        );
        assert_eq!(
            conn_code(control(&[(kind::SETTINGS, vec![0x4, 0x1])])),
            Some(code::SETTINGS_ERROR),
            "HTTP/2's SETTINGS_INITIAL_WINDOW_SIZE"
        );
        assert_eq!(
            conn_code(control(&[(kind::SETTINGS, vec![0x6])])),
            Some(code::FRAME_ERROR)
        );
        let goaways = [
            settings.clone(),
            (kind::GOAWAY, vec![4]),
            (kind::GOAWAY, vec![8]),
        ];
        assert_eq!(conn_code(control(&goaways)), Some(code::ID_ERROR));
        let pushes = [
            settings.clone(),
            (kind::MAX_PUSH_ID, vec![8]),
            (kind::MAX_PUSH_ID, vec![4]),
        ];
        assert_eq!(conn_code(control(&pushes)), Some(code::ID_ERROR));
        let cancel = [settings.clone(), (kind::CANCEL_PUSH, vec![0])];
        assert_eq!(conn_code(control(&cancel)), Some(code::ID_ERROR));
        let cancel = [
            settings.clone(),
            (kind::MAX_PUSH_ID, vec![3]),
            (kind::CANCEL_PUSH, vec![2]),
        ];
        assert_eq!(control(&cancel), Ok(()));
        assert_eq!(
            conn_code(control(&[settings, (kind::GOAWAY, vec![0, 0])])),
            Some(code::FRAME_ERROR),
            "a payload longer than its field"
        );
    }

    #[test]
    fn the_opening_announces_the_field_section_limit() {
        let o = opening();
        assert_eq!(o[0], CONTROL as u8);
        assert_eq!(o[1], kind::SETTINGS as u8);
        let (id, n) = varint(&o[3..]).unwrap();
        assert_eq!(id, MAX_FIELD_SECTION_SIZE);
        assert_eq!(varint(&o[3 + n..]).map(|v| v.0), Some(MAX_FIELD_SECTION));
    }
}
