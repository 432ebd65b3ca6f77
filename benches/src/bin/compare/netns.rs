//! `compare --mtu N`: every pair runs in a network namespace of its own whose loopback device
//! has an N-byte MTU (root and iproute2's `ip` needed), so that QUIC's datagram size and
//! TCP's segments meet the same link; neqo's sides get `--max-mtu 65527`, so their path MTU
//! discovery goes as far as the link allows.

use std::{ffi::OsStr, process::Command, sync::OnceLock};

/// The namespace the programs run in, once made.
static NAMESPACE: OnceLock<String> = OnceLock::new();

/// Link MTUs `--mtu` takes: what QUIC needs at least (1280 with IPv6's headers) to what a
/// loopback device takes.
pub(super) const MTU_RANGE: std::ops::RangeInclusive<u32> = 1280..=65536;

/// The namespace, deleted when dropped.
#[derive(Debug)]
pub(super) struct Link;

impl Link {
    /// Makes the namespace with its loopback at `mtu` bytes, up.
    pub(super) fn create(mtu: u32) -> Result<Self, String> {
        let name = format!("compare-{}", std::process::id());
        ip(&["netns", "add", &name])?;
        let link = Self;
        NAMESPACE
            .set(name.clone())
            .map_err(|_| "--mtu: a namespace exists already".to_owned())?;
        ip(&[
            "-n",
            &name,
            "link",
            "set",
            "lo",
            "mtu",
            &mtu.to_string(),
            "up",
        ])?;
        Ok(link)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(name) = NAMESPACE.get() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("--mtu: running ip: {e} (iproute2 is needed)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "--mtu: ip {}: {} (root is needed)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A command for `program`: in the namespace with `--mtu`, else as it is.
pub(super) fn command(program: impl AsRef<OsStr>) -> Command {
    match NAMESPACE.get() {
        Some(name) => {
            let mut c = Command::new("ip");
            // `ip netns exec` execs the program: its PID, signals and exit status are the
            // program's own.
            c.args(["netns", "exec", name]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Whether the pairs run on a link of their own (neqo then probes for its MTU).
pub(super) fn active() -> bool {
    NAMESPACE.get().is_some()
}
