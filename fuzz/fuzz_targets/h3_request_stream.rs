//! Arbitrary bytes as an HTTP/3 request stream, read with the frame reader and the head and
//! trailer rules whole, cut in two at every byte and one byte at a time: `request_stream`
//! panics if the frames, body, heads or verdict differ between those, or too much is held.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    neqo_h3::fuzzing::request_stream(data);
});
