//! Keys that must outlive one server process: the stateless-reset key and the key of the
//! connection-ID generator, so that the clients of a server that restarted recognise its
//! resets instead of waiting out their idle timeout (quinn-proto sends a reset only for a
//! connection ID its generator could have made), and the key that seals Retry tokens, so that
//! a token from before a restart (or from another process serving the address) still
//! validates. All come from one secret, through HKDF-SHA256 with a label each, so one secret
//! never serves two purposes.

use std::{io::Write as _, path::Path, sync::Arc, time::Duration};

use anyhow::{Context as _, bail};
use quinn_proto::{
    EndpointConfig,
    crypto::{HandshakeTokenKey, HmacKey},
};
use rand::RngCore as _;
use ring::{hkdf, hmac};

use super::cid::CidLayout;

/// Bytes of secret a key file needs at least (and a new one gets).
pub const MIN_SECRET: usize = 32;

/// Most bytes of a key file: a secret, not a document.
pub const MAX_SECRET: usize = 4096;

/// The derived keys.
#[derive(Clone)]
pub struct ServerKeys {
    /// Signs stateless-reset tokens (quinn-proto's `EndpointConfig::reset_key`).
    pub reset: Arc<dyn HmacKey>,
    /// Seals Retry tokens (quinn-proto's `ServerConfig::token_key`).
    pub token: Arc<dyn HandshakeTokenKey>,
    /// Signs the connection IDs the server makes ([`CidGenerator`](super::cid::CidGenerator)).
    pub cid: hmac::Key,
}

impl std::fmt::Debug for ServerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKeys(..)")
    }
}

impl ServerKeys {
    /// Keys from a fresh random secret: valid for this process only.
    #[must_use]
    pub fn random() -> Self {
        let mut secret = [0u8; MIN_SECRET];
        rand::rng().fill_bytes(&mut secret);
        Self::from_secret(&secret)
    }

    /// Keys derived from `secret`; the same secret always gives the same keys.
    #[must_use]
    pub fn from_secret(secret: &[u8]) -> Self {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"neqo-server keys v1").extract(secret);
        let reset: hmac::Key = prk
            .expand(&[b"stateless reset"], hmac::HMAC_SHA256)
            .expect("one HMAC-SHA256 key is a valid HKDF output length")
            .into();
        let token: hkdf::Prk = prk
            .expand(&[b"retry token"], hkdf::HKDF_SHA256)
            .expect("one SHA-256 key is a valid HKDF output length")
            .into();
        let cid: hmac::Key = prk
            .expand(&[b"connection id"], hmac::HMAC_SHA256)
            .expect("one HMAC-SHA256 key is a valid HKDF output length")
            .into();
        Self {
            reset: Arc::new(reset),
            token: Arc::new(token),
            cid,
        }
    }

    /// The config of worker `worker`'s endpoint: the stateless-reset key, and connection IDs
    /// in `layout` signed with the key, living `cid_lifetime` each (for ever with `None`).
    #[must_use]
    pub fn endpoint_config(
        &self,
        layout: &CidLayout,
        worker: usize,
        cid_lifetime: Option<Duration>,
    ) -> EndpointConfig {
        let mut config = EndpointConfig::new(self.reset.clone());
        let (layout, key) = (layout.clone(), self.cid.clone());
        config.cid_generator(move || Box::new(layout.generator(worker, key.clone(), cid_lifetime)));
        config
    }

    /// Keys from the secret in `path`; a missing file is created first with
    /// [`MIN_SECRET`] random bytes, readable by its owner only.
    ///
    /// # Errors
    /// A file that cannot be read or created, or holds fewer than [`MIN_SECRET`] or more than
    /// [`MAX_SECRET`] bytes.
    pub fn load_or_create(path: &Path) -> anyhow::Result<Self> {
        let shown = path.display();
        let secret = match std::fs::read(path) {
            Ok(secret) => secret,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create(path).with_context(|| format!("--key-file {shown}: cannot create it"))?
            }
            Err(e) => return Err(e).with_context(|| format!("--key-file {shown}: cannot read it")),
        };
        if !(MIN_SECRET..=MAX_SECRET).contains(&secret.len()) {
            bail!(
                "--key-file {shown}: {} bytes; a secret of {MIN_SECRET} to {MAX_SECRET} bytes is needed",
                secret.len()
            );
        }
        Ok(Self::from_secret(&secret))
    }
}

/// Writes a new random secret to `path` (never over an existing file) and returns it.
fn create(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut secret = vec![0u8; MIN_SECRET];
    rand::rng().fill_bytes(&mut secret);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(&secret)?;
    file.sync_all()?;
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reset_token(keys: &ServerKeys) -> Vec<u8> {
        let mut out = vec![0; keys.reset.signature_len()];
        keys.reset.sign(b"a connection id", &mut out);
        out
    }

    fn sealed(keys: &ServerKeys) -> Vec<u8> {
        let mut data = b"a token".to_vec();
        keys.token
            .aead_from_hkdf(b"random bytes")
            .seal(&mut data, b"")
            .unwrap();
        data
    }

    #[test]
    fn one_secret_gives_the_same_keys_another_other_keys() {
        let a = ServerKeys::from_secret(&[7; 32]);
        let b = ServerKeys::from_secret(&[7; 32]);
        let c = ServerKeys::from_secret(&[8; 32]);
        assert_eq!(reset_token(&a), reset_token(&b));
        assert_ne!(reset_token(&a), reset_token(&c));
        assert_eq!(sealed(&a), sealed(&b));
        assert_ne!(sealed(&a), sealed(&c));
        let cid_tag = |k: &ServerKeys| hmac::sign(&k.cid, b"a cid").as_ref().to_vec();
        assert_eq!(cid_tag(&a), cid_tag(&b));
        assert_ne!(cid_tag(&a), cid_tag(&c));
        assert_ne!(
            reset_token(&ServerKeys::random()),
            reset_token(&ServerKeys::random())
        );
    }

    #[test]
    fn key_files_are_created_once_and_checked() {
        let dir = std::env::temp_dir().join(format!("neqo-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        let first = ServerKeys::load_or_create(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap().len(), MIN_SECRET);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = ServerKeys::load_or_create(&path).unwrap();
        assert_eq!(reset_token(&first), reset_token(&again), "the file is kept");
        for (name, len) in [("short", MIN_SECRET - 1), ("long", MAX_SECRET + 1)] {
            let p = dir.join(name);
            std::fs::write(&p, vec![1; len]).unwrap();
            let e = ServerKeys::load_or_create(&p).unwrap_err().to_string();
            assert!(e.starts_with("--key-file") && e.contains("bytes"), "{e}");
        }
        let e = ServerKeys::load_or_create(&dir.join("no/such/dir"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot create"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
