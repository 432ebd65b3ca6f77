//! `neqo-server`: serves hq-interop and perf until SIGINT/SIGTERM.

#[global_allocator]
static ALLOCATOR: neqo_bin::cli::Allocator = neqo_bin::cli::ALLOCATOR;

fn main() -> std::process::ExitCode {
    neqo_bin::cli::server_from_env()
}
