//! An HTTP/3 client for tests on the in-memory network: one connection, its requests all at
//! once, each response kept whole (status, the headers tests look at, the body), or cancelled
//! once its headers arrive.

use std::{cell::RefCell, net::SocketAddr, rc::Rc, sync::Arc, time::Instant};

use bytes::{Buf as _, Bytes};
use neqo_driver::{
    Application, Driver, TransportOptions,
    tls::{self, Trust},
};
use neqo_protocols::{ALPN_H3, pattern};
use quinn_proto::{ConnectionHandle, Event};

use super::{Engine, UNI_STREAMS};

/// A client's QUIC configuration for HTTP/3: ALPN `h3`, any certificate, room for the
/// server's control and QPACK streams.
pub fn config() -> quinn_proto::ClientConfig {
    config_with(|_| {})
}

/// As [`config`], with each stream's receive window `window` bytes: a response larger than
/// that cannot have been sent whole before a cancel reaches the server.
pub fn config_with_stream_window(window: u32) -> quinn_proto::ClientConfig {
    config_with(|t| {
        t.stream_receive_window(window.into());
    })
}

fn config_with(
    adjust: impl FnOnce(&mut quinn_proto::TransportConfig),
) -> quinn_proto::ClientConfig {
    let mut config =
        quinn_proto::ClientConfig::new(tls::client_crypto(&Trust::Insecure, ALPN_H3).unwrap());
    let mut transport = TransportOptions {
        uni_streams: UNI_STREAMS,
        ..TransportOptions::default()
    }
    .transport("client")
    .unwrap();
    adjust(&mut transport);
    config.transport_config(Arc::new(transport));
    config
}

/// What a request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
    /// The response's status.
    pub status: u16,
    /// The response's `content-length`, as sent.
    pub content_length: Option<String>,
    /// The response's `content-type`, as sent.
    pub content_type: Option<String>,
    /// The response's `location`, as sent.
    pub location: Option<String>,
    /// The response's body.
    pub body: Vec<u8>,
}

impl Got {
    /// A 200 with `body` and its length, `content_type` if given.
    pub fn ok(method: &str, path: &str, body: Vec<u8>, content_type: Option<&str>) -> Self {
        Self {
            method: method.into(),
            path: path.into(),
            status: 200,
            content_length: Some(body.len().to_string()),
            content_type: content_type.map(Into::into),
            location: None,
            body,
        }
    }

    /// An error status with an empty body.
    pub fn status(method: &str, path: &str, status: u16) -> Self {
        Self {
            method: method.into(),
            path: path.into(),
            status,
            content_length: Some("0".into()),
            content_type: None,
            location: None,
            body: Vec::new(),
        }
    }

    /// A `301 Moved Permanently` to `location`.
    pub fn moved(method: &str, path: &str, location: &str) -> Self {
        Self {
            location: Some(location.into()),
            ..Self::status(method, path, 301)
        }
    }
}

/// How a request is cancelled once its response's headers arrive (RFC 9114 section 4.1.1),
/// with `H3_REQUEST_CANCELLED`: the ways browsers give up on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// `STOP_SENDING` on the response (the request was finished).
    StopSending,
    /// `RESET_STREAM` on the request, never finished; the stream is then dropped.
    Reset,
    /// Both at once.
    Both,
}

async fn request(
    mut send: h3::client::SendRequest<super::handles::Opener, Bytes>,
    method: String,
    path: String,
    cancel: Option<Cancel>,
    upload: u64,
) -> Result<Got, h3::error::StreamError> {
    let req = http::Request::builder()
        .method(method.as_str())
        .uri(format!("https://localhost{path}"))
        .body(())
        .unwrap();
    let mut s = send.send_request(req).await?;
    let mut wanted = true;
    if method == "POST" {
        let mut at = 0;
        while wanted && at < upload {
            let chunk = neqo_protocols::pattern::chunk(at, upload - at);
            at += chunk.len() as u64;
            wanted = super::request_write(s.send_data(chunk).await)?;
        }
    }
    if wanted && !matches!(cancel, Some(Cancel::Reset | Cancel::Both)) {
        super::request_write(s.finish().await)?;
    }
    let resp = s.recv_response().await?;
    let header = |name| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let mut body = Vec::new();
    if let Some(how) = cancel {
        let code = h3::error::Code::H3_REQUEST_CANCELLED;
        if how != Cancel::Reset {
            s.stop_sending(code);
        }
        if how != Cancel::StopSending {
            s.stop_stream(code);
        }
        // Dropped with its body unread.
    } else {
        while let Some(mut chunk) = s.recv_data().await? {
            while chunk.has_remaining() {
                let c = chunk.chunk();
                body.extend_from_slice(c);
                let n = c.len();
                chunk.advance(n);
            }
        }
    }
    Ok(Got {
        method,
        path,
        status: resp.status().as_u16(),
        content_length: header("content-length"),
        content_type: header("content-type"),
        location: header("location"),
        body,
    })
}

/// One connection to `server` making `requests` (method, path) at once (or one after
/// another, [`Client::sequential`]); closes once every one has its answer (or error).
#[expect(
    missing_debug_implementations,
    reason = "quinn-proto's ClientConfig is not Debug"
)]
pub struct Client {
    server: SocketAddr,
    config: Option<quinn_proto::ClientConfig>,
    requests: Vec<(String, String)>,
    /// How the first `cancelled.1` requests are cancelled.
    cancelled: Option<(Cancel, usize)>,
    /// Leave the connection open once every request is answered, for the server to close.
    stay_open: bool,
    /// Make one more request (`GET /late`) after the last one's answer.
    late: bool,
    /// Each request once the one before it is answered.
    sequential: bool,
    /// The body of each `POST`: this many pattern bytes.
    upload: u64,
    ch: Option<ConnectionHandle>,
    /// The connection's HTTP/3.
    pub engine: Engine,
    /// Each request's answer, or its error.
    pub got: Rc<RefCell<Vec<Result<Got, String>>>>,
    closed: bool,
    /// How the connection ended, when not closed by this client.
    pub lost: Option<quinn_proto::ConnectionError>,
    /// PING frames it had sent when it closed the connection.
    pub pings_sent: u64,
    drained: bool,
}

impl Client {
    /// A client that connects to `server` and makes `requests` (method, path).
    pub fn new(
        server: SocketAddr,
        config: quinn_proto::ClientConfig,
        requests: &[(&str, &str)],
    ) -> Self {
        Self {
            server,
            config: Some(config),
            requests: requests
                .iter()
                .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
                .collect(),
            cancelled: None,
            stay_open: false,
            late: false,
            sequential: false,
            upload: 0,
            ch: None,
            engine: Engine::new(),
            got: Rc::default(),
            closed: false,
            lost: None,
            pings_sent: 0,
            drained: false,
        }
    }

    /// Cancels the first `n` requests as `how` says once their headers arrive (they are
    /// answered with an empty body).
    #[must_use]
    pub const fn cancelling(mut self, how: Cancel, n: usize) -> Self {
        self.cancelled = Some((how, n));
        self
    }

    /// Leaves the connection open once every request is answered, for the server to close,
    /// and makes one more request (`GET /late`) after the last one's answer.
    #[must_use]
    pub const fn staying_open(mut self) -> Self {
        self.stay_open = true;
        self.late = true;
        self
    }

    /// Leaves the connection open once every request is answered, for the server to close.
    #[must_use]
    pub const fn holding_open(mut self) -> Self {
        self.stay_open = true;
        self
    }

    /// Makes each request once the one before it is answered, as a page's script or a
    /// load client at concurrency 1 does.
    #[must_use]
    pub const fn sequential(mut self) -> Self {
        self.sequential = true;
        self
    }

    /// A task for each of `requests` at once on `spawner`, the first `cancelled.1` cancelled as
    /// `cancelled.0` says, the last one followed by `GET /late` when `late`; their answers
    /// into `got`.
    fn spawn_each(
        spawner: &super::tasks::Spawner,
        send: &h3::client::SendRequest<super::handles::Opener, Bytes>,
        requests: Vec<(String, String)>,
        got: &Rc<RefCell<Vec<Result<Got, String>>>>,
        (cancelled, late, upload): (Option<(Cancel, usize)>, bool, u64),
    ) {
        let last = requests.len().saturating_sub(1);
        for (i, (method, path)) in requests.into_iter().enumerate() {
            let (send, got) = (send.clone(), Rc::clone(got));
            let cancel = cancelled.and_then(|(how, n)| (i < n).then_some(how));
            let late = (late && i == last).then(|| send.clone());
            spawner.spawn(async move {
                let r = request(send, method, path, cancel, upload)
                    .await
                    .map_err(|e| e.to_string());
                got.borrow_mut().push(r);
                if let Some(late) = late {
                    let r = request(late, "GET".into(), "/late".into(), None, 0)
                        .await
                        .map_err(|e| e.to_string());
                    got.borrow_mut().push(r);
                }
            });
        }
    }

    /// Sends `n` pattern bytes as the body of each `POST`.
    #[must_use]
    pub const fn posting(mut self, n: u64) -> Self {
        self.upload = n;
        self
    }

    /// Its connection, once opened.
    pub const fn handle(&self) -> Option<ConnectionHandle> {
        self.ch
    }

    /// Whether some request has no answer (or error) yet.
    pub fn waiting(&self) -> bool {
        self.got.borrow().len() < self.requests.len() + usize::from(self.late)
    }

    /// The answers, ordered by (path, method).
    pub fn answers(&self) -> Vec<Result<Got, String>> {
        let mut got = self.got.borrow().clone();
        got.sort_by_key(|g| g.as_ref().map(|g| (g.path.clone(), g.method.clone())).ok());
        got
    }
}

impl Application for Client {
    fn event(
        &mut self,
        _: ConnectionHandle,
        conn: &mut quinn_proto::Connection,
        ev: Event,
        now: Instant,
    ) {
        if let Event::ConnectionLost { reason } = &ev {
            self.lost = Some(reason.clone());
        }
        self.engine.on_event(conn, &ev, now);
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        if let Some(config) = self.config.take() {
            self.ch = Some(
                driver
                    .connect(0, config, self.server, "localhost", now)
                    .unwrap(),
            );
            let (t, spawner) = (self.engine.transport(), self.engine.spawner());
            let (requests, got) = (self.requests.clone(), Rc::clone(&self.got));
            let (cancelled, stay_open, late, sequential, upload) = (
                self.cancelled,
                self.stay_open,
                self.late,
                self.sequential,
                self.upload,
            );
            self.engine.spawner().spawn(async move {
                let (mut conn, send) = match h3::client::new(t).await {
                    Ok(c) => c,
                    Err(e) => {
                        got.borrow_mut().push(Err(format!("client: {e}")));
                        return;
                    }
                };
                // `h3` closes the connection once its last request sender is dropped: one
                // kept keeps it open for the server to close.
                let keep = stay_open.then(|| send.clone());
                if sequential {
                    // One task for them all, beside this one driving the connection.
                    let (sender, got) = (send.clone(), Rc::clone(&got));
                    spawner.spawn(async move {
                        for (method, path) in requests {
                            let r = request(sender.clone(), method, path, None, upload)
                                .await
                                .map_err(|e| e.to_string());
                            got.borrow_mut().push(r);
                        }
                    });
                } else {
                    Self::spawn_each(&spawner, &send, requests, &got, (cancelled, late, upload));
                }
                drop(send);
                let _ = std::future::poll_fn(|cx| conn.poll_close(cx)).await;
                drop(keep);
            });
        }
        let ch = self.ch?;
        let engine = &mut self.engine;
        driver.update(ch, |c| engine.drive(c, now));
        if !self.closed && !self.stay_open && self.got.borrow().len() >= self.requests.len() {
            self.closed = true;
            let pings = &mut self.pings_sent;
            driver.update(ch, |c| {
                *pings = c.stats().frame_tx.ping;
                c.close(now, 0x100u32.into(), Bytes::from_static(b"done"));
            });
        }
        self.engine.pending().then_some(now)
    }

    fn drained(&mut self, _: ConnectionHandle, _: &quinn_proto::Connection) {
        self.drained = true;
    }

    fn done(&self) -> bool {
        self.drained
    }
}

/// `n` pattern bytes, as `/n` is answered.
#[must_use]
pub fn pattern_body(n: u64) -> Vec<u8> {
    (0..n).map(pattern::byte_at).collect()
}
