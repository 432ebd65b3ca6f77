//! Batched UDP I/O for QUIC endpoints, for any QUIC stack.
//!
//! A QUIC connection state machine produces and consumes datagrams; this crate moves them
//! between it and the kernel many per syscall: `recvmmsg` with GRO and `sendmmsg` with a
//! per-message GSO segment size on Linux, `recvmsg_x` on Apple platforms (through quinn-udp),
//! one datagram per syscall elsewhere. [`IoMode::Single`] is the same socket moving one
//! datagram per syscall, the baseline to compare against. Counters of everything it did are
//! always on ([`Stats`]).
//!
//! The pieces:
//! - [`UdpSocketState`]: the runtime-free core. It configures a socket you own and makes the
//!   receive and send syscalls on it; you wait for readiness in your own event loop.
//! - [`Socket`] (feature `tokio`, on by default): that state on a tokio socket.
//! - [`RecvBatch`]: receive buffers; [`RecvBatch::datagrams`] yields each [`Datagram`]
//!   (GRO runs already split) as an owned `BytesMut`, without a copy for large runs.
//! - [`Transmit`]: a datagram or a GSO run to send, borrowed; [`TxQueue`]: owned transmits
//!   waiting for the kernel, with a buffer pool, resuming exactly where a send stopped.
//!
//! How errors are handled, so that no peer (or off-path attacker) can make the socket lose
//! another peer's datagrams, is in [`UdpSocketState::send`]. ICMP errors are not asked for
//! and connected sockets are refused, so the kernel never fails a send with someone else's
//! error, nor wakes a sender for one.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use neqo_udp::{Config, Socket, Transmit};
//! let socket = Socket::bind("127.0.0.1:0".parse().unwrap(), Config::default())?;
//! let peer = "127.0.0.1:4433".parse().unwrap();
//! let payload = [0u8; 3600];
//! // One transmit, three 1200-byte datagrams on the wire (GSO).
//! let run = Transmit { segment_size: Some(1200), ..Transmit::new(peer, &payload) };
//! socket.send_all(&[run]).await?;
//! let mut batch = socket.recv_batch();
//! let got = socket.recv_async(&mut batch).await?;
//! for datagram in batch.datagrams() {
//!     println!("{} bytes from {}", datagram.data.len(), datagram.source);
//! }
//! println!("{} datagrams, kernel drops so far {}", got.datagrams, got.kernel_drops);
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod bind;
mod config;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
mod queue;
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
    Config, DEFAULT_BATCH_SIZE, DEFAULT_SOCKET_BUFFER, IoMode, MAX_BATCH_SIZE, RECV_SLOT_SIZE,
};
pub use queue::{TransmitHeader, TxQueue};
pub use recv::{Datagram, Datagrams, RecvBatch, segment_lengths};
pub use reuseport::{
    CidSteering, MAX_GROUP_SOCKETS, ReuseportGroup, Steering, bind_reuseport_group,
};
pub use send::Sent;
#[cfg(feature = "tokio")]
pub use socket::Socket;
pub use state::{BufferSizes, RecvSummary, UdpSocketState};
pub use stats::{DirectionStats, Events, HISTOGRAM_BUCKETS, RxDropped, Stats, TxDropped};
pub use sys::UdpSockRef;
pub use transmit::{EcnCodepoint, MAX_UDP_PAYLOAD, Transmit};
