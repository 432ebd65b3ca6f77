//! `SO_REUSEPORT` groups: the option itself and the classic BPF program that steers each
//! datagram to the group's socket named by a byte of its QUIC destination connection ID.
//!
//! What the kernel does with the program (net/core/sock_reuseport.c, and the UDP lookup in
//! net/ipv4/udp.c and net/ipv6/udp.c):
//! - UDP calls `reuseport_select_sock(sk, hash, skb, sizeof(struct udphdr))`, and
//!   `run_bpf_filter` pulls the skb by that `hdr_len` before running the program: its data
//!   (`BPF_ABS` offset 0, and `BPF_LEN`) start at the UDP payload, the QUIC packet.
//! - `run_bpf_filter` returns `reuse->socks[index]`, but NULL when `index >= socks` (the
//!   group's size), and `reuseport_select_sock` then falls back to
//!   `reuseport_select_sock_by_hash`, the kernel's own 4-tuple hash. So the program returns
//!   [`FALLBACK`] (`u32::MAX`) where it has no answer.
//! - `reuse->socks` is in bind order (`__reuseport_add_sock` appends), but closing a socket
//!   moves the group's last socket into its slot (`__reuseport_detach_sock`): the group must
//!   stay whole for as long as it serves.
//! - A classic BPF load beyond the packet ends the program with 0, which would pick socket 0
//!   rather than fall back; the program therefore compares every offset with the length
//!   first.

use std::{io, mem, os::fd::AsRawFd, ptr};

use libc::{sock_filter, sock_fprog};

use super::abi::{
    BPF_A, BPF_ABS, BPF_ALU, BPF_AND, BPF_B, BPF_JA, BPF_JEQ, BPF_JGT, BPF_JMP, BPF_JSET, BPF_K,
    BPF_LD, BPF_LEN, BPF_MISC, BPF_MOD, BPF_RET, BPF_TAX, BPF_TXA, BPF_W,
};

use crate::reuseport::{HANDSHAKE_TYPE, LONG_TYPE_MASK};

use super::UdpSockRef;

/// The steering program is attached with `SO_ATTACH_REUSEPORT_CBPF`.
pub(crate) const HAS_STEERING: bool = true;

/// The program's "no answer": an index no group has, so the kernel uses its hash.
pub(crate) const FALLBACK: u32 = u32::MAX;

/// Sets `SO_REUSEPORT` (before bind, or it has no effect on the bound socket).
pub(crate) fn set_reuse_port(sock: UdpSockRef<'_>) -> io::Result<()> {
    sock.with_socket2(|s| s.set_reuse_port(true))
}

/// An instruction without jump targets (BPF opcodes fit in 16 bits).
const fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A conditional jump from instruction `at`: to the next one when true, to `else_to` when
/// false (both forward, as classic BPF requires).
const fn jump_unless(code: u32, k: u32, at: usize, else_to: usize) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: (else_to - at - 1) as u8,
        k,
    }
}

/// The steering program for a group of `count` sockets whose worker byte is byte `offset` of
/// the destination connection ID. Pure, so that tests can run it without a kernel.
///
/// ```text
///  0  A = len                  payload length
///  1  X = A
///  2  if A > 0 else FALLBACK
///  3  A = byte[0]
///  4  if A & 0x80 else SHORT   long header?
///  5  A = A & 0x30             its type
///  6  if A == 0x20 else FALLBACK   Handshake: a DCID the server chose
///  7  A = X
///  8  if A > 6 + offset else FALLBACK
///  9  A = byte[5]              DCID length
/// 10  if A > offset else FALLBACK
/// 11  A = byte[6 + offset]
/// 12  goto SELECT
/// 13  SHORT: A = X             short header: the DCID starts at byte 1
/// 14  if A > 1 + offset else FALLBACK
/// 15  A = byte[1 + offset]
/// 16  SELECT: A = A % count
/// 17  return A
/// 18  FALLBACK: return u32::MAX
/// ```
pub(crate) fn cid_steering_program(offset: u8, count: u32) -> Vec<sock_filter> {
    const SHORT: usize = 13;
    const SELECT: usize = 16;
    const FALLBACK_AT: usize = 18;
    assert!(count > 0, "a group has at least one socket");
    let offset = u32::from(offset);
    let program = vec![
        stmt(BPF_LD | BPF_W | BPF_LEN, 0),
        stmt(BPF_MISC | BPF_TAX, 0),
        jump_unless(BPF_JMP | BPF_JGT | BPF_K, 0, 2, FALLBACK_AT),
        stmt(BPF_LD | BPF_B | BPF_ABS, 0),
        jump_unless(BPF_JMP | BPF_JSET | BPF_K, 0x80, 4, SHORT),
        // Long header: only a Handshake packet's DCID is the server's; Initial and 0-RTT
        // packets carry one the client chose, and go by the kernel's 4-tuple hash.
        stmt(BPF_ALU | BPF_AND | BPF_K, u32::from(LONG_TYPE_MASK)),
        jump_unless(
            BPF_JMP | BPF_JEQ | BPF_K,
            u32::from(HANDSHAKE_TYPE),
            6,
            FALLBACK_AT,
        ),
        // Flags, version (4 bytes), DCID length, DCID.
        stmt(BPF_MISC | BPF_TXA, 0),
        jump_unless(BPF_JMP | BPF_JGT | BPF_K, 6 + offset, 8, FALLBACK_AT),
        stmt(BPF_LD | BPF_B | BPF_ABS, 5),
        jump_unless(BPF_JMP | BPF_JGT | BPF_K, offset, 10, FALLBACK_AT),
        stmt(BPF_LD | BPF_B | BPF_ABS, 6 + offset),
        stmt(BPF_JMP | BPF_JA, (SELECT - 12 - 1) as u32),
        // Short header: flags, DCID (of the server's length, not on the wire).
        stmt(BPF_MISC | BPF_TXA, 0),
        jump_unless(BPF_JMP | BPF_JGT | BPF_K, 1 + offset, 14, FALLBACK_AT),
        stmt(BPF_LD | BPF_B | BPF_ABS, 1 + offset),
        stmt(BPF_ALU | BPF_MOD | BPF_K, count),
        stmt(BPF_RET | BPF_A, 0),
        stmt(BPF_RET | BPF_K, FALLBACK),
    ];
    debug_assert_eq!(program.len(), FALLBACK_AT + 1);
    program
}

/// Attaches the steering program to the group `sock` belongs to (`SO_ATTACH_REUSEPORT_CBPF`;
/// it applies to every socket of the group, whichever one it is attached through).
pub(crate) fn attach_cid_steering(
    sock: UdpSockRef<'_>,
    offset: u8,
    count: usize,
) -> io::Result<()> {
    let count = u32::try_from(count)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "group too large"))?;
    let mut program = cid_steering_program(offset, count);
    let fprog = sock_fprog {
        len: libc::c_ushort::try_from(program.len()).expect("a short program"),
        filter: program.as_mut_ptr(),
    };
    // SAFETY: `fprog` is a live `sock_fprog` whose `filter` points to `program`'s `len`
    // instructions, alive until after the call; the kernel copies the program during the call
    // and keeps no pointer to our memory. The length passed is the size of `fprog`.
    let rc = unsafe {
        libc::setsockopt(
            sock.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            ptr::from_ref(&fprog).cast(),
            mem::size_of::<sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CidSteering;

    /// A classic BPF interpreter for the opcodes the program uses, with the kernel's
    /// semantics: a load beyond the packet ends the program with 0. Panics on any other
    /// opcode, a jump out of the program, or running off its end.
    fn run(program: &[sock_filter], packet: &[u8]) -> u32 {
        let len = u32::try_from(packet.len()).unwrap();
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let insn = program.get(pc).expect("the program ran off its end");
            let (code, k) = (u32::from(insn.code), insn.k);
            pc += 1;
            match code {
                c if c == BPF_LD | BPF_W | BPF_LEN => a = len,
                c if c == BPF_LD | BPF_B | BPF_ABS => match packet.get(k as usize) {
                    Some(&b) => a = u32::from(b),
                    None => return 0,
                },
                c if c == BPF_MISC | BPF_TAX => x = a,
                c if c == BPF_MISC | BPF_TXA => a = x,
                c if c == BPF_ALU | BPF_MOD | BPF_K => {
                    assert_ne!(k, 0, "the kernel refuses a modulo by 0");
                    a %= k;
                }
                c if c == BPF_ALU | BPF_AND | BPF_K => a &= k,
                c if c == BPF_JMP | BPF_JA => pc += k as usize,
                c if c == BPF_JMP | BPF_JEQ | BPF_K => {
                    pc += usize::from(if a == k { insn.jt } else { insn.jf });
                }
                c if c == BPF_JMP | BPF_JGT | BPF_K => {
                    pc += usize::from(if a > k { insn.jt } else { insn.jf });
                }
                c if c == BPF_JMP | BPF_JSET | BPF_K => {
                    pc += usize::from(if a & k != 0 { insn.jt } else { insn.jf });
                }
                c if c == BPF_RET | BPF_A => return a,
                c if c == BPF_RET | BPF_K => return k,
                _ => panic!("opcode {code:#x} at {} not interpreted", pc - 1),
            }
        }
    }

    /// Every worker byte; under Miri, which interprets the interpreter slowly, every 17th
    /// (which still hits every residue for the counts tested) and 255.
    fn worker_bytes() -> impl Iterator<Item = u8> {
        let step = if cfg!(miri) { 17 } else { 1 };
        (0..=255u8).step_by(step).chain([255])
    }

    /// A short-header packet with `worker` at byte `offset` of an 8-byte DCID.
    fn short(offset: u8, worker: u8) -> Vec<u8> {
        let mut p = vec![0x40];
        let mut dcid = [0xa5u8; 8];
        dcid[usize::from(offset)] = worker;
        p.extend_from_slice(&dcid);
        p.extend_from_slice(&[0x11; 20]);
        p
    }

    /// A long-header Handshake packet with a `dcid_len`-byte DCID holding `worker` at byte
    /// `offset` (when it is that long).
    fn long(offset: u8, dcid_len: u8, worker: u8) -> Vec<u8> {
        let mut p = vec![0xe0, 0, 0, 0, 1, dcid_len];
        let mut dcid = vec![0x5au8; usize::from(dcid_len)];
        if let Some(b) = dcid.get_mut(usize::from(offset)) {
            *b = worker;
        }
        p.extend_from_slice(&dcid);
        p.extend_from_slice(&[0, 0, 0]); // SCID length, token length, length...
        p.extend_from_slice(&[0x22; 20]);
        p
    }

    #[test]
    fn short_header_selects_byte_mod_count() {
        for count in [1u32, 2, 3, 4, 7, 256] {
            for offset in [0u8, 3, 7] {
                let program = cid_steering_program(offset, count);
                for worker in worker_bytes() {
                    assert_eq!(
                        run(&program, &short(offset, worker)),
                        u32::from(worker) % count,
                        "count {count}, offset {offset}, byte {worker}"
                    );
                }
            }
        }
    }

    #[test]
    fn long_header_selects_byte_mod_count() {
        for count in [1u32, 2, 4, 5] {
            for (offset, dcid_len) in [(0u8, 8u8), (3, 8), (7, 8), (0, 1), (19, 20)] {
                let program = cid_steering_program(offset, count);
                for worker in worker_bytes() {
                    assert_eq!(
                        run(&program, &long(offset, dcid_len, worker)),
                        u32::from(worker) % count,
                        "count {count}, offset {offset}, DCID length {dcid_len}, byte {worker}"
                    );
                }
            }
        }
    }

    /// Only Handshake packets (whatever their low bits) go by the DCID: Initial, 0-RTT and
    /// Retry packets, and long headers of other versions' types, carry a DCID the client
    /// chose, and go by the kernel's hash, so that no client can aim them at one socket.
    #[test]
    fn only_handshake_packets_go_by_their_dcid() {
        let program = cid_steering_program(2, 4);
        for first in 0x80..=0xffu8 {
            let mut p = long(2, 8, 6);
            p[0] = first;
            let want = if first & 0x30 == 0x20 { 2 } else { FALLBACK };
            assert_eq!(run(&program, &p), want, "first byte {first:#x}");
        }
    }

    #[test]
    fn dcid_too_short_falls_back() {
        let program = cid_steering_program(4, 4);
        for dcid_len in 0..=4 {
            assert_eq!(run(&program, &long(4, dcid_len, 3)), FALLBACK);
        }
        assert_eq!(run(&program, &long(4, 5, 3)), 3);
    }

    /// Any packet too short to hold the worker byte falls back (rather than ending with 0,
    /// as a load beyond the packet would, which is socket 0).
    #[test]
    fn truncated_packets_fall_back() {
        for offset in [0u8, 5] {
            let program = cid_steering_program(offset, 4);
            let s = short(offset, 3);
            let worker_at = 1 + usize::from(offset);
            for len in 0..=worker_at {
                assert_eq!(
                    run(&program, &s[..len]),
                    FALLBACK,
                    "short header, {len} bytes"
                );
            }
            assert_eq!(run(&program, &s[..=worker_at]), 3);
            let l = long(offset, 8, 3);
            let worker_at = 6 + usize::from(offset);
            for len in 0..=worker_at {
                assert_eq!(
                    run(&program, &l[..len]),
                    FALLBACK,
                    "long header, {len} bytes"
                );
            }
            assert_eq!(run(&program, &l[..=worker_at]), 3);
        }
    }

    /// The program and the crate's description of it ([`CidSteering::socket_index`]) agree
    /// on packets of every shape.
    #[test]
    fn program_matches_socket_index() {
        let mut packet = Vec::new();
        let mut x = 0x1234_5678u32;
        for count in [1usize, 2, 3, 4, 16] {
            for offset in [0u8, 1, 6, 19] {
                let program = cid_steering_program(offset, count as u32);
                let steering = CidSteering { offset };
                for _ in 0..if cfg!(miri) { 40 } else { 500 } {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    packet.clear();
                    let len = (x >> 8) as usize % 40;
                    for i in 0..len {
                        packet.push((x >> (i % 24)) as u8 ^ (i as u8).wrapping_mul(37));
                    }
                    let expected = steering
                        .socket_index(&packet, count)
                        .map_or(FALLBACK, |i| i as u32);
                    assert_eq!(run(&program, &packet), expected, "{packet:02x?}");
                }
            }
        }
    }

    /// What the kernel checks before it takes a classic program: every jump lands inside it,
    /// the last instruction returns, no modulo by zero, within the instruction limit.
    #[test]
    fn program_is_well_formed() {
        for offset in [0u8, 255] {
            let program = cid_steering_program(offset, 3);
            assert!(program.len() <= super::super::abi::BPF_MAXINSNS as usize);
            let last = program.last().unwrap();
            assert_eq!(u32::from(last.code) & 0x07, BPF_RET);
            for (at, insn) in program.iter().enumerate() {
                if u32::from(insn.code) & 0x07 == BPF_JMP {
                    let far = if u32::from(insn.code) == BPF_JMP | BPF_JA {
                        insn.k as usize
                    } else {
                        usize::from(insn.jt.max(insn.jf))
                    };
                    assert!(at + 1 + far < program.len(), "jump at {at}");
                }
                if u32::from(insn.code) == BPF_ALU | BPF_MOD | BPF_K {
                    assert_ne!(insn.k, 0);
                }
            }
        }
    }
}
