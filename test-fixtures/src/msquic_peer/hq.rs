//! `hq-interop` (HTTP/0.9) request parsing and path resolution.

use std::fs::File;
use std::path::{Component, Path};

/// Longest request line the server accepts.
pub(crate) const MAX_REQUEST: usize = 8 * 1024;

/// What an hq request asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Target<'a> {
    /// `/N`: N generated pattern bytes.
    Generated(u64),
    /// Any other path, relative to the document root (leading `/` removed).
    File(&'a str),
}

/// Parses `GET /path` (optionally followed by CR LF) into its target.
pub(crate) fn parse_request(request: &[u8]) -> Result<Target<'_>, String> {
    let line = std::str::from_utf8(request).map_err(|_| "request is not UTF-8".to_string())?;
    let line = line
        .split('\n')
        .next()
        .unwrap_or_default()
        .trim_end_matches('\r');
    let mut words = line.split(' ').filter(|w| !w.is_empty());
    let (Some(method), Some(path)) = (words.next(), words.next()) else {
        return Err(format!("malformed request {line:?}"));
    };
    if method != "GET" {
        return Err(format!("unsupported method {method:?}"));
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("path {path:?} does not start with '/'"));
    };
    if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
        return rest
            .parse()
            .map(Target::Generated)
            .map_err(|_| format!("size in {path:?} is too large"));
    }
    Ok(Target::File(rest))
}

/// Opens `rel` under `root` (which must be canonical), refusing anything that
/// escapes it: `..`, absolute paths, and symlinks pointing outside.
pub(crate) fn open_under_root(root: &Path, rel: &str) -> Result<(File, u64), String> {
    let rel_path = Path::new(rel);
    if rel.is_empty() || rel.contains('\0') {
        return Err(format!("refusing path {rel:?}"));
    }
    if !rel_path
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(format!("refusing path {rel:?} (escapes the root)"));
    }
    let full = root.join(rel_path);
    let canonical = full
        .canonicalize()
        .map_err(|e| format!("{}: {e}", full.display()))?;
    if !canonical.starts_with(root) {
        return Err(format!("refusing path {rel:?} (resolves outside the root)"));
    }
    let file = File::open(&canonical).map_err(|e| format!("{}: {e}", canonical.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", canonical.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", canonical.display()));
    }
    Ok((file, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_requests() {
        assert_eq!(parse_request(b"GET /123\r\n"), Ok(Target::Generated(123)));
        assert_eq!(parse_request(b"GET /0"), Ok(Target::Generated(0)));
        assert_eq!(
            parse_request(b"GET /a/b.txt\r\n"),
            Ok(Target::File("a/b.txt"))
        );
        assert_eq!(parse_request(b"GET /12a\n"), Ok(Target::File("12a")));
        assert_eq!(parse_request(b"GET /\r\n"), Ok(Target::File("")));
        assert!(parse_request(b"POST /1\r\n").is_err());
        assert!(parse_request(b"GET\r\n").is_err());
        assert!(parse_request(b"GET x\r\n").is_err());
        assert!(parse_request(b"GET /99999999999999999999999\r\n").is_err());
        assert!(parse_request(b"\xff\xfe").is_err());
    }

    #[test]
    fn refuses_escapes() {
        let dir = std::env::temp_dir().join(format!("msquic-peer-hq-test-{}", std::process::id()));
        let root = dir.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/ok.txt"), b"hello").unwrap();
        std::fs::write(dir.join("secret.txt"), b"secret").unwrap();
        std::os::unix::fs::symlink(dir.join("secret.txt"), root.join("link")).unwrap();
        let root = root.canonicalize().unwrap();

        let (_, len) = open_under_root(&root, "sub/ok.txt").unwrap();
        assert_eq!(len, 5);
        for bad in [
            "../secret.txt",
            "sub/../../secret.txt",
            "/etc/passwd",
            "link",
            "sub",
            "",
            "nope",
        ] {
            assert!(
                open_under_root(&root, bad).is_err(),
                "{bad} must be refused"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
