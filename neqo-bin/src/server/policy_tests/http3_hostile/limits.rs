//! What a connection may make the server hold: frames over the size limit, and request
//! bodies within half the window.

use super::*;

/// A HEADERS frame that announces a gigabyte: `h3` would read it whole before looking. The
/// guard refuses it at its length: that request's stream ends with H3_EXCESSIVE_LOAD (both
/// ways), the one beside it is answered, and the connection goes on.
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
    assert_eq!(raw.lost, None, "not a connection error");
    assert_eq!(
        raw.reset.get(&raw.requests[0]),
        Some(&0x107),
        "{:?}",
        raw.reset
    );
    assert!(raw.answered(1, &pattern_body(9)), "{:?}", raw.received);
    assert!(b.app.h3_peak_held() < 1000, "{}", b.app.h3_peak_held());
    b.still_serving();
}

/// The same on the control stream, which `h3` reads for the connection's life: a reserved
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

/// Request bodies, which the server does not read: the mailbox reads them ahead of `h3`
/// (up to `RECV_HELD` each) while the responses go out (slowly: the client's stream window
/// is 8 KiB), but with the smallest window it holds at most half of it for the connection
/// (the other half is quinn-proto's), and the requests are still answered.
#[test]
fn what_a_connection_holds_for_h3_stays_within_half_its_window() {
    let mut b = Bench::with(super::super::minimal_budget());
    let raw = b.raw_with(test_client::config_with_stream_window(8 * 1024), |conn| {
        write(conn, Dir::Uni, &control(), false);
        (0..4)
            .map(|i| {
                let mut request = frame(HEADERS, &get(&format!("/{}", 200_000 + i), 0));
                request.extend(frame(DATA, &[0x55; 12_000]));
                write(conn, Dir::Bi, &request, true)
            })
            .collect()
    });
    assert_eq!(raw.lost, None);
    for i in 0..4 {
        assert!(raw.answered(i, &pattern_body(200_000 + i as u64)), "{i}");
    }
    let held = b.app.h3_peak_held();
    let limit = usize::try_from(MIN_WINDOW / 2).unwrap();
    // Without the limit all four bodies (48 KB) are read at once.
    assert!(
        (20_000..=limit).contains(&held),
        "held {held} B, limit {limit}"
    );
    // Each stream left unread for want of room is listed once, however often it was tried.
    let kept = b.app.h3_kept();
    assert!((1..=4).contains(&kept.peak_starved), "{kept:?}");
    b.still_serving();
}
