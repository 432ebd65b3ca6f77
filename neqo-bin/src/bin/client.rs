//! `neqo-client`: fetches URLs over hq-interop or perf.

use clap::Parser as _;

#[global_allocator]
static ALLOCATOR: neqo_bin::cli::Allocator = neqo_bin::cli::ALLOCATOR;

fn main() -> std::process::ExitCode {
    let args = neqo_bin::cli::ClientArgs::parse();
    neqo_bin::cli::init_logging_at(if args.quiet { "error" } else { "warn" });
    neqo_bin::cli::client_main(args)
}
