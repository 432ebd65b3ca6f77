//! Placeholder until its first slice lands.
