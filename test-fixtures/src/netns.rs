//! A network namespace a test or tool makes for itself (root and iproute2's `ip` and `tc`
//! needed), so that it can shape, resize or attack a loopback device without touching the
//! host's: programs run in it through [`Netns::command`], threads join it with
//! [`Netns::enter`]. Deleted when dropped.

use std::{
    ffi::OsStr,
    fs::File,
    io,
    os::fd::AsRawFd,
    path::PathBuf,
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

/// A namespace of our own whose loopback device is up.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

/// Whether this process may make namespaces (runs as root).
#[must_use]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Netns {
    /// A new namespace named after `tag` and this process, its loopback device up.
    ///
    /// # Errors
    /// `ip` missing or refusing (not root).
    pub fn create(tag: &str) -> io::Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{tag}-{}-{n}", std::process::id());
        run("ip", &["netns", "add", &name])?;
        let ns = Self { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (for `ip netns exec`).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where a thread opens it to join it ([`enter`]).
    #[must_use]
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    /// `ip -n NS ARGS`.
    ///
    /// # Errors
    /// As `ip`.
    pub fn ip(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// `tc` in the namespace.
    ///
    /// # Errors
    /// As `tc`.
    pub fn tc(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["netns", "exec", self.name.as_str(), "tc"];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Sets the loopback device's MTU.
    ///
    /// # Errors
    /// As `ip`.
    pub fn set_loopback_mtu(&self, mtu: u32) -> io::Result<()> {
        self.ip(&["link", "set", "lo", "mtu", &mtu.to_string()])
    }

    /// Gives loopback a token-bucket qdisc of `rate` (tc's syntax: `100mbit`): everything
    /// sent on it, in both directions of a loopback flow, leaves at that rate, so a send
    /// buffer fills and drains steadily.
    ///
    /// # Errors
    /// As `tc`.
    pub fn throttle_loopback(&self, rate: &str) -> io::Result<()> {
        self.tc(&[
            "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate, "burst", "16kb", "limit",
            "4mb",
        ])
    }

    /// Throttles only the IPv4 datagrams sent from UDP `port` to `rate`: a hierarchical
    /// token bucket on loopback whose first class takes them, the rest passing through a
    /// class too fast to matter. Its queue is long enough that the sender's socket buffer
    /// fills first, so a server on that port finds its socket write-blocked (`EAGAIN`, not a
    /// drop) while everything sent to it arrives at full speed. (This kernel has neither
    /// `prio` nor `fq`.)
    ///
    /// # Errors
    /// As `tc`.
    pub fn throttle_source_port(&self, port: u16, rate: &str) -> io::Result<()> {
        self.tc(&[
            "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "2", "r2q",
            "100000",
        ])?;
        self.tc(&[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", rate,
            "ceil", rate,
        ])?;
        self.tc(&[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:2", "htb", "rate", "100gbit",
        ])?;
        self.tc(&[
            "qdisc", "add", "dev", "lo", "parent", "1:1", "handle", "10:", "pfifo", "limit",
            "100000",
        ])?;
        let port = port.to_string();
        self.tc(&[
            "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "protocol", "17", "0xff", "match", "ip", "sport", &port, "0xffff",
            "flowid", "1:1",
        ])
    }

    /// A command for `program` in the namespace: `ip netns exec NS PROGRAM`, which execs the
    /// program (its PID, signals and exit status are the program's own).
    #[must_use]
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Moves the calling thread into the namespace ([`enter`]).
    ///
    /// # Errors
    /// As `setns`.
    pub fn enter(&self) -> io::Result<()> {
        enter(&self.path())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// Moves the calling thread into the namespace at `path`, and onto one CPU.
///
/// The CPU: a loopback device with a qdisc is drained by whichever thread or softirq runs the
/// qdisc, and loopback delivers each datagram to the backlog of the CPU that drained it. Two
/// threads on different CPUs (a sender and an attacker, both sending through the throttled
/// device) therefore reorder each other's datagrams in the kernel. With every thread of the
/// namespace on one CPU the kernel keeps the order, so tests can assert the order sent.
///
/// # Errors
/// As `open`, `setns` and `sched_setaffinity`.
pub fn enter(path: &std::path::Path) -> io::Result<()> {
    let ns = File::open(path)?;
    // SAFETY: a valid namespace fd; setns only changes this thread's network namespace.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    pin_to_first_cpu()
}

/// Pins the calling thread to the lowest-numbered CPU it may run on.
fn pin_to_first_cpu() -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data that CPU_ZERO/CPU_SET initialise; the calls get and set
    // the calling thread's (pid 0) mask, with the size of the set they are given.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &raw mut allowed) != 0 {
            return Err(io::Error::last_os_error());
        }
        let cpu = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &allowed))
            .ok_or_else(|| io::Error::other("no CPU allowed"))?;
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const one) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Runs `program args`, failing with its stderr and what it needs.
fn run(program: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("running {program}: {e} (iproute2 is needed)"),
        )
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{program} {}: {} (root is needed)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
