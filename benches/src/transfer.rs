//! The `transfer` workloads of the criterion benchmarks: an in-process `neqo-server` (its own
//! thread and current-thread runtime, one per benchmark function) and `neqo_bin::client::run`
//! (a new current-thread runtime per run) on 127.0.0.1, with what each run did accumulated so
//! that a benchmark can say afterwards whether batching happened.
//!
//! Beside them, the Download's TCP+TLS baseline ([`TcpTlsFixture`]): the same response from
//! [`crate::tcp_tls`]'s server (its own thread, a thread per connection) to its client.

use std::{
    fmt::Write as _,
    time::{Duration, Instant},
};

use neqo_bin::client::{self, ClientConfig, ClientReport};
use neqo_driver::tls::Trust;
use neqo_protocols::{ALPN_H3, ALPN_HQ, ALPN_PERF};
use neqo_server_core::{App, Files, ServerConfig, ServerHandle, ServerReport};
use neqo_udp::{IoMode, Stats};

use crate::{cpu, tcp_tls};

/// 100 MiB, the size of the Download response and of the Upload.
pub const MIB_100: u64 = 100 << 20;

/// A workload of the `transfer` group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// One connection, one 100 MiB response (`hq-interop`, `GET /104857600`).
    Download,
    /// One connection, 10 000 parallel requests of a 1-byte response.
    Rps,
    /// 100 sequential connections, one 1-byte request each.
    Hps,
    /// One connection, 100 MiB uploaded with `perf`.
    Upload,
    /// 100 connections at once from one client, one 1 MiB response each.
    ManyConn,
}

/// How much one run of a [`Scenario`] moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Body bytes (Download, Upload) per run.
    pub bytes: u64,
    /// Requests per connection.
    pub requests: usize,
    /// Connections.
    pub connections: usize,
    /// Connections open at once (1: one after another).
    pub concurrency: usize,
}

/// What criterion should count for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Bytes (criterion prints MiB/s).
    Bytes(u64),
    /// Requests or connections (criterion prints elem/s).
    Elements(u64),
}

impl Scenario {
    /// In the order the benchmarks run.
    pub const ALL: [Self; 5] = [
        Self::Download,
        Self::Rps,
        Self::Hps,
        Self::Upload,
        Self::ManyConn,
    ];

    /// The benchmark name: criterion keys its saved baselines and its filters by it
    /// (`docs/guides/benchmarks.md`), so it stays fixed.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Download => "1-conn/1-100mb-resp (aka. Download)",
            Self::Rps => "1-conn/10_000-parallel-1b-resp (aka. RPS)",
            Self::Hps => "100-seq-conn/1-1b-resp (aka. HPS)",
            Self::Upload => "1-conn/1-100mb-req (aka. Upload)",
            Self::ManyConn => "100-conn/1-1mb-resp",
        }
    }

    /// Whether the benchmark also runs with the driver's pacing off.
    #[must_use]
    pub const fn has_unpaced_variant(self) -> bool {
        matches!(self, Self::Download | Self::Upload | Self::ManyConn)
    }

    /// Whether the benchmark also runs over HTTP/3: what it adds per byte (Download) and
    /// per request (RPS) beside `hq-interop`.
    #[must_use]
    pub const fn has_h3_variant(self) -> bool {
        matches!(self, Self::Download | Self::Rps)
    }

    /// The benchmark functions of this scenario: both I/O modes paced; unpaced and HTTP/3
    /// where it has those variants.
    #[must_use]
    pub fn variants(self) -> Vec<Variant> {
        let mut v = vec![
            Variant::new(IoMode::Batched, true),
            Variant::new(IoMode::Single, true),
        ];
        if self.has_unpaced_variant() {
            v.extend([
                Variant::new(IoMode::Batched, false),
                Variant::new(IoMode::Single, false),
            ]);
        }
        if self.has_h3_variant() {
            v.push(Variant::h3(IoMode::Batched, true));
            v.push(Variant::h3_service(IoMode::Batched, true));
        }
        v
    }

    /// The workload the benchmark names.
    #[must_use]
    pub const fn full(self) -> Workload {
        match self {
            Self::Download | Self::Upload => Workload {
                bytes: MIB_100,
                requests: 1,
                connections: 1,
                concurrency: 1,
            },
            Self::Rps => Workload {
                bytes: 1,
                requests: 10_000,
                connections: 1,
                concurrency: 1,
            },
            Self::Hps => Workload {
                bytes: 1,
                requests: 1,
                connections: 100,
                concurrency: 1,
            },
            Self::ManyConn => Workload {
                bytes: 1 << 20,
                requests: 1,
                connections: 100,
                concurrency: 100,
            },
        }
    }

    /// A small workload of the same shape, for tests.
    #[must_use]
    pub const fn small(self) -> Workload {
        match self {
            Self::Download | Self::Upload => Workload {
                bytes: 1 << 20,
                requests: 1,
                connections: 1,
                concurrency: 1,
            },
            Self::Rps => Workload {
                bytes: 1,
                requests: 200,
                connections: 1,
                concurrency: 1,
            },
            Self::Hps => Workload {
                bytes: 1,
                requests: 1,
                connections: 3,
                concurrency: 1,
            },
            Self::ManyConn => Workload {
                bytes: 64 << 10,
                requests: 1,
                connections: 8,
                concurrency: 8,
            },
        }
    }

    /// What one run of `w` counts for criterion's throughput.
    #[must_use]
    pub const fn unit(self, w: Workload) -> Unit {
        match self {
            Self::Download | Self::Upload => Unit::Bytes(w.bytes),
            Self::ManyConn => Unit::Bytes(w.bytes * (w.connections * w.requests) as u64),
            Self::Rps => Unit::Elements(w.requests as u64),
            Self::Hps => Unit::Elements(w.connections as u64),
        }
    }

    /// The client config of one run against `server`.
    #[must_use]
    pub fn client_config(self, server: &ServerHandle, w: Workload, v: Variant) -> ClientConfig {
        let path = match self {
            Self::Upload => "/".to_owned(),
            _ => format!("/{}", w.bytes),
        };
        let url = url::Url::parse(&format!("https://{}{path}", server.addr()))
            .unwrap_or_else(|e| unreachable!("a socket address makes a URL: {e}"));
        let mut c = ClientConfig::new(url, Trust::Certs(server.certificate().to_vec()));
        c.requests = w.requests;
        c.connections = w.connections;
        c.concurrency = w.concurrency;
        c.sockets = w.concurrency.min(16);
        c.parallel = w.requests > 1;
        c.socket = neqo_udp::Config::default().with_mode(v.mode);
        c.driver.pacing = v.pacing;
        if self == Self::Upload {
            c.alpn = ALPN_PERF.to_owned();
            c.upload = w.bytes;
            c.download = 0;
        } else if v.h3 {
            c.alpn = ALPN_H3.to_owned();
        } else {
            c.alpn = ALPN_HQ.to_owned();
        }
        c
    }

    /// Whether a run of `w` did all it should have.
    ///
    /// # Errors
    /// What is missing.
    pub fn check(self, w: Workload, r: &ClientReport) -> Result<(), String> {
        let requests = (w.requests * w.connections) as u64;
        let (expect_rx, expect_tx_at_least) = match self {
            Self::Upload => (0, w.bytes),
            _ => (w.bytes * requests, 0),
        };
        if r.requests != requests
            || r.connections != w.connections as u64
            || r.bytes_received != expect_rx
            || r.bytes_sent < expect_tx_at_least
        {
            return Err(format!(
                "{}: expected {requests} requests on {} connections, {expect_rx} bytes received and at least {expect_tx_at_least} sent; got {}",
                self.name(),
                w.connections,
                r.summary()
            ));
        }
        Ok(())
    }
}

/// How one benchmark function runs its scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub mode: IoMode,
    pub pacing: bool,
    /// HTTP/3 (`h3`) rather than `hq-interop`, for the scenarios that request bodies.
    pub h3: bool,
    /// With `h3`: answered by the library's service path (the `Files` service on the h3
    /// crate) instead of the built-in HTTP/3.
    pub service: bool,
}

impl Variant {
    #[must_use]
    pub const fn new(mode: IoMode, pacing: bool) -> Self {
        Self {
            mode,
            pacing,
            h3: false,
            service: false,
        }
    }

    #[must_use]
    pub const fn h3(mode: IoMode, pacing: bool) -> Self {
        Self {
            mode,
            pacing,
            h3: true,
            service: false,
        }
    }

    /// Over HTTP/3 answered by a service: what the service path costs beside the built-in.
    #[must_use]
    pub const fn h3_service(mode: IoMode, pacing: bool) -> Self {
        Self {
            mode,
            pacing,
            h3: true,
            service: true,
        }
    }

    /// The benchmark's parameter: the I/O mode, with `-unpaced` when pacing is off and
    /// `-h3` over HTTP/3, `-h3-service` through a service: `batched`, `single-unpaced`,
    /// `batched-h3`, `batched-h3-service`, ...
    #[must_use]
    pub fn label(self) -> String {
        let mut s = self.mode.to_string();
        if !self.pacing {
            s.push_str("-unpaced");
        }
        if self.h3 {
            s.push_str("-h3");
        }
        if self.service {
            s.push_str("-service");
        }
        s
    }
}

/// A server for one benchmark function and the counters of the client runs against it.
#[derive(Debug)]
pub struct Fixture {
    scenario: Scenario,
    workload: Workload,
    variant: Variant,
    server: ServerHandle,
    client: Stats,
    client_lost: u64,
    runs: u64,
    cpu: Duration,
    wall: Duration,
}

/// What a [`Fixture`]'s runs did, both sides.
#[derive(Debug, Clone)]
pub struct Summary {
    pub scenario: Scenario,
    pub workload: Workload,
    pub variant: Variant,
    /// Client runs.
    pub runs: u64,
    /// The client's socket counters, all runs added up.
    pub client: Stats,
    /// The server's report (its socket counters cover every run).
    pub server: ServerReport,
    /// Packets declared lost by either side.
    pub lost_packets: u64,
    /// Process CPU time (client, server and the bench thread) during the runs.
    pub cpu: Duration,
    /// Wall time of the runs.
    pub wall: Duration,
}

impl Fixture {
    /// Starts the server for `scenario` as `variant` runs it.
    ///
    /// # Errors
    /// When the server cannot start.
    pub fn start(scenario: Scenario, workload: Workload, variant: Variant) -> anyhow::Result<Self> {
        let mut config = ServerConfig {
            listen: vec!["127.0.0.1:0".parse()?],
            socket: neqo_udp::Config::default().with_mode(variant.mode),
            driver: ServerConfig::default().driver.with_pacing(variant.pacing),
            alpns: if variant.h3 {
                vec![ALPN_H3.to_owned()]
            } else {
                ServerConfig::default().alpns
            },
            ..ServerConfig::default()
        };
        if variant.service {
            config.apps.insert(ALPN_H3, App::http3(Files::generated()));
        }
        let server = ServerHandle::start(config)?;
        Ok(Self {
            scenario,
            workload,
            variant,
            server,
            client: Stats::default(),
            client_lost: 0,
            runs: 0,
            cpu: Duration::ZERO,
            wall: Duration::ZERO,
        })
    }

    /// The benchmark's parameter ([`Variant::label`]).
    #[must_use]
    pub fn label(&self) -> String {
        self.variant.label()
    }

    /// One client run, checked; returns its wall time.
    ///
    /// # Errors
    /// A failed or incomplete run.
    pub fn run(&mut self) -> Result<Duration, String> {
        let config = self
            .scenario
            .client_config(&self.server, self.workload, self.variant);
        let cpu0 = cpu::process_time();
        let t0 = Instant::now();
        let report = client::run(config).map_err(|e| format!("{}: {e:#}", self.scenario.name()))?;
        let wall = t0.elapsed();
        self.cpu += cpu::process_time().saturating_sub(cpu0);
        self.wall += wall;
        self.runs += 1;
        self.client.accumulate(&report.socket);
        self.client_lost += report.lost_packets;
        self.scenario.check(self.workload, &report)?;
        Ok(wall)
    }

    /// Stops the server and sums up.
    ///
    /// # Errors
    /// When the server failed.
    pub fn finish(self) -> anyhow::Result<Summary> {
        let server = self.server.stop()?;
        Ok(Summary {
            scenario: self.scenario,
            workload: self.workload,
            variant: self.variant,
            runs: self.runs,
            client: self.client,
            lost_packets: self.client_lost + server.lost_packets,
            server,
            cpu: self.cpu,
            wall: self.wall,
        })
    }
}

/// The benchmark parameter of the TCP+TLS baseline.
pub const TCP_TLS: &str = "tcp+tls";

/// A TCP+TLS server for the Download benchmark's baseline and the client runs against it.
#[derive(Debug)]
pub struct TcpTlsFixture {
    server: tcp_tls::ServerHandle,
    config: std::sync::Arc<rustls::ClientConfig>,
    bytes: u64,
    runs: u64,
    cpu: Duration,
    wall: Duration,
}

impl TcpTlsFixture {
    /// Starts the server; each run downloads `bytes`, offering the suites as neqo-client does
    /// (AES-128-GCM first, so that is the suite).
    ///
    /// # Errors
    /// When the server cannot start.
    pub fn start(bytes: u64) -> anyhow::Result<Self> {
        let server = tcp_tls::ServerHandle::start()?;
        let config = server.client_config(&neqo_driver::tls::CipherSuite::ALL)?;
        Ok(Self {
            server,
            config,
            bytes,
            runs: 0,
            cpu: Duration::ZERO,
            wall: Duration::ZERO,
        })
    }

    /// One download, verified; returns its wall time.
    ///
    /// # Errors
    /// A failed download.
    pub fn run(&mut self) -> Result<Duration, String> {
        let name = rustls::pki_types::ServerName::IpAddress(self.server.addr().ip().into());
        let cpu0 = cpu::process_time();
        let t0 = Instant::now();
        let d = tcp_tls::download(
            self.server.addr(),
            name,
            self.bytes,
            std::sync::Arc::clone(&self.config),
        )
        .map_err(|e| format!("{}/{TCP_TLS}: {e}", Scenario::Download.name()))?;
        let wall = t0.elapsed();
        self.cpu += cpu::process_time().saturating_sub(cpu0);
        self.wall += wall;
        self.runs += 1;
        debug_assert_eq!(d.bytes_received, self.bytes, "download checks the length");
        Ok(wall)
    }

    /// Runs so far.
    #[must_use]
    pub const fn runs(&self) -> u64 {
        self.runs
    }

    /// Stops the server; returns the line the benchmark prints: runs, what the server
    /// served, and the process CPU time per MiB (client, server and the bench thread).
    #[must_use]
    pub fn finish(self) -> String {
        let counters = self.server.stop();
        #[expect(clippy::cast_precision_loss, reason = "a ratio for humans")]
        let per_mib = self.cpu.as_secs_f64() * 1e3
            / (self.bytes as f64 / f64::from(1u32 << 20) * self.runs.max(1) as f64);
        format!(
            "transfer/{}/{TCP_TLS}: {} runs; server {}; {per_mib:.2} ms CPU per MiB",
            Scenario::Download.name(),
            self.runs,
            counters.summary(),
        )
    }
}

impl Summary {
    /// CPU time per unit of work, both sides together: per MiB for transfers, per request
    /// (RPS) or per connection (HPS).
    #[must_use]
    pub fn cpu_per_unit(&self) -> String {
        #[expect(clippy::cast_precision_loss, reason = "a ratio for humans")]
        let per = |units: u64| self.cpu.as_secs_f64() / (units as f64 * self.runs.max(1) as f64);
        match self.scenario.unit(self.workload) {
            Unit::Bytes(b) => format!("{:.2} ms CPU per MiB", per(b) * 1e3 * f64::from(1u32 << 20)),
            Unit::Elements(n) if self.scenario == Scenario::Hps => {
                format!("{:.0} µs CPU per connection", per(n) * 1e6)
            }
            Unit::Elements(n) => format!("{:.2} µs CPU per request", per(n) * 1e6),
        }
    }

    /// The line a benchmark prints after its measurement.
    #[must_use]
    pub fn line(&self) -> String {
        let s = &self.server.socket;
        let c = &self.client;
        let mut out = format!(
            "transfer/{}/{}: {} runs; datagrams/syscall: server tx {:.1} rx {:.1}, client tx {:.1} rx {:.1}; kernel drops: server {} client {}; lost packets {}; {}",
            self.scenario.name(),
            self.variant.label(),
            self.runs,
            s.tx.datagrams_per_syscall(),
            s.rx.datagrams_per_syscall(),
            c.tx.datagrams_per_syscall(),
            c.rx.datagrams_per_syscall(),
            s.kernel_drops,
            c.kernel_drops,
            self.lost_packets,
            self.cpu_per_unit(),
        );
        let dropped = s.tx_dropped.total()
            + c.tx_dropped.total()
            + s.rx_dropped.total()
            + c.rx_dropped.total();
        if dropped > 0 {
            let _ = write!(out, "; datagrams dropped by the sockets {dropped}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_runs_small_in_both_modes() {
        for scenario in Scenario::ALL {
            for mode in [IoMode::Batched, IoMode::Single] {
                let pacing = !(scenario.has_unpaced_variant() && mode == IoMode::Single);
                let w = scenario.small();
                let v = Variant::new(mode, pacing);
                let mut f = Fixture::start(scenario, w, v).unwrap();
                assert_eq!(f.label(), v.label());
                f.run().unwrap();
                f.run().unwrap();
                let s = f.finish().unwrap();
                assert_eq!(s.runs, 2);
                assert!(s.client.tx.syscalls > 0 && s.server.socket.tx.syscalls > 0);
                let line = s.line();
                assert!(line.contains(scenario.name()), "{line}");
                assert!(line.contains("datagrams/syscall"), "{line}");
                if matches!(scenario, Scenario::Hps | Scenario::ManyConn) {
                    assert_eq!(s.server.driver.accepted, 2 * w.connections as u64);
                }
                if scenario == Scenario::ManyConn {
                    // At least one run's worth at once (a run's connections may still be
                    // draining when the next run's arrive).
                    assert!(s.server.driver.peak_connections >= w.concurrency as u64);
                }
                if scenario == Scenario::Upload {
                    assert!(s.server.bytes_received >= 2 * w.bytes);
                } else {
                    assert_eq!(
                        s.server.bytes_sent,
                        2 * w.bytes * (w.requests * w.connections) as u64
                    );
                }
                if mode == IoMode::Single {
                    assert!((s.client.rx.datagrams_per_syscall() - 1.0).abs() < 1e-9);
                    assert!((s.server.socket.tx.datagrams_per_syscall() - 1.0).abs() < 1e-9);
                }
            }
        }
    }

    /// The HTTP/3 variants run over h3 (the server's HTTP/3 counters say so) and move what
    /// the `hq-interop` ones do.
    #[test]
    fn the_h3_variants_run_over_http3() {
        let both = [
            (Variant::h3(IoMode::Batched, true), "/batched-h3: 1 runs"),
            (
                Variant::h3_service(IoMode::Batched, true),
                "/batched-h3-service: 1 runs",
            ),
        ];
        for scenario in Scenario::ALL.into_iter().filter(|s| s.has_h3_variant()) {
            for (variant, label) in both {
                let w = scenario.small();
                let mut f = Fixture::start(scenario, w, variant).unwrap();
                f.run().unwrap();
                let s = f.finish().unwrap();
                let requests = (w.requests * w.connections) as u64;
                assert_eq!(s.server.http3.responses, requests, "{}", scenario.name());
                assert_eq!(s.server.http3.body_bytes, w.bytes * requests);
                assert_eq!(s.server.bytes_sent, w.bytes * requests);
                assert!(s.line().contains(label), "{}", s.line());
            }
        }
    }

    #[test]
    fn the_tcp_tls_baseline_downloads_and_sums_up() {
        let bytes = Scenario::Download.small().bytes;
        let mut f = TcpTlsFixture::start(bytes).unwrap();
        f.run().unwrap();
        f.run().unwrap();
        assert_eq!(f.runs(), 2);
        let line = f.finish();
        assert!(
            line.starts_with("transfer/1-conn/1-100mb-resp (aka. Download)/tcp+tls: 2 runs;"),
            "{line}"
        );
        assert!(
            line.contains(&format!(
                "served 2 ({} bytes), refused 0, failed 0",
                2 * bytes
            )),
            "{line}"
        );
        assert!(line.contains("ms CPU per MiB"), "{line}");
    }

    #[test]
    fn names_and_units() {
        assert_eq!(
            Scenario::Download.name(),
            "1-conn/1-100mb-resp (aka. Download)"
        );
        assert_eq!(
            Scenario::Rps.unit(Scenario::Rps.full()),
            Unit::Elements(10_000)
        );
        assert_eq!(
            Scenario::Hps.unit(Scenario::Hps.full()),
            Unit::Elements(100)
        );
        assert_eq!(
            Scenario::Upload.unit(Scenario::Upload.full()),
            Unit::Bytes(MIB_100)
        );
        assert_eq!(
            Variant::new(IoMode::Batched, false).label(),
            "batched-unpaced"
        );
        assert_eq!(Variant::h3(IoMode::Batched, true).label(), "batched-h3");
        assert_eq!(
            Variant::h3_service(IoMode::Batched, true).label(),
            "batched-h3-service"
        );
        assert_eq!(Scenario::Download.variants().len(), 6);
        assert_eq!(Scenario::Rps.variants().len(), 4);
        assert_eq!(Scenario::Hps.variants().len(), 2);
    }
}
