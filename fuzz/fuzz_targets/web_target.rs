//! Arbitrary bytes as an HTTP request target for the file server: `web_target` panics if the
//! web rules look up anything but plain names under the root, if the path looked up, escaped
//! again, does not look up to itself, or if a directory's redirect does not look up to its
//! index (`neqo_protocols::web::check`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    neqo_protocols::web::check(data);
});
