//! The figures the docs publish, each produced by the command that measures it.
//!
//! - `figures refresh [NAME...]` runs each figure's command (all of them without names) and
//!   records what it printed, with the commit, date, kernel and CPU, in
//!   `docs/results/NAME.json`; then renders.
//! - `figures render` writes every recorded figure into the markdown blocks that show it:
//!   `<!-- figure: NAME -->` ... `<!-- /figure -->` in README.md and docs/**/*.md, each followed
//!   by the command, commit and date it came from and the record's path.
//! - `figures check` fails when a block differs from its record, or names no known figure
//!   (a table edited by hand, or a record without its render, shows). The workspace's tests
//!   run the same check.
//! - `figures list`: the figures and their commands.
//!
//! Run from the workspace root: `cargo run --release -p benches --bin figures -- refresh`.

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
    time::{SystemTime, UNIX_EPOCH},
};

use clap::{Parser, Subcommand, builder::PossibleValuesParser};
use neqo_report::{FigureRecord, ReadError, Report as _};

#[derive(Debug, Parser)]
#[command(
    name = "figures",
    about = "The figures the docs publish, each produced by the command that measures it"
)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The figures and their commands.
    List,
    /// Run each figure's command and record what it printed in docs/results/NAME.json, then
    /// render.
    Refresh {
        /// The figures to measure (default: all of them).
        #[arg(value_name = "NAME",
              value_parser = PossibleValuesParser::new(FIGURES.iter().map(|f| f.name)))]
        names: Vec<String>,
    },
    /// Write every recorded figure into the markdown blocks that show it.
    Render,
    /// Fail when a block differs from its record, or names no known figure.
    Check,
}

/// One published figure.
struct Figure {
    name: &'static str,
    about: &'static str,
    /// `cargo` arguments that measure it; what they print on stdout is the figure.
    cargo: &'static [&'static str],
    /// Its output is markdown already (a table); otherwise it is shown as a text block.
    markdown: bool,
}

const FIGURES: &[Figure] = &[
    Figure {
        name: "loopback",
        about: "the main job: 1 GiB over loopback, batched against single I/O",
        cargo: &[
            "run",
            "--release",
            "-p",
            "neqo-bin",
            "--bin",
            "neqo-loopback",
        ],
        markdown: false,
    },
    Figure {
        name: "compare",
        about: "one connection's download: neqo, the msquic peer and TCP+TLS side by side",
        cargo: &[
            "run",
            "--release",
            "-p",
            "benches",
            "--bin",
            "compare",
            "--",
            "--runs",
            "3",
        ],
        markdown: true,
    },
    Figure {
        name: "curve",
        about: "many connections: neqo-server with 1 and 2 workers against the msquic server",
        cargo: &[
            "run",
            "--release",
            "-p",
            "benches",
            "--bin",
            "compare",
            "--",
            "curve",
            "--workers",
            "1,2",
            "--concurrency",
            "1,128,1000",
            "--runs",
            "3",
        ],
        markdown: true,
    },
    Figure {
        name: "stacks",
        about: "clients of other stacks (quinn's, msquic's), 1 and 64 processes, against neqo-server at equal datagram sizes and at its defaults, and the msquic server",
        cargo: &[
            "run",
            "--release",
            "-p",
            "benches",
            "--bin",
            "compare",
            "--",
            "stacks",
            "--processes",
            "1,64",
            "--runs",
            "3",
        ],
        markdown: true,
    },
    Figure {
        name: "mtu-1500",
        about: "every pair in network namespaces whose loopback has a 1500-byte MTU (root)",
        cargo: &[
            "run",
            "--release",
            "-p",
            "benches",
            "--bin",
            "compare",
            "--",
            "--mtu",
            "1500",
            "--runs",
            "3",
            "--bytes",
            "268435456",
        ],
        markdown: true,
    },
    Figure {
        name: "mtu-9000",
        about: "every pair in network namespaces whose loopback has a 9000-byte MTU (root)",
        cargo: &[
            "run",
            "--release",
            "-p",
            "benches",
            "--bin",
            "compare",
            "--",
            "--mtu",
            "9000",
            "--runs",
            "3",
            "--bytes",
            "268435456",
        ],
        markdown: true,
    },
    Figure {
        name: "flood",
        about: "neqo-server under an Initial flood, with and without Retry",
        cargo: &["run", "--release", "-p", "benches", "--bin", "flood"],
        markdown: true,
    },
    Figure {
        name: "interop",
        about: "the QUIC Interop Runner's cases, neqo <-> neqo and neqo <-> msquic",
        cargo: &[
            "run",
            "--release",
            "-p",
            "test-fixtures",
            "--bin",
            "interop",
            "--",
            "--cases",
            "all",
        ],
        markdown: true,
    },
    Figure {
        name: "h3-servers",
        about: "HTTP/3 servers with the same clients: neqo-server against Caddy (quic-go)",
        cargo: &[
            "run",
            "--release",
            "-p",
            "benches",
            "--bin",
            "compare",
            "--",
            "h3-servers",
            "--runs",
            "3",
        ],
        markdown: true,
    },
    Figure {
        name: "steady",
        about: "a million requests over HTTP/3 and over hq-interop: the server's RSS after each 100 000",
        cargo: &["run", "--release", "-p", "benches", "--bin", "steady"],
        markdown: true,
    },
];

const RESULTS: &str = "docs/results";
const END: &str = "<!-- /figure -->";

fn figure(name: &str) -> Result<&'static Figure, String> {
    FIGURES.iter().find(|f| f.name == name).ok_or_else(|| {
        let known: Vec<_> = FIGURES.iter().map(|f| f.name).collect();
        format!("no figure {name:?} (known: {})", known.join(", "))
    })
}

fn command_line(f: &Figure) -> String {
    format!("cargo {}", f.cargo.join(" "))
}

/// What a command printed, trimmed; `None` when it could not run.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The civil date (UTC) of `secs` after the epoch.
fn date(secs: u64) -> String {
    // Howard Hinnant's days-to-civil.
    let z = i64::try_from(secs / 86_400).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The record of what `f` `printed`: where it is measured, commit (marked when the tree has
/// changes), date, kernel, CPU.
fn provenance(f: &Figure, printed: String) -> FigureRecord {
    let commit = output("git", &["rev-parse", "--short=7", "HEAD"]).unwrap_or_default();
    let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| s.lines().any(|l| !l.contains(RESULTS)));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_owned());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    FigureRecord {
        commit: if dirty {
            format!("{commit}+changes")
        } else {
            commit
        },
        date: date(now),
        kernel,
        cpu,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        name: f.name.to_owned(),
        command: command_line(f),
        output: printed,
    }
}

fn record_path(name: &str) -> PathBuf {
    Path::new(RESULTS).join(format!("{name}.json"))
}

fn refresh(f: &Figure) -> Result<(), String> {
    eprintln!("figures: {}: {}", f.name, command_line(f));
    let out = test_fixtures::cargo_command()
        .args(f.cargo)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: cannot run cargo: {e}", f.name))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {} failed ({})",
            f.name,
            command_line(f),
            out.status
        ));
    }
    let output = String::from_utf8_lossy(&out.stdout)
        .trim_matches('\n')
        .to_owned();
    let record = provenance(f, output);
    std::fs::create_dir_all(RESULTS).map_err(|e| format!("{RESULTS}: {e}"))?;
    let path = record_path(f.name);
    let text = record.to_json().map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The markdown a block of figure `f` holds, from its record.
fn rendered(f: &Figure) -> Result<String, String> {
    let path = record_path(f.name);
    let r = FigureRecord::read(&path).map_err(|e| match e {
        ReadError::Io { .. } => format!("{e}: no record; run `figures refresh {}`", f.name),
        ReadError::Parse { .. } => e.to_string(),
    })?;
    let body = r.output.trim_matches('\n').to_owned();
    let shown = if f.markdown {
        body
    } else {
        format!("```text\n{body}\n```")
    };
    Ok(format!(
        "{shown}\n\nMeasured at `{}` on {} ({}, {}, {} cores; client and server share them) with \
         `{}`. Record: `{}`; refresh: `cargo run --release -p benches --bin figures -- refresh \
         {}`.",
        r.commit,
        r.date,
        r.kernel,
        r.cpu,
        r.cores,
        r.command,
        path.display(),
        f.name
    ))
}

/// README.md and every `.md` under docs/ (guides/, reference/, records/ and any other).
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, docs: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, docs);
            } else if path.extension().is_some_and(|x| x == "md") {
                docs.push(path);
            }
        }
    }
    let mut docs = Vec::new();
    walk(Path::new("docs"), &mut docs);
    docs.sort();
    docs.insert(0, PathBuf::from("README.md"));
    docs
}

/// Where the first marker that starts a line is in `text`.
fn find_marker(text: &str) -> Option<usize> {
    const OPEN: &str = "<!-- figure: ";
    if text.starts_with(OPEN) {
        return Some(0);
    }
    text.find(&format!("\n{OPEN}")).map(|i| i + 1)
}

/// `text` with every figure block rendered from its record.
fn render_text(text: &str, doc: &Path) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    // A marker starts its line: one quoted inside a sentence is prose.
    while let Some(start) = find_marker(rest) {
        let open_end = rest[start..]
            .find("-->")
            .map(|i| start + i + 3)
            .ok_or_else(|| format!("{}: an unclosed figure marker", doc.display()))?;
        let name = rest[start + "<!-- figure: ".len()..open_end - 3].trim();
        let f = figure(name).map_err(|e| format!("{}: {e}", doc.display()))?;
        let close = rest[open_end..]
            .find(END)
            .map(|i| open_end + i)
            .ok_or_else(|| format!("{}: figure {name} has no {END}", doc.display()))?;
        out.push_str(&rest[..open_end]);
        out.push('\n');
        out.push_str(&rendered(f)?);
        out.push('\n');
        rest = &rest[close..];
        out.push_str(&rest[..END.len()]);
        rest = &rest[END.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Renders every document; with `check`, only says which differ. Returns those that differ.
fn render(check: bool) -> Result<Vec<PathBuf>, String> {
    let mut differ = Vec::new();
    for doc in documents() {
        let Ok(text) = std::fs::read_to_string(&doc) else {
            continue;
        };
        let new = render_text(&text, &doc)?;
        if new != text {
            if !check {
                std::fs::write(&doc, &new).map_err(|e| format!("{}: {e}", doc.display()))?;
            }
            differ.push(doc);
        }
    }
    Ok(differ)
}

fn main() -> ExitCode {
    let result = match Args::parse().command {
        Cmd::List => {
            for f in FIGURES {
                println!("{:10} {}\n{:10} {}", f.name, f.about, "", command_line(f));
            }
            Ok(())
        }
        Cmd::Refresh { names } => {
            let chosen: Result<Vec<_>, _> = if names.is_empty() {
                Ok(FIGURES.iter().collect())
            } else {
                names.iter().map(|n| figure(n)).collect()
            };
            chosen.and_then(|fs| {
                for f in fs {
                    refresh(f)?;
                }
                render(false).map(|d| eprintln!("figures: rendered into {d:?}"))
            })
        }
        Cmd::Render => render(false).map(|d| eprintln!("figures: rendered into {d:?}")),
        Cmd::Check => render(true).and_then(|d| {
            if d.is_empty() {
                eprintln!("figures: every block matches its record");
                Ok(())
            } else {
                Err(format!(
                    "blocks differ from their records in {d:?}: run `figures render` (or refresh)"
                ))
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("figures: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_795_564_800), "2026-11-25");
        assert_eq!(date(1_795_564_800 + 86_399), "2026-11-25");
    }

    /// `figures check` as a test, so that the workspace's test command covers the docs.
    #[test]
    fn every_block_matches_its_record() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("benches sits in the workspace");
        // The paths are the workspace root's, as when the tool runs; no test here
        // depends on another directory.
        std::env::set_current_dir(root).expect("the workspace root");
        let differ = render(true).expect("every block names a recorded figure");
        assert!(
            differ.is_empty(),
            "blocks differ from their records in {differ:?}: run `figures render`"
        );
    }

    #[test]
    fn a_block_naming_no_figure_or_left_open_is_an_error() {
        let doc = Path::new("x.md");
        assert!(render_text("<!-- figure: nope -->\n<!-- /figure -->", doc).is_err());
        assert!(
            render_text("<!-- figure: loopback --> b", doc).is_err(),
            "left open"
        );
        assert_eq!(render_text("no blocks\n", doc).unwrap(), "no blocks\n");
        let prose = "a `<!-- figure: NAME -->` marker\n";
        assert_eq!(
            render_text(prose, doc).unwrap(),
            prose,
            "quoted in a sentence"
        );
    }
}
