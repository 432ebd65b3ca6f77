//! `msquic-peer`: msquic-based hq-interop / perf server and client.
//! See the `msquic_peer` library for the protocol details.

fn main() -> std::process::ExitCode {
    msquic_peer::main()
}
