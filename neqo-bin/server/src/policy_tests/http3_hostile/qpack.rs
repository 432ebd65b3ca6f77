//! The QPACK streams, which `h3` 0.0.8 never reads: the guard's checks.

use super::*;

#[test]
fn a_second_qpack_encoder_stream_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        write(conn, Dir::Uni, &encoder_stream(&[]), false);
        write(conn, Dir::Uni, &encoder_stream(&[]), false);
        Vec::new()
    });
    // H3_STREAM_CREATION_ERROR (RFC 9204 section 4.2).
    closed_with(&raw, 0x103);
    b.still_serving();
}

/// `h3` 0.0.8 never reads the QPACK encoder stream; the mailbox's guard does. With no
/// dynamic table (capacity 0), an insertion is an error (RFC 9204 section 4.3); 50 KB of
/// the one instruction allowed, a capacity of 0, costs nothing held and the request on the
/// same connection is answered.
#[test]
fn an_encoder_instruction_for_a_table_of_capacity_zero_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // Insert with literal name "a", value "b".
        write(
            conn,
            Dir::Uni,
            &encoder_stream(&[0x41, b'a', 0x01, b'b']),
            false,
        );
        Vec::new()
    });
    // QPACK_ENCODER_STREAM_ERROR.
    closed_with(&raw, 0x201);
    b.still_serving();
}

#[test]
fn setting_the_capacity_to_zero_is_taken_and_costs_nothing_held() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        write(conn, Dir::Uni, &encoder_stream(&[0x20; 50_000]), false);
        vec![write(conn, Dir::Bi, &frame(HEADERS, &get("/5", 0)), true)]
    });
    assert_eq!(raw.lost, None);
    assert!(raw.answered(0, &pattern_body(5)), "{:?}", raw.received);
    // Nothing of the 50 KB of instructions.
    let held = b.app.h3_peak_held();
    assert!(held < b.held_at_most(100, 1000), "held {held} B");
    b.still_serving();
}

/// A decoder's acknowledgment of a section with no dynamic reference, which `h3` never
/// sends, is an error (RFC 9204 section 4.4.1).
#[test]
fn a_section_acknowledgment_nothing_asked_for_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut decoder = Vec::new();
        varint(QPACK_DECODER, &mut decoder);
        // Stream cancellations (allowed), then a section acknowledgment for stream 0.
        decoder.extend_from_slice(&[0x40, 0x44, 0x80]);
        write(conn, Dir::Uni, &decoder, false);
        Vec::new()
    });
    // QPACK_DECODER_STREAM_ERROR.
    closed_with(&raw, 0x202);
    b.still_serving();
}
