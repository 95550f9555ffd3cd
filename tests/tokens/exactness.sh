#!/usr/bin/env bash
# exactness.sh - ctxguard's token counts against npm tiktoken, both encodings, with and
# without special tokens, over a corpus of generated conversations and documents, the
# repository's own files and generated edge cases (tests/tokens/make_corpus.py; an outside
# set of conversations is added only when $CG_EXTRA_CONVERSATIONS names one).
#
#   tests/tokens/exactness.sh TOK_COUNT_BIN WORK_DIR
#
# Installs tiktoken 1.0.22 (pinned: its regex tables are Unicode 16.0, as ours) from the npm
# registry into WORK_DIR/npm once, with `npm ci` from tests/tokens/reference/package-lock.json,
# which pins its sha512. Passes only with zero mismatches; prints the first ones.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:?usage: exactness.sh TOK_COUNT_BIN WORK_DIR}
work=${2:?usage: exactness.sh TOK_COUNT_BIN WORK_DIR}
python=/usr/bin/python3
[[ -x $python ]] || python=python3
mkdir -p "$work/npm"
if [[ ! -f $work/npm/node_modules/tiktoken/package.json ]] ||
    ! cmp -s "$here/reference/package-lock.json" "$work/npm/package-lock.json"; then
    command -v npm >/dev/null || { echo "exactness: npm is needed (apt-get install npm)" >&2; exit 1; }
    cp "$here/reference/package.json" "$here/reference/package-lock.json" "$work/npm/"
    (cd "$work/npm" && npm ci --loglevel=error --no-audit --no-fund >/dev/null 2>npm.err) ||
        { echo "exactness: npm ci (tiktoken 1.0.22) failed: $(grep -v '^npm error  *at ' "$work/npm/npm.err" | head -n 4)" >&2; exit 1; }
fi
start=$(date +%s)
"$python" "$here/make_corpus.py" "$work/corpus.records" "${CG_EXACTNESS_MB:-8}"
node "$here/ref_counts.js" "$work/npm/node_modules" "$work/corpus.records" >"$work/ref.txt"
"$bin" --records "$work/corpus.records" >"$work/ours.txt"
"$python" - "$work/corpus.records" "$work/ref.txt" "$work/ours.txt" "$start" <<'PY'
import struct, sys, time
data = open(sys.argv[1], "rb").read()
recs, off = [], 0
while off + 4 <= len(data):
    n = struct.unpack_from("<I", data, off)[0]
    recs.append(data[off + 4:off + 4 + n])
    off += 4 + n
ref = open(sys.argv[2]).read().splitlines()
ours = open(sys.argv[3]).read().splitlines()
if len(ref) != len(recs) or len(ours) != len(recs):
    sys.exit(f"exactness: {len(recs)} records but {len(ref)} reference and {len(ours)} own counts")
bad = [i for i in range(len(recs)) if ref[i] != ours[i]]
tokens = sum(int(x) for line in ref for x in line.split())
for i in sorted(bad, key=lambda i: len(recs[i]))[:10]:
    print(f"mismatch record {i}: tiktoken {ref[i]} ctxguard {ours[i]} (cl100k, cl100k+special,"
          f" o200k, o200k+special) text {recs[i][:160]!r}")
print(f"exactness: {len(recs)} records, {len(data) / 1e6:.1f} MB, {tokens} tokens counted 4 ways,"
      f" {len(bad)} mismatches, {time.time() - float(sys.argv[4]):.0f} s")
sys.exit(1 if bad else 0)
PY
