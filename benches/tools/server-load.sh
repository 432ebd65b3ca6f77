#!/usr/bin/env bash
# The cost of one server under many msquic clients, one process each, as `compare stacks` runs
# them, for loads and profiles by hand:
#
#   benches/tools/server-load.sh neqo|msquic PROCESSES BYTES REQUESTS [SERVER ARGUMENTS...]
#
# starts `neqo-server` (with SERVER ARGUMENTS) or `msquic-peer server` on 127.0.0.1, then
# PROCESSES `msquic-peer client` processes at once, each downloading /BYTES REQUESTS times one
# after another, and prints the server's CPU seconds (user and system, from /proc) per GB
# downloaded, its peak RSS, the clients that failed and, for neqo-server, the datagrams it
# received and its send syscalls per GB (from its --json report). A profile: run
# `perf record -g -p PID` on the PID it prints. Binaries come from target/release
# (`cargo build --release -p neqo-bin` and `cargo build --release -p msquic-peer --features
# msquic`), or from $BIN for neqo-server; $MSQUIC_SERVER names another msquic-peer binary for
# the msquic server (the clients stay target/release's), to compare two builds of it.
set -euo pipefail

usage() {
    sed -n '5,5p' "$0" | sed 's/^# *//' >&2
    exit 2
}
[ $# -ge 4 ] || usage
server=$1 processes=$2 bytes=$3 requests=$4
shift 4
case $server in neqo | msquic) ;; *) usage ;; esac
for n in "$processes" "$bytes" "$requests"; do
    [[ $n =~ ^[1-9][0-9]{0,9}$ ]] || { echo "not a positive count: $n" >&2; exit 2; }
done
[ "$processes" -le 1024 ] || { echo "at most 1024 client processes" >&2; exit 2; }
[ "$requests" -le 1000 ] || { echo "at most 1000 requests each" >&2; exit 2; }

root=$(cd "$(dirname "$0")/../.." && pwd)
peer=$root/target/release/msquic-peer
neqo=${BIN:-$root/target/release}/neqo-server
msquic_server=${MSQUIC_SERVER:-$peer}
for b in "$peer" "$neqo" "$msquic_server"; do
    [ -x "$b" ] || { echo "missing $b: build it first (see the header)" >&2; exit 2; }
done

sp=
work=$(mktemp -d)
trap '[ -z "$sp" ] || kill "$sp" 2>/dev/null || true; rm -rf "$work"' EXIT
# A port the kernel picks: bind, read it back, release it for the server.
port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "$server" = neqo ]; then
    "$neqo" --listen "127.0.0.1:$port" --alpn hq-interop --json "$work/report.json" "$@" \
        >"$work/server.out" 2>&1 &
else
    "$msquic_server" server --listen "127.0.0.1:$port" --alpn hq-interop "$@" >"$work/server.out" 2>&1 &
fi
sp=$!
echo "server PID $sp on 127.0.0.1:$port" >&2
listening=
for _ in $(seq 100); do
    ss -Hlun "sport = :$port" | grep -q . && { listening=1; break; }
    kill -0 "$sp" 2>/dev/null || { cat "$work/server.out" >&2; exit 1; }
    sleep 0.05
done
[ -n "$listening" ] || { echo "the server is not listening after 5 s" >&2; cat "$work/server.out" >&2; exit 1; }

pids=()
for _ in $(seq "$processes"); do
    timeout 300 "$peer" client "https://127.0.0.1:$port/$bytes" --insecure -n "$requests" \
        >/dev/null 2>&1 &
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done

# utime and stime are fields 14 and 15 of /proc/PID/stat, in clock ticks; the process name
# (field 2) may hold spaces, so count from the last parenthesis.
read -r ut st < <(sed 's/.*) //' "/proc/$sp/stat" | awk '{print $12, $13}')
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$sp/status")
kill -TERM "$sp"
wait "$sp" 2>/dev/null || true
ticks=$(getconf CLK_TCK)
total=$((processes * bytes * requests))
received=-
if [ -f "$work/report.json" ]; then
    received=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["socket"]
gb = int(sys.argv[2]) / 1e9
print("%d datagrams received, %d send syscalls per GB" % (r["rx"]["datagrams"] / gb, r["tx"]["syscalls"] / gb))' \
        "$work/report.json" "$total")
fi
awk -v u="$ut" -v s="$st" -v t="$ticks" -v b="$total" -v h="$hwm" -v f="$failed" -v n="$server" -v r="$received" \
    'BEGIN { printf "%s: %.3f CPU s/GB, peak RSS %.1f MB, %d client(s) failed; %s\n", n, (u + s) / t / (b / 1e9), h * 1024 / 1e6, f, r }'
