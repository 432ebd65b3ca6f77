//! Socket buffers past the system's cap: `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` where the process
//! may (root, or `CAP_NET_ADMIN`), the capped size where it may not.
#![cfg(target_os = "linux")]

mod common;

use std::net::SocketAddr;

use common::{V4, netns::is_root};
use neqo_udp::{Config, Socket};

fn sysctl(name: &str) -> usize {
    std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn buffers_above_the_cap_are_forced_where_permitted() {
    let (rmem_max, wmem_max) = (sysctl("rmem_max"), sysctl("wmem_max"));
    // Twice the larger cap: above it whatever the machine's setting.
    let want = 2 * rmem_max.max(wmem_max);
    let s = Socket::bind(
        SocketAddr::new(V4, 0),
        Config::default()
            .with_recv_buffer_size(Some(want))
            .with_send_buffer_size(Some(want)),
    )
    .unwrap();
    let got = s.buffer_sizes();
    // Linux reports twice what it grants.
    if is_root() {
        assert_eq!(
            (got.recv, got.send),
            (2 * want, 2 * want),
            "forced past the caps"
        );
    } else {
        assert_eq!((got.recv, got.send), (2 * rmem_max, 2 * wmem_max), "capped");
    }
    // Below the cap nothing is forced: what was asked, as always.
    let small = Socket::bind(
        SocketAddr::new(V4, 0),
        Config::default()
            .with_recv_buffer_size(Some(65536))
            .with_send_buffer_size(Some(65536)),
    )
    .unwrap();
    assert_eq!(small.buffer_sizes().recv, 2 * 65536);
    assert_eq!(small.buffer_sizes().send, 2 * 65536);
}
