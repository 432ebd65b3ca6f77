//! `neqo-client`: fetches URLs over hq-interop or perf.

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    neqo_bin::cli::init_logging();
    neqo_bin::cli::client_main(neqo_bin::cli::ClientArgs::parse())
}
