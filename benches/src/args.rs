//! Value parsers the table-printing binaries' command lines share.

use std::ops::RangeInclusive;

/// A clap value parser of one whole number in `range`, with spaces around it ignored: an item
/// of a comma-separated list (`--senders 1,2,4`, `--concurrency "1, 10"`).
pub fn number_in<T: TryFrom<u64> + 'static>(
    range: RangeInclusive<u64>,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {
    move |v| {
        v.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| range.contains(n))
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| {
                format!(
                    "expected a whole number in {}..={} each, got {v:?}",
                    range.start(),
                    range.end()
                )
            })
    }
}

/// A clap value parser of a positive whole number (`--bytes`, `--rate`).
///
/// # Errors
/// When `v` is no whole number, is 0, or does not fit `T`.
pub fn positive<T: TryFrom<u64>>(v: &str) -> Result<T, String> {
    v.parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("expected a positive whole number, got {v:?}"))
}

#[cfg(test)]
mod tests {
    use super::{number_in, positive};

    #[test]
    fn positive_numbers_fit_their_type() {
        assert_eq!(positive::<u64>("1"), Ok(1));
        assert!(positive::<u64>("0").unwrap_err().contains("\"0\""));
        assert!(positive::<u32>("4294967296").is_err());
        assert!(positive::<u64>(" 1").is_err());
    }

    #[test]
    fn list_items_are_whole_numbers_in_range() {
        let p = number_in::<usize>(1..=64);
        assert_eq!(p("8"), Ok(8));
        assert_eq!(p(" 2 "), Ok(2));
        assert!(p("0").unwrap_err().contains("1..=64"));
        assert!(p("65").unwrap_err().contains("\"65\""));
        assert!(p("").is_err());
        assert!(p("-1").is_err());
        assert!(p("two").is_err());
    }
}
