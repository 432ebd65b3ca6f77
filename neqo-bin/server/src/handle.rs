//! [`ServerHandle`]: a server on its own thread, for tests and benches.

use std::{net::SocketAddr, sync::Arc};

use rustls::pki_types::CertificateDer;

use super::{Server, ServerConfig, ServerError, ServerReport, ledger::Ledger};

/// A server on its own thread with its own current-thread runtime, for tests and benches.
#[derive(Debug)]
pub struct ServerHandle {
    addrs: Vec<SocketAddr>,
    certificate: Vec<CertificateDer<'static>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<ServerReport, ServerError>>>,
    ledger: Arc<Ledger>,
    metrics: Option<SocketAddr>,
}

impl ServerHandle {
    /// Binds and starts serving; returns once the sockets are bound.
    ///
    /// # Errors
    /// As [`Server::bind`].
    pub fn start(config: ServerConfig) -> Result<Self, ServerError> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("neqo-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| ServerError::Io {
                        what: "the server's runtime",
                        source,
                    })?;
                rt.block_on(async move {
                    let server = match Server::bind(config) {
                        Ok(s) => s,
                        Err(e) => {
                            // The thread's result is not read: the error goes to `start`.
                            let _ = ready_tx.send(Err(e));
                            return Ok(ServerReport::default());
                        }
                    };
                    let _ = ready_tx.send(Ok((
                        server.local_addrs(),
                        server.certificate(),
                        server.ledger(),
                        server.metrics_addr(),
                    )));
                    server
                        .run(async move {
                            let _ = stopped.await;
                        })
                        .await
                })
            })
            .map_err(|source| ServerError::Io {
                what: "the server's thread",
                source,
            })?;
        match ready_rx.recv() {
            Ok(Ok((addrs, certificate, ledger, metrics))) => Ok(Self {
                addrs,
                certificate,
                stop: Some(stop),
                thread: Some(thread),
                ledger,
                metrics,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(ServerError::Workers {
                    failures: vec!["the server's thread died while starting".to_owned()],
                }),
            },
        }
    }

    /// Where the metrics endpoint listens, with [`ServerConfig::metrics`].
    #[must_use]
    pub const fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// The first bound address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every bound address.
    #[must_use]
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The server's certificate chain (to trust it in a client).
    #[must_use]
    pub fn certificate(&self) -> &[CertificateDer<'static>] {
        &self.certificate
    }

    /// Connections open now over all workers (accepted, not yet drained; per-connection
    /// state included).
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.ledger.open()
    }

    /// Stops the server and returns its report.
    ///
    /// # Errors
    /// What the server failed with.
    pub fn stop(mut self) -> Result<ServerReport, ServerError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<ServerReport, ServerError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(ServerError::Workers {
                failures: vec!["the server's thread panicked".to_owned()],
            }),
            None => Ok(ServerReport::default()),
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
