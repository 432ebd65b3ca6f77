//! The harness finds the package's own binary beside this test and runs it.

use std::{path::Path, process::Command, time::Duration};

use test_fixtures::{locate_binary, run};

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn locates_and_runs_interop() {
    let found = locate_binary("interop").unwrap();
    assert_eq!(
        found.canonicalize().unwrap(),
        Path::new(env!("CARGO_BIN_EXE_interop"))
            .canonicalize()
            .unwrap()
    );
    let m = run(Command::new(&found).arg("--help"), LIMIT).unwrap();
    assert!(m.success(), "{m:?}");
    assert!(m.stdout.starts_with("usage: interop"), "{}", m.stdout);
    let m = run(Command::new(&found).arg("--bogus"), LIMIT).unwrap();
    assert_eq!(m.code, Some(2), "{m:?}");
    assert!(m.stderr.contains("unknown argument"), "{}", m.stderr);
    // An unknown case is refused before anything is built or run, with the known ones.
    let m = run(
        Command::new(&found).args(["--cases", "handshake,bogus"]),
        LIMIT,
    )
    .unwrap();
    assert_eq!(m.code, Some(2), "{m:?}");
    assert!(
        m.stderr.contains("unknown case \"bogus\"") && m.stderr.contains("handshake,transfer,"),
        "{}",
        m.stderr
    );
}
