//! Runs of one connection in a shared send round: several clients download from one server,
//! and a connection whose transmits fill GSO sends gets its next ones beside them in the
//! same send call, at most `RUN_TRANSMITS` in a row, before the round moves on.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use super::{Client, DOWNLOAD, SERVER, Server};
use crate::{
    Driver, DriverConfig, EndpointConfig, TransportOptions,
    testing::{Behaviour, Network},
    tls::{self, Identity, Trust},
    tx::RUN_TRANSMITS,
};

/// Clients downloading at once, each from its own address.
const CLIENTS: u16 = 3;

/// One server driver and `CLIENTS` client drivers on one network; returns what the server's
/// send calls carried once every download finished whole.
fn crowd(pacing: bool) -> Vec<Vec<(SocketAddr, usize)>> {
    let identity = Identity::self_signed().unwrap();
    let options = TransportOptions::default();
    let mut server_config = quinn_proto::ServerConfig::with_crypto(
        tls::server_crypto(&identity, &["t".into()]).unwrap(),
    );
    server_config.transport_config(Arc::new(options.transport("server").unwrap()));
    let net = Network::new(3, std::time::Instant::now()).with_one_way(Duration::from_millis(2));
    let mut server = Driver::with_datapaths(
        vec![net.path(SERVER, Behaviour::default())],
        EndpointConfig::default(),
        Some(Arc::new(server_config)),
        DriverConfig::default().with_pacing(pacing),
    );
    let mut server_app = Server::default();
    let mut clients: Vec<(Driver, Client)> = (0..CLIENTS)
        .map(|i| {
            let mut config = quinn_proto::ClientConfig::new(
                tls::client_crypto(&Trust::Certs(identity.chain.clone()), "t").unwrap(),
            );
            config.transport_config(Arc::new(options.transport("client").unwrap()));
            let addr = SocketAddr::from(([127, 0, 0, 1], 6000 + i));
            let driver = Driver::with_datapaths(
                vec![net.path(addr, Behaviour::default())],
                EndpointConfig::default(),
                None,
                DriverConfig::default().with_pacing(pacing),
            );
            let app = Client {
                remote: Some(SERVER),
                config: Some(config),
                ..Client::default()
            };
            (driver, app)
        })
        .collect();
    for turn in 0..400_000 {
        let s = net.turn(&mut server, &mut server_app).unwrap();
        let mut deadlines = vec![s.deadline];
        let mut all_done = true;
        let mut queued = server.queued_datagrams();
        for (driver, app) in &mut clients {
            let c = net.turn(driver, app).unwrap();
            all_done &= c.done;
            deadlines.push(c.deadline);
            queued += driver.queued_datagrams();
        }
        if all_done {
            for (_, app) in &clients {
                assert!(app.finished, "every download finished");
                assert_eq!(app.got, DOWNLOAD);
                assert_eq!(app.wrong, 0, "every byte right");
                assert_eq!(app.closed, None, "no error");
            }
            return net.send_calls(SERVER);
        }
        assert!(
            net.advance(&deadlines, queued > 0),
            "the exchange stalled at turn {turn}"
        );
    }
    panic!("no end after 400 000 turns");
}

/// Consecutive messages of a call to one destination: (destination, messages, whether every
/// one filled a GSO send), in order.
fn runs(call: &[(SocketAddr, usize)]) -> Vec<(SocketAddr, usize, bool)> {
    let full = Behaviour::default().gso_segments;
    let mut out: Vec<(SocketAddr, usize, bool)> = Vec::new();
    for &(to, datagrams) in call {
        match out.last_mut() {
            Some((last, n, all_full)) if *last == to => {
                *n += 1;
                *all_full &= datagrams == full;
            }
            _ => out.push((to, 1, datagrams == full)),
        }
    }
    out
}

#[test]
fn full_transmits_go_out_side_by_side_and_the_round_moves_on() {
    for pacing in [false, true] {
        let calls = crowd(pacing);
        let mut side_by_side = 0;
        for call in &calls {
            let runs = runs(call);
            for (i, &(to, n, all_full)) in runs.iter().enumerate() {
                // The round moves on after RUN_TRANSMITS in a row while others wait: a run
                // followed by another destination's message is never longer.
                if i + 1 < runs.len() {
                    assert!(
                        n <= RUN_TRANSMITS,
                        "{n} messages in a row to {to} before others (pacing {pacing}): {call:?}"
                    );
                }
                // Full transmits of one connection, side by side, and another's after them in
                // the same call: plain round robin would have put the other between them.
                if n >= 2 && all_full && i + 1 < runs.len() {
                    side_by_side += 1;
                }
            }
        }
        // Paced on the virtual clock, every wake-up comes exactly on time, so a bucket never
        // holds more than one release: runs come from a late wake-up's catch-up, which only
        // real timers give.
        if !pacing {
            assert!(
                side_by_side > 0,
                "no connection's full transmits went out side by side, {} calls",
                calls.len()
            );
        }
    }
}
