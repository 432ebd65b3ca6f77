//! `tcp-tls`: the TCP+TLS baseline as two processes, for `compare` (see `benches::tcp_tls`).
//!
//! ```text
//! tcp-tls server [--listen 127.0.0.1:0] [--cert PEM --key PEM] [--cipher-suite S,...]
//!                [--max-connections N] [--request-timeout SECS]
//! tcp-tls client https://127.0.0.1:PORT/N (--insecure | --ca PEM) [--cipher-suite S,...]
//!                [--json FILE]
//! ```
//!
//! The server prints `tcp-tls listening on ADDR` once it listens, serves until SIGTERM or
//! SIGINT, then prints what it served to stderr and exits 0. The client downloads `/N`,
//! verifies the body against the pattern and its exact length, prints bytes, seconds and
//! Gbit/s, and exits non-zero on any failure.

use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    process::ExitCode,
    sync::{Arc, atomic::AtomicBool},
    time::Duration,
};

use anyhow::{Context as _, bail};
use benches::tcp_tls::{self, Counters, DEFAULT_MAX_CONNECTIONS, Server};
use clap::{Parser, Subcommand};
use neqo_bin::cli::CipherSuiteArg;
use neqo_driver::tls::{self, CipherSuite, Identity, Trust};
use neqo_protocols::hq::{self, Target};
use rustls::pki_types::ServerName;

#[derive(Debug, Parser)]
#[command(
    name = "tcp-tls",
    version,
    about = "TLS 1.3 (rustls) over kernel TCP: the baseline beside QUIC"
)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve `GET /N` with N pattern bytes, a thread per connection.
    Server(ServerArgs),
    /// Download `/N` and verify it.
    Client(ClientArgs),
}

#[derive(Debug, clap::Args)]
struct ServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// PEM certificate chain (default: a self-signed certificate for localhost).
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// PEM private key of `--cert`.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// TLS 1.3 cipher suites accepted (comma separated; default all). The client's order
    /// decides among them.
    #[arg(long, value_enum, value_delimiter = ',')]
    cipher_suite: Vec<CipherSuiteArg>,
    /// Connections served at once; more are reset.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_connections: u32,
    /// Seconds a client has, from being accepted, to complete its handshake and request;
    /// slower ones are reset.
    #[arg(long, default_value_t = tcp_tls::REQUEST_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    request_timeout: u64,
}

#[derive(Debug, clap::Args)]
struct ClientArgs {
    /// `https://HOST:PORT/N`: download N pattern bytes.
    url: url::Url,
    /// Do not verify the server's certificate.
    #[arg(long, conflicts_with = "ca")]
    insecure: bool,
    /// Trust certificates issued by this PEM CA (or this self-signed certificate).
    #[arg(long)]
    ca: Option<PathBuf>,
    /// TLS 1.3 cipher suites offered, in order (comma separated; default all, AES-128-GCM
    /// first, as neqo-client).
    #[arg(long, value_enum, value_delimiter = ',')]
    cipher_suite: Vec<CipherSuiteArg>,
    /// Write a JSON report here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn suites(given: &[CipherSuiteArg]) -> Vec<CipherSuite> {
    if given.is_empty() {
        CipherSuite::ALL.to_vec()
    } else {
        given.iter().map(|&s| s.into()).collect()
    }
}

fn server(args: &ServerArgs) -> anyhow::Result<()> {
    let identity = match (&args.cert, &args.key) {
        (Some(cert), Some(key)) => Identity::from_pem_files(cert, key)?,
        _ => Identity::self_signed()?,
    };
    let server = Server::bind(
        args.listen,
        &identity,
        &suites(&args.cipher_suite),
        args.max_connections as usize,
    )?
    .with_request_timeout(Duration::from_secs(args.request_timeout));
    // Before any other thread starts, so that every thread leaves the signals to it.
    stop_on_signal(server.counters())?;
    println!("tcp-tls listening on {}", server.local_addr()?);
    std::io::Write::flush(&mut std::io::stdout())?;
    server.run(&AtomicBool::new(false));
    Ok(())
}

/// Exits 0 with a summary on SIGTERM or SIGINT (a thread waits for them; every other thread
/// has them blocked), once the connections being served have ended or
/// [`tcp_tls::STOP_WAIT`] has passed.
#[cfg(unix)]
fn stop_on_signal(counters: Arc<Counters>) -> anyhow::Result<()> {
    // SAFETY: a zeroed `sigset_t` is storage `sigemptyset` initialises; the set and the
    // signal number are live locals.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        libc::sigaddset(&raw mut set, libc::SIGTERM);
        libc::sigaddset(&raw mut set, libc::SIGINT);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
        if rc != 0 {
            bail!(
                "blocking SIGTERM: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        set
    };
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `set` and `signal` are live locals.
            let rc = unsafe { libc::sigwait(&raw const set, &raw mut signal) };
            if rc != 0 {
                eprintln!(
                    "tcp-tls server: sigwait: {}",
                    std::io::Error::from_raw_os_error(rc)
                );
            }
            // New connections are not served from here on; those being served get a moment
            // to end, so that the summary counts every response a client has seen end.
            counters.wait_idle(tcp_tls::STOP_WAIT);
            eprintln!("tcp-tls server: stopping: {}", counters.summary());
            std::process::exit(0);
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// Elsewhere the process is simply killed.
#[cfg(not(unix))]
#[expect(clippy::unnecessary_wraps, reason = "the same signature as on Unix")]
fn stop_on_signal(_counters: Arc<Counters>) -> anyhow::Result<()> {
    Ok(())
}

/// The server's address, the name its certificate must have, and N.
fn target(url: &url::Url) -> anyhow::Result<(SocketAddr, ServerName<'static>, u64)> {
    if url.scheme() != "https" {
        bail!("{url}: expected an https:// URL");
    }
    let size = match hq::target(url.path()) {
        Ok(Target::Generated(n)) if url.query().is_none() => n,
        Ok(_) => bail!("{url}: the path must be /N, N pattern bytes"),
        Err(e) => bail!("{url}: /N: {e}"),
    };
    let name = match url.host() {
        Some(url::Host::Ipv4(ip)) => ServerName::IpAddress(IpAddr::V4(ip).into()),
        Some(url::Host::Ipv6(ip)) => ServerName::IpAddress(IpAddr::V6(ip).into()),
        Some(url::Host::Domain(d)) => ServerName::try_from(d.to_owned())
            .with_context(|| format!("{url}: not a valid server name"))?,
        None => bail!("{url}: no host"),
    };
    let addr = url
        .socket_addrs(|| Some(443))
        .with_context(|| format!("{url}: cannot resolve the host"))?
        .into_iter()
        .next()
        .with_context(|| format!("{url}: the host has no address"))?;
    Ok((addr, name, size))
}

fn client(args: &ClientArgs) -> anyhow::Result<()> {
    let (addr, name, size) = target(&args.url)?;
    let trust = match (&args.ca, args.insecure) {
        (Some(ca), _) => Trust::Certs(tls::read_certs(ca)?),
        (None, true) => Trust::Insecure,
        (None, false) => bail!("no trust anchor: pass --ca PEM or --insecure"),
    };
    let config = tls::stream_client_config(&trust, &suites(&args.cipher_suite))?;
    let download =
        tcp_tls::download(addr, name, size, config).with_context(|| format!("{}", args.url))?;
    println!("tcp-tls client: {}", download.summary());
    if let Some(path) = &args.json {
        let text = neqo_report::Report::to_json(&download.report())?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (side, result) = match &args.command {
        Cmd::Server(a) => ("server", server(a)),
        Cmd::Client(a) => ("client", client(a)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcp-tls {side}: {e:#}");
            ExitCode::FAILURE
        }
    }
}
