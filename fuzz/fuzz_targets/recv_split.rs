//! GRO segmentation and datagram splitting: arbitrary slot lengths, strides and truncation
//! flags over arbitrary contents. `split_batch` panics on any lost, invented, reordered or
//! empty datagram.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use neqo_udp::fuzzing::{FuzzSlot, split_batch};

#[derive(Debug, Arbitrary)]
struct Slot {
    len: u16,
    stride: u16,
    truncated: bool,
}

#[derive(Debug, Arbitrary)]
struct Input {
    slots: Vec<Slot>,
    contents: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let slots: Vec<FuzzSlot> = input
        .slots
        .iter()
        .map(|s| FuzzSlot { len: usize::from(s.len), stride: usize::from(s.stride), truncated: s.truncated })
        .collect();
    split_batch(&input.contents, &slots);
});
