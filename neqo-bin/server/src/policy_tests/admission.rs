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

/// 64 addresses of one /24, each holding one handshake, fill the table; a newcomer from
/// another /24 takes the place of one of them: the /24 is the heavy group, though no
/// address in it holds more than one.
#[test]
fn a_prefix_of_one_handshake_holders_gives_way_to_an_outsider() {
    let limits = Limits {
        retry: RetryPolicy::Never,
        max_half_open: 64,
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000)],
        &[(Duration::from_millis(100), 0, true)],
    );
    // All at once: full receive batches, but none lost, so the worker is not behind and
    // sheds none of them (the next test).
    for i in 0..64 {
        b.lone_initial(SocketAddr::from(([127, 0, 9, i], 6000)));
    }
    b.run_until("the newcomer", |b| {
        b.clients.outcomes[0] != Outcome::Pending
    });
    b.assert_outcomes(&[Outcome::Done]);
    let a = b.app.report.admission;
    assert_eq!((a.evicted_half_open, a.refused_half_open), (1, 0));
    assert!(a.peak_half_open >= 64, "{a:?}");
    assert_eq!(b.server.counters().initials_shed, 0);
    b.run_to_the_end();
    assert_eq!(b.app.report.admission.handshake_timeouts, 63);
}

/// 64 Initials from one address arrive at once at a socket that holds 40: 24 are lost to
/// the full buffer, so the worker is behind; of the 40 it reads it keeps the address's share
/// (`initial_shed::LEAF_LIMIT` a window) and sheds the rest unread; a newcomer from another
/// /24 arriving while it is still behind is kept and served.
#[test]
fn a_worker_behind_sheds_one_addresss_initials_past_its_share() {
    let limits = Limits {
        retry: RetryPolicy::Never,
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000)],
        &[(Duration::from_millis(100), 0, true)],
    );
    b.net.set_queue_limit(SERVER, 40);
    let flooder = SocketAddr::from(([127, 0, 9, 1], 6000));
    for _ in 0..64 {
        b.lone_initial(flooder);
    }
    assert_eq!(b.net.overflowed(SERVER), 24);
    b.run_until("the newcomer", |b| {
        b.clients.outcomes[0] != Outcome::Pending
    });
    b.assert_outcomes(&[Outcome::Done]);
    let kept = u64::from(crate::initial_shed::LEAF_LIMIT);
    assert_eq!(b.server.counters().initials_shed, 40 - kept);
    let a = b.app.report.admission;
    assert_eq!(a.peak_half_open as u64, kept + 1, "{a:?}");
    b.run_to_the_end();
    assert_eq!(b.app.report.admission.handshake_timeouts, kept);
}

/// Three holders of one handshake each, in /24s of their own, fill the table: no group is
/// heavier than a newcomer's by two, so a newcomer is refused while those handshakes are
/// young, and served once the oldest is older than half the handshake timeout, in its place.
#[test]
fn with_one_handshake_per_holder_a_stale_one_gives_way() {
    let limits = Limits {
        retry: RetryPolicy::Never,
        max_half_open: 3,
        handshake_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000), client(21, 5000)],
        &[
            (Duration::from_millis(100), 0, true),
            (Duration::from_secs(3), 1, true),
        ],
    );
    for host in [10, 11, 12] {
        b.lone_initial(client(host, 6000));
    }
    b.run_until("the second newcomer", |b| {
        b.clients.outcomes[1] != Outcome::Pending
    });
    b.assert_outcomes(&[refused(), Outcome::Done]);
    let a = b.app.report.admission;
    assert_eq!((a.refused_half_open, a.evicted_half_open), (1, 1));
    assert!(b.elapsed() < limits.handshake_timeout, "before any timeout");
    b.run_to_the_end();
    assert_eq!(b.app.report.admission.handshake_timeouts, 2);
}
