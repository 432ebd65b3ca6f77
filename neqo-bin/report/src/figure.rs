//! A record of `docs/results`: what a figure's command printed, and where it ran.

/// What `figures refresh` records of one figure, in `docs/results/NAME.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FigureRecord {
    /// The commit measured, short, with `+changes` when the tree had changes.
    pub commit: String,
    /// The day it ran, `YYYY-MM-DD` (UTC).
    pub date: String,
    /// The kernel, e.g. `Linux 6.18.44`.
    pub kernel: String,
    /// The CPU's model name.
    pub cpu: String,
    /// Cores available to the run (client and server share them).
    pub cores: u64,
    /// The figure's name: the file's stem.
    pub name: String,
    /// The command that measured it.
    pub command: String,
    /// What the command printed on stdout, without leading or trailing newlines.
    pub output: String,
}
