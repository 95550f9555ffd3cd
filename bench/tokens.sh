#!/usr/bin/env bash
# tokens.sh - the exact token counter against the npm peers, single thread, same corpus.
#
#   bench/tokens.sh                 build/ (BUILD=...), an 8 MB mixed corpus (TOKENS_MB=...)
#
# Installs tiktoken, gpt-tokenizer and ai-tokenizer (bench/peers/package.json, pinned) into
# bench/out/peers once, builds the corpus from generated conversations and documents and
# the repository's files (tests/tokens/make_corpus.py --real), runs the peers
# (bench/peers/bench_peers.mjs) and then bench_tokens, which prints the table with the
# ratios. See bench/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
OUT=bench/out
PARTS=${TOKENS_PARTS:-8}
mkdir -p "$OUT/peers"
[[ -x $BUILD/bin/bench_tokens ]] || { echo "tokens: build first (cmake --build $BUILD)" >&2; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null ||
    { echo "tokens: node and npm are needed (apt-get install nodejs npm)" >&2; exit 1; }
if ! cmp -s bench/peers/package.json "$OUT/peers/package.json" ||
    [[ ! -d $OUT/peers/node_modules/ai-tokenizer ]]; then
    cp bench/peers/package.json "$OUT/peers/package.json"
    (cd "$OUT/peers" && npm install --silent --no-package-lock >/dev/null)
fi
/usr/bin/python3 tests/tokens/make_corpus.py --real "$OUT/tokens-corpus.records" "${TOKENS_MB:-8}"
echo "tokens: peers (node $(node --version))..." >&2
node bench/peers/bench_peers.mjs "$OUT/peers/node_modules" "$OUT/tokens-corpus.records" "$PARTS" \
    >"$OUT/tokens-peers.txt"
"$BUILD/bin/bench_tokens" --corpus "$OUT/tokens-corpus.records" --parts "$PARTS" \
    --peers "$OUT/tokens-peers.txt"
