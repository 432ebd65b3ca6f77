//! The rules of the OpenMetrics text format that a scraper refuses an exposition for, checked
//! on the endpoint's own: the strict parser the tests also run (`openmetrics-parser`) checks
//! neither that histogram buckets ascend nor that a unit is the name's suffix, and a check
//! of our own keeps these rules here if that crate ever turns lenient.
//!
//! - one descriptor (`# HELP`, `# TYPE`, `# UNIT`, each at most once) per family, before its
//!   samples, and every sample of a family together (a family never comes back);
//! - each sample named as its family's type wants (a counter's `_total`, a histogram's
//!   `_bucket`, `_count` and `_sum`), and no label set twice;
//! - a family with a unit named `..._UNIT`;
//! - a histogram's buckets in ascending `le` ending at `+Inf`, their counts cumulative, and
//!   its `_count` the `+Inf` bucket's;
//! - `# EOF` once, on the last line.

use std::collections::{BTreeMap, BTreeSet};

/// A sample's labels, sorted by name.
type Labels = Vec<(String, String)>;

/// A histogram's buckets as read, `(le, count)`, and its `_count`.
type Histogram = (Vec<(f64, f64)>, Option<f64>);

/// One family as read: its descriptor and its samples' label sets.
#[derive(Default)]
struct Family {
    name: String,
    kind: Option<String>,
    help: bool,
    unit: Option<String>,
    sampled: bool,
    seen: BTreeSet<(String, Labels)>,
    /// A histogram's, by label set without `le`.
    buckets: BTreeMap<Labels, Histogram>,
}

/// Why `text` is not valid OpenMetrics, by the rules above; the first line at fault.
pub(super) fn check(text: &str) -> Result<(), String> {
    let Some(body) = text.strip_suffix("# EOF\n") else {
        return Err("not ended by `# EOF` and a newline".into());
    };
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut family: Option<Family> = None;
    for (i, line) in body.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}: {line}", i + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (what, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let text = parts.next().unwrap_or("");
            if what == "EOF" {
                return Err(at("`# EOF` before the end".into()));
            }
            if family.as_ref().is_none_or(|f| f.name != name) {
                if let Some(f) = family.take() {
                    finish(&f)?;
                    done.insert(f.name);
                }
                if done.contains(name) {
                    return Err(at(format!("family {name} again, after others")));
                }
                family = Some(Family {
                    name: name.into(),
                    ..Family::default()
                });
            }
            let f = family.as_mut().expect("just set");
            if f.sampled {
                return Err(at("a descriptor after samples".into()));
            }
            let again = match what {
                "HELP" => std::mem::replace(&mut f.help, true),
                "TYPE" => f.kind.replace(text.into()).is_some(),
                "UNIT" => f.unit.replace(text.into()).is_some(),
                _ => return Err(at(format!("no such descriptor: {what}"))),
            };
            if again {
                return Err(at(format!("a second {what} for {name}")));
            }
            continue;
        }
        let (name, labels, value) = sample(line).map_err(at)?;
        let Some(f) = family.as_mut() else {
            return Err(at("a sample before any descriptor".into()));
        };
        let kind = f.kind.as_deref().unwrap_or("unknown");
        let suffix = name.strip_prefix(f.name.as_str()).ok_or_else(|| {
            at(format!(
                "sample of another family than {}: descriptor and samples apart",
                f.name
            ))
        })?;
        let allowed: &[&str] = match kind {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_count", "_sum", "_created"],
            _ => &[""],
        };
        if !allowed.contains(&suffix) {
            return Err(at(format!("a {kind} sample named {name}")));
        }
        f.sampled = true;
        if !f.seen.insert((name.clone(), labels.clone())) {
            return Err(at("the same sample twice".into()));
        }
        if kind == "histogram" && suffix != "_sum" && suffix != "_created" {
            let (le, rest): (Vec<_>, Vec<_>) = labels.into_iter().partition(|(k, _)| k == "le");
            let entry = f.buckets.entry(rest).or_default();
            if suffix == "_count" {
                entry.1 = Some(value);
            } else {
                let bound = match le.first().map(|(_, v)| v.as_str()) {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => v.parse().map_err(|_| at(format!("le {v}")))?,
                    None => return Err(at("a bucket without le".into())),
                };
                entry.0.push((bound, value));
            }
        }
    }
    if let Some(f) = family {
        finish(&f)?;
    }
    Ok(())
}

/// What can only be checked once a family's samples are all in.
fn finish(f: &Family) -> Result<(), String> {
    let name = &f.name;
    if f.kind.is_none() {
        return Err(format!("{name}: no TYPE"));
    }
    if let Some(unit) = &f.unit
        && !name.ends_with(&format!("_{unit}"))
    {
        return Err(format!("{name}: unit {unit} is not its name's suffix"));
    }
    for (labels, (buckets, count)) in &f.buckets {
        let ascending = buckets.windows(2).all(|w| w[0].0 < w[1].0);
        let cumulative = buckets.windows(2).all(|w| w[0].1 <= w[1].1);
        let last = buckets.last();
        if !ascending || !cumulative || last.is_none_or(|b| b.0 != f64::INFINITY) {
            return Err(format!(
                "{name}{labels:?}: buckets not ascending, not cumulative or not ending at +Inf: {buckets:?}"
            ));
        }
        if last.map(|b| b.1) != *count {
            return Err(format!(
                "{name}{labels:?}: _count {count:?} is not the +Inf bucket's"
            ));
        }
    }
    Ok(())
}

/// A sample line: its name, labels (sorted) and value.
fn sample(line: &str) -> Result<(String, Labels, f64), String> {
    let (name, rest) = match line.find(['{', ' ']) {
        Some(at) => line.split_at(at),
        None => return Err("no value".into()),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return Err(format!("metric name {name:?}"));
    }
    let mut labels = Vec::new();
    let rest = if let Some(mut inside) = rest.strip_prefix('{') {
        loop {
            if let Some(after) = inside.strip_prefix('}') {
                break after;
            }
            let (key, tail) = inside.split_once("=\"").ok_or("a label without =\"")?;
            let mut value = String::new();
            let mut chars = tail.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c)) => value.push(c),
                        None => return Err("an escape at the end".into()),
                    },
                    Some((at, '"')) => break at,
                    Some((_, c)) => value.push(c),
                    None => return Err("an unterminated label value".into()),
                }
            };
            labels.push((key.to_owned(), value));
            inside = &tail[end + 1..];
            inside = inside.strip_prefix(',').unwrap_or(inside);
        }
    } else {
        rest
    };
    let mut fields = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ');
    let value = fields.next().unwrap_or("");
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("value {v:?}"))?,
    };
    labels.sort();
    if labels.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err("a label twice".into());
    }
    Ok((name.to_owned(), labels, value))
}

#[cfg(test)]
mod tests {
    use super::check;

    const GOOD: &str = "# HELP a_bytes Bytes.\n# TYPE a_bytes counter\n# UNIT a_bytes bytes\n\
        a_bytes_total{worker=\"0\"} 1\na_bytes_total{worker=\"1\"} 2\n\
        # HELP h Durations.\n# TYPE h histogram\n\
        h_sum{worker=\"0\"} 0.5\nh_count{worker=\"0\"} 2\n\
        h_bucket{le=\"1.0\",worker=\"0\"} 1\nh_bucket{le=\"+Inf\",worker=\"0\"} 2\n\
        # HELP g A gauge.\n# TYPE g gauge\ng 3\n# EOF\n";

    #[test]
    fn a_valid_exposition_passes() {
        check(GOOD).unwrap();
    }

    /// Each a small change to `GOOD` that OpenMetrics forbids.
    #[test]
    fn each_rule_refuses_what_breaks_it() {
        for (what, from, to) in [
            (
                "a family per sample, as the endpoint once wrote",
                "a_bytes_total{worker=\"1\"} 2\n",
                "# HELP a_bytes Bytes.\n# TYPE a_bytes counter\n# UNIT a_bytes bytes\na_bytes_total{worker=\"1\"} 2\n",
            ),
            (
                "a family interleaved with another",
                "# HELP g A gauge.\n",
                "a_bytes_total{worker=\"2\"} 2\n# HELP g A gauge.\n",
            ),
            (
                "a family back after another",
                "g 3\n",
                "g 3\na_bytes_total{worker=\"2\"} 2\n",
            ),
            (
                "a second TYPE",
                "# TYPE g gauge\n",
                "# TYPE g gauge\n# TYPE g gauge\n",
            ),
            (
                "a counter without _total",
                "a_bytes_total{worker=\"0\"}",
                "a_bytes{worker=\"0\"}",
            ),
            (
                "a unit not the suffix",
                "# UNIT a_bytes bytes",
                "# UNIT a_bytes seconds",
            ),
            (
                "a sample twice",
                "a_bytes_total{worker=\"1\"}",
                "a_bytes_total{worker=\"0\"}",
            ),
            ("no +Inf bucket", "le=\"+Inf\"", "le=\"2.0\""),
            (
                "buckets descending",
                "h_bucket{le=\"1.0\",worker=\"0\"} 1\nh_bucket{le=\"+Inf\",worker=\"0\"} 2\n",
                "h_bucket{le=\"+Inf\",worker=\"0\"} 2\nh_bucket{le=\"1.0\",worker=\"0\"} 1\n",
            ),
            (
                "buckets not cumulative",
                "le=\"1.0\",worker=\"0\"} 1",
                "le=\"1.0\",worker=\"0\"} 3",
            ),
            (
                "_count not the +Inf bucket",
                "h_count{worker=\"0\"} 2",
                "h_count{worker=\"0\"} 5",
            ),
            ("no # EOF", "# EOF\n", ""),
            ("something after # EOF", "# EOF\n", "# EOF\ng 4\n"),
        ] {
            assert!(GOOD.contains(from), "{what}: the fixture has {from:?}");
            let bad = GOOD.replacen(from, to, 1);
            assert!(check(&bad).is_err(), "{what}: passed\n{bad}");
        }
    }
}
