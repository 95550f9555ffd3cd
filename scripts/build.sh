#!/usr/bin/env bash
# build.sh - configure and build one CMake tree.
#
#   scripts/build.sh [BUILD_DIR] [extra cmake -D options...]
#
# BUILD_DIR defaults to build. BUILD_TYPE (default RelWithDebInfo) sets
# CMAKE_BUILD_TYPE; JOBS (default: nproc) the parallelism. Re-running is cheap: CMake
# and the build are incremental. The binaries land in BUILD_DIR/bin.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR=${1:-build}
shift || true
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" "$@"
cmake --build "$BUILD_DIR" -j"$JOBS"
