//! The progress bar: on a terminal, and only once a transfer has run for a second.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

#[derive(Debug)]
pub(super) struct Progress {
    bar: ProgressBar,
    shown: bool,
}

impl Progress {
    /// A bar for `total` bytes (when known), if `wanted` and stderr is a terminal.
    pub(super) fn new(wanted: bool, total: Option<u64>) -> Option<Self> {
        use std::io::IsTerminal as _;
        if !(wanted && std::io::stderr().is_terminal()) {
            return None;
        }
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec}",
        ) {
            bar.set_style(style);
        }
        Some(Self { bar, shown: false })
    }

    /// Moves it to `bytes`, showing it once `started` is a second ago; returns when to move it
    /// again.
    pub(super) fn update(&mut self, bytes: u64, started: Option<Instant>, now: Instant) -> Instant {
        self.bar.set_position(bytes);
        if !self.shown
            && started.is_some_and(|t| now.saturating_duration_since(t) > Duration::from_secs(1))
        {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        now + Duration::from_millis(100)
    }

    pub(super) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
