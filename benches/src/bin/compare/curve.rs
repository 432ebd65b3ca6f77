//! `compare curve`: the same many-connection load against neqo-server and the msquic
//! server, for each concurrency C: `neqo-client --concurrency C` (one process, C connections
//! at once over up to 16 local sockets) downloads `--bytes` in all, but at least 1 MiB per
//! connection (so that handshakes do not dominate the cost per byte), each connection one
//! request after another of at most 1 MiB. Per server and C: server CPU
//! seconds per GB (its process's user + system time over the bytes served), aggregate
//! Gbit/s, request latency p50 and p99, handshake p99, server peak RSS, the client's CPU
//! seconds per GB (the load generator shares the cores with the server), the datagrams the
//! client sent per GB (nearly all ACKs: how many runs of the server's it acknowledged, the
//! count that drives both sides' cost as connections grow), and the requests
//! of connections the server refused (msquic refuses new connections while its worker is
//! overloaded; the other figures are then of what was served).

use std::{fmt::Write as _, process::Command, time::Duration};

use neqo_report::ClientReport;
use test_fixtures::{Impl, Server, release_binary, run};

use super::{JsonFile, Peers};

/// The request size: big enough that a connection's transfer is mostly steady state.
const REQUEST: u64 = 1 << 20;

/// What each connection asks for at concurrency `c`: (bytes per request, requests).
pub(super) const fn load(bytes: u64, c: u64) -> (u64, u64) {
    let per_conn = bytes / c;
    let per_conn = if per_conn < REQUEST {
        REQUEST
    } else {
        per_conn
    };
    (REQUEST, per_conn / REQUEST)
}

#[derive(Debug, Default)]
struct Point {
    server_cpu_s_per_gb: Vec<f64>,
    client_cpu_s_per_gb: Vec<f64>,
    /// Thousands of datagrams the client sent per GB received.
    client_datagrams_k_per_gb: Vec<f64>,
    gbps: Vec<f64>,
    p50_ms: Vec<f64>,
    p99_ms: Vec<f64>,
    handshake_p99_ms: Vec<f64>,
    server_rss_mb: f64,
    /// Requests of refused connections, per run.
    failed: Vec<u64>,
}

/// A server of the curve: neqo-server with a worker count (`None`: its default) and an I/O
/// mode, or msquic's.
#[derive(Debug, Clone, Copy)]
struct Entry {
    server: Impl,
    workers: Option<usize>,
    io: &'static str,
}

impl Entry {
    fn name(self) -> String {
        let io = if self.io == "batched" {
            String::new()
        } else {
            format!(", {}", self.io)
        };
        match (self.server, self.workers) {
            (Impl::Neqo, Some(1)) => format!("neqo, 1 worker{io}"),
            (Impl::Neqo, Some(w)) => format!("neqo, {w} workers{io}"),
            (Impl::Neqo, None) => format!("neqo{io}"),
            (server, _) => server.name().to_owned(),
        }
    }
}

fn server_command(entry: Entry, json: &JsonFile) -> Command {
    match entry.server {
        Impl::Neqo => {
            let mut c = Command::new(release_binary("neqo-server"));
            c.args(["--listen", "127.0.0.1:0", "--alpn", "hq-interop"]);
            if let Some(w) = entry.workers {
                c.args(["--workers", &w.to_string()]);
            }
            c.args(["--io", entry.io]).args(super::neqo_mtu_args());
            c.arg("--json").arg(&json.0);
            c
        }
        Impl::Msquic => {
            let mut c = Command::new(release_binary("msquic-peer"));
            c.args(["server", "--listen", "127.0.0.1:0", "--alpn", "hq-interop"]);
            c
        }
    }
}

fn one_run(
    server: Entry,
    (index, run_no): (usize, usize),
    c: u64,
    bytes: u64,
    point: &mut Point,
) -> Result<(), String> {
    let (size, requests) = load(bytes, c);
    let server_json = JsonFile::new(index, run_no, "curve-server");
    let client_json = JsonFile::new(index, run_no, "curve-client");
    let srv = Server::start(
        &mut server_command(server, &server_json),
        Duration::from_secs(20),
    )
    .map_err(|e| format!("server: {e}"))?;
    let url = format!("https://127.0.0.1:{}/{size}", srv.addr().port());
    let (c_arg, n_arg) = (c.to_string(), requests.to_string());
    let mut client = Command::new(release_binary("neqo-client"));
    client
        .args([&url, "--insecure", "--alpn", "hq-interop", "--no-progress"])
        .args(super::neqo_mtu_args())
        .args([
            "--concurrency",
            &c_arg,
            "-n",
            &n_arg,
            "--idle-timeout",
            "30",
        ])
        .arg("--json")
        .arg(&client_json.0);
    let limit = Duration::from_secs(120 + bytes / 12_500_000);
    let client = run(&mut client, limit);
    let srv = srv.stop();
    let client = client.map_err(|e| format!("client: {e}"))?;
    let srv = srv.map_err(|e| format!("server: {e}"))?;
    let report = match client_json.take::<ClientReport>() {
        Ok(r) => r,
        Err(e) => {
            let why = client.last_stderr_line().unwrap_or("no message");
            return Err(format!("client: {}: {why} ({e})", client.ending()));
        }
    };
    drop(server_json);
    let (received, done, failed) = (
        report.bytes_received,
        report.requests,
        report.failed_requests,
    );
    // A server may refuse connections under load (msquic does when its worker is
    // overloaded): counted, and the figures are of what was served. Anything else is an error.
    let refused = !report.errors.is_empty()
        && report
            .errors
            .iter()
            .all(|m| m.contains("refused the connection"));
    if (!client.success() && !refused) || received != done * size || received == 0 {
        let why = client.last_stderr_line().unwrap_or("no message");
        return Err(format!(
            "client: {}: {why} ({done} requests, {received} bytes)",
            client.ending()
        ));
    }
    point.failed.push(failed);
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let gb = received as f64 / 1e9;
    point.server_cpu_s_per_gb.push(srv.cpu().as_secs_f64() / gb);
    point
        .client_cpu_s_per_gb
        .push(client.cpu().as_secs_f64() / gb);
    point
        .client_datagrams_k_per_gb
        .push(datagrams_sent_k_per_gb(&report, gb));
    if report.gbps.is_finite() && report.gbps > 0.0 {
        point.gbps.push(report.gbps);
    }
    point.p50_ms.extend(report.request_ms.map(|p| p.p50));
    point.p99_ms.extend(report.request_ms.map(|p| p.p99));
    point
        .handshake_p99_ms
        .extend(report.handshake_ms.map(|p| p.p99));
    #[expect(clippy::cast_precision_loss, reason = "KiB to MB")]
    let rss = srv.max_rss_kib as f64 / 1024.0;
    point.server_rss_mb = point.server_rss_mb.max(rss);
    Ok(())
}

/// Thousands of datagrams a `neqo-client` report says its sockets sent, per `gb` received.
fn datagrams_sent_k_per_gb(report: &ClientReport, gb: f64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "a rate")]
    let sent = report.socket.tx.datagrams as f64;
    sent / gb / 1000.0
}

pub(super) fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some(f64::midpoint(v[n / 2 - 1], v[n / 2])),
    }
}

/// Runs the curve and prints its table; returns how many points failed.
pub(super) fn curve(
    peers: &Peers,
    levels: &[u64],
    (workers, io_modes): (&[Option<usize>], &[&'static str]),
    bytes: u64,
    runs: usize,
) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Many connections: neqo-client --concurrency C downloads {bytes} bytes in all (at least 1 MiB per connection) from each server on 127.0.0.1, {runs} run(s) per point (medians); the client and the server share {cores} cores.\n"
    );
    let _ = writeln!(
        out,
        "| C | server | request | server CPU s/GB | Gbit/s | request p50 [ms] | request p99 [ms] | handshake p99 [ms] | server RSS [MB] | client CPU s/GB | client datagrams [k/GB] | refused |"
    );
    let _ = writeln!(
        out,
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut servers = vec![];
    if let Some(why) = &peers.neqo_missing {
        eprintln!("compare curve: cannot run without neqo-client and neqo-server: {why}");
        return 1;
    }
    for &io in io_modes {
        for &w in workers {
            servers.push(Entry {
                server: Impl::Neqo,
                workers: w,
                io,
            });
        }
    }
    match &peers.msquic_missing {
        None => servers.push(Entry {
            server: Impl::Msquic,
            workers: None,
            io: "batched",
        }),
        Some(why) => {
            let _ = writeln!(out, "(msquic server skipped: {why})\n");
        }
    }
    let mut failed = 0;
    for (li, &c) in levels.iter().enumerate() {
        let mut points: Vec<Point> = servers.iter().map(|_| Point::default()).collect();
        let mut failures: Vec<Option<String>> = vec![None; servers.len()];
        // Interleaved: each run does every server, so a slow spell hits both alike.
        for run_no in 0..runs {
            for (si, &server) in servers.iter().enumerate() {
                if failures[si].is_some() {
                    continue;
                }
                eprintln!(
                    "curve: C = {c}, {} server, run {}/{runs}",
                    server.name(),
                    run_no + 1
                );
                let index = li * servers.len() + si;
                if let Err(e) = one_run(server, (index, run_no), c, bytes, &mut points[si]) {
                    failures[si] = Some(e);
                }
            }
        }
        let (size, requests) = load(bytes, c);
        for (si, server) in servers.iter().enumerate() {
            let name = server.name();
            if let Some(e) = &failures[si] {
                failed += 1;
                let e = e.replace('|', "/").replace(['\n', '\r'], " ");
                let _ = writeln!(out, "| {c} | {name} | FAILED: {e} | | | | | | | | | |");
                continue;
            }
            let p = &points[si];
            let f = |v: &[f64], prec: usize| {
                median(v).map_or_else(|| "-".to_owned(), |m| format!("{m:.prec$}"))
            };
            let _ = writeln!(
                out,
                "| {c} | {name} | {requests} x {size} B | {} | {} | {} | {} | {} | {:.1} | {} | {} | {} |",
                f(&p.server_cpu_s_per_gb, 2),
                f(&p.gbps, 2),
                f(&p.p50_ms, 1),
                f(&p.p99_ms, 1),
                f(&p.handshake_p99_ms, 1),
                p.server_rss_mb,
                f(&p.client_cpu_s_per_gb, 2),
                f(&p.client_datagrams_k_per_gb, 1),
                p.failed.iter().max().copied().unwrap_or(0),
            );
        }
    }
    println!("{out}");
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_splits_the_bytes() {
        assert_eq!(load(256 << 20, 1), (1 << 20, 256));
        assert_eq!(load(256 << 20, 10), (1 << 20, 25));
        assert_eq!(load(256 << 20, 1000), (1 << 20, 1), "at least 1 MiB each");
        assert_eq!(load(10, 3), (1 << 20, 1));
        assert_eq!(load(3 << 20, 2), (1 << 20, 1), "whole requests only");
    }

    #[test]
    fn datagrams_sent_come_from_the_client_socket_report() {
        let mut report = ClientReport::default();
        report.socket.tx.datagrams = 72_100;
        report.socket.rx.datagrams = 5;
        assert_eq!(datagrams_sent_k_per_gb(&report, 0.5), 144.2);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }
}
