//! What either end's HTTP/3 session keeps on a quinn-proto connection besides its requests:
//! its own control stream ([`OwnControl`]) and the peer's unidirectional streams
//! ([`PeerUni`]).

mod control;
mod peer;

pub use control::OwnControl;
pub use peer::PeerUni;
