#!/usr/bin/env bash
# deps.sh - install the Debian 12 packages ctxguard needs to build, test and run.
#
# Idempotent and fast: when every package is already installed it only asks dpkg and
# exits. Otherwise it runs `apt-get update` once and installs what is missing, without
# recommends, non-interactively. As root it runs apt-get directly; otherwise through
# sudo when sudo is there, else it prints the command to run and fails.
#
#   scripts/deps.sh            install what is missing
#   scripts/deps.sh --check    exit 1 (and list them) if any package is missing
set -euo pipefail

PACKAGES=(
    # build
    build-essential cmake pkg-config
    # gRPC C core and protobuf-c
    libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler grpc-proto
    # stores, crypto, JSON, HTTP (the LLM client)
    libpq-dev libhiredis-dev libssl-dev libjansson-dev libyajl-dev
    libcurl4-openssl-dev
    # tests
    libcriterion-dev
    # the throwaway services of `make run` / `make test`
    postgresql redis-server
    # e2e tests and load generation
    nghttp2-client python3-grpcio python3-grpc-tools python3-protobuf
    # fuzz and sanitizer builds, `make format`
    clang libclang-rt-14-dev clang-format
)

missing_packages() {
    # One dpkg-query for all of them; unknown packages are simply absent from its output.
    local installed
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null |
        awk '$2 == "installed" { print $1 }' || true)
    local pkg
    for pkg in "${PACKAGES[@]}"; do
        if ! grep -qxF "$pkg" <<<"$installed"; then
            printf '%s\n' "$pkg"
        fi
    done
}

mapfile -t MISSING < <(missing_packages)
# Node.js and npm fetch the tokenizer's rank data (scripts/fetch_tokens.sh) and the npm
# packages the token tests compare against. Any node >= 18 will do: Debian's when none is
# installed (a machine may have its own, e.g. from nodesource, which must not be replaced).
if ! command -v npm >/dev/null 2>&1; then
    MISSING+=(nodejs npm)
fi
if ((${#MISSING[@]} == 0)); then
    exit 0
fi

if [[ "${1:-}" == "--check" ]]; then
    echo "deps: missing packages: ${MISSING[*]}" >&2
    exit 1
fi

echo "deps: installing ${MISSING[*]}" >&2

APT_ENV=(env DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a)
if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "deps: not root and no sudo; as root run:" >&2
    echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${MISSING[*]}" >&2
    exit 1
fi

# The package lists may be stale (or absent on a fresh image): refresh them once.
"${SUDO[@]}" "${APT_ENV[@]}" apt-get update -q
"${SUDO[@]}" "${APT_ENV[@]}" apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${MISSING[@]}"

mapfile -t STILL < <(missing_packages)
if ((${#STILL[@]} > 0)); then
    echo "deps: still missing after apt-get install: ${STILL[*]}" >&2
    exit 1
fi
echo "deps: all packages installed" >&2
