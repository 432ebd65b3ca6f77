//! The reports the binaries write, as [`neqo_report`]'s types: the driver's and the server's
//! counters converted field for field. The destructurings name every field of the types they
//! can name, so that a field added to a counter fails to compile here until the report
//! carries it; the tests check the rest by comparing the JSON of both.

use neqo_report::{
    AdmissionCounters, DispatchReport, DriverCounters, EcnCounts, HandshakeTimes, Http3Counters,
    PacingTimer, ServerReport, TlsCounters, WorkerSummary,
};

/// The driver's counters as reported. The destructuring names every field, so that one added
/// to the driver's counters fails to compile here until the report carries it too.
#[must_use]
pub fn driver_counters(c: neqo_driver::DriverCounters) -> DriverCounters {
    let neqo_driver::DriverCounters {
        accepted,
        refused,
        retries,
        initials_shed,
        stateless_dropped,
        peak_connections,
        drained,
        lost_packets,
        transmits,
        max_transmit_datagrams,
        paced_waits,
        io_wakes,
        timer_wakes,
        pacing_timer,
        tx_ecn,
        rx_ecn,
        path_challenges,
        path_responses,
        max_path_mtu,
        mtu_black_holes,
        unconfirmed,
    } = c;
    DriverCounters {
        accepted,
        refused,
        retries,
        initials_shed,
        stateless_dropped,
        peak_connections,
        drained,
        lost_packets,
        transmits,
        max_transmit_datagrams,
        paced_waits,
        io_wakes,
        timer_wakes,
        pacing_timer: pacing_timer.map(|t| match t {
            neqo_driver::PacingTimer::Precise => PacingTimer::Precise,
            neqo_driver::PacingTimer::Tokio => PacingTimer::Tokio,
        }),
        tx_ecn: ecn_counts(tx_ecn),
        rx_ecn: ecn_counts(rx_ecn),
        path_challenges,
        path_responses,
        max_path_mtu,
        mtu_black_holes,
        unconfirmed,
    }
}

const fn ecn_counts(c: neqo_driver::EcnCounts) -> EcnCounts {
    let neqo_driver::EcnCounts {
        not_ect,
        ect0,
        ect1,
        ce,
    } = c;
    EcnCounts {
        not_ect,
        ect0,
        ect1,
        ce,
    }
}

/// The process's TLS counters as reported.
#[must_use]
pub const fn tls_counters(c: neqo_driver::tls::counters::TlsCounters) -> TlsCounters {
    let neqo_driver::tls::counters::TlsCounters {
        retries_accepted,
        full_handshakes,
        tickets_redeemed,
        zero_rtt_attempted,
        zero_rtt_accepted,
        key_updates,
        key_updates_forced,
    } = c;
    TlsCounters {
        retries_accepted,
        full_handshakes,
        tickets_redeemed,
        zero_rtt_attempted,
        zero_rtt_accepted,
        key_updates,
        key_updates_forced,
    }
}

/// A server's report as written: [`neqo_server_core::ServerReport`] converted.
#[must_use]
pub fn server_report(r: neqo_server_core::ServerReport) -> ServerReport {
    let neqo_server_core::ServerReport {
        requests,
        refused_requests,
        cut_at_shutdown,
        app_panics,
        bytes_sent,
        bytes_received,
        rx_datagrams_per_syscall,
        tx_datagrams_per_syscall,
        kernel_drops,
        lost_packets,
        driver,
        admission,
        receive_budget,
        receive_windows,
        refused_budget,
        refused_source_share,
        open_connections,
        tls,
        socket,
        steering,
        dispatch,
        http3,
        workers,
    } = r;
    ServerReport {
        requests,
        refused_requests,
        cut_at_shutdown,
        app_panics,
        bytes_sent,
        bytes_received,
        rx_datagrams_per_syscall,
        tx_datagrams_per_syscall,
        kernel_drops,
        lost_packets,
        driver: driver_counters(driver),
        admission: admission_counters(admission),
        receive_budget,
        receive_windows,
        refused_budget,
        refused_source_share,
        open_connections,
        tls: tls_counters(tls),
        socket,
        steering,
        dispatch: dispatch.map(dispatch_report),
        http3: Http3Counters {
            responses: http3.responses,
            body_bytes: http3.body_bytes,
            uploaded_bytes: http3.uploaded_bytes,
            error_statuses: http3.error_statuses,
            cancelled: http3.cancelled,
            rejected: http3.rejected,
        },
        workers: workers.into_iter().map(worker_summary).collect(),
    }
}

const fn admission_counters(a: neqo_server_core::AdmissionCounters) -> AdmissionCounters {
    let neqo_server_core::AdmissionCounters {
        half_open,
        peak_half_open,
        retries,
        refused_half_open,
        refused_full,
        handshake_timeouts,
        evicted_half_open,
        handshakes,
    } = a;
    AdmissionCounters {
        half_open,
        peak_half_open,
        retries,
        refused_half_open,
        refused_full,
        handshake_timeouts,
        evicted_half_open,
        handshakes: HandshakeTimes {
            count: handshakes.count,
            sum_us: handshakes.sum_us,
            buckets: handshakes.buckets,
        },
    }
}

fn dispatch_report(d: neqo_server_core::DispatchReport) -> DispatchReport {
    let neqo_server_core::DispatchReport {
        capacity,
        datagrams,
        dropped,
        by_source,
        socket,
    } = d;
    DispatchReport {
        capacity,
        datagrams,
        dropped,
        by_source,
        socket,
    }
}

const fn worker_summary(w: neqo_server_core::WorkerSummary) -> WorkerSummary {
    let neqo_server_core::WorkerSummary {
        accepted,
        peak_connections,
        requests,
        bytes_sent,
        rx_datagrams,
        tx_datagrams,
        kernel_drops,
        dispatch_dropped,
        initials_shed,
    } = w;
    WorkerSummary {
        accepted,
        peak_connections,
        requests,
        bytes_sent,
        rx_datagrams,
        tx_datagrams,
        kernel_drops,
        dispatch_dropped,
        initials_shed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the producers' types would write is what the report's types write: no field
    /// lost, added or renamed in the conversion (the counters whose types the destructurings
    /// cannot name included).
    #[test]
    fn the_conversions_keep_every_key() {
        let mut r = neqo_server_core::ServerReport {
            steering: "channel".to_owned(),
            dispatch: Some(neqo_server_core::DispatchReport {
                datagrams: vec![1, 2],
                ..Default::default()
            }),
            workers: vec![neqo_server_core::WorkerSummary {
                initials_shed: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        r.driver.max_path_mtu = 1452;
        r.driver.pacing_timer = Some(neqo_driver::PacingTimer::Tokio);
        r.admission.handshakes.buckets[2] = 4;
        r.http3.rejected = 5;
        r.tls.key_updates = 6;
        let want = serde_json::to_value(&r).unwrap();
        let got = serde_json::to_value(server_report(r)).unwrap();
        assert_eq!(got, want);
        // And the text, key order included.
        let r = neqo_server_core::ServerReport::default();
        assert_eq!(
            serde_json::to_string(&server_report(r.clone())).unwrap(),
            serde_json::to_string(&r).unwrap()
        );
    }
}
