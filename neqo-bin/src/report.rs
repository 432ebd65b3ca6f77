//! neqo-udp's socket [`Stats`] in the JSON reports (neqo-udp itself carries no serde).

use neqo_udp::{DirectionStats, Stats};
use serde::Serialize as _;
use serde_json::{Value, json};

fn direction(d: &DirectionStats) -> Value {
    json!({
        "syscalls": d.syscalls,
        "datagrams": d.datagrams,
        "bytes": d.bytes,
        "offload_segments": d.offload_segments,
        "datagrams_per_syscall": d.datagrams_per_syscall(),
        "per_syscall": d.per_syscall,
    })
}

/// Every counter of `s`, as JSON.
#[must_use]
pub fn stats_json(s: &Stats) -> Value {
    let (r, t, e) = (&s.rx_dropped, &s.tx_dropped, &s.events);
    json!({
        "rx": direction(&s.rx),
        "tx": direction(&s.tx),
        "kernel_drops": s.kernel_drops,
        "rx_dropped": {
            "truncated": r.truncated, "ctrunc": r.ctrunc, "empty": r.empty, "other": r.other,
        },
        "tx_dropped": {
            "msg_size": t.msg_size, "no_buffers": t.no_buffers,
            "unreachable": t.unreachable, "other": t.other,
        },
        "events": {
            "interrupted": e.interrupted, "would_block": e.would_block, "retried": e.retried,
            "gso_fallbacks": e.gso_fallbacks, "recv_errors": e.recv_errors,
        },
    })
}

/// `#[serde(serialize_with)]` for a report's `Stats` field.
///
/// # Errors
/// The serializer's.
pub fn serialize_stats<S: serde::Serializer>(s: &Stats, ser: S) -> Result<S::Ok, S::Error> {
    stats_json(s).serialize(ser)
}
