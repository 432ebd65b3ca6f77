//! `neqo-loopback`: the main job. Starts `neqo-server` and `neqo-client` as child processes
//! (this same executable in hidden roles) on 127.0.0.1, transfers `--bytes` (1 GiB) once per
//! I/O mode, and prints throughput, datagrams per syscall, CPU seconds and drops per mode with
//! the batched/single ratio.

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitCode},
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::Parser as _;
use neqo_bin::cli::{
    ClientArgs, ServerArgs, check_alpn, check_batch_size, check_stream_bytes, check_writable_file,
    client_main, init_logging, parse_size, server_main,
};
use neqo_process::{Measured, Server};
use neqo_report::{ClientReport, LoopbackRow as Row, Report as _, ServerReport};
use neqo_udp::IoMode;

/// How long the server may take to say where it listens.
const SERVER_READY: Duration = Duration::from_secs(20);

#[derive(Debug, clap::Parser)]
#[command(
    name = "neqo-loopback",
    version,
    about = "Loopback transfer in batched and single I/O mode: throughput, datagrams per syscall, CPU"
)]
struct Args {
    #[command(subcommand)]
    role: Option<Role>,
    /// Bytes to transfer per mode (K/M/G suffixes; at least 1).
    #[arg(long, value_parser = parse_size, default_value = "1G")]
    bytes: u64,
    /// Turn the driver's pacing off on both sides.
    #[arg(long)]
    no_pacing: bool,
    /// Modes to run, in order: `batched`, `single`.
    #[arg(long, value_delimiter = ',', default_value = "batched,single")]
    modes: Vec<String>,
    /// `hq-interop` (GET /N), `perf` (download N) or `h3` (HTTP/3 GET /N).
    #[arg(long, default_value = "hq-interop")]
    alpn: String,
    /// Datagrams per syscall in batched mode (1 to 128).
    #[arg(long, default_value_t = neqo_udp::DEFAULT_BATCH_SIZE)]
    batch_size: usize,
    /// Write every figure as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Role {
    /// Run as neqo-server.
    #[command(hide = true)]
    Server(ServerArgs),
    /// Run as neqo-client.
    #[command(hide = true)]
    Client(ClientArgs),
}

#[global_allocator]
static ALLOCATOR: neqo_bin::cli::Allocator = neqo_bin::cli::ALLOCATOR;

fn main() -> ExitCode {
    init_logging();
    let args = Args::parse();
    match args.role {
        Some(Role::Server(a)) => return server_main(a),
        Some(Role::Client(a)) => return client_main(a),
        None => {}
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("neqo-loopback: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Passes on what a child wrote to stderr (its warnings and errors), naming it.
fn relay_stderr(role: &str, m: &Measured) {
    for line in m.stderr.lines() {
        eprintln!("{role}: {line}");
    }
}

/// Refuses settings that cannot work before anything runs, with the checks of `neqo-server`
/// and `neqo-client` (which check the rest again in their roles).
fn validate(args: &Args) -> anyhow::Result<Vec<IoMode>> {
    if args.bytes == 0 {
        bail!("--bytes 0: must be at least 1");
    }
    check_stream_bytes("--bytes", args.bytes)?;
    check_alpn("--alpn", &args.alpn)?;
    check_batch_size(args.batch_size)?;
    let modes = args
        .modes
        .iter()
        .map(|m| m.parse().map_err(|e| anyhow::anyhow!("--modes: {e}")))
        .collect::<anyhow::Result<Vec<IoMode>>>()?;
    if let Some(path) = &args.json {
        check_writable_file("--json", path)?;
    }
    Ok(modes)
}

fn run(args: &Args) -> anyhow::Result<()> {
    let modes = validate(args)?;
    let exe = std::env::current_exe().context("finding this executable")?;
    let dir = std::env::temp_dir().join(format!("neqo-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows = Vec::new();
    for mode in modes {
        eprintln!(
            "neqo-loopback: {} bytes in {mode} mode, pacing {}...",
            args.bytes,
            if args.no_pacing { "off" } else { "on" }
        );
        rows.push(one(args, &exe, &dir, mode)?);
    }
    let _ = std::fs::remove_dir_all(&dir);
    print_table(&rows, !args.no_pacing);
    if let Some(path) = &args.json {
        std::fs::write(path, rows.to_json()?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn common(args: &Args, mode: IoMode, json: &Path) -> Vec<String> {
    let mut v = vec![
        "--io".to_owned(),
        mode.to_string(),
        "--batch-size".to_owned(),
        args.batch_size.to_string(),
        "--json".to_owned(),
        json.display().to_string(),
    ];
    if args.no_pacing {
        v.push("--no-pacing".to_owned());
    }
    v
}

fn one(args: &Args, exe: &Path, dir: &Path, mode: IoMode) -> anyhow::Result<Row> {
    let server_json = dir.join(format!("server-{mode}.json"));
    let client_json = dir.join(format!("client-{mode}.json"));
    let server = Server::start(
        Command::new(exe)
            .arg("server")
            .args(["--listen", "127.0.0.1:0", "--alpn", &args.alpn])
            .args(common(args, mode, &server_json)),
        SERVER_READY,
    )
    .context("starting the server")?;
    let addr = server.addr();
    let url = if args.alpn == "perf" {
        format!("https://{addr}/")
    } else {
        format!("https://{addr}/{}", args.bytes)
    };
    let mut client = Command::new(exe);
    client
        .arg("client")
        .arg(&url)
        .args(["--insecure", "--quiet", "--alpn", &args.alpn])
        .args(common(args, mode, &client_json));
    if args.alpn == "perf" {
        client.args(["--download", &args.bytes.to_string()]);
    }
    // A hang guard: a minute, plus the transfer at 100 Mbit/s.
    let limit = Duration::from_secs(60 + args.bytes / 12_500_000);
    let client = neqo_process::run(&mut client, limit).context("running the client");
    let server = server.stop().context("stopping the server")?;
    let client = client?;
    relay_stderr("client", &client);
    relay_stderr("server", &server);
    if !client.success() {
        bail!("the client failed in {mode} mode ({})", client.ending());
    }
    // Both reports are required: a run whose figures cannot be read is an error, not zeros.
    let c = ClientReport::read(&client_json)?;
    let sv = ServerReport::read(&server_json).context("the server's report")?;
    Ok(Row {
        mode: mode.to_string(),
        pacing: !args.no_pacing,
        bytes: c.bytes_received,
        seconds: c.seconds,
        gbps: c.gbps,
        server_tx_per_syscall: sv.tx_datagrams_per_syscall,
        client_rx_per_syscall: c.rx_datagrams_per_syscall,
        client_tx_per_syscall: c.tx_datagrams_per_syscall,
        server_rx_per_syscall: sv.rx_datagrams_per_syscall,
        client_cpu_s: client.cpu().as_secs_f64(),
        server_cpu_s: server.cpu().as_secs_f64(),
        kernel_drops: c.kernel_drops + sv.kernel_drops,
        lost_packets: c.lost_packets + sv.lost_packets,
        server_path_mtu: u64::from(sv.driver.max_path_mtu),
        client: c,
        server: sv,
    })
}

fn print_table(rows: &[Row], pacing: bool) {
    println!();
    println!(
        "neqo-loopback: 127.0.0.1, pacing {}, client and server share this machine's cores",
        if pacing { "on" } else { "off" }
    );
    println!(
        "{:<8} {:>10} {:>8} {:>13} {:>13} {:>9} {:>9} {:>7} {:>6} {:>7}",
        "mode",
        "bytes",
        "Gbit/s",
        "data dg/sys",
        "ack dg/sys",
        "cpu cli",
        "cpu srv",
        "drops",
        "lost",
        "mtu srv"
    );
    println!(
        "{:<8} {:>10} {:>8} {:>13} {:>13} {:>9} {:>9} {:>7} {:>6} {:>7}",
        "", "", "", "srv tx/cli rx", "cli tx/srv rx", "s", "s", "", "", "B"
    );
    for r in rows {
        println!(
            "{:<8} {:>10} {:>8.2} {:>6.1}/{:<6.1} {:>6.1}/{:<6.1} {:>9.2} {:>9.2} {:>7} {:>6} {:>7}",
            r.mode,
            r.bytes,
            r.gbps,
            r.server_tx_per_syscall,
            r.client_rx_per_syscall,
            r.client_tx_per_syscall,
            r.server_rx_per_syscall,
            r.client_cpu_s,
            r.server_cpu_s,
            r.kernel_drops,
            r.lost_packets,
            r.server_path_mtu
        );
    }
    let find = |m: &str| rows.iter().find(|r| r.mode == m);
    if let (Some(b), Some(s)) = (find("batched"), find("single"))
        && s.gbps > 0.0
    {
        let cpu_per_gb = |r: &Row| {
            #[expect(clippy::cast_precision_loss, reason = "ratio")]
            let gb = r.bytes as f64 / 1e9;
            (r.client_cpu_s + r.server_cpu_s) / gb.max(1e-9)
        };
        println!(
            "batched/single: throughput x{:.2}, CPU seconds per GB x{:.2} ({:.2} vs {:.2})",
            b.gbps / s.gbps,
            cpu_per_gb(b) / cpu_per_gb(s).max(1e-9),
            cpu_per_gb(b),
            cpu_per_gb(s)
        );
    }
}
