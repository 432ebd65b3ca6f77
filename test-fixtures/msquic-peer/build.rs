//! With the `msquic` feature on Linux, the `msquic-peer` binary must link msquic as built with
//! LTTng logging (`msquic-logging.cmake`), the build Microsoft ships: the stub build evaluates
//! trace work on every congestion-control update, which would make the benchmarks' anchor
//! dearer than msquic is. The link fails unless one of the CLOG tracepoints is in the library
//! (`--defsym` to a symbol that is not defined is an error in lld and GNU ld alike). A target
//! directory holding an earlier stub build needs `cargo clean -p msquic` once: msquic's build
//! script reruns only when its own file changes.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let msquic = std::env::var_os("CARGO_FEATURE_MSQUIC").is_some();
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if msquic && linux {
        // Defined by the CLOG tracepoints of msquic's API layer (src/core/api.c), absent from
        // a build with the stub providers.
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--defsym=msquic_peer_clog_check=lttng_ust_tracepoint_CLOG_API_C___ApiEnter"
        );
    }
}
