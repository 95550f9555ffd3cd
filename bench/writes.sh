#!/usr/bin/env bash
# writes.sh - durable budget writes: Reserve+Commit pairs against pgbench single-row UPDATEs
# on the same PostgreSQL, in the same run, with group commit (write_batching) on and off.
#
#   bench/writes.sh                  clients 16 and 64, BENCH_SECONDS (default 8) each
#   BENCH_SECONDS=4 bench/writes.sh
#
# PostgreSQL here is durable (fsync and synchronous_commit on: a created cluster under
# .run/bench-durable, unlike the --fast one of bench/run.sh), since "a success reply means
# committed" is what is measured. Prints one row per point: per second, p50/p99 µs, and the
# ratio to pgbench at the same client count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
SECONDS_PER_RUN=${BENCH_SECONDS:-8}
DIR=.run/bench-durable
OUT=bench/out
mkdir -p "$OUT"
[[ -x $BUILD/bin/ctxguard && -x $BUILD/bin/bench_budget ]] ||
    { echo "bench: build first (make build)" >&2; exit 1; }

scripts/services.sh start "$DIR" >/dev/null
# shellcheck disable=SC1090
source "$DIR/env"
[[ $(psql -X -At -d "$CTXGUARD_PG_DSN" -c 'SHOW fsync') == on ]] ||
    { echo "bench: $DIR has fsync off; remove it (scripts/services.sh destroy $DIR)" >&2; exit 1; }

PGBENCH=/usr/lib/postgresql/15/bin/pgbench
PGURL=${CTXGUARD_PG_DSN%/*}/pgbench
psql -X -q -d "$CTXGUARD_PG_DSN" -c 'SET client_min_messages = warning' -c 'DROP DATABASE IF EXISTS pgbench' -c 'CREATE DATABASE pgbench' >/dev/null
"$PGBENCH" -q -i -s 4 "$PGURL" >/dev/null 2>&1
printf '\\set aid random(1, 400000)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n' \
    >"$OUT/single_update.sql"

SERVER_PID=
stop_server() {
    [[ -n $SERVER_PID ]] || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}
trap stop_server EXIT

# start_server BATCHING -> sets PORT and KEY
start_server() {
    local log=$OUT/server-writes-$1.log admin
    admin=bench-admin-key-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    : >"$log"
    CTXGUARD_LISTEN=127.0.0.1:0 CTXGUARD_ADMIN_KEY=$admin CTXGUARD_LOG_LEVEL=info \
        CTXGUARD_WRITE_BATCHING=$1 "$BUILD/bin/ctxguard" >"$log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 400); do
        grep -q 'reachable: SERVING' "$log" && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.05
    done
    PORT=$(grep -m1 -o 'msg=listening.* port=[0-9]*' "$log" | sed 's/.*port=//')
    local ctl=("$BUILD/bin/ctxguardctl" --target "127.0.0.1:$PORT") tenant
    tenant=$(CTXGUARD_ADMIN_KEY=$admin "${ctl[@]}" --json tenant create "writes-$1-$$" |
        /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("tenant_id") or d["tenant"]["tenant_id"])')
    KEY=$(CTXGUARD_ADMIN_KEY=$admin "${ctl[@]}" --json key create "$tenant" --name bench |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
    "$BUILD/bin/bench_budget" setup "127.0.0.1:$PORT" "$KEY" benchw >/dev/null
}

# pairs CLIENTS -> "per_s p50 p99"
pairs() {
    local line
    line=$("$BUILD/bin/bench_budget" reserve-commit "127.0.0.1:$PORT" "$KEY" benchw "$1" "$SECONDS_PER_RUN")
    echo "  ($line)" >&2
    printf '%s %s %s\n' "$(sed -n 's/.*pairs_per_s=\([0-9.]*\).*/\1/p' <<<"$line")" \
        "$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")" \
        "$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")"
}

ratio() { /usr/bin/python3 -c "print(f'{$1/$2:.2f}' if $2 else 'n/a')"; }

printf '%-36s %7s %10s %9s %9s %7s\n' 'durable writes' clients 'per_s' 'p50_us' 'p99_us' ratio
for clients in 16 64; do
    tps=$("$PGBENCH" -n -c "$clients" -j 2 -T "$SECONDS_PER_RUN" -f "$OUT/single_update.sql" "$PGURL" 2>/dev/null |
          sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -n 1)
    printf '%-36s %7d %10.0f %9s %9s %7s\n' 'pgbench single-row UPDATE' "$clients" "$tps" - - 1.00
    for batching in true false; do
        start_server "$batching"
        read -r pps p50 p99 < <(pairs "$clients")
        stop_server
        label="Reserve+Commit pairs (batching $([[ $batching == true ]] && echo on || echo off))"
        printf '%-36s %7d %10.0f %9s %9s %7s\n' "$label" "$clients" "$pps" "$p50" "$p99" "$(ratio "$pps" "$tps")"
    done
done
