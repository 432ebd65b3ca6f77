//! The QUIC implementations the tools run against each other.

/// A QUIC implementation: its binaries are `neqo-server`/`neqo-client` or `msquic-peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Impl {
    Neqo,
    Msquic,
}

impl Impl {
    /// Its name in tables.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Neqo => "neqo",
            Self::Msquic => "msquic",
        }
    }
}
