//! What answers a request: `GET` or `HEAD` of `/N` or of a file under the root, with the
//! status, `content-length` and `content-type`; a `POST`'s body counted and answered with its
//! length; an error status alone. A response is its HEADERS frame and one DATA frame header
//! (the length is known before the first byte), then the body as the stream takes it, so the
//! body goes out as an `hq-interop` one does.

use std::{fs::File, path::Path};

use crate::disk::{self, FileChunk, Root};
use bytes::Bytes;
use neqo_h3::{
    frame::{kind, put_frame_header},
    head::{Method, RequestHead as Head},
    qpack,
};
use neqo_protocols::{
    body::Source,
    hq,
    web::{self, Lookup},
};
use quinn_proto::{ConnectionHandle, StreamId};

/// The media type of a file, by its name's extension.
fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    match ext.to_ascii_lowercase().as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

/// The media type of generated bodies.
pub(crate) const GENERATED: &str = "application/octet-stream";

/// A response's start: its HEADERS frame (with `location`, for a redirect) and, when it has a
/// body, the DATA frame header that announces all of it.
pub(super) fn start(
    status: u16,
    len: u64,
    media: Option<&str>,
    location: Option<&str>,
    with_body: bool,
) -> Bytes {
    let mut section = Vec::with_capacity(64);
    qpack::put_response(status, len, media, &mut section);
    if let Some(l) = location {
        qpack::put_location(l, &mut section);
    }
    let mut out = Vec::with_capacity(section.len() + 16);
    put_frame_header(kind::HEADERS, section.len() as u64, &mut out);
    out.extend_from_slice(&section);
    if with_body && len > 0 {
        put_frame_header(kind::DATA, len, &mut out);
    }
    Bytes::from(out)
}

/// How a request is answered.
#[derive(Debug)]
pub(crate) enum Plan {
    /// An error status and no body.
    Status(u16),
    /// `/N`: N pattern bytes (only the head for `HEAD`).
    Generated { len: u64, head: bool },
    /// A small file read at once on the driver thread.
    Read {
        data: Bytes,
        media: &'static str,
        head: bool,
    },
    /// A file to open off the driver thread.
    Open {
        path: String,
        media: &'static str,
        head: bool,
        /// Where to redirect if it is a directory (asked for without a trailing `/`).
        moved: Option<String>,
    },
    /// A directory asked for without its trailing `/`: `301 Moved Permanently` there.
    Moved(String),
    /// A `POST`: answered with its body's length once it has all arrived.
    Upload,
}

/// How to answer `head`, under `root` if any, `/N` generated if `generate` (else not found);
/// its target read by the web rules ([`web`]).
pub(crate) fn plan(head: &Head, root: Option<&Root>, generate: bool) -> Plan {
    let is_head = match head.method {
        Method::Get => false,
        Method::Head => true,
        Method::Post => return Plan::Upload,
        Method::Options | Method::Connect | Method::Other => return Plan::Status(405),
    };
    match web::lookup(&head.path) {
        Err(why) => {
            tracing::debug!("HTTP/3 request target refused: {why}");
            Plan::Status(400)
        }
        Ok(Lookup::Generated(len)) if generate => Plan::Generated { len, head: is_head },
        Ok(Lookup::Generated(_)) => Plan::Status(404),
        Ok(Lookup::File { path, index }) => {
            let Some(root) = root else {
                return Plan::Status(404);
            };
            let media = content_type(&path);
            // Small and cached: read here, no hand-off.
            match hq::relative_path(&path)
                .ok()
                .and_then(|rel| root.read_at_once(rel))
            {
                Some(data) => Plan::Read {
                    data,
                    media,
                    head: is_head,
                },
                None => Plan::Open {
                    path,
                    media,
                    head: is_head,
                    moved: (!index).then(|| web::with_slash(&head.path)),
                },
            }
        }
    }
}

/// What a file job found.
#[derive(Debug)]
pub(crate) enum Got {
    /// The file is open: its length, and its first chunk unless only the head is wanted.
    Opened { len: u64, first: Option<FileChunk> },
    /// The next chunk.
    Chunk(FileChunk),
    /// It is a directory.
    Directory,
    /// It is not there, or breaks the naming rules, or leaves the root, or is no file.
    NotFound,
    /// It could not be read.
    Failed(String),
}

/// A file job's result for one request.
#[derive(Debug)]
pub(super) struct FileDone {
    pub(super) ch: ConnectionHandle,
    pub(super) id: StreamId,
    /// Tells this request from a later one with the same handle and stream ID.
    pub(super) token: u64,
    pub(super) got: Got,
}

/// Opens `path` under `root` and, unless `head`, reads its first chunk. Blocking.
pub(crate) fn open(root: &Path, path: &str, head: bool) -> Got {
    let (file, len) = match hq::open(Some(root), path) {
        Ok(opened) => opened,
        // A name under a file (`/a.txt/b`) is not there either.
        Err(hq::Error::Io(e))
            if !matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Got::Failed(format!("opening {path:?}: {e}"));
        }
        Err(hq::Error::Directory) => return Got::Directory,
        Err(_) => return Got::NotFound,
    };
    if head {
        return Got::Opened { len, first: None };
    }
    match disk::read_chunk(file, len) {
        Ok(chunk) => Got::Opened {
            len,
            first: Some(chunk),
        },
        Err(e) => Got::Failed(format!("reading {path:?}: {e}")),
    }
}

/// Reads the next chunk of `file`, `remaining` bytes from its end. Blocking.
pub(crate) fn next_chunk(file: File, remaining: u64) -> Got {
    disk::read_chunk(file, remaining).map_or_else(|e| Got::Failed(e.to_string()), Got::Chunk)
}

/// A response's progress.
#[derive(Debug)]
pub(super) enum Response {
    /// Not begun: the head has not arrived, or a `POST` body is still arriving.
    None,
    /// Waiting for a file job to open the file.
    Opening {
        media: &'static str,
        head: bool,
        /// Where a directory is redirected ([`Plan::Open`]).
        moved: Option<String>,
    },
    /// Being written.
    Sending {
        source: Source,
        /// The HEADERS and DATA frame headers, written first.
        framing: u64,
        /// Not an error (a 200, or a redirect), counted in `responses` once handed to the
        /// stream whole (error statuses are counted at their start).
        ok: bool,
        /// The file the body is read from, while a read is not in flight.
        file: Option<File>,
        /// Its bytes not yet read.
        remaining: u64,
    },
    /// All handed to the stream (counted then): waiting for the client's acknowledgment, when
    /// it is logged as answered with its body's `bytes`.
    Sent { bytes: u64 },
}

/// Where a 200's body comes from.
pub(super) enum Content {
    /// `/N`: the pattern.
    Pattern,
    /// All of it, here.
    Bytes(Bytes),
    /// A file's first chunk, and the file for the rest.
    File(FileChunk),
}

/// A response to write: its framing, then `len` bytes of `content`, or only the head.
pub(super) fn sending(
    status: u16,
    len: u64,
    media: Option<&str>,
    head: bool,
    content: Content,
) -> Response {
    framed(
        start(status, len, media, None, !head),
        status,
        len,
        head,
        content,
    )
}

/// A redirect to `location`, with no body.
pub(super) fn moved(location: &str) -> Response {
    let status = 301;
    framed(
        start(status, 0, None, Some(location), false),
        status,
        0,
        true,
        Content::Pattern,
    )
}

fn framed(framing: Bytes, status: u16, len: u64, head: bool, content: Content) -> Response {
    let framing_len = framing.len() as u64;
    let (mut file, mut remaining) = (None, 0);
    let source = if head || len == 0 {
        Source::pattern(Some(framing), 0)
    } else {
        match content {
            Content::Pattern => Source::pattern(Some(framing), len),
            Content::Bytes(b) => {
                let mut s = Source::fed(Some(framing));
                s.feed(b, true);
                s
            }
            Content::File(c) => {
                let mut s = Source::fed(Some(framing));
                s.feed(c.data, c.remaining == 0);
                (file, remaining) = (c.file, c.remaining);
                s
            }
        }
    };
    Response::Sending {
        source,
        framing: framing_len,
        ok: status < 400,
        file,
        remaining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_start_is_a_headers_frame_then_a_data_header() {
        let s = start(200, 70_000, Some(GENERATED), None, true);
        assert_eq!(s[0], kind::HEADERS as u8);
        let section_len = usize::from(s[1]);
        let data = &s[2 + section_len..];
        // DATA, 70 000 as a 4-byte varint.
        assert_eq!(data, &[0x00, 0x80, 0x01, 0x11, 0x70]);
        let s = start(404, 0, None, None, true);
        assert_eq!(usize::from(s[1]) + 2, s.len(), "no DATA for no body");
        let s = start(200, 5, None, None, false);
        assert_eq!(usize::from(s[1]) + 2, s.len(), "no DATA for HEAD");
    }
}
