//! The pairs' table: each pair run `--runs` times, interleaved, and its figures tabulated.

use std::{fmt::Write as _, time::Duration};

use neqo_report::{MsquicServerReport, ServerReport, TransferFigures};
use test_fixtures::{Impl, Server, run};

use super::{
    JsonFile, Peers,
    pairs::{PAIRS, Pair, client_command, missing, server_command},
};

#[derive(Debug, Default)]
struct Row {
    times_ms: Vec<f64>,
    gbps: Vec<f64>,
    /// The server's TX datagrams per syscall: the data direction.
    server_tx_per_syscall: Vec<f64>,
    /// The client's RX datagrams per syscall.
    client_rx_per_syscall: Vec<f64>,
    /// Each process's CPU seconds per GB transferred.
    client_cpu_s_per_gb: Vec<f64>,
    server_cpu_s_per_gb: Vec<f64>,
    client_rss_mb: f64,
    server_rss_mb: f64,
    /// The largest UDP payload the server's connection reached, from its own report.
    server_datagram: u64,
    /// TCP's segment size (`tcp-tls`), from the client's report.
    tcp_mss: Option<u32>,
    failure: Option<String>,
}

fn one_run((index, pair): (usize, &Pair), bytes: u64, row: &mut Row) -> Result<(), String> {
    let attempt = row.times_ms.len();
    let server_json = JsonFile::new(index, attempt, "server");
    let client_json = JsonFile::new(index, attempt, "client");
    let server = Server::start(
        &mut server_command(pair, &server_json.0),
        Duration::from_secs(20),
    )
    .map_err(|e| format!("server: {e}"))?;
    let url = format!("https://127.0.0.1:{}/{bytes}", server.addr().port());
    let limit = Duration::from_secs(60 + bytes / 12_500_000);
    let client = run(&mut client_command(pair, &url, &client_json.0), limit);
    let server = server.stop();
    let client = client.map_err(|e| format!("client: {e}"))?;
    let server = server.map_err(|e| format!("server: {e}"))?;
    if !client.success() {
        let why = client.last_stderr_line().unwrap_or("no message");
        return Err(format!("client: {}: {why}", client.ending()));
    }
    let report = client_json
        .take::<TransferFigures>()
        .map_err(|e| format!("client: {e}"))?;
    row.tcp_mss = row.tcp_mss.or(report.tcp_mss);
    row.times_ms.push(client.wall.as_secs_f64() * 1000.0);
    if let Some(g) = report.positive_gbps() {
        row.gbps.push(g);
    }
    if let Some(t) = report.positive_rx_datagrams_per_syscall() {
        row.client_rx_per_syscall.push(t);
    }
    #[expect(clippy::cast_precision_loss, reason = "a ratio for humans")]
    let gb = bytes as f64 / 1e9;
    row.client_cpu_s_per_gb
        .push(client.cpu().as_secs_f64() / gb);
    row.server_cpu_s_per_gb
        .push(server.cpu().as_secs_f64() / gb);
    if pair.neqo_server() {
        let server_report = server_json
            .take::<ServerReport>()
            .map_err(|e| format!("server: {e}"))?;
        row.server_tx_per_syscall
            .push(server_report.tx_datagrams_per_syscall);
        row.server_datagram = row
            .server_datagram
            .max(u64::from(server_report.driver.max_path_mtu));
    } else if matches!(
        pair,
        Pair::Quic {
            server: Impl::Msquic,
            ..
        }
    ) {
        let server_report = server_json
            .take::<MsquicServerReport>()
            .map_err(|e| format!("server: {e}"))?;
        row.server_datagram = row.server_datagram.max(server_report.max_udp_payload);
    }
    row.client_rss_mb = row.client_rss_mb.max(client.max_rss_kib as f64 / 1024.0);
    row.server_rss_mb = row.server_rss_mb.max(server.max_rss_kib as f64 / 1024.0);
    Ok(())
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// The table's columns after the pair's four.
pub(super) const COLUMNS: [&str; 13] = [
    "Mean ± σ [ms]",
    "Min [ms]",
    "Max [ms]",
    "Relative",
    "Gbit/s",
    "Client CPU [s/GB]",
    "Server CPU [s/GB]",
    "Both CPU [s/GB]",
    "Server TX dgram/syscall",
    "Client RX dgram/syscall",
    "Client RSS [MB]",
    "Server RSS [MB]",
    "Server datagram [B]",
];

/// Runs every pair that can run `runs` times, interleaved, and tabulates them; returns the
/// table (and the ratio to TCP+TLS after it) and how many pairs failed.
pub(super) fn table(peers: &Peers, runs: usize, bytes: u64) -> (String, usize) {
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let _ = writeln!(
        out,
        "Transfer of {bytes} bytes over loopback, {runs} run(s) per pair, the pairs in turn in each run; client and server share {cores} cores. Every QUIC row sends datagrams of one size ({}) but \"own size\", where neqo runs at its defaults; the server's largest datagram is from its own report, TCP's segment size from the client's socket.\n",
        match super::neqo_mtu_args() {
            [] => "the link's".to_owned(),
            args => format!("neqo at `{}`, msquic at its default", args.join(" ")),
        }
    );
    let _ = writeln!(
        out,
        "| Client | Server | I/O | Pacing | {} |",
        COLUMNS.join(" | ")
    );
    let _ = writeln!(out, "|---|---|---|---|{}", "---:|".repeat(COLUMNS.len()));
    let mut skipped = Vec::new();
    let mut rows: Vec<(usize, &Pair, Row)> = Vec::new();
    for (index, pair) in PAIRS.iter().enumerate() {
        match missing(peers, pair) {
            Some(r) => skipped.push(format!("{}: {r}", pair.describe())),
            None => rows.push((index, pair, Row::default())),
        }
    }
    for run in 0..runs {
        for (index, pair, row) in &mut rows {
            if row.failure.is_some() {
                continue;
            }
            eprintln!("{} run {}/{}", pair.label(), run + 1, runs);
            if let Err(e) = one_run((*index, pair), bytes, row) {
                row.failure = Some(e);
            }
        }
    }
    let mut failed = 0;
    let mut first_mean = None;
    let mean = |v: &[f64]| (!v.is_empty()).then(|| mean_sd(v).0);
    let opt =
        |v: &[f64], prec: usize| mean(v).map_or_else(|| "-".to_owned(), |m| format!("{m:.prec$}"));
    // CPU s/GB of both sides: neqo <-> neqo (batched, paced) and TCP+TLS.
    let (mut neqo_cpu, mut tcp_cpu, mut h3_cpu, mut own_cpu) = (None, None, None, None);
    let mut own_datagram = 0;
    for (_, pair, row) in &rows {
        if let Some(f) = &row.failure {
            failed += 1;
            // One line, and no `|` that would split the cell.
            let f = f.replace('|', "/").replace(['\n', '\r'], " ");
            let _ = writeln!(
                out,
                "{} FAILED: {f} |{}",
                pair.label(),
                " |".repeat(COLUMNS.len() - 1)
            );
            continue;
        }
        let (mean_ms, sd) = mean_sd(&row.times_ms);
        let min = row.times_ms.iter().copied().fold(f64::INFINITY, f64::min);
        let max = row.times_ms.iter().copied().fold(0.0, f64::max);
        let relative = mean_ms / *first_mean.get_or_insert(mean_ms);
        let both: Vec<f64> = row
            .client_cpu_s_per_gb
            .iter()
            .zip(&row.server_cpu_s_per_gb)
            .map(|(c, s)| c + s)
            .collect();
        if pair.is_neqo_reference() {
            neqo_cpu = mean(&both);
        } else if matches!(pair, Pair::Quic { h3: true, .. }) {
            h3_cpu = mean(&both);
        } else if matches!(pair, Pair::TcpTls) {
            tcp_cpu = mean(&both);
        } else if matches!(pair, Pair::Quic { own_size: true, .. }) {
            own_cpu = mean(&both);
            own_datagram = row.server_datagram;
        }
        let _ = writeln!(
            out,
            "{} {mean_ms:.1} ± {sd:.1} | {min:.1} | {max:.1} | {relative:.2} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} |",
            pair.label(),
            opt(&row.gbps, 2),
            opt(&row.client_cpu_s_per_gb, 2),
            opt(&row.server_cpu_s_per_gb, 2),
            opt(&both, 2),
            opt(&row.server_tx_per_syscall, 1),
            opt(&row.client_rx_per_syscall, 1),
            row.client_rss_mb,
            row.server_rss_mb,
            match (row.server_datagram, row.tcp_mss) {
                (0, Some(mss)) => format!("{mss} (TCP MSS)"),
                (0, None) => "-".to_owned(),
                (d, _) => d.to_string(),
            }
        );
    }
    if let (Some(neqo), Some(tcp)) = (neqo_cpu, tcp_cpu)
        && tcp > 0.0
    {
        let _ = writeln!(
            out,
            "\nneqo <-> neqo (batched, pacing on) uses {neqo:.2} CPU s/GB on both sides, TCP+TLS {tcp:.2}: {:.2}x TCP+TLS's CPU per byte.",
            neqo / tcp
        );
    }
    if let (Some(own), Some(tcp)) = (own_cpu, tcp_cpu)
        && tcp > 0.0
    {
        let _ = writeln!(
            out,
            "At its own datagram size ({own_datagram} bytes from the server) the same pair uses {own:.2}: {:.2}x TCP+TLS's.",
            own / tcp
        );
    }
    if let (Some(neqo), Some(h3)) = (neqo_cpu, h3_cpu)
        && neqo > 0.0
    {
        let _ = writeln!(
            out,
            "Over HTTP/3 the same transfer uses {h3:.2} CPU s/GB on both sides: {:.2}x hq-interop's.",
            h3 / neqo
        );
    }
    if !skipped.is_empty() {
        let _ = writeln!(out, "\nSkipped:");
        for s in &skipped {
            let _ = writeln!(out, "- {s}");
        }
    }
    (out, failed)
}
