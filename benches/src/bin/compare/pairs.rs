//! The pairs the table compares: which client and server, I/O mode, pacing and protocol, the
//! command line of each side, and what a pair needs to run.

use std::{path::Path, process::Command};

use test_fixtures::{Impl, release_binary};

use super::{Peers, netns};

/// One row of the table: a QUIC pair, or the TCP+TLS baseline.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pair {
    Quic {
        client: Impl,
        server: Impl,
        /// I/O mode of the neqo side(s).
        io: &'static str,
        /// Pacing of the neqo side(s).
        pacing: bool,
        /// HTTP/3 (ALPN `h3`) rather than `hq-interop`: neqo on both sides only (the msquic
        /// peer speaks no HTTP/3).
        h3: bool,
        /// The neqo side(s) at their own datagram size, where the other rows pin the size
        /// every party sends ([`super::neqo_mtu_args`]).
        own_size: bool,
    },
    /// `tcp-tls client` against `tcp-tls server`.
    TcpTls,
}

/// The name of the TCP+TLS baseline in the table.
const TCP_TLS: &str = "tcp+tls";

/// `cargo build --release` arguments for `tcp-tls`.
pub(super) const BUILD_TCP_TLS: &[&str] = &["-p", "benches", "--bin", "tcp-tls"];

pub(super) const fn quic(client: Impl, server: Impl, io: &'static str, pacing: bool) -> Pair {
    Pair::Quic {
        client,
        server,
        io,
        pacing,
        h3: false,
        own_size: false,
    }
}

/// neqo <-> neqo over HTTP/3, batched and paced: the reference's transfer with what HTTP/3
/// adds.
pub(super) const NEQO_H3: Pair = Pair::Quic {
    client: Impl::Neqo,
    server: Impl::Neqo,
    io: "batched",
    pacing: true,
    h3: true,
    own_size: false,
};

/// neqo <-> neqo, batched and paced, at the binaries' own datagram size: on the host's
/// loopback the route's, up to 8972 bytes, where the other rows send 1472.
pub(super) const NEQO_OWN_SIZE: Pair = Pair::Quic {
    client: Impl::Neqo,
    server: Impl::Neqo,
    io: "batched",
    pacing: true,
    h3: false,
    own_size: true,
};

impl Pair {
    /// The table's first four cells.
    pub(super) fn label(&self) -> String {
        match *self {
            Self::Quic {
                client,
                server,
                io,
                pacing,
                h3,
                own_size,
            } => {
                let neqo_involved = client == Impl::Neqo || server == Impl::Neqo;
                let (io, pacing) = if neqo_involved {
                    (io, if pacing { "on" } else { "off" })
                } else {
                    ("-", "-")
                };
                let over = match (h3, own_size) {
                    (true, _) => " (h3)",
                    (false, true) => " (own size)",
                    (false, false) => "",
                };
                format!(
                    "| {}{over} | {}{over} | {io} | {pacing} |",
                    client.name(),
                    server.name()
                )
            }
            Self::TcpTls => format!("| {TCP_TLS} | {TCP_TLS} | kernel TCP | - |"),
        }
    }

    /// For the list of skipped pairs.
    pub(super) fn describe(&self) -> String {
        match *self {
            Self::Quic {
                client,
                server,
                io,
                pacing,
                h3,
                own_size,
            } => format!(
                "{} -> {} ({io}, pacing {}{}{})",
                client.name(),
                server.name(),
                if pacing { "on" } else { "off" },
                if h3 { ", HTTP/3" } else { "" },
                if own_size { ", own datagram size" } else { "" }
            ),
            Self::TcpTls => format!("{TCP_TLS} -> {TCP_TLS}"),
        }
    }

    /// Whether `peer` is its client or its server.
    pub(super) fn uses(&self, peer: Impl) -> bool {
        match *self {
            Self::Quic { client, server, .. } => client == peer || server == peer,
            Self::TcpTls => false,
        }
    }

    /// Whether this is neqo <-> neqo, batched, paced: the first row, the reference.
    pub(super) fn is_neqo_reference(&self) -> bool {
        matches!(
            *self,
            Self::Quic {
                client: Impl::Neqo,
                server: Impl::Neqo,
                io: "batched",
                pacing: true,
                h3: false,
                own_size: false,
            }
        )
    }

    /// Whether its server is neqo-server, which reports its datagrams per syscall.
    pub(super) const fn neqo_server(&self) -> bool {
        matches!(
            *self,
            Self::Quic {
                server: Impl::Neqo,
                ..
            }
        )
    }
}

pub(super) const PAIRS: &[Pair] = &[
    quic(Impl::Neqo, Impl::Neqo, "batched", true),
    NEQO_OWN_SIZE,
    NEQO_H3,
    quic(Impl::Neqo, Impl::Neqo, "batched", false),
    quic(Impl::Neqo, Impl::Neqo, "single", true),
    quic(Impl::Neqo, Impl::Neqo, "single", false),
    quic(Impl::Msquic, Impl::Msquic, "batched", true),
    quic(Impl::Neqo, Impl::Msquic, "batched", true),
    quic(Impl::Neqo, Impl::Msquic, "batched", false),
    quic(Impl::Msquic, Impl::Neqo, "batched", true),
    quic(Impl::Msquic, Impl::Neqo, "batched", false),
    Pair::TcpTls,
];

pub(super) fn server_command(pair: &Pair, json: &Path) -> Command {
    let (server, io, pacing, h3, own_size) = match *pair {
        Pair::Quic {
            server,
            io,
            pacing,
            h3,
            own_size,
            ..
        } => (server, io, pacing, h3, own_size),
        Pair::TcpTls => {
            let mut c = netns::command(release_binary("tcp-tls"));
            c.args(["server", "--listen", "127.0.0.1:0"]);
            return c;
        }
    };
    match server {
        Impl::Neqo => {
            let mut c = netns::command(release_binary("neqo-server"));
            c.args(["--listen", "127.0.0.1:0", "--io", io]);
            if !own_size {
                c.args(super::neqo_mtu_args());
            }
            c.arg("--json").arg(json);
            if !pacing {
                c.arg("--no-pacing");
            }
            if h3 {
                c.args(["--alpn", "h3"]);
            }
            c
        }
        Impl::Msquic => {
            let mut c = netns::command(release_binary("msquic-peer"));
            c.args(["server", "--listen", "127.0.0.1:0", "--json"])
                .arg(json);
            c
        }
    }
}

pub(super) fn client_command(pair: &Pair, url: &str, json: &Path) -> Command {
    let json = json.to_string_lossy().into_owned();
    let (client, io, pacing, h3, own_size) = match *pair {
        Pair::Quic {
            client,
            io,
            pacing,
            h3,
            own_size,
            ..
        } => (client, io, pacing, h3, own_size),
        Pair::TcpTls => {
            let mut c = netns::command(release_binary("tcp-tls"));
            c.args(["client", url, "--insecure", "--json", &json]);
            return c;
        }
    };
    match client {
        Impl::Neqo => {
            let mut c = netns::command(release_binary("neqo-client"));
            if !own_size {
                c.args(super::neqo_mtu_args());
            }
            c.args([
                url,
                "--insecure",
                "--alpn",
                if h3 { "h3" } else { "hq-interop" },
                "--io",
                io,
                "--json",
                &json,
            ]);
            if !pacing {
                c.arg("--no-pacing");
            }
            c
        }
        Impl::Msquic => {
            let mut c = netns::command(release_binary("msquic-peer"));
            c.args([
                "client",
                url,
                "--insecure",
                "--alpn",
                "hq-interop",
                "--json",
                &json,
            ]);
            c
        }
    }
}

/// Why `pair` cannot run, if it cannot.
pub(super) fn missing(peers: &Peers, pair: &Pair) -> Option<String> {
    if matches!(pair, Pair::Quic { own_size: true, .. }) && netns::active() {
        return Some("in a namespace every row runs at its own datagram size".to_owned());
    }
    let needs = [
        (pair.uses(Impl::Neqo), &peers.neqo_missing),
        (pair.uses(Impl::Msquic), &peers.msquic_missing),
        (matches!(pair, Pair::TcpTls), &peers.tcp_tls_missing),
    ];
    needs
        .into_iter()
        .find_map(|(needed, why)| needed.then(|| why.clone()).flatten())
}
