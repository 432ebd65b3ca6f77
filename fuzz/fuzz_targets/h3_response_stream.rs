//! Arbitrary bytes as an HTTP/3 response stream (the first byte says whether the request was
//! `HEAD`), read by the client's response reader whole, cut in two at every byte and one byte
//! at a time: `response_stream` panics if the parts, body or verdict differ between those, if
//! too much is held, or if a body is taken that is not its content-length.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    neqo_h3::fuzzing::response_stream(data);
});
