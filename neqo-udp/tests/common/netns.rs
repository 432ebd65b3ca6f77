//! A network namespace a test makes for itself (root and iproute2's `ip` and `tc` needed),
//! so that it can shape or attack a loopback device without touching the host's.

use std::{fs::File, os::fd::AsRawFd, process::Command};

pub struct Netns(String);

impl Netns {
    /// A new namespace whose loopback device is up.
    pub fn create(tag: &str) -> Self {
        let name = format!("neqo-udp-{tag}-{}", std::process::id());
        let ns = Self(name.clone());
        run(&["ip", "netns", "add", &name]);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Gives loopback a 100 Mbit/s token-bucket qdisc: a 1200-byte datagram leaves every
    /// ~0.1 ms, so a send buffer of a few datagrams fills at once and drains steadily.
    pub fn throttle_loopback(&self) {
        self.exec(&[
            "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "100mbit", "burst", "16kb",
            "limit", "4mb",
        ]);
    }

    /// Sets the loopback device's MTU.
    pub fn set_loopback_mtu(&self, mtu: u32) {
        self.exec(&["ip", "link", "set", "lo", "mtu", &mtu.to_string()]);
    }

    fn exec(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.0];
        all.extend_from_slice(args);
        run(&all);
    }

    /// Runs `f` on a thread that has joined the namespace, on a current-thread runtime.
    pub fn run<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        let path = format!("/run/netns/{}", self.0);
        std::thread::spawn(move || {
            enter(&path);
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f);
        })
        .join()
        .expect("test thread");
    }

    /// The path a thread opens to join the namespace with [`enter`].
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}

/// Moves the calling thread into the namespace at `path`, and onto one CPU.
///
/// The CPU: a loopback device with a qdisc is drained by whichever thread or softirq runs the
/// qdisc, and loopback delivers each datagram to the backlog of the CPU that drained it. Two
/// threads on different CPUs (a sender and an attacker, both sending through the throttled
/// device) therefore reorder each other's datagrams in the kernel. With every thread of the
/// namespace on one CPU the kernel keeps the order, so tests can assert the order we sent.
pub fn enter(path: &str) {
    let ns = File::open(path).expect("open namespace");
    // SAFETY: a valid namespace fd; setns only changes this thread's network namespace.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    pin_to_first_cpu();
}

/// Pins the calling thread to the lowest-numbered CPU it may run on.
fn pin_to_first_cpu() {
    // SAFETY: cpu_set_t is plain data that CPU_ZERO/CPU_SET initialise; the calls get and set
    // the calling thread's (pid 0) mask, with the size of the set they are given.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        let rc = libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &raw mut allowed);
        assert_eq!(
            rc,
            0,
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        );
        let cpu = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &allowed))
            .expect("some CPU is allowed");
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        let rc = libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const one);
        assert_eq!(
            rc,
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
