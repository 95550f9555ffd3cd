#!/usr/bin/env bash
# writes.sh - durable budget writes: Reserve+Commit pairs against pgbench single-row UPDATEs
# on the same PostgreSQL, in the same run, with group commit (write_batching) on and off.
#
#   bench/writes.sh                  clients 16 and 64, BENCH_SECONDS (default 8) each
#   BENCH_SECONDS=4 bench/writes.sh
#
# PostgreSQL here is durable (fsync and synchronous_commit on: a created cluster under
# .run/bench-durable, unlike the --fast one of bench/run.sh), since "a success reply means
# committed" is what is measured. Prints one row per point: per second, p50/p99 µs, the
# ratio to pgbench at the same client count, and CPU time per operation (a pgbench
# transaction, a Reserve+Commit pair): of the whole machine while it ran (busy time in
# /proc/stat, every process), and for pairs also of the server and of the load generator
# alone. With the cores saturated, CPU per operation is what bounds the rate.
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
    KEY=$(CTXGUARD_ADMIN_KEY=$admin "${ctl[@]}" --json key create "$tenant" --name bench --role admin |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
    "$BUILD/bin/bench_budget" setup "127.0.0.1:$PORT" "$KEY" benchw >/dev/null
}

# CPU time in ms: busy_ms (the whole machine, from /proc/stat) and proc_ms PID.
TICK_MS=$((1000 / $(getconf CLK_TCK)))
busy_ms() { awk -v t="$TICK_MS" '/^cpu /{ print ($2 + $3 + $4 + $7 + $8 + $9) * t; exit }' /proc/stat; }
proc_ms() { awk -v t="$TICK_MS" '{ sub(/^.*\) /, ""); print ($12 + $13) * t }' "/proc/$1/stat"; }

# per_op MS COUNT -> µs per operation
per_op() { /usr/bin/python3 -c "print(f'{$1 * 1000 / $2:.0f}' if $2 else 'n/a')"; }

# pairs CLIENTS -> "per_s p50 p99 machine_us server_us client_us" (CPU µs per pair)
pairs() {
    local line b0 s0 b1 s1 n
    b0=$(busy_ms)
    s0=$(proc_ms "$SERVER_PID")
    line=$("$BUILD/bin/bench_budget" reserve-commit "127.0.0.1:$PORT" "$KEY" benchw "$1" "$SECONDS_PER_RUN")
    b1=$(busy_ms)
    s1=$(proc_ms "$SERVER_PID")
    echo "  ($line)" >&2
    n=$(sed -n 's/^pairs=\([0-9]*\).*/\1/p' <<<"$line")
    printf '%s %s %s %s %s %s\n' "$(sed -n 's/.*pairs_per_s=\([0-9.]*\).*/\1/p' <<<"$line")" \
        "$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")" \
        "$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")" \
        "$(per_op $((b1 - b0)) "$n")" "$(per_op $((s1 - s0)) "$n")" \
        "$(per_op "$(sed -n 's/.*client_cpu_ms=\([0-9]*\).*/\1/p' <<<"$line")" "$n")"
}

ratio() { /usr/bin/python3 -c "print(f'{$1/$2:.2f}' if $2 else 'n/a')"; }

row() { printf '%-36s %7s %10s %9s %9s %7s %10s %9s %9s\n' "$@"; }
row 'durable writes' clients 'per_s' 'p50_us' 'p99_us' ratio 'cpu_us/op' server client
for clients in 16 64; do
    b0=$(busy_ms)
    out=$("$PGBENCH" -n -c "$clients" -j 2 -T "$SECONDS_PER_RUN" -f "$OUT/single_update.sql" "$PGURL" 2>/dev/null)
    b1=$(busy_ms)
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -n 1)
    txs=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    row 'pgbench single-row UPDATE' "$clients" "$(printf '%.0f' "$tps")" - - 1.00 \
        "$(per_op $((b1 - b0)) "${txs:-0}")" - -
    for batching in true false; do
        start_server "$batching"
        read -r pps p50 p99 cpu scpu ccpu < <(pairs "$clients")
        stop_server
        label="Reserve+Commit pairs (batching $([[ $batching == true ]] && echo on || echo off))"
        row "$label" "$clients" "$(printf '%.0f' "$pps")" "$p50" "$p99" "$(ratio "$pps" "$tps")" \
            "$cpu" "$scpu" "$ccpu"
    done
done
