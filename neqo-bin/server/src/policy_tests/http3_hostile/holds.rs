//! What a connection's requests leave behind: nothing, once answered. A request's entry leaves
//! once its response is acknowledged, whatever came after its HEADERS (a GET's FIN, the
//! GREASE frame clients send). At 37a1ab3, when the `h3` crate served HTTP/3, each answered
//! GET stayed counted in the connection's hold until the connection closed, and with the
//! 64 KiB floor window a connection stopped after 2184 requests: 32 KiB / 15 bytes of GREASE.

use super::*;
use neqo_h3::UNI_STREAMS;

/// Several connections at once, each its own [`Client`].
struct Many(Vec<Client>);

impl Many {
    fn client(&mut self, ch: ConnectionHandle) -> Option<&mut Client> {
        self.0.iter_mut().find(|c| c.handle() == Some(ch))
    }
}

impl Application for Many {
    fn event(&mut self, ch: ConnectionHandle, conn: &mut Connection, ev: Event, now: Instant) {
        if let Some(c) = self.client(ch) {
            c.event(ch, conn, ev, now);
        }
    }

    fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
        self.0.iter_mut().filter_map(|c| c.poll(driver, now)).min()
    }

    fn drained(&mut self, ch: ConnectionHandle, conn: &Connection) {
        if let Some(c) = self.client(ch) {
            c.drained(ch, conn);
        }
    }

    fn done(&self) -> bool {
        self.0.iter().all(Application::done)
    }
}

impl Bench {
    /// Serves on with no client for `d` of virtual time: what is closing finishes closing.
    fn idle(&mut self, d: Duration) {
        let end = self.net.now() + d;
        for _ in 0..TURNS {
            let s = self.net.turn(&mut self.server, &mut self.app).unwrap();
            if self.net.now() >= end {
                return;
            }
            let queued = self.server.queued_datagrams() > 0;
            if !self.net.advance(&[s.deadline, Some(end)], queued) {
                return;
            }
        }
    }
}

/// The hang's shape: connections with the smallest window, each making thousands of
/// requests one after another (h3's client sends a GREASE frame after each request's
/// HEADERS). Every one is answered byte-exact, and what the connections held is released.
#[test]
fn thousands_of_sequential_requests_on_the_smallest_windows_are_all_answered() {
    const CONNECTIONS: usize = 3;
    const REQUESTS: usize = 2500;
    // Every connection at the floor window, 64 KiB.
    let mut config = super::super::minimal_budget();
    config.budget = super::super::Budget {
        bytes: 8 * MIN_WINDOW,
        floor_connections: 8,
    };
    let mut b = Bench::with(config);
    let requests: Vec<(&str, &str)> = vec![("GET", "/3"); REQUESTS];
    let mut many = Many(
        (0..CONNECTIONS)
            .map(|_| Client::new(SERVER, neqo_h3::testing::config(), &requests).sequential())
            .collect(),
    );
    b.run(&mut many, Duration::from_secs(600), |_| false);
    for (i, c) in many.0.iter().enumerate() {
        let got = c.got.borrow();
        assert_eq!(
            got.len(),
            REQUESTS,
            "connection {i}: {:?}",
            &got[..got.len().min(3)]
        );
        for g in got.iter() {
            assert_eq!(
                g.as_ref().unwrap(),
                &Got::ok(
                    "GET",
                    "/3",
                    pattern_body(3),
                    Some("application/octet-stream")
                ),
                "connection {i}"
            );
        }
    }
    let r = &b.app.report;
    assert_eq!(r.http3.responses, (CONNECTIONS * REQUESTS) as u64);
    b.idle(Duration::from_secs(5));
    assert_eq!(
        b.app.h3_kept(),
        crate::http3::Kept::default(),
        "every connection closed and gone"
    );
}

/// A connection kept open after 500 requests at once keeps only the client's control and
/// QPACK streams, and holds nothing.
#[test]
fn an_open_connection_keeps_nothing_of_its_answered_requests() {
    const REQUESTS: usize = 500;
    let mut b = Bench::new();
    let paths: Vec<String> = (0..REQUESTS).map(|i| format!("/{}", i % 50 + 1)).collect();
    let requests: Vec<(&str, &str)> = paths.iter().map(|p| ("GET", p.as_str())).collect();
    let mut c = Client::new(SERVER, neqo_h3::testing::config(), &requests).holding_open();
    b.run(&mut c, Duration::from_secs(5), |_| false);
    let got = c.answers();
    assert_eq!(got.len(), REQUESTS);
    assert!(
        got.iter()
            .all(|g| g.as_ref().is_ok_and(|g| g.status == 200))
    );
    let kept = b.app.h3_kept();
    assert_eq!(kept.connections, 1, "{kept:?}");
    assert_eq!(kept.requests, 0, "{kept:?}");
    assert!(
        (1..=UNI_STREAMS as usize).contains(&kept.uni_streams),
        "only the client's control and QPACK streams: {kept:?}"
    );
    assert_eq!(kept.held, 0, "{kept:?}");
    // Once the connection is gone, so is everything it kept.
    b.idle(Duration::from_secs(60));
    assert_eq!(b.app.h3_kept(), crate::http3::Kept::default());
}

/// A peer writes 30 000 frames of a reserved type on its control stream: each is read past,
/// nothing is kept of them, and a request on the same connection is answered.
#[test]
fn control_frames_in_a_loop_keep_nothing() {
    let mut b = Bench::new();
    let raw = b.raw(|conn| {
        let mut c = control();
        for _ in 0..30_000 {
            c.extend(frame(0x21, &[]));
        }
        write(conn, Dir::Uni, &c, false);
        vec![write(conn, Dir::Bi, &frame(HEADERS, &get("/7", 0)), true)]
    });
    assert_eq!(raw.lost, None);
    assert!(raw.answered(0, &pattern_body(7)), "{:?}", raw.received);
    let kept = b.app.h3_kept();
    assert_eq!(kept.connections, 1, "{kept:?}");
    assert_eq!((kept.requests, kept.held), (0, 0), "{kept:?}");
    assert!(b.app.h3_peak_held() < 100, "{}", b.app.h3_peak_held());
    b.still_serving();
}
