//! The send policy against a scripted kernel: arbitrary transmits, batch sizes, GSO on or off,
//! partial counts, full buffers, pending errors of any errno and messages that fail on their
//! own. `send_policy` panics if a datagram is lost uncounted, sent twice or out of order, if
//! a pending error costs a datagram, if GSO is turned off when it was not at fault, or if the
//! syscalls are unbounded.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    neqo_udp::fuzzing::send_policy(data);
});
