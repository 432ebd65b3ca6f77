//! The control streams (RFC 9114 section 6.2.1): what a peer's may carry and in what order,
//! read with a [`FrameReader`](crate::frame::FrameReader) for the connection's life, and the
//! frames an endpoint's own carries: SETTINGS first, GOAWAY at the end of its life.
//!
//! The rules depend on which end reads: a server takes MAX_PUSH_ID and GOAWAY naming push
//! IDs; a client refuses MAX_PUSH_ID (servers do not send it) and takes GOAWAY naming a
//! client-initiated bidirectional stream, never a higher one than before. Neither end here
//! pushes or asks for pushes, so CANCEL_PUSH is an error unless the push ID is one allowed.

use crate::frame::{
    FRAME_LIMIT, Step, Take, Violation, code, kind, put_frame_header, put_varint, varint,
};

/// Which end of the connection reads the peer's control stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A server, reading a client's.
    Server,
    /// A client, reading a server's.
    Client,
}

/// `SETTINGS_QPACK_MAX_TABLE_CAPACITY` (RFC 9204 section 5).
pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x1;
/// `SETTINGS_MAX_FIELD_SECTION_SIZE` (RFC 9114 section 7.2.4.1).
pub const MAX_FIELD_SECTION_SIZE: u64 = 0x6;
/// `SETTINGS_QPACK_BLOCKED_STREAMS` (RFC 9204 section 5).
pub const QPACK_BLOCKED_STREAMS: u64 = 0x7;

/// A connection-closing reaction to a critical stream's end (section 6.2.1).
pub const CRITICAL_CLOSED: Violation =
    Violation::Connection(code::CLOSED_CRITICAL_STREAM, "a critical stream closed");

/// An endpoint's control stream's opening: the stream type and SETTINGS, with
/// `SETTINGS_MAX_FIELD_SECTION_SIZE` `max_field_section` (and no dynamic table: QPACK's
/// settings left at their defaults, 0).
#[must_use]
pub fn opening(max_field_section: u64) -> Vec<u8> {
    let mut settings = Vec::new();
    put_varint(MAX_FIELD_SECTION_SIZE, &mut settings);
    put_varint(max_field_section, &mut settings);
    let mut out = Vec::new();
    put_varint(crate::frame::stream_type::CONTROL, &mut out);
    put_frame_header(kind::SETTINGS, settings.len() as u64, &mut out);
    out.extend_from_slice(&settings);
    out
}

/// A GOAWAY frame naming `id`: from a server, the first request it will not process.
#[must_use]
pub fn goaway(id: u64) -> Vec<u8> {
    let mut payload = Vec::new();
    put_varint(id, &mut payload);
    let mut out = Vec::new();
    put_frame_header(kind::GOAWAY, payload.len() as u64, &mut out);
    out.extend_from_slice(&payload);
    out
}

/// The peer's settings an endpoint here acts on; every other identifier is taken and
/// ignored, as section 7.2.4 asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `SETTINGS_MAX_FIELD_SECTION_SIZE`: the largest field section the peer takes, if it
    /// says (unlimited otherwise).
    pub max_field_section_size: Option<u64>,
    /// `SETTINGS_QPACK_MAX_TABLE_CAPACITY`: the dynamic table the peer offers (the encoders
    /// here never use one).
    pub qpack_max_table_capacity: u64,
}

/// What the peer's control stream told so far, and the rules for what it may tell next.
#[derive(Debug)]
pub struct PeerControl {
    role: Role,
    settings: Option<Settings>,
    max_push_id: Option<u64>,
    goaway: Option<u64>,
}

impl PeerControl {
    /// The peer's control stream, read by `role`.
    #[must_use]
    pub const fn new(role: Role) -> Self {
        Self {
            role,
            settings: None,
            max_push_id: None,
            goaway: None,
        }
    }

    /// The peer's SETTINGS, once they came.
    #[must_use]
    pub const fn settings(&self) -> Option<&Settings> {
        self.settings.as_ref()
    }

    /// The ID the peer's last GOAWAY named, if it sent one: from a server, the first request
    /// stream it did not and will not process.
    #[must_use]
    pub const fn goaway(&self) -> Option<u64> {
        self.goaway
    }

    /// Takes one step of the control stream's frames
    /// ([`FrameReader::feed`](crate::frame::FrameReader::feed)).
    ///
    /// # Errors
    /// What the peer did wrong: always a connection error on this stream.
    pub fn step(&mut self, step: Step<'_>) -> Result<Take, Violation> {
        const UNEXPECTED: Violation = Violation::Connection(
            code::FRAME_UNEXPECTED,
            "a frame the control stream may not carry",
        );
        match step {
            Step::Begins { kind, len } => {
                if self.settings.is_none() && kind != kind::SETTINGS {
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
                    kind::SETTINGS if self.settings.is_some() => Err(UNEXPECTED),
                    kind::SETTINGS | kind::GOAWAY | kind::CANCEL_PUSH => Ok(Take::Whole),
                    // Section 7.2.7: a server does not send it.
                    kind::MAX_PUSH_ID if self.role == Role::Client => Err(UNEXPECTED),
                    kind::MAX_PUSH_ID => Ok(Take::Whole),
                    kind::DATA | kind::HEADERS | kind::PUSH_PROMISE => Err(UNEXPECTED),
                    k if kind::is_http2(k) => Err(UNEXPECTED),
                    _ => Ok(Take::Skip),
                }
            }
            Step::Whole { kind, payload } => {
                if kind == kind::SETTINGS {
                    self.settings = Some(settings(payload)?);
                    return Ok(Take::Skip);
                }
                let id = one_varint(payload)?;
                match kind {
                    kind::GOAWAY if self.goaway.is_some_and(|was| id > was) => {
                        return Err(Violation::Connection(
                            code::ID_ERROR,
                            "a GOAWAY that raises its ID",
                        ));
                    }
                    // Section 5.2: a server's names a client-initiated bidirectional stream.
                    kind::GOAWAY if self.role == Role::Client && id % 4 != 0 => {
                        return Err(Violation::Connection(
                            code::ID_ERROR,
                            "a GOAWAY naming no request stream",
                        ));
                    }
                    kind::GOAWAY => self.goaway = Some(id),
                    kind::MAX_PUSH_ID if self.max_push_id.is_some_and(|m| id < m) => {
                        return Err(Violation::Connection(
                            code::ID_ERROR,
                            "a MAX_PUSH_ID that lowers it",
                        ));
                    }
                    kind::MAX_PUSH_ID => self.max_push_id = Some(id),
                    // CANCEL_PUSH: a server here never pushes, but one within the IDs the
                    // client allowed is no error; a client here allows none.
                    _ if self.max_push_id.is_none_or(|m| id > m) => {
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

/// The peer's SETTINGS: identifiers once each, none of HTTP/2's (section 7.2.4).
fn settings(mut payload: &[u8]) -> Result<Settings, Violation> {
    let mut ids = Vec::new();
    let mut taken = Settings {
        max_field_section_size: None,
        qpack_max_table_capacity: 0,
    };
    while !payload.is_empty() {
        let pair = varint(payload).and_then(|(id, n)| Some((id, n, varint(&payload[n..])?)));
        let Some((id, n, (value, m))) = pair else {
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
        match id {
            MAX_FIELD_SECTION_SIZE => taken.max_field_section_size = Some(value),
            QPACK_MAX_TABLE_CAPACITY => taken.qpack_max_table_capacity = value,
            _ => {}
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
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::FrameReader;

    fn control_as(role: Role, frames: &[(u64, Vec<u8>)]) -> Result<PeerControl, Violation> {
        let mut bytes = Vec::new();
        for (k, p) in frames {
            put_frame_header(*k, p.len() as u64, &mut bytes);
            bytes.extend_from_slice(p);
        }
        let mut told = PeerControl::new(role);
        FrameReader::default().feed(&bytes, &mut |s| told.step(s))?;
        Ok(told)
    }

    fn control(frames: &[(u64, Vec<u8>)]) -> Result<(), Violation> {
        control_as(Role::Server, frames).map(|_| ())
    }

    fn conn_code<T>(r: Result<T, Violation>) -> Option<u64> {
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
    fn a_client_takes_a_servers_control_stream_by_the_servers_rules() {
        let settings = (kind::SETTINGS, vec![0x6, 0x44, 0x00, 0x21, 0x0]);
        let told = control_as(Role::Client, &[settings.clone(), (kind::GOAWAY, vec![8])]).unwrap();
        assert_eq!(told.goaway(), Some(8));
        assert_eq!(
            told.settings().and_then(|s| s.max_field_section_size),
            Some(0x400),
            "the limit taken, the unknown setting ignored"
        );
        for frames in [
            vec![settings.clone(), (kind::MAX_PUSH_ID, vec![1])],
            vec![
                settings.clone(),
                (kind::GOAWAY, vec![8]),
                (kind::GOAWAY, vec![12]),
            ],
        ] {
            assert!(
                conn_code(control_as(Role::Client, &frames)).is_some(),
                "{frames:?}"
            );
        }
        assert_eq!(
            conn_code(control_as(
                Role::Client,
                &[settings.clone(), (kind::MAX_PUSH_ID, vec![1])]
            )),
            Some(code::FRAME_UNEXPECTED)
        );
        for id in [1, 2, 3, 5] {
            assert_eq!(
                conn_code(control_as(
                    Role::Client,
                    &[settings.clone(), (kind::GOAWAY, vec![id])]
                )),
                Some(code::ID_ERROR),
                "a GOAWAY naming stream {id}"
            );
        }
        assert_eq!(
            conn_code(control_as(
                Role::Client,
                &[settings, (kind::CANCEL_PUSH, vec![0])]
            )),
            Some(code::ID_ERROR),
            "no push was allowed"
        );
    }

    #[test]
    fn the_opening_announces_the_field_section_limit() {
        let o = opening(8192);
        assert_eq!(o[0], crate::frame::stream_type::CONTROL as u8);
        assert_eq!(o[1], kind::SETTINGS as u8);
        let (id, n) = varint(&o[3..]).unwrap();
        assert_eq!(id, MAX_FIELD_SECTION_SIZE);
        assert_eq!(varint(&o[3 + n..]).map(|v| v.0), Some(8192));
        let told = control_as(Role::Client, &[(kind::SETTINGS, o[3..].to_vec())]).unwrap();
        assert_eq!(told.settings().unwrap().max_field_section_size, Some(8192));
    }
}
