//! The same hostile input against HTTP/3 answered by a service (the `Files` service on the h3
//! crate): the reactions RFC 9114 and RFC 9204 require hold there too. The cases are the
//! built-in's own files, compiled again here with a [`Bench`] whose h3 is a service's.

use std::ops::{Deref, DerefMut};

#[allow(clippy::wildcard_imports, reason = "the cases' own imports, shared")]
use super::*;

/// A [`Bench`](super::Bench) whose h3 is a service's.
struct Bench(super::Bench);

impl Bench {
    fn new() -> Self {
        Self::with(ServerConfig::default())
    }

    fn with(config: ServerConfig) -> Self {
        Self(super::Bench::service_with(config))
    }
}

impl Deref for Bench {
    type Target = super::Bench;

    fn deref(&self) -> &super::Bench {
        &self.0
    }
}

impl DerefMut for Bench {
    fn deref_mut(&mut self) -> &mut super::Bench {
        &mut self.0
    }
}

#[path = "frames.rs"]
#[allow(
    clippy::duplicate_mod,
    reason = "the same cases, against the other path"
)]
mod frames;
#[path = "limits.rs"]
#[allow(
    clippy::duplicate_mod,
    reason = "the same cases, against the other path"
)]
mod limits;
#[path = "qpack.rs"]
#[allow(
    clippy::duplicate_mod,
    reason = "the same cases, against the other path"
)]
mod qpack;
