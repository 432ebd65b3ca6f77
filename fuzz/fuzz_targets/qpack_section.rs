//! Arbitrary bytes as a QPACK field section: `qpack_section` panics if a prefix decodes to
//! lines other than a prefix of the whole's, if what decodes does not re-encode to the same
//! lines, or if a head the rules take is not taken again, the same, once re-encoded.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    neqo_h3::fuzzing::qpack_section(data);
});
