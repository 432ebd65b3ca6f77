//! `SO_REUSEPORT` groups on loopback: each datagram reaches the socket its destination
//! connection ID names, whatever port it comes from; what cannot be steered still arrives,
//! on exactly one socket.

mod common;

use std::{io, net::SocketAddr};

use common::*;
use neqo_udp::{HashReason, MAX_GROUP_SOCKETS, Refused, Steering, bind_reuseport_group};

#[test]
fn count_out_of_range_is_refused() {
    for count in [0, MAX_GROUP_SOCKETS + 1] {
        let e = bind_reuseport_group(SocketAddr::new(V4, 0), count, None).unwrap_err();
        assert_eq!(e.what(), Refused::GroupSize(count));
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains(&format!("not {count}")), "{e}");
    }
}

#[test]
fn group_of_one_without_steering() {
    let group = bind_reuseport_group(SocketAddr::new(V4, 0), 1, None).unwrap();
    assert_eq!(group.sockets.len(), 1);
    let addr = group.local_addr().unwrap();
    assert_ne!(addr.port(), 0);
    // A plain socket: a group of two cannot join it on its port.
    let e = bind_reuseport_group(addr, 2, None).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    assert_eq!(e.what(), Refused::GroupPort(addr));
    let Steering::Hash(reason) = &group.steering else {
        panic!("{:?}", group.steering);
    };
    assert!(matches!(reason, HashReason::NotAsked), "{reason:?}");
    assert_eq!(reason.to_string(), "no steering asked for");
}

/// With port 0 every socket gets the first one's port.
#[cfg(unix)]
#[test]
fn port_zero_gives_every_socket_the_same_port() {
    for ip in [V4, V6] {
        let group = bind_reuseport_group(SocketAddr::new(ip, 0), 4, None).unwrap();
        let first = group.local_addr().unwrap();
        assert_ne!(first.port(), 0);
        assert_eq!(first.ip(), ip);
        for s in &group.sockets {
            assert_eq!(s.local_addr().unwrap(), first);
            assert!(s.peer_addr().is_err(), "returned unconnected");
        }
    }
}

/// A port held by a socket without `SO_REUSEPORT` cannot take a group; the error says where.
#[cfg(unix)]
#[test]
fn port_held_without_reuseport_is_refused() {
    for ip in [V4, V6] {
        let holder = std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
        let addr = holder.local_addr().unwrap();
        let e = bind_reuseport_group(addr, 2, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        assert_eq!(e.what(), Refused::GroupPort(addr));
        let message = e.to_string();
        assert!(message.contains(&addr.to_string()), "{message}");
        assert!(message.contains("SO_REUSEPORT"), "{message}");
    }
}

/// A second group on a port another group holds is refused, not joined to it.
#[cfg(unix)]
#[test]
fn port_held_by_another_group_is_refused() {
    for ip in [V4, V6] {
        let first = bind_reuseport_group(SocketAddr::new(ip, 0), 2, None).unwrap();
        let addr = first.local_addr().unwrap();
        let e = bind_reuseport_group(addr, 2, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
        drop(first);
        let again = bind_reuseport_group(addr, 2, None).expect("free again");
        assert_eq!(again.local_addr().unwrap(), addr);
    }
}

/// Windows has no `SO_REUSEPORT`: a group of one is a plain socket, larger ones are refused.
#[cfg(windows)]
#[test]
fn windows_refuses_groups() {
    let e = bind_reuseport_group(SocketAddr::new(V4, 0), 2, None).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    assert_eq!(e.what(), Refused::Option("SO_REUSEPORT"));
}

/// Only Linux and Android have the steering program: elsewhere a group asked for it comes
/// back with the kernel's hash, saying why.
#[cfg(not(any(target_os = "linux", target_os = "android", windows)))]
#[test]
fn steering_is_unsupported_elsewhere() {
    let steering = Some(neqo_udp::CidSteering::new(0));
    let group = bind_reuseport_group(SocketAddr::new(V4, 0), 2, steering).unwrap();
    assert!(
        matches!(group.steering, Steering::Hash(HashReason::Unsupported)),
        "{:?}",
        group.steering
    );
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod steering {
    use std::{
        collections::{HashMap, HashSet},
        io,
        net::{IpAddr, SocketAddr, UdpSocket},
        time::{Duration, Instant},
    };

    use neqo_udp::{
        CidSteering, Config, ReuseportGroup, Socket, Steering, Transmit, bind_reuseport_group,
    };

    use super::common::*;

    /// Bytes of the DCID in the test packets.
    const DCID_LEN: u8 = 8;

    /// A group of `count` with steering on byte `offset`, the program attached, non-blocking.
    fn steered_group(ip: IpAddr, count: usize, offset: u8) -> ReuseportGroup {
        let group = bind_reuseport_group(
            SocketAddr::new(ip, 0),
            count,
            Some(CidSteering::new(offset)),
        )
        .unwrap();
        assert!(
            matches!(group.steering, Steering::Cid(c) if c == CidSteering::new(offset)),
            "{:?}",
            group.steering
        );
        assert_eq!(group.sockets.len(), count);
        for s in &group.sockets {
            s.set_nonblocking(true).unwrap();
        }
        group
    }

    /// A short-header packet: `worker` at byte `offset` of the DCID, then `tag`.
    fn short_header(offset: u8, worker: u8, tag: u32) -> Vec<u8> {
        let mut dcid = [0xa5u8; DCID_LEN as usize];
        dcid[usize::from(offset)] = worker;
        let mut p = vec![0x43];
        p.extend_from_slice(&dcid);
        p.extend_from_slice(&tag.to_be_bytes());
        p
    }

    /// A long-header Handshake packet with a `dcid_len`-byte DCID, `worker` at byte
    /// `offset` of it where it is that long, then `tag`.
    fn long_header(offset: u8, dcid_len: u8, worker: u8, tag: u32) -> Vec<u8> {
        let mut p = vec![0xe3, 0, 0, 0, 1, dcid_len];
        let mut dcid = vec![0x5au8; usize::from(dcid_len)];
        if let Some(b) = dcid.get_mut(usize::from(offset)) {
            *b = worker;
        }
        p.extend_from_slice(&dcid);
        p.push(0); // SCID length
        p.extend_from_slice(&tag.to_be_bytes());
        p
    }

    fn tag_of(p: &[u8]) -> u32 {
        u32::from_be_bytes(p[p.len() - 4..].try_into().unwrap())
    }

    /// Where each received datagram arrived: (socket index, source, payload).
    type Arrivals = Vec<(usize, SocketAddr, Vec<u8>)>;

    /// Whatever every socket of the group holds now.
    fn drain(group: &ReuseportGroup, into: &mut Arrivals) -> bool {
        let mut buf = [0u8; 2048];
        let mut any = false;
        for (i, s) in group.sockets.iter().enumerate() {
            loop {
                match s.recv_from(&mut buf) {
                    Ok((len, source)) => {
                        into.push((i, source, buf[..len].to_vec()));
                        any = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("recv on socket {i}: {e}"),
                }
            }
        }
        any
    }

    /// Reads every socket of the group until `n` datagrams arrived (failing at the deadline,
    /// a hang guard: loopback delivers them at once).
    fn recv_group(group: &ReuseportGroup, n: usize) -> Arrivals {
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < n {
            if !drain(group, &mut got) {
                assert!(
                    start.elapsed() < DEADLINE,
                    "only {} of {n} datagrams arrived",
                    got.len()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        got
    }

    fn client(ip: IpAddr) -> UdpSocket {
        UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap()
    }

    /// From several client ports, short- and long-header datagrams with every worker byte:
    /// each arrives on socket `byte % count`, exactly once.
    fn steers_by_dcid_byte(group_ip: IpAddr, client_ips: &[IpAddr], count: usize, offset: u8) {
        const CLIENTS_PER_IP: usize = 3;
        const CHUNK: usize = 32;
        let group = steered_group(group_ip, count, offset);
        let port = group.local_addr().unwrap().port();
        let mut per_socket = vec![0usize; count];
        let mut tag = 0u32;
        for &ip in client_ips {
            let dest = SocketAddr::new(ip, port);
            for _ in 0..CLIENTS_PER_IP {
                let client = client(ip);
                let mut datagrams = Vec::new();
                for worker in 0..=255u8 {
                    tag += 1;
                    datagrams.push((worker, short_header(offset, worker, tag)));
                    tag += 1;
                    datagrams.push((worker, long_header(offset, DCID_LEN, worker, tag)));
                }
                // In chunks, so that no socket's receive buffer overflows.
                for chunk in datagrams.chunks(CHUNK) {
                    for (_, p) in chunk {
                        client.send_to(p, dest).unwrap();
                    }
                    let got = recv_group(&group, chunk.len());
                    let mut seen = HashSet::new();
                    for (socket, source, payload) in got {
                        let t = tag_of(&payload);
                        assert!(seen.insert(t), "datagram {t} arrived twice");
                        let (worker, sent) = chunk
                            .iter()
                            .find(|(_, p)| tag_of(p) == t)
                            .expect("a datagram of this chunk");
                        assert_eq!(&payload, sent);
                        assert_eq!(
                            socket,
                            usize::from(*worker) % count,
                            "byte {worker} (first byte {:#x}) from {source}",
                            payload[0]
                        );
                        // The kernel's view of the source, v4-mapped on a dual-stack group.
                        let client_addr = client.local_addr().unwrap();
                        assert_eq!(source.port(), client_addr.port());
                        per_socket[socket] += 1;
                    }
                }
            }
        }
        let mut rest = Vec::new();
        drain(&group, &mut rest);
        assert!(rest.is_empty(), "unexpected datagrams: {rest:?}");
        let each = 2 * 256 / count * CLIENTS_PER_IP * client_ips.len();
        assert_eq!(per_socket, vec![each; count]);
    }

    #[test]
    fn steers_v4_group_of_2() {
        steers_by_dcid_byte(V4, &[V4], 2, 0);
    }

    #[test]
    fn steers_v4_group_of_4() {
        steers_by_dcid_byte(V4, &[V4], 4, 3);
    }

    #[test]
    fn steers_v6_group_of_2() {
        steers_by_dcid_byte(V6, &[V6], 2, 7);
    }

    #[test]
    fn steers_v6_group_of_4() {
        steers_by_dcid_byte(V6, &[V6], 4, 1);
    }

    /// A group on `[::]` is dual-stack, like `Socket::bind`'s, and steers both families.
    #[test]
    fn steers_dual_stack_group() {
        steers_by_dcid_byte(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), &[V4, V6], 4, 2);
    }

    /// Datagrams without the worker byte (a long header whose DCID is too short, a packet
    /// too short) go to the kernel's hash: each arrives on exactly one socket, and from many
    /// client ports they are spread, not all put on socket 0 (where a program that loaded
    /// beyond the packet would put them). So do Initials whose client-chosen DCIDs all name
    /// socket 3: a flood cannot be aimed at one socket.
    #[test]
    fn unsteerable_datagrams_arrive_once_and_are_hashed() {
        const CLIENTS: usize = 32;
        const OFFSET: u8 = 5;
        for ip in [V4, V6] {
            let group = steered_group(ip, 4, OFFSET);
            let dest = group.local_addr().unwrap();
            let clients: Vec<UdpSocket> = (0..CLIENTS).map(|_| client(ip)).collect();
            let mut sent = HashSet::new();
            for (i, c) in clients.iter().enumerate() {
                let tag = u32::try_from(i).unwrap();
                // DCID of OFFSET bytes: byte OFFSET is not in it.
                let long = long_header(OFFSET, OFFSET, 3, tag);
                // A short header that ends just before the worker byte.
                let mut short = vec![0x43, 0, 0, 0, 0, 0];
                short[1..5].copy_from_slice(&tag.to_be_bytes());
                assert_eq!(short.len(), 1 + usize::from(OFFSET));
                let mut initial = long_header(OFFSET, DCID_LEN, 3, tag);
                initial[0] = 0xc3;
                c.send_to(&long, dest).unwrap();
                c.send_to(&short, dest).unwrap();
                c.send_to(&initial, dest).unwrap();
                let source = c.local_addr().unwrap();
                sent.insert((source, long));
                sent.insert((source, short));
                sent.insert((source, initial));
            }
            let got = recv_group(&group, sent.len());
            // The sockets each kind arrived on, and the one each client's Initial did.
            let (mut long_on, mut short_on, mut initial_on) =
                (HashSet::new(), HashSet::new(), HashSet::new());
            let mut hashed: HashMap<SocketAddr, usize> = HashMap::new();
            for (socket, source, payload) in got {
                assert!(
                    sent.remove(&(source, payload.clone())),
                    "{payload:02x?} from {source}: not sent, or arrived twice"
                );
                if payload[0] & 0x80 == 0 {
                    short_on.insert(socket);
                } else if payload[0] == 0xc3 {
                    initial_on.insert(socket);
                    hashed.insert(source, socket);
                } else {
                    long_on.insert(socket);
                }
            }
            let mut rest = Vec::new();
            drain(&group, &mut rest);
            assert!(rest.is_empty(), "unexpected datagrams: {rest:?}");
            for (kind, on) in [("long", long_on), ("short", short_on)] {
                assert_ne!(
                    on,
                    HashSet::from([0]),
                    "{ip}: every unsteerable {kind}-header datagram went to socket 0"
                );
            }
            assert_ne!(
                initial_on,
                HashSet::from([3]),
                "{ip}: Initials aimed at socket 3 all reached it"
            );
            assert!(initial_on.len() > 1, "{ip}: Initials not spread");
            // A client's next Initial (another DCID, the same worker byte) follows its first.
            for c in &clients {
                let source = c.local_addr().unwrap();
                let mut again = long_header(OFFSET, DCID_LEN, 1, 0xffff);
                again[0] = 0xc3;
                c.send_to(&again, dest).unwrap();
                let got = recv_group(&group, 1);
                assert_eq!(got[0].1, source);
                assert_eq!(got[0].0, hashed[&source], "{source}: another socket");
            }
        }
    }

    /// Without steering the kernel hashes the 4-tuple: every datagram from one client port
    /// reaches the same socket, whatever its DCID.
    #[test]
    fn without_steering_one_client_port_stays_on_one_socket() {
        let group = bind_reuseport_group(SocketAddr::new(V4, 0), 4, None).unwrap();
        assert!(!group.steering.is_cid());
        for s in &group.sockets {
            s.set_nonblocking(true).unwrap();
        }
        let dest = group.local_addr().unwrap();
        let c = client(V4);
        for worker in 0..16u8 {
            c.send_to(&short_header(0, worker, u32::from(worker)), dest)
                .unwrap();
        }
        let got = recv_group(&group, 16);
        let sockets: HashSet<usize> = got.iter().map(|(s, _, _)| *s).collect();
        assert_eq!(sockets.len(), 1, "{got:?}");
    }

    /// The group's sockets work with the rest of the crate: made into [`Socket`]s, the one
    /// the DCID names receives, and it can answer.
    #[tokio::test]
    async fn group_sockets_work_as_neqo_sockets() {
        let group =
            bind_reuseport_group(SocketAddr::new(V4, 0), 2, Some(CidSteering::new(0))).unwrap();
        assert!(group.steering.is_cid());
        let dest = group.local_addr().unwrap();
        let sockets: Vec<Socket> = group
            .sockets
            .into_iter()
            .map(|s| Socket::from_std(s, Config::default()).unwrap())
            .collect();
        let client = bind(V4, neqo_udp::IoMode::Batched);
        for worker in [1u8, 0, 3] {
            let p = short_header(0, worker, u32::from(worker));
            client.send_all(&[transmit(dest, &p)]).await.unwrap();
            let server = &sockets[usize::from(worker) % 2];
            let got = recv_n(server, 1).await;
            assert_eq!(&got[0].data[..], &p[..]);
            assert_eq!(got[0].source, addr_of(&client));
            let reply = [worker; 40];
            server
                .send_all(&[Transmit::new(got[0].source, &reply[..])])
                .await
                .unwrap();
            let answer = recv_n(&client, 1).await;
            assert_eq!(&answer[0].data[..], &reply[..]);
            assert_eq!(answer[0].source, dest);
        }
        for s in &sockets {
            assert!(recv_now(s).await.is_empty());
        }
    }
}
