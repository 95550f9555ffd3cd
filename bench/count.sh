#!/usr/bin/env bash
# count.sh - CountTokens through gRPC against the exact counter in-process, on the same
# conversation, in one run (issue 16, item 8: the round trip should reach >= 0.8x).
#
#   bench/count.sh            build/ (BUILD=...), the largest conversation of the generated set
#                             (FILE=... for another OpenAI JSON conversation), 5 interleaved
#                             rounds (COUNT_ROUNDS=...)
#
# Starts a server (bench/server.sh: throwaway PostgreSQL and Redis in .run/bench-count), then
# each round runs bench_count (the counter over the conversation's parts in-process, and the
# JSON read + count the server does, no transport) and bench/peers/count_rpc.mjs (the
# CountTokens round trip from node, @grpc/grpc-js); prints each round and the medians, and
# the ratio of the round trip's MB/s to the counter's. The peers' node_modules come from
# bench/compress.sh or bench/tokens.sh (bench/out/peers).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
OUT=bench/out
DIR=.run/bench-count
ROUNDS=${COUNT_ROUNDS:-5}
FILE=${FILE:-$(ls -S "$BUILD"/testdata/conversations/conv-*.json | head -1)}
[[ -x $BUILD/bin/bench_count ]] || { echo "count: build first (make build)" >&2; exit 1; }
[[ -d $OUT/peers/node_modules/@grpc/proto-loader ]] ||
    { echo "count: run bench/compress.sh once (it installs bench/out/peers)" >&2; exit 1; }
mkdir -p "$OUT"
# The request as the node client sends it: the conversation's messages and tools only.
REQ=$OUT/count-request.json
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); b={"messages":d["messages"]}
if d.get("tools"): b["tools"]=d["tools"]
json.dump(b,open(sys.argv[2],"w"),ensure_ascii=False,separators=(",",":"))' "$FILE" "$REQ"
# shellcheck source=bench/server.sh
source bench/server.sh
trap bench_server_stop EXIT
bench_server_start || exit 1
export CG_BENCH_TARGET=127.0.0.1:$PORT CG_BENCH_KEY=$KEY CG_PROTO_DIRS=proto:/usr/include
echo "count: $FILE as $REQ ($(stat -c %s "$REQ") bytes), $ROUNDS rounds" >&2
: >"$OUT/count.txt"
for ((r = 1; r <= ROUNDS; r++)); do
    "$BUILD/bin/bench_count" "$REQ" | tee -a "$OUT/count.txt"
    node bench/peers/count_rpc.mjs "$OUT/peers/node_modules" "$REQ" | tee -a "$OUT/count.txt"
done
/usr/bin/python3 - "$OUT/count.txt" <<'PY'
import re, statistics, sys
rows = [dict(kv.split("=") for kv in l.split()[1:] if "=" in kv) | {"kind": l.split()[0]}
        for l in open(sys.argv[1]) if l.startswith(("COUNT", "RPC"))]
med = lambda kind, key: statistics.median(float(r[key]) for r in rows if r["kind"] == kind)
counter, read_count, rpc = med("COUNT", "counter_mbps"), med("COUNT", "read_count_mbps"), med("RPC", "mbps")
print(f"medians: counter in-process {counter:.1f} MB/s, JSON read + count in-process {read_count:.1f} MB/s, "
      f"CountTokens through gRPC {rpc:.1f} MB/s")
print(f"ratio gRPC / counter {rpc / counter:.2f}x (target >= 0.8x); gRPC / read+count {rpc / read_count:.2f}x")
PY
