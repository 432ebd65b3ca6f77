//! Arbitrary bytes as a peer's unidirectional HTTP/3 stream (control, QPACK or other), read by
//! a server and by a client whole, cut in two at every byte and one byte at a time:
//! `uni_streams` panics if the verdict differs between those.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    neqo_h3::fuzzing::uni_streams(data);
});
