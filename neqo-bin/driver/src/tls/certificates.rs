//! The certificates a server serves ([`Certificates`]): several, chosen by the name a client
//! asks for (SNI), and replaceable while it serves.

use std::sync::{
    Arc, RwLock,
    atomic::{AtomicU64, Ordering},
};

use rustls::{
    pki_types::{CertificateDer, ServerName},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};

use super::Identity;
use crate::ConfigError;

/// A server's certificates and keys. A client gets the first whose certificate is valid for
/// the name it asked for (SNI; wildcards as in WebPKI), or the first of all when none is or
/// it asked for none. [`replace`](Self::replace) swaps them all at once while the server
/// runs: handshakes that start afterwards get the new ones; connections already made, and
/// handshakes under way, keep theirs.
///
/// A clone is another handle on the same certificates.
#[derive(Clone)]
pub struct Certificates(Arc<Shared>);

struct Shared {
    served: RwLock<Arc<[Arc<CertifiedKey>]>>,
    replaced: AtomicU64,
    refused: AtomicU64,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Certificates({})", self.current().len())
    }
}

/// What [`Certificates::replace`] did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replacements {
    /// Replacements served from then on.
    pub done: u64,
    /// Replacements refused (the certificates served stayed as they were).
    pub refused: u64,
}

impl Certificates {
    /// The certificates of `identities`, the first being served to clients whose name none
    /// fits.
    ///
    /// # Errors
    /// No identity, or a key that does not belong to its certificate or that rustls does not
    /// support.
    pub fn new(identities: &[Identity]) -> Result<Self, ConfigError> {
        Ok(Self(Arc::new(Shared {
            served: RwLock::new(certified(identities)?),
            replaced: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })))
    }

    /// Serves `identities` from now on, all or none: on an error the certificates served
    /// stay as they were.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn replace(&self, identities: &[Identity]) -> Result<(), ConfigError> {
        let new = certified(identities).inspect_err(|_| {
            self.0.refused.fetch_add(1, Ordering::Relaxed);
        })?;
        *self
            .0
            .served
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = new;
        self.0.replaced.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Serves what `load` reads from now on (files read again, say): a replacement counted
    /// as refused, and the certificates served left as they were, when `load` fails too.
    /// Returns how many are served.
    ///
    /// # Errors
    /// `load`'s, or as [`new`](Self::new).
    pub fn reload<E: From<ConfigError>>(
        &self,
        load: impl FnOnce() -> Result<Vec<Identity>, E>,
    ) -> Result<usize, E> {
        let identities = load().inspect_err(|_| {
            self.0.refused.fetch_add(1, Ordering::Relaxed);
        })?;
        self.replace(&identities)?;
        Ok(identities.len())
    }

    /// What [`replace`](Self::replace) and [`reload`](Self::reload) did so far.
    #[must_use]
    pub fn replacements(&self) -> Replacements {
        Replacements {
            done: self.0.replaced.load(Ordering::Relaxed),
            refused: self.0.refused.load(Ordering::Relaxed),
        }
    }

    /// The chain served to a client whose name no certificate fits: the first.
    #[must_use]
    pub fn default_chain(&self) -> Vec<CertificateDer<'static>> {
        self.current()[0].cert.clone()
    }

    /// How many certificates are served.
    #[must_use]
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Never: there is always at least one.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        false
    }

    fn current(&self) -> Arc<[Arc<CertifiedKey>]> {
        self.0
            .served
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The certificate for a client asking for `name`.
    fn choose(&self, name: Option<&str>) -> Arc<CertifiedKey> {
        let all = self.current();
        // One certificate: served to every client, so no name is checked.
        if all.len() > 1
            && let Some(name) = name.and_then(|n| ServerName::try_from(n).ok())
            && let Some(fit) = all.iter().find(|ck| valid_for(ck, &name))
        {
            return fit.clone();
        }
        all[0].clone()
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.choose(client_hello.server_name()))
    }
}

/// Whether the end-entity certificate of `ck` names `name`.
fn valid_for(ck: &CertifiedKey, name: &ServerName<'_>) -> bool {
    ck.cert.first().is_some_and(|cert| {
        webpki::EndEntityCert::try_from(cert)
            .is_ok_and(|ee| ee.verify_is_valid_for_subject_name(name).is_ok())
    })
}

/// The keys of `identities`, each checked against its certificate.
fn certified(identities: &[Identity]) -> Result<Arc<[Arc<CertifiedKey>]>, ConfigError> {
    if identities.is_empty() {
        return Err(ConfigError::NoIdentity);
    }
    let provider = rustls::crypto::ring::default_provider();
    identities
        .iter()
        .map(|i| {
            CertifiedKey::from_der(i.chain.clone(), i.key.clone_key(), &provider)
                .map(Arc::new)
                .map_err(ConfigError::KeyMismatch)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use rustls::pki_types::PrivatePkcs8KeyDer;

    use super::*;

    /// A self-signed identity for `names`.
    fn identity(names: &[&str]) -> Identity {
        let ck = rcgen::generate_simple_self_signed(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .unwrap();
        Identity {
            chain: vec![ck.cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()).into(),
        }
    }

    /// A whole TLS 1.3 handshake in memory between a server serving `certs` and a client
    /// asking for `name` that trusts anything; the end-entity certificate the client got.
    fn served(certs: &Certificates, name: &str) -> CertificateDer<'static> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(certs.clone()));
        let client = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(super::super::verify::NoVerify(provider)))
            .with_no_client_auth();
        let mut s = rustls::ServerConnection::new(Arc::new(server)).unwrap();
        let mut c = rustls::ClientConnection::new(
            Arc::new(client),
            ServerName::try_from(name.to_owned()).unwrap(),
        )
        .unwrap();
        // Bounded: a TLS 1.3 handshake is two flights each way.
        for _ in 0..10 {
            if !c.is_handshaking() && !s.is_handshaking() {
                break;
            }
            let mut buf = Vec::new();
            c.write_tls(&mut buf).unwrap();
            s.read_tls(&mut &buf[..]).unwrap();
            s.process_new_packets().unwrap();
            buf.clear();
            s.write_tls(&mut buf).unwrap();
            c.read_tls(&mut &buf[..]).unwrap();
            c.process_new_packets().unwrap();
        }
        assert!(!c.is_handshaking(), "handshake done");
        // The connection works with the key of the certificate it got.
        c.writer().write_all(b"ping").unwrap();
        let mut buf = Vec::new();
        c.write_tls(&mut buf).unwrap();
        s.read_tls(&mut &buf[..]).unwrap();
        s.process_new_packets().unwrap();
        let mut got = [0; 4];
        s.reader().read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        c.peer_certificates().unwrap()[0].clone().into_owned()
    }

    #[test]
    fn each_client_gets_the_certificate_for_its_name() {
        let a = identity(&["a.example"]);
        let b = identity(&["b.example", "*.b.example"]);
        let certs = Certificates::new(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(certs.len(), 2);
        assert_eq!(served(&certs, "a.example"), a.chain[0]);
        assert_eq!(served(&certs, "b.example"), b.chain[0]);
        assert_eq!(served(&certs, "www.b.example"), b.chain[0], "wildcard");
        // No certificate names it: the first.
        assert_eq!(served(&certs, "c.example"), a.chain[0]);
        assert_eq!(served(&certs, "127.0.0.1"), a.chain[0]);
        assert_eq!(certs.default_chain(), a.chain);
    }

    #[test]
    fn a_replacement_is_served_to_later_handshakes_and_a_bad_one_changes_nothing() {
        let old = identity(&["localhost"]);
        let certs = Certificates::new(std::slice::from_ref(&old)).unwrap();
        let handle = certs.clone();
        assert_eq!(served(&certs, "localhost"), old.chain[0]);

        let new = identity(&["localhost"]);
        handle.replace(std::slice::from_ref(&new)).unwrap();
        assert_eq!(served(&certs, "localhost"), new.chain[0]);

        // A key of another certificate, and nothing at all: refused, the new one kept.
        let mismatched = Identity {
            chain: old.chain.clone(),
            key: new.key.clone_key(),
        };
        assert!(matches!(
            handle.replace(&[mismatched]),
            Err(ConfigError::KeyMismatch(_))
        ));
        assert!(matches!(handle.replace(&[]), Err(ConfigError::NoIdentity)));
        // All or none: a good identity beside a bad one is not taken either.
        let other = identity(&["localhost"]);
        let bad = Identity {
            chain: other.chain.clone(),
            key: old.key.clone_key(),
        };
        assert!(handle.replace(&[other, bad]).is_err());
        assert_eq!(served(&certs, "localhost"), new.chain[0]);
        assert_eq!(
            certs.replacements(),
            Replacements {
                done: 1,
                refused: 3
            }
        );
        // A load that fails is a refusal too.
        let failed: Result<usize, ConfigError> =
            handle.reload(|| Err(ConfigError::NoCertificate("gone.pem".into())));
        assert!(failed.is_err());
        assert_eq!(
            handle
                .reload(|| Ok::<_, ConfigError>(vec![old.clone()]))
                .unwrap(),
            1
        );
        assert_eq!(served(&certs, "localhost"), old.chain[0]);
        assert_eq!(
            certs.replacements(),
            Replacements {
                done: 2,
                refused: 4
            }
        );
        assert!(matches!(
            Certificates::new(&[]),
            Err(ConfigError::NoIdentity)
        ));
    }
}
