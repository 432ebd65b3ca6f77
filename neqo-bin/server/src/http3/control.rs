//! The control streams (RFC 9114 section 6.2.1): what the client's may carry and in what
//! order (its frames read by [`peer`](super::peer)), and the server's own, which opens with
//! SETTINGS and ends the connection's life with GOAWAY.

use quinn_proto::{Connection, StreamId};

use super::{
    MAX_FIELD_SECTION,
    frames::{
        FRAME_LIMIT, Step, Take, Violation, code, kind, put_frame_header, put_varint, varint,
    },
};

/// The control stream's type.
pub(super) const CONTROL: u64 = 0x0;

/// `SETTINGS_MAX_FIELD_SECTION_SIZE` (RFC 9114 section 7.2.4.1).
const MAX_FIELD_SECTION_SIZE: u64 = 0x6;
pub(super) const CRITICAL_CLOSED: Violation =
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

/// What the client's control stream told so far.
#[derive(Debug, Default)]
pub(super) struct Told {
    settings: bool,
    max_push_id: Option<u64>,
    goaway: Option<u64>,
}

pub(super) fn control_step(step: Step<'_>, told: &mut Told) -> Result<Take, Violation> {
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
    use crate::http3::frames::FrameReader;

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
