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

use quinn_proto::{
    EndpointConfig,
    crypto::{HandshakeTokenKey, HmacKey},
};
use rand::RngCore as _;
use ring::{hkdf, hmac};

use super::{
    cid::{CidGenerator, CidLayout},
    error::{KeyFileError, KeyFileProblem},
};

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
    pub(crate) fn endpoint_config(
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

    /// Worker `worker`'s connection IDs in `layout`, as its endpoint makes them: to tell
    /// the IDs the server issued from others.
    #[must_use]
    pub(crate) fn cid_generator(&self, layout: &CidLayout, worker: usize) -> CidGenerator {
        layout.generator(worker, self.cid.clone(), None)
    }

    /// Keys from the secret in `path`; a missing file is created first with
    /// [`MIN_SECRET`] random bytes, readable by its owner only.
    ///
    /// Whoever knows the secret can forge the server's stateless resets, Retry tokens and
    /// connection IDs, so on Unix the file must be a regular file (not a symbolic link, a
    /// FIFO or a device) owned by this user, with no permission bits for group or others and
    /// one link (no other name to reach it by). Those checks are made on the opened file, so
    /// the path cannot be swapped between check and read. Its directory (checked by path,
    /// before a missing file is created in it) must belong to this user or root and be
    /// writable by neither group nor others, who could otherwise put a file of their own in
    /// its place. Everywhere, the secret must look random (`check_random`).
    ///
    /// # Errors
    /// A file that cannot be read or created, fails one of those checks, or holds fewer than
    /// [`MIN_SECRET`] or more than [`MAX_SECRET`] bytes: the path and what is wrong with it,
    /// whose message says what to do.
    pub fn load_or_create(path: &Path) -> Result<Self, KeyFileError> {
        match Self::load(path)? {
            Some(keys) => Ok(keys),
            None => Ok(Self::from_secret(&create(path)?)),
        }
    }

    /// Keys from the secret in `path`, as [`load_or_create`](Self::load_or_create) reads it;
    /// `None`, creating nothing, where there is no file yet (its directory checked as
    /// `load_or_create` checks it before creating one): for a check of a configuration.
    ///
    /// # Errors
    /// As [`load_or_create`](Self::load_or_create), but for the creation.
    pub fn load(path: &Path) -> Result<Option<Self>, KeyFileError> {
        match read_checked(path)? {
            Some(secret) => Ok(Some(Self::from_secret(&secret))),
            None => {
                // Refused before the file is made, with the message an existing file gets.
                #[cfg(unix)]
                check_dir(path)?;
                Ok(None)
            }
        }
    }
}

/// The secret in `path` if it passes the checks of [`ServerKeys::load_or_create`]; `None`
/// if there is no file at `path`.
fn read_checked(path: &Path) -> Result<Option<Vec<u8>>, KeyFileError> {
    let refuse = |problem| refused(path, problem);
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
                return Err(refuse(KeyFileProblem::SymbolicLink));
            }
            return Err(refuse(KeyFileProblem::Open(e)));
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| refuse(KeyFileProblem::Metadata(e)))?;
    #[cfg(unix)]
    {
        check_unix(path, &file, &meta)?;
        check_dir(path)?;
    }
    // One more byte than allowed tells a file that is too long from one that fits.
    let mut secret = Vec::with_capacity(MAX_SECRET + 1);
    file.take(MAX_SECRET as u64 + 1)
        .read_to_end(&mut secret)
        .map_err(|e| refuse(KeyFileProblem::Read(e)))?;
    if !(MIN_SECRET..=MAX_SECRET).contains(&secret.len()) {
        // The read stops after MAX_SECRET + 1 bytes; the metadata knows the whole size.
        let len = if secret.len() > MAX_SECRET {
            meta.len().max(secret.len() as u64)
        } else {
            secret.len() as u64
        };
        return Err(refuse(KeyFileProblem::Size { len }));
    }
    check_random(path, &secret)?;
    Ok(Some(secret))
}

/// The fewest distinct byte values a secret of `len` bytes must hold: 8 at [`MIN_SECRET`]
/// bytes, one more for each doubling of the length (15 at [`MAX_SECRET`]).
///
/// A secret of random bytes is never refused. `n` uniform random bytes take fewer than `k`
/// distinct values only if all of them fall in one of the C(256, k - 1) sets of `k - 1`
/// values, so the chance is at most C(256, k - 1) * ((k - 1) / 256)^n. At n = 32, k = 8 that
/// is C(256, 7) * (7/256)^32 = 1.3e-37 (< 2^-122; exactly 2^-122.7): the odds of guessing a
/// 122-bit key at the first try. That is the worst case over every allowed length: the bound
/// falls as the secret grows (about 2^-164 at 40 bytes, 2^-284 at 63), far more than the one
/// more value needed at each doubling raises it (about 2^-271 at 64 bytes, 2^-565 at 128,
/// 2^-1140 at 256, 2^-17098 at 4096). [`create`] draws again in that case anyway.
///
/// Why no more: a secret written as text uses fewer values than random bytes, and text in
/// 16 or more symbols is a good secret when long enough. Hex (16) passes at every length:
/// fewer than 8 of the 16 digits in 32 characters has chance 3.6e-8, fewer than 9 in 64
/// 7e-16; base64 (64) fails with chance 1e-22 at 32 characters. Decimal digits (10 values)
/// are refused now and then at 32 characters (chance 1.3e-3) and always from 256. What is
/// refused is a secret nobody drew at random: one byte repeated (zeros, `aaaa`, zeros written
/// as text), a word or a short pattern repeated.
fn min_distinct(len: usize) -> usize {
    let doublings = (len / MIN_SECRET).max(1).ilog2();
    8 + doublings as usize
}

/// How many distinct byte values `bytes` holds.
fn distinct_values(bytes: &[u8]) -> usize {
    let mut seen = [false; 256];
    for &b in bytes {
        seen[usize::from(b)] = true;
    }
    seen.iter().filter(|&&s| s).count()
}

/// Refuses a secret of too few distinct byte values to have been drawn at random (a mistake:
/// a file of zeros, a repeated character, a word): [`min_distinct`].
fn check_random(path: &Path, secret: &[u8]) -> Result<(), KeyFileError> {
    let len = secret.len();
    let distinct = distinct_values(secret);
    if distinct == 1 {
        let byte = secret[0];
        return Err(refused(path, KeyFileProblem::OneValue { len, byte }));
    }
    let needed = min_distinct(len);
    if distinct < needed {
        return Err(refused(
            path,
            KeyFileProblem::FewValues {
                distinct,
                len,
                needed,
            },
        ));
    }
    Ok(())
}

fn refused(path: &Path, problem: KeyFileProblem) -> KeyFileError {
    KeyFileError {
        path: path.to_owned(),
        problem,
    }
}

/// Refuses what is not a regular file of this user's, with one link, that only this user can
/// read or change; `meta` is `file`'s, opened at `path`.
#[cfg(unix)]
fn check_unix(
    path: &Path,
    file: &std::fs::File,
    meta: &std::fs::Metadata,
) -> Result<(), KeyFileError> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    let refuse = |problem| Err(refused(path, problem));
    if !meta.file_type().is_file() {
        return refuse(KeyFileProblem::NotRegular);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return refuse(KeyFileProblem::Owner {
            uid: meta.uid(),
            me,
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return refuse(KeyFileProblem::Mode { mode });
    }
    // Another name is another way to the secret: in a directory others can read, or left
    // behind when this one is replaced or removed. Two names for a moment are a [`create`]
    // linking its temporary file into place.
    let links = meta.nlink();
    if links > 1 && !(links == 2 && being_created(path, file, meta)) {
        return refuse(KeyFileProblem::Links(links));
    }
    Ok(())
}

/// The directory of `path` (`.` for a bare file name).
#[cfg(unix)]
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The start of the names of [`create`]'s temporary files for a key file named `name`.
fn temporary_prefix(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".tmp-");
    prefix
}

/// Whether the one other link to `file` (opened at `path`, with metadata `meta`) is the
/// temporary file of a [`create`] in the same directory, about to be removed, or was and is
/// gone now. (A creator that died between the link and the removal leaves the temporary
/// file: it is accepted too, being in the key file's own directory; it may be removed.)
#[cfg(unix)]
fn being_created(path: &Path, file: &std::fs::File, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _};

    let Some(name) = path.file_name() else {
        return false;
    };
    let prefix = temporary_prefix(name);
    // Compared by lstat, not by the directory entry's inode number, which overlay file
    // systems do not always make the file's.
    let temporary = std::fs::read_dir(parent_dir(path))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().as_bytes().starts_with(prefix.as_bytes()))
        .any(|entry| {
            std::fs::symlink_metadata(entry.path())
                .is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
        });
    // Not found: removed after the file's metadata was read (an entry removed during the
    // listing may be missed), so the file has one link now, unless another is left.
    temporary || file.metadata().is_ok_and(|m| m.nlink() == 1)
}

/// Refuses a key file whose directory is writable by group or others (with the sticky bit
/// too: a key file must not be where other users can write), or belongs to a user other than
/// this one or root: they could put a file of theirs, with a secret they know, in its place.
/// A directory that cannot be read is left to the open or the create to report.
#[cfg(unix)]
fn check_dir(path: &Path) -> Result<(), KeyFileError> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    let dir = parent_dir(path);
    let Ok(meta) = std::fs::metadata(dir) else {
        return Ok(());
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        let problem = KeyFileProblem::DirectoryOwner {
            dir: dir.to_owned(),
            uid: meta.uid(),
            me,
        };
        return Err(refused(path, problem));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        let problem = KeyFileProblem::DirectoryMode {
            dir: dir.to_owned(),
            mode,
        };
        return Err(refused(path, problem));
    }
    Ok(())
}

/// Creates `path` with a new random secret and returns the secret, or, if another process
/// (or thread) creates it first, returns the secret in that one's file: the secret is written
/// to a temporary file in the same directory and linked to `path`, which fails rather than
/// overwrites, so a reader never sees a partly written file and all starters agree on one
/// secret.
fn create(path: &Path) -> Result<Vec<u8>, KeyFileError> {
    let Some(name) = path.file_name() else {
        return Err(refused(path, KeyFileProblem::NotAFileName));
    };
    let mut secret = vec![0u8; MIN_SECRET];
    // So that the file passes the check it gets when read (see min_distinct: a draw is
    // refused with a chance below 2^-122).
    loop {
        rand::rng().fill_bytes(&mut secret);
        if distinct_values(&secret) >= min_distinct(MIN_SECRET) {
            break;
        }
    }
    // Unique per process and per call, so racing starters never share a temporary file.
    let mut temporary_name = temporary_prefix(name);
    temporary_name.push(format!(
        "{}-{:016x}",
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
            None => Err(refused(path, KeyFileProblem::RemovedWhileCreating)),
        },
        Err(e) => Err(refused(path, KeyFileProblem::Create(e))),
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

    /// A new, empty directory for one test, that only its owner can write in (a key file's
    /// directory must be), whatever the umask.
    fn test_dir(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("neqo-keys-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        #[cfg(unix)]
        set_mode(&dir, 0o700);
        dir
    }

    #[cfg(unix)]
    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A file at `path` holding `secret`, readable by its owner only.
    fn write_secret(path: &Path, secret: &[u8]) {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(path).unwrap().write_all(secret).unwrap();
    }

    /// `len` random bytes.
    fn random_secret(len: usize) -> Vec<u8> {
        let mut secret = vec![0; len];
        rand::rng().fill_bytes(&mut secret);
        secret
    }

    /// A file at `path` holding `len` random bytes, readable by its owner only; returns them.
    fn write_key(path: &Path, len: usize) -> Vec<u8> {
        let secret = random_secret(len);
        write_secret(path, &secret);
        secret
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
            e.starts_with(&format!("{}: cannot create it: ", shown.display())),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `load` reads and checks a file as `load_or_create` does, and creates none.
    #[test]
    fn load_reads_an_existing_file_and_creates_none() {
        let dir = test_dir("load");
        let path = dir.join("secret");
        assert!(ServerKeys::load(&path).unwrap().is_none());
        assert!(!path.exists(), "created");
        let secret = write_key(&path, MIN_SECRET);
        assert_eq!(
            reset_token(&ServerKeys::load(&path).unwrap().expect("the file")),
            reset_token(&ServerKeys::from_secret(&secret))
        );
        #[cfg(unix)]
        {
            set_mode(&path, 0o644);
            let e = ServerKeys::load(&path).unwrap_err().to_string();
            assert_eq!(e, refusal(&path));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sizes_outside_the_bounds_are_refused() {
        let dir = test_dir("sizes");
        for len in [MIN_SECRET, MAX_SECRET] {
            let p = dir.join(format!("ok-{len}"));
            let secret = write_key(&p, len);
            assert_eq!(
                reset_token(&ServerKeys::load_or_create(&p).unwrap()),
                reset_token(&ServerKeys::from_secret(&secret))
            );
        }
        // The whole size is told, not where the bounded read stopped.
        for len in [0, MIN_SECRET - 1, MAX_SECRET + 1, 1 << 20] {
            let p = dir.join(format!("bad-{len}"));
            write_key(&p, len);
            let e = ServerKeys::load_or_create(&p).unwrap_err();
            assert_eq!(e.path, p);
            assert!(
                matches!(e.problem, KeyFileProblem::Size { len: l } if l == len as u64),
                "{e:?}"
            );
            assert_eq!(
                refusal(&p),
                format!(
                    "{}: {len} bytes; a secret of 32 to 4096 bytes is needed",
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
        let expected =
            |p: &Path| format!("{}: is a symbolic link; give the file itself", p.display());
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
                format!("{}: mode {mode:04o} {what}; chmod 600", p.display())
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
                "{}: owned by uid 65534, not by this user (uid 0); give a file of \
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
                "{}: not a regular file; give a file holding the secret",
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

    /// Random secrets are never refused as not random: many of each allowed length, most of
    /// them at the lengths where the bound of `min_distinct` is highest (the shortest of each
    /// threshold), and the files `load_or_create` makes.
    #[test]
    fn random_secrets_of_every_allowed_size_pass() {
        let lengths = (MIN_SECRET..=MAX_SECRET)
            .flat_map(|len| std::iter::repeat_n(len, 2))
            .chain(std::iter::repeat_n(MIN_SECRET, 100_000))
            .chain((0..8).flat_map(|d| std::iter::repeat_n(MIN_SECRET << d, 1_000)));
        for len in lengths {
            let secret = random_secret(len);
            check_random(Path::new("key"), &secret)
                .unwrap_or_else(|e| panic!("{e}: {secret:02x?}"));
        }
        let dir = test_dir("random");
        for i in 0..50 {
            let path = dir.join(format!("created-{i}"));
            let made = ServerKeys::load_or_create(&path).unwrap();
            let read = ServerKeys::load_or_create(&path).unwrap();
            assert_eq!(reset_token(&made), reset_token(&read));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_repeated_byte_is_refused() {
        let dir = test_dir("repeated");
        for (name, secret) in [
            ("a", vec![b'a'; MIN_SECRET]),
            ("zeros", vec![0; MIN_SECRET]),
            ("long-ff", vec![0xff; MAX_SECRET]),
        ] {
            let p = dir.join(name);
            write_secret(&p, &secret);
            assert_eq!(
                refusal(&p),
                format!(
                    "{}: all {} bytes are 0x{:02x}, not a random secret; write random \
                     bytes to it (head -c 32 /dev/urandom) or remove it to have one made",
                    p.display(),
                    secret.len(),
                    secret[0]
                )
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn too_few_distinct_values_are_refused() {
        let dir = test_dir("distinct");
        // `values` byte values, repeated to `len` bytes.
        let cycling = |values: u8, len: usize| -> Vec<u8> {
            (0..len)
                .map(|i| b'A' + u8::try_from(i % usize::from(values)).unwrap())
                .collect()
        };
        for (values, len, needed) in [
            (2, MIN_SECRET, 8),
            (7, MIN_SECRET, 8),
            (7, 2 * MIN_SECRET - 1, 8),
            (8, 2 * MIN_SECRET, 9),
            (14, MAX_SECRET, 15),
        ] {
            let p = dir.join(format!("bad-{values}-{len}"));
            write_secret(&p, &cycling(values, len));
            assert_eq!(
                refusal(&p),
                format!(
                    "{}: only {values} distinct byte values in {len} bytes, too few \
                     for a random secret (at least {needed} needed); write random bytes to it \
                     (head -c 32 /dev/urandom) or remove it to have one made",
                    p.display()
                )
            );
        }
        // "password" (7 letters) repeated: no secret.
        let p = dir.join("password");
        write_secret(&p, &b"password".repeat(4));
        assert!(refusal(&p).contains(": only 7 distinct byte values in 32 bytes"));
        // Just enough values, and hex text, pass.
        for (values, len) in [(8, MIN_SECRET), (9, 2 * MIN_SECRET), (15, MAX_SECRET)] {
            let p = dir.join(format!("ok-{values}-{len}"));
            write_secret(&p, &cycling(values, len));
            ServerKeys::load_or_create(&p).unwrap();
        }
        let p = dir.join("hex");
        write_secret(&p, &b"0123456789abcdef".repeat(MAX_SECRET / 16));
        ServerKeys::load_or_create(&p).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A key file (existing or to be made) in a directory that others can write in is refused,
    /// sticky bit or not; a missing one is not created there.
    #[cfg(unix)]
    #[test]
    fn a_parent_directory_others_can_write_is_refused() {
        let dir = test_dir("parent-mode");
        for (mode, who) in [
            (0o777, "all users"),
            (0o1777, "all users"),
            (0o703, "all users"),
            (0o770, "its group"),
            (0o1770, "its group"),
            (0o720, "its group"),
        ] {
            let sub = dir.join(format!("dir-{mode:o}"));
            std::fs::create_dir(&sub).unwrap();
            let existing = sub.join("existing");
            write_key(&existing, MIN_SECRET);
            set_mode(&sub, mode);
            let missing = sub.join("missing");
            for p in [&existing, &missing] {
                assert_eq!(
                    refusal(p),
                    format!(
                        "{path}: its directory {sub} has mode {mode:04o}: {who} can \
                         write in it; chmod go-w {sub}, or move the key file to a directory \
                         only you can write",
                        path = p.display(),
                        sub = sub.display()
                    )
                );
            }
            assert!(!missing.exists(), "not created");
            assert_eq!(
                std::fs::read_dir(&sub).unwrap().count(),
                1,
                "nothing created"
            );
        }
        for mode in [0o700, 0o755, 0o711, 0o1755] {
            let sub = dir.join(format!("dir-{mode:o}"));
            std::fs::create_dir(&sub).unwrap();
            set_mode(&sub, mode);
            ServerKeys::load_or_create(&sub.join("key")).unwrap();
            ServerKeys::load_or_create(&sub.join("key")).unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_parent_directory_of_another_user_is_refused() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if me != 0 {
            println!("skipped: only root can give a directory to another user");
            return;
        }
        let dir = test_dir("parent-owner");
        let sub = dir.join("theirs");
        std::fs::create_dir(&sub).unwrap();
        let existing = sub.join("existing");
        write_key(&existing, MIN_SECRET);
        std::os::unix::fs::chown(&sub, Some(65534), None).unwrap();
        let missing = sub.join("missing");
        for p in [&existing, &missing] {
            assert_eq!(
                refusal(p),
                format!(
                    "{}: its directory {} is owned by uid 65534, who can replace the \
                     file; move the key file to a directory of this user's (uid 0) or root's",
                    p.display(),
                    sub.display()
                )
            );
        }
        assert!(!missing.exists(), "not created");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn a_file_with_two_links_is_refused() {
        let dir = test_dir("links");
        let key = dir.join("key");
        write_key(&key, MIN_SECRET);
        let other = dir.join("other-name");
        std::fs::hard_link(&key, &other).unwrap();
        for p in [&key, &other] {
            assert_eq!(
                refusal(p),
                format!(
                    "{}: has 2 hard links; give a file with one link: copy it, don't \
                     link it",
                    p.display()
                )
            );
        }
        std::fs::hard_link(&key, dir.join("third-name")).unwrap();
        assert!(refusal(&key).contains(": has 3 hard links;"));
        std::fs::remove_file(dir.join("third-name")).unwrap();
        std::fs::remove_file(&other).unwrap();
        ServerKeys::load_or_create(&key).unwrap();
        // The temporary file of a `create` that linked it into place is not another name
        // (one left by a creator that died before removing it neither), but only that one.
        let temporary = dir.join(".key.tmp-1-0123456789abcdef");
        std::fs::hard_link(&key, &temporary).unwrap();
        ServerKeys::load_or_create(&key).unwrap();
        std::fs::hard_link(&key, &other).unwrap();
        assert!(refusal(&key).contains(": has 3 hard links;"));
        std::fs::remove_file(&temporary).unwrap();
        assert!(refusal(&key).contains(": has 2 hard links;"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
