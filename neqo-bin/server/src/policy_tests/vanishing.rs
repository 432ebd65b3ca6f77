//! Clients that vanish: a connection whose client goes silent without a CONNECTION_CLOSE
//! costs the server nothing once its idle timeout has passed, however many there are. In
//! virtual time, so the idle timeout is exact and short, and a crowd of connections cannot
//! make one of them idle for real (`tests/abuse.rs` has 500 real ones, all closed).

use super::*;

/// 500 connections at once from 8 client addresses, each downloading [`BODY`] bytes; half
/// close once done, half go silent (no CONNECTION_CLOSE: their client neither sends nor
/// answers again). Every download is byte-exact; the server drains the closed ones at once,
/// holds the silent ones until its idle timeout and then none at all.
#[test]
fn five_hundred_connections_half_vanishing_leave_no_state() {
    const CONNS: usize = 500;
    const PATHS: u8 = 8;
    let idle = Duration::from_secs(2);
    let mut config = config(Limits::default());
    config.transport.idle_timeout = idle;
    let clients: Vec<SocketAddr> = (0..PATHS).map(|i| client(30 + i, 5000)).collect();
    // Even paths close, odd paths vanish: a silent path is cut off once its downloads are
    // done, so that nothing its client's timers send reaches the server.
    let plan: Vec<_> = (0..CONNS)
        .map(|i| (Duration::ZERO, i % usize::from(PATHS), i % 2 == 0))
        .collect();
    let mut b = Bench::new(config, &clients, &plan);
    let silent: Vec<usize> = (0..CONNS).filter(|i| i % 2 == 1).collect();
    b.run_until("every download", |b| {
        b.clients.opened == CONNS && !b.clients.outcomes.contains(&Outcome::Pending)
    });
    let done = b.elapsed();
    b.assert_outcomes(&vec![Outcome::Done; CONNS]);
    for p in (1..PATHS).step_by(2) {
        b.net.set_unreachable(clients[usize::from(p)], true);
    }

    b.run_until("the closed ones drained", |b| {
        b.server.open_connections() == silent.len()
    });
    assert!(
        b.elapsed() < done + idle,
        "the silent ones are held until the idle timeout, the closed ones drain before it"
    );
    b.run_until("the silent ones timed out", |b| {
        b.server.open_connections() == 0
    });
    let gone = b.elapsed();
    println!("{CONNS} connections: downloads done at {done:?}, the server holds none at {gone:?}");
    // The idle timeout, from each silent connection's last packet (none later than `done`),
    // is what ends them: within a few probe timeouts of it in virtual time.
    assert!(gone >= idle, "{gone:?}");
    assert!(gone <= done + idle + Duration::from_secs(1), "{gone:?}");
    let c = b.server.counters();
    assert_eq!((c.accepted, c.drained), (CONNS as u64, CONNS as u64));
    let r = &b.app.report;
    assert_eq!(r.requests, CONNS as u64);
    assert_eq!(r.bytes_sent, BODY * CONNS as u64);
    assert_eq!(r.admission.handshake_timeouts, 0);
    assert_eq!(r.receive_windows, 0, "every window returned");
}
