//! `neqo-client`: fetches URLs over hq-interop or perf.

#[global_allocator]
static ALLOCATOR: neqo_bin::cli::Allocator = neqo_bin::cli::ALLOCATOR;

fn main() -> std::process::ExitCode {
    neqo_bin::cli::client_from_env()
}
