#!/usr/bin/env bash
# The QUIC Interop Runner's endpoint: neqo-server or neqo-client for one test case.
#
# The runner sets ROLE (client|server), TESTCASE and, for a client, REQUESTS (URLs separated
# by spaces); SSLKEYLOGFILE and QLOGDIR when it wants keys and qlogs. Outside the runner's
# container every path and the port can be set too, so that the script runs on a plain
# machine (test-fixtures' `interop --cases` runs it so):
#   WWW (/www)          what the server serves
#   DOWNLOADS (/downloads)  where the client saves what it fetched
#   CERTS (/certs)      the server's cert.pem and priv.key
#   PORT (443)          the server's UDP port (0: any; it says which on stdout)
#   NEQO_BIN            the directory holding neqo-server and neqo-client (default: PATH)
#   REPORTS             a directory for the JSON reports: server.json, client-N.json (N from 1,
#                       one per client process)
# Exit code 127: the test case is not supported (docs/guides/interop.md says why).
set -euo pipefail

WWW=${WWW:-/www}
DOWNLOADS=${DOWNLOADS:-/downloads}
CERTS=${CERTS:-/certs}
PORT=${PORT:-443}
bin() { if [ -n "${NEQO_BIN:-}" ]; then echo "$NEQO_BIN/$1"; else echo "$1"; fi; }

# In the runner's container (the network simulator's endpoint image): routes through the
# simulator, and a client waits until the simulator is up.
if [ -x /setup.sh ]; then
    /setup.sh
    if [ "${ROLE:-}" = client ] && [ -x /wait-for-it.sh ]; then
        /wait-for-it.sh sim:57832 -s -t 30
    fi
fi

case "${TESTCASE:-}" in
    handshake | transfer | longrtt | multiplexing | chacha20 | retry | resumption | zerortt | \
        http3 | keyupdate | ecn | amplificationlimit | blackhole | handshakeloss | transferloss | \
        handshakecorruption | transfercorruption | ipv6 | rebind-port | rebind-addr) ;;
    *)
        # v2, connectionmigration and any case added after these.
        echo "run_endpoint.sh: test case ${TESTCASE:-(none)} not supported" >&2
        exit 127
        ;;
esac

# The idle and handshake timeouts. quinn-proto's probe timeout starts at 1 s before the first
# RTT sample and doubles, so a minute gives a lost flight six tries (at 0, 1, 3, 7, 15 and
# 31 s). Under the handshake cases' 30 % loss or corruption both ways, six failed tries in a
# row ended about one connection in 200 in this project's CI (two of 39 runs of 10); five
# minutes gives nine tries.
case "${TESTCASE:-}" in
    handshakeloss | handshakecorruption) timeout=300 ;;
    *) timeout=60 ;;
esac
common=(--idle-timeout "$timeout")
# The runner's cases speak hq-interop, but for http3: HTTP/3 (RFC 9114).
if [ "$TESTCASE" = http3 ]; then
    alpn=h3
else
    alpn=hq-interop
fi
if [ -n "${QLOGDIR:-}" ]; then
    common+=(--qlog-dir "$QLOGDIR")
fi

case "${ROLE:-}" in
    server)
        args=(--listen "[::]:$PORT" --root "$WWW" --cert "$CERTS/cert.pem" --key "$CERTS/priv.key"
            --alpn "$alpn")
        # Retry only where the case asks for it: under `auto` a busy server would send one
        # where the runner counts the handshake's packets.
        if [ "$TESTCASE" = retry ]; then
            args+=(--retry always)
        else
            args+=(--retry never)
        fi
        # A handshake may take as long as the idle timeout: under the loss and corruption
        # cases its flights are lost again and again (the default 5 s guards a server on the
        # open Internet against half-open connections).
        args+=(--handshake-timeout "$timeout")
        if [ -n "${REPORTS:-}" ]; then
            args+=(--json "$REPORTS/server.json")
        fi
        # The runner asks for the secrets (for its captures) by setting SSLKEYLOGFILE; the
        # server writes them only when told to.
        if [ -n "${SSLKEYLOGFILE:-}" ]; then
            args+=(--keylog)
        fi
        # exec: the runner's (or the harness') SIGTERM reaches the server, which then writes
        # its report.
        exec "$(bin neqo-server)" "${args[@]}" "${common[@]}"
        ;;
    client)
        read -r -a urls <<<"${REQUESTS:-}"
        if [ ${#urls[@]} -eq 0 ]; then
            echo "run_endpoint.sh: REQUESTS is empty" >&2
            exit 1
        fi
        args=(--insecure --alpn "$alpn" --output-dir "$DOWNLOADS" --no-progress)
        case "$TESTCASE" in
            multiplexing | transfer) args+=(--parallel) ;;
            chacha20) args+=(--cipher-suite chacha20) ;;
            keyupdate) args+=(--key-update) ;;
            # Two connections: the second resumes with the first's session ticket, and for
            # zerortt makes its requests in 0-RTT. Every request is made on both.
            resumption | zerortt) args+=(--connections 2 --parallel) ;;
        esac
        n=0
        client() {
            n=$((n + 1))
            local report=()
            if [ -n "${REPORTS:-}" ]; then
                report=(--json "$REPORTS/client-$n.json")
            fi
            "$(bin neqo-client)" "${args[@]}" "${common[@]}" "${report[@]}" "$@"
        }
        case "$TESTCASE" in
            # One connection per request: the handshake is what these cases impair.
            handshakeloss | handshakecorruption)
                for url in "${urls[@]}"; do
                    client "$url"
                done
                ;;
            *) client "${urls[@]}" ;;
        esac
        ;;
    *)
        echo "run_endpoint.sh: ROLE must be client or server, not ${ROLE:-(unset)}" >&2
        exit 1
        ;;
esac
