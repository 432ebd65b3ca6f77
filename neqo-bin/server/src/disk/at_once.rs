//! Reading a small file on the thread that wants it, when nothing in the read can block: on
//! Linux, `openat2` with `RESOLVE_CACHED` (the path walk fails with `EAGAIN` unless every
//! component is in the kernel's lookup cache, Linux 5.12) and `RESOLVE_BENEATH` (nothing
//! outside the root), then `preadv2` with `RWF_NOWAIT` (fails with `EAGAIN` unless the bytes
//! are in the page cache). Any failure, or a kernel without these, says "not at once" and the
//! caller takes the blocking pool. Elsewhere there is no such read.

use std::path::Path;

use bytes::Bytes;

/// A directory held open to read files under it at once.
#[derive(Debug)]
pub(super) struct Dir {
    #[cfg(target_os = "linux")]
    fd: Option<std::os::fd::OwnedFd>,
}

impl Dir {
    /// `path` held open, or nothing where it cannot be (the reads then never happen at once).
    pub(super) fn open(path: &Path) -> Self {
        #[cfg(target_os = "linux")]
        {
            Self {
                fd: linux::open_dir(path).ok(),
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = path;
            Self {}
        }
    }

    /// The whole of `rel` (relative, one plain name per component), if it is a regular file
    /// of at most `max` bytes under the directory, and its path and bytes are cached.
    pub(super) fn read(&self, rel: &Path, max: usize) -> Option<Bytes> {
        #[cfg(target_os = "linux")]
        {
            linux::read(self.fd.as_ref()?, rel, max)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (rel, max);
            None
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::{
        ffi::CString,
        fs::File,
        io,
        os::{
            fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
            unix::ffi::OsStrExt as _,
        },
        path::Path,
        sync::atomic::{AtomicBool, Ordering},
    };

    use bytes::{Bytes, BytesMut};

    /// Cleared once the kernel says it has no `openat2`, `RESOLVE_CACHED` or `RWF_NOWAIT`:
    /// no read is tried at once again.
    static SUPPORTED: AtomicBool = AtomicBool::new(true);

    pub(super) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
        let c = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: `c` is a NUL-terminated path that outlives the call; the flags ask for a
        // descriptor that reads nothing (O_PATH).
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Whether `e` says the kernel lacks what the read needs.
    fn unsupported(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP)
        )
    }

    pub(super) fn read(dir: &OwnedFd, rel: &Path, max: usize) -> Option<Bytes> {
        if !SUPPORTED.load(Ordering::Relaxed) {
            return None;
        }
        let c = CString::new(rel.as_os_str().as_bytes()).ok()?;
        // SAFETY: `open_how` is three integers (libc marks it non-exhaustive, so it cannot be
        // written as a literal); all zeros is a valid value of each.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        // O_NONBLOCK: a FIFO under the root opens without waiting for a writer (and is then
        // refused as no regular file).
        how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64;
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_CACHED | libc::RESOLVE_NO_MAGICLINKS;
        // SAFETY: `dir` is an open directory descriptor, `c` a NUL-terminated path and `how`
        // an `open_how` of the size passed, all alive for the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &raw const how,
                size_of::<libc::open_how>(),
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if unsupported(&e) {
                SUPPORTED.store(false, Ordering::Relaxed);
            }
            return None;
        }
        // SAFETY: the kernel just returned this descriptor, owned by nothing else.
        let file = unsafe { File::from_raw_fd(i32::try_from(fd).ok()?) };
        let meta = file.metadata().ok()?;
        let len = usize::try_from(meta.len()).ok()?;
        if !meta.is_file() || len > max {
            return None;
        }
        let mut buf = BytesMut::zeroed(len);
        if len > 0 {
            let iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: len,
            };
            // SAFETY: `iov` describes `buf`'s `len` initialized bytes, which outlive the call;
            // `file` is open for reading.
            let n =
                unsafe { libc::preadv2(file.as_raw_fd(), &raw const iov, 1, 0, libc::RWF_NOWAIT) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if unsupported(&e) {
                    SUPPORTED.store(false, Ordering::Relaxed);
                }
                return None;
            }
            // Short: not all of it is cached (or it shrank): the blocking pool reads it.
            if usize::try_from(n).ok()? != len {
                return None;
            }
        }
        Some(buf.freeze())
    }
}
