//! What the command lines ask of the system that the standard library does not say: the
//! user this process acts as, and whether it may write a path.

use std::path::Path;

/// The effective user ID: whose files this process may change.
#[cfg(unix)]
pub(super) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether this process (its effective user and groups) may write `path`, as an open for
/// writing would find; nothing is opened or created.
///
/// # Errors
/// `path` does not exist or cannot be looked up, other than for want of permission.
#[cfg(unix)]
pub(super) fn writable(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt as _;

    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
    // SAFETY: `c` is a NUL-terminated string that lives across the call, which only reads it.
    let rc = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EROFS | libc::EPERM) => Ok(false),
        _ => Err(e),
    }
}

/// Whether `path` may be written: not read-only, the only permission there is to ask about.
///
/// # Errors
/// `path` cannot be looked up.
#[cfg(not(unix))]
pub(super) fn writable(path: &Path) -> std::io::Result<bool> {
    Ok(!std::fs::metadata(path)?.permissions().readonly())
}
