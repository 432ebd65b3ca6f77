//! Files under `--root` and `--output-dir` through a real server and client on loopback:
//! served byte-exact, symbolic links out of the root refused while the server goes on, a file
//! that shrinks mid-request reset cleanly, and output writes that fail failing their request
//! instead of hanging. Every step runs under a hang guard.

mod common;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use common::url;
use neqo_bin::client::{self, ClientConfig, Save};
use neqo_driver::tls::Trust;
use neqo_protocols::hq;
use neqo_server_core::{ServerConfig, ServerHandle};
use rand::{RngCore as _, SeedableRng as _, rngs::StdRng};

/// A hang guard for a whole test step, not a performance bound.
const DEADLINE: Duration = Duration::from_secs(60);

fn with_deadline<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    common::with_deadline(what, DEADLINE, f)
}

/// A fresh directory for one test: `base/root` (to serve) and `base/out` (to save to).
fn scratch(name: &str) -> (PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(format!("neqo-bin-files-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("root")).unwrap();
    std::fs::create_dir_all(base.join("out")).unwrap();
    let root = base.join("root");
    (base, root)
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn server(root: &Path) -> ServerHandle {
    ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        root: Some(root.to_owned()),
        ..ServerConfig::default()
    })
    .expect("server starts")
}

/// A client for `paths` on one connection, saving to `out`.
fn client_for(s: &ServerHandle, paths: &[&str], out: &Path) -> ClientConfig {
    ClientConfig {
        urls: paths.iter().map(|p| url(s.addr(), p)).collect(),
        save: Save::Dir(out.to_owned()),
        ..ClientConfig::new(
            url(s.addr(), paths[0]),
            Trust::Certs(s.certificate().to_vec()),
        )
    }
}

/// Files of several sizes (empty, one byte, a few chunks and an odd tail, nested) come back
/// byte-exact, in parallel and more than once; each name is saved once.
#[test]
fn files_are_served_byte_exact() {
    let (base, root) = scratch("exact");
    let out = base.join("out");
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    let files: [(&str, Vec<u8>); 4] = [
        ("/big.bin", random_bytes(3 * 1024 * 1024 + 12_345, 1)),
        ("/empty", Vec::new()),
        ("/one", vec![0x5a]),
        ("/sub/deeper/nested.bin", random_bytes(200_001, 2)),
    ];
    for (path, content) in &files {
        std::fs::write(root.join(&path[1..]), content).unwrap();
    }
    let s = server(&root);
    let paths: Vec<&str> = files.iter().map(|(p, _)| *p).collect();
    let mut c = client_for(&s, &paths, &out);
    c.requests = 2;
    c.parallel = true;
    let r = with_deadline("files", move || client::run(c)).expect("every file");
    assert_eq!(r.requests, 8);
    let total: u64 = files.iter().map(|(_, c)| c.len() as u64).sum();
    assert_eq!(r.bytes_received, 2 * total);
    for (path, content) in &files {
        let saved = std::fs::read(out.join(hq::output_name(path))).unwrap();
        assert!(saved == *content, "{path}: {} bytes saved", saved.len());
    }
    let sr = s.stop().unwrap();
    assert_eq!((sr.requests, sr.refused_requests), (8, 0));
    assert_eq!(sr.bytes_sent, 2 * total);
    let _ = std::fs::remove_dir_all(&base);
}

/// Symbolic links out of the root, to a file or through a directory, are refused with a
/// reset; a link inside the root is followed; and the same connection goes on serving.
#[cfg(unix)]
#[test]
fn symbolic_links_out_of_the_root_are_refused_and_serving_goes_on() {
    use std::os::unix::fs::symlink;
    let (base, root) = scratch("links");
    let out = base.join("out");
    std::fs::create_dir_all(base.join("outside")).unwrap();
    std::fs::write(base.join("outside/secret"), b"secret").unwrap();
    std::fs::write(root.join("hello.txt"), b"hello, world\n").unwrap();
    symlink(base.join("outside/secret"), root.join("link")).unwrap();
    symlink(base.join("outside"), root.join("outdir")).unwrap();
    symlink("hello.txt", root.join("inlink")).unwrap();
    let s = server(&root);
    let paths = ["/link", "/hello.txt", "/outdir/secret", "/inlink", "/1000"];
    let c = client_for(&s, &paths, &out);
    let r = with_deadline("links", move || client::run_report(c)).unwrap();
    assert_eq!((r.requests, r.failed_requests, r.connections), (3, 2, 1));
    for (e, path) in r.errors.iter().zip(["/link", "/outdir/secret"]) {
        assert!(e.starts_with(path) && e.contains("reset"), "{e}");
        assert!(e.contains("refused"), "{e}");
    }
    assert_eq!(
        std::fs::read(out.join("inlink")).unwrap(),
        b"hello, world\n"
    );
    assert_eq!(
        std::fs::read(out.join("hello.txt")).unwrap(),
        b"hello, world\n"
    );
    assert!(!out.join("link").exists() && !out.join("secret").exists());
    let sr = s.stop().unwrap();
    assert_eq!((sr.requests, sr.refused_requests), (3, 2));
    let _ = std::fs::remove_dir_all(&base);
}

/// With generated bodies off, `/N` is refused like a missing file, and files are served as
/// before on the same connection; with them on (the library's default), `/N` comes back.
#[test]
fn generated_bodies_off_refuse_n_and_files_go_on() {
    let (base, root) = scratch("generate-off");
    let out = base.join("out");
    std::fs::write(root.join("hello.txt"), b"hello, world\n").unwrap();
    let s = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        root: Some(root.clone()),
        generate: false,
        ..ServerConfig::default()
    })
    .expect("server starts");
    let c = client_for(&s, &["/1000", "/hello.txt", "/0"], &out);
    let r = with_deadline("generate off", move || client::run_report(c)).unwrap();
    assert_eq!((r.requests, r.failed_requests), (1, 2), "{:?}", r.errors);
    for (e, path) in r.errors.iter().zip(["/1000", "/0"]) {
        assert!(e.starts_with(path) && e.contains("refused"), "{e}");
    }
    assert_eq!(
        std::fs::read(out.join("hello.txt")).unwrap(),
        b"hello, world\n"
    );
    let sr = s.stop().unwrap();
    assert_eq!(
        (sr.requests, sr.refused_requests, sr.bytes_sent),
        (1, 2, 13)
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// Output writes that fail — a directory where the file should go, a full disk — fail their
/// request with a message and stop reading it; the other requests of the connection complete.
#[test]
fn failed_output_writes_fail_the_request() {
    let (base, root) = scratch("output");
    let out = base.join("out");
    std::fs::write(root.join("hello.txt"), b"hello, world\n").unwrap();
    std::fs::create_dir(out.join("hello.txt")).unwrap();
    #[cfg(target_os = "linux")]
    std::os::unix::fs::symlink("/dev/full", out.join("5000000")).unwrap();
    let s = server(&root);
    let c = client_for(&s, &["/hello.txt", "/5000000", "/1000"], &out);
    let r = with_deadline("output", move || client::run_report(c)).unwrap();
    assert!(
        r.errors[0].starts_with("/hello.txt: cannot save the body"),
        "{:?}",
        r.errors
    );
    #[cfg(target_os = "linux")]
    {
        assert_eq!((r.requests, r.failed_requests), (1, 2), "{:?}", r.errors);
        let full = &r.errors[1];
        assert!(full.starts_with("/5000000: cannot save the body"), "{full}");
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC).to_string();
        assert!(full.contains(&enospc), "{full}");
        assert!(r.bytes_received < 5_000_000, "reading stopped");
    }
    assert_eq!(
        std::fs::read(out.join("1000")).unwrap(),
        (0..1000u64).map(|k| (k % 256) as u8).collect::<Vec<_>>()
    );
    let _ = std::fs::remove_dir_all(&base);
}

// ---------------------------------------------------------------------------------------------
// A file that changes under a request, seen by a client that holds the server back.

#[cfg(unix)]
mod changing {
    use std::{ops::ControlFlow, sync::Arc, time::Instant};

    use bytes::Bytes;
    use neqo_driver::{Application, Driver, run_client, tls};
    use neqo_protocols::ALPN_HQ;
    use neqo_protocols::body::{self, ReadEnd};
    use neqo_server_core::REFUSED;
    use quinn_proto::{Connection, ConnectionHandle, Dir, Event, StreamEvent, StreamId, VarInt};

    use super::{Trust, hq, random_bytes, scratch, server, with_deadline};

    /// What one request of [`Fetch`] got.
    #[derive(Debug, Default)]
    struct Got {
        body: Vec<u8>,
        reset: Option<VarInt>,
        fin: bool,
    }

    /// Makes `requests` one after another on one connection. The receive window is small, so the
    /// server cannot read a file much ahead of what this client took; `on_first_bytes` runs when
    /// the first bytes of request `i` arrive, before any more are read.
    struct Fetch {
        remote: std::net::SocketAddr,
        trust: Trust,
        requests: Vec<&'static str>,
        on_first_bytes: Box<dyn FnMut(usize) + Send>,
        started: bool,
        current: Option<(usize, StreamId)>,
        got: Vec<Got>,
        done: bool,
    }

    impl Fetch {
        fn run(mut self) -> Vec<Got> {
            run_client(&mut self, "127.0.0.1:0".parse().unwrap(), 1).expect("fetch driver");
            self.got
        }

        fn start(&mut self, conn: &mut Connection, i: usize) {
            let id = conn.streams().open(Dir::Bi).expect("stream credit");
            let raw = hq::request(self.requests[i]);
            let mut stream = conn.send_stream(id);
            assert_eq!(stream.write(raw.as_bytes()).ok(), Some(raw.len()));
            stream.finish().unwrap();
            self.got.push(Got::default());
            self.current = Some((i, id));
        }

        fn read(&mut self, conn: &mut Connection, id: StreamId) {
            let Some((i, current)) = self.current else {
                return;
            };
            if current != id {
                return;
            }
            let got = &mut self.got[i];
            let first = got.body.is_empty();
            let hook = &mut self.on_first_bytes;
            let mut hooked = false;
            let end = body::read_stream(conn, id, |chunk| {
                got.body.extend_from_slice(&chunk.bytes);
                if first && !hooked {
                    // Before this read's credit is released: the server is still held back.
                    hooked = true;
                    hook(i);
                }
                ControlFlow::Continue(())
            });
            match end {
                ReadEnd::Fin => got.fin = true,
                ReadEnd::Reset(code) => got.reset = Some(code),
                ReadEnd::Blocked | ReadEnd::Stopped => return,
            }
            if i + 1 < self.requests.len() {
                self.start(conn, i + 1);
            } else {
                self.current = None;
                conn.close(Instant::now(), 0u32.into(), Bytes::from_static(b"done"));
                self.done = true;
            }
        }
    }

    impl Application for Fetch {
        fn event(&mut self, _: ConnectionHandle, conn: &mut Connection, event: Event, _: Instant) {
            match event {
                Event::Connected => self.start(conn, 0),
                Event::Stream(StreamEvent::Readable { id }) => self.read(conn, id),
                Event::ConnectionLost { reason } => {
                    assert!(self.done, "connection lost: {reason}");
                }
                _ => {}
            }
        }

        fn poll(&mut self, driver: &mut Driver, now: Instant) -> Option<Instant> {
            if !self.started {
                self.started = true;
                let crypto = tls::client_crypto(&self.trust, ALPN_HQ).unwrap();
                let mut cc = quinn_proto::ClientConfig::new(crypto);
                let mut t = quinn_proto::TransportConfig::default();
                t.stream_receive_window(VarInt::from_u32(128 * 1024));
                cc.transport_config(Arc::new(t));
                driver
                    .connect(0, cc, self.remote, "localhost", now)
                    .expect("connect");
            }
            None
        }

        fn done(&self) -> bool {
            self.done
        }
    }

    /// A file truncated after its first bytes were sent makes the server reset the stream with
    /// `REFUSED` (not end a short body with FIN); a file unlinked mid-request is still served
    /// whole (its open handle keeps it); and the connection goes on serving.
    #[test]
    fn a_file_shrinking_mid_request_resets_the_stream() {
        let (base, root) = scratch("shrink");
        let big = random_bytes(8 * 1024 * 1024, 3);
        std::fs::write(root.join("shrinks"), &big).unwrap();
        std::fs::write(root.join("vanishes"), &big).unwrap();
        std::fs::write(root.join("hello.txt"), b"hello, world\n").unwrap();
        let s = server(&root);
        let hook_root = root.clone();
        let fetch = Fetch {
            remote: s.addr(),
            trust: Trust::Certs(s.certificate().to_vec()),
            requests: vec!["/shrinks", "/hello.txt", "/vanishes", "/hello.txt"],
            on_first_bytes: Box::new(move |i| match i {
                0 => std::fs::File::create(hook_root.join("shrinks"))
                    .map(drop)
                    .unwrap(),
                2 => std::fs::remove_file(hook_root.join("vanishes")).unwrap(),
                _ => {}
            }),
            started: false,
            current: None,
            got: Vec::new(),
            done: false,
        };
        let got = with_deadline("shrink", move || fetch.run());
        let [shrunk, hello, vanished, hello2] = &got[..] else {
            panic!("{got:?}");
        };
        assert_eq!(shrunk.reset, Some(REFUSED), "{shrunk:?}");
        assert!(shrunk.body.len() < big.len());
        assert!(
            big.starts_with(&shrunk.body),
            "what came before the reset is the file's"
        );
        assert!(hello.fin && hello.body == b"hello, world\n", "{hello:?}");
        assert!(vanished.fin && vanished.reset.is_none());
        assert!(vanished.body == big, "{} bytes", vanished.body.len());
        assert!(hello2.fin && hello2.body == b"hello, world\n", "{hello2:?}");
        let sr = s.stop().unwrap();
        assert_eq!((sr.requests, sr.refused_requests), (3, 1));
        let _ = std::fs::remove_dir_all(&base);
    }
}
