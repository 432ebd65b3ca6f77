//! Where the workspace's binaries are, and building them.

use std::{
    ffi::OsStr,
    io,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use neqo_process::run;

/// `cargo build --release` arguments for `neqo-server`, `neqo-client` and `neqo-loopback`.
pub const BUILD_NEQO_BINS: &[&str] = &["-p", "neqo-bin", "--bins"];

/// `cargo build --release` arguments for `msquic-peer`: it exists only with its `msquic`
/// feature.
pub const BUILD_MSQUIC_PEER: &[&str] = &[
    "-p",
    "msquic-peer",
    "--features",
    "msquic",
    "--bin",
    "msquic-peer",
];

/// `cargo build --release` arguments for `neqo-relay`, the impairment relay.
pub const BUILD_RELAY: &[&str] = &["-p", "neqo-relay", "--bin", "neqo-relay"];

/// How long a build may take: msquic's first build takes minutes on two cores.
const BUILD_LIMIT: Duration = Duration::from_secs(60 * 60);

/// A binary built by cargo into the same target directory as the running executable (a
/// test, benchmark or binary): `$CARGO_BIN_EXE_<name>` if set, else beside the executable,
/// or beside its `deps/` directory.
///
/// # Errors
/// `NotFound` when none of those exists.
pub fn locate_binary(name: &str) -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")).map(PathBuf::from)
        && p.is_file()
    {
        return Ok(p);
    }
    let exe = std::env::current_exe()?;
    let mut dirs = Vec::new();
    if let Some(dir) = exe.parent() {
        dirs.push(dir.to_path_buf());
        if dir.file_name() == Some(OsStr::new("deps"))
            && let Some(parent) = dir.parent()
        {
            dirs.push(parent.to_path_buf());
        }
    }
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    dirs.iter()
        .map(|d| d.join(&file))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{file} not found in {dirs:?}: build it first"),
            )
        })
}

/// Where `cargo build --release` puts binary `name`: `target/release/`, found from the
/// running executable's profile directory (`target/<profile>/`, or its `deps/`).
#[must_use]
pub fn release_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut profile_dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if profile_dir.ends_with("deps") {
        profile_dir.pop();
    }
    let target = profile_dir.parent().unwrap_or(&profile_dir);
    target
        .join("release")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// A `cargo` command: the cargo that runs us (`$CARGO`), else the one on the path, without
/// the variables cargo sets for the package it runs (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`,
/// ...). Cargo fingerprints a build script on every variable it reads, as the building
/// cargo sees it: ring's reads `CARGO_MANIFEST_DIR`, so a nested build that inherited ours
/// rebuilt ring and all above it, and the next outer build rebuilt them back (about 2 min
/// per soak in a CI run).
#[must_use]
pub fn cargo_command() -> Command {
    const SET_FOR_A_RUN: [&str; 7] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_MANIFEST_LINKS",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "OUT_DIR",
    ];
    const PREFIXES: [&str; 2] = ["CARGO_PKG_", "CARGO_BIN_"];
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if SET_FOR_A_RUN.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p)) {
            c.env_remove(name);
        }
    }
    c
}

/// Runs `cargo build --release --quiet ARGS` with [`cargo_command`].
///
/// # Errors
/// The first error lines of a failed build.
pub fn cargo_build(args: &[&str]) -> Result<(), String> {
    let what = format!("`cargo build --release {}`", args.join(" "));
    let m = run(
        cargo_command()
            .args(["build", "--release", "--quiet"])
            .args(args),
        BUILD_LIMIT,
    )
    .map_err(|e| format!("{what}: {e}"))?;
    if m.success() {
        return Ok(());
    }
    let first: Vec<&str> = m
        .stderr
        .lines()
        .filter(|l| l.contains("error"))
        .take(3)
        .collect();
    Err(format!(
        "{what} failed ({}): {}",
        m.ending(),
        first.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_not_found() {
        let e = locate_binary("no-such-binary-here").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("no-such-binary-here"), "{e}");
    }

    #[test]
    fn release_binaries_live_in_target_release() {
        let p = release_binary("interop");
        let dir = p.parent().unwrap();
        assert!(dir.ends_with("release"), "{}", p.display());
        let exe = std::env::current_exe().unwrap();
        assert!(
            exe.starts_with(dir.parent().unwrap()),
            "{} beside {}",
            p.display(),
            exe.display()
        );
    }
}
