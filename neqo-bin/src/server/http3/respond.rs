//! One HTTP/3 request answered: `GET` or `HEAD` of `/N` or of a file under the root, the
//! status, `content-length`, `content-type`, and the body, a chunk at a time; a `POST`'s
//! body read and counted, answered with its length.

use std::{fs::File, path::Path};

use bytes::{Buf as _, Bytes};
use h3::server::RequestStream;
use http::{
    HeaderValue, Method, Request, Response, StatusCode,
    header::{CONTENT_LENGTH, CONTENT_TYPE},
};

use super::Counters;
use crate::{
    disk::{self, Root},
    h3::streams::BidiStream,
    hq::{self, Target},
    pattern,
};

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

pub(super) type Stream = RequestStream<BidiStream, Bytes>;

async fn status_only(
    stream: &mut Stream,
    status: StatusCode,
    counters: &Counters,
) -> Result<bool, Failed> {
    counters.borrow_mut().error_statuses += 1;
    let response = Response::builder()
        .status(status)
        .header("content-length", 0)
        .body(())
        .unwrap_or_default();
    stream.send_response(response).await?;
    stream.finish().await?;
    Ok(false)
}

/// Where a 200's body comes from.
enum Body {
    /// `/N`: the pattern.
    Generated,
    /// A file: its first chunk (read with the open), and the file for the rest, if any.
    File(Option<Bytes>, Option<File>),
}

/// Why a file could not be answered 200.
enum OpenFailed {
    Open(hq::Error),
    Read,
}

/// Opens the file at `path` under `root` and, unless only its head is wanted, reads its first
/// chunk: one job on the blocking pool for both. Blocking.
fn open_and_read(
    root: Option<&Path>,
    path: &str,
    head: bool,
) -> Result<(u64, Option<Bytes>, Option<File>), OpenFailed> {
    let (file, len) = hq::open(root, path).map_err(OpenFailed::Open)?;
    if head {
        return Ok((len, None, None));
    }
    let chunk = disk::read_chunk(file, len).map_err(|_| OpenFailed::Read)?;
    Ok((len, Some(chunk.data), chunk.file))
}

/// Answers `request`; `Ok(true)` for a whole 200 response, `Ok(false)` for an error status.
pub(super) async fn respond(
    request: &Request<()>,
    stream: &mut Stream,
    root: Option<&Root>,
    counters: &Counters,
) -> Result<bool, Failed> {
    let head = match *request.method() {
        Method::GET => false,
        Method::HEAD => true,
        Method::POST => return upload(stream, counters).await,
        _ => return status_only(stream, StatusCode::METHOD_NOT_ALLOWED, counters).await,
    };
    let path = request.uri().path().to_owned();
    let target = match hq::target(&path) {
        Ok(t) => t,
        Err(_) => return status_only(stream, StatusCode::BAD_REQUEST, counters).await,
    };
    let (len, media, mut body) = match target {
        Target::Generated(n) => (n, "application/octet-stream", Body::Generated),
        Target::File(_) => {
            // Small and cached: read here, no hand-off.
            let at_once = root.and_then(|r| r.read_at_once(hq::relative_path(&path).ok()?));
            if let Some(data) = at_once {
                let len = data.len() as u64;
                (len, content_type(&path), Body::File(Some(data), None))
            } else {
                let (root, opened) = (root.map(|r| r.path().to_path_buf()), path.clone());
                let open = tokio::task::spawn_blocking(move || {
                    open_and_read(root.as_deref(), &opened, head)
                });
                match open.await {
                    Ok(Ok((len, first, file))) => {
                        (len, content_type(&path), Body::File(first, file))
                    }
                    Ok(Err(OpenFailed::Open(hq::Error::Io(e))))
                        if e.kind() == std::io::ErrorKind::NotFound =>
                    {
                        return status_only(stream, StatusCode::NOT_FOUND, counters).await;
                    }
                    Ok(Err(OpenFailed::Open(hq::Error::Io(_)) | OpenFailed::Read)) | Err(_) => {
                        return status_only(stream, StatusCode::INTERNAL_SERVER_ERROR, counters)
                            .await;
                    }
                    // A path that breaks the naming rules, leaves the root, or is no file: as
                    // if it were not there.
                    Ok(Err(OpenFailed::Open(_))) => {
                        return status_only(stream, StatusCode::NOT_FOUND, counters).await;
                    }
                }
            }
        }
    };
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(CONTENT_LENGTH, len)
        .header(CONTENT_TYPE, HeaderValue::from_static(media))
        .body(())
        .unwrap_or_default();
    stream.send_response(response).await?;
    if head {
        stream.finish().await?;
        return Ok(true);
    }
    let mut sent = 0u64;
    while sent < len {
        let chunk = match &mut body {
            Body::Generated => pattern::chunk(sent, len - sent),
            Body::File(first @ Some(_), _) => first.take().unwrap_or_default(),
            Body::File(None, rest) => {
                let (f, remaining) = (rest.take(), len - sent);
                let read = tokio::task::spawn_blocking(move || {
                    f.map_or_else(
                        || Err(std::io::Error::other("no file left to read")),
                        |f| disk::read_chunk(f, remaining),
                    )
                });
                match read.await {
                    Ok(Ok(c)) => {
                        *rest = c.file;
                        c.data
                    }
                    // The body cannot be sent whole: a reset, so that no truncated body
                    // passes for complete.
                    _ => return Err(Failed::File),
                }
            }
        };
        sent += chunk.len() as u64;
        counters.borrow_mut().body_bytes += chunk.len() as u64;
        stream.send_data(chunk).await?;
    }
    stream.finish().await?;
    Ok(true)
}

/// A `POST`: its body read (whatever the path) and counted, answered with its length in
/// decimal, so that the client knows every byte arrived (as `perf` answers an upload).
async fn upload(stream: &mut Stream, counters: &Counters) -> Result<bool, Failed> {
    let mut n = 0u64;
    while let Some(chunk) = stream.recv_data().await? {
        n += chunk.remaining() as u64;
    }
    counters.borrow_mut().uploaded_bytes += n;
    let body = Bytes::from(n.to_string());
    let response = Response::builder()
        .status(StatusCode::OK)
        .header("content-length", body.len())
        .header("content-type", "text/plain; charset=utf-8")
        .body(())
        .unwrap_or_default();
    stream.send_response(response).await?;
    counters.borrow_mut().body_bytes += body.len() as u64;
    stream.send_data(body).await?;
    stream.finish().await?;
    Ok(true)
}

/// Why a response was not sent whole.
#[derive(Debug)]
pub(super) enum Failed {
    /// The stream or the connection failed (the client cancelled, the connection closed).
    Stream,
    /// The file could not be read to its end.
    File,
}

impl From<h3::error::StreamError> for Failed {
    fn from(_: h3::error::StreamError) -> Self {
        Self::Stream
    }
}
