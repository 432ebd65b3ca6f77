//! One HTTP/3 request of the client: sent (with its `POST` body), its response checked and
//! its body verified or saved.

use std::cell::{Cell, RefCell};

use bytes::{Buf as _, Bytes};
use neqo_protocols::{
    hq::{self, Target},
    pattern,
};

use super::{ConnState, Context};
use crate::client::output::{Output, Sink, Written};
use neqo_h3::Opener;

/// How a request ended well.
pub(super) enum Done {
    /// Its response whole, and verified.
    Whole,
    /// Given up on by `--cancel-after`.
    Cancelled,
}

/// How a request failed.
pub(super) enum Failure {
    /// Refused unprocessed after the server's GOAWAY (RFC 9114 section 5.2).
    Rejected,
    Other(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Self::Other(s)
    }
}

impl From<h3::error::StreamError> for Failure {
    fn from(e: h3::error::StreamError) -> Self {
        match e {
            // The peer's GOAWAY came before the request was sent, or the request's ID was
            // at or past the one it named.
            h3::error::StreamError::RemoteClosing { .. } => Self::Rejected,
            h3::error::StreamError::RemoteTerminate { code, .. }
                if code == h3::error::Code::H3_REQUEST_REJECTED =>
            {
                Self::Rejected
            }
            e => Self::Other(e.to_string()),
        }
    }
}

pub(super) async fn request(
    mut send: h3::client::SendRequest<Opener, Bytes>,
    ctx: &Context,
    state: &RefCell<ConnState>,
    path: &str,
    sent: &Cell<bool>,
) -> Result<Done, Failure> {
    let upload = ctx.upload;
    let expected = match hq::target(path) {
        Ok(Target::Generated(n)) if upload == 0 => Some(n),
        _ => None,
    };
    let method = if upload > 0 {
        http::Method::POST
    } else {
        http::Method::GET
    };
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("https://{}{path}", ctx.authority));
    if upload > 0 {
        request = request.header("content-length", upload);
    }
    let request = request.body(()).map_err(|e| format!("bad request: {e}"))?;
    let mut stream = send.send_request(request).await?;
    // Sent: from now on the server may have processed it. The count goes down only when
    // the request ends here, not when its task is dropped with a connection that ended
    // first, so that such a request counts as failed, never as refused unprocessed.
    sent.set(true);
    state.borrow_mut().in_flight += 1;
    // A POST's body: the pattern, a chunk at a time.
    let mut sent = 0;
    let mut wanted = true;
    while wanted && sent < upload {
        let chunk = pattern::chunk(sent, upload - sent);
        let n = chunk.len() as u64;
        wanted = neqo_h3::request_write(stream.send_data(chunk).await)?;
        if wanted {
            sent += n;
            state.borrow_mut().bytes += n;
            ctx.results.borrow_mut().sent += n;
        }
    }
    if wanted {
        neqo_h3::request_write(stream.finish().await)?;
    }
    let response = stream.recv_response().await?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("status {}", response.status()).into());
    }
    let mut sink = ctx.sink(path).map(Writer::new);
    let mut got = 0u64;
    // A POST is answered with the count of its body's bytes.
    let mut answer = Vec::new();
    // Once a response has begun, a reset is a cut response whatever its code says.
    while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
        let data = chunk.copy_to_bytes(chunk.remaining());
        if let Some(n) = expected {
            if got + data.len() as u64 > n {
                return Err(format!("longer than the {n} bytes asked for").into());
            }
            if let Some(at) = pattern::first_mismatch(got, &data) {
                return Err(format!("byte {at} is wrong").into());
            }
        }
        if upload > 0 && answer.len() + data.len() <= 20 {
            answer.extend_from_slice(&data);
        }
        got += data.len() as u64;
        state.borrow_mut().bytes += data.len() as u64;
        ctx.results.borrow_mut().bytes += data.len() as u64;
        if let Some(w) = &mut sink {
            w.write(&data).await?;
        }
        if ctx.cancel_after.is_some_and(|limit| got >= limit) {
            stream.stop_sending(h3::error::Code::H3_REQUEST_CANCELLED);
            return Ok(Done::Cancelled);
        }
    }
    if let Some(n) = expected
        && got != n
    {
        return Err(format!("{got} of {n} bytes").into());
    }
    if upload > 0 && answer != upload.to_string().as_bytes() {
        return Err(format!(
            "the server counted {:?} of the {upload} bytes posted",
            String::from_utf8_lossy(&answer)
        )
        .into());
    }
    if let Some(w) = sink {
        w.close().await?;
    }
    Ok(Done::Whole)
}

/// A saved body on its way out: bytes collect in an [`Output`], written on tokio's blocking pool
/// while the next buffer fills, as `hq-interop`'s saved bodies are; the request reads no more
/// of its stream while a write is in flight and the next buffer is full, so a slow disk holds
/// the server back through flow control. (One write per received chunk, awaited before the
/// next, moved a body at a third of the speed.)
struct Writer {
    out: Output,
    writing: Option<tokio::task::JoinHandle<std::io::Result<Written>>>,
}

impl Writer {
    fn new(sink: Sink) -> Self {
        Self {
            out: Output::new(sink),
            writing: None,
        }
    }

    /// Waits for the write in flight, if any.
    async fn settle(&mut self) -> Result<(), String> {
        if let Some(w) = self.writing.take() {
            let done = w
                .await
                .map_err(|e| format!("writing {}: {e}", self.out.sink()))?
                .map_err(|e| format!("writing {}: {e}", self.out.sink()))?;
            self.out.written(done);
        }
        Ok(())
    }

    /// Starts the next write if one is due and none is in flight.
    fn start(&mut self) {
        if self.writing.is_none()
            && let Some(job) = self.out.next_write()
        {
            self.writing = Some(tokio::task::spawn_blocking(job));
        }
    }

    async fn write(&mut self, data: &[u8]) -> Result<(), String> {
        if self.out.room() < data.len() {
            self.settle().await?;
            self.start();
        }
        self.out.push(data);
        self.start();
        Ok(())
    }

    /// The rest, and the file closed (an empty body still makes its file).
    async fn close(mut self) -> Result<(), String> {
        self.out.end();
        loop {
            self.settle().await?;
            if self.out.done() {
                return Ok(());
            }
            self.start();
        }
    }
}
