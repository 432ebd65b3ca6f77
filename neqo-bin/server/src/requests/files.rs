//! The file a request asked for: read off the driver thread a chunk at a time ([`disk`]),
//! each chunk handed back to its stream, one read in flight per stream.

use std::task::{Context, Poll};

use neqo_protocols::hq;
use quinn_proto::{Connection, ConnectionHandle, StreamId};

use super::{FileDone, FileState, Requests};
use crate::{ServerReport, disk};

impl Requests {
    /// A file job that has finished, for [`Requests::file_done`] on its connection.
    pub(crate) fn take_file_done(&mut self) -> Option<FileDone> {
        self.files.take()
    }

    /// Ready once a file job has finished.
    pub(crate) fn poll_files(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.files.poll_ready(cx)
    }

    /// A file job finished: sends the chunk, or resets the stream.
    pub(crate) fn file_done(
        &mut self,
        conn: &mut Connection,
        done: FileDone,
        report: &mut ServerReport,
    ) {
        let FileDone {
            ch,
            id,
            token,
            result,
        } = done;
        let Some(st) = self
            .conns
            .get_mut(&ch)
            .and_then(|c| c.streams.get_mut(&id))
            .filter(|s| s.token == token)
        else {
            return;
        };
        match result {
            Ok(chunk) => {
                let last = chunk.remaining == 0;
                st.file = Some(FileState {
                    file: chunk.file,
                    remaining: chunk.remaining,
                });
                if let Some(src) = &mut st.source {
                    src.feed(chunk.data, last);
                }
                self.pump(ch, conn, id, report);
            }
            Err(why) => {
                tracing::warn!("{why}");
                self.refuse(ch, conn, id, hq::REFUSED, report);
            }
        }
    }

    /// Starts reading the next chunk of the stream's file, unless a read is in flight.
    pub(super) fn read_file(&mut self, ch: ConnectionHandle, id: StreamId) {
        let Some(st) = self.conns.get_mut(&ch).and_then(|c| c.streams.get_mut(&id)) else {
            return;
        };
        let token = st.token;
        let Some(fs) = &mut st.file else {
            return;
        };
        // None: a read is in flight, or everything is read.
        let Some(file) = fs.file.take() else {
            return;
        };
        let remaining = fs.remaining;
        self.files.spawn(move || FileDone {
            ch,
            id,
            token,
            result: disk::read_chunk(file, remaining)
                .map_err(|e| format!("reading the file for stream {id}: {e}")),
        });
    }
}
