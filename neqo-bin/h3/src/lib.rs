//! HTTP/3 (RFC 9114) over neqo-driver's connections, with the `h3` crate: `handles` and
//! `streams` give `h3` its `quic` traits, over a `mailbox` per connection (its streams'
//! state in `stream`) that carries what they ask to the driver's quinn-proto connection,
//! reading each stream through a `guard` that keeps `h3` to frames of a bounded size; `tasks`
//! runs `h3`'s futures on the driver's thread; [`Engine`] puts the three together per
//! connection, and [`Connections`] keeps an application's.
//!
//! - [`Engine`]: one connection's HTTP/3, driven from an application's events.
//! - [`H3Connection`] and [`Opener`]: what `h3::client::new` and `h3::server` take.
//! - [`Spawner`]: runs a request's future on the driver's thread.
//! - [`BidiStream`], [`SendStream`], [`RecvStream`]: the streams `h3` reads and writes, for
//!   naming its request streams' types.
//! - [`Connections`]: an application's connections, their engines and its data for each.
//! - `testing` (feature `testing`): an HTTP/3 client for tests on neqo-driver's in-memory
//!   network.
//!
//! `neqo-client` speaks HTTP/3 through it, and so do the services behind neqo-server-core's
//! `Server`; neqo-server's built-in HTTP/3 reads and writes the frames itself, with no task
//! per request.

mod conn;
mod connections;
mod guard;
mod handles;
mod mailbox;
mod reader;
mod stream;
mod streams;
mod tasks;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod waiters;

#[cfg(test)]
mod tests;

pub use conn::Engine;
pub use connections::Connections;
pub use handles::{H3Connection, Opener};
pub use streams::{BidiStream, RecvStream, SendStream};
pub use tasks::{Notifier, Spawner};

/// The unidirectional streams an HTTP/3 endpoint lets its peer open at once: the control
/// stream and QPACK's two (RFC 9114 section 6.2, RFC 9204 section 4.2), and room for the
/// reserved types peers send to exercise the rule that unknown ones are ignored.
pub const UNI_STREAMS: u32 = 8;

/// What a client makes of a failed write or `finish` on a request stream: the server asking
/// it to stop sending with `H3_NO_ERROR` needs no more of the request, and its response still
/// comes whole (RFC 9114 section 4.1: clients must not discard complete responses for it), so
/// that is `Ok(false)`: send no more, read the response. `Ok(true)`: the write went.
///
/// # Errors
/// Any other stream error, as it was.
pub fn request_write(
    r: Result<(), h3::error::StreamError>,
) -> Result<bool, h3::error::StreamError> {
    match r {
        Ok(()) => Ok(true),
        Err(h3::error::StreamError::RemoteTerminate { code, .. })
            if code == h3::error::Code::H3_NO_ERROR =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
