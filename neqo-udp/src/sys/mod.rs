//! Platform syscalls behind one narrow interface. Linux has its own module (all the crate's
//! unsafe code); everything else goes through quinn-udp, which is tested on those platforms.

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub(crate) use linux::*;

#[cfg(not(target_os = "linux"))]
mod portable;
#[cfg(not(target_os = "linux"))]
pub(crate) use portable::*;
