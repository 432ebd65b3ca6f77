//! Retry: `always` and `auto`.

use super::*;

/// `--retry always`: every new connection is sent a Retry first and completes with the
/// token; a client's second Initial (with it) is not retried again.
#[test]
fn retry_always_validates_every_client_and_each_completes() {
    let mut b = Bench::new(
        config(Limits {
            retry: RetryPolicy::Always,
            ..Limits::default()
        }),
        &[client(20, 5000), client(21, 5000)],
        &[(Duration::ZERO, 0, true), (Duration::ZERO, 1, true)],
    );
    b.run_to_the_end();
    b.assert_outcomes(&[Outcome::Done, Outcome::Done]);
    let counters = b.server.counters();
    assert_eq!((counters.retries, counters.accepted), (2, 2));
    assert_eq!(b.app.report.admission.retries, 2);
    assert_eq!(b.app.report.admission.handshakes.count, 2);
}

/// `--retry auto`: no Retry while the server is quiet; once the half-open handshakes reach the
/// threshold a newcomer is retried (and served), and after they time out, none is again.
#[test]
fn retry_auto_starts_at_the_half_open_threshold_and_stops_below_it() {
    let limits = Limits {
        retry: RetryPolicy::Auto,
        retry_half_open: 2,
        handshake_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let mut b = Bench::new(
        config(limits),
        &[client(20, 5000), client(21, 5000), client(22, 5000)],
        &[
            (Duration::ZERO, 0, true),
            (Duration::from_secs(1), 1, true),
            (Duration::from_secs(7), 2, true),
        ],
    );
    // The first client is served before the lone Initials arrive: no Retry for it.
    b.run_until("the first", |b| b.clients.outcomes[0] != Outcome::Pending);
    assert_eq!(b.server.counters().retries, 0);
    b.lone_initial(client(10, 6000));
    b.lone_initial(client(11, 6000));
    b.run_until("the second", |b| b.clients.outcomes[1] != Outcome::Pending);
    assert_eq!(b.server.counters().retries, 1, "the second was retried");
    b.run_to_the_end();
    b.assert_outcomes(&[Outcome::Done, Outcome::Done, Outcome::Done]);
    assert_eq!(b.server.counters().retries, 1, "the third was not");
    assert_eq!(b.app.report.admission.handshake_timeouts, 2);
}
