//! Round trips over buffers laid out as the kernel lays them out. No syscalls: these run under
//! Miri (`cargo +nightly miri test -p neqo-udp --lib sys::linux::cmsg`).

use socket2::SockAddr;

use super::*;

/// A control buffer as the kernel writes it: each cmsg at a `CMSG_SPACE`-aligned offset.
fn kernel_control(cmsgs: &[(libc::c_int, libc::c_int, &[u8])]) -> Vec<u8> {
    let mut buf = Vec::new();
    for (level, ty, payload) in cmsgs {
        // SAFETY: pure size computations.
        let (len, space) = unsafe {
            (
                libc::CMSG_LEN(payload.len() as u32) as usize,
                libc::CMSG_SPACE(payload.len() as u32) as usize,
            )
        };
        let start = buf.len();
        buf.resize(start + space, 0);
        // SAFETY: pure size computation.
        let data = start + unsafe { libc::CMSG_LEN(0) } as usize;
        buf[start..start + 8].copy_from_slice(&(len as u64).to_ne_bytes());
        buf[start + 8..start + 12].copy_from_slice(&level.to_ne_bytes());
        buf[start + 12..start + 16].copy_from_slice(&ty.to_ne_bytes());
        buf[data..data + payload.len()].copy_from_slice(payload);
    }
    buf
}

fn bytes_of<T: Copy>(value: &T) -> Vec<u8> {
    // SAFETY: reads the bytes of a live plain-data value.
    unsafe { std::slice::from_raw_parts(ptr::from_ref(value).cast::<u8>(), mem::size_of::<T>()) }
        .to_vec()
}

fn name_of(addr: &str) -> Vec<u8> {
    let sa = SockAddr::from(addr.parse::<SocketAddr>().unwrap());
    // SAFETY: SockAddr holds `len()` initialised bytes of address.
    unsafe { std::slice::from_raw_parts(sa.as_ptr().cast::<u8>(), sa.len() as usize) }.to_vec()
}

fn receive(w: Written<'_>, capacity: usize) -> (BytesMut, SlotMeta, Option<u64>) {
    let mut slot = BytesMut::with_capacity(capacity);
    // What the kernel would have written into the spare capacity.
    let n = w.len.min(capacity);
    slot.spare_capacity_mut()[..n]
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| {
            b.write(i as u8);
        });
    let mut meta = SlotMeta::default();
    let drops = finish_recv(&mut slot, w, &mut meta);
    (slot, meta, drops)
}

#[test]
fn a_gro_run_with_every_cmsg_is_read_whole() {
    let pktinfo = libc::in_pktinfo {
        ipi_ifindex: 1,
        ipi_spec_dst: libc::in_addr { s_addr: 0 },
        ipi_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes([127, 0, 0, 2]),
        },
    };
    let control = kernel_control(&[
        (libc::SOL_SOCKET, libc::SO_RXQ_OVFL, &7u32.to_ne_bytes()),
        (libc::SOL_UDP, libc::UDP_GRO, &1200i32.to_ne_bytes()),
        (libc::IPPROTO_IP, libc::IP_TOS, &[0b1010_0010]),
        (libc::IPPROTO_IP, libc::IP_PKTINFO, &bytes_of(&pktinfo)),
    ]);
    assert!(control.len() <= RECV_CMSG_LEN);
    let name = name_of("127.0.0.1:4433");
    let (slot, meta, drops) = receive(
        Written {
            len: 3000,
            flags: 0,
            name: &name,
            control: &control,
        },
        4096,
    );
    assert_eq!(drops, Some(7));
    assert_eq!(slot.len(), 3000);
    assert_eq!(slot[2999], (2999 % 256) as u8);
    assert_eq!(meta.len, 3000);
    assert_eq!(meta.stride, 1200);
    assert_eq!(meta.ecn, Some(EcnCodepoint::Ect0));
    assert_eq!(meta.destination, Some("127.0.0.2".parse().unwrap()));
    assert_eq!(meta.source, "127.0.0.1:4433".parse().unwrap());
    assert_eq!(meta.dropped, None);
}

#[test]
fn ipv6_tclass_and_pktinfo_are_read() {
    let info = libc::in6_pktinfo {
        ipi6_ifindex: 1,
        ipi6_addr: libc::in6_addr {
            s6_addr: "::1".parse::<Ipv6Addr>().unwrap().octets(),
        },
    };
    let control = kernel_control(&[
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &3i32.to_ne_bytes()),
        (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &bytes_of(&info)),
    ]);
    let name = name_of("[::1]:5000");
    let (_, meta, drops) = receive(
        Written {
            len: 100,
            flags: 0,
            name: &name,
            control: &control,
        },
        4096,
    );
    assert_eq!(drops, None);
    assert_eq!(meta.ecn, Some(EcnCodepoint::Ce));
    assert_eq!(meta.destination, Some("::1".parse().unwrap()));
    assert_eq!(meta.source, "[::1]:5000".parse().unwrap());
    assert_eq!(meta.stride, 100, "a lone datagram is its own stride");
}

/// Truncated datagrams, cut control messages, empty datagrams and missing sources are
/// dropped and counted per datagram, never handed up.
#[test]
fn bad_messages_are_dropped_with_their_datagram_count() {
    let gro = kernel_control(&[(libc::SOL_UDP, libc::UDP_GRO, &1000i32.to_ne_bytes())]);
    let name = name_of("127.0.0.1:9");
    let cases: [(Written<'_>, RxDrop, usize); 5] = [
        // A GRO run of 5 segments longer than its slot: MSG_TRUNC with the full length.
        (
            Written {
                len: 4500,
                flags: libc::MSG_TRUNC,
                name: &name,
                control: &gro,
            },
            RxDrop::Truncated,
            5,
        ),
        // Control messages cut: the run's segment size may be missing.
        (
            Written {
                len: 3000,
                flags: libc::MSG_CTRUNC,
                name: &name,
                control: &[],
            },
            RxDrop::CTrunc,
            1,
        ),
        (
            Written {
                len: 3000,
                flags: libc::MSG_CTRUNC,
                name: &name,
                control: &gro,
            },
            RxDrop::CTrunc,
            3,
        ),
        (
            Written {
                len: 0,
                flags: 0,
                name: &name,
                control: &[],
            },
            RxDrop::Empty,
            1,
        ),
        // A name shorter than its family's address.
        (
            Written {
                len: 10,
                flags: 0,
                name: &name[..4],
                control: &[],
            },
            RxDrop::Other,
            1,
        ),
    ];
    for (w, why, count) in cases {
        let (slot, meta, _) = receive(w, 4096);
        assert_eq!(meta.dropped, Some((why, count)), "{w:?}");
        assert_eq!(meta.len, 0);
        assert!(slot.is_empty());
    }
}

#[test]
fn addresses_decode_only_from_enough_bytes() {
    for a in [
        "127.0.0.1:4433",
        "[::1]:443",
        "[::ffff:10.0.0.1]:1",
        "[fe80::1%3]:7",
    ] {
        let addr: SocketAddr = a.parse().unwrap();
        let name = name_of(a);
        assert_eq!(decode_addr(&name), Some(addr));
        assert_eq!(decode_addr(&name[..name.len() - 1]), None);
    }
    assert_eq!(decode_addr(&[]), None);
    assert_eq!(decode_addr(&[0xff; 32]), None, "unknown family");
}

#[test]
fn send_cmsgs_round_trip() {
    // The largest combination, walked back with the kernel's macros and read back.
    let t = Transmit {
        destination: "[::1]:9".parse().unwrap(),
        ecn: Some(EcnCodepoint::Ect1),
        contents: &[0u8; 3000][..],
        segment_size: Some(1200),
        src_ip: Some("::2".parse().unwrap()),
    };
    // SAFETY: all-zero is a valid msghdr.
    let mut hdr: libc::msghdr = unsafe { mem::zeroed() };
    let mut ctrl = CmsgBuf([0u8; SEND_CMSG_LEN]);
    encode_send(&t, &mut hdr, &mut ctrl);
    let mut seen = Vec::new();
    // SAFETY: encode_send wrote well-formed cmsgs into `ctrl`, described by `hdr`.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&raw const hdr) };
    while !c.is_null() {
        // SAFETY: `c` is a header inside the buffer with its payload after it.
        unsafe {
            let data = libc::CMSG_DATA(c);
            let value = match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_UDP, libc::UDP_SEGMENT) => {
                    u64::from(ptr::read_unaligned(data.cast::<u16>()))
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let info = ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                    u64::from(info.ipi6_addr.s6_addr[15])
                }
                _ => ptr::read_unaligned(data.cast::<libc::c_int>()) as u64,
            };
            seen.push(((*c).cmsg_level, (*c).cmsg_type, value));
            c = libc::CMSG_NXTHDR(&raw const hdr, c);
        }
    }
    assert_eq!(
        seen,
        vec![
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, 0b01),
            (libc::SOL_UDP, libc::UDP_SEGMENT, 1200),
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, 2),
        ]
    );
    assert!(hdr.msg_controllen <= SEND_CMSG_LEN);

    // An IPv4 (or v4-mapped) path takes IP_TOS and IP_PKTINFO; a lone datagram no GSO.
    let v4 = Transmit {
        destination: "[::ffff:127.0.0.1]:9".parse().unwrap(),
        segment_size: Some(3000),
        src_ip: Some("127.0.0.1".parse().unwrap()),
        ..t
    };
    encode_send(&v4, &mut hdr, &mut ctrl);
    // SAFETY: as above.
    let first = unsafe { &*libc::CMSG_FIRSTHDR(&raw const hdr) };
    assert_eq!(
        (first.cmsg_level, first.cmsg_type),
        (libc::IPPROTO_IP, libc::IP_TOS)
    );
    // The decoder reads what the encoder wrote for the IP_TOS and PKTINFO kinds it shares.
    // SAFETY: msg_controllen bytes of `ctrl` were written.
    let written =
        unsafe { std::slice::from_raw_parts(hdr.msg_control.cast::<u8>(), hdr.msg_controllen) };
    let mut meta = SlotMeta::default();
    decode_recv(written, &mut meta);
    assert_eq!(meta.ecn, Some(EcnCodepoint::Ect1));
    assert_eq!(meta.stride, 0, "no UDP_SEGMENT for a lone datagram");

    // Without ECN and source: no control messages at all.
    let plain = Transmit {
        ecn: None,
        src_ip: None,
        segment_size: None,
        ..t
    };
    encode_send(&plain, &mut hdr, &mut ctrl);
    assert_eq!(hdr.msg_controllen, 0);
    assert!(hdr.msg_control.is_null());
}

#[test]
fn v4_mapped_destinations_take_ip_tos() {
    assert!(is_v4_path(&"127.0.0.1:1".parse().unwrap()));
    assert!(is_v4_path(&"[::ffff:127.0.0.1]:1".parse().unwrap()));
    assert!(!is_v4_path(&"[::1]:1".parse().unwrap()));
}

#[test]
fn corrupt_control_buffers_are_read_safely() {
    // A UDP_GRO cmsg with stride 1200, then the same header claiming more payload than the
    // buffer holds, which must read nothing beyond it.
    let mut buf = kernel_control(&[(libc::SOL_UDP, libc::UDP_GRO, &1200i32.to_ne_bytes())]);
    let mut meta = SlotMeta::default();
    decode_recv(&buf, &mut meta);
    assert_eq!(meta.stride, 1200);
    buf[..8].copy_from_slice(&4096u64.to_ne_bytes());
    let mut meta = SlotMeta::default();
    decode_recv(&buf[..18], &mut meta);
    assert_eq!(meta.stride, 0, "a truncated int is not read");
    // The fuzzer's first find: a cmsg_len near usize::MAX made libc's CMSG_NXTHDR overflow.
    // It must simply end the walk.
    for junk in [[0xffu8; 16].as_slice(), &[0xff; 40], &[0; 3]] {
        let mut meta = SlotMeta::default();
        assert_eq!(decode_recv(junk, &mut meta), None);
        assert_eq!(meta.stride, 0);
    }
}
