//! An HTTP/3 service as you write it: a request (head, and its body as it arrives) in, a
//! response (head, and a body produced as the client takes it) out.
//!
//! A service's futures and bodies run on the thread of the worker that owns the connection,
//! beside its driver, so they need not be `Send`; work that would hold the thread (a disk
//! read, a computation) belongs on a pool of its own, its result awaited.

use std::{
    cell::Cell,
    fmt,
    future::Future,
    pin::Pin,
    rc::Rc,
    task::{Context, Poll},
};

use bytes::{Buf, Bytes};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Empty, Full};

/// An error a service or a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a service's [`call`](Service::call) returns.
pub type ServiceFuture = Pin<Box<dyn Future<Output = Response<ResponseBody>>>>;

/// An HTTP/3 application: answers each request. One value serves every connection on every
/// worker, so it is shared (`Send + Sync`); each call's future runs on its connection's
/// worker.
pub trait Service: Send + Sync + 'static {
    /// The response to `request`. Its body is read as the service asks for it: a service
    /// that reads slowly holds the client back through flow control, and one that answers
    /// without reading it all has the rest refused (`STOP_SENDING` with `H3_NO_ERROR`).
    fn call(&self, request: Request<RequestBody>) -> ServiceFuture;
}

/// What a service function may answer: a response, or an error (answered 500 and logged).
pub trait IntoResponse {
    /// The response.
    fn into_response(self) -> Response<ResponseBody>;
}

impl IntoResponse for Response<ResponseBody> {
    fn into_response(self) -> Response<ResponseBody> {
        self
    }
}

impl<E: fmt::Display> IntoResponse for Result<Response<ResponseBody>, E> {
    fn into_response(self) -> Response<ResponseBody> {
        self.unwrap_or_else(|e| {
            tracing::warn!("service failed: {e}");
            let mut r = Response::new(ResponseBody::empty());
            *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            r
        })
    }
}

/// A [`Service`] from an async function or closure ([`service_fn`]).
pub struct ServiceFn<F>(F);

/// A [`Service`] that calls `f` for each request; `f`'s future answers a
/// `Response<ResponseBody>` or a `Result` of one.
pub fn service_fn<F, Fut>(f: F) -> ServiceFn<F>
where
    F: Fn(Request<RequestBody>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output: IntoResponse> + 'static,
{
    ServiceFn(f)
}

impl<F, Fut> Service for ServiceFn<F>
where
    F: Fn(Request<RequestBody>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output: IntoResponse> + 'static,
{
    fn call(&self, request: Request<RequestBody>) -> ServiceFuture {
        let fut = (self.0)(request);
        Box::pin(async move { fut.await.into_response() })
    }
}

impl<F> fmt::Debug for ServiceFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServiceFn")
    }
}

/// The request stream's receiving half, as `h3` reads it.
pub(super) type RecvHalf = h3::server::RequestStream<neqo_h3::RecvStream, Bytes>;

/// What reading a request's body found, for the request's bookkeeping.
#[derive(Debug, Default)]
pub(super) struct BodyRead {
    /// Bytes read.
    pub(super) bytes: Cell<u64>,
    /// Its length differs from its `content-length`: the request is malformed (RFC 9114
    /// section 4.1.2) and its stream is to be reset with `H3_MESSAGE_ERROR`.
    pub(super) malformed: Cell<bool>,
}

/// A request's body, read off its stream as it is polled: its DATA frames, then its trailers
/// if it has any. A client that ends the stream abruptly, or sends a body whose length is not
/// its `content-length`, ends the body with an error.
pub struct RequestBody {
    stream: Option<RecvHalf>,
    /// Data frames are done: trailers next.
    trailers: bool,
    /// The request's `content-length`.
    expected: Option<u64>,
    read: Rc<BodyRead>,
}

impl RequestBody {
    pub(super) fn new(stream: RecvHalf, expected: Option<u64>, read: Rc<BodyRead>) -> Self {
        Self {
            stream: Some(stream),
            trailers: false,
            expected,
            read,
        }
    }

    /// The body broke its `content-length`: the request is malformed.
    fn malformed(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(mut s) = self.stream.take() {
            s.stop_sending(h3::error::Code::H3_MESSAGE_ERROR);
        }
        self.read.malformed.set(true);
        Poll::Ready(Some(Err(
            "the request's body is not as long as its content-length".into(),
        )))
    }

    /// The whole body, however long: a service that reads a client's upload whole states its
    /// own bound on it first (a `content-length` it checks, or [`http_body_util::Limited`]).
    ///
    /// # Errors
    /// The stream's, as [`Body::poll_frame`] gives it.
    pub async fn bytes(self) -> Result<Bytes, BoxError> {
        Ok(self.collect().await?.to_bytes())
    }
}

impl fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBody")
            .field("read", &self.read.bytes.get())
            .field("ended", &self.stream.is_none())
            .finish()
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(None);
        };
        if !this.trailers {
            match std::task::ready!(stream.poll_recv_data(cx)) {
                Ok(Some(mut data)) => {
                    let data = data.copy_to_bytes(data.remaining());
                    let read = this.read.bytes.get() + data.len() as u64;
                    this.read.bytes.set(read);
                    if this.expected.is_some_and(|n| read > n) {
                        return this.malformed();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(None) if this.expected.is_some_and(|n| this.read.bytes.get() != n) => {
                    return this.malformed();
                }
                Ok(None) => this.trailers = true,
                Err(e) => {
                    this.stream = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
        let r = std::task::ready!(stream.poll_recv_trailers(cx));
        this.trailers = true;
        match r {
            // Over the field section limit the server advertised: dropped, as the built-in
            // HTTP/3 drops them (RFC 9114 section 4.2.2 lets a server refuse such a section),
            // and the body ends whole.
            Err(h3::error::StreamError::HeaderTooBig { .. }) => {
                tracing::debug!("request trailers over the field section limit: dropped");
                this.stream = None;
                Poll::Ready(None)
            }
            Ok(Some(t)) => {
                this.stream = None;
                Poll::Ready(Some(Ok(Frame::trailers(t))))
            }
            Ok(None) => {
                this.stream = None;
                Poll::Ready(None)
            }
            Err(e) => {
                this.stream = None;
                Poll::Ready(Some(Err(e.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_none()
    }
}

type LocalBody = Pin<Box<dyn Body<Data = Bytes, Error = BoxError>>>;

/// A response's body: any `http-body` body of [`Bytes`], sent frame by frame as the client's
/// flow control lets it go (a request's own body included, for an echo).
pub struct ResponseBody(LocalBody);

impl ResponseBody {
    /// No body.
    #[must_use]
    pub fn empty() -> Self {
        Self::new(Empty::new())
    }

    /// `body` as a response's.
    pub fn new<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + 'static,
        B::Error: Into<BoxError>,
    {
        Self(Box::pin(body.map_err(Into::into)))
    }

    /// The next frame, or the panic polling it raised (the body is not to be polled again).
    pub(super) async fn frame(
        &mut self,
    ) -> Result<Option<Result<Frame<Bytes>, BoxError>>, super::panics::Panicked> {
        let body = &mut self.0;
        std::future::poll_fn(
            |cx| match super::panics::caught(|| body.as_mut().poll_frame(cx)) {
                Ok(Poll::Pending) => Poll::Pending,
                Ok(Poll::Ready(f)) => Poll::Ready(Ok(f)),
                Err(p) => Poll::Ready(Err(p)),
            },
        )
        .await
    }

    /// Its length, if it knows it.
    pub(super) fn exact_len(&self) -> Option<u64> {
        self.0.size_hint().exact()
    }
}

impl fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ResponseBody")
            .field(&self.0.size_hint())
            .finish()
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.0.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

impl From<Bytes> for ResponseBody {
    fn from(b: Bytes) -> Self {
        Self::new(Full::new(b))
    }
}

impl From<Vec<u8>> for ResponseBody {
    fn from(b: Vec<u8>) -> Self {
        Bytes::from(b).into()
    }
}

impl From<String> for ResponseBody {
    fn from(s: String) -> Self {
        Bytes::from(s).into()
    }
}

impl From<&'static str> for ResponseBody {
    fn from(s: &'static str) -> Self {
        Bytes::from_static(s.as_bytes()).into()
    }
}

impl From<RequestBody> for ResponseBody {
    fn from(b: RequestBody) -> Self {
        Self::new(b)
    }
}
