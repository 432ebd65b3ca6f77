//! Checks of command-line settings: each refuses, with one line naming the flag, a value
//! that cannot work. Shared by `neqo-server`, `neqo-client` and `neqo-loopback`.

use std::{path::Path, time::Duration};

use anyhow::{Context as _, bail};
use neqo_protocols::{ALPN_H3, ALPN_HQ, ALPN_PERF};
use neqo_udp::MAX_BATCH_SIZE;

use super::os::writable;

/// The ALPNs both binaries speak.
pub const SUPPORTED_ALPNS: [&str; 3] = [ALPN_HQ, ALPN_PERF, ALPN_H3];

/// The shortest `--idle-timeout`, in seconds: QUIC counts it in whole milliseconds, and 0
/// would switch it off (a dead peer's connection would then stay forever).
pub const MIN_IDLE_TIMEOUT: f64 = 0.001;

/// The longest `--idle-timeout`, in seconds: a day. QUIC allows 2^62-1 ms, but anything this
/// long is a mistake.
pub const MAX_IDLE_TIMEOUT: f64 = 86_400.0;

/// The shortest `--stats-interval`, in seconds: shorter is a busy timer, not statistics.
pub const MIN_STATS_INTERVAL: f64 = 0.1;

/// The longest `--stats-interval`, in seconds: a day.
pub const MAX_STATS_INTERVAL: f64 = 86_400.0;

/// Most requests one client connection makes (`-n` times the URLs): each is held in memory.
pub const MAX_REQUESTS: usize = 1_000_000;

/// Most bytes one stream can carry: QUIC's largest stream offset, 2^62-1.
pub const MAX_STREAM_BYTES: u64 = (1 << 62) - 1;

/// A hostile value shown in a message: quoted and escaped, and cut short when long.
fn shown(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{:?}... ({} bytes)", &s[..i], s.len()),
        None => format!("{s:?}"),
    }
}

/// `FLAG VALUE` in seconds, checked to lie in `min..=max` (finite, not negative).
///
/// # Errors
/// Outside the range, NaN or infinite.
pub fn check_seconds(flag: &str, value: f64, min: f64, max: f64) -> anyhow::Result<Duration> {
    if !(value.is_finite() && (min..=max).contains(&value)) {
        bail!("{flag} {value}: must be between {min} and {max} seconds");
    }
    Ok(Duration::from_secs_f64(value))
}

/// `--batch-size N`: 1 to [`MAX_BATCH_SIZE`] (the socket would clamp anything else).
///
/// # Errors
/// Outside that range.
pub fn check_batch_size(n: usize) -> anyhow::Result<()> {
    if !(1..=MAX_BATCH_SIZE).contains(&n) {
        bail!("--batch-size {n}: must be between 1 and {MAX_BATCH_SIZE}");
    }
    Ok(())
}

/// `FLAG ALPN`: one of [`SUPPORTED_ALPNS`].
///
/// # Errors
/// Any other (empty, unknown, longer than an ALPN id can be).
pub fn check_alpn(flag: &str, alpn: &str) -> anyhow::Result<()> {
    if !SUPPORTED_ALPNS.contains(&alpn) {
        bail!(
            "{flag} {}: unsupported ALPN (supported: {})",
            shown(alpn),
            SUPPORTED_ALPNS.join(", ")
        );
    }
    Ok(())
}

/// `FLAG N` for a count that must be between 1 and `max`.
pub(super) fn check_count(flag: &str, n: usize, max: usize, why: &str) -> anyhow::Result<()> {
    if !(1..=max).contains(&n) {
        bail!("{flag} {n}: must be between 1 and {max} ({why})");
    }
    Ok(())
}

/// `FLAG N` for a count that must be at least 1.
pub(super) fn check_positive(flag: &str, n: usize) -> anyhow::Result<()> {
    if n == 0 {
        bail!("{flag} 0: must be at least 1");
    }
    Ok(())
}

/// `FLAG BYTES` for a size one stream must carry: at most [`MAX_STREAM_BYTES`].
///
/// # Errors
/// Larger.
pub fn check_stream_bytes(flag: &str, n: u64) -> anyhow::Result<()> {
    if n > MAX_STREAM_BYTES {
        bail!("{flag} {n}: must be at most {MAX_STREAM_BYTES} bytes (2^62-1, QUIC's limit)");
    }
    Ok(())
}

/// `FLAG DIR`: creates the directory (and its parents) and checks that a file can be created
/// in it, leaving nothing behind but the directory.
///
/// # Errors
/// It cannot be created, is not a directory, or is not writable.
pub fn check_writable_dir(flag: &str, dir: &Path) -> anyhow::Result<()> {
    let shown = dir.display();
    std::fs::create_dir_all(dir).with_context(|| format!("{flag} {shown}: cannot create it"))?;
    if !dir.is_dir() {
        bail!("{flag} {shown}: not a directory");
    }
    let probe = dir.join(format!(".neqo-write-check-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .with_context(|| format!("{flag} {shown}: cannot write in it"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `FLAG FILE`: checks that the file can be written (it is only written at exit). An existing
/// file is opened without truncating it; a new one is created and removed again, so a run
/// that fails leaves no empty file.
///
/// # Errors
/// A directory, or a file that cannot be opened for writing or created.
pub fn check_writable_file(flag: &str, path: &Path) -> anyhow::Result<()> {
    let shown = path.display();
    if path.is_dir() {
        bail!("{flag} {shown}: is a directory");
    }
    let existing = std::fs::OpenOptions::new().write(true).open(path);
    match existing {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .with_context(|| format!("{flag} {shown}: cannot create it"))?;
            let _ = std::fs::remove_file(path);
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("{flag} {shown}: cannot write it")),
    }
}

/// `FLAG DIR` as [`check_writable_dir`] would find it, creating nothing: a directory this
/// user may write in, or one that could be made (its nearest existing ancestor a directory
/// this user may write in), which the note returned then says.
///
/// # Errors
/// Not a directory, not writable, or nowhere to make it.
pub(super) fn check_dir_could_be_written(flag: &str, dir: &Path) -> anyhow::Result<Option<String>> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {
            if !writable(dir).with_context(|| format!("{flag} {shown}"))? {
                bail!("{flag} {shown}: cannot write in it");
            }
            Ok(None)
        }
        Ok(_) => bail!("{flag} {shown}: not a directory"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let Some(base) = dir.ancestors().skip(1).map(or_here).find(|a| a.exists()) else {
                bail!("{flag} {shown}: cannot create it: nothing above it exists");
            };
            if !base.is_dir() {
                bail!(
                    "{flag} {shown}: cannot create it: {} is not a directory",
                    base.display()
                );
            }
            if !writable(base).with_context(|| format!("{flag} {shown}"))? {
                bail!(
                    "{flag} {shown}: cannot create it: cannot write in {}",
                    base.display()
                );
            }
            Ok(Some(format!("{flag} {shown} would be created")))
        }
        Err(e) => Err(e).with_context(|| format!("{flag} {shown}: cannot look it up")),
    }
}

/// `FLAG FILE` as an open for writing (or appending) would find it, creating nothing: a file
/// this user may write, or one its directory lets this user create, which the note returned
/// then says.
///
/// # Errors
/// A directory, a file that may not be written, or no directory to create it in.
pub(super) fn check_file_could_be_written(
    flag: &str,
    path: &Path,
) -> anyhow::Result<Option<String>> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => bail!("{flag} {shown}: is a directory"),
        Ok(_) => {
            if !writable(path).with_context(|| format!("{flag} {shown}"))? {
                bail!("{flag} {shown}: cannot write it");
            }
            Ok(None)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = or_here(path.parent().unwrap_or(Path::new("")));
            if !parent.is_dir() {
                bail!(
                    "{flag} {shown}: no directory {} to write it in",
                    parent.display()
                );
            }
            if !writable(parent).with_context(|| format!("{flag} {shown}"))? {
                bail!(
                    "{flag} {shown}: cannot create it: cannot write in {}",
                    parent.display()
                );
            }
            Ok(Some(format!("{flag} {shown} would be created")))
        }
        Err(e) => Err(e).with_context(|| format!("{flag} {shown}: cannot look it up")),
    }
}

/// `.` for the empty path a bare name's parent is.
fn or_here(path: &Path) -> &Path {
    if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Refused, with a message that starts with `flag`.
    #[track_caller]
    pub(in crate::cli) fn refused(r: anyhow::Result<()>, flag: &str) {
        let e = format!("{:#}", r.expect_err(flag));
        assert!(e.starts_with(flag), "{flag}: {e}");
    }

    /// A fresh path under this process's own temporary directory.
    pub(in crate::cli) fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("neqo-bin-cli-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let _ = std::fs::remove_dir_all(&path);
        let _ = std::fs::remove_file(&path);
        path
    }

    #[test]
    fn seconds_bounds() {
        let f = "--idle-timeout";
        let (min, max) = (MIN_IDLE_TIMEOUT, MAX_IDLE_TIMEOUT);
        assert_eq!(
            check_seconds(f, 0.001, min, max).unwrap(),
            Duration::from_millis(1)
        );
        assert_eq!(
            check_seconds(f, 86_400.0, min, max).unwrap(),
            Duration::from_secs(86_400)
        );
        for bad in [
            0.0,
            -0.0,
            0.000_9,
            86_400.001,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            99_999_999_999_999.0,
        ] {
            let e = check_seconds(f, bad, min, max).unwrap_err().to_string();
            assert!(e.starts_with("--idle-timeout "), "{bad}: {e}");
            assert!(e.contains("between 0.001 and 86400 seconds"), "{e}");
        }
    }

    #[test]
    fn batch_size_bounds() {
        assert!(check_batch_size(1).is_ok());
        assert!(check_batch_size(MAX_BATCH_SIZE).is_ok());
        refused(check_batch_size(0), "--batch-size 0");
        refused(check_batch_size(MAX_BATCH_SIZE + 1), "--batch-size 129");
    }

    #[test]
    fn alpns() {
        assert!(check_alpn("--alpn", "hq-interop").is_ok());
        assert!(check_alpn("--alpn", "perf").is_ok());
        assert!(check_alpn("--alpn", "h3").is_ok());
        let long = "a".repeat(300);
        for bad in ["", "h2", "HQ-INTEROP", "perf ", &long] {
            let e = check_alpn("--alpn", bad).unwrap_err().to_string();
            assert!(e.starts_with("--alpn "), "{e}");
            assert!(e.contains("supported: hq-interop, perf, h3"), "{e}");
            assert!(e.len() < 150, "long values are cut short: {e}");
        }
    }

    #[test]
    fn stream_bytes_bounds() {
        assert!(check_stream_bytes("--download", MAX_STREAM_BYTES).is_ok());
        refused(
            check_stream_bytes("--download", MAX_STREAM_BYTES + 1),
            "--download 4611686018427387904",
        );
    }

    #[test]
    fn writable_dir() {
        let dir = tmp("qlog").join("a/b");
        check_writable_dir("--qlog-dir", &dir).unwrap();
        assert!(dir.is_dir());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no probe left");
        check_writable_dir("--qlog-dir", &dir).unwrap();
        let file = tmp("regular");
        std::fs::write(&file, b"x").unwrap();
        refused(check_writable_dir("--qlog-dir", &file), "--qlog-dir ");
        refused(
            check_writable_dir("--qlog-dir", &file.join("below")),
            "--qlog-dir ",
        );
        let e = check_writable_dir("--output-dir", &file.join("below")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot create it"), "{e:#}");
        let _ = std::fs::remove_dir_all(tmp("qlog"));
        let _ = std::fs::remove_file(file);
    }

    #[test]
    fn writable_file() {
        let new = tmp("report.json");
        check_writable_file("--json", &new).unwrap();
        assert!(!new.exists(), "no empty file left behind");
        std::fs::write(&new, b"old").unwrap();
        check_writable_file("--json", &new).unwrap();
        assert_eq!(std::fs::read(&new).unwrap(), b"old", "not truncated");
        refused(
            check_writable_file("--json", new.parent().unwrap()),
            "--json ",
        );
        refused(
            check_writable_file("--json", &new.join("x.json")),
            "--json ",
        );
        refused(
            check_writable_file("--json", &tmp("missing").join("x.json")),
            "--json ",
        );
        let _ = std::fs::remove_file(new);
    }
}
