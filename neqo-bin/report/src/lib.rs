//! The JSON reports one program writes and another reads, as typed structs: what
//! `neqo-client --json` and `neqo-server --json` did ([`ClientReport`], [`ServerReport`]),
//! `neqo-loopback --json`'s rows ([`LoopbackRow`]), what other stacks' clients report of a
//! transfer ([`TransferFigures`]; [`TcpTlsReport`] and [`QuinnLoadReport`] whole, and the msquic server's
//! [`MsquicServerReport`]), and the
//! records of `docs/results` ([`FigureRecord`]).
//!
//! A reader names the type it expects and gets every field typed, or an error naming the file
//! and the field that is missing or malformed, rather than a 0 read from a path that is not
//! there. A figure a report may not have is an `Option` written as `null`, and its key is
//! required all the same (`deserialize_with = "Option::deserialize"`), but for
//! [`TransferFigures`]' figures that some clients never write. The socket counters are [`neqo_udp::Stats`] itself.

mod client;
mod figure;
mod loopback;
mod peers;
mod server;

use std::path::{Path, PathBuf};

pub use client::{
    ClientReport, DriverCounters, EcnCounts, PacingTimer, Percentiles, Spread, TlsCounters,
    TransferFigures,
};
pub use figure::FigureRecord;
pub use loopback::LoopbackRow;
pub use neqo_udp::Stats;
pub use peers::{MsquicServerReport, QuinnLoadReport, TcpTlsReport};
pub use server::{
    AdmissionCounters, DispatchReport, HANDSHAKE_BUCKETS_MS, HandshakeTimes, Http3Counters,
    ServerReport, WorkerSummary,
};

/// Why a report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The text is not JSON of the expected report: serde's message names the missing or
    /// malformed field and where.
    #[error("{}: not {what}: {source}", path.display())]
    Parse {
        path: PathBuf,
        what: &'static str,
        source: serde_json::Error,
    },
}

/// A report written as pretty JSON with a final newline, read back whole.
pub trait Report: serde::Serialize + serde::de::DeserializeOwned {
    /// What it is, for errors: "a neqo-client report".
    const WHAT: &'static str;

    /// The report in `text` (`path` only names it in errors).
    ///
    /// # Errors
    /// [`ReadError::Parse`] when `text` is not this report.
    fn from_json(text: &str, path: &Path) -> Result<Self, ReadError> {
        serde_json::from_str(text).map_err(|source| ReadError::Parse {
            path: path.to_owned(),
            what: Self::WHAT,
            source,
        })
    }

    /// The report in file `path`.
    ///
    /// # Errors
    /// When the file cannot be read, or is not this report.
    fn read(path: &Path) -> Result<Self, ReadError> {
        let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_json(&text, path)
    }

    /// Pretty JSON with a final newline, as every report file is written.
    ///
    /// # Errors
    /// Only if a field cannot be serialized (a map with non-string keys), which none has.
    fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self).map(|t| t + "\n")
    }
}

impl Report for ClientReport {
    const WHAT: &'static str = "a neqo-client report";
}

impl Report for ServerReport {
    const WHAT: &'static str = "a neqo-server report";
}

impl Report for Vec<LoopbackRow> {
    const WHAT: &'static str = "a neqo-loopback report";
}

impl Report for TransferFigures {
    const WHAT: &'static str = "a client's transfer report";
}

impl Report for FigureRecord {
    const WHAT: &'static str = "a figure record";
}

impl Report for TcpTlsReport {
    const WHAT: &'static str = "a tcp-tls report";
}

impl Report for QuinnLoadReport {
    const WHAT: &'static str = "a quinn-load report";
}

impl Report for MsquicServerReport {
    const WHAT: &'static str = "an msquic-peer server report";
}
