//! A real browser over HTTP/3: headless Chromium loads a page from `neqo-server --alpn h3`
//! (QUIC forced for the origin, the server's certificate accepted by its SPKI hash). The page
//! shows three images and fetches a 3 MB file; its script writes what it got into the DOM,
//! which Chromium prints. The server's report proves every resource came over h3: one
//! connection or more, all of them h3, and its responses the page's. Also with two workers,
//! and with a Retry for every new connection.
//!
//! Needs `chromium` (`.ci/run` installs it); without it the test says `skipped:`, except
//! under CI (`CI` set), where a missing browser is a failure.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use neqo_report::{Report as _, ServerReport};
use rcgen::PublicKeyData as _;
use test_fixtures::Server;

const SERVER: &str = env!("CARGO_BIN_EXE_neqo-server");
const LIMIT: Duration = Duration::from_secs(60);
const BIG: usize = 3_000_000;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("neqo-browser-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A PNG of `w` x `h` pixels of one colour (stored, not compressed: zlib's "no compression"
/// blocks), so that the test needs no image crate.
fn png(w: u32, h: u32, rgb: [u8; 3]) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    fn crc32(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
    // Each row: filter type 0, then the pixels.
    let row: Vec<u8> = std::iter::once(0).chain((0..w).flat_map(|_| rgb)).collect();
    let raw: Vec<u8> = (0..h).flat_map(|_| row.iter().copied()).collect();
    // zlib: header, stored blocks of at most 65535 bytes, Adler-32.
    let mut z = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == blocks.len()));
        let len = u16::try_from(block.len()).unwrap();
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in &raw {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    z.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// The page: three images (decoded, their widths written out), then a fetch of the big file
/// (its length written out).
const PAGE: &str = r#"<!doctype html><html><head><title>neqo h3</title></head><body>
<p id="t">waiting</p>
<img src="img0.png"><img src="img1.png"><img src="img2.png">
<script>
Promise.all([...document.images].map(i => i.decode().then(() => i.naturalWidth)))
  .then(ws => fetch('big.bin').then(r => r.arrayBuffer())
    .then(b => { document.getElementById('t').textContent = 'loaded ' + ws.join(',') + ' ' + b.byteLength; }))
  .catch(e => { document.getElementById('t').textContent = 'failed ' + e; });
</script></body></html>"#;

/// The site, a certificate for `localhost` and its SPKI hash (base64 of SHA-256).
struct Site {
    dir: PathBuf,
    spki: String,
}

impl Site {
    fn new(name: &str) -> Self {
        let dir = scratch(name);
        let www = dir.join("www");
        std::fs::create_dir_all(&www).unwrap();
        std::fs::write(www.join("index.html"), PAGE).unwrap();
        for (i, rgb) in [[255, 0, 0], [0, 160, 0], [0, 0, 255]]
            .into_iter()
            .enumerate()
        {
            std::fs::write(www.join(format!("img{i}.png")), png(40 + i as u32, 30, rgb)).unwrap();
        }
        let big: Vec<u8> = (0..BIG).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(www.join("big.bin"), big).unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
        let spki = ring::digest::digest(
            &ring::digest::SHA256,
            &ck.signing_key.subject_public_key_info(),
        );
        Self {
            dir,
            spki: base64(spki.as_ref()),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

fn chromium() -> Option<&'static str> {
    let ok = Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some("chromium");
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "chromium is missing under CI (.ci/run installs it)"
    );
    eprintln!("skipped: chromium is not installed");
    None
}

/// Loads the page with `extra` server flags; returns the DOM Chromium printed and the
/// server's report.
fn load(browser: &str, name: &str, extra: &[&str]) -> (String, ServerReport) {
    let site = Site::new(name);
    let report = site.path("server.json");
    let server = Server::start(
        Command::new(SERVER)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--alpn",
                "h3,hq-interop",
                "--root",
            ])
            .arg(site.path("www"))
            .arg("--cert")
            .arg(site.path("cert.pem"))
            .arg("--key")
            .arg(site.path("key.pem"))
            .arg("--json")
            .arg(&report)
            // A browser that waits its turn on a loaded machine is not timed out.
            .args(["--idle-timeout", "120", "--handshake-timeout", "120"])
            .args(extra),
        LIMIT,
    )
    .unwrap_or_else(|e| panic!("server did not start: {e}"));
    let port = server.addr().port();
    let out = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--enable-quic",
            &format!("--origin-to-force-quic-on=localhost:{port}"),
            &format!("--ignore-certificate-errors-spki-list={}", site.spki),
            "--host-resolver-rules=MAP localhost 127.0.0.1",
            "--virtual-time-budget=20000",
            // Wall clock: a hang guard for the whole load, which a loaded machine stretches.
            "--timeout=120000",
            &format!("--user-data-dir={}", site.path("profile").display()),
            "--dump-dom",
            &format!("https://localhost:{port}/index.html"),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let m = server.stop().unwrap();
    assert_eq!(m.code, Some(0), "the server stopped cleanly: {}", m.stderr);
    let r = ServerReport::read(&report).unwrap_or_else(|e| panic!("{e}"));
    if !dom.contains("loaded") {
        eprintln!("chromium stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&site.dir);
    (dom, r)
}

fn check(dom: &str, r: &ServerReport) {
    assert!(
        dom.contains(&format!("loaded 40,41,42 {BIG}")),
        "the page rendered its images and fetched the file: {dom}"
    );
    let h = &r.http3;
    // The page, three images, the file; Chromium may also ask for /favicon.ico (a 404).
    assert_eq!(h.responses, 5, "{h:?}");
    assert!(h.error_statuses <= 1, "{h:?}");
    assert_eq!(
        r.requests, h.responses,
        "every response of the server was an h3 one: {r:?}"
    );
    let body = PAGE.len() as u64 + BIG as u64;
    assert!(h.body_bytes > body, "{h:?}");
}

#[test]
fn chromium_loads_a_page_over_http3() {
    let Some(browser) = chromium() else {
        return;
    };
    let (dom, r) = load(browser, "one", &[]);
    check(&dom, &r);
}

#[test]
fn chromium_loads_a_page_from_two_workers() {
    let Some(browser) = chromium() else {
        return;
    };
    let (dom, r) = load(browser, "workers", &["--workers", "2"]);
    check(&dom, &r);
}

#[test]
fn chromium_loads_a_page_after_a_retry() {
    let Some(browser) = chromium() else {
        return;
    };
    let (dom, r) = load(browser, "retry", &["--retry", "always"]);
    check(&dom, &r);
    assert!(r.driver.retries >= 1, "{r:?}");
}

#[test]
fn the_png_encoder_makes_what_the_spec_says() {
    let p = png(2, 1, [1, 2, 3]);
    assert_eq!(&p[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&p[12..16], b"IHDR");
    assert_eq!(base64(b"any carnal pleas"), "YW55IGNhcm5hbCBwbGVhcw==");
    assert_eq!(base64(b"any carnal pleasu"), "YW55IGNhcm5hbCBwbGVhc3U=");
    assert!(Path::new("/").exists());
}
