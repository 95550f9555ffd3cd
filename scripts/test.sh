#!/usr/bin/env bash
# test.sh - the whole test suite against throwaway PostgreSQL and Redis.
#
#   scripts/test.sh                   deps, build (build/), services, ctest: unit,
#                                     integration and e2e
#   TEST_LABEL=unit scripts/test.sh   only that label (a regex: 'unit|integration')
#   TEST_REGEX=budget scripts/test.sh only tests whose name matches (ctest -R)
#   CG_SANITIZE=1 scripts/test.sh     the same suite on an ASan+UBSan build in build-asan
#   CTEST_JOBS=N                      ctest parallelism (default 2)
#
# The services live in a fresh .run/test-<pid> (fsync off: these tests claim no
# durability) and are stopped on any exit. The last line is `N passed, N failed`; the
# exit status is non-zero when anything failed (or did not build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

log() { printf 'test: %s\n' "$*" >&2; }

scripts/deps.sh build

if [[ ${CG_SANITIZE:-0} == 1 || ${CG_SANITIZE:-} == ON ]]; then
    BUILD_DIR=build-asan
    scripts/build.sh "$BUILD_DIR" -DCG_SANITIZE=ON
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
    if [[ -z ${LSAN_OPTIONS:-} && -f tests/lsan.supp ]]; then
        # Leaks of third-party libraries at exit, if any, are listed there.
        export LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp:print_suppressions=0
    fi
    # e2e tests start the server: give it (and the other binaries) more time.
    export CG_TEST_SANITIZED=1
else
    BUILD_DIR=build
    scripts/build.sh "$BUILD_DIR"
fi

mkdir -p .run
# What earlier runs left (killed, or kept after a failure), unless their test.sh still runs.
for old in .run/test-*; do
    [[ -e $old ]] || continue
    pid=${old##*/test-}
    pid=${pid%%.*}
    if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
        continue
    fi
    if [[ -d $old ]]; then
        scripts/services.sh destroy "$old" 2>/dev/null || true
    else
        rm -f "$old"
    fi
done

RUN_DIR=$ROOT/.run/test-$$
LOG=$ROOT/.run/test-$$.ctest.log
STATUS=1
cleanup() {
    set +e
    if [[ $STATUS == 0 ]]; then
        scripts/services.sh destroy "$RUN_DIR"
        rm -f "$LOG"
    else
        scripts/services.sh stop "$RUN_DIR"
        log "kept $RUN_DIR (service logs) and $LOG for inspection"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/services.sh start --fast "$RUN_DIR"
# shellcheck disable=SC1091
source "$RUN_DIR/env"
export CG_TEST_RUN_DIR=$RUN_DIR

CTEST_ARGS=(--test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}")
if [[ -n ${TEST_LABEL:-} ]]; then
    CTEST_ARGS+=(-L "^(${TEST_LABEL})\$")
fi
if [[ -n ${TEST_REGEX:-} ]]; then
    CTEST_ARGS+=(-R "$TEST_REGEX")
fi

log "ctest ${CTEST_ARGS[*]}"
set +e
ctest "${CTEST_ARGS[@]}" 2>&1 | tee "$LOG"
CTEST_RC=${PIPESTATUS[0]}
set -e

# ctest's summary: "100% tests passed, 0 tests failed out of 12"; none found: no summary.
TOTAL=0
FAILED=0
summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$LOG" | tail -n 1 || true)
if [[ -n $summary ]]; then
    FAILED=$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$summary")
    TOTAL=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$summary")
elif grep -q 'No tests were found' "$LOG"; then
    log "no tests were found"
fi
PASSED=$((TOTAL - FAILED))
if [[ $CTEST_RC != 0 && $FAILED == 0 ]]; then
    # ctest failed without a failed test (a crash of ctest itself, a bad argument...).
    FAILED=1
fi

if [[ $FAILED == 0 && $CTEST_RC == 0 ]]; then
    STATUS=0
fi
# Stop the services now so that the summary is the last line printed.
cleanup
trap - EXIT
echo "$PASSED passed, $FAILED failed"
exit "$STATUS"
