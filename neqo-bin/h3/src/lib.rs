//! The project's HTTP/3 (RFC 9114, QPACK RFC 9204).
//!
//! Its rules and wire format need no QUIC stack, so that every endpoint here shares one copy
//! and a fuzzer can drive them alone:
//!
//! - [`frame`]: varints, frame types and error codes, frames read from chunks of any size.
//! - [`qpack`]: field sections decoded and encoded with the static table (no dynamic table:
//!   none is offered or used).
//! - [`head`]: what a request's head, a response's head and trailers may hold, for both
//!   directions.
//! - [`control`]: the control stream's frames and their order, as a server or a client reads
//!   them, and the frames an endpoint sends on its own.
//! - [`message`]: a message's frames on a request stream, in order, whichever end reads.
//! - [`response`]: a response as a client reads it, interim heads to trailers, its body held
//!   to its `content-length`.
//! - [`uni`]: a peer's unidirectional streams, typed, with QPACK's two streams' rules.
//!
//! With the feature `session`, HTTP/3 on quinn-proto's connections, sans-I/O (the
//! application hands over the connection's events and reads what they meant from a queue):
//!
//! - `session`: what either end keeps besides its requests, its own control stream and the
//!   peer's unidirectional streams.
//! - `client`: a client's session, `ClientSession`: requests sent, responses read as the
//!   application can take them, GOAWAY and rejections told apart from cuts. `neqo-client`
//!   speaks HTTP/3 through it.
//!
//! With the feature `driver`, HTTP/3 over neqo-driver's connections with the `h3` crate, which
//! the services behind neqo-server-core's `Server` still ride (issue 54 moves them to a
//! server session here): `handles` and `streams` give `h3` its `quic` traits, over a
//! `mailbox` per connection (its streams' state in `stream`) that carries what they ask to the
//! driver's quinn-proto connection, reading each stream through a `guard` that keeps `h3` to
//! frames of a bounded size; `tasks` runs `h3`'s futures on the driver's thread; `Engine` puts
//! the three together per connection, and `Connections` keeps an application's.
//!
//! - `Engine`: one connection's HTTP/3, driven from an application's events.
//! - `H3Connection` and `Opener`: what `h3::client::new` and `h3::server` take.
//! - `Spawner`: runs a request's future on the driver's thread.
//! - `BidiStream`, `SendStream`, `RecvStream`: the streams `h3` reads and writes, for naming
//!   its request streams' types.
//! - `Connections`: an application's connections, their engines and its data for each.
//! - `testing` (feature `testing`): an HTTP/3 client on the h3 crate for tests on
//!   neqo-driver's in-memory network.
//!
//! neqo-server's built-in HTTP/3 reads and writes the frames itself with the modules above,
//! with no task per request.

#![warn(missing_docs)]

pub mod control;
pub mod frame;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
pub mod head;
pub mod message;
pub mod qpack;
pub mod response;
pub mod uni;

#[cfg(feature = "session")]
pub mod client;
#[cfg(feature = "session")]
pub mod session;

#[cfg(feature = "driver")]
mod conn;
#[cfg(feature = "driver")]
mod connections;
#[cfg(feature = "driver")]
mod guard;
#[cfg(feature = "driver")]
mod handles;
#[cfg(feature = "driver")]
mod mailbox;
#[cfg(feature = "driver")]
mod reader;
#[cfg(feature = "driver")]
mod stream;
#[cfg(feature = "driver")]
mod streams;
#[cfg(feature = "driver")]
mod tasks;
#[cfg(any(all(test, feature = "driver"), feature = "testing"))]
pub mod testing;
#[cfg(feature = "driver")]
mod waiters;

#[cfg(all(test, feature = "driver"))]
mod tests;

#[cfg(feature = "driver")]
pub use conn::Engine;
#[cfg(feature = "driver")]
pub use connections::Connections;
#[cfg(feature = "driver")]
pub use handles::{H3Connection, Opener};
#[cfg(feature = "driver")]
pub use streams::{BidiStream, RecvStream, SendStream};
#[cfg(feature = "driver")]
pub use tasks::{Notifier, Spawner};

#[cfg(feature = "session")]
/// The unidirectional streams an HTTP/3 endpoint lets its peer open at once: the control
/// stream and QPACK's two (RFC 9114 section 6.2, RFC 9204 section 4.2), and room for the
/// reserved types peers send to exercise the rule that unknown ones are ignored.
pub const UNI_STREAMS: u32 = 8;

#[cfg(feature = "driver")]
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
