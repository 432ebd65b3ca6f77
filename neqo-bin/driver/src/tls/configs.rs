//! rustls configs for QUIC and for TLS over TCP, server and client: the two transports share
//! provider, protocol version, certificate handling and key logging, so that the TCP
//! baseline measures the same TLS as QUIC. A client writes its secrets where `SSLKEYLOGFILE`
//! says; a server only when told to ([`Secrets::Logged`]), never because the variable
//! happens to be set in its environment.

use std::sync::Arc;

use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::{client::danger::ServerCertVerifier, pki_types::CertificateDer};

use super::counters::{CountingServer, CountingStore};
use super::{
    Certificates, CipherSuite, Identity,
    suites::provider_with,
    verify::{CountingVerifier, NoVerify},
};
use crate::ConfigError;

/// Whether a server writes its TLS secrets out, for a packet capture to be decrypted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Secrets {
    /// Never written.
    #[default]
    Kept,
    /// Written to the file `SSLKEYLOGFILE` names.
    Logged,
}

/// SSLKEYLOGFILE, when set.
fn key_log() -> Option<Arc<dyn rustls::KeyLog>> {
    std::env::var_os("SSLKEYLOGFILE")
        .map(|_| Arc::new(rustls::KeyLogFile::new()) as Arc<dyn rustls::KeyLog>)
}

/// A TLS 1.3 server config offering `alpns` and accepting `suites`, serving `certs`,
/// writing its secrets as `secrets` says: what the QUIC server and a TLS-over-TCP server
/// share.
fn server_tls(
    certs: &Certificates,
    alpns: &[String],
    suites: &[CipherSuite],
    secrets: Secrets,
) -> Result<rustls::ServerConfig, ConfigError> {
    if suites.is_empty() {
        return Err(ConfigError::NoCipherSuite("accept"));
    }
    let mut tls = rustls::ServerConfig::builder_with_provider(provider_with(suites))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ConfigError::Tls("TLS 1.3 with the chosen suites", e))?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(certs.clone()));
    tls.alpn_protocols = alpns.iter().map(|a| a.as_bytes().to_vec()).collect();
    if secrets == Secrets::Logged
        && let Some(k) = key_log()
    {
        tls.key_log = k;
    }
    Ok(tls)
}

/// A QUIC server crypto config offering `alpns`.
///
/// # Errors
/// A key that does not match the certificate or is unsupported.
pub fn server_crypto(
    identity: &Identity,
    alpns: &[String],
) -> Result<Arc<dyn quinn_proto::crypto::ServerConfig>, ConfigError> {
    server_crypto_with(
        &Certificates::new(std::slice::from_ref(identity))?,
        alpns,
        Secrets::Kept,
    )
}

/// A QUIC server crypto config offering `alpns` and serving `certs` (which may be replaced
/// while it serves), writing its secrets as `secrets` says.
///
/// # Errors
/// No cipher suite for QUIC's Initial packets.
pub fn server_crypto_with(
    certs: &Certificates,
    alpns: &[String],
    secrets: Secrets,
) -> Result<Arc<dyn quinn_proto::crypto::ServerConfig>, ConfigError> {
    let mut tls = server_tls(certs, alpns, &CipherSuite::ALL, secrets)?;
    tls.max_early_data_size = u32::MAX;
    // Counted, so that the report says how many clients resumed.
    tls.session_storage = Arc::new(CountingStore(tls.session_storage.clone()));
    let quic = QuicServerConfig::try_from(tls).map_err(|_| ConfigError::NoInitialSuite)?;
    Ok(Arc::new(CountingServer(Arc::new(quic))))
}

/// A TLS 1.3 server config for TLS over TCP (no ALPN), accepting `suites` (the client's
/// order decides among them, as in QUIC): the QUIC server's provider, protocol version and
/// certificate handling.
///
/// # Errors
/// No suite, or a key that does not match the certificate or is unsupported.
pub fn stream_server_config(
    identity: &Identity,
    suites: &[CipherSuite],
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let certs = Certificates::new(std::slice::from_ref(identity))?;
    Ok(Arc::new(server_tls(&certs, &[], suites, Secrets::Kept)?))
}

/// Whom the client trusts.
#[derive(Debug, Clone, Default)]
pub enum Trust {
    /// Nobody: every certificate is untrusted (there is no system store here).
    #[default]
    Nobody,
    /// Anything: no verification.
    Insecure,
    /// These CA (or self-signed) certificates.
    Certs(Vec<CertificateDer<'static>>),
}

/// A QUIC client crypto config asking for `alpn`, offering every cipher suite.
///
/// # Errors
/// A CA certificate rustls rejects.
pub fn client_crypto(trust: &Trust, alpn: &str) -> Result<Arc<QuicClientConfig>, ConfigError> {
    client_crypto_with(trust, alpn, &CipherSuite::ALL)
}

/// A QUIC client crypto config asking for `alpn` and offering only `suites`.
///
/// # Errors
/// A CA certificate rustls rejects, or no suite.
pub fn client_crypto_with(
    trust: &Trust,
    alpn: &str,
    suites: &[CipherSuite],
) -> Result<Arc<QuicClientConfig>, ConfigError> {
    let mut tls = client_tls(trust, suites)?;
    tls.alpn_protocols = vec![alpn.as_bytes().to_vec()];
    tls.enable_early_data = true;
    // The Initial packets are protected with AES-128-GCM whatever the suites offered
    // (RFC 9001 section 5.2), so that suite is named separately for them.
    let initial = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
        .tls13()
        .and_then(rustls::Tls13CipherSuite::quic_suite)
        .ok_or(ConfigError::NoInitialSuite)?;
    let quic = QuicClientConfig::with_initial(Arc::new(tls), initial)
        .map_err(|_| ConfigError::NoInitialSuite)?;
    Ok(Arc::new(quic))
}

/// A TLS 1.3 client config for TLS over TCP (no ALPN), offering `suites` in that order: the
/// QUIC client's provider, protocol version and certificate verification.
///
/// # Errors
/// A CA certificate rustls rejects, or no suite.
pub fn stream_client_config(
    trust: &Trust,
    suites: &[CipherSuite],
) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    Ok(Arc::new(client_tls(trust, suites)?))
}

/// A TLS 1.3 client config offering `suites`, trusting as `trust` says, with
/// `SSLKEYLOGFILE`: what the QUIC client and a TLS-over-TCP client share.
fn client_tls(trust: &Trust, suites: &[CipherSuite]) -> Result<rustls::ClientConfig, ConfigError> {
    if suites.is_empty() {
        return Err(ConfigError::NoCipherSuite("offer"));
    }
    let provider = provider_with(suites);
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ConfigError::Tls("TLS 1.3 with the chosen suites", e))?;
    let verifier: Arc<dyn ServerCertVerifier> = match trust {
        // No anchor: rustls refuses every certificate at the handshake (its verifier's
        // builder would refuse the empty store up front), so no full handshake to count.
        Trust::Nobody => {
            let mut tls = builder
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            if let Some(k) = key_log() {
                tls.key_log = k;
            }
            return Ok(tls);
        }
        Trust::Insecure => Arc::new(NoVerify(provider)),
        Trust::Certs(certs) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs {
                roots
                    .add(c.clone())
                    .map_err(|e| ConfigError::Tls("adding a CA certificate", e))?;
            }
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(ConfigError::Verifier)?
        }
    };
    // Counted: a resumed handshake has no certificate to verify.
    let mut tls = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(CountingVerifier(verifier)))
        .with_no_client_auth();
    if let Some(k) = key_log() {
        tls.key_log = k;
    }
    Ok(tls)
}
