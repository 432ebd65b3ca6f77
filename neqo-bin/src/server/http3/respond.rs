//! One HTTP/3 request answered: `GET` or `HEAD` of `/N` or of a file under the root, the
//! status, `content-length`, `content-type`, and the body, a chunk at a time; a `POST`'s
//! body read and counted, answered with its length.

use std::path::Path;

use bytes::{Buf as _, Bytes};
use h3::server::RequestStream;
use http::{Method, Request, Response, StatusCode};

use super::Counters;
use crate::{
    disk,
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

/// Answers `request`; `Ok(true)` for a whole 200 response, `Ok(false)` for an error status.
pub(super) async fn respond(
    request: &Request<()>,
    stream: &mut Stream,
    root: Option<&Path>,
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
    let (mut file, len, media) = match target {
        Target::Generated(n) => (None, n, "application/octet-stream"),
        Target::File(_) => {
            let (root, opened) = (root.map(Path::to_path_buf), path.clone());
            let open = tokio::task::spawn_blocking(move || hq::open(root.as_deref(), &opened));
            match open.await {
                Ok(Ok((f, len))) => (Some(Some(f)), len, content_type(&path)),
                Ok(Err(hq::Error::Io(e))) if e.kind() == std::io::ErrorKind::NotFound => {
                    return status_only(stream, StatusCode::NOT_FOUND, counters).await;
                }
                Ok(Err(hq::Error::Io(_))) | Err(_) => {
                    return status_only(stream, StatusCode::INTERNAL_SERVER_ERROR, counters).await;
                }
                // A path that breaks the naming rules, leaves the root, or is no file: as
                // if it were not there.
                Ok(Err(_)) => return status_only(stream, StatusCode::NOT_FOUND, counters).await,
            }
        }
    };
    let response = Response::builder()
        .status(StatusCode::OK)
        .header("content-length", len)
        .header("content-type", media)
        .body(())
        .unwrap_or_default();
    stream.send_response(response).await?;
    if head {
        stream.finish().await?;
        return Ok(true);
    }
    let mut sent = 0u64;
    while sent < len {
        let chunk = match &mut file {
            None => pattern::chunk(sent, len - sent),
            Some(f) => {
                let (f, remaining) = (f.take(), len - sent);
                let read = tokio::task::spawn_blocking(move || {
                    f.map_or_else(
                        || Err(std::io::Error::other("no file left to read")),
                        |f| disk::read_chunk(f, remaining),
                    )
                });
                match read.await {
                    Ok(Ok(c)) => {
                        file = Some(c.file);
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
