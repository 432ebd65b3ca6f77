//! Path MTU discovery up to what the path carries: `neqo-server` and `neqo-client` in a
//! network namespace whose loopback device has a 1500- or 9000-byte MTU. By default the
//! server's discovery follows the route (up to a jumbo frame's payload): past Ethernet's size
//! where the link allows it and never above the route's MTU less the IP and UDP headers
//! (quinn-proto's search halves the gap and stops within `MTU_MINIMUM_CHANGE`; a transfer may
//! end a step or two before that, so the check is "most of the way"), while the downloading
//! client's stays within 1452. With `--max-mtu`, both sides go that far and never beyond.
//! Needs root (to make the namespace) and iproute2's `ip`; skipped otherwise.
#![cfg(target_os = "linux")]

use std::{path::PathBuf, time::Duration};

use neqo_report::{ClientReport, Report, ServerReport};
use test_fixtures::{
    Server,
    netns::{Netns, is_root},
    run,
};

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_neqo-client");
const LIMIT: Duration = Duration::from_secs(60);
/// The transfer: long enough for the search's dozen probes, each waiting for its ACK.
const BYTES: u64 = 64 << 20;

fn json_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("neqo-mtu-{}-{name}.json", std::process::id()))
}

/// Downloads [`BYTES`] in the namespace; returns (server's, client's) largest path MTU.
fn discovered(ns: &Netns, tag: &str, extra: &[&str]) -> (u64, u64) {
    let (sj, cj) = (
        json_path(&format!("{tag}-s")),
        json_path(&format!("{tag}-c")),
    );
    let server = Server::start(
        ns.command(SERVER)
            .args(["--listen", "127.0.0.1:0", "--workers", "1", "--json"])
            .arg(&sj)
            .args(extra),
        LIMIT,
    )
    .expect("server starts");
    let url = format!("https://{}/{BYTES}", server.addr());
    let out = run(
        ns.command(CLIENT)
            .args([&url, "--insecure", "--no-progress", "--json"])
            .arg(&cj)
            .args(extra),
        LIMIT,
    )
    .unwrap();
    let srv = server.stop().unwrap();
    assert!(out.success(), "client: {}: {}", out.ending(), out.stderr);
    assert!(srv.success(), "server: {}: {}", srv.ending(), srv.stderr);
    fn read<T: Report>(p: &PathBuf) -> T {
        let r = T::read(p);
        let _ = std::fs::remove_file(p);
        r.unwrap_or_else(|e| panic!("{e}"))
    }
    let (s, c): (ServerReport, ClientReport) = (read(&sj), read(&cj));
    assert_eq!(c.bytes_received, BYTES, "byte-exact");
    (
        u64::from(s.driver.max_path_mtu),
        u64::from(c.driver.max_path_mtu),
    )
}

#[test]
fn discovery_follows_the_route_by_default_and_stays_within_max_mtu() {
    if !is_root() {
        eprintln!("skipped: needs root to make a network namespace");
        return;
    }
    for link in [1500u32, 9000] {
        let ns = Netns::create(&format!("neqo-bin-mtu{link}")).unwrap();
        ns.set_loopback_mtu(link).unwrap();
        let payload = u64::from(link) - 28;
        let reaches = |side: &str, m: u64| {
            assert!(
                m <= payload && m >= payload * 9 / 10 && (link == 1500 || m > 1500),
                "{side} at a {link}-byte MTU discovered {m}, the path carries {payload}"
            );
        };
        let (s, c) = discovered(&ns, &format!("{link}-default"), &[]);
        reaches("server", s);
        assert!(
            (1300..=1452).contains(&c),
            "the downloading client at a {link}-byte MTU discovered {c}"
        );
        let (s, c) = discovered(&ns, &format!("{link}-max"), &["--max-mtu", "65527"]);
        reaches("server", s);
        reaches("client", c);
        let (s, c) = discovered(&ns, &format!("{link}-1400"), &["--max-mtu", "1400"]);
        for (side, m) in [("server", s), ("client", c)] {
            assert!(
                (1300..=1400).contains(&m),
                "{side} at a {link}-byte MTU with --max-mtu 1400 discovered {m}"
            );
        }
    }
}
