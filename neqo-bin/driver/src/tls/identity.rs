//! The server's certificate chain and key, self-signed or read from PEM files, and the
//! certificates a client is told to trust.

use std::path::Path;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, pem::PemObject as _};

use crate::ConfigError;

/// A certificate chain and its key.
#[derive(Debug)]
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// A self-signed certificate for localhost, 127.0.0.1 and ::1.
    ///
    /// # Errors
    /// When rcgen fails.
    pub fn self_signed() -> Result<Self, ConfigError> {
        let ck = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ])
        .map_err(ConfigError::SelfSigned)?;
        Ok(Self {
            chain: vec![ck.cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()).into(),
        })
    }

    /// Reads a PEM certificate chain and a PEM private key.
    ///
    /// # Errors
    /// Unreadable or empty files, with the path in the message.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, ConfigError> {
        let chain = read_certs(cert)?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| ConfigError::Pem {
            what: "private key",
            path: key.to_owned(),
            reason: pem_error(&e),
        })?;
        Ok(Self { chain, key })
    }
}

fn pem_error(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item found".to_owned(),
        other => format!("{other:?}"),
    }
}

/// Reads PEM certificates.
///
/// # Errors
/// Unreadable file or no certificate in it.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| ConfigError::Pem {
            what: "certificate",
            path: path.to_owned(),
            reason: pem_error(&e),
        })?;
    if certs.is_empty() {
        return Err(ConfigError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}
