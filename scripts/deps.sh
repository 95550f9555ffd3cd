#!/usr/bin/env bash
# deps.sh - install the Debian 12 packages ctxguard needs to build, test and run.
#
# Idempotent and fast: when every package is already installed it only asks dpkg and
# exits. Otherwise it runs `apt-get update` once and installs what is missing, without
# recommends (so every package a step needs is named here, never assumed to come along),
# non-interactively. As root it runs apt-get directly; otherwise through sudo when sudo is
# there, else it prints the command to run and fails.
#
#   scripts/deps.sh [GROUP...]          install what GROUPs need (default: all)
#   scripts/deps.sh --check [GROUP...]  exit 1 (and list them) if any package is missing
#   scripts/deps.sh --list [GROUP...]   print the packages, one a line
#
# Groups: build (build, `make run` and `make test`), dev (fuzzing, sanitizers, `make format`,
# benchmarks), image (`make image`), chart (`make chart-check`); `all` is every group.
set -euo pipefail

# Building, running and testing: the compiler and CMake, gRPC C core and protobuf-c with the
# .proto files they compile (libprotobuf-dev ships google/protobuf/descriptor.proto, which
# protobuf-compiler only recommends), the store, crypto, JSON and HTTP libraries
# (libmicrohttpd: the listener of /metrics and the probes), the throwaway PostgreSQL and
# Redis, python3 (run.sh reads the CLI's JSON with it; fetch_tokens.sh converts the rank data)
# with python3-protobuf (cmake/gen_methods.py writes the method table from the compiled
# protos), the CA certificates npm's HTTPS needs, iproute2 (ss: which ports are free); for the
# tests Criterion, Python grpcio and protobuf (stubs from the system protoc and grpc_tools),
# tzdata (zoneinfo in the reset tests), the openssl CLI (the TLS tests make their
# certificates) and prometheus (promtool checks /metrics; tests/e2e/test_http.py has a real
# Prometheus scrape the server; tests/unit/test_dashboard.py runs the dashboard's queries on
# one) with python3-yaml (the tests read the alert rules), chromium, chromium-driver and
# python3-selenium (tests/e2e/test_console.py drives the console in a headless browser); for
# the SDKs the google/rpc status protos
# (golang-github-gogo-googleapis-dev ships the standard status.proto and error_details.proto),
# pip, venv, hatchling and build (the Python package installs and builds offline). Node.js
# and npm are handled below.
BUILD_PACKAGES=(
    build-essential cmake pkg-config
    libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libprotobuf-dev
    grpc-proto golang-github-gogo-googleapis-dev
    libpq-dev libhiredis-dev libssl-dev libjansson-dev libyajl-dev libcurl4-openssl-dev
    libmicrohttpd-dev
    postgresql redis-server
    python3 ca-certificates iproute2
    libcriterion-dev python3-grpcio python3-grpc-tools python3-protobuf tzdata openssl prometheus
    python3-yaml chromium chromium-driver python3-selenium
    python3-pip python3-venv python3-hatchling python3-build golang-github-gogo-googleapis-dev
)
# Fuzz and sanitizer builds, `make format`, the load generator of the benchmarks.
DEV_PACKAGES=(clang libclang-rt-14-dev clang-format nghttp2-client)
# `make image`: buildah builds the Containerfile; mmdebstrap makes the base image when
# debian:bookworm-slim is not in local storage.
IMAGE_PACKAGES=(buildah mmdebstrap uidmap python3)
# `make chart-check`: Go's text/template with sprig (helm's template language) renders the
# chart; the Kubernetes API schemas and their validator come from npm (pinned in a lockfile);
# promtool (prometheus) checks the rendered PrometheusRule's rules.
CHART_PACKAGES=(golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev prometheus)

GROUPS_WANTED=()
MODE=install
for arg in "$@"; do
    case $arg in
    --check) MODE=check ;;
    --list) MODE=list ;;
    build | dev | image | chart | all) GROUPS_WANTED+=("$arg") ;;
    *)
        echo "deps: unknown argument '$arg' (groups: build dev image chart all)" >&2
        exit 2
        ;;
    esac
done
((${#GROUPS_WANTED[@]} > 0)) || GROUPS_WANTED=(all)

PACKAGES=()
for group in "${GROUPS_WANTED[@]}"; do
    case $group in
    build) PACKAGES+=("${BUILD_PACKAGES[@]}") ;;
    dev) PACKAGES+=("${BUILD_PACKAGES[@]}" "${DEV_PACKAGES[@]}") ;;
    image) PACKAGES+=("${IMAGE_PACKAGES[@]}") ;;
    chart) PACKAGES+=("${CHART_PACKAGES[@]}") ;;
    all) PACKAGES+=("${BUILD_PACKAGES[@]}" "${DEV_PACKAGES[@]}" "${IMAGE_PACKAGES[@]}"
        "${CHART_PACKAGES[@]}") ;;
    esac
done
mapfile -t PACKAGES < <(printf '%s\n' "${PACKAGES[@]}" | awk '!seen[$0]++')

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

if [[ $MODE == list ]]; then
    printf '%s\n' "${PACKAGES[@]}"
    exit 0
fi

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

if [[ $MODE == check ]]; then
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
