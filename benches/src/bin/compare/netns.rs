//! `compare --mtu N`: every pair runs in a network namespace of its own whose loopback device
//! has an N-byte MTU (root and iproute2's `ip` needed), so that QUIC's datagram size and
//! TCP's segments meet the same link; neqo's sides run at their defaults, whose path MTU
//! discovery on the sending side follows the route as far as the link allows.

use std::{ffi::OsStr, process::Command, sync::OnceLock};

#[cfg(target_os = "linux")]
use test_fixtures::netns::Netns;

/// Elsewhere there are no network namespaces: `--mtu` is refused, and this stand-in lets the
/// rest build.
#[cfg(not(target_os = "linux"))]
#[derive(Debug)]
struct Netns;

#[cfg(not(target_os = "linux"))]
impl Netns {
    fn create(_tag: &str) -> Result<Self, &'static str> {
        Err("network namespaces are Linux's")
    }

    fn set_loopback_mtu(&self, _mtu: u32) -> Result<(), &'static str> {
        Err("network namespaces are Linux's")
    }

    fn command(&self, program: impl AsRef<OsStr>) -> Command {
        Command::new(program)
    }
}

/// The namespace the programs run in, once made; deleted by [`Link`]'s drop.
static NAMESPACE: OnceLock<std::sync::Mutex<Option<Netns>>> = OnceLock::new();

/// Link MTUs `--mtu` takes: what QUIC needs at least (1280 with IPv6's headers) to what a
/// loopback device takes.
pub(super) const MTU_RANGE: std::ops::RangeInclusive<u32> = 1280..=65536;

/// The namespace, deleted when dropped.
#[derive(Debug)]
pub(super) struct Link;

impl Link {
    /// Makes the namespace with its loopback at `mtu` bytes, up.
    pub(super) fn create(mtu: u32) -> Result<Self, String> {
        let ns = Netns::create("compare").map_err(|e| format!("--mtu: {e}"))?;
        ns.set_loopback_mtu(mtu)
            .map_err(|e| format!("--mtu: {e}"))?;
        NAMESPACE
            .set(std::sync::Mutex::new(Some(ns)))
            .map_err(|_| "--mtu: a namespace exists already".to_owned())?;
        Ok(Self)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(ns) = NAMESPACE.get() {
            drop(
                ns.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take(),
            );
        }
    }
}

/// A command for `program`: in the namespace with `--mtu`, else as it is.
pub(super) fn command(program: impl AsRef<OsStr>) -> Command {
    let ns = NAMESPACE
        .get()
        .map(|ns| ns.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    match ns.as_deref() {
        Some(Some(ns)) => ns.command(program),
        _ => Command::new(program),
    }
}

/// Whether the pairs run on a link of their own (neqo then probes for its MTU).
pub(super) fn active() -> bool {
    NAMESPACE.get().is_some()
}
