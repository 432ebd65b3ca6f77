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
//! Each family is written once, with one descriptor (HELP, TYPE, UNIT) and all its samples
//! together, every worker's (and every direction's, reason's, result's) merged into it:
//! OpenMetrics parsers refuse a family written twice or interleaved with another, and so
//! refuse the whole scrape.
//!
//! Each worker publishes its report to the [`Board`] at most every [`PUBLISH_EVERY`] (its
//! turns are where its counts live; a scrape does not wait for them), so a scrape is at most
//! that stale. The endpoint ([`endpoint`]) answers `GET /metrics` only, on hyper's HTTP/1
//! server on a thread of its own, with bounds on connections and on the time and size of a
//! request; anything else gets an error status. Every family is listed in
//! `docs/reference/metrics.md`, generated from the exposition ([`reference`]).

mod endpoint;
#[cfg(test)]
mod openmetrics;
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
    metrics::{MetricType, TypedMetric},
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
        let mut x = Exposition::default();
        let open = |n: usize| Value::Gauge(n as u64);
        x.add(
            "connections_open",
            "Connections accepted and not yet drained, over all workers",
            None,
            vec![],
            open(self.ledger.open()),
        );
        x.add(
            "connections_half_open",
            "Handshakes in progress, over all workers",
            None,
            vec![],
            open(self.ledger.half_open()),
        );
        x.add(
            "connections_peak_open",
            "The most connections open at once",
            None,
            vec![],
            open(self.ledger.peak_open()),
        );
        x.add(
            "connections_peak_half_open",
            "The most handshakes in progress at once",
            None,
            vec![],
            open(self.ledger.peak_half_open()),
        );
        x.add(
            "tls_certificates",
            "Certificates served, chosen by SNI",
            None,
            vec![],
            open(self.certificates.len()),
        );
        if let Some(log) = &self.access_log {
            x.add(
                "access_log_lines",
                "Access log lines written",
                None,
                vec![],
                Value::Counter(log.written()),
            );
            let failed = log.dropped_by_errors();
            for (reason, v) in [
                ("behind", log.dropped().saturating_sub(failed)),
                ("write_failed", failed),
            ] {
                x.add(
                    "access_log_dropped",
                    "Access log lines dropped: its writer behind, or its output failing (a full disk)",
                    None,
                    vec![("reason", reason.to_owned())],
                    Value::Counter(v),
                );
            }
        }
        let reports: Vec<Option<ServerReport>> = self
            .workers
            .iter()
            .map(|slot| slot.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect();
        // The TLS counters are the process's, read as they are now: a worker's report holds
        // them as they were when it last published, and the one published last may be the
        // staler (a scrape could then count fewer than the one before). Only the server
        // role's are published (`TlsCounters` documents which side counts what); the full
        // handshakes are the handshake histogram's count less the resumptions.
        if reports.iter().any(Option::is_some) {
            let tls = neqo_driver::tls::counters::snapshot();
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
                x.add(name, help, None, vec![], Value::Counter(v));
            }
        }
        let replaced = self.certificates.replacements();
        for (result, v) in [("done", replaced.done), ("refused", replaced.refused)] {
            x.add(
                "tls_certificate_replacements",
                "Replacements of the certificates (a reload); refused ones left them as they were",
                None,
                vec![("result", result.to_owned())],
                Value::Counter(v),
            );
        }
        for (w, r) in reports.iter().enumerate() {
            if let Some(r) = r {
                add_worker(&mut x, w, r);
            }
        }
        x.encode()
    }
}

/// A sample's labels, in the order written: `worker` first where there is one.
type Labels = Vec<(&'static str, String)>;

/// One sample's value.
#[derive(Debug)]
enum Value {
    Counter(u64),
    Gauge(u64),
    Histogram(Buckets),
}

impl Value {
    const fn metric_type(&self) -> MetricType {
        match self {
            Self::Counter(_) => MetricType::Counter,
            Self::Gauge(_) => MetricType::Gauge,
            Self::Histogram(_) => MetricType::Histogram,
        }
    }
}

/// A family's samples, each with its labels, in the order added: written under the one
/// descriptor (HELP, TYPE, UNIT) of the family, together, as OpenMetrics requires.
#[derive(Debug)]
struct Samples {
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

impl EncodeMetric for Samples {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        for (labels, value) in &self.samples {
            let mut sample = encoder.encode_family(labels)?;
            match value {
                Value::Counter(v) => sample.encode_counter::<NoLabelSet, _, u64>(v, None)?,
                Value::Gauge(v) => sample.encode_gauge(v)?,
                Value::Histogram(b) => b.encode(sample)?,
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.kind
    }

    fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

/// An exposition being put together: each family once, in the order of its first sample,
/// with the samples of every worker (and every direction, reason, result) merged into it.
#[derive(Debug, Default)]
struct Exposition {
    families: Vec<(&'static str, &'static str, Option<Unit>, Samples)>,
}

impl Exposition {
    /// A sample of family `name` (`neqo_server_NAME_UNIT`); the first one of a family gives
    /// its help, unit and type, which every later one must share.
    fn add(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        labels: Labels,
        value: Value,
    ) {
        let at = match self.families.iter().position(|f| f.0 == name) {
            Some(at) => at,
            None => {
                let kind = value.metric_type();
                self.families.push((
                    name,
                    help,
                    unit.clone(),
                    Samples {
                        kind,
                        samples: Vec::new(),
                    },
                ));
                self.families.len() - 1
            }
        };
        let family = &mut self.families[at];
        debug_assert!(
            family.1 == help && family.2 == unit && family.3.kind == value.metric_type(),
            "{name}: one descriptor for every sample"
        );
        family.3.samples.push((labels, value));
    }

    /// The OpenMetrics text of it all.
    fn encode(self) -> String {
        let mut registry = Registry::with_prefix("neqo_server");
        for (name, help, unit, samples) in self.families {
            match unit {
                Some(unit) => registry.register_with_unit(name, help, unit, samples),
                None => registry.register(name, help, samples),
            }
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// Worker `w`'s report as samples labelled `worker="w"`.
fn add_worker(x: &mut Exposition, w: usize, report: &ServerReport) {
    let worker = || vec![("worker", w.to_string())];
    let with = |key: &'static str, value: &str| {
        let mut labels = worker();
        labels.push((key, value.to_owned()));
        labels
    };
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
        (
            "app_panics",
            "Panics caught in applications' code, each costing a request or a connection",
            report.app_panics,
        ),
    ] {
        x.add(name, help, None, worker(), Value::Counter(v));
    }
    for (name, help, v) in [
        ("response", "Response bytes written", report.bytes_sent),
        ("request", "Request bytes read", report.bytes_received),
    ] {
        x.add(name, help, Some(Unit::Bytes), worker(), Value::Counter(v));
    }
    x.add(
        "receive_windows",
        "Receive windows granted, summed",
        Some(Unit::Bytes),
        worker(),
        Value::Gauge(report.receive_windows),
    );
    x.add(
        "receive_budget",
        "The worker's share of the receive budget",
        Some(Unit::Bytes),
        worker(),
        Value::Gauge(report.receive_budget),
    );
    x.add(
        "handshake_duration",
        "From accepting a connection to its handshake's end",
        Some(Unit::Seconds),
        worker(),
        Value::Histogram(a.handshakes.histogram()),
    );
    // HTTP/3's share of the requests above, by outcome.
    let h3 = &report.http3;
    for (name, help, v) in [
        (
            "http3_responses",
            "HTTP/3 responses sent whole (200)",
            h3.responses,
        ),
        (
            "http3_error_statuses",
            "HTTP/3 requests answered with a 4xx or 5xx status",
            h3.error_statuses,
        ),
        (
            "http3_cancelled",
            "HTTP/3 requests that ended without a whole response",
            h3.cancelled,
        ),
        (
            "http3_rejected",
            "HTTP/3 requests refused unprocessed after the GOAWAY",
            h3.rejected,
        ),
    ] {
        x.add(name, help, None, worker(), Value::Counter(v));
    }
    for (name, help, v) in [
        (
            "http3_uploaded",
            "HTTP/3 request body bytes received (POST)",
            h3.uploaded_bytes,
        ),
        (
            "http3_body",
            "HTTP/3 response body bytes sent",
            h3.body_bytes,
        ),
    ] {
        x.add(name, help, Some(Unit::Bytes), worker(), Value::Counter(v));
    }
    for (reason, v) in [
        ("half_open", a.refused_half_open),
        ("full", a.refused_full),
        ("budget", report.refused_budget),
        ("source_share", report.refused_source_share),
    ] {
        x.add(
            "refused_connections",
            "Connections refused, by reason",
            None,
            with("reason", reason),
            Value::Counter(v),
        );
    }
    for (dir, d) in [("rx", &s.rx), ("tx", &s.tx)] {
        let labels = || with("direction", dir);
        x.add(
            "datagrams",
            "Datagrams the sockets moved",
            None,
            labels(),
            Value::Counter(d.datagrams),
        );
        x.add(
            "syscalls",
            "Syscalls that moved datagrams",
            None,
            labels(),
            Value::Counter(d.syscalls),
        );
        x.add(
            "udp_payload",
            "UDP payload the sockets moved",
            Some(Unit::Bytes),
            labels(),
            Value::Counter(d.bytes),
        );
        x.add(
            "datagrams_per_syscall",
            "Datagrams each syscall moved",
            None,
            labels(),
            Value::Histogram(per_syscall(d)),
        );
    }
    let tx = &s.tx_dropped;
    for (reason, v) in [
        ("msg_size", tx.msg_size),
        ("no_buffers", tx.no_buffers),
        ("unreachable", tx.unreachable),
        ("other", tx.other),
    ] {
        x.add(
            "tx_dropped",
            "Datagrams dropped on send, by reason",
            None,
            with("reason", reason),
            Value::Counter(v),
        );
    }
    let rx = &s.rx_dropped;
    for (reason, v) in [
        ("truncated", rx.truncated),
        ("ctrunc", rx.ctrunc),
        ("empty", rx.empty),
        ("other", rx.other),
    ] {
        x.add(
            "rx_dropped",
            "Datagrams dropped on receive, by reason",
            None,
            with("reason", reason),
            Value::Counter(v),
        );
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Board, ServerReport, openmetrics, test_certificates};

    /// The strict parser, as the integration tests use it (`openmetrics::check` holds the
    /// unit rule it leaves out).
    pub(super) use test_fixtures::openmetrics::strict_parse;

    /// A board of two workers with every family there is, some samples counted.
    fn board() -> Board {
        let log =
            crate::AccessLog::start(Box::new(std::io::sink()), crate::AccessLogFormat::Common)
                .unwrap();
        let board = Board::new(2, Arc::default(), test_certificates(), Some(log));
        for w in 0..2u64 {
            let mut r = ServerReport {
                requests: 10 + w,
                bytes_sent: 1000 * (w + 1),
                ..ServerReport::default()
            };
            r.socket.rx.datagrams = 40;
            r.socket.rx.syscalls = 10;
            r.socket.rx.per_syscall[0] = 5;
            r.socket.rx.per_syscall[2] = 5;
            r.admission.handshakes.count = 3;
            r.admission.handshakes.buckets[1] = 2;
            r.admission.handshakes.buckets[4] = 1;
            board.publish(usize::try_from(w).unwrap(), r);
        }
        board
    }

    /// What Prometheus' and the Python client's parsers refuse, a strict parser refuses too:
    /// each family written once (one HELP and TYPE), its samples together, every worker's
    /// in it.
    #[test]
    fn the_exposition_is_valid_openmetrics() {
        let text = board().render();
        if let Err(e) = strict_parse(&text) {
            panic!("openmetrics-parser refuses the exposition: {e}\n{text}");
        }
        if let Err(e) = openmetrics::check(&text) {
            panic!("{e}\n{text}");
        }
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        assert_eq!(types.len(), 40, "every family, once each: {types:#?}");
        for sample in [
            "neqo_server_requests_total{worker=\"0\"} 10",
            "neqo_server_requests_total{worker=\"1\"} 11",
            "neqo_server_datagrams_total{worker=\"1\",direction=\"tx\"} 0",
            "neqo_server_tls_certificate_replacements_total{result=\"refused\"} 0",
            "neqo_server_handshake_duration_seconds_count{worker=\"1\"} 3",
            "neqo_server_datagrams_per_syscall_bucket{le=\"7.0\",worker=\"0\",direction=\"rx\"} 10",
        ] {
            assert!(text.lines().any(|l| l == sample), "{sample} in\n{text}");
        }
    }

    /// The strict parser the test above relies on refuses what the endpoint wrote when it
    /// registered a family once per label value: a second descriptor, a family interleaved.
    #[test]
    fn the_strict_parser_refuses_a_family_written_twice() {
        let block = |v: &str| {
            format!(
                "# HELP neqo_server_retries Retry packets sent.\n# TYPE neqo_server_retries counter\n\
                 neqo_server_retries_total{{worker=\"{v}\"}} 0\n"
            )
        };
        let gauge = "# HELP neqo_server_g A gauge.\n# TYPE neqo_server_g gauge\nneqo_server_g 0\n";
        let once = format!("{}{gauge}# EOF\n", block("0"));
        let twice = format!("{}{}{gauge}# EOF\n", block("0"), block("1"));
        let interleaved = format!("{}{gauge}{}# EOF\n", block("0"), block("1"));
        strict_parse(&once).expect("valid");
        openmetrics::check(&once).expect("valid");
        for bad in [twice, interleaved] {
            assert!(
                strict_parse(&bad).is_err(),
                "openmetrics-parser took\n{bad}"
            );
            assert!(openmetrics::check(&bad).is_err(), "took\n{bad}");
        }
    }
}
