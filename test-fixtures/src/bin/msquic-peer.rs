//! `msquic-peer`: msquic-based hq-interop / perf server and client.
//! See `test_fixtures::msquic_peer` for the protocol details.

fn main() -> std::process::ExitCode {
    test_fixtures::msquic_peer::main()
}
