//! What a server did: [`ServerReport`].

use neqo_driver::{Driver, DriverCounters};

use super::{AdmissionCounters, DispatchReport, ledger::Ledger};

/// One worker's share of the work.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WorkerSummary {
    /// Connections it accepted.
    pub accepted: u64,
    /// The most it held at once.
    pub peak_connections: u64,
    /// Requests it answered completely.
    pub requests: u64,
    /// Response bytes it wrote.
    pub bytes_sent: u64,
    /// Datagrams that reached it (from its sockets, or from the dispatcher).
    pub rx_datagrams: u64,
    /// Datagrams its sockets sent.
    pub tx_datagrams: u64,
    /// Kernel drops on its sockets (0 with channel steering: its socket is the dispatcher's,
    /// whose drops are in [`ServerReport::dispatch`]).
    pub kernel_drops: u64,
    /// Datagrams for it the dispatcher dropped because its channel was full (channel steering).
    pub dispatch_dropped: u64,
    /// Initials it shed unread while behind (`initial_shed`).
    pub initials_shed: u64,
}

/// What a server did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ServerReport {
    /// Requests answered completely (the response handed to the transport whole).
    pub requests: u64,
    /// Requests refused or reset (malformed, bad path, escape, unknown or unreadable file).
    pub refused_requests: u64,
    /// Requests whose response was not acknowledged when the shutdown's drain period ended
    /// (some perhaps handed to the transport whole, and so in `requests` too): cut, their
    /// streams reset where the protocol allows, so that no client takes one for unprocessed.
    pub cut_at_shutdown: u64,
    /// Panics caught in your applications' code (a service's call, future or response body;
    /// a raw-QUIC session): each cost its request (answered 500, or its stream reset once the
    /// head was out) or its connection (closed), and the worker served on.
    pub app_panics: u64,
    /// Response bytes written.
    pub bytes_sent: u64,
    /// Request bytes read (perf uploads included).
    pub bytes_received: u64,
    /// Datagrams per receive syscall.
    pub rx_datagrams_per_syscall: f64,
    /// Datagrams per send syscall.
    pub tx_datagrams_per_syscall: f64,
    /// Kernel drops on the server's sockets.
    pub kernel_drops: u64,
    /// Packets the server's connections declared lost (drained ones and live ones at exit).
    pub lost_packets: u64,
    /// Driver counters (connections accepted and refused, Retries sent, transmits, pacing
    /// waits).
    pub driver: DriverCounters,
    /// Half-open connections, refusals by reason, handshake timeouts.
    pub admission: AdmissionCounters,
    /// The receive budget, bytes.
    pub receive_budget: u64,
    /// The receive windows granted now, summed: the most received data the open connections
    /// could make the server hold.
    pub receive_windows: u64,
    /// Connections refused because the budget had no window left for them.
    pub refused_budget: u64,
    /// Connections refused because half the budget was granted and their source (an IPv4
    /// address, an IPv6 /64) held its share of it already.
    pub refused_source_share: u64,
    /// Connections open (accepted, not yet drained) when the report was made. The server's
    /// per-connection state lives no longer than the driver's connection, so 0 means none.
    pub open_connections: u64,
    /// What the handshakes did: tickets redeemed (resumptions), 0-RTT accepted, key
    /// updates.
    pub tls: neqo_driver::tls::counters::TlsCounters,
    /// Socket statistics.
    pub socket: neqo_udp::Stats,
    /// How datagrams reached the workers.
    pub steering: String,
    /// With channel steering, what the dispatcher did: datagrams handed to each worker and
    /// dropped on its full channel, and the receive side of the listening sockets (their
    /// receive syscalls and kernel drops, which [`socket`](Self::socket) then reports).
    pub dispatch: Option<DispatchReport>,
    /// The HTTP/3 requests, the built-in server's and your services' (counted in the totals
    /// above too).
    pub http3: super::http3::Http3Counters,
    /// Each worker's share, in worker order (the rest of the report adds them up).
    pub workers: Vec<WorkerSummary>,
}

impl ServerReport {
    /// Adds what HTTP/3 requests did to `http3` and to the totals.
    pub(crate) fn credit_http3(&mut self, new: &super::http3::Http3Counters) {
        self.requests += new.responses;
        self.refused_requests += new.error_statuses;
        self.bytes_sent += new.body_bytes;
        self.bytes_received += new.uploaded_bytes;
        self.http3.add(new);
    }

    /// One line for humans.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut workers = String::new();
        if self.workers.len() > 1 {
            workers.push_str(&format!("\n{}:", self.steering));
            for (i, w) in self.workers.iter().enumerate() {
                workers.push_str(&format!(
                    " [{i}] accepted {} requests {} sent {} B rx {} tx {} drops {} dispatch drops {} Initials shed {}",
                    w.accepted,
                    w.requests,
                    w.bytes_sent,
                    w.rx_datagrams,
                    w.tx_datagrams,
                    w.kernel_drops,
                    w.dispatch_dropped,
                    w.initials_shed
                ));
            }
        }
        if let Some(d) = &self.dispatch {
            workers.push_str(&format!(
                "\ndispatch (channels of {} datagrams): handed {:?} dropped {:?} by source {} kernel drops {}",
                d.capacity, d.datagrams, d.dropped, d.by_source, d.socket.kernel_drops
            ));
        }
        format!(
            "receive windows {} of {} B (refused {}, source share {}), connections accepted {} refused {} (half-open limit {}) retries {} stateless replies dropped {} Initials shed {} half-open {} (peak {}, timed out {}, evicted {}) open-at-exit {}, requests {} refused {}, sent {} B, received {} B, lost packets {}{}{}\n{}{workers}",
            self.receive_windows,
            self.receive_budget,
            self.refused_budget,
            self.refused_source_share,
            self.driver.accepted,
            self.driver.refused,
            self.admission.refused_half_open,
            self.driver.retries,
            self.driver.stateless_dropped,
            self.driver.initials_shed,
            self.admission.half_open,
            self.admission.peak_half_open,
            self.admission.handshake_timeouts,
            self.admission.evicted_half_open,
            self.driver.accepted.saturating_sub(self.driver.drained),
            self.requests,
            self.refused_requests,
            self.bytes_sent,
            self.bytes_received,
            self.lost_packets,
            self.cut_summary(),
            self.http3_summary(),
            self.socket
        )
    }

    /// `, cut at shutdown N` when the shutdown's drain period ended with requests under way;
    /// `, application panics N` when your code panicked.
    fn cut_summary(&self) -> String {
        let mut s = String::new();
        if self.cut_at_shutdown > 0 {
            s.push_str(&format!(", cut at shutdown {}", self.cut_at_shutdown));
        }
        if self.app_panics > 0 {
            s.push_str(&format!(", application panics {}", self.app_panics));
        }
        s
    }

    /// `, HTTP/3 ...` when HTTP/3 requests came: their share of the requests, by outcome.
    fn http3_summary(&self) -> String {
        let h = &self.http3;
        if h == &super::http3::Http3Counters::default() {
            return String::new();
        }
        format!(
            ", HTTP/3 responses {} error statuses {} cancelled {} rejected {} body {} B",
            h.responses, h.error_statuses, h.cancelled, h.rejected, h.body_bytes
        )
    }

    /// The server's report from its workers': their counts added up, the peaks over all
    /// workers at once from `ledger`. With a dispatcher's report, the receive side of the
    /// socket counters is the dispatcher's (the workers' is their channels').
    pub(super) fn merged(
        workers: Vec<Self>,
        ledger: &Ledger,
        steering: &str,
        dispatch: Option<DispatchReport>,
    ) -> Self {
        let mut all = Self::default();
        for w in &workers {
            all.requests += w.requests;
            all.refused_requests += w.refused_requests;
            all.cut_at_shutdown += w.cut_at_shutdown;
            all.app_panics += w.app_panics;
            all.bytes_sent += w.bytes_sent;
            all.bytes_received += w.bytes_received;
            all.lost_packets += w.lost_packets;
            all.driver.add(&w.driver);
            all.admission.add(&w.admission);
            all.receive_budget += w.receive_budget;
            all.receive_windows += w.receive_windows;
            all.refused_budget += w.refused_budget;
            all.refused_source_share += w.refused_source_share;
            all.open_connections += w.open_connections;
            all.http3.add(&w.http3);
            // Process-wide already: the same in every worker's report.
            all.tls = w.tls;
            all.socket.accumulate(&w.socket);
        }
        if let Some(d) = &dispatch {
            all.socket.rx = d.socket.rx;
            all.socket.kernel_drops = d.socket.kernel_drops;
            all.socket.rx_dropped = d.socket.rx_dropped;
            all.socket.events.add(&d.socket.events);
        }
        all.driver.peak_connections = ledger.peak_open() as u64;
        all.admission.peak_half_open = ledger.peak_half_open();
        all.rx_datagrams_per_syscall = all.socket.rx.datagrams_per_syscall();
        all.tx_datagrams_per_syscall = all.socket.tx.datagrams_per_syscall();
        all.kernel_drops = all.socket.kernel_drops;
        all.steering = steering.to_owned();
        all.workers = workers
            .iter()
            .enumerate()
            .map(|(i, w)| WorkerSummary {
                accepted: w.driver.accepted,
                peak_connections: w.driver.peak_connections,
                requests: w.requests,
                bytes_sent: w.bytes_sent,
                rx_datagrams: w.socket.rx.datagrams,
                tx_datagrams: w.socket.tx.datagrams,
                kernel_drops: w.socket.kernel_drops,
                dispatch_dropped: dispatch
                    .as_ref()
                    .and_then(|d| d.dropped.get(i).copied())
                    .unwrap_or(0),
                initials_shed: w.driver.initials_shed,
            })
            .collect();
        all.dispatch = dispatch;
        all
    }

    /// Adds the driver's and the sockets' counters; `live_lost` are the packets lost by
    /// connections still open.
    pub(super) fn fill(&mut self, driver: &Driver, live_lost: u64) {
        let s = driver.socket_stats();
        self.socket = s;
        self.rx_datagrams_per_syscall = s.rx.datagrams_per_syscall();
        self.tx_datagrams_per_syscall = s.tx.datagrams_per_syscall();
        self.kernel_drops = s.kernel_drops;
        self.driver = driver.counters();
        self.tls = neqo_driver::tls::counters::snapshot();
        self.open_connections = driver.open_connections() as u64;
        self.lost_packets = self.driver.lost_packets + live_lost;
    }
}
