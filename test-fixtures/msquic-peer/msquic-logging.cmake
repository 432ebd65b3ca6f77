# A CMake toolchain file that builds msquic with logging as Microsoft builds its Linux
# packages: LTTng through CLOG. `.cargo/config.toml` names it in CMAKE_TOOLCHAIN_FILE_<target>
# for the Linux targets, which the cmake crate passes to every CMake build for them in the
# workspace; it changes only msquic's.
#
# Why: the msquic crate's build script sets QUIC_ENABLE_LOGGING off on Linux, which selects
# msquic's stub trace providers, and those answer TRUE to every "is this trace enabled"
# check, so the library runs work whose only use is a trace event (on every
# congestion-control update, QuicConnLogOutFlowStats walks the connection's streams). With
# LTTng the checks ask the tracepoint, which is off unless an LTTng session enables it, as in
# the libmsquic that Microsoft ships. The anchor of the benchmarks has to be that msquic.
#
# A toolchain file is read before the project's own CMakeLists.txt, so a cache entry forced
# here wins over the build script's -DQUIC_ENABLE_LOGGING=off. It needs LTTng-UST's headers
# (Debian: liblttng-ust-dev), at build time only: the tracepoints load LTTng's library when it
# is there and stay off when it is not. Without the headers msquic's CMakeLists.txt would
# warn and quietly build the stubs, so the build stops here instead; msquic-peer's build.rs
# also has the link require a CLOG tracepoint.
if(EXISTS "${CMAKE_SOURCE_DIR}/src/inc/msquic.h" AND CMAKE_HOST_SYSTEM_NAME STREQUAL "Linux")
    # Where the C compiler looks by default (find_file cannot run yet: a toolchain file is
    # read before CMake knows the platform's search paths).
    set(lttng_found OFF)
    string(REPLACE ":" ";" include_dirs "$ENV{CPATH}:$ENV{C_INCLUDE_PATH}")
    file(GLOB multiarch_dirs LIST_DIRECTORIES true /usr/include/*-linux-gnu*)
    foreach(dir IN LISTS include_dirs multiarch_dirs ITEMS /usr/local/include /usr/include)
        if(dir AND EXISTS "${dir}/lttng/ust-config.h")
            set(lttng_found ON)
        endif()
    endforeach()
    if(NOT lttng_found)
        message(FATAL_ERROR "msquic-peer builds msquic with LTTng logging, as Microsoft builds "
            "it for Linux (test-fixtures/msquic-peer/msquic-logging.cmake): install LTTng-UST's "
            "headers (Debian, Ubuntu: liblttng-ust-dev; Fedora: lttng-ust-devel)")
    endif()
    set(QUIC_ENABLE_LOGGING ON CACHE BOOL "msquic logging, as Microsoft's Linux builds" FORCE)
    set(QUIC_LOGGING_TYPE "lttng" CACHE STRING "msquic logging backend" FORCE)
endif()
