//! What this module needs that libc declares for Linux but not for Android, whose kernel is
//! the same: the classic BPF opcodes, `SO_MEMINFO` and its drops index, and bionic's
//! `recvmmsg`/`sendmmsg` (in bionic since API level 21, the oldest Rust's Android targets
//! support). On Linux they are libc's; Android's copies are the kernel's values
//! (`linux/bpf_common.h`, `linux/filter.h`, `asm-generic/socket.h`, `linux/sock_diag.h`) and
//! bionic's prototypes, and a test on Linux checks them against libc's.

#[cfg(all(test, target_os = "linux"))]
pub(super) use libc::BPF_MAXINSNS;
#[cfg(target_os = "linux")]
pub(super) use libc::{
    BPF_A, BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_JA, BPF_JEQ, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K,
    BPF_LD, BPF_LEN, BPF_MISC, BPF_MOD, BPF_RET, BPF_TAX, BPF_TXA, BPF_W, SK_MEMINFO_DROPS,
    SO_MEMINFO, recvmmsg, sendmmsg,
};

#[cfg(target_os = "android")]
pub(super) use android::*;

/// Android's copies; also built for the Linux tests that compare them with libc's.
#[cfg(any(target_os = "android", all(test, target_os = "linux")))]
#[allow(dead_code, reason = "the Linux tests read only some of them")]
mod android {
    use libc::{c_int, c_uint, mmsghdr, timespec};

    pub(crate) const BPF_LD: u32 = 0x00;
    pub(crate) const BPF_ALU: u32 = 0x04;
    pub(crate) const BPF_JMP: u32 = 0x05;
    pub(crate) const BPF_RET: u32 = 0x06;
    pub(crate) const BPF_MISC: u32 = 0x07;
    pub(crate) const BPF_W: u32 = 0x00;
    pub(crate) const BPF_B: u32 = 0x10;
    pub(crate) const BPF_ABS: u32 = 0x20;
    pub(crate) const BPF_LEN: u32 = 0x80;
    pub(crate) const BPF_AND: u32 = 0x50;
    pub(crate) const BPF_MOD: u32 = 0x90;
    pub(crate) const BPF_JA: u32 = 0x00;
    pub(crate) const BPF_JEQ: u32 = 0x10;
    pub(crate) const BPF_JGT: u32 = 0x20;
    pub(crate) const BPF_JSET: u32 = 0x40;
    pub(crate) const BPF_K: u32 = 0x00;
    pub(crate) const BPF_A: u32 = 0x10;
    pub(crate) const BPF_TAX: u32 = 0x00;
    pub(crate) const BPF_TXA: u32 = 0x80;
    pub(crate) const BPF_MAXINSNS: c_int = 4096;
    pub(crate) const SO_MEMINFO: c_int = 55;
    pub(crate) const SK_MEMINFO_DROPS: c_int = 8;

    // SAFETY: the prototypes are bionic's (`sys/socket.h`), with the pointer types libc gives
    // the same functions on Linux; callers uphold the syscalls' contracts.
    unsafe extern "C" {
        pub(crate) fn recvmmsg(
            fd: c_int,
            msgs: *mut mmsghdr,
            count: c_uint,
            flags: c_int,
            timeout: *mut timespec,
        ) -> c_int;
        pub(crate) fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, count: c_uint, flags: c_int)
        -> c_int;
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use libc::{c_int, c_uint, mmsghdr, timespec};

    use super::android;

    type Recv = unsafe extern "C" fn(c_int, *mut mmsghdr, c_uint, c_int, *mut timespec) -> c_int;
    type Send = unsafe extern "C" fn(c_int, *mut mmsghdr, c_uint, c_int) -> c_int;
    // Android's prototypes have libc's Linux types, or this does not compile.
    const _: ([Recv; 2], [Send; 2]) = (
        [android::recvmmsg, libc::recvmmsg],
        [android::sendmmsg, libc::sendmmsg],
    );

    #[test]
    fn android_values_are_linux_values() {
        let pairs = [
            (android::BPF_LD, libc::BPF_LD),
            (android::BPF_ALU, libc::BPF_ALU),
            (android::BPF_JMP, libc::BPF_JMP),
            (android::BPF_RET, libc::BPF_RET),
            (android::BPF_MISC, libc::BPF_MISC),
            (android::BPF_W, libc::BPF_W),
            (android::BPF_B, libc::BPF_B),
            (android::BPF_ABS, libc::BPF_ABS),
            (android::BPF_LEN, libc::BPF_LEN),
            (android::BPF_AND, libc::BPF_AND),
            (android::BPF_MOD, libc::BPF_MOD),
            (android::BPF_JA, libc::BPF_JA),
            (android::BPF_JEQ, libc::BPF_JEQ),
            (android::BPF_JGT, libc::BPF_JGT),
            (android::BPF_JSET, libc::BPF_JSET),
            (android::BPF_K, libc::BPF_K),
            (android::BPF_A, libc::BPF_A),
            (android::BPF_TAX, libc::BPF_TAX),
            (android::BPF_TXA, libc::BPF_TXA),
        ];
        for (i, (ours, libc)) in pairs.iter().enumerate() {
            assert_eq!(ours, libc, "opcode {i} of the list");
        }
        assert_eq!(android::BPF_MAXINSNS, libc::BPF_MAXINSNS);
        assert_eq!(android::SK_MEMINFO_DROPS, libc::SK_MEMINFO_DROPS);
        // Android runs on the architectures of the generic socket options (not MIPS, SPARC,
        // Alpha or PA-RISC, whose values differ).
        assert_eq!(android::SO_MEMINFO, libc::SO_MEMINFO);
    }
}
