//! Test support that other crates' tests share with neqo-bin's own: compiled only with the
//! feature `testing`, which no product enables. neqo-bin's tests get it through a
//! dev-dependency of the crate on itself, so that a plain `cargo test` builds it.

pub mod canceller;
