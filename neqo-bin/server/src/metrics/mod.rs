//! The metrics endpoint ([`ServerConfig::metrics`](crate::ServerConfig::metrics)): what the server's JSON report carries, live, in the OpenMetrics text
//! format Prometheus scrapes (`prometheus-client` writes it), over HTTP on a TCP address.
//!
//! - Per worker, labelled `worker`: what each worker's report counts (connections accepted
//!   and refused by reason, Retries, handshakes and their durations, requests, bytes and
//!   datagrams each way, drops by reason, the receive windows granted), and histograms of
//!   datagrams per syscall each way and of handshake durations. `sum()` over `worker` gives
//!   the server's.
//! - Server-wide, without a label: what the workers count together (connections open and
//!   half-open, the sources holding them) and the receive budget.
//!
//! Each worker publishes its report to the [`Board`] at most every [`PUBLISH_EVERY`] (its
//! turns are where its counts live; a scrape does not wait for them), so a scrape is at most
//! that stale. The endpoint ([`endpoint`]) answers `GET /metrics` only, on hyper's HTTP/1
//! server on a thread of its own, with bounds on connections and on the time and size of a
//! request; anything else gets an error status. Every family is listed in
//! `docs/reference/metrics.md`, generated from the exposition ([`reference`]).

mod endpoint;
#[cfg(test)]
mod reference;

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

pub(super) use endpoint::MetricsServer;
use neqo_driver::tls::Certificates;
use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric, counter::Counter, gauge::Gauge},
    registry::{Registry, Unit},
};

use crate::access_log::AccessLog;

use super::{ServerReport, ledger::Ledger};

/// How often a worker publishes its report at most.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The latest reports of the workers, and the server-wide counts.
#[derive(Debug)]
pub(super) struct Board {
    workers: Vec<Mutex<Option<ServerReport>>>,
    ledger: Arc<Ledger>,
    certificates: Certificates,
    access_log: Option<AccessLog>,
}

impl Board {
    pub(super) fn new(
        workers: usize,
        ledger: Arc<Ledger>,
        certificates: Certificates,
        access_log: Option<AccessLog>,
    ) -> Self {
        Self {
            workers: (0..workers).map(|_| Mutex::new(None)).collect(),
            ledger,
            certificates,
            access_log,
        }
    }

    /// Worker `worker`'s report as of now.
    pub(super) fn publish(&self, worker: usize, report: ServerReport) {
        if let Some(slot) = self.workers.get(worker) {
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(report);
        }
    }

    /// The exposition of everything published.
    pub(super) fn render(&self) -> String {
        let mut registry = Registry::with_prefix("neqo_server");
        let gauge = |v: u64| {
            let g: Gauge = Gauge::default();
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
            g
        };
        registry.register(
            "connections_open",
            "Connections accepted and not yet drained, over all workers",
            gauge(self.ledger.open() as u64),
        );
        registry.register(
            "connections_half_open",
            "Handshakes in progress, over all workers",
            gauge(self.ledger.half_open() as u64),
        );
        registry.register(
            "connections_peak_open",
            "The most connections open at once",
            gauge(self.ledger.peak_open() as u64),
        );
        registry.register(
            "connections_peak_half_open",
            "The most handshakes in progress at once",
            gauge(self.ledger.peak_half_open() as u64),
        );
        registry.register(
            "tls_certificates",
            "Certificates served, chosen by SNI",
            gauge(self.certificates.len() as u64),
        );
        let replaced = self.certificates.replacements();
        let reloads = registry.sub_registry_with_prefix("tls_certificate");
        for (result, v) in [("done", replaced.done), ("refused", replaced.refused)] {
            reloads
                .sub_registry_with_label(("result".into(), result.into()))
                .register(
                    "replacements",
                    "Replacements of the certificates (a reload); refused ones left them as they were",
                    counter(v),
                );
        }
        if let Some(log) = &self.access_log {
            registry.register(
                "access_log_lines",
                "Access log lines written",
                counter(log.written()),
            );
            registry.register(
                "access_log_dropped",
                "Access log lines dropped because its writer was behind",
                counter(log.dropped()),
            );
        }
        let reports: Vec<Option<ServerReport>> = self
            .workers
            .iter()
            .map(|slot| slot.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect();
        // The TLS counters are the process's: the same in every worker's report. Only the
        // server role's are published (`TlsCounters` documents which side counts what); the
        // full handshakes are the handshake histogram's count less the resumptions.
        if let Some(tls) = reports.iter().flatten().map(|r| r.tls).next_back() {
            for (name, help, v) in [
                (
                    "tls_tickets_redeemed",
                    "Session tickets redeemed (resumptions)",
                    tls.tickets_redeemed,
                ),
                (
                    "tls_zero_rtt_accepted",
                    "Connections whose 0-RTT data was accepted",
                    tls.zero_rtt_attempted,
                ),
                (
                    "tls_key_updates",
                    "1-RTT key updates, initiated or answered",
                    tls.key_updates,
                ),
            ] {
                registry.register(name, help, counter(v));
            }
        }
        for (w, r) in reports.iter().enumerate() {
            let Some(r) = r else {
                continue;
            };
            let sub = registry.sub_registry_with_label(("worker".into(), w.to_string().into()));
            register_worker(sub, r);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

fn counter(v: u64) -> Counter {
    let c: Counter = Counter::default();
    c.inc_by(v);
    c
}

/// One worker's report as metrics.
fn register_worker(r: &mut Registry, report: &ServerReport) {
    let d = &report.driver;
    let a = &report.admission;
    let s = &report.socket;
    for (name, help, v) in [
        ("connections_accepted", "Connections accepted", d.accepted),
        ("retries", "Retry packets sent", d.retries),
        (
            "handshake_timeouts",
            "Handshakes given up at their timeout",
            a.handshake_timeouts,
        ),
        (
            "evicted_half_open",
            "Handshakes evicted for another source's newcomer",
            a.evicted_half_open,
        ),
        ("requests", "Requests answered completely", report.requests),
        (
            "requests_refused",
            "Requests refused or reset",
            report.refused_requests,
        ),
        (
            "stateless_dropped",
            "Replies no connection owns dropped at a full queue",
            d.stateless_dropped,
        ),
        (
            "initials_shed",
            "Initials shed unread by a worker behind its socket",
            d.initials_shed,
        ),
        (
            "kernel_drops",
            "Datagrams the kernel dropped at the sockets",
            s.kernel_drops,
        ),
        (
            "lost_packets",
            "Packets the connections declared lost",
            report.lost_packets,
        ),
    ] {
        r.register(name, help, counter(v));
    }
    for (name, help, v) in [
        ("response", "Response bytes written", report.bytes_sent),
        ("request", "Request bytes read", report.bytes_received),
    ] {
        r.register_with_unit(name, help, Unit::Bytes, counter(v));
    }
    // HTTP/3's share of the requests above, by outcome.
    let h3 = &report.http3;
    let http3 = r.sub_registry_with_prefix("http3");
    for (name, help, v) in [
        (
            "responses",
            "HTTP/3 responses sent whole (200)",
            h3.responses,
        ),
        (
            "error_statuses",
            "HTTP/3 requests answered with a 4xx or 5xx status",
            h3.error_statuses,
        ),
        (
            "cancelled",
            "HTTP/3 requests that ended without a whole response",
            h3.cancelled,
        ),
        (
            "rejected",
            "HTTP/3 requests refused unprocessed after the GOAWAY",
            h3.rejected,
        ),
    ] {
        http3.register(name, help, counter(v));
    }
    http3.register_with_unit(
        "uploaded",
        "HTTP/3 request body bytes received (POST)",
        Unit::Bytes,
        counter(h3.uploaded_bytes),
    );
    http3.register_with_unit(
        "body",
        "HTTP/3 response body bytes sent",
        Unit::Bytes,
        counter(h3.body_bytes),
    );
    let refused = r.sub_registry_with_prefix("refused");
    for (reason, v) in [
        ("half_open", a.refused_half_open),
        ("full", a.refused_full),
        ("budget", report.refused_budget),
        ("source_share", report.refused_source_share),
    ] {
        refused
            .sub_registry_with_label(("reason".into(), reason.into()))
            .register("connections", "Connections refused, by reason", counter(v));
    }
    for (dir, d) in [("rx", &s.rx), ("tx", &s.tx)] {
        let sub = r.sub_registry_with_label(("direction".into(), dir.into()));
        sub.register(
            "datagrams",
            "Datagrams the sockets moved",
            counter(d.datagrams),
        );
        sub.register(
            "syscalls",
            "Syscalls that moved datagrams",
            counter(d.syscalls),
        );
        sub.register_with_unit(
            "udp_payload",
            "UDP payload the sockets moved",
            Unit::Bytes,
            counter(d.bytes),
        );
        sub.register(
            "datagrams_per_syscall",
            "Datagrams each syscall moved",
            per_syscall(d),
        );
    }
    let tx = &s.tx_dropped;
    for (reason, v) in [
        ("msg_size", tx.msg_size),
        ("no_buffers", tx.no_buffers),
        ("unreachable", tx.unreachable),
        ("other", tx.other),
    ] {
        r.sub_registry_with_label(("reason".into(), reason.into()))
            .register(
                "tx_dropped",
                "Datagrams dropped on send, by reason",
                counter(v),
            );
    }
    let rx = &s.rx_dropped;
    for (reason, v) in [
        ("truncated", rx.truncated),
        ("ctrunc", rx.ctrunc),
        ("empty", rx.empty),
        ("other", rx.other),
    ] {
        r.sub_registry_with_label(("reason".into(), reason.into()))
            .register(
                "rx_dropped",
                "Datagrams dropped on receive, by reason",
                counter(v),
            );
    }
    let windows: Gauge = Gauge::default();
    windows.set(i64::try_from(report.receive_windows).unwrap_or(i64::MAX));
    r.register_with_unit(
        "receive_windows",
        "Receive windows granted, summed",
        Unit::Bytes,
        windows,
    );
    let budget: Gauge = Gauge::default();
    budget.set(i64::try_from(report.receive_budget).unwrap_or(i64::MAX));
    r.register_with_unit(
        "receive_budget",
        "The worker's share of the receive budget",
        Unit::Bytes,
        budget,
    );
    r.register_with_unit(
        "handshake_duration",
        "From accepting a connection to its handshake's end",
        Unit::Seconds,
        a.handshakes.histogram(),
    );
}

/// A histogram whose buckets are counted already: `(upper bound, count in that bucket)`.
#[derive(Debug)]
pub(super) struct Buckets {
    pub(super) sum: f64,
    pub(super) count: u64,
    pub(super) buckets: Vec<(f64, u64)>,
}

impl TypedMetric for Buckets {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Buckets {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The sockets' datagrams-per-syscall buckets (powers of two) as a histogram.
fn per_syscall(d: &neqo_udp::DirectionStats) -> Buckets {
    let last = d.per_syscall.len() - 1;
    let buckets = d
        .per_syscall
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let upper = if i == last {
                f64::INFINITY
            } else {
                f64::from((2u32 << i) - 1)
            };
            (upper, n)
        })
        .collect();
    #[expect(clippy::cast_precision_loss, reason = "a figure, not a count")]
    Buckets {
        sum: d.datagrams as f64,
        count: d.syscalls,
        buckets,
    }
}

/// A board's certificates in the tests: one self-signed.
#[cfg(test)]
pub(crate) fn test_certificates() -> Certificates {
    Certificates::new(&[neqo_driver::tls::Identity::self_signed().unwrap()]).unwrap()
}
