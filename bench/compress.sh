#!/usr/bin/env bash
# compress.sh - Compress (no LLM) against the npm context trimmers, one run, same inputs (issue 5).
#
#   bench/compress.sh               build/ (BUILD=...), the conversations generated at build
#                                   time ($BUILD/testdata/conversations; another set with
#                                   CONV_DIR=...), 3 interleaved rounds (COMPRESS_ROUNDS=...)
#
# Installs the peers (bench/peers/package.json, pinned: @langchain/core, @strands-agents/sdk,
# @mastra/core, gpt-tokenizer) into bench/out/peers once, then bench/peers/compress_peers.mjs
# runs, each round, bench_compress (which writes the synthetic input and ctxguard's outputs to
# bench/out/compress) and the peers on the same inputs, scores every output alike and prints
# the table: p50 times, target met, invalid outputs, facts kept, the speed ratio. Per
# conversation lines and ctxguard's own report go to bench/out/compress.txt. See bench/README.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
OUT=bench/out
CONV_DIR=${CONV_DIR:-$BUILD/testdata/conversations}
mkdir -p "$OUT/peers" "$OUT/compress"
[[ -x $BUILD/bin/bench_compress ]] ||
    { echo "compress: build first (cmake --build $BUILD --target bench_compress)" >&2; exit 1; }
compgen -G "$CONV_DIR/conv-*.json" >/dev/null ||
    { echo "compress: no conv-*.json in $CONV_DIR" >&2; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null ||
    { echo "compress: node and npm are needed (apt-get install nodejs npm)" >&2; exit 1; }
if ! cmp -s bench/peers/package.json "$OUT/peers/package.json" ||
    [[ ! -d $OUT/peers/node_modules/@strands-agents/sdk ]]; then
    cp bench/peers/package.json "$OUT/peers/package.json"
    (cd "$OUT/peers" && npm install --silent --no-package-lock --no-audit --no-fund >/dev/null)
fi
echo "compress: ctxguard and peers (node $(node --version)), ${COMPRESS_ROUNDS:-3} rounds..." >&2
node bench/peers/compress_peers.mjs "$OUT/peers/node_modules" "$CONV_DIR" "$OUT/compress" \
    "$BUILD/bin/bench_compress" "${COMPRESS_ROUNDS:-3}" >"$OUT/compress.txt"
sed -n '/^Compress to/,$p' "$OUT/compress.txt"
