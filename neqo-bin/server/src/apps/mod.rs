//! Applications of your own behind the server, each on an ALPN of its choosing: an HTTP/3
//! [`Service`] (requests and responses on the `http` crate's types, bodies streamed through
//! `http-body`), or a raw-QUIC [`QuicApp`] that makes a [`QuicSession`] per connection and
//! reads and writes quinn-proto's streams itself. Either gets what the built-in file server
//! gets: the workers and their steering, Retry and admission, the receive budget, the
//! metrics and the drain at shutdown.
//!
//! A connection is the built-in server's until its TLS handshake says which ALPN it chose,
//! before any of its streams can open; then it goes to that ALPN's application.

mod files;
mod http3;
mod panics;
mod quic;
mod request;
mod service;

use std::{fmt, sync::Arc};

pub use self::{
    files::Files,
    quic::{QuicApp, QuicSession},
    service::{
        BoxError, IntoResponse, RequestBody, ResponseBody, Service, ServiceFn, ServiceFuture,
        service_fn,
    },
};
pub(crate) use self::{http3::Services, quic::Sessions};

/// What serves the connections of one ALPN.
#[derive(Clone)]
#[non_exhaustive]
pub enum App {
    /// HTTP/3 (RFC 9114) with this service answering every request.
    Http3(Arc<dyn Service>),
    /// A protocol of your own, a session per connection.
    Quic(Arc<dyn QuicApp>),
}

impl App {
    /// `service` over HTTP/3.
    pub fn http3(service: impl Service) -> Self {
        Self::Http3(Arc::new(service))
    }

    /// `app`'s sessions on raw QUIC.
    pub fn quic(app: impl QuicApp) -> Self {
        Self::Quic(Arc::new(app))
    }

    /// Whether it speaks HTTP/3, and so needs the peer's control and QPACK streams.
    pub(crate) const fn is_http3(&self) -> bool {
        matches!(self, Self::Http3(_))
    }
}

impl fmt::Debug for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Http3(_) => "App::Http3",
            Self::Quic(_) => "App::Quic",
        })
    }
}

/// The applications a server has, by ALPN; an ALPN without one is served by the built-in file
/// server if it is one of its own (`hq-interop`, `perf`, `h3`).
#[derive(Clone, Debug, Default)]
pub struct Apps(Vec<(String, App)>);

impl Apps {
    /// Serves `alpn` with `app`, in place of what served it.
    pub fn insert(&mut self, alpn: impl Into<String>, app: App) {
        let alpn = alpn.into();
        self.0.retain(|(a, _)| *a != alpn);
        self.0.push((alpn, app));
    }

    /// The application of `alpn`, if it has one of yours.
    #[must_use]
    pub fn get(&self, alpn: &str) -> Option<&App> {
        self.0.iter().find(|(a, _)| a == alpn).map(|(_, app)| app)
    }

    /// Each ALPN and its application.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &App)> {
        self.0.iter().map(|(a, app)| (a.as_str(), app))
    }

    /// Whether there is none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
