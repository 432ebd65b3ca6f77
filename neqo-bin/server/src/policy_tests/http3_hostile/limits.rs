//! What a connection may make the server hold: frames over the size limit, and request
//! bodies within half the window.

use super::*;

/// A HEADERS frame that announces a gigabyte is refused at its length: that request's stream
/// ends with H3_EXCESSIVE_LOAD (both ways), the one beside it is answered, and the connection
/// goes on.
#[test]
fn a_frame_over_the_size_limit_ends_its_stream_at_once() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut huge = Vec::new();
        varint(HEADERS, &mut huge);
        varint(1 << 30, &mut huge);
        huge.extend_from_slice(&[0x41; 20_000]);
        vec![
            write(conn, Dir::Bi, &huge, false),
            write(conn, Dir::Bi, &frame(HEADERS, &get("/9", 0)), true),
        ]
    });
    reset_with(&raw, 0, 0x107);
    assert!(raw.answered(1, &pattern_body(9)), "{:?}", raw.received);
    assert!(b.app.h3_peak_held() < 1000, "{}", b.app.h3_peak_held());
    b.still_serving();
}

/// The same on the control stream, which is read for the connection's life: a reserved
/// frame type announcing a megabyte closes the connection with H3_EXCESSIVE_LOAD.
#[test]
fn a_control_frame_over_the_size_limit_closes_the_connection() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        let mut c = control();
        varint(0x21, &mut c);
        varint(1 << 20, &mut c);
        c.extend_from_slice(&[0; 10_000]);
        write(conn, Dir::Uni, &c, false);
        Vec::new()
    });
    closed_with(&raw, 0x107);
    b.still_serving();
}

/// Request bodies the server does not need are read past as they arrive, DATA frame by DATA
/// frame, never held, while the responses go out (slowly: the client's stream window is
/// 8 KiB); with the smallest window every request is answered. With the `h3` crate (until
/// this server read HTTP/3 itself) the bodies were held, up to half the window.
#[test]
fn request_bodies_the_server_does_not_need_are_not_held() {
    let mut b = Bench::with(crate::policy_tests::minimal_budget());
    let raw = b.raw_with(
        neqo_h3::testing::config_with_stream_window(8 * 1024),
        |conn| {
            write(conn, Dir::Uni, &control(), false);
            (0..4)
                .map(|i| {
                    let mut request = frame(HEADERS, &get(&format!("/{}", 200_000 + i), 0));
                    request.extend(frame(DATA, &[0x55; 12_000]));
                    write(conn, Dir::Bi, &request, true)
                })
                .collect()
        },
    );
    assert_eq!(raw.lost, None);
    for i in 0..4 {
        assert!(raw.answered(i, &pattern_body(200_000 + i as u64)), "{i}");
    }
    let held = b.app.h3_peak_held();
    assert!(held < b.held_at_most(100, 4096), "held {held} B of 48 000");
    b.still_serving();
}

/// Trailers are dropped, and trailers over the field section limit are not even read: a
/// `POST` with 20 KB of them (without the section prefix: they would not decode, so a
/// connection still open shows they were never decoded) is answered with its body's length,
/// and nothing was held.
#[test]
fn trailers_over_the_limit_are_read_past() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        write(conn, Dir::Uni, &control(), false);
        let mut section = get("/", 0);
        // :method POST (static 20) in place of GET (17).
        section[2] = 0xC0 | 20;
        let mut request = frame(HEADERS, &section);
        request.extend(frame(DATA, &[7; 1000]));
        request.extend(frame(HEADERS, &get("/", 20_000)[2..]));
        vec![write(conn, Dir::Bi, &request, true)]
    });
    assert_eq!(raw.lost, None);
    assert!(raw.answered(0, b"1000"), "{:?}", raw.received);
    // A service's `h3` takes the trailers' frame whole before it finds it over the limit: at
    // most the frame limit of neqo-h3's guard, 32 KiB.
    let held = b.app.h3_peak_held();
    assert!(held < b.held_at_most(100, 33 << 10), "held {held} B");
    b.still_serving();
}
