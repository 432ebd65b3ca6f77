//! HTTP/3 (RFC 9114) over the driver, with the `h3` crate: [`handles`] and [`streams`] give
//! `h3` its `quic` traits, over a [`mailbox`] per connection that carries what they ask to the driver's
//! quinn-proto connection, reading each stream through a [`guard`] that keeps `h3` to frames
//! of a bounded size; [`tasks`] runs `h3`'s futures on the driver's thread; [`conn`]
//! puts the three together per connection, and [`connections`] keeps an application's.

pub mod conn;
pub mod connections;
pub mod guard;
pub mod handles;
pub mod mailbox;
mod reader;
pub mod streams;
pub mod tasks;
pub(crate) mod waiters;

#[cfg(test)]
pub(crate) mod test_client;
#[cfg(test)]
pub(crate) mod tests;

pub use conn::Engine;

/// The unidirectional streams an HTTP/3 endpoint lets its peer open at once: the control
/// stream and QPACK's two (RFC 9114 section 6.2, RFC 9204 section 4.2), and room for the
/// reserved types peers send to exercise the rule that unknown ones are ignored.
pub const UNI_STREAMS: u32 = 8;
