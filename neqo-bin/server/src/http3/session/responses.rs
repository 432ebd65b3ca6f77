//! A request's response: begun from its plan, fed from file jobs, written as the stream
//! takes it, and forgotten once acknowledged.

use std::time::Instant;

use bytes::Bytes;
use neqo_protocols::body::{Pumped, StreamClosed};
use quinn_proto::{Connection, StreamId};

use super::{Session, Shared, varint};
use crate::{
    access_log::Outcome,
    http3::respond::{self, Content, FileDone, GENERATED, Got, Plan, Response, moved, sending},
};
use neqo_h3::frame::{Violation, code};

impl Session {
    /// Begins the response `plan` names.
    pub(super) fn answer(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        plan: Plan,
        shared: &mut Shared<'_>,
    ) -> Result<(), Violation> {
        let Some(req) = self.requests.get_mut(&id) else {
            return Ok(());
        };
        req.status = Some(match plan {
            Plan::Status(status) => status,
            Plan::Moved(_) => 301,
            _ => 200,
        });
        req.response = match plan {
            Plan::Status(status) => sending(status, 0, None, false, Content::Pattern),
            Plan::Moved(location) => moved(&location),
            Plan::Generated { len, head } => {
                sending(200, len, Some(GENERATED), head, Content::Pattern)
            }
            Plan::Read { data, media, head } => {
                let len = data.len() as u64;
                sending(200, len, Some(media), head, Content::Bytes(data))
            }
            Plan::Upload => {
                shared.counters.uploaded_bytes += req.incoming.body;
                let body = Bytes::from(req.incoming.body.to_string());
                let media = Some("text/plain; charset=utf-8");
                sending(200, body.len() as u64, media, false, Content::Bytes(body))
            }
            Plan::Open {
                path,
                media,
                head,
                moved,
            } => {
                let root = shared.root.map(|r| r.path().to_path_buf());
                shared.spawn(id, req.token, move || {
                    root.map_or(Got::NotFound, |r| respond::open(&r, &path, head))
                });
                req.response = Response::Opening { media, head, moved };
                return Ok(());
            }
        };
        if let Response::Sending { ok: false, .. } = req.response {
            shared.counters.error_statuses += 1;
        }
        self.pump(conn, id, shared)
    }

    /// A file job for one of its requests finished.
    pub(in super::super) fn file_done(
        &mut self,
        conn: &mut Connection,
        done: FileDone,
        shared: &mut Shared<'_>,
        now: Instant,
    ) {
        let FileDone { id, token, got, .. } = done;
        let Some(req) = self.requests.get_mut(&id).filter(|r| r.token == token) else {
            return;
        };
        let r = match (got, &mut req.response) {
            (Got::Opened { len, first }, Response::Opening { media, head, .. }) => {
                let content = first.map_or(Content::Pattern, Content::File);
                req.response = sending(200, len, Some(*media), *head, content);
                self.pump(conn, id, shared)
            }
            (Got::Directory, Response::Opening { moved, .. }) => {
                let plan = moved.take().map_or(Plan::Status(404), Plan::Moved);
                self.answer(conn, id, plan, shared)
            }
            (Got::NotFound, Response::Opening { .. }) => {
                self.answer(conn, id, Plan::Status(404), shared)
            }
            (Got::Failed(why), Response::Opening { .. }) => {
                tracing::warn!("HTTP/3 request on stream {id}: {why}");
                self.answer(conn, id, Plan::Status(500), shared)
            }
            (
                Got::Chunk(c),
                Response::Sending {
                    source,
                    file,
                    remaining,
                    ..
                },
            ) => {
                source.feed(c.data, c.remaining == 0);
                (*file, *remaining) = (c.file, c.remaining);
                self.pump(conn, id, shared)
            }
            (Got::Failed(why), Response::Sending { .. }) => {
                // The body cannot be sent whole: a reset, so that no truncated body passes
                // for complete.
                tracing::warn!("HTTP/3 request on stream {id}: {why}");
                Err(Violation::Stream(code::INTERNAL_ERROR))
            }
            _ => Ok(()),
        };
        self.settle(conn, r, Some((id, shared)), now);
    }

    /// Writes what request `id`'s response has ready.
    pub(super) fn pump(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        shared: &mut Shared<'_>,
    ) -> Result<(), Violation> {
        let Some(req) = self.requests.get_mut(&id) else {
            return Ok(());
        };
        let Response::Sending {
            source,
            framing,
            ok,
            file,
            remaining,
        } = &mut req.response
        else {
            return Ok(());
        };
        let before = source.written.max(*framing);
        let result = source.pump(&mut conn.send_stream(id));
        shared.counters.body_bytes += source.written.max(*framing) - before;
        match result {
            Ok(Pumped::Blocked) => {}
            Ok(Pumped::Starved) => {
                if let Some(f) = file.take() {
                    let left = *remaining;
                    shared.spawn(id, req.token, move || respond::next_chunk(f, left));
                }
            }
            Ok(Pumped::Finished) => {
                if *ok {
                    shared.counters.responses += 1;
                }
                // Logged once acknowledged (or cut, or lost with its connection): the log
                // says how it ended for the client, as far as the server can know.
                let bytes = source.written.saturating_sub(*framing);
                req.response = Response::Sent { bytes };
            }
            Err(StreamClosed) => {
                shared.counters.cancelled += 1;
                if let Some(req) = self.requests.remove(&id) {
                    self.log(shared.log, &req, Outcome::Closed);
                }
            }
        }
        Ok(())
    }

    /// Request `id`'s response is all acknowledged: it is logged as answered, its entry
    /// goes, and the rest of its request body, if any, is not wanted.
    pub(super) fn acknowledged(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        shared: &mut Shared<'_>,
    ) {
        let Some(req) = self.requests.remove(&id) else {
            return;
        };
        if matches!(req.response, Response::Sent { .. }) {
            self.log(shared.log, &req, Outcome::Answered);
        }
        if !req.incoming.ended {
            let _ = conn.recv_stream(id).stop(varint(code::NO_ERROR));
        }
    }
}
