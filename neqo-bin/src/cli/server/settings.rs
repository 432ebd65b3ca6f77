//! From `neqo-server`'s flags to the server's settings: each checked, refused with its flag
//! named, and turned into what `ServerConfig` takes.

use std::time::Duration;

use anyhow::bail;
use neqo_server_core::{App, Apps, Budget, Files, Limits, MAX_WORKERS, ServerId};

use super::{
    super::{
        MAX_STATS_INTERVAL, MIN_IDLE_TIMEOUT, MIN_STATS_INTERVAL, SUPPORTED_ALPNS, check_alpn,
        check_count, check_positive, check_seconds,
    },
    ServerArgs, check_steering, flagged,
};

/// The default `--stats-interval`, in seconds.
const DEFAULT_STATS_INTERVAL: f64 = 5.0;

/// The default `--workers`: a worker per available core where the kernel steers datagrams to
/// workers (Linux), else one: elsewhere a dispatcher thread would hand them over, which costs
/// more per datagram (measured in `docs/records/server.md`), so more workers are asked for.
fn default_workers() -> usize {
    if cfg!(target_os = "linux") {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS))
    } else {
        1
    }
}

impl ServerArgs {
    /// Refuses settings that cannot work (see [`IoArgs::validate`](super::super::IoArgs::validate),
    /// which this runs last).
    ///
    /// # Errors
    /// The first bad setting, naming its flag.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_values()?;
        self.io.make_paths()
    }

    /// [`validate`](Self::validate) but for the paths it creates or probes.
    pub(super) fn validate_values(&self) -> anyhow::Result<()> {
        if self.alpn.is_empty() {
            bail!(
                "--alpn: none given (supported: {})",
                SUPPORTED_ALPNS.join(", ")
            );
        }
        for a in &self.alpn {
            check_alpn("--alpn", a)?;
        }
        if self.h3_service && !self.alpn.iter().any(|a| a == neqo_protocols::ALPN_H3) {
            bail!("--h3-service: h3 is not among --alpn");
        }
        if let Some(n) = self.max_connections {
            check_positive("--max-connections", n)?;
        }
        check_positive("--retry-half-open", self.retry_half_open)?;
        check_positive("--max-half-open", self.max_half_open)?;
        if self.recv_budget < 1 << 20 {
            bail!(
                "--window-budget {}: must be at least 1M (1048576 bytes)",
                self.recv_budget
            );
        }
        self.io.idle_timeout()?;
        self.limits()?;
        if let Some(s) = self.stats_interval
            && !self.io.stats
        {
            bail!("--stats-interval {s}: only with --stats");
        }
        self.stats_interval()?;
        self.workers()?;
        self.cid_lifetime()?;
        self.server_id()?;
        self.io.validate_values()
    }

    /// `--workers`, or the default.
    pub(super) fn workers(&self) -> anyhow::Result<usize> {
        let Some(n) = self.workers else {
            return Ok(default_workers());
        };
        check_count(
            "--workers",
            n,
            MAX_WORKERS,
            "one connection-ID byte tells them apart",
        )?;
        check_steering(self.steering.into(), n, cfg!(target_os = "linux"))?;
        Ok(n)
    }

    pub(super) fn server_id(&self) -> anyhow::Result<Option<ServerId>> {
        self.server_id
            .as_deref()
            .map(|s| {
                s.parse()
                    .map_err(|e: String| anyhow::anyhow!("--server-id {s}: {e}"))
            })
            .transpose()
    }

    pub(super) fn cid_lifetime(&self) -> anyhow::Result<Option<Duration>> {
        self.cid_lifetime
            .map(|s| check_seconds("--cid-lifetime", s, MIN_STATS_INTERVAL, MAX_STATS_INTERVAL))
            .transpose()
    }

    /// The receive budget; its floor kept for `--max-connections` connections if given.
    pub(super) fn budget(&self) -> Budget {
        Budget {
            bytes: self.recv_budget,
            floor_connections: self
                .max_connections
                .map_or(Budget::default().floor_connections, |n| n as u64),
        }
    }

    /// The admission limits; the handshake timeout within the idle timeout.
    pub(super) fn limits(&self) -> anyhow::Result<Limits> {
        let idle = self.io.idle_timeout()?;
        let handshake_timeout = match self.handshake_timeout {
            Some(secs) => check_seconds(
                "--handshake-timeout",
                secs,
                MIN_IDLE_TIMEOUT,
                idle.as_secs_f64(),
            )?,
            None => Limits::default().handshake_timeout.min(idle),
        };
        Ok(Limits {
            retry: self.retry.into(),
            retry_half_open: self.retry_half_open,
            retry_rate: self.retry_rate,
            max_half_open: self.max_half_open,
            max_connections: self.max_connections,
            handshake_timeout,
        })
    }

    pub(super) fn stats_interval(&self) -> anyhow::Result<Duration> {
        check_seconds(
            "--stats-interval",
            self.stats_interval.unwrap_or(DEFAULT_STATS_INTERVAL),
            MIN_STATS_INTERVAL,
            MAX_STATS_INTERVAL,
        )
    }

    /// Whether `/N` is answered: without --root always, with it only with --generate.
    pub(super) const fn generates(&self) -> bool {
        self.root.is_none() || self.generate
    }

    /// With --h3-service, h3 answered by the `Files` service.
    pub(super) fn apps(&self) -> anyhow::Result<Apps> {
        let mut apps = Apps::default();
        if self.h3_service {
            let files = match &self.root {
                Some(root) => Files::new(root).map_err(flagged)?,
                None => Files::generated(),
            };
            apps.insert(
                neqo_protocols::ALPN_H3,
                App::http3(files.generating(self.generates())),
            );
        }
        Ok(apps)
    }

    /// `--alpn` without repeats, in the order given.
    pub(in crate::cli) fn alpns(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for a in &self.alpn {
            if !v.contains(a) {
                v.push(a.clone());
            }
        }
        v
    }
}
