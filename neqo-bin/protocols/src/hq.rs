//! `hq-interop`: HTTP/0.9 over QUIC. One bidirectional stream per request; the client sends
//! `GET /PATH\r\n` and FIN, the server answers with the body and FIN, or resets the stream.
//!
//! The one place for its rules, for any peer (nothing here depends on a QUIC stack):
//!
//! - A request is at most [`MAX_REQUEST`] bytes of UTF-8 whose first line is `GET`, blanks, and
//!   a path starting with `/` (a trailing CR, further words and further lines are ignored).
//! - A path of digits only, `/N`, asks for N bytes of the generated body
//!   ([`crate::pattern`]), never for a file, whatever the root holds: a client can therefore
//!   always verify a `/N` body, and the answer does not depend on the server's disk. (A
//!   server may refuse to generate; it never serves a file named N instead.)
//! - Every other path names a regular file under the server's root ([`open`]), or is refused.
//!   It is taken as written (no percent-decoding) and must be a sequence of `/`-separated
//!   plain names: no empty name (so no `//`, no trailing `/`, no bare `/`), no `.` or `..`, no
//!   backslash, no NUL, nothing a platform reads as a drive or root. Symbolic links are
//!   followed, but the file they lead to must still lie under the (canonical) root.
//!
//! A malformed request is reset with [`BAD_REQUEST`], one the server will not serve (refused
//! path, missing file, a file that cannot be read to its end) with [`REFUSED`].

use std::{
    fmt,
    fs::File,
    io,
    path::{Component, Path, PathBuf},
};

/// Stream error code for a request the server will not serve. HTTP/0.9 has no status, so this
/// reset is the only "404".
pub const REFUSED: u64 = 0x10;

/// Stream error code for a malformed request (too long, not UTF-8, not `GET /...`, `/N` out of
/// range), and for a `perf` request shorter than its header.
pub const BAD_REQUEST: u64 = 0x11;

/// Stream error code for a request that arrived once the server had begun to shut down:
/// refused unread, so the client may make it again elsewhere (hq-interop has no GOAWAY to
/// say so beforehand).
pub const SHUTTING_DOWN: u64 = 0x12;

/// Stream error code for a response the server cut when its shutdown's drain period ended:
/// the request may have been processed, so it is not to be made again as if it had not.
pub const CUT: u64 = 0x13;

/// A name for the stream error codes above.
#[must_use]
pub const fn code_name(code: u64) -> Option<&'static str> {
    match code {
        REFUSED => Some("refused"),
        BAD_REQUEST => Some("bad request"),
        SHUTTING_DOWN => Some("refused unprocessed: the server is shutting down"),
        CUT => Some("cut: the server shut down before the response was whole"),
        _ => None,
    }
}

/// Longest request accepted, in bytes.
pub const MAX_REQUEST: usize = 8 * 1024;

/// The output file name [`output_name`] gives a path without a usable last name.
pub const INDEX_NAME: &str = "index.html";

/// Why a request is not served.
#[derive(Debug)]
pub enum Error {
    /// The request is longer than [`MAX_REQUEST`].
    TooLong,
    /// The request is not UTF-8.
    NotUtf8,
    /// The first word is not `GET`.
    NotGet,
    /// No path follows `GET`.
    NoPath,
    /// The path does not start with `/`.
    NotAbsolute,
    /// `/N` with N beyond `u64`.
    TooLarge,
    /// The path breaks a naming rule (the rule is named).
    BadPath(&'static str),
    /// A file was asked for and there is no root to serve from.
    NoRoot,
    /// The path, symbolic links followed, leads outside the root.
    OutsideRoot,
    /// The path names a directory.
    Directory,
    /// The path names something other than a regular file or a directory.
    NotAFile,
    /// The file does not exist or cannot be opened or read.
    Io(io::Error),
}

impl Error {
    /// The stream error code to reset the request's stream with: [`BAD_REQUEST`] or
    /// [`REFUSED`].
    #[must_use]
    pub const fn code(&self) -> u64 {
        match self {
            Self::TooLong
            | Self::NotUtf8
            | Self::NotGet
            | Self::NoPath
            | Self::NotAbsolute
            | Self::TooLarge => BAD_REQUEST,
            Self::BadPath(_)
            | Self::NoRoot
            | Self::OutsideRoot
            | Self::Directory
            | Self::NotAFile
            | Self::Io(_) => REFUSED,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong => write!(f, "request longer than {MAX_REQUEST} bytes"),
            Self::NotUtf8 => f.write_str("request is not UTF-8"),
            Self::NotGet => f.write_str("not a GET request"),
            Self::NoPath => f.write_str("no path"),
            Self::NotAbsolute => f.write_str("path does not start with /"),
            Self::TooLarge => f.write_str("size out of range"),
            Self::BadPath(rule) => write!(f, "path refused: {rule}"),
            Self::NoRoot => f.write_str("no root to serve files from"),
            Self::OutsideRoot => f.write_str("path leads outside the root"),
            Self::Directory => f.write_str("a directory"),
            Self::NotAFile => f.write_str("not a regular file"),
            Self::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

/// What a request path asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// `/N`: N generated pattern bytes.
    Generated(u64),
    /// Any other path (as requested, leading `/` included): a file under the root.
    File(&'a str),
}

/// The request line for `path`: `GET PATH\r\n`.
#[must_use]
pub fn request(path: &str) -> String {
    format!("GET {path}\r\n")
}

/// What a request path asks for (the `/N` rule, see the module docs).
///
/// # Errors
/// [`Error::NotAbsolute`] when `path` does not start with `/`, [`Error::TooLarge`] for `/N`
/// beyond `u64`.
pub fn target(path: &str) -> Result<Target<'_>, Error> {
    let rest = path.strip_prefix('/').ok_or(Error::NotAbsolute)?;
    if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
        return rest
            .parse()
            .map(Target::Generated)
            .map_err(|_| Error::TooLarge);
    }
    Ok(Target::File(path))
}

/// Parses a complete request (the bytes up to the client's FIN) into what it asks for.
///
/// # Errors
/// A malformed request (every such error has [`code`](Error::code) [`BAD_REQUEST`]).
pub fn parse_request(request: &[u8]) -> Result<Target<'_>, Error> {
    if request.len() > MAX_REQUEST {
        return Err(Error::TooLong);
    }
    let text = std::str::from_utf8(request).map_err(|_| Error::NotUtf8)?;
    let line = text.lines().next().unwrap_or_default();
    let mut words = line.split_ascii_whitespace();
    if words.next() != Some("GET") {
        return Err(Error::NotGet);
    }
    target(words.next().ok_or(Error::NoPath)?)
}

/// The relative path a file request names under the root, if it keeps the naming rules (see
/// the module docs). Touches no file system.
///
/// # Errors
/// [`Error::NotAbsolute`] or [`Error::BadPath`].
pub fn relative_path(path: &str) -> Result<&Path, Error> {
    let rel = path.strip_prefix('/').ok_or(Error::NotAbsolute)?;
    for name in rel.split('/') {
        let rule = match name {
            "" => "empty name (//, trailing / or no name)",
            "." | ".." => ". or .. name",
            _ if name.contains('\\') => "backslash",
            _ if name.contains('\0') => "NUL",
            _ => {
                // What is left must be one plain name on this platform too (no `C:`, no
                // root), so that joining it to the root cannot leave the root.
                let mut c = Path::new(name).components();
                match (c.next(), c.next()) {
                    (Some(Component::Normal(n)), None) if n == name => continue,
                    _ => "not a plain name on this platform",
                }
            }
        };
        return Err(Error::BadPath(rule));
    }
    Ok(Path::new(rel))
}

/// The canonical form of a server root, which [`open`] wants.
///
/// # Errors
/// The root does not exist, cannot be resolved, or is not a directory.
pub fn canonical_root(root: &Path) -> io::Result<PathBuf> {
    let canonical = root.canonicalize()?;
    if !canonical.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        ));
    }
    Ok(canonical)
}

/// Opens the regular file a request `path` names under `root`, which must be
/// canonical ([`canonical_root`]); returns it with its length. Blocking file-system work: keep
/// it off an event loop.
///
/// # Errors
/// `root` is `None` ([`Error::NoRoot`]), the path is `/N` or breaks a naming rule, resolves (through
/// symbolic links) outside `root`, is not a regular file, or cannot be opened.
pub fn open(root: Option<&Path>, path: &str) -> Result<(File, u64), Error> {
    if matches!(target(path), Ok(Target::Generated(_))) {
        return Err(Error::BadPath("/N is generated, never a file"));
    }
    let rel = relative_path(path)?;
    let root = root.ok_or(Error::NoRoot)?;
    let real = root.join(rel).canonicalize().map_err(Error::Io)?;
    if !real.starts_with(root) {
        return Err(Error::OutsideRoot);
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        // The canonical path has no link in it; one swapped in since is not followed.
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let file = options.open(&real).map_err(Error::Io)?;
    let meta = file.metadata().map_err(Error::Io)?;
    if meta.is_dir() {
        return Err(Error::Directory);
    }
    if !meta.is_file() {
        return Err(Error::NotAFile);
    }
    Ok((file, meta.len()))
}

/// The file name under which a client saves the body of `path`: its last name, or
/// [`INDEX_NAME`] when that is empty, `.`, `..` or not a plain name.
#[must_use]
pub fn output_name(path: &str) -> &str {
    let last = path.rsplit('/').next().unwrap_or_default();
    match relative_path(&format!("/{last}")) {
        Ok(_) => last,
        Err(_) => INDEX_NAME,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(e: &Result<(File, u64), Error>) -> bool {
        matches!(e, Err(e) if e.code() == REFUSED)
    }

    #[test]
    fn requests_are_formatted_and_parsed() {
        assert_eq!(request("/a/b"), "GET /a/b\r\n");
        assert!(matches!(
            parse_request(request("/a/b").as_bytes()),
            Ok(Target::File("/a/b"))
        ));
        assert!(matches!(
            parse_request(b"GET /10\r\n"),
            Ok(Target::Generated(10))
        ));
        assert!(matches!(parse_request(b"GET /0"), Ok(Target::Generated(0))));
        assert!(matches!(
            parse_request(b"GET /007\n"),
            Ok(Target::Generated(7))
        ));
        assert!(matches!(
            parse_request(b"GET /a/b HTTP/0.9\r\nHost: x\r\n\r\n"),
            Ok(Target::File("/a/b"))
        ));
        assert!(matches!(
            parse_request(b"GET /12a\n"),
            Ok(Target::File("/12a"))
        ));
        assert!(matches!(parse_request(b"GET /\r\n"), Ok(Target::File("/"))));
    }

    #[test]
    fn malformed_requests_are_bad_requests() {
        let long = format!("GET /{}\r\n", "a".repeat(MAX_REQUEST));
        for (raw, what) in [
            (&b"PUT /10\r\n"[..], "non-GET"),
            (b"get /10\r\n", "lower-case method"),
            (b"GET\r\n", "no path"),
            (b"", "empty"),
            (b"GET 10\r\n", "no leading /"),
            (b"GET /99999999999999999999999\r\n", "/N beyond u64"),
            (b"GET /\xff\xfe\r\n", "not UTF-8"),
            (long.as_bytes(), "too long"),
        ] {
            let e = parse_request(raw).expect_err(what);
            assert_eq!(e.code(), BAD_REQUEST, "{what}: {e}");
        }
        assert!(matches!(
            parse_request(long.as_bytes()),
            Err(Error::TooLong)
        ));
        // Exactly MAX_REQUEST bytes is still a request.
        let fits = format!("GET /{}", "a".repeat(MAX_REQUEST - 5));
        assert_eq!(fits.len(), MAX_REQUEST);
        assert!(matches!(
            parse_request(fits.as_bytes()),
            Ok(Target::File(_))
        ));
    }

    #[test]
    fn path_rules() {
        for ok in ["/a", "/a/b.txt", "/a b/.hidden", "/x..y", "/12a"] {
            assert!(relative_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "/",
            "//etc/passwd",
            "/a//b",
            "/a/",
            "/..",
            "/../secret",
            "/a/../../secret",
            "/a/../b",
            "/.",
            "/./a",
            "/a/./b",
            "/..\\secret",
            "/a\\b",
            "/a\0/../../secret",
            "/a\0",
        ] {
            let e = relative_path(bad).expect_err(bad);
            assert_eq!(e.code(), REFUSED, "{bad:?}");
        }
        assert!(relative_path("a").is_err());
    }

    /// A root holding `hello.txt`, `sub/inner.txt`, a file named `77`, a link out of the root,
    /// a link to a directory out of the root, a link inside the root and a dangling link;
    /// a secret beside the root.
    fn tree(name: &str) -> (PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!("neqo-bin-hq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(root.join("hello.txt"), b"hello").unwrap();
        std::fs::write(root.join("sub/inner.txt"), b"inner").unwrap();
        std::fs::write(root.join("77"), b"a file named 77").unwrap();
        std::fs::write(base.join("secret"), b"secret").unwrap();
        std::fs::write(base.join("outside/secret"), b"secret").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::symlink;
            symlink(base.join("secret"), root.join("link")).unwrap();
            symlink(base.join("outside"), root.join("outdir")).unwrap();
            symlink("sub/inner.txt", root.join("inlink")).unwrap();
            symlink(base.join("nothing"), root.join("dangling")).unwrap();
        }
        (base, canonical_root(&root).unwrap())
    }

    #[test]
    fn files_resolve_under_the_root_only() {
        let (base, root) = tree("resolve");
        let r = Some(root.as_path());
        assert_eq!(open(r, "/hello.txt").unwrap().1, 5);
        assert_eq!(open(r, "/sub/inner.txt").unwrap().1, 5);
        assert!(matches!(open(None, "/hello.txt"), Err(Error::NoRoot)));
        for bad in [
            "/../secret",
            "/sub/../../secret",
            "/..",
            "/sub/../hello.txt",
            "/./hello.txt",
            "//etc/passwd",
            "/..\\secret",
            "/hello.txt\0/../../secret",
            "/",
            "/sub",
            "/missing",
        ] {
            assert!(refused(&open(r, bad)), "{bad:?}");
        }
        // An absolute path can never be joined onto the root.
        let abs = format!("/{}", base.join("secret").display());
        assert!(refused(&open(r, &abs)), "{abs}");
        assert!(matches!(open(r, "/sub"), Err(Error::Directory)));
        assert!(matches!(open(r, "/missing"), Err(Error::Io(_))));
        #[cfg(unix)]
        {
            assert!(matches!(open(r, "/link"), Err(Error::OutsideRoot)));
            assert!(matches!(open(r, "/outdir/secret"), Err(Error::OutsideRoot)));
            assert!(matches!(open(r, "/dangling"), Err(Error::Io(_))));
            assert_eq!(open(r, "/inlink").unwrap().1, 5, "a link inside the root");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// `/N` is generated even when a file named N exists; the file is not reachable.
    #[test]
    fn digits_are_always_generated() {
        let (base, root) = tree("digits");
        assert_eq!(target("/77").unwrap(), Target::Generated(77));
        assert!(matches!(
            parse_request(b"GET /77\r\n"),
            Ok(Target::Generated(77))
        ));
        assert_eq!(target("/77a").unwrap(), Target::File("/77a"));
        // Not even a caller that skips `target` reaches the file.
        assert!(matches!(open(Some(&root), "/77"), Err(Error::BadPath(_))));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn roots_must_be_directories() {
        let (base, root) = tree("roots");
        assert!(canonical_root(&root.join("hello.txt")).is_err());
        assert!(canonical_root(&base.join("nope")).is_err());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn output_names() {
        assert_eq!(output_name("/a/b.txt"), "b.txt");
        assert_eq!(output_name("/1000"), "1000");
        assert_eq!(output_name("/"), INDEX_NAME);
        assert_eq!(output_name("/dir/"), INDEX_NAME);
        assert_eq!(output_name("/a/.."), INDEX_NAME);
        assert_eq!(output_name("/a\\..\\b"), INDEX_NAME);
    }
}
