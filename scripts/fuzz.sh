#!/usr/bin/env bash
# fuzz.sh - `make fuzz`: build the libFuzzer targets with clang and run each for a while.
#
#   scripts/fuzz.sh                          every target, FUZZ_SECONDS (60) each
#   FUZZ_SECONDS=300 FUZZ_TARGETS='fuzz_json fuzz_proto' scripts/fuzz.sh
#
# Targets are the executables named fuzz_* that the CG_FUZZ=ON build (build-fuzz/)
# makes. Seeds: tests/fuzz/corpus/<target>/ when present; the growing corpus is kept in
# build-fuzz/corpus/<target>/ and crashes go to build-fuzz/artifacts/<target>/.
# Exits non-zero when any target finds a crash, a leak or a timeout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-60}
BUILD_DIR=build-fuzz

scripts/deps.sh dev
CC=clang CXX=clang++ scripts/build.sh "$BUILD_DIR" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCG_FUZZ=ON -DCG_TESTS=OFF

mapfile -t ALL < <(find "$BUILD_DIR" -path "$BUILD_DIR/CMakeFiles" -prune -o \
    -type f -name 'fuzz_*' -perm -u+x -print | sort)
if ((${#ALL[@]} == 0)); then
    echo "fuzz: no fuzz_* executables in $BUILD_DIR (tests/fuzz defines them)" >&2
    exit 1
fi

failed=()
ran=0
for bin in "${ALL[@]}"; do
    name=$(basename "$bin")
    if [[ -n ${FUZZ_TARGETS:-} ]] && ! grep -qw -- "$name" <<<"$FUZZ_TARGETS"; then
        continue
    fi
    corpus=$BUILD_DIR/corpus/$name
    artifacts=$BUILD_DIR/artifacts/$name
    mkdir -p "$corpus" "$artifacts"
    seeds=()
    [[ -d tests/fuzz/corpus/$name ]] && seeds=("tests/fuzz/corpus/$name")
    echo "fuzz: $name for ${FUZZ_SECONDS}s"
    ran=$((ran + 1))
    if ! ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
        UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
        "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "${seeds[@]}" \
        >"$BUILD_DIR/$name.log" 2>&1; then
        failed+=("$name")
        echo "fuzz: $name FAILED; tail of $BUILD_DIR/$name.log:" >&2
        tail -n 40 "$BUILD_DIR/$name.log" >&2
    else
        grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$BUILD_DIR/$name.log" |
            sed "s/^/fuzz: $name /" || true
    fi
done

echo "$((ran - ${#failed[@]})) passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
