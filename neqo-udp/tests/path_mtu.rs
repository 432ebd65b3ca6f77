//! `max_udp_payload_to`: the route's MTU less the IP and UDP headers, as the kernel has it.
#![cfg(target_os = "linux")]

mod common;

use std::net::SocketAddr;

use common::netns::{Netns, is_root};
use common::{V4, V6};
use neqo_udp::max_udp_payload_to;

fn loopback_mtu() -> usize {
    std::fs::read_to_string("/sys/class/net/lo/mtu")
        .expect("lo's MTU")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn loopback_routes_carry_the_loopback_mtu_less_the_headers() {
    // IPv4's total length field stops a packet at 65535 bytes, whatever the device's MTU.
    let v4 = loopback_mtu().min(65535) - 28;
    assert_eq!(max_udp_payload_to(SocketAddr::new(V4, 443)).unwrap(), v4);
    // IPv6's payload length excludes its own header.
    let v6 = loopback_mtu() - 48;
    assert_eq!(max_udp_payload_to(SocketAddr::new(V6, 443)).unwrap(), v6);
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:443".parse().unwrap();
    assert_eq!(max_udp_payload_to(mapped).unwrap(), v4, "taken as IPv4");
}

#[test]
fn a_route_follows_its_interface_mtu() {
    if !is_root() {
        eprintln!("skipped: needs root to make a network namespace");
        return;
    }
    for mtu in [1280usize, 1500, 9000] {
        let ns = Netns::create(&format!("mtu{mtu}"));
        ns.set_loopback_mtu(u32::try_from(mtu).unwrap());
        ns.run(async move {
            assert_eq!(
                max_udp_payload_to(SocketAddr::new(V4, 443)).unwrap(),
                mtu - 28
            );
            assert_eq!(
                max_udp_payload_to(SocketAddr::new(V6, 443)).unwrap(),
                mtu - 48
            );
        });
    }
}

#[test]
fn no_route_is_an_error() {
    if !is_root() {
        eprintln!("skipped: needs root to make a network namespace");
        return;
    }
    // A namespace whose only device is loopback has no route to other addresses.
    let ns = Netns::create("noroute");
    ns.run(async {
        // 192.0.2.1 (TEST-NET-1): never sent to; connect only looks the route up.
        assert!(max_udp_payload_to("192.0.2.1:443".parse().unwrap()).is_err());
    });
}
