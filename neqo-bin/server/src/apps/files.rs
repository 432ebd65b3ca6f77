//! neqo-server's file serving as a [`Service`]: the same answers as its built-in HTTP/3
//! (the rules of [`respond::plan`]: `GET`/`HEAD` of a file under the root, its target read by
//! the web rules (query, %-escapes, index, a redirect for a directory), or of a generated
//! `/N`, a `POST` counted, 400, 404, 405), so that a service of your own can hand it what it does
//! not answer itself, and so that the two paths can be measured side by side.
//!
//! Files are opened and read on tokio's blocking pool, a chunk at a time as the stream takes
//! them, so a slow reader holds the file back through flow control.

use std::{
    fs::File,
    future::Future,
    path::Path,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header::CONTENT_LENGTH, header::CONTENT_TYPE};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use neqo_protocols::{hq, pattern};
use tokio::task::JoinHandle;

use super::service::{BoxError, RequestBody, ResponseBody, Service, ServiceFuture};
use crate::{
    ServerError,
    disk::Root,
    http3::respond::{self, GENERATED, Got, Plan},
};
use neqo_h3::head::{Method, RequestHead as Head};

/// Files under a root, and generated `/N` bodies if asked for, as a [`Service`].
#[derive(Debug, Clone)]
pub struct Files {
    root: Option<Arc<Root>>,
    generate: bool,
}

impl Files {
    /// The files under `root`; `/N` is not found (see [`generating`](Self::generating)).
    ///
    /// # Errors
    /// [`ServerError::Root`]: `root` is not a directory that can be read.
    pub fn new(root: &Path) -> Result<Self, ServerError> {
        let canonical = hq::canonical_root(root).map_err(|source| ServerError::Root {
            path: root.to_owned(),
            source,
        })?;
        Ok(Self {
            root: Some(Arc::new(Root::new(&canonical))),
            generate: false,
        })
    }

    /// No files: only generated `/N` bodies, as benchmarks ask for.
    #[must_use]
    pub const fn generated() -> Self {
        Self {
            root: None,
            generate: true,
        }
    }

    /// Answers `/N` (digits only) with N generated pattern bytes, or not.
    #[must_use]
    pub const fn generating(mut self, on: bool) -> Self {
        self.generate = on;
        self
    }
}

impl Service for Files {
    fn call(&self, request: Request<RequestBody>) -> ServiceFuture {
        let method = match *request.method() {
            http::Method::GET => Method::Get,
            http::Method::HEAD => Method::Head,
            http::Method::POST => Method::Post,
            _ => Method::Other,
        };
        let path = request
            .uri()
            .path_and_query()
            .map_or_else(String::new, |p| p.as_str().to_owned());
        let head = Head {
            method,
            path,
            content_length: None,
        };
        let plan = respond::plan(&head, self.root.as_deref(), self.generate);
        let root = self.root.clone();
        Box::pin(async move {
            match plan {
                Plan::Status(s) => status(s),
                Plan::Moved(location) => moved(&location),
                Plan::Upload => counted(request.into_body()).await,
                Plan::Generated { len, head } => ok(
                    len,
                    GENERATED,
                    head,
                    ResponseBody::new(PatternBody { at: 0, len }),
                ),
                Plan::Read { data, media, head } => {
                    ok(data.len() as u64, media, head, ResponseBody::from(data))
                }
                Plan::Open {
                    path,
                    media,
                    head,
                    moved: to,
                } => {
                    let Some(root) = root else {
                        return status(404);
                    };
                    let job = move || respond::open(root.path(), &path, head);
                    match tokio::task::spawn_blocking(job).await {
                        Ok(Got::Opened { len, first }) => {
                            let body = first.map_or_else(ResponseBody::empty, |c| {
                                ResponseBody::new(FileBody {
                                    ready: Some(c.data),
                                    file: c.file,
                                    reading: None,
                                    left: len,
                                    unread: c.remaining,
                                })
                            });
                            ok(len, media, head, body)
                        }
                        Ok(Got::Directory) => to.map_or_else(|| status(404), |l| moved(&l)),
                        Ok(Got::NotFound) => status(404),
                        Ok(Got::Failed(why)) => {
                            tracing::warn!("HTTP/3 file request: {why}");
                            status(500)
                        }
                        Ok(Got::Chunk(_)) | Err(_) => status(500),
                    }
                }
            }
        })
    }
}

fn status(code: u16) -> Response<ResponseBody> {
    let mut r = Response::new(ResponseBody::empty());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

/// `301 Moved Permanently` to `location` ([`Plan::Moved`]).
fn moved(location: &str) -> Response<ResponseBody> {
    let mut r = status(301);
    // The web rules escape what a field value cannot hold; a value that still fails is a 500.
    match http::HeaderValue::from_str(location) {
        Ok(v) => {
            r.headers_mut().insert(http::header::LOCATION, v);
            r.headers_mut()
                .insert(CONTENT_LENGTH, http::HeaderValue::from(0));
        }
        Err(_) => r = status(500),
    }
    r
}

/// A 200 of `len` bytes of `media`; only its head for `HEAD`.
fn ok(len: u64, media: &'static str, head: bool, body: ResponseBody) -> Response<ResponseBody> {
    let mut r = Response::new(if head { ResponseBody::empty() } else { body });
    r.headers_mut()
        .insert(CONTENT_TYPE, http::HeaderValue::from_static(media));
    r.headers_mut()
        .insert(CONTENT_LENGTH, http::HeaderValue::from(len));
    r
}

/// A `POST`: its body counted as it arrives (none of it kept), answered with the count.
async fn counted(mut body: RequestBody) -> Response<ResponseBody> {
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => n += f.data_ref().map_or(0, |d| d.len() as u64),
            // The client gave up on it: nobody reads this answer.
            Err(_) => return status(400),
        }
    }
    let mut r = Response::new(ResponseBody::from(n.to_string()));
    r.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `/N`'s body, a chunk at a time.
struct PatternBody {
    at: u64,
    len: u64,
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.at == self.len {
            return Poll::Ready(None);
        }
        let chunk = pattern::chunk(self.at, self.len - self.at);
        self.at += chunk.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len - self.at)
    }
}

/// A file's body: the chunk read with the opening, then the rest, a chunk at a time on the
/// blocking pool.
struct FileBody {
    ready: Option<Bytes>,
    file: Option<File>,
    reading: Option<JoinHandle<Got>>,
    /// Bytes not yet yielded.
    left: u64,
    /// Bytes not yet read from the file.
    unread: u64,
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(data) = this.ready.take() {
            this.left -= data.len() as u64;
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if this.reading.is_none() {
            let Some(file) = this.file.take() else {
                return Poll::Ready(None);
            };
            let unread = this.unread;
            this.reading = Some(tokio::task::spawn_blocking(move || {
                respond::next_chunk(file, unread)
            }));
        }
        let Some(reading) = this.reading.as_mut() else {
            return Poll::Ready(None);
        };
        let got = ready!(Pin::new(reading).poll(cx));
        this.reading = None;
        match got {
            Ok(Got::Chunk(c)) => {
                (this.file, this.unread) = (c.file, c.remaining);
                this.left -= c.data.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(c.data))))
            }
            // The body cannot be sent whole: an error, so the stream is reset and no
            // truncated body passes for complete.
            Ok(Got::Failed(why)) => Poll::Ready(Some(Err(why.into()))),
            Ok(_) => Poll::Ready(Some(Err("the file read went wrong".into()))),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}
