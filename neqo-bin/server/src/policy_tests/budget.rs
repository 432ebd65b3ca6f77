//! The receive budget: refusal once spent, windows returned, a source's share.

use super::*;

/// A budget of four minimal windows: four connections from four sources hold it all, a fifth
/// is refused, and once one of the four closes its window serves the next.
#[test]
fn the_receive_budget_refuses_past_its_windows_until_one_returns() {
    let c = minimal_budget();
    let addrs: Vec<SocketAddr> = (0..6).map(|i| client(20 + i, 5000)).collect();
    let ms = Duration::from_millis;
    let mut b = Bench::new(
        c,
        &addrs,
        &[
            (ms(0), 0, false),
            (ms(0), 1, false),
            (ms(0), 2, false),
            (ms(0), 3, false),
            (ms(500), 4, true),
        ],
    );
    b.run_to_the_end();
    let done = Outcome::Done;
    b.assert_outcomes(&[
        done.clone(),
        done.clone(),
        done.clone(),
        done.clone(),
        refused(),
    ]);
    assert_eq!(b.app.report.refused_budget, 1);
    assert_eq!(b.app.report.receive_windows, 4 * MIN_WINDOW);

    // The first holder closes; a client after it is served from its window.
    let now = b.net.now();
    let first = b.clients.handles[0].unwrap();
    b.client
        .update(first, |conn| {
            conn.close(now, 0u32.into(), Bytes::from_static(b"bye"))
        })
        .expect("open");
    b.run_until("the window's return", |b| b.server.open_connections() == 3);
    assert_eq!(b.app.report.receive_windows, 3 * MIN_WINDOW);
    let later = b.elapsed() + ms(10);
    b.clients.plan.push((b.start + later, 5, true));
    b.clients.handles.push(None);
    b.clients.outcomes.push(Outcome::Pending);
    b.clients.got.push(0);
    b.run_until("the sixth", |b| b.clients.outcomes[5] != Outcome::Pending);
    assert_eq!(b.clients.outcomes[5], Outcome::Done);
    assert_eq!(b.app.report.refused_budget, 1);
}

/// One source may hold half the floor's connections once the budget is contended: its third
/// connection is refused for its share while another source is still served.
#[test]
fn a_source_past_its_share_of_a_contended_budget_is_refused_and_others_are_not() {
    let c = minimal_budget();
    let ms = Duration::from_millis;
    let mut b = Bench::new(
        c,
        &[
            client(20, 5000),
            client(20, 5001),
            client(20, 5002),
            client(21, 5000),
        ],
        &[
            (ms(0), 0, false),
            (ms(0), 1, false),
            (ms(200), 2, true),
            (ms(400), 3, true),
        ],
    );
    b.run_to_the_end();
    b.assert_outcomes(&[Outcome::Done, Outcome::Done, refused(), Outcome::Done]);
    assert_eq!(
        (
            b.app.report.refused_source_share,
            b.app.report.refused_budget
        ),
        (1, 0)
    );
}

/// Handshakes that never complete hold the smallest window each and nothing more; a client
/// whose handshake completes gets a large window from the budget at that moment, and the
/// given-up handshakes' windows return.
#[test]
fn windows_follow_the_handshake() {
    let c = config(Limits {
        retry: RetryPolicy::Never,
        ..Limits::default()
    });
    let ms = Duration::from_millis;
    let mut b = Bench::new(c, &[client(20, 5000)], &[(ms(100), 0, false)]);
    for host in 100..132 {
        b.lone_initial(client(host, 6000));
    }
    b.run_until("the lone handshakes", |b| {
        b.app.report.admission.half_open == 32
    });
    assert_eq!(b.app.report.receive_windows, 32 * MIN_WINDOW);
    b.run_until("the client", |b| b.clients.outcomes[0] != Outcome::Pending);
    b.assert_outcomes(&[Outcome::Done]);
    let client_window = b.app.report.receive_windows - 32 * MIN_WINDOW;
    assert!(client_window >= 16 << 20, "{client_window}");
    b.run_until("the timeouts", |b| {
        b.app.report.admission.handshake_timeouts == 32 && b.server.open_connections() == 1
    });
    assert_eq!(b.app.report.receive_windows, client_window);
}
