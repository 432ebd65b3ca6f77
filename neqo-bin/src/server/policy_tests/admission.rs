//! The half-open table: refusal, eviction by source, the handshake timeout.

use super::*;

/// With the half-open table full of handshakes from two sources, one each, a third source is
/// refused (none holds two more than it); the handshakes are given up exactly at their
/// timeout, and the next client is served.
#[test]
fn stalled_handshakes_fill_the_table_until_their_timeout_then_the_slot_serves_again() {
    let limits = Limits {
        retry: RetryPolicy::Never,
        max_half_open: 2,
        handshake_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000), client(21, 5000)],
        &[
            (Duration::from_secs(1), 0, true),
            (Duration::from_secs(6), 1, true),
        ],
    );
    b.lone_initial(client(10, 6000));
    b.lone_initial(client(11, 6000));
    b.run_until("the refusal", |b| b.clients.outcomes[0] != Outcome::Pending);
    assert_eq!(b.clients.outcomes[0], refused());
    let a = b.app.report.admission;
    assert_eq!(
        (a.half_open, a.refused_half_open, a.evicted_half_open),
        (2, 1, 0)
    );

    b.run_until("the timeouts", |b| {
        b.app.report.admission.handshake_timeouts > 0
    });
    // Accepted when their Initials arrived, one way after the start.
    assert_eq!(b.elapsed(), ONE_WAY + limits.handshake_timeout);
    assert_eq!(b.app.report.admission.handshake_timeouts, 2, "both at once");
    assert_eq!(b.app.report.admission.half_open, 0);

    b.run_to_the_end();
    b.assert_outcomes(&[refused(), Outcome::Done]);
    let a = b.app.report.admission;
    assert_eq!((a.peak_half_open, a.handshakes.count), (2, 1));
    assert_eq!(b.server.counters().accepted, 3);
    assert_eq!(
        b.server.open_connections(),
        0,
        "the given-up ones drained too"
    );
}

/// A source holding the whole half-open table loses its oldest handshake to a newcomer from
/// another source, who is served.
#[test]
fn a_source_holding_the_half_open_table_is_evicted_for_another() {
    let limits = Limits {
        retry: RetryPolicy::Never,
        max_half_open: 2,
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000)],
        &[(Duration::from_millis(100), 0, true)],
    );
    b.lone_initial(client(10, 6000));
    b.lone_initial(client(10, 6001));
    b.run_until("the newcomer", |b| {
        b.clients.outcomes[0] != Outcome::Pending
    });
    b.assert_outcomes(&[Outcome::Done]);
    let a = b.app.report.admission;
    assert_eq!((a.evicted_half_open, a.refused_half_open), (1, 0));
    assert_eq!(a.half_open, 1, "the other lone handshake is still held");
    assert!(
        b.elapsed() < limits.handshake_timeout,
        "served well before any timeout"
    );
    b.run_to_the_end();
    assert_eq!(b.app.report.admission.handshake_timeouts, 1);
    assert_eq!(b.server.open_connections(), 0);
}
