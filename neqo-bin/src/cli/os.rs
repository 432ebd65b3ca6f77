//! What the command lines ask of the system that the standard library does not say: the
//! user this process acts as.

/// The effective user ID: whose files this process may change.
#[cfg(unix)]
pub(super) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
