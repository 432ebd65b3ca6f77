//! HTTP/3 (RFC 9114) over the driver, with the `h3` crate: [`transport`] gives `h3` its
//! `quic` traits over the driver's quinn-proto connections, [`tasks`] runs its futures on
//! the driver's thread.

pub mod conn;
pub mod tasks;
pub mod transport;

#[cfg(test)]
mod tests;

pub use conn::Engine;
