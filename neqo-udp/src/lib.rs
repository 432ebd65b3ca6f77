//! Batched UDP I/O for QUIC endpoints.
//!
//! A [`Socket`] hands the kernel many datagrams per syscall: `recvmmsg` with GRO and
//! `sendmmsg` with a per-message GSO segment size on Linux, `recvmsg_x`/`sendmsg_x` on Apple
//! platforms (through quinn-udp), one datagram per syscall elsewhere. [`IoMode::Single`] is the
//! same socket moving one datagram per syscall, the baseline to compare against.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use neqo_udp::{Config, Socket, Transmit};
//! let socket = Socket::bind("127.0.0.1:0".parse().unwrap(), Config::default())?;
//! let peer = "127.0.0.1:4433".parse().unwrap();
//! let payload = [0u8; 3600];
//! // One transmit, three 1200-byte datagrams on the wire (GSO).
//! socket
//!     .send_all(&[Transmit { destination: peer, ecn: None, contents: &payload, segment_size: Some(1200), src_ip: None }])
//!     .await?;
//! let mut batch = socket.recv_batch();
//! let got = socket.recv_async(&mut batch).await?;
//! for datagram in batch.datagrams() {
//!     println!("{} bytes from {}", datagram.data.len(), datagram.source);
//! }
//! println!("{} datagrams, kernel drops so far {}", got.datagrams, got.kernel_drops);
//! # Ok(()) }
//! ```

mod config;
#[doc(hidden)]
pub mod fuzzing;
mod recv;
mod send;
mod socket;
mod stats;
mod sys;

pub use config::{
    Config, DEFAULT_BATCH_SIZE, DEFAULT_SOCKET_BUFFER, IoMode, MAX_BATCH_SIZE, RECV_SLOT_SIZE,
};
pub use quinn_udp::{EcnCodepoint, Transmit};
pub use recv::{Datagram, Datagrams, RecvBatch, segment_lengths};
pub use socket::{BufferSizes, MAX_UDP_PAYLOAD, RecvSummary, Socket};
pub use stats::{DirectionStats, ErrorCounts, HISTOGRAM_BUCKETS, Stats};
