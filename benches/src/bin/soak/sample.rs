//! What the soak watches each second: the server process as the kernel sees it (`/proc`) and
//! as it reports itself (its `--metrics` endpoint).

use std::{
    collections::HashMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

/// One sample.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since the soak started.
    pub t: f64,
    /// `idle`, `load` or `drain`.
    pub phase: &'static str,
    pub rss_kib: u64,
    /// User + system CPU seconds so far.
    pub cpu_s: f64,
    pub fds: u64,
    pub threads: u64,
    pub open: u64,
    pub half_open: u64,
    /// Receive windows granted, all workers.
    pub windows: u64,
    pub kernel_drops: u64,
    /// Initials shed unread by a worker behind its socket.
    pub initials_shed: u64,
    pub requests: u64,
    pub rx_datagrams: u64,
    pub rx_syscalls: u64,
    pub tx_datagrams: u64,
    pub tx_syscalls: u64,
    /// Panics caught in the server's applications' code (a soak wants none).
    pub app_panics: u64,
    /// The metrics endpoint answered.
    pub scraped: bool,
}

impl Sample {
    pub const CSV_HEADER: &'static str = "t,phase,rss_kib,cpu_s,fds,threads,open,half_open,windows_bytes,kernel_drops,initials_shed,requests,rx_datagrams,rx_syscalls,tx_datagrams,tx_syscalls";

    pub fn csv(&self) -> String {
        format!(
            "{:.1},{},{},{:.2},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.t,
            self.phase,
            self.rss_kib,
            self.cpu_s,
            self.fds,
            self.threads,
            self.open,
            self.half_open,
            self.windows,
            self.kernel_drops,
            self.initials_shed,
            self.requests,
            self.rx_datagrams,
            self.rx_syscalls,
            self.tx_datagrams,
            self.tx_syscalls
        )
    }
}

/// Samples process `pid` and its metrics at `metrics`.
pub fn take(pid: u32, metrics: SocketAddr, t: f64, phase: &'static str) -> Sample {
    let mut s = Sample {
        t,
        phase,
        ..Sample::default()
    };
    s.rss_kib = benches::procfs::rss_kib(pid);
    s.threads = benches::procfs::threads(pid);
    s.cpu_s = benches::procfs::cpu_seconds(pid);
    s.fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    if let Some(m) = scrape(metrics) {
        s.scraped = true;
        let get = |name: &str| m.get(name).copied().unwrap_or(0.0) as u64;
        s.open = get("neqo_server_connections_open");
        s.half_open = get("neqo_server_connections_half_open");
        s.windows = get("neqo_server_receive_windows_bytes");
        s.kernel_drops = get("neqo_server_kernel_drops_total");
        s.initials_shed = get("neqo_server_initials_shed_total");
        s.requests = get("neqo_server_requests_total");
        s.rx_datagrams = get("neqo_server_datagrams_total{rx}");
        s.rx_syscalls = get("neqo_server_syscalls_total{rx}");
        s.tx_datagrams = get("neqo_server_datagrams_total{tx}");
        s.tx_syscalls = get("neqo_server_syscalls_total{tx}");
        s.app_panics = get("neqo_server_app_panics_total");
    }
    s
}

/// The metrics endpoint's values, summed over workers; those with a `direction` label keyed
/// `name{rx}` and `name{tx}`. Histogram buckets are left out.
fn scrape(addr: SocketAddr) -> Option<HashMap<String, f64>> {
    let timeout = Duration::from_secs(1);
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: soak\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return None;
    }
    let mut values = HashMap::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = key.split_once('{').unwrap_or((key, ""));
        if labels.contains("le=") {
            continue;
        }
        let key = if labels.contains("direction=\"rx\"") {
            format!("{name}{{rx}}")
        } else if labels.contains("direction=\"tx\"") {
            format!("{name}{{tx}}")
        } else {
            name.to_owned()
        };
        *values.entry(key).or_insert(0.0) += v;
    }
    Some(values)
}

/// Least-squares slope of `y` over `x`, per unit of `x`; `None` with fewer than 3 points.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    (den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slopes_of_lines_and_noise() {
        let line: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), 3.0 * f64::from(i) + 7.0))
            .collect();
        assert!((slope(&line).unwrap() - 3.0).abs() < 1e-9);
        let flat: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), if i % 2 == 0 { 5.0 } else { 6.0 }))
            .collect();
        assert!(slope(&flat).unwrap().abs() < 0.1);
        assert_eq!(slope(&line[..2]), None);
    }
}
