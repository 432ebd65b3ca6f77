//! Keys that must outlive one server process: the stateless-reset key and the key of the
//! connection-ID generator, so that the clients of a server that restarted recognise its
//! resets instead of waiting out their idle timeout (quinn-proto sends a reset only for a
//! connection ID its generator could have made), and the key that seals Retry tokens, so that
//! a token from before a restart (or from another process serving the address) still
//! validates. All come from one secret, through HKDF-SHA256 with a label each, so one secret
//! never serves two purposes.

use std::{
    io::{Read as _, Write as _},
    path::Path,
    sync::Arc,
    time::Duration,
};

use anyhow::{anyhow, bail};
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
    /// Signs the connection IDs the server makes (`cid::CidGenerator`).
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
    /// Whoever knows the secret can forge the server's stateless resets, Retry tokens and
    /// connection IDs, so on Unix the file must be a regular file (not a symbolic link, a
    /// FIFO or a device) owned by this user, with no permission bits for group or others.
    /// Those checks are made on the opened file, so the path cannot be swapped between
    /// check and read.
    ///
    /// # Errors
    /// A file that cannot be read or created, fails one of those checks, or holds fewer than
    /// [`MIN_SECRET`] or more than [`MAX_SECRET`] bytes: one line, starting with
    /// `--key-file PATH:`, saying what is wrong and what to do.
    pub fn load_or_create(path: &Path) -> anyhow::Result<Self> {
        let secret = match read_checked(path)? {
            Some(secret) => secret,
            None => create(path)?,
        };
        Ok(Self::from_secret(&secret))
    }
}

/// The secret in `path` if it passes the checks of [`ServerKeys::load_or_create`]; `None`
/// if there is no file at `path`.
fn read_checked(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    let shown = path.display();
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    // O_NOFOLLOW: a link to a file others can read (/etc/passwd) must not become the key.
    // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, for ever.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
    );
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            // The error of an O_NOFOLLOW open on a link differs between systems (ELOOP,
            // EMLINK); the link itself says what it is. Only the message depends on it.
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                bail!("--key-file {shown}: is a symbolic link; give the file itself");
            }
            bail!("--key-file {shown}: cannot open it: {e}");
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| anyhow!("--key-file {shown}: cannot read its metadata: {e}"))?;
    #[cfg(unix)]
    check_unix(path, &meta)?;
    // One more byte than allowed tells a file that is too long from one that fits.
    let mut secret = Vec::with_capacity(MAX_SECRET + 1);
    file.take(MAX_SECRET as u64 + 1)
        .read_to_end(&mut secret)
        .map_err(|e| anyhow!("--key-file {shown}: cannot read it: {e}"))?;
    if !(MIN_SECRET..=MAX_SECRET).contains(&secret.len()) {
        // The read stops after MAX_SECRET + 1 bytes; the metadata knows the whole size.
        let len = if secret.len() > MAX_SECRET {
            meta.len().max(secret.len() as u64)
        } else {
            secret.len() as u64
        };
        bail!(
            "--key-file {shown}: {len} bytes; a secret of {MIN_SECRET} to {MAX_SECRET} bytes is \
             needed"
        );
    }
    Ok(Some(secret))
}

/// Refuses what is not a regular file of this user's that only this user can read or change.
#[cfg(unix)]
fn check_unix(path: &Path, meta: &std::fs::Metadata) -> anyhow::Result<()> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    let shown = path.display();
    if !meta.file_type().is_file() {
        bail!("--key-file {shown}: not a regular file; give a file holding the secret");
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        bail!(
            "--key-file {shown}: owned by uid {}, not by this user (uid {me}); give a file of \
             this user's",
            meta.uid()
        );
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        let lets = if mode & 0o044 != 0 {
            "lets other users read it"
        } else if mode & 0o022 != 0 {
            "lets other users change it"
        } else {
            "gives other users access to it"
        };
        bail!("--key-file {shown}: mode {mode:04o} {lets}; chmod 600");
    }
    Ok(())
}

/// Creates `path` with a new random secret and returns the secret, or, if another process
/// (or thread) creates it first, returns the secret in that one's file: the secret is written
/// to a temporary file in the same directory and linked to `path`, which fails rather than
/// overwrites, so a reader never sees a partly written file and all starters agree on one
/// secret.
fn create(path: &Path) -> anyhow::Result<Vec<u8>> {
    let shown = path.display();
    let Some(name) = path.file_name() else {
        bail!("--key-file {shown}: not a file name; give the path of a file");
    };
    let mut secret = vec![0u8; MIN_SECRET];
    rand::rng().fill_bytes(&mut secret);
    // Unique per process and per call, so racing starters never share a temporary file.
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(
        ".tmp-{}-{:016x}",
        std::process::id(),
        rand::rng().next_u64()
    ));
    let temporary = path.with_file_name(temporary_name);
    let written = write_new(&temporary, &secret);
    let linked = written.and_then(|()| std::fs::hard_link(&temporary, path));
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => {
            sync_dir(path);
            Ok(secret)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read_checked(path)? {
            Some(theirs) => Ok(theirs),
            None => bail!("--key-file {shown}: removed while being created; start again"),
        },
        Err(e) => bail!("--key-file {shown}: cannot create it: {e}"),
    }
}

/// Writes `secret` to a file at `path` that does not exist yet, readable by its owner only,
/// and flushes it to disk before it gets its final name.
fn write_new(path: &Path, secret: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(secret)?;
    file.sync_all()
}

/// Flushes the directory of `path`, so that the new name survives a crash of the machine
/// (the next start would otherwise make another secret). Best effort: the file is in place.
fn sync_dir(path: &Path) {
    #[cfg(unix)]
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = path;
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

    /// A new, empty directory for one test.
    fn test_dir(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("neqo-keys-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A file at `path` holding `len` bytes, readable by its owner only.
    fn write_key(path: &Path, len: usize) {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
            .open(path)
            .unwrap()
            .write_all(&vec![7; len])
            .unwrap();
    }

    fn refusal(path: &Path) -> String {
        ServerKeys::load_or_create(path).unwrap_err().to_string()
    }

    #[test]
    fn key_files_are_created_once_and_checked() {
        let dir = test_dir("created-once");
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
        let e = refusal(&dir.join("no/such/dir"));
        let shown = dir.join("no/such/dir");
        assert!(
            e.starts_with(&format!(
                "--key-file {}: cannot create it: ",
                shown.display()
            )),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sizes_outside_the_bounds_are_refused() {
        let dir = test_dir("sizes");
        for len in [MIN_SECRET, MAX_SECRET] {
            let p = dir.join(format!("ok-{len}"));
            write_key(&p, len);
            assert_eq!(
                reset_token(&ServerKeys::load_or_create(&p).unwrap()),
                reset_token(&ServerKeys::from_secret(&vec![7; len]))
            );
        }
        // The whole size is told, not where the bounded read stopped.
        for len in [0, MIN_SECRET - 1, MAX_SECRET + 1, 1 << 20] {
            let p = dir.join(format!("bad-{len}"));
            write_key(&p, len);
            assert_eq!(
                refusal(&p),
                format!(
                    "--key-file {}: {len} bytes; a secret of 32 to 4096 bytes is needed",
                    p.display()
                )
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Starters racing on a missing file all end up with the one secret the file holds, and
    /// no temporary file is left behind.
    #[test]
    fn racing_starters_agree_on_one_secret() {
        let dir = test_dir("race");
        for round in 0..20 {
            let path = dir.join(format!("secret-{round}"));
            let barrier = std::sync::Barrier::new(8);
            let tokens: Vec<Vec<u8>> = std::thread::scope(|s| {
                let racers: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            reset_token(&ServerKeys::load_or_create(&path).unwrap())
                        })
                    })
                    .collect();
                racers.into_iter().map(|r| r.join().unwrap()).collect()
            });
            let secret = std::fs::read(&path).unwrap();
            assert_eq!(secret.len(), MIN_SECRET);
            let on_disk = reset_token(&ServerKeys::from_secret(&secret));
            assert!(tokens.iter().all(|t| *t == on_disk), "round {round}");
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::metadata(&path).unwrap().permissions().mode();
                assert_eq!(mode & 0o7777, 0o600);
            }
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut expected: Vec<String> = (0..20).map(|r| format!("secret-{r}")).collect();
        expected.sort();
        assert_eq!(names, expected, "only the key files are left");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_is_refused() {
        let dir = test_dir("symlink");
        let real = dir.join("real");
        write_key(&real, MIN_SECRET);
        ServerKeys::load_or_create(&real).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let expected = |p: &Path| {
            format!(
                "--key-file {}: is a symbolic link; give the file itself",
                p.display()
            )
        };
        assert_eq!(refusal(&link), expected(&link));
        // A dangling link is refused too, not followed to create its target.
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("target"), &dangling).unwrap();
        assert_eq!(refusal(&dangling), expected(&dangling));
        assert!(!dir.join("target").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn modes_with_group_or_other_bits_are_refused() {
        use std::os::unix::fs::PermissionsExt as _;

        let dir = test_dir("modes");
        for (mode, what) in [
            (0o644, "lets other users read it"),
            (0o640, "lets other users read it"),
            (0o604, "lets other users read it"),
            (0o620, "lets other users change it"),
            (0o602, "lets other users change it"),
            (0o610, "gives other users access to it"),
        ] {
            let p = dir.join(format!("key-{mode:o}"));
            write_key(&p, MIN_SECRET);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                refusal(&p),
                format!(
                    "--key-file {}: mode {mode:04o} {what}; chmod 600",
                    p.display()
                )
            );
        }
        for mode in [0o600, 0o400, 0o700] {
            let p = dir.join(format!("key-{mode:o}"));
            write_key(&p, MIN_SECRET);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            ServerKeys::load_or_create(&p).unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_file_of_another_user_is_refused() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if me != 0 {
            println!("skipped: only root can give a file to another user");
            return;
        }
        let dir = test_dir("owner");
        let p = dir.join("theirs");
        write_key(&p, MIN_SECRET);
        std::os::unix::fs::chown(&p, Some(65534), None).unwrap();
        assert_eq!(
            refusal(&p),
            format!(
                "--key-file {}: owned by uid 65534, not by this user (uid 0); give a file of \
                 this user's",
                p.display()
            )
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `load_or_create(path)` on another thread, which must answer within ten seconds.
    #[cfg(unix)]
    fn refusal_in_time(path: &Path) -> String {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_owned();
        std::thread::spawn(move || tx.send(refusal(&path)));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("load_or_create hangs")
    }

    #[cfg(unix)]
    #[test]
    fn fifos_devices_and_directories_are_refused() {
        use std::os::unix::ffi::OsStrExt as _;

        let dir = test_dir("not-regular");
        let fifo = dir.join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let expected = |p: &Path| {
            format!(
                "--key-file {}: not a regular file; give a file holding the secret",
                p.display()
            )
        };
        // Without O_NONBLOCK the open waits for a writer that never comes.
        assert_eq!(refusal_in_time(&fifo), expected(&fifo));
        let zero = Path::new("/dev/zero");
        assert_eq!(refusal_in_time(zero), expected(zero));
        assert_eq!(refusal_in_time(&dir), expected(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
