//! Admission that refuses floods, not users: a `neqo-server` with its default limits (and,
//! where the attack does not live on their churn, handshake and idle timeouts longer than
//! any test runs), in a network namespace the test makes, under handshakes that never finish, while an ordinary client from a fresh address
//! opens 40 connections, 4 at a time. Each test prints the attack's figures (`--nocapture`)
//! and asserts behaviour: every connection of the client served, and what the attack holds
//! of the server's limits.
//!
//! The client comes once the server's metrics show the attack in place (so many handshakes
//! held, Retries sent, Initials shed), not after a fixed time. Needs root (the namespace, and
//! source addresses of the test's choosing); skipped otherwise. Every attack is bounded in
//! count and time.

#![cfg(target_os = "linux")]

mod common;
#[path = "support/initials.rs"]
mod initials;

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::{scrape, stop_and_report, url, with_deadline};
use initials::{Held, Holders, aimed_flood};
use neqo_bin::client::{self, ClientConfig};
use neqo_driver::tls::Trust;
use test_fixtures::{
    Server,
    netns::{Netns, enter, is_root},
};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");

/// A hang guard for a whole step, not a performance bound.
const DEADLINE: Duration = Duration::from_secs(90);

/// The server's handshake and idle timeouts where the attack does not depend on them:
/// longer than any test here runs, so that a held handshake lasts the whole test however
/// slowly the holders' Initials go out, and the ordinary client's handshakes never meet them
/// on a loaded machine (`policy_tests::admission` tests the timeout, in virtual time).
const TIMEOUTS: [&str; 4] = ["--handshake-timeout", "300", "--idle-timeout", "600"];

/// A holders' round longer than a test runs: each source holds one handshake.
const ONE_ROUND: Duration = Duration::from_secs(600);

/// The server's `--max-half-open` by default.
const MAX_HALF_OPEN: f64 = 1000.0;

/// The smallest receive window, what a connection holds of the budget until its handshake
/// completes.
const MIN_WINDOW: f64 = 65_536.0;

/// One test at a time: each loads both cores.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

impl During {
    /// The client's report; its failure fails the test, with the server's report.
    fn served(&self) -> &client::ClientReport {
        self.client
            .as_ref()
            .unwrap_or_else(|e| panic!("the ordinary client: {e}; the server: {:?}", self.report))
    }
}

/// A server with its default limits and `extra` in `ns` on `listen`, its metrics on
/// `metrics`, its report to a file.
fn start(
    ns: &Netns,
    listen: SocketAddr,
    metrics: SocketAddr,
    extra: &[&str],
) -> (Server, std::path::PathBuf) {
    let json = std::env::temp_dir().join(format!(
        "neqo-fair-admission-{}-{}.json",
        std::process::id(),
        listen.port()
    ));
    let server = Server::start(
        ns.command(SERVER)
            .args([
                "--listen",
                &listen.to_string(),
                "--metrics",
                &metrics.to_string(),
                "--json",
                json.to_str().unwrap(),
            ])
            .args(extra),
        DEADLINE,
    )
    .unwrap_or_else(|e| panic!("server did not start: {e}"));
    (server, json)
}

/// What an attack left: the ordinary client's report, the server's metrics once the
/// client is done, what the holders sent, and the server's report.
struct During {
    client: Result<client::ClientReport, String>,
    metrics: Metrics,
    held: Held,
    report: neqo_report::ServerReport,
}

/// A scrape's samples, `name{labels}` to value.
type Metrics = HashMap<String, f64>;

/// The samples of family `name` in `m` summed over their labels (workers, reasons), 0 if it
/// has none yet.
fn get(m: &Metrics, name: &str) -> f64 {
    labelled(m, name, "")
}

/// The samples of family `name` whose labels include `label` (`reason="budget"`), summed.
fn labelled(m: &Metrics, name: &str, label: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| {
            let (family, labels) = k.split_once('{').unwrap_or((k, ""));
            family == name && labels.contains(label)
        })
        .map(|(_, v)| v)
        .sum()
}

/// Scrapes `metrics` from inside `ns` until `ready` holds; that scrape. What the live gauges
/// (connections open and half-open, server-wide) say is now; what the workers publish
/// (everything else) is up to a second old. A hang guard of [`DEADLINE`].
fn scrape_until(
    ns: &Netns,
    metrics: SocketAddr,
    what: &'static str,
    ready: impl Fn(&Metrics) -> bool + Send + 'static,
) -> Metrics {
    let path = ns.path();
    with_deadline(what, 2 * DEADLINE, move || {
        enter(&path).unwrap();
        let started = Instant::now();
        loop {
            let m = scrape(metrics);
            if ready(&m) {
                return m;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{what}: not within {DEADLINE:?}: {m:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// The ordinary client, from `ns`'s default address: 40 connections to `addr` of one request
/// each, 4 at a time.
fn ordinary_client(ns: &Netns, addr: SocketAddr) -> Result<client::ClientReport, String> {
    let path = ns.path();
    with_deadline("the ordinary client", DEADLINE, move || {
        enter(&path).unwrap();
        let mut c = ClientConfig::new(url(addr, "/1000"), Trust::Insecure);
        c.connections = 40;
        c.concurrency = 4;
        // As the server's: a loaded machine does not end a connection that waits its turn.
        c.transport.idle_timeout = Duration::from_secs(600);
        client::run(c).map_err(|e| format!("{e:#}"))
    })
}

/// Handshakes held against the server: from `sources`, a round every `every`; `spoofed`:
/// never answering a Retry.
struct Attack {
    sources: Vec<IpAddr>,
    every: Duration,
    spoofed: bool,
}

/// A server with its default limits and `extra` in `ns` on `listen` (a port of 4433), the
/// `attack` against it, and, once its metrics show it in place (`ready`), an ordinary client:
/// 40 connections of one request each, 4 at a time. The holders stop once the metrics after
/// the client satisfy `after`.
fn during(
    ns: &Netns,
    (listen, extra): (IpAddr, &[&str]),
    attack: Attack,
    ready: impl Fn(&Metrics) -> bool + Send + 'static,
    after: impl Fn(&Metrics) -> bool + Send + 'static,
) -> During {
    let Attack {
        sources,
        every,
        spoofed,
    } = attack;
    let addr = SocketAddr::new(listen, 4433);
    let metrics = SocketAddr::new(listen, 9464);
    let (server, json) = start(ns, addr, metrics, extra);
    let stop = Arc::new(AtomicBool::new(false));
    let path = ns.path();
    let holders = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            enter(&path).unwrap();
            let holders = Holders::new(addr).unwrap();
            let holders = if spoofed { holders.spoofed() } else { holders };
            holders.run(&sources, every, &stop, DEADLINE / 2)
        })
    };
    scrape_until(ns, metrics, "the attack in place", ready);
    let client = ordinary_client(ns, addr);
    // A client that failed leaves what `after` waits for undone: its error says more.
    let metrics = if client.is_ok() {
        scrape_until(ns, metrics, "the metrics after the client", after)
    } else {
        scrape_until(ns, metrics, "a scrape", |_| true)
    };
    stop.store(true, Ordering::Relaxed);
    let held = holders.join().unwrap();
    let report = stop_and_report(server, &json);
    During {
        client,
        metrics,
        held,
        report,
    }
}

/// 32 source addresses each hold one handshake that never finishes; the budget keeps only
/// the smallest window for each, so it stays uncontended, and an ordinary client is served
/// 40 of 40. Before, each such handshake was granted its full window at accept: 622 MB of
/// the 1 GiB budget, and the client's connections were refused for their source's share.
#[test]
fn unfinished_handshakes_from_32_sources_hold_the_floor_only() {
    if !is_root() {
        eprintln!("skipped: needs root for a network namespace");
        return;
    }
    let _serial = serial();
    let ns = Netns::create("neqo-fair-32").unwrap();
    let sources: Vec<IpAddr> = (0..32u8)
        .map(|i| IpAddr::from([127, 0, 1, 10 + i]))
        .collect();
    // The client comes once all 32 handshakes are held. After it, the windows are read from
    // reports the workers published after their last request (all 40 counted), once only the
    // holders are left (by the live gauges): a report made before a connection of the
    // client's drained counts its window too, one made before the client none of its own.
    let d = during(
        &ns,
        (IpAddr::from([127, 0, 0, 1]), &TIMEOUTS),
        Attack {
            sources,
            every: ONE_ROUND,
            spoofed: false,
        },
        |m| get(m, "neqo_server_connections_half_open") >= 32.0,
        |m| {
            get(m, "neqo_server_connections_open") == get(m, "neqo_server_connections_half_open")
                && get(m, "neqo_server_requests_total") >= 40.0
                && get(m, "neqo_server_receive_windows_bytes") <= 32.0 * MIN_WINDOW
        },
    );
    let windows = get(&d.metrics, "neqo_server_receive_windows_bytes");
    let half_open = get(&d.metrics, "neqo_server_connections_half_open");
    println!(
        "32 sources holding handshakes ({} Initials): client {} of 40 served; receive windows {windows} B after it; server {:?}",
        d.held.initials,
        d.served().requests,
        d.report.admission
    );
    let c = d.served();
    assert_eq!((c.requests, c.failed_requests), (40, 0), "{c:?}");
    assert!(
        d.report.admission.peak_half_open >= 32,
        "the handshakes were held: {:?}",
        d.report.admission
    );
    // One round: each source holds exactly one handshake, none given up.
    assert_eq!(half_open, 32.0, "{:?}", d.metrics);
    assert_eq!(
        windows,
        half_open * MIN_WINDOW,
        "held handshakes hold the smallest window each: {windows} B"
    );
    assert_eq!(d.report.admission.handshake_timeouts, 0, "{:?}", d.report);
    assert_eq!(d.report.refused_source_share, 0, "{:?}", d.report);
    assert_eq!(d.report.refused_budget, 0, "{:?}", d.report);
}

/// One address replays Retry tokens, 300 new handshakes a second that never finish (each
/// after a Retry of its own), more than the half-open table holds over a handshake timeout;
/// an ordinary client from another address is served 40 of 40, and the replaying address
/// is shed past its share of Initials by a worker behind, or refused once it holds its share
/// of a worker's floor. Before, 2 of 100 such clients
/// were refused for their share of a budget the replays had made look contended.
#[test]
fn one_address_replaying_retry_tokens_keeps_nobody_out() {
    if !is_root() {
        eprintln!("skipped: needs root for a network namespace");
        return;
    }
    let _serial = serial();
    let ns = Netns::create("neqo-fair-replay").unwrap();
    // In a /24 of its own: the client's neighbours share its prefix's fate once the budget
    // is contended (docs/reference/server-limits.md).
    let sources = vec![IpAddr::from([127, 0, 1, 2]); 300];
    // The server's default timeouts: the replays' load is their rate times the handshake
    // timeout, accepting and giving up handshakes, which makes a worker fall behind. The
    // client comes once the replays hold 600 handshakes and the address has been refused
    // for its share, or once a worker behind sheds them: what the assertions below take.
    let d = during(
        &ns,
        (IpAddr::from([127, 0, 0, 1]), &[]),
        Attack {
            sources,
            every: Duration::from_secs(1),
            spoofed: false,
        },
        |m| {
            let refused = labelled(m, "neqo_server_refused_connections_total", "source_share");
            (get(m, "neqo_server_connections_half_open") >= 600.0 && refused > 0.0)
                || get(m, "neqo_server_initials_shed_total") > 0.0
        },
        |_| true,
    );
    let a = &d.report.admission;
    println!(
        "one address replaying ({} Initials, {} after a Retry): client {} of 40 served; receive windows {} B after it; server admission {a:?}",
        d.held.initials,
        d.held.retries,
        d.served().requests,
        get(&d.metrics, "neqo_server_receive_windows_bytes"),
    );
    let c = d.served();
    assert_eq!((c.requests, c.failed_requests), (40, 0), "{c:?}");
    assert!(d.held.retries > 0, "the replays went through Retry");
    // Each round's burst fills a receive batch where the sender outpaces the worker: the
    // worker then sheds the address's first Initials past its share unread (those after a
    // Retry are to the server's own IDs, and kept). Where it keeps up, the replays hold
    // handshakes, and what the server refuses is the replaying address, once it holds its
    // share of a worker's floor.
    if d.report.driver.initials_shed == 0 {
        assert!(
            a.peak_half_open >= 600,
            "the replays held handshakes: {a:?}"
        );
        assert!(d.report.refused_source_share > 0, "{:?}", d.report);
    }
}

/// 1024 IPv6 /64s of one /54, each holding one handshake that never finishes (through
/// Retry, which the server asks for under this load), against the default 1000 half-open
/// slots: the table is full, and an ordinary client from another prefix is served 40 of 40,
/// each of its connections taking the place of a handshake of the heavy /48. Before, each
/// /64 counted alone and held one slot, as many as the newcomer's two less, and the client
/// was refused.
#[test]
fn a_routed_ipv6_prefix_holding_the_table_keeps_nobody_out() {
    if !is_root() {
        eprintln!("skipped: needs root for a network namespace");
        return;
    }
    let _serial = serial();
    let ns = Netns::create("neqo-fair-54").unwrap();
    let sources: Vec<IpAddr> = (0..1024u16)
        .map(|i| format!("2001:db8:aa:{:x}::1", 0x1000 + i).parse().unwrap())
        .collect();
    let batch = std::env::temp_dir().join(format!("neqo-fair-54-{}.ip", std::process::id()));
    let lines: String = sources
        .iter()
        .map(|a| format!("address add {a}/128 dev lo nodad\n"))
        .collect();
    std::fs::write(&batch, lines).unwrap();
    ns.ip(&["-6", "-batch", batch.to_str().unwrap()]).unwrap();
    let _ = std::fs::remove_file(&batch);
    // The client comes once the holders fill the table; a round every 5 s sends again what
    // a full socket buffer lost. No handshake gets half the timeout old (when any newcomer
    // may take its place) before the test ends.
    let d = during(
        &ns,
        ("::1".parse().unwrap(), &TIMEOUTS),
        Attack {
            sources,
            every: Duration::from_secs(5),
            spoofed: false,
        },
        |m| get(m, "neqo_server_connections_half_open") >= MAX_HALF_OPEN,
        |_| true,
    );
    let a = &d.report.admission;
    println!(
        "1024 /64s of one /54 holding handshakes ({} Initials, {} after a Retry): client {} of 40 served; {} half-open after it; server admission {a:?}",
        d.held.initials,
        d.held.retries,
        d.served().requests,
        get(&d.metrics, "neqo_server_connections_half_open"),
    );
    let c = d.served();
    assert_eq!((c.requests, c.failed_requests), (40, 0), "{c:?}");
    assert!(d.held.retries > 0, "the holders went through Retry");
    assert!(a.refused_half_open > 0, "the table was full: {a:?}");
    assert!(
        a.evicted_half_open >= 1,
        "the client took holders' places: {a:?}"
    );
}

/// A flood of real client Initials from 256 addresses of one /24, about 2 000 a second, as
/// from spoofed sources (no Retry answered): the server answers with Retries once the
/// handshakes pile up, and an ordinary client from another /24 is served 40 of 40. Before,
/// such a flood aimed at one worker got 5 of an ordinary host's connections refused, for a
/// budget the accepted handshakes had made look contended.
#[test]
fn a_flood_of_initials_from_spoofed_sources_keeps_nobody_out() {
    if !is_root() {
        eprintln!("skipped: needs root for a network namespace");
        return;
    }
    let _serial = serial();
    let ns = Netns::create("neqo-fair-flood").unwrap();
    let sources: Vec<IpAddr> = (1..=255u8)
        .chain([1])
        .map(|i| IpAddr::from([127, 0, 3, i]))
        .collect();
    // The client comes once the server answers the flood with Retries.
    let d = during(
        &ns,
        (IpAddr::from([127, 0, 0, 1]), &TIMEOUTS),
        Attack {
            sources,
            every: Duration::from_millis(125),
            spoofed: true,
        },
        |m| get(m, "neqo_server_retries_total") > 0.0,
        |_| true,
    );
    let a = &d.report.admission;
    println!(
        "Initials from 256 spoofed sources ({} sent): client {} of 40 served; receive windows {} B after it; server admission {a:?}",
        d.held.initials,
        d.served().requests,
        get(&d.metrics, "neqo_server_receive_windows_bytes"),
    );
    let c = d.served();
    assert_eq!((c.requests, c.failed_requests), (40, 0), "{c:?}");
    assert!(
        a.retries > 0,
        "the server asked the flood for Retries: {a:?}"
    );
    assert_eq!(d.held.retries, 0, "none answered");
}

/// An attacker on 127.0.1.1 learns which of 64 source ports the kernel steers to worker 0
/// (the worker byte of each reply's connection ID) and floods real Initials from those, as
/// fast as one thread sends them: worker 0 falls behind and sheds the attacker's Initials
/// unread, worker 1 sheds none, and an ordinary client is served 40 of 40. Before, worker 0
/// decrypted and answered every Initial it could and its socket dropped the rest (1.2 to
/// 1.5 million in 10 s, `cargo run --release -p benches --bin aim`).
#[test]
fn a_flood_aimed_at_one_worker_is_shed_unread() {
    if !is_root() {
        eprintln!("skipped: needs root for a network namespace");
        return;
    }
    let _serial = serial();
    let ns = Netns::create("neqo-fair-aimed").unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], 4433));
    let metrics = SocketAddr::from(([127, 0, 0, 1], 9464));
    let (server, json) = start(&ns, addr, metrics, &["--workers", "2"]);
    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let path = ns.path();
    let attacker = {
        let (stop, finished) = (Arc::clone(&stop), Arc::clone(&finished));
        std::thread::spawn(move || {
            enter(&path).unwrap();
            let aimed = aimed_flood(
                addr,
                IpAddr::from([127, 0, 1, 1]),
                2,
                64,
                &stop,
                DEADLINE / 2,
                20_000_000,
            );
            finished.store(true, Ordering::Relaxed);
            aimed.unwrap()
        })
    };
    // The client comes while worker 0 sheds the flood (or once the attacker gave up, which
    // the assertions below report).
    scrape_until(&ns, metrics, "the flood shed", move |m| {
        get(m, "neqo_server_initials_shed_total") > 0.0 || finished.load(Ordering::Relaxed)
    });
    let client = ordinary_client(&ns, addr);
    stop.store(true, Ordering::Relaxed);
    let aimed = attacker.join().unwrap();
    let report = stop_and_report(server, &json);
    let [w0, w1] = &report.workers[..] else {
        panic!("two workers: {report:?}");
    };
    println!(
        "aimed flood: {aimed:?}; worker 0: shed {} kernel drops {}; worker 1: shed {} kernel drops {}",
        w0.initials_shed, w0.kernel_drops, w1.initials_shed, w1.kernel_drops
    );
    assert!(aimed.aimed > 0 && aimed.aimed < aimed.probed, "{aimed:?}");
    let c = client.unwrap_or_else(|e| panic!("the ordinary client: {e}; the server: {report:?}"));
    assert_eq!((c.requests, c.failed_requests), (40, 0), "{c:?}");
    assert!(w0.initials_shed > 0, "worker 0 shed the flood: {report:?}");
    assert_eq!(w1.initials_shed, 0, "nothing aimed at worker 1: {report:?}");
    assert_eq!(report.driver.initials_shed, w0.initials_shed);
}
