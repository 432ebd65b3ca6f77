//! What can go wrong making the TLS and transport configs: each case names what it was
//! doing and keeps the cause as its `source`.

use std::{io, path::PathBuf};

/// A TLS or transport setting that cannot be made into a config.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// rcgen could not make the self-signed certificate.
    #[error("generating a self-signed certificate")]
    SelfSigned(#[source] rcgen::Error),
    /// A PEM file that cannot be read or holds no item of the kind wanted.
    #[error("cannot read {what} {}: {reason}", path.display())]
    Pem {
        /// "certificate" or "private key".
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// A certificate file without a certificate in it.
    #[error("no certificate in {}", .0.display())]
    NoCertificate(PathBuf),
    /// An empty list of cipher suites.
    #[error("no cipher suite to {0}")]
    NoCipherSuite(&'static str),
    /// A server given no certificate to serve.
    #[error("no certificate to serve")]
    NoIdentity,
    /// The key does not belong to the certificate, or rustls does not support it.
    #[error("certificate and key do not fit together")]
    KeyMismatch(#[source] rustls::Error),
    /// rustls refused a setting (a protocol version, a CA certificate).
    #[error("{0}")]
    Tls(&'static str, #[source] rustls::Error),
    /// The certificate verifier could not be built from the trusted certificates.
    #[error("building the certificate verifier")]
    Verifier(#[source] rustls::client::VerifierBuilderError),
    /// The crypto provider has no cipher suite QUIC's Initial packets can use.
    #[error("no cipher suite for QUIC's Initial packets")]
    NoInitialSuite,
    /// An idle timeout beyond what QUIC can carry.
    #[error("idle timeout out of range")]
    IdleTimeout,
    /// A receive window beyond what QUIC can carry.
    #[error("receive window too large")]
    ReceiveWindow,
    /// A qlog directory or file that cannot be created.
    #[error("creating {}", .0.display())]
    Qlog(PathBuf, #[source] io::Error),
}
