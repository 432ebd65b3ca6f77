//! Control-message decoding of the receive path, fed arbitrary bytes as the control buffer:
//! it must never read outside the buffer (run under AddressSanitizer) nor panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = neqo_udp::fuzzing::decode_control(data);
});
