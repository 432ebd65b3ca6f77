//! Batched UDP I/O for QUIC endpoints, for any QUIC stack.
//!
//! A QUIC connection state machine produces and consumes datagrams; this crate moves them
//! between it and the kernel many per syscall: `recvmmsg` with GRO and `sendmmsg` with a
//! per-message GSO segment size on Linux and Android, `recvmsg_x` on Apple platforms (through
//! quinn-udp), one datagram per syscall elsewhere. [`IoMode::Single`] is the same socket moving one
//! datagram per syscall, the baseline to compare against. Counters of everything it did are
//! always on ([`Stats`]). (An io_uring mode was built, measured slower than `recvmmsg`/
//! `sendmmsg` and removed; its figures are in `docs/records/io_uring.md` in the repository.)
//!
//! The pieces:
//! - [`UdpSocketState`]: the runtime-free core. It configures a socket you own and makes the
//!   receive and send syscalls on it; you wait for readiness in your own event loop.
//! - [`Socket`] (feature `tokio`, on by default): that state on a tokio socket.
//! - [`RecvBatch`]: receive buffers; [`RecvBatch::datagrams`] yields each [`Datagram`]
//!   (GRO runs already split) as an owned `BytesMut` of its own size, which a QUIC stack may
//!   hold as long as it likes without pinning the batch's buffers.
//! - [`Transmit`]: a datagram or a GSO run to send, borrowed; [`TxQueue`]: owned transmits
//!   waiting for the kernel, with a buffer pool, resuming exactly where a send stopped.
//! - `quinn` (feature `quinn-proto`): conversions to and from quinn-proto's types (ECN
//!   codepoints, transmits, received datagrams for `Endpoint::handle`), for an endpoint that
//!   drives quinn-proto on these sockets.
//! - [`bind_reuseport_group`]: one socket per worker thread on one address
//!   (`SO_REUSEPORT`), with the kernel steering each datagram to its connection's worker by
//!   a byte of the QUIC destination connection ID ([`CidSteering`], Linux and Android).
//!
//! # Features
//!
//! - `tokio` (on by default): [`Socket`]. Without it the crate needs no runtime.
//! - `quinn-proto` (off by default): the `quinn` module, for quinn-proto 0.11 (its types
//!   only: it brings no crypto provider).
//!
//! # Worker sockets steered by connection ID
//!
//! [`bind_reuseport_group`] binds `count` sockets to one address with `SO_REUSEPORT` and, on
//! Linux and Android, attaches a classic BPF program to the group (`SO_ATTACH_REUSEPORT_CBPF`). For each
//! datagram whose destination connection ID (DCID) the server chose (a short header, from
//! byte 1; a Handshake packet, from byte 6, byte 5 being its length) the program reads the
//! byte at [`CidSteering::offset`] of the DCID and returns `byte % count`, the index of the
//! socket to receive it.
//!
//! - Why a byte modulo the count: the server writes into every connection ID that worker `i`
//!   issues a byte congruent to `i` modulo `count`, so each later datagram of the connection
//!   reaches worker `i`, whatever address or port the client sends from.
//! - Why not Initial and 0-RTT packets: their DCID is the client's choice, so a client could
//!   aim every one at one worker. They go by the kernel's 4-tuple hash, which spreads
//!   spoofed sources and keeps each client's on the worker that takes its connection.
//! - Fall back: where the datagram has no such byte (those long headers, a Handshake DCID of
//!   `offset` bytes or fewer, a datagram that ends first), the program returns an index beyond the
//!   group and the kernel picks by its 4-tuple hash instead (net/core/sock_reuseport.c:
//!   `run_bpf_filter` gives no socket for `index >= socks`, and `reuseport_select_sock` then
//!   calls `reuseport_select_sock_by_hash`). [`CidSteering::socket_index`] says in Rust
//!   what the program decides, so a worker can recognise a datagram the hash brought it.
//! - Group order: socket `i` of [`ReuseportGroup::sockets`] is index `i`, because the kernel
//!   keeps a group's sockets in bind order. Closing one moves the group's last socket into
//!   its place, which renumbers the group, so every socket must stay open as long as any
//!   serves; other `SO_REUSEPORT` sockets of the same user on the same address would join
//!   the group too (port 0 avoids both surprises for a fresh group).
//! - A GRO run (datagrams of one 4-tuple the kernel coalesced, on sockets with GRO) is
//!   steered as a whole by its first datagram: connections that share a client address and
//!   port may then meet on one worker.
//! - If the kernel refuses the program the group still comes back, with [`Steering::Hash`]
//!   and the reason ([`HashReason`]); the caller decides whether to go on with the 4-tuple
//!   hash. Elsewhere there is no program; Windows has no `SO_REUSEPORT` and refuses groups of
//!   more than one.
//!
//! # Errors
//!
//! Binding and configuring a socket fail with a [`SetupError`]: what was refused
//! ([`Refused`]: the bind, a socket option by name, a connected socket...) and the OS error,
//! which `?` turns into an `io::Error` of the same kind. What the kernel does not grant of a
//! [`Config`] (smaller buffers, no GSO or GRO) is reported, not failed.
//!
//! How errors are handled once the socket serves, so that no peer (or off-path attacker) can
//! make the socket lose another peer's datagrams, is in [`UdpSocketState::send`]. ICMP errors are not asked for
//! and connected sockets are refused, so the kernel never fails a send with someone else's
//! error, nor wakes a sender for one.
//!
//! # Examples
//!
//! With tokio (feature `tokio`): a GSO run out, a batch in.
//!
//! ```no_run
//! # #[cfg(feature = "tokio")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use neqo_udp::{Config, Socket, Transmit};
//! let socket = Socket::bind("127.0.0.1:0".parse()?, Config::default())?;
//! let peer = "127.0.0.1:4433".parse()?;
//! let payload = [0u8; 3600];
//! // One transmit, three 1200-byte datagrams on the wire (GSO).
//! let run = Transmit::new(peer, &payload[..]).with_segment_size(Some(1200));
//! socket.send_all(&[run]).await?;
//! let mut batch = socket.recv_batch();
//! let got = socket.recv_async(&mut batch).await?;
//! for datagram in batch.datagrams() {
//!     println!("{} bytes from {}", datagram.data.len(), datagram.source);
//! }
//! println!("{} datagrams, kernel drops so far {}", got.datagrams, got.kernel_drops);
//! # Ok(()) }
//! ```
//!
//! Without a runtime: [`UdpSocketState`] on std sockets, which the caller waits on.
//!
//! ```
//! use std::{io, net::UdpSocket, thread, time::Duration};
//!
//! use neqo_udp::{Config, Transmit, UdpSocketState};
//!
//! let (a, b) = (UdpSocket::bind("127.0.0.1:0")?, UdpSocket::bind("127.0.0.1:0")?);
//! // The calls never wait; on a blocking socket a batch receive would wait for a full batch.
//! a.set_nonblocking(true)?;
//! b.set_nonblocking(true)?;
//! let sender = UdpSocketState::new((&a).into(), Config::default())?;
//! let receiver = UdpSocketState::new((&b).into(), Config::default())?;
//! let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
//! let run = Transmit::new(b.local_addr()?, &payload[..]).with_segment_size(Some(1200));
//! sender.send((&a).into(), &[run])?;
//! let mut batch = receiver.recv_batch();
//! let mut got = Vec::new();
//! for _ in 0..1000 {
//!     match receiver.recv((&b).into(), &mut batch) {
//!         Ok(_) => got.extend(batch.datagrams().map(|d| d.data.len())),
//!         // An event loop waits for readiness (epoll, kqueue, mio...); this one sleeps.
//!         Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(1)),
//!         Err(e) => return Err(e.into()),
//!     }
//!     if got.len() == 3 {
//!         break;
//!     }
//! }
//! assert_eq!(got, [1200, 1200, 600]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
// The docs link to `Socket` throughout; without tokio it does not exist and the links show as
// plain text. The docs built with default features (and with all) check every link.
#![cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]

mod bind;
mod config;
mod error;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
mod path_mtu;
mod queue;
#[cfg(feature = "quinn-proto")]
pub mod quinn;
mod recv;
mod reuseport;
mod send;
#[cfg(feature = "tokio")]
mod socket;
mod state;
mod stats;
mod sys;
mod transmit;

pub use config::{
    Config, DEFAULT_BATCH_SIZE, DEFAULT_SOCKET_BUFFER, IoMode, MAX_BATCH_SIZE, MAX_GROUP_SOCKETS,
    ParseIoModeError, RECV_SLOT_SIZE, RecvBuffers,
};
pub use error::{Refused, SetupError};
pub use path_mtu::max_udp_payload_to;
pub use queue::{DEFAULT_POOL_LIMIT, TxQueue};
pub use recv::{Datagram, Datagrams, RecvBatch};
pub use reuseport::{CidSteering, HashReason, ReuseportGroup, Steering, bind_reuseport_group};
pub use send::Sent;
#[cfg(feature = "tokio")]
pub use socket::Socket;
pub use state::{BufferSizes, RecvSummary, UdpSocketState};
pub use stats::{DirectionStats, Events, HISTOGRAM_BUCKETS, RxDropped, Stats, TxDropped};
pub use sys::UdpSockRef;
pub use transmit::{EcnCodepoint, MAX_UDP_PAYLOAD, Transmit};
