//! The metrics endpoint's exposition parsed as a strict scraper parses it.

/// `text` parsed by `openmetrics-parser`, which passes the format's own conformance suite and
/// refuses what a scraper refuses (a family written twice or interleaved, a counter without
/// `_total`, no `# EOF`). It also refuses one valid thing, a histogram's `# UNIT` (the spec
/// forbids units on info and stateset families only): those lines are left out for it.
///
/// # Errors
/// What the parser said.
pub fn strict_parse(text: &str) -> Result<(), String> {
    let histograms: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" histogram"))
        .collect();
    let kept: String = text
        .split_inclusive('\n')
        .filter(|l| {
            l.strip_prefix("# UNIT ")
                .and_then(|rest| rest.split(' ').next())
                .is_none_or(|name| !histograms.contains(&name))
        })
        .collect();
    openmetrics_parser::openmetrics::parse_openmetrics(&kept)
        .map(|_| ())
        .map_err(|e| e.to_string())
}
