//! The TLS 1.3 cipher suites, in the order a client offers them, and the ring provider
//! limited to a chosen set.

use std::sync::Arc;

/// A TLS 1.3 cipher suite a client may offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CipherSuite {
    /// `TLS_AES_128_GCM_SHA256`.
    Aes128gcm,
    /// `TLS_AES_256_GCM_SHA384`.
    Aes256gcm,
    /// `TLS_CHACHA20_POLY1305_SHA256`.
    Chacha20,
}

impl CipherSuite {
    /// All three, in the order offered: TLS 1.3's mandatory AES-128-GCM-SHA256 first. ring's
    /// default order puts AES-256-GCM-SHA384 first: 14 AES rounds instead of 10 on every
    /// packet, and SHA-384 (no SHA extensions on x86) for the handshake's transcript and key
    /// schedule. Every suite stays offered, so peers preferring another still get it.
    pub const ALL: [Self; 3] = [Self::Aes128gcm, Self::Aes256gcm, Self::Chacha20];

    fn rustls(self) -> rustls::SupportedCipherSuite {
        use rustls::crypto::ring::cipher_suite;
        match self {
            Self::Aes128gcm => cipher_suite::TLS13_AES_128_GCM_SHA256,
            Self::Aes256gcm => cipher_suite::TLS13_AES_256_GCM_SHA384,
            Self::Chacha20 => cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        }
    }
}

/// ring offering `suites`, in that order.
pub(super) fn provider_with(suites: &[CipherSuite]) -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::CryptoProvider {
        cipher_suites: suites.iter().map(|s| s.rustls()).collect(),
        ..rustls::crypto::ring::default_provider()
    })
}
