//! `neqo-server`: serves hq-interop and perf until SIGINT/SIGTERM.

use clap::Parser as _;

#[global_allocator]
static ALLOCATOR: neqo_bin::cli::Allocator = neqo_bin::cli::ALLOCATOR;

fn main() -> std::process::ExitCode {
    neqo_bin::cli::init_logging();
    neqo_bin::cli::server_main(neqo_bin::cli::ServerArgs::parse())
}
