//! Requests the client cancels, 300 on one connection for each way of cancelling (RFC 9000
//! section 3.5): STOP_SENDING on the response, RESET_STREAM on the request, or both, as
//! browsers do. The server must answer STOP_SENDING with RESET_STREAM and close its half of a
//! request the client reset, so that every stream is freed and its credit comes back: the
//! server allows 100 concurrent streams, so a server that left them open would wedge the
//! connection at the 101st. After the 300, a request on the same connection is served whole.

use std::time::Duration;

use neqo_bin::testing::canceller::{self, Cancel, Canceller};
use neqo_driver::{TransportOptions, tls::Trust};
use neqo_server_core::{Limits, ServerConfig, ServerHandle};

fn cancels_free_their_streams(how: Cancel) {
    // Idle and handshake timeouts beyond the canceller's guard: the run ends by its events.
    let long = Duration::from_secs(600);
    let server = ServerHandle::start(ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        transport: TransportOptions {
            idle_timeout: long,
            ..TransportOptions::default()
        },
        limits: Limits {
            handshake_timeout: long,
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .expect("server starts");
    let trust = Trust::Certs(server.certificate().to_vec());
    let outcome =
        Canceller::run(server.addr(), trust, how).unwrap_or_else(|e| panic!("{how:?}: {e}"));
    let what = format!("{how:?}: {outcome:?}");
    outcome.assert_streams_freed(how, &what);
    let report = server.stop().unwrap();
    // Requests never completed are never answered, and a stopped response cannot have been
    // written out whole: it does not fit in the canceller's stream receive window.
    assert_eq!(
        report.requests, 1,
        "only the final request was answered: {what}"
    );
}

canceller::cancel_tests!(cancels_free_their_streams);

/// Ctrl-C (SIGINT) to `neqo-client`.
#[cfg(unix)]
mod ctrl_c {
    use std::time::{Duration, Instant};

    use neqo_driver::TransportOptions;

    // The client's hang guard is also the most this test waits for a process or the server,
    // well below the 600 s idle timeout both ends set.
    use super::{ServerConfig, ServerHandle};
    use neqo_bin::testing::canceller::DEADLINE;

    /// Ctrl-C in `neqo-client` mid-download cancels cleanly: it exits on its own, non-zero, saying
    /// it was interrupted, and its CONNECTION_CLOSE reaches the server, which lets go of the
    /// connection long before the (600 s, both ends) idle timeout could.
    #[test]
    fn ctrl_c_closes_the_client_connection() {
        use std::{io::Read as _, process::Command};

        let server = ServerHandle::start(ServerConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            transport: TransportOptions {
                idle_timeout: Duration::from_secs(600),
                ..TransportOptions::default()
            },
            ..ServerConfig::default()
        })
        .expect("server starts");
        let url = format!("https://{}/100000000000", server.addr());
        let mut client = Command::new(env!("CARGO_BIN_EXE_neqo-client"))
            .args(["--insecure", "--no-progress", "--idle-timeout", "600", &url])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("the download starts", || server.open_connections() == 1);
        let pid = client.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = {
            let limit = Instant::now() + DEADLINE;
            loop {
                if let Some(status) = client.try_wait().unwrap() {
                    break status;
                }
                if Instant::now() > limit {
                    let _ = client.kill();
                    panic!("neqo-client did not end after SIGINT");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        let mut stderr = String::new();
        client
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(!status.success(), "{status}: {stderr}");
        assert!(stderr.contains("interrupted"), "{stderr}");
        wait_for("the server lets go of the connection", || {
            server.open_connections() == 0
        });
        server.stop().unwrap();
    }

    /// Polls `f` every 20 ms until it holds, for at most [`DEADLINE`] (a hang guard).
    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let limit = Instant::now() + DEADLINE;
        while !f() {
            assert!(Instant::now() < limit, "{what}: not within {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
