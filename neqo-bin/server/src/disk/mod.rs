//! The server's files, read off the driver thread.
//!
//! The driver thread must never block on a disk (or a network file system), so every open and
//! read runs as a job on tokio's blocking pool ([`neqo_driver::Jobs`]), which wakes the driver
//! when it is done.
//!
//! Memory stays bounded because the server keeps at most one job in flight per stream, each
//! moving at most [`CHUNK`] bytes: it reads the next chunk only once the stream took the last
//! one, so a slow peer holds the reads back through flow control instead of filling memory.
//!
//! One exception: a small file whose path and bytes are in the kernel's caches is read on the
//! thread that wants it ([`Root::read_at_once`]): that read cannot block, and a hand-off to
//! the blocking pool (waking one of its threads, and the driver again with the result) cost
//! more than the whole rest of a small request.

mod at_once;

use std::{
    fs::File,
    io::{self, Read as _},
    path::Path,
    sync::Arc,
};

use bytes::{Bytes, BytesMut};
use neqo_protocols::pattern::CHUNK;

/// A server's root directory: its canonical path, held open so that small cached files can be
/// read at once.
#[derive(Debug)]
pub struct Root {
    path: Arc<Path>,
    dir: at_once::Dir,
}

impl Root {
    /// The root at `canonical` (see [`neqo_protocols::hq::canonical_root`]).
    #[must_use]
    pub fn new(canonical: &Path) -> Self {
        Self {
            path: Arc::from(canonical),
            dir: at_once::Dir::open(canonical),
        }
    }

    /// Its canonical path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole of the file at `rel` (a path [`neqo_protocols::hq::relative_path`] accepted), when
    /// it can be read without blocking: at most [`CHUNK`] bytes, a regular file under the
    /// root, its path in the kernel's lookup cache and its bytes in the page cache (Linux
    /// 5.12 and later). `None` otherwise: the blocking pool opens it, by the full rules.
    #[must_use]
    pub fn read_at_once(&self, rel: &Path) -> Option<Bytes> {
        self.dir.read(rel, CHUNK)
    }
}

/// A chunk read from a file being sent, and the file to read the rest from.
#[derive(Debug)]
pub struct FileChunk {
    /// The file, positioned after `data`; `None` after the last chunk (it is closed by the
    /// job, off the driver thread).
    pub file: Option<File>,
    /// The chunk: at most [`CHUNK`] bytes.
    pub data: Bytes,
    /// Bytes left to send after `data`.
    pub remaining: u64,
}

/// Reads the next chunk of a file sent as `remaining` more bytes (its length when opened, less
/// what was read): exactly `min(remaining, CHUNK)` bytes. Blocking; run it with [`Jobs`](neqo_driver::Jobs).
///
/// # Errors
/// A read error, or the file ending early (it shrank since it was opened): a body can only be
/// sent whole, and a short one would pass for complete.
pub fn read_chunk(mut file: File, remaining: u64) -> io::Result<FileChunk> {
    let want = usize::try_from(remaining).unwrap_or(usize::MAX).min(CHUNK);
    let mut buf = BytesMut::zeroed(want);
    let mut filled = 0;
    while filled < want {
        match file.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the file ended {} bytes early", remaining - filled as u64),
                ));
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let remaining = remaining - want as u64;
    Ok(FileChunk {
        file: (remaining > 0).then_some(file),
        data: buf.freeze(),
        remaining,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("neqo-bin-disk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn reads_chunk_by_chunk_and_refuses_a_shrunk_file() {
        let dir = scratch("read");
        let path = dir.join("f");
        let content: Vec<u8> = (0..CHUNK as u32 + 100).map(|i| (i * 7) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let len = content.len() as u64;
        let c = read_chunk(File::open(&path).unwrap(), len).unwrap();
        assert_eq!((c.data.len(), c.remaining), (CHUNK, 100));
        let c2 = read_chunk(c.file.unwrap(), c.remaining).unwrap();
        assert_eq!((c2.data.len(), c2.remaining), (100, 0));
        assert!(c2.file.is_none(), "closed after the last chunk");
        assert_eq!([&c.data[..], &c2.data[..]].concat(), content);
        // The length seen at open is what is sent, even if the file grows.
        let f = File::open(&path).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"more")
            .unwrap();
        let c3 = read_chunk(f, 10).unwrap();
        assert_eq!((&c3.data[..], c3.remaining), (&content[..10], 0));
        // A file that shrinks under the reader is an error, not a short body.
        let f = File::open(&path).unwrap();
        std::fs::write(&path, b"tiny").unwrap();
        let e = read_chunk(f, len).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("early"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod at_once_tests {
    use std::path::Path;

    use super::{CHUNK, Root};

    /// A root with a small file, one a byte over [`CHUNK`], a directory, a FIFO and a link
    /// out of the root; removed when dropped.
    struct Tree(std::path::PathBuf);

    impl Tree {
        fn new() -> Self {
            let base = std::env::temp_dir().join(format!("neqo-at-once-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            let root = base.join("www");
            std::fs::create_dir_all(root.join("dir")).unwrap();
            std::fs::write(root.join("small"), b"hello").unwrap();
            std::fs::write(root.join("empty"), b"").unwrap();
            std::fs::write(root.join("big"), vec![7; CHUNK + 1]).unwrap();
            std::fs::write(base.join("secret"), b"outside").unwrap();
            std::os::unix::fs::symlink(base.join("secret"), root.join("out")).unwrap();
            std::os::unix::fs::symlink("small", root.join("alias")).unwrap();
            // A path walk that follows a link whose access time is due for an update
            // (relatime: not after its change time, as at creation within one clock tick)
            // leaves the kernel's lock-free walk, which RESOLVE_CACHED refuses: the link's
            // access time is set ahead, as a link followed before would have it.
            let alias = std::ffi::CString::new(root.join("alias").to_str().unwrap()).unwrap();
            let ahead = libc::timespec {
                tv_sec: libc::time_t::try_from(
                    (std::time::SystemTime::now() + std::time::Duration::from_secs(60))
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_secs(),
                )
                .unwrap(),
                tv_nsec: 0,
            };
            let omit = libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            };
            // SAFETY: a NUL-terminated path and an array of two timespecs, alive for the call.
            let rc = unsafe {
                libc::utimensat(
                    libc::AT_FDCWD,
                    alias.as_ptr(),
                    [ahead, omit].as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            };
            assert_eq!(rc, 0);
            let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path alive for the call.
            assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
            Self(base)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_small_cached_file_is_read_at_once_and_nothing_else_is() {
        let tree = Tree::new();
        let root = Root::new(&tree.0.join("www").canonicalize().unwrap());
        let read = |p: &str| root.read_at_once(Path::new(p));
        // Just written: their bytes are cached; a first read of each warms the lookup cache
        // (RESOLVE_CACHED refuses a path, or a link's target, not looked up yet).
        for warm in ["small", "empty", "alias"] {
            let _ = read(warm);
        }
        assert_eq!(read("small").as_deref(), Some(&b"hello"[..]));
        assert_eq!(read("empty").as_deref(), Some(&b""[..]));
        assert_eq!(
            read("alias").as_deref(),
            Some(&b"hello"[..]),
            "a link within the root"
        );
        for refused in [
            "big",
            "dir",
            "fifo",
            "out",
            "missing",
            "../secret",
            "/etc/passwd",
        ] {
            assert_eq!(read(refused), None, "{refused}");
        }
    }
}
