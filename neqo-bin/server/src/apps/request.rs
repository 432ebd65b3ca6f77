//! A request to a service, as its task runs it: its head read, the service called, the
//! response sent; a request past the GOAWAY refused. Each is counted and logged once, however
//! it ends: its [`Ledger`] entry's drop does it, also when the task is dropped with its
//! connection.

use std::{
    rc::Rc,
    sync::Arc,
    time::{Instant, SystemTime},
};

use bytes::Bytes;
use h3::error::{Code, StreamError};
use http::{HeaderValue, Method, Response, header::CONTENT_LENGTH};
use neqo_h3::H3Connection;

use super::{
    http3::{Conn, Shared},
    panics::{self, Panicked},
    service::{BodyRead, RequestBody, ResponseBody, Service},
};
use crate::access_log::{Outcome, Record};

pub(super) type Resolver = h3::server::RequestResolver<H3Connection, Bytes>;

/// A request's entry in its connection's bookkeeping: counted and logged when dropped, by
/// how it ended (or as the connection's loss, when its task is dropped with it).
pub(super) struct Ledger {
    conn: Rc<Conn>,
    shared: Rc<Shared>,
    started: Instant,
    head: Option<(String, String)>,
    status: Option<u16>,
    sent: u64,
    read: Rc<BodyRead>,
    outcome: Outcome,
    /// The whole response went.
    answered: bool,
    /// The service's code panicked on it.
    panicked: bool,
}

impl Ledger {
    pub(super) fn new(conn: &Rc<Conn>, shared: &Rc<Shared>) -> Self {
        Self {
            conn: Rc::clone(conn),
            shared: Rc::clone(shared),
            started: Instant::now(),
            head: None,
            status: None,
            sent: 0,
            read: Rc::default(),
            outcome: Outcome::ConnectionLost,
            answered: false,
            panicked: false,
        }
    }

    /// The service's code panicked on `what` (its method and URI): logged here, counted when
    /// the request ends.
    fn panicked(&mut self, what: &(Method, http::Uri), p: &Panicked) {
        tracing::error!(
            "HTTP/3 service panicked on {} {} from {}: {}",
            what.0,
            what.1,
            self.conn.peer,
            p.0
        );
        self.panicked = true;
    }

    /// The stream failed with `e`.
    fn failed(&mut self, e: &StreamError) {
        if let StreamError::HeaderTooBig { .. } = e {
            // `h3` answered it 431 (RFC 9114 section 4.2.2) and ended the stream.
            self.status = Some(431);
            self.outcome = Outcome::Answered;
            self.answered = true;
            return;
        }
        self.outcome = match e {
            StreamError::RemoteTerminate { code, .. } => Outcome::Cancelled(code.value()),
            StreamError::ConnectionError { .. } => Outcome::ConnectionLost,
            StreamError::StreamError { code, .. } => Outcome::Reset(code.value()),
            _ => Outcome::Reset(Code::H3_INTERNAL_ERROR.value()),
        };
        tracing::debug!("HTTP/3 service request ended: {e}");
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.conn.open.set(self.conn.open.get() - 1);
        if self.panicked {
            self.shared.panics.set(self.shared.panics.get() + 1);
        }
        if self.conn.cut.get() && !self.answered && self.outcome == Outcome::ConnectionLost {
            self.outcome = Outcome::Shutdown;
        }
        {
            let mut c = self.shared.counters.borrow_mut();
            c.body_bytes += self.sent;
            c.uploaded_bytes += self.read.bytes.get();
            match (self.answered, self.status) {
                (true, Some(s)) if s >= 400 => c.error_statuses += 1,
                (true, _) => c.responses += 1,
                (false, _) if self.outcome == Outcome::Rejected => c.rejected += 1,
                (false, _) => c.cancelled += 1,
            }
        }
        let Some(log) = &self.shared.log else {
            return;
        };
        let (method, path) = self
            .head
            .take()
            .unwrap_or_else(|| ("-".to_owned(), "-".to_owned()));
        log.log(Record {
            time: SystemTime::now(),
            peer: self.conn.peer,
            alpn: self.conn.alpn.clone(),
            method,
            path,
            status: self.status,
            bytes: self.sent,
            duration: self.started.elapsed(),
            outcome: self.outcome,
        });
    }
}

/// A request past the GOAWAY: refused unprocessed (`H3_REQUEST_REJECTED`), for the client
/// to retry elsewhere.
pub(super) async fn reject(resolver: Resolver, mut ledger: Ledger) {
    ledger.outcome = Outcome::Rejected;
    if let Ok((_, mut stream)) = resolver.resolve_request().await {
        stream.stop_sending(Code::H3_REQUEST_REJECTED);
        stream.stop_stream(Code::H3_REQUEST_REJECTED);
    }
}

/// A request's task: its head, the service's response, and that response sent.
pub(super) async fn respond(resolver: Resolver, service: Arc<dyn Service>, mut ledger: Ledger) {
    let (request, stream) = match resolver.resolve_request().await {
        Ok(r) => r,
        Err(e) => return ledger.failed(&e),
    };
    let head_only = request.method() == Method::HEAD;
    ledger.head = ledger.shared.log.as_ref().map(|_| {
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        (request.method().to_string(), path)
    });
    let expected = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let (mut send, recv) = stream.split();
    let body = RequestBody::new(recv, expected, Rc::clone(&ledger.read));
    // Cheap (reference-counted), and kept only to say what a panic was serving.
    let what = (request.method().clone(), request.uri().clone());
    let called = panics::caught(|| service.call(request.map(|()| body)));
    let response = match called {
        Ok(fut) => panics::guarded(fut).await,
        Err(p) => Err(p),
    };
    let response = response.unwrap_or_else(|p| {
        ledger.panicked(&what, &p);
        let mut r = Response::new(ResponseBody::empty());
        *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
        r
    });
    if ledger.read.malformed.get() {
        // RFC 9114 section 4.1.2: a malformed request is a stream error.
        send.stop_stream(Code::H3_MESSAGE_ERROR);
        ledger.outcome = Outcome::Reset(Code::H3_MESSAGE_ERROR.value());
        return;
    }
    let (mut parts, mut body) = response.into_parts();
    if !head_only
        && !parts.headers.contains_key(CONTENT_LENGTH)
        && let Some(n) = body.exact_len()
    {
        parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
    }
    ledger.status = Some(parts.status.as_u16());
    if let Err(e) = send.send_response(Response::from_parts(parts, ())).await {
        return ledger.failed(&e);
    }
    if !head_only {
        match send_body(&mut send, &mut body, &mut ledger, &what).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => return ledger.failed(&e),
        }
    }
    if let Err(e) = send.finish().await {
        return ledger.failed(&e);
    }
    ledger.outcome = Outcome::Answered;
    ledger.answered = true;
}

type SendHalf = h3::server::RequestStream<neqo_h3::SendStream, Bytes>;

/// Sends `body`'s frames. A body that fails or panics resets the stream
/// (`H3_INTERNAL_ERROR`): the client sees a response cut short, never one that looks whole.
/// Returns whether the body went whole (the stream is then to be finished).
async fn send_body(
    send: &mut SendHalf,
    body: &mut ResponseBody,
    ledger: &mut Ledger,
    what: &(Method, http::Uri),
) -> Result<bool, StreamError> {
    loop {
        let frame = match body.frame().await {
            Ok(Some(Ok(f))) => f,
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                tracing::warn!("response body failed: {e}");
                send.stop_stream(Code::H3_INTERNAL_ERROR);
                ledger.outcome = Outcome::Reset(Code::H3_INTERNAL_ERROR.value());
                return Ok(false);
            }
            Err(p) => {
                ledger.panicked(what, &p);
                // Its drop may panic too: here, not later with the task.
                let broken = std::mem::replace(body, ResponseBody::empty());
                let _ = panics::caught(move || drop(broken));
                send.stop_stream(Code::H3_INTERNAL_ERROR);
                ledger.outcome = Outcome::Reset(Code::H3_INTERNAL_ERROR.value());
                return Ok(false);
            }
        };
        match frame.into_data() {
            Ok(data) => {
                let n = data.len() as u64;
                send.send_data(data).await?;
                ledger.sent += n;
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    send.send_trailers(trailers).await?;
                    return Ok(true);
                }
            }
        }
    }
    Ok(true)
}
