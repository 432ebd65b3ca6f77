//! The frame layer: unknown frames ignored, frames where they may not be, malformed and
//! oversized header sections, headers never finished.

use super::*;

#[test]
fn a_raw_request_is_answered_and_unknown_frames_are_ignored() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // A reserved frame type (0x1f * 1 + 0x21) before the HEADERS: ignored (RFC 9114
        // section 9).
        let mut req = frame(0x40, b"grease");
        req.extend(frame(HEADERS, &get("/5", 0)));
        vec![write(conn, Dir::Bi, &req, true)]
    });
    assert_eq!(raw.lost, None);
    assert!(raw.answered(0, &pattern_body(5)), "{:?}", raw.received);
    b.still_serving();
}

#[test]
fn a_first_control_frame_other_than_settings_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        let mut c = Vec::new();
        varint(CONTROL, &mut c);
        c.extend(frame(DATA, b"x"));
        write(conn, Dir::Uni, &c, false);
        Vec::new()
    });
    // H3_MISSING_SETTINGS (RFC 9114 section 6.2.1).
    closed_with(&raw, 0x10a);
    b.still_serving();
}

#[test]
fn a_second_control_stream_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        write(conn, Dir::Uni, &control(), false);
        Vec::new()
    });
    // H3_STREAM_CREATION_ERROR (section 6.2.1).
    closed_with(&raw, 0x103);
    b.still_serving();
}

#[test]
fn data_before_headers_on_a_request_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        vec![write(conn, Dir::Bi, &frame(DATA, b"early"), true)]
    });
    // H3_FRAME_UNEXPECTED (section 4.1).
    closed_with(&raw, 0x105);
    b.still_serving();
}

#[test]
fn a_field_section_qpack_cannot_decode_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // An indexed line naming static entry 99 (the table has 99: 0 to 98).
        let section = [0x00, 0x00, 0xFF, 0x24];
        vec![write(conn, Dir::Bi, &frame(HEADERS, &section), true)]
    });
    // QPACK_DECOMPRESSION_FAILED (RFC 9204 section 6).
    closed_with(&raw, 0x200);
    b.still_serving();
}

#[test]
fn an_oversized_header_section_is_refused_and_the_connection_goes_on() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let big = frame(HEADERS, &get("/5", 20_000));
        let small = frame(HEADERS, &get("/7", 0));
        vec![
            write(conn, Dir::Bi, &big, true),
            write(conn, Dir::Bi, &small, true),
        ]
    });
    assert_eq!(raw.lost, None, "not a connection error");
    // Answered with a status that is no 200 and no body: a HEADERS frame alone, whose field
    // section's one line is a literal with :status's static name (24), as 431 is written
    // (200 would be static entry 25, indexed).
    let big = raw.requests[0];
    let got = raw.received.get(&big).cloned().unwrap_or_default();
    assert!(raw.finished.contains(&big), "{got:?}");
    assert_eq!(got[0], HEADERS as u8);
    assert_eq!(
        usize::from(got[1]) + 2,
        got.len(),
        "one frame, no DATA: {got:?}"
    );
    assert_eq!(
        &got[2..6],
        &[0, 0, 0x5F, 0x09],
        "a :status literal: {got:?}"
    );
    assert_eq!(
        b.app.report.http3.error_statuses, 1,
        "{:?}",
        b.app.report.http3
    );
    assert!(raw.answered(1, &pattern_body(7)), "{:?}", raw.received);
    b.still_serving();
}

#[test]
fn a_request_that_never_finishes_its_headers_holds_back_only_itself() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        // A HEADERS frame that says 100 bytes and brings 10, and a stream left open.
        let mut slow = Vec::new();
        varint(HEADERS, &mut slow);
        varint(100, &mut slow);
        slow.extend_from_slice(&get("/5", 0)[..10]);
        vec![
            write(conn, Dir::Bi, &slow, false),
            write(conn, Dir::Bi, &frame(HEADERS, &get("/9", 0)), true),
        ]
    });
    assert_eq!(raw.lost, None);
    assert!(!raw.finished.contains(&raw.requests[0]));
    assert!(raw.answered(1, &pattern_body(9)), "{:?}", raw.received);
    b.still_serving();
}

/// A field section with an upper-case field name: malformed (RFC 9114 section 4.2), so that
/// request's stream is reset with H3_MESSAGE_ERROR and the connection goes on.
#[test]
fn a_malformed_head_resets_its_stream_with_message_error() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut section = get("/5", 0);
        // A literal with the literal name "X-A" and value "b".
        section.extend_from_slice(&[0x23, b'X', b'-', b'A', 0x01, b'b']);
        vec![
            write(conn, Dir::Bi, &frame(HEADERS, &section), true),
            write(conn, Dir::Bi, &frame(HEADERS, &get("/6", 0)), true),
        ]
    });
    reset_with(&raw, 0, 0x10e);
    assert!(raw.answered(1, &pattern_body(6)), "{:?}", raw.received);
    b.still_serving();
}

/// A request stream that ends before its HEADERS: H3_REQUEST_INCOMPLETE (section 4.1).
#[test]
fn a_request_ended_before_its_headers_is_incomplete() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        vec![write(conn, Dir::Bi, &frame(0x21, b"only this"), true)]
    });
    reset_with(&raw, 0, 0x10d);
    b.still_serving();
}

/// A body longer than the request's content-length: H3_MESSAGE_ERROR (section 4.1.2).
#[test]
fn a_body_past_its_content_length_is_a_message_error() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut section = get("/5", 0);
        // :method POST (static 20) in place of GET (17), and content-length (4): "3".
        section[2] = 0xC0 | 20;
        section.extend_from_slice(&[0x54, 0x01, b'3']);
        let mut request = frame(HEADERS, &section);
        request.extend(frame(DATA, b"four"));
        vec![write(conn, Dir::Bi, &request, true)]
    });
    reset_with(&raw, 0, 0x10e);
    b.still_serving();
}

/// Only servers push: a client's push stream closes the connection with
/// H3_STREAM_CREATION_ERROR (section 6.2.2).
#[test]
fn a_push_stream_from_a_client_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        write(conn, Dir::Uni, &[0x01, 0x00], false);
        Vec::new()
    });
    closed_with(&raw, 0x103);
    b.still_serving();
}

/// A stream of a type the server does not know is not read (section 6.2), whatever it
/// carries, and a request beside it is answered.
#[test]
fn a_stream_of_an_unknown_type_is_left_unread() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut unknown = vec![0x40, 0x21];
        unknown.extend_from_slice(&[0xFF; 5000]);
        write(conn, Dir::Uni, &unknown, true);
        vec![write(conn, Dir::Bi, &frame(HEADERS, &get("/8", 0)), true)]
    });
    assert_eq!(raw.lost, None);
    assert!(raw.answered(0, &pattern_body(8)), "{:?}", raw.received);
    let held = b.app.h3_peak_held();
    assert!(held < b.held_at_most(100, 1000), "held {held} B of 5000");
    b.still_serving();
}
