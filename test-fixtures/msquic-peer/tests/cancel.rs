//! Requests a client cancels against `msquic-peer server`, 300 on one connection for each way
//! of cancelling (RFC 9000 section 3.5): STOP_SENDING on the response, RESET_STREAM on the
//! request, or both. The server must answer STOP_SENDING with RESET_STREAM and close its half
//! of a request the client reset, so that every stream is freed and its credit comes back: the
//! server runs with `--max-streams 100`, so one that left streams open would wedge the
//! connection at the 101st. After the 300, a request on the same connection is served whole.
//!
//! The client (quinn-proto on `neqo-bin`'s driver) is `neqo_bin::testing::canceller`, shared
//! with `neqo-bin`'s `tests/cancel.rs`, which tests `neqo-server` the same way.

use std::process::Command;

use neqo_bin::testing::canceller::{self, Cancel, Canceller, DEADLINE};
use neqo_driver::tls::Trust;

/// The server's stream limit.
const MAX_STREAMS: &str = "100";

fn cancels_free_their_streams(how: Cancel) {
    let server = test_fixtures::Server::start(
        Command::new(env!("CARGO_BIN_EXE_msquic-peer")).args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--alpn",
            "hq-interop",
            "--max-streams",
            MAX_STREAMS,
        ]),
        // The client's hang guard is also how long the server may take to start.
        DEADLINE,
    )
    .expect("server starts");
    let outcome = Canceller::run(server.addr(), Trust::Insecure, how);
    let stopped = server.stop().expect("server stops");
    let outcome = outcome.unwrap_or_else(|e| panic!("{how:?}: {e}\nserver: {}", stopped.stderr));
    let what = format!("{how:?}: {outcome:?}\nserver: {}", stopped.stderr);
    outcome.assert_streams_freed(how, &what);
    // No response failed on a stream the client had cancelled, and the server let go of
    // everything on SIGTERM.
    assert!(!stopped.stderr.contains("failed"), "{what}");
    assert!(stopped.success(), "{}: {what}", stopped.ending());
}

canceller::cancel_tests!(cancels_free_their_streams);
