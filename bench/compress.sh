#!/usr/bin/env bash
# compress.sh - Compress (no LLM) against the npm context trimmers, one run, same inputs (issue 5).
#
#   bench/compress.sh               build/ (BUILD=...), the conversations generated at build
#                                   time ($BUILD/testdata/conversations; another set with
#                                   CONV_DIR=...), 3 interleaved rounds (COMPRESS_ROUNDS=...)
#
# Installs the peers (bench/peers/package.json, pinned: @langchain/core, @strands-agents/sdk,
# @mastra/core, gpt-tokenizer, and @grpc/grpc-js with @grpc/proto-loader) into bench/out/peers
# once, starts a server (bench/server.sh: throwaway PostgreSQL and Redis in .run/bench-compress),
# then bench/peers/compress_peers.mjs runs, each round, bench_compress (which writes the
# synthetic input and ctxguard's in-process outputs to bench/out/compress), the peers, and
# ctxguard's Compress through gRPC (the round trip), on the same inputs and to the same target
# per conversation (37.5 % of its exact count, capped at 48,000), scores every output alike and
# prints the table: p50 times, target met, invalid outputs, facts kept, the speed ratio. Per
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
# A server for the round-trip rows (its own throwaway PostgreSQL and Redis, no LLM).
DIR=.run/bench-compress
# shellcheck source=bench/server.sh
source bench/server.sh
trap bench_server_stop EXIT
CTXGUARD_LLM_BASE_URL='' bench_server_start || exit 1
echo "compress: ctxguard and peers (node $(node --version)), ${COMPRESS_ROUNDS:-3} rounds..." >&2
CG_BENCH_TARGET=127.0.0.1:$PORT CG_BENCH_KEY=$KEY CG_PROTO_DIRS=proto:/usr/include \
    node bench/peers/compress_peers.mjs "$OUT/peers/node_modules" "$CONV_DIR" "$OUT/compress" \
    "$BUILD/bin/bench_compress" "${COMPRESS_ROUNDS:-3}" >"$OUT/compress.txt"
echo "compress: server CPU $(server_cpu_ms) ms in all" >&2
sed -n '/^Compress to/,$p' "$OUT/compress.txt"
