//! `compare stacks`' tables: per client stack a row for each neqo-server setup, its cells
//! "neqo-server / msquic", with the largest datagram each sent; then what the servers
//! counted per GB.

use std::fmt::Write as _;

use super::super::curve::median;
use super::{Count, Key, Party, Point, Shape, Stack, names_mtu, neqo_server_args};

/// A neqo-server setup's name in the tables: where `--server-arg` names the size, that
/// replaces the equal one ([`Party::all`]).
fn setup(party: Party, neqo_args: &[String]) -> &'static str {
    match party {
        Party::NeqoEqual if names_mtu(neqo_args) => "the size --server-arg names",
        Party::NeqoEqual => "equal datagram sizes",
        Party::NeqoDefaults => "neqo-server's defaults",
        Party::Msquic => "msquic",
    }
}

fn find(points: &[(Key, Point)], key: Key) -> Option<&Point> {
    points.iter().find(|(k, _)| *k == key).map(|(_, p)| p)
}

fn cell(p: Option<&Point>, f: fn(&Point) -> &Vec<f64>, digits: usize) -> String {
    p.and_then(|p| median(f(p)))
        .map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
}

/// The largest datagram `party` sent to `stack`'s clients at any column.
fn largest(points: &[(Key, Point)], stack: Stack, party: Party) -> String {
    points
        .iter()
        .filter(|((s, _, p), _)| *s == stack && *p == party)
        .map(|(_, point)| point.max_datagram)
        .max()
        .filter(|&d| d > 0)
        .map_or_else(|| "-".to_owned(), |d| d.to_string())
}

/// The whole output: what ran, then the tables.
pub(super) fn render(
    points: &[(Key, Point)],
    columns: &[(u64, Shape)],
    parties: &[Party],
    (bytes, runs): (u64, usize),
    neqo_args: &[String],
) -> String {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let neqo: Vec<&Party> = parties.iter().filter(|p| **p != Party::Msquic).collect();
    let mut out = String::new();
    let _ = write!(
        out,
        "Clients of other stacks: C client processes, one connection each, download {bytes} bytes in all, in 1 MiB requests (at least one each) or in one download each, from the msquic server (built with LTTng logging as Microsoft builds it for Linux; msquic's defaults but the settings msquic-peer names) and from neqo-server"
    );
    for (i, party) in neqo.iter().enumerate() {
        let args = neqo_server_args(**party, neqo_args).join(" ");
        let _ = write!(
            out,
            "{} at {} ({})",
            if i == 0 { "" } else { " and" },
            setup(**party, neqo_args),
            if args.is_empty() {
                "no arguments"
            } else {
                &args
            }
        );
    }
    let _ = writeln!(
        out,
        ", on 127.0.0.1; {runs} run(s), medians; clients and servers share {cores} cores. Largest datagram: the largest UDP payload the server's connections reached, from its own report.\n"
    );
    for (title, f, digits) in [
        (
            "server CPU s/GB, neqo-server / msquic",
            (|p: &Point| &p.cpu_s_per_gb) as fn(&Point) -> &Vec<f64>,
            2,
        ),
        ("Gbit/s, neqo-server / msquic", |p: &Point| &p.gbps, 2),
        (
            "receive-buffer drops [k/GB], neqo-server / msquic",
            |p: &Point| &p.drops_k_per_gb,
            1,
        ),
    ] {
        let _ = write!(
            out,
            "| {title} | neqo-server at | largest datagram [B], neqo-server / msquic |"
        );
        for (c, shape) in columns {
            let _ = write!(out, " C = {c}, {} |", shape.label());
        }
        let _ = write!(out, "\n|---|---|---:|");
        for _ in columns {
            let _ = write!(out, "---:|");
        }
        out.push('\n');
        for stack in Stack::ALL {
            for &&party in &neqo {
                let _ = write!(
                    out,
                    "| {} | {} | {} / {} |",
                    stack.name(),
                    setup(party, neqo_args),
                    largest(points, stack, party),
                    largest(points, stack, Party::Msquic)
                );
                for &col in columns {
                    let _ = write!(
                        out,
                        " {} / {} |",
                        cell(find(points, (stack, col, party)), f, digits),
                        cell(find(points, (stack, col, Party::Msquic)), f, digits)
                    );
                }
                out.push('\n');
            }
        }
        out.push('\n');
    }
    let _ = write!(out, "| per GB [thousands] | server |");
    for count in Count::ALL {
        let _ = write!(out, " {} |", count.label());
    }
    let _ = write!(out, "\n|---|---|");
    for _ in Count::ALL {
        let _ = write!(out, "---:|");
    }
    out.push('\n');
    for &(c, shape) in columns {
        for stack in Stack::ALL {
            for &party in parties {
                let _ = write!(
                    out,
                    "| {} clients, C = {c}, {} | {} |",
                    stack.name(),
                    shape.label(),
                    match party {
                        Party::Msquic => "msquic".to_owned(),
                        neqo => format!("neqo-server, {}", setup(neqo, neqo_args)),
                    }
                );
                let point = find(points, (stack, (c, shape), party));
                for (i, _) in Count::ALL.iter().enumerate() {
                    let v = point.and_then(|p| median(&p.counts_k_per_gb[i]));
                    let _ = write!(
                        out,
                        " {} |",
                        v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
                    );
                }
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Party, Shape, render};

    #[test]
    fn a_size_from_the_arguments_is_not_called_equal() {
        let columns = [(64, Shape::One)];
        let given = ["--max-mtu=8972".to_owned()];
        let out = render(&[], &columns, &Party::all(&given), (1, 1), &given);
        assert!(
            out.contains("| quinn | the size --server-arg names |"),
            "{out}"
        );
        assert!(!out.contains("equal datagram sizes"), "{out}");
        let out = render(&[], &columns, &Party::all(&[]), (1, 1), &[]);
        assert!(out.contains("| quinn | equal datagram sizes |"), "{out}");
        assert!(out.contains("| quinn | neqo-server's defaults |"), "{out}");
    }
}
