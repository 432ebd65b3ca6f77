#!/usr/bin/env python3
"""Split a system-wide profile of one download into CPU seconds per GB, by side and by part.

Record with DWARF call graphs (so that memmove, the allocator and B-tree code are charged to
the crate that called them), then feed `perf script` to this:

    perf record -a -F 1999 --call-graph dwarf,16384 -o perf.data -- CLIENT COMMAND
    perf script -i perf.data -F comm,pid,tid,ip,sym,dso | \\
        python3 benches/tools/perf-split.py --hz 1999 --bytes N [--top K]

The server is the process whose thread names start with `neqo-server` or `tcp-tls 1` (the
TCP+TLS server names a thread after its peer), or the one `--server-pid` names (the msquic
server, whose clients run the same binary: record it alone with `perf record -p PID`); the
client is `neqo-client` or the other `tcp-tls`. A kernel sample counts as the copy between
user memory and socket buffers when its leaf is one of COPY, else as the rest of the kernel. A user sample belongs to the first frame,
from the leaf up, of a crate that owns work (quinn-proto, crypto, rustls, ours, tokio) or of
msquic's C code (`Quic*`, `CxPlat*`; quictls's AEAD as crypto); frames of std, core, alloc,
bytes and the C library pass the sample on to their caller.
"""
import argparse
import collections
import re
import sys

HEAD = re.compile(r'^(\S.*?)\s+(\d+)/(\d+)\s*$')
FRAME = re.compile(r'^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$')
COPY = {'_copy_from_iter', '_copy_to_iter', 'rep_movs_alternative', 'copy_user_generic',
        'memcpy_orig', 'csum_partial_copy_generic'}
PASS_ON = ('core', 'alloc', 'std', 'hashbrown', 'bytes', 'smallvec', 'tinyvec', 'tracing',
           'slab', 'rand', 'rand_core', 'rand_chacha', 'log', 'indexmap', 'either')
CRYPTO_PREFIXES = ('ring_core', 'aes_', 'gcm_', 'aesni', 'chacha', 'poly1305', 'ossl_',
                   'OSSL_', 'EVP_', 'evp_', 'CRYPTO_', 'skip_iv_len')
MSQUIC_PREFIXES = ('Quic', 'CxPlat', 'MsQuic')


def crate(sym):
    s = sym.lstrip('<&*').replace('dyn ', '').replace('mut ', '')
    m = re.match(r'([A-Za-z_][A-Za-z0-9_]*)::', s)
    return m.group(1) if m else None


def owner(sym):
    if sym.startswith(CRYPTO_PREFIXES) or 'vaes' in sym or 'clmul' in sym:
        return 'crypto'
    if sym.startswith(MSQUIC_PREFIXES):
        return 'msquic'
    c = crate(sym)
    if c is None or c in PASS_ON:
        return None
    if c == 'ring':
        return 'crypto'
    if c == 'quinn_proto':
        return 'quinn-proto'
    if c == 'rustls':
        return 'rustls'
    if c.startswith('neqo') or c in ('benches', 'tcp_tls', 'test_fixtures'):
        return 'ours'
    if c in ('tokio', 'mio'):
        return 'tokio'
    return 'other: ' + c


def samples(lines):
    cur = None
    for line in lines:
        if not line.strip():
            if cur:
                yield cur
            cur = None
            continue
        m = HEAD.match(line)
        if m and not line[0].isspace():
            cur = (m.group(1).strip(), int(m.group(2)), [])
            continue
        f = FRAME.match(line)
        if f and cur is not None:
            cur[2].append((f.group(1), f.group(2)))
    if cur:
        yield cur


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--hz', type=float, required=True, help="perf record's -F")
    ap.add_argument('--bytes', type=float, required=True, help='bytes the download moved')
    ap.add_argument('--top', type=int, default=0, help='also list the top K functions per part')
    ap.add_argument('--server-pid', type=int, help='the server process, whatever its name')
    args = ap.parse_args()
    all_samples = list(samples(sys.stdin))
    side_of = {args.server_pid: 'server'} if args.server_pid else {}
    for comm, pid, _ in all_samples:
        if comm.startswith(('neqo-server', 'tcp-tls 1')):
            side_of[pid] = 'server'
    for comm, pid, _ in all_samples:
        if pid not in side_of and (comm.startswith('neqo-client') or comm == 'tcp-tls'):
            side_of[pid] = 'client'
    parts = collections.defaultdict(collections.Counter)
    funcs = collections.defaultdict(collections.Counter)
    for _, pid, frames in all_samples:
        side = side_of.get(pid)
        if side is None or not frames:
            continue
        leaf, dso = frames[0]
        if 'kernel' in dso:
            parts[side]['kernel: copy to/from user memory' if leaf in COPY else 'kernel: the rest'] += 1
            funcs[side + ' kernel'][leaf] += 1
            continue
        own, fn = 'unattributed', None
        for sym, d in frames:
            found = None if 'kernel' in d else owner(sym)
            if found:
                own, fn = found, sym
                break
        if any(k in leaf for k in ('memmove', 'memcpy', 'memset')):
            part = f'{own} (memmove)'
        elif 'btree' in leaf:
            part = f'{own} (B-tree)'
        else:
            part = own
        parts[side][part] += 1
        if fn:
            funcs[f'{side} {own}'][re.sub(r'::h[0-9a-f]{16}$', '', fn)[:110]] += 1
    per_sample = 1.0 / args.hz / (args.bytes / 1e9)
    for side in ('server', 'client'):
        total = sum(parts[side].values())
        print(f'{side}: {total} samples, {total * per_sample:.3f} CPU s/GB')
        for part, n in parts[side].most_common():
            print(f'  {part:40s} {n:6d} {n * per_sample:.3f}')
    for key in sorted(funcs) if args.top else ():
        print(f'-- {key}')
        for fn, n in funcs[key].most_common(args.top):
            print(f'  {n:6d} {n * per_sample:.3f} {fn}')


if __name__ == '__main__':
    main()
