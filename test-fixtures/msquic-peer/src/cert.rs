//! Server credentials: PEM files given on the command line or a self-signed
//! certificate generated at start-up.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

/// A certificate/key pair on disk.  Generated pairs live in a private
/// temporary directory that is removed on drop.
#[derive(Debug)]
pub(crate) struct CertFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    temp_dir: Option<PathBuf>,
}

impl CertFiles {
    /// Uses existing PEM files after checking that both are readable.
    pub(crate) fn existing(cert: &Path, key: &Path) -> Result<Self> {
        for (what, path) in [("certificate", cert), ("private key", key)] {
            fs::File::open(path)
                .with_context(|| format!("cannot read {what} file {}", path.display()))?;
        }
        Ok(Self {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            temp_dir: None,
        })
    }

    /// Generates a self-signed certificate for localhost, 127.0.0.1 and ::1.
    pub(crate) fn self_signed() -> Result<Self> {
        let names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        let certified = rcgen::generate_simple_self_signed(names)
            .context("generating self-signed certificate")?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("msquic-peer-{}-{nanos:09}", std::process::id()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        let files = Self {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            temp_dir: Some(dir),
        };
        write_private(&files.cert, certified.cert.pem().as_bytes())?;
        write_private(&files.key, certified.signing_key.serialize_pem().as_bytes())?;
        Ok(files)
    }
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(data))
        .with_context(|| format!("writing {}", path.display()))
}

impl Drop for CertFiles {
    fn drop(&mut self) {
        if let Some(dir) = &self.temp_dir {
            drop(fs::remove_dir_all(dir));
        }
    }
}
