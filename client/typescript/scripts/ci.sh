#!/usr/bin/env bash
# ci.sh - what ctest's sdk_typescript runs (tests/CMakeLists.txt): `npm ci` from the committed
# lockfile (integrity-checked; the npm cache lets repeats run offline), `npm run build`
# (protoc + ts-proto, then tsc) and `npm test` against CG_SERVER_BIN with the services in
# CG_TEST_PG_DSN / CG_TEST_REDIS_URL (started by scripts/run-tests.mjs when unset).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v npm >/dev/null || { echo "sdk_typescript: npm is needed (scripts/deps.sh build)" >&2; exit 1; }
npm ci --prefer-offline --no-audit --no-fund --loglevel=error
npm run --silent build
npm test
