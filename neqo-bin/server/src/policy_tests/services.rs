//! An HTTP/3 service behind the server, on a worker as the server builds it: answering JSON,
//! echoing uploads and failing on purpose, every body byte-exact; requests cancelled, and
//! what they held freed; GOAWAY at shutdown. Raw-QUIC applications: `quic_apps`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use neqo_h3::testing::{self, Cancel, Client, Got, pattern_body};
use neqo_protocols::pattern;
use quinn_proto::{ConnectionError, VarInt};

use super::{
    SERVER,
    http3::{exchange, exchange_with},
};
use crate::{BoxError, RequestBody, ResponseBody, ServerConfig, service_fn};

/// `n` pattern bytes, produced 16 KiB at a time as the stream takes them.
struct PatternBody {
    at: u64,
    n: u64,
    /// Told how far it got.
    produced: Option<Arc<AtomicU64>>,
}

impl http_body::Body for PatternBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        if self.at == self.n {
            return std::task::Poll::Ready(None);
        }
        let chunk = pattern::chunk(self.at, (self.n - self.at).min(16 << 10));
        self.at += chunk.len() as u64;
        if let Some(p) = &self.produced {
            p.store(self.at, Ordering::Relaxed);
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(chunk))))
    }
}

fn streamed_pattern(n: u64) -> ResponseBody {
    ResponseBody::new(PatternBody {
        at: 0,
        n,
        produced: None,
    })
}

/// The test service: `GET /hello` JSON, `POST /echo` the request body streamed back,
/// `GET /N` N streamed pattern bytes, `GET /fail` an error (500), anything else 404.
async fn routes(req: Request<RequestBody>) -> Result<Response<ResponseBody>, BoxError> {
    let path = req.uri().path().to_owned();
    Ok(match (req.method().clone(), path.as_str()) {
        (Method::GET | Method::HEAD, "/hello") => Response::builder()
            .header("content-type", "application/json")
            .body(ResponseBody::from(r#"{"hello":"world"}"#))?,
        (Method::POST, "/echo") => Response::builder()
            .header("content-type", "application/octet-stream")
            .body(ResponseBody::from(req.into_body()))?,
        (Method::GET, "/fail") => return Err("failed on purpose".into()),
        (Method::GET, n) if n[1..].parse::<u64>().is_ok() => Response::builder()
            .header("content-type", "application/octet-stream")
            .body(streamed_pattern(n[1..].parse()?))?,
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(ResponseBody::empty())?,
    })
}

fn service_config() -> ServerConfig {
    let mut config = ServerConfig::http3(service_fn(routes));
    config.listen = vec![SERVER];
    config
}

#[test]
fn a_service_answers_json_echoes_uploads_and_fails_with_500() {
    let c = Client::new(
        SERVER,
        testing::config(),
        &[
            ("GET", "/hello"),
            ("HEAD", "/hello"),
            ("POST", "/echo"),
            ("GET", "/300000"),
            ("GET", "/fail"),
            ("GET", "/missing"),
        ],
    )
    .posting(250_000);
    let (report, c) = exchange(service_config(), c);
    let answers: Vec<Got> = c.answers().into_iter().map(|g| g.unwrap()).collect();
    let hello = br#"{"hello":"world"}"#.to_vec();
    let mut json = Got::ok("GET", "/hello", hello.clone(), Some("application/json"));
    json.content_length = Some(hello.len().to_string());
    let mut head = Got::ok("HEAD", "/hello", Vec::new(), Some("application/json"));
    head.content_length = None;
    let mut want = vec![
        json,
        head,
        Got::ok(
            "POST",
            "/echo",
            pattern_body(250_000),
            Some("application/octet-stream"),
        ),
        Got::ok(
            "GET",
            "/300000",
            pattern_body(300_000),
            Some("application/octet-stream"),
        ),
        Got::status("GET", "/fail", 500),
        Got::status("GET", "/missing", 404),
    ];
    // Bodies of a known length say so; streamed ones (the echo, the pattern) do not.
    for g in &mut want {
        g.content_length = match g.path.as_str() {
            "/hello" if g.method == "GET" => Some(hello.len().to_string()),
            "/fail" | "/missing" => Some("0".to_owned()),
            _ => None,
        };
    }
    want.sort_by_key(|g| (g.path.clone(), g.method.clone()));
    assert_eq!(answers.len(), want.len());
    for (a, w) in answers.iter().zip(&want) {
        assert_eq!(
            (
                &a.method,
                &a.path,
                a.status,
                &a.content_length,
                &a.content_type
            ),
            (
                &w.method,
                &w.path,
                w.status,
                &w.content_length,
                &w.content_type
            )
        );
        assert!(
            a.body == w.body,
            "{} {}: {} bytes",
            a.method,
            a.path,
            a.body.len()
        );
    }
    let h = report.http3;
    assert_eq!(
        (h.responses, h.error_statuses, h.cancelled, h.uploaded_bytes),
        (4, 2, 0, 250_000),
        "{h:?}"
    );
    assert_eq!(
        h.body_bytes,
        hello.len() as u64 + 250_000 + 300_000,
        "{h:?}"
    );
    assert_eq!(report.requests, 4);
    assert_eq!(report.refused_requests, 2);
}

/// 300 requests one after another on one connection, then 200 cancelled by the client once
/// their headers arrive: every request's task and stream is freed, so that after them the
/// connection keeps only its accepting task.
#[test]
fn service_requests_free_what_they_held_answered_or_cancelled() {
    let requests = vec![("GET", "/hello"); 300];
    let c = Client::new(SERVER, testing::config(), &requests)
        .sequential()
        .holding_open();
    let mut kept = None;
    let (report, c) = exchange_with(service_config(), c, |_, app, _| {
        if app.report.http3.responses == 300 {
            kept.get_or_insert(app.services_kept());
        }
    });
    assert!(
        c.answers()
            .iter()
            .all(|g| g.as_ref().is_ok_and(|g| g.status == 200))
    );
    assert_eq!(report.http3.responses, 300);
    assert_eq!(kept, Some((0, 1)), "requests under way, tasks");

    const CANCELLED: usize = 200;
    let mut requests = vec![("GET", "/1000000"); CANCELLED];
    requests.push(("GET", "/1000"));
    let c = Client::new(
        SERVER,
        testing::config_with_stream_window(64 << 10),
        &requests,
    )
    .cancelling(Cancel::StopSending, CANCELLED)
    .holding_open();
    let mut kept = None;
    let (report, c) = exchange_with(service_config(), c, |_, app, _| {
        let h = app.report.http3;
        if h.cancelled == CANCELLED as u64 && h.responses == 1 {
            kept.get_or_insert(app.services_kept());
        }
    });
    let answers = c.answers();
    assert_eq!(answers.len(), CANCELLED + 1);
    let whole: Vec<_> = answers
        .iter()
        .filter_map(|g| g.as_ref().ok().filter(|g| g.path == "/1000"))
        .collect();
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0].body, pattern_body(1000));
    let h = report.http3;
    assert_eq!((h.responses, h.cancelled), (1, CANCELLED as u64), "{h:?}");
    assert_eq!(kept, Some((0, 1)), "requests under way, tasks");
}

/// RFC 9114 section 5.2 for a service: at shutdown the connection sends GOAWAY; the response
/// under way (3 MB, streamed by the service) arrives whole, a request sent later is refused
/// unprocessed (`H3_REQUEST_REJECTED`), and the server closes with `H3_NO_ERROR` once the
/// response is acknowledged.
#[test]
fn a_shutdown_lets_a_service_response_finish_and_rejects_later_requests() {
    let produced = Arc::new(AtomicU64::new(0));
    let p = Arc::clone(&produced);
    let service = service_fn(move |_| {
        let produced = Some(Arc::clone(&p));
        async move {
            Response::new(ResponseBody::new(PatternBody {
                at: 0,
                n: 3_000_000,
                produced,
            }))
        }
    });
    let mut config = ServerConfig::http3(service);
    config.listen = vec![SERVER];
    config.driver = neqo_driver::DriverConfig::default().with_drain(Duration::from_secs(2));
    let c = Client::new(SERVER, testing::config(), &[("GET", "/3000000")]).staying_open();
    let mut shut = false;
    let (report, c) = exchange_with(config, c, |server, app, now| {
        // A third of the body handed to the stream: the rest is still to come.
        if !shut && produced.load(Ordering::Relaxed) >= 1_000_000 {
            shut = true;
            server.shut_down(app, now).unwrap();
        }
    });
    assert!(shut, "the response started");
    let got = c.got.borrow().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0].as_ref().map(|g| g.body.len()),
        Ok(3_000_000),
        "the response under way"
    );
    assert_eq!(got[0].as_ref().unwrap().body, pattern_body(3_000_000));
    assert_eq!(got[1], Err("Remote reset: H3_REQUEST_REJECTED".to_owned()));
    match &c.lost {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code, VarInt::from_u32(0x100), "H3_NO_ERROR");
        }
        other => panic!("closed by the server with H3_NO_ERROR, not {other:?}"),
    }
    let h = report.http3;
    assert_eq!((h.responses, h.cancelled, h.rejected), (1, 0, 1), "{h:?}");
}

/// Panics on purpose: in its call (`/call`), in its future once it has yielded
/// (`/future`), in its response body once a chunk went (`/body`); answers `/ok`.
struct Panicking;

impl crate::Service for Panicking {
    fn call(&self, req: Request<RequestBody>) -> crate::ServiceFuture {
        match req.uri().path() {
            "/call" => panic!("panics in call, on purpose"),
            "/future" => Box::pin(async {
                let mut yielded = false;
                std::future::poll_fn(move |cx| {
                    if yielded {
                        return std::task::Poll::Ready(());
                    }
                    yielded = true;
                    cx.waker().wake_by_ref();
                    std::task::Poll::Pending
                })
                .await;
                panic!("panics in the future, on purpose")
            }),
            "/body" => {
                Box::pin(async { Response::new(ResponseBody::new(PanickingBody { sent: false })) })
            }
            _ => Box::pin(async { Response::new(ResponseBody::from("fine")) }),
        }
    }
}

/// A chunk, then a panic.
struct PanickingBody {
    sent: bool,
}

impl http_body::Body for PanickingBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        assert!(!self.sent, "the body panics in its second poll, on purpose");
        self.sent = true;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            b"first chunk",
        )))))
    }
}

/// A panic in a service costs its request, as in hyper and axum: a panic before the head
/// is answered 500, one in the body resets the stream with `H3_INTERNAL_ERROR` (the client
/// never takes a cut body for whole), each is counted; the other requests on the same
/// connection, before and after, are answered, and the worker serves on.
#[test]
fn a_service_that_panics_costs_one_request_and_the_server_serves_on() {
    let mut config = ServerConfig::http3(Panicking);
    config.listen = vec![SERVER];
    let requests = [
        ("GET", "/ok"),
        ("GET", "/call"),
        ("GET", "/future"),
        ("GET", "/body"),
        ("GET", "/ok2"),
    ];
    let c = Client::new(SERVER, testing::config(), &requests).sequential();
    let (report, c) = exchange(config, c);
    let answers = c.answers();
    assert_eq!(answers.len(), 5, "{answers:?}");
    let mut fine = Got::ok("GET", "/ok", b"fine".to_vec(), None);
    let oks: Vec<Got> = answers.iter().filter_map(|a| a.clone().ok()).collect();
    let errs: Vec<String> = answers.iter().filter_map(|a| a.clone().err()).collect();
    let mut want = vec![
        Got::status("GET", "/call", 500),
        Got::status("GET", "/future", 500),
        fine.clone(),
    ];
    fine.path = "/ok2".into();
    want.push(fine);
    let mut oks = oks;
    oks.sort_by_key(|g| g.path.clone());
    assert_eq!(oks, want);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains("H3_INTERNAL_ERROR"), "{errs:?}");
    assert_eq!(report.app_panics, 3);
    let h = report.http3;
    assert_eq!(
        (h.responses, h.error_statuses, h.cancelled),
        (2, 2, 1),
        "{h:?}"
    );
}
