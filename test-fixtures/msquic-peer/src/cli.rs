//! Command line of `msquic-peer`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use url::Url;

use super::Alpn;
use super::client::{self, ClientOptions};
use super::raw::Tuning;
use super::server::{self, ServerOptions};

/// msquic-based QUIC interop peer speaking hq-interop and perf.
#[derive(Debug, Parser)]
#[command(name = "msquic-peer", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve hq-interop and/or perf until SIGINT or SIGTERM.
    Server(ServerArgs),
    /// Fetch URLs from a server and verify generated bodies.
    Client(ClientArgs),
}

#[derive(Debug, Args)]
struct ServerArgs {
    /// Address to listen on (repeatable).
    #[arg(long = "listen", value_name = "ADDR", default_value = "[::]:4433")]
    listen: Vec<SocketAddr>,
    /// Application protocols to accept (repeatable or comma separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_values = ["hq-interop", "perf"]
    )]
    alpn: Vec<Alpn>,
    /// Certificate chain (PEM); without it a self-signed certificate for
    /// localhost, 127.0.0.1 and ::1 is generated.
    #[arg(long, value_name = "PEM", requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) for --cert.
    #[arg(long, value_name = "PEM", requires = "cert")]
    key: Option<PathBuf>,
    /// Serve files below this directory for non-numeric hq paths.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    #[command(flatten)]
    tuning: TuningArgs,
    /// Bidirectional streams a client may have open at once.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u16).range(1..))]
    max_streams: u16,
    /// Send every new client a Retry (address validation before any handshake state).
    #[arg(long)]
    retry_always: bool,
    /// At exit, write what the connections did to FILE as JSON: connections, the largest
    /// path MTU and UDP payload they reached, packets sent and received, bytes sent, packets
    /// lost.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// The settings both sides take beyond msquic's defaults ([`super::raw::settings`]).
#[derive(Debug, Args)]
struct TuningArgs {
    /// Idle timeout in seconds (0 disables it).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    idle_timeout: u64,
    /// How long a handshake may go without hearing from the peer, in seconds (at least 1); also
    /// how long an unacknowledged packet is retried before the path is given up (at least
    /// msquic's 16 s).
    #[arg(long, value_name = "SECS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    handshake_timeout: u64,
    /// Mark the datagrams sent ECT(0) (msquic's `EcnEnabled`, off by default).
    #[arg(long)]
    ecn: bool,
}

impl TuningArgs {
    const fn tuning(&self) -> Tuning {
        Tuning {
            idle_timeout_ms: secs_to_ms(self.idle_timeout),
            handshake_timeout_ms: secs_to_ms(self.handshake_timeout),
            ecn: self.ecn,
        }
    }
}

#[derive(Debug, Args)]
struct ClientArgs {
    /// URLs to fetch: https://HOST:PORT/PATH (all with the same host and port).
    #[arg(required = true, value_name = "URL", value_parser = parse_url)]
    urls: Vec<Url>,
    /// Requests per URL on each connection.
    #[arg(short = 'n', long = "requests", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    requests: u64,
    /// Issue all requests of a connection at once instead of one after another.
    #[arg(long)]
    parallel: bool,
    /// Run the whole request set on K connections, one after another.
    #[arg(long, value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    connections: u64,
    /// Application protocol.
    #[arg(long, value_enum, default_value = "hq-interop")]
    alpn: Alpn,
    /// perf: bytes to request from the server per request.
    #[arg(long, value_name = "BYTES")]
    download: Option<u64>,
    /// perf: bytes to upload per request.
    #[arg(long, value_name = "BYTES")]
    upload: Option<u64>,
    /// Do not verify the server certificate.
    #[arg(long, conflicts_with = "ca")]
    insecure: bool,
    /// Trust certificates issued by this PEM CA (or this self-signed certificate), as
    /// `neqo-client --ca` does.
    #[arg(long, value_name = "PEM")]
    ca: Option<PathBuf>,
    /// hq-interop: save each URL's body (first request only) under DIR.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// Write a JSON summary to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(flatten)]
    tuning: TuningArgs,
}

fn parse_url(s: &str) -> Result<Url, String> {
    let url = Url::parse(s).map_err(|e| format!("invalid URL {s:?}: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!("URL {s:?} must use https://"));
    }
    if url.host().is_none() {
        return Err(format!("URL {s:?} has no host"));
    }
    Ok(url)
}

const fn secs_to_ms(secs: u64) -> u64 {
    secs.saturating_mul(1000)
}

/// Entry point of the `msquic-peer` binary.
#[must_use]
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server(a) => server::run(&ServerOptions {
            listen: a.listen,
            alpns: a.alpn,
            cert_key: a.cert.zip(a.key),
            root: a.root,
            tuning: a.tuning.tuning(),
            max_streams: a.max_streams,
            retry_always: a.retry_always,
            json: a.json,
        }),
        Command::Client(a) => client::run(&ClientOptions {
            urls: a.urls,
            requests: a.requests,
            parallel: a.parallel,
            connections: a.connections,
            alpn: a.alpn,
            download: a.download,
            upload: a.upload,
            insecure: a.insecure,
            ca: a.ca,
            output_dir: a.output_dir,
            json: a.json,
            tuning: a.tuning.tuning(),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("msquic-peer: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
