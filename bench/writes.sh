#!/usr/bin/env bash
# writes.sh - durable budget writes: ctxguard's Reserve+Commit pairs against pgbench writing
# the same rows on the same PostgreSQL, in one run, in interleaved rounds.
#
#   bench/writes.sh                   BENCH_SECONDS (default 8) per point, BENCH_ROUNDS (3)
#   BENCH_SECONDS=4 bench/writes.sh
#   BENCH_CLIENTS=64                  clients of every point (pgbench connections, loadgen
#                                     slots: 4 connections x CLIENTS/4 calls in flight)
#   BENCH_PG_EVENTS=0                 pgbench scripts without the scope_events rows (the
#                                     issue's row list); default 1: every row a pair writes
#
# PostgreSQL is durable (fsync and synchronous_commit on: a created cluster under
# .run/bench-durable, not the --fast one of bench/run.sh): a success reply means committed.
# Points, each measured once per round, rounds interleaved (1-tx hot, 1-tx no-hot, 2-tx hot,
# 2-tx no-hot, ctxguard hot, ctxguard no-hot, then again), so that the machine's drift hits
# every point alike; every figure printed is the median over the rounds:
#
#   pgbench -M prepared -c CLIENTS, custom scripts writing exactly the rows of one
#   Reserve+Commit pair of the server (tables, triggers and indexes are the server's own:
#   the scripts run in the server's database, on tenants of their own):
#     1 tx:  BEGIN; lock tenant/session/task rows in order; insert the reservation; settle
#            it, insert the ledger row, update the three counters, append their events;
#            COMMIT
#     2 tx:  as the two RPCs: BEGIN; lock the rows; insert the reservation, update the
#            counters (reserved), append the events; COMMIT; BEGIN; lock the reservation and
#            the rows; settle, ledger, counters (reserved -> used), events; COMMIT
#   hot:     every client in one tenant and one session, each its own task
#   no hot:  every client in a tenant of its own
#   ctxguard: bench/loadgen pairs (Reserve then Commit, both acknowledged) against the server
#   (default configuration: group commit on), the same two layouts (loadgen setup-pairs).
#
# Columns: pairs per second (pgbench: transactions = script runs = pairs), p50/p99 latency
# of a pair in µs, the ratio to the one-transaction script of the same hotness, and CPU
# time per pair in µs of PostgreSQL (every backend: see pg_cpu_ms), of the server, of the
# load generator (pgbench or loadgen) and of the whole machine (/proc/stat busy time, every
# process, other people's included). The targets of issue 15 are printed under the table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build}
SECONDS_PER_RUN=${BENCH_SECONDS:-8}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=${BENCH_CLIENTS:-64}
PG_EVENTS=${BENCH_PG_EVENTS:-1}
DIR=.run/bench-durable
OUT=bench/out
mkdir -p "$OUT"
[[ -x $BUILD/bin/ctxguard && -x $BUILD/bin/loadgen ]] ||
    { echo "bench: build first (make build)" >&2; exit 1; }
((CLIENTS % 4 == 0 && CLIENTS >= 4)) || { echo "bench: BENCH_CLIENTS must be a multiple of 4" >&2; exit 1; }

scripts/services.sh start "$DIR" >/dev/null
# shellcheck disable=SC1090
source "$DIR/env"
[[ $(psql -X -At -d "$CTXGUARD_PG_DSN" -c 'SHOW fsync') == on ]] ||
    { echo "bench: $DIR has fsync off; remove it (scripts/services.sh destroy $DIR)" >&2; exit 1; }
PGBENCH=/usr/lib/postgresql/15/bin/pgbench
[[ -x $PGBENCH ]] || PGBENCH=$(command -v pgbench)
PM_PID=$(head -n 1 "$DIR/pg/data/postmaster.pid")

# ---------------------------------------------------------------- the server -------
SERVER_PID=
stop_server() {
    [[ -n $SERVER_PID ]] || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}
trap stop_server EXIT
LOG=$OUT/server-writes.log
ADMIN_KEY=bench-admin-key-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
: >"$LOG"
CTXGUARD_LISTEN=127.0.0.1:0 CTXGUARD_ADMIN_KEY=$ADMIN_KEY CTXGUARD_LOG_LEVEL=info \
    "$BUILD/bin/ctxguard" >"$LOG" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 400); do
    grep -q 'reachable: SERVING' "$LOG" && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
    sleep 0.05
done
grep -q 'reachable: SERVING' "$LOG" || { echo "bench: server did not start" >&2; cat "$LOG" >&2; exit 1; }
PORT=$(grep -m1 -o 'msg=listening.* port=[0-9]*' "$LOG" | sed 's/.*port=//')
TARGET=127.0.0.1:$PORT
CTL=("$BUILD/bin/ctxguardctl" --target "$TARGET")
RUN_ID=$$-$(date +%s)
TENANT=$(CTXGUARD_ADMIN_KEY=$ADMIN_KEY "${CTL[@]}" --json tenant create "writes-$RUN_ID" |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("tenant_id") or d["tenant"]["tenant_id"])')
KEY=$(CTXGUARD_ADMIN_KEY=$ADMIN_KEY "${CTL[@]}" --json key create "$TENANT" --name bench --role admin |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
"$BUILD/bin/loadgen" setup-pairs --target "$TARGET" --layout hot --key "$KEY" \
    --clients "$CLIENTS" --slots "$OUT/slots-hot" --prefix "w$RUN_ID"
"$BUILD/bin/loadgen" setup-pairs --target "$TARGET" --layout tenants --admin-key "$ADMIN_KEY" \
    --clients "$CLIENTS" --slots "$OUT/slots-tenants" --prefix "w$RUN_ID"

# ---------------------------------------------------------------- pgbench's rows ---
# Tenants of pgbench's own, in the server's database (its schema, triggers and indexes):
# tenant 0 holds every client of the hot scripts (session "pairs", task "task-<client>"),
# tenant 1+client the client of the no-hot scripts. Ids are fixed, so a rerun reuses them.
psql -X -q -v ON_ERROR_STOP=1 -d "$CTXGUARD_PG_DSN" <<SQL
CREATE OR REPLACE FUNCTION pg_temp.t(n int) RETURNS uuid LANGUAGE sql IMMUTABLE
    AS \$\$ SELECT ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid \$\$;
INSERT INTO tenants (tenant_id, name)
    SELECT pg_temp.t(n), 'pgbench-' || n FROM generate_series(0, $CLIENTS) n ON CONFLICT DO NOTHING;
INSERT INTO scopes (tenant_id, level, has_budget, limit_tokens, version)
    SELECT pg_temp.t(n), 1, true, 1000000000000000, 1 FROM generate_series(0, $CLIENTS) n
    ON CONFLICT DO NOTHING;
INSERT INTO scopes (tenant_id, session_id, level, has_budget, limit_tokens, version)
    SELECT pg_temp.t(n), 'pairs', 2, true, 100000000000000, 1 FROM generate_series(0, $CLIENTS) n
    ON CONFLICT DO NOTHING;
INSERT INTO scopes (tenant_id, session_id, task_id, level, has_budget, limit_tokens, version)
    SELECT pg_temp.t(0), 'pairs', 'task-' || c, 3, true, 1000000000000, 1
      FROM generate_series(0, $CLIENTS - 1) c ON CONFLICT DO NOTHING;
INSERT INTO scopes (tenant_id, session_id, task_id, level, has_budget, limit_tokens, version)
    SELECT pg_temp.t(c + 1), 'pairs', 'task-' || c, 3, true, 1000000000000, 1
      FROM generate_series(0, $CLIENTS - 1) c ON CONFLICT DO NOTHING;
SQL

# pgbench scripts. :tn is the client's tenant number (0 hot, 1+client no hot); the
# statements are those of the server's batch of one request (store_pg_batch.c): one lock
# statement for the path rows in the server's order, one write statement.
T="('00000000-0000-4000-8000-' || lpad(:tn::text, 12, '0'))::uuid"
PATH_ROWS="(('', '', ''), ('pairs', '', ''), ('pairs', 'task-' || :client_id, ''))"
LOCK_PATH="SELECT level, has_budget, mode, limit_tokens, used_tokens, reserved_tokens FROM scopes WHERE tenant_id = $T AND (session_id, task_id, agent_id) IN $PATH_ROWS ORDER BY level, session_id, task_id, agent_id FOR NO KEY UPDATE;"
# counters_cte SET-CLAUSE: the counter update of the three rows and, unless BENCH_PG_EVENTS=0,
# their USAGE_CHANGED events (type 2), numbered by the scope's event_seq as the server does.
counters_cte() {
    local seq="" ev=""
    if [[ $PG_EVENTS == 1 ]]; then
        seq=", event_seq = s.event_seq + 1"
        ev=", e AS (INSERT INTO scope_events (tenant_id, session_id, task_id, agent_id, seq, type, occurred_at, level, has_budget, mode, limit_tokens, limit_cost_micros, warning_ratio, used_tokens, reserved_tokens, used_cost_micros, reserved_cost_micros, closed, allocated_tokens, approved_extra_tokens) SELECT $T, c.session_id, c.task_id, c.agent_id, c.event_seq, 2, now(), c.level, c.has_budget, c.mode, c.limit_tokens, c.limit_cost_micros, c.warning_ratio, c.used_tokens, c.reserved_tokens, c.used_cost_micros, c.reserved_cost_micros, c.closed_at IS NOT NULL, c.allocated_tokens, c.approved_extra_tokens FROM c RETURNING 1)"
    fi
    printf '%s' "c AS (UPDATE scopes s SET $1, last_activity_at = now()$seq WHERE s.tenant_id = $T AND (s.session_id, s.task_id, s.agent_id) IN $PATH_ROWS RETURNING s.*)$ev"
}
RESERVE_ROW="INSERT INTO reservations (tenant_id, session_id, task_id, agent_id, tokens, expires_at) VALUES ($T, 'pairs', 'task-' || :client_id, '', 100, now() + interval '1 minute') RETURNING reservation_id AS rid"
SETTLE="s AS (UPDATE reservations SET state = 2, settled_at = now(), committed_input_tokens = 80, committed_output_tokens = 10 WHERE tenant_id = $T AND reservation_id = :rid::uuid AND state = 1 RETURNING 1), l AS (INSERT INTO ledger (tenant_id, session_id, task_id, agent_id, input_tokens, output_tokens, reservation_id) VALUES ($T, 'pairs', 'task-' || :client_id, '', 80, 10, :rid::uuid) RETURNING 1)"
COMMIT_SET="reserved_tokens = s.reserved_tokens - 100, used_tokens = s.used_tokens + 90, spent_input_tokens = s.spent_input_tokens + 80, spent_output_tokens = s.spent_output_tokens + 10"
ONE_TX_SET="used_tokens = s.used_tokens + 90, spent_input_tokens = s.spent_input_tokens + 80, spent_output_tokens = s.spent_output_tokens + 10"
write_script() { # FILE TENANT-EXPR: the tenant number of each client
    local file=$1 tn=$2 kind=$3
    {
        printf '\\set tn %s\n' "$tn"
        if [[ $kind == 1 ]]; then
            printf 'BEGIN;\n%s\n%s\n\\gset\n' "$LOCK_PATH" "$RESERVE_ROW"
            printf 'WITH %s, %s SELECT count(*) FROM c;\nCOMMIT;\n' "$SETTLE" "$(counters_cte "$ONE_TX_SET")"
        else
            printf 'BEGIN;\n%s\n' "$LOCK_PATH"
            printf 'WITH r AS (%s), %s SELECT rid FROM r\n\\gset\nCOMMIT;\n' "$RESERVE_ROW" \
                "$(counters_cte "reserved_tokens = s.reserved_tokens + 100")"
            printf 'BEGIN;\nSELECT state FROM reservations WHERE tenant_id = %s AND reservation_id = :rid::uuid FOR NO KEY UPDATE;\n%s\n' "$T" "$LOCK_PATH"
            printf 'WITH %s, %s SELECT count(*) FROM c;\nCOMMIT;\n' "$SETTLE" "$(counters_cte "$COMMIT_SET")"
        fi
    } >"$file"
}
write_script "$OUT/pairs-1tx-hot.sql" 0 1
write_script "$OUT/pairs-1tx-nohot.sql" ':client_id + 1' 1
write_script "$OUT/pairs-2tx-hot.sql" 0 2
write_script "$OUT/pairs-2tx-nohot.sql" ':client_id + 1' 2
# Once, before timing: every script runs and writes what it should (pgbench stops a client
# on the first error, which a timed run would only show as a low rate).
for s in 1tx-hot 1tx-nohot 2tx-hot 2tx-nohot; do
    "$PGBENCH" -n -M prepared -c 4 -t 3 -f "$OUT/pairs-$s.sql" "$CTXGUARD_PG_DSN" >"$OUT/pgbench-check-$s.out" 2>&1 ||
        { echo "bench: pgbench script $s fails:" >&2; cat "$OUT/pgbench-check-$s.out" >&2; exit 1; }
    grep -q 'number of transactions actually processed: 12/12' "$OUT/pgbench-check-$s.out" ||
        { echo "bench: pgbench script $s did not complete:" >&2; cat "$OUT/pgbench-check-$s.out" >&2; exit 1; }
done

# ---------------------------------------------------------------- CPU accounting ---
# shellcheck source=bench/cpu.sh
source bench/cpu.sh
per_op() { /usr/bin/python3 -c "print(f'{$1 * 1000 / $2:.0f}' if $2 > 0 else 'n/a')"; }

# point_pgbench NAME -> "per_s p50 p99 pg_us server_us client_us machine_us" (µs per pair;
# server_us "-")
point_pgbench() {
    local name=$1 b0 b1 p0 p1 out txs tps cpu
    rm -f "$OUT"/pgbench_log.*
    b0=$(busy_ms); p0=$(pg_cpu_ms)
    local TIMEFORMAT='%U %S'
    { time "$PGBENCH" -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_PER_RUN" \
        -f "$OUT/pairs-$name.sql" --log --log-prefix="$OUT/pgbench_log" "$CTXGUARD_PG_DSN" \
        >"$OUT/pgbench-$name.out" 2>&1; } 2>"$OUT/pgbench-$name.time"
    b1=$(busy_ms); p1=$(pg_cpu_ms)
    out=$(cat "$OUT/pgbench-$name.out")
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -n 1)
    txs=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    if ! grep -q '^number of failed transactions: 0' <<<"$out" && grep -q 'failed' <<<"$out"; then
        echo "bench: pgbench $name reported failures:" >&2
        grep -i -E 'fail|error|abort' <<<"$out" >&2 || true
    fi
    cpu=$(awk '{ printf "%.0f", ($1 + $2) * 1000 }' "$OUT/pgbench-$name.time")
    read -r p50 p99 < <(cat "$OUT"/pgbench_log.* | /usr/bin/python3 -c '
import sys
lat = sorted(int(l.split()[2]) for l in sys.stdin if l.strip())
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else 0
print(pct(0.5), pct(0.99))')
    rm -f "$OUT"/pgbench_log.*
    # The server column is "-": the server is idle during pgbench (its background work,
    # ~10 ms of CPU a second, is in the machine column).
    echo "$(printf '%.0f' "${tps:-0}") $p50 $p99 $(per_op $((p1 - p0)) "${txs:-0}") - $(per_op "$cpu" "${txs:-0}") $(per_op $((b1 - b0)) "${txs:-0}")"
}

# point_ctxguard LAYOUT -> the same fields, loadgen pairs against the server
point_ctxguard() {
    local layout=$1 b0 b1 p0 p1 s0 s1 line ops rc=0
    b0=$(busy_ms); p0=$(pg_cpu_ms); s0=$(proc_ms "$SERVER_PID")
    line=$("$BUILD/bin/loadgen" pairs --target "$TARGET" --slots "$OUT/slots-$layout" \
        --conns 4 --streams $((CLIENTS / 4)) --seconds "$SECONDS_PER_RUN" --warmup 0 \
        2>>"$OUT/loadgen-writes.err") || rc=$?
    b1=$(busy_ms); p1=$(pg_cpu_ms); s1=$(proc_ms "$SERVER_PID")
    echo "ctxguard $layout: $line" >>"$OUT/loadgen-writes.lines"
    if [[ $rc != 0 ]]; then
        echo "bench: !!! ctxguard pairs ($layout) had failed calls: $line" >&2
        tail -n 1 "$OUT/loadgen-writes.err" >&2
    fi
    field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
    ops=$(field ops)
    echo "$(field per_s) $(field p50_us) $(field p99_us) $(per_op $((p1 - p0)) "$ops") $(per_op $((s1 - s0)) "$ops") $(per_op "$(field client_cpu_ms)" "$ops") $(per_op $((b1 - b0)) "$ops")"
}

# ---------------------------------------------------------------- rounds -----------
POINTS=(1tx-hot 1tx-nohot 2tx-hot 2tx-nohot ctx-hot ctx-nohot)
for p in "${POINTS[@]}"; do : >"$OUT/writes-$p.rounds"; done
: >"$OUT/loadgen-writes.lines"
: >"$OUT/loadgen-writes.err"
for round in $(seq 1 "$ROUNDS"); do
    echo "bench: writes round $round/$ROUNDS" >&2
    for p in "${POINTS[@]}"; do
        case $p in
        ctx-hot) point_ctxguard hot ;;
        ctx-nohot) point_ctxguard tenants ;;
        *) point_pgbench "$p" ;;
        esac >>"$OUT/writes-$p.rounds"
    done
done
grep -h . "$OUT/loadgen-writes.lines" | sed 's/^/  /' >&2

/usr/bin/python3 - "$OUT" "$CLIENTS" "$PG_EVENTS" "${POINTS[@]}" <<'PY'
import statistics, sys
out, clients, events, points = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def rows(p):
    return [l.split() for l in open(f"{out}/writes-{p}.rounds") if l.strip()]
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
def med(p, i):
    v = [num(r[i]) for r in rows(p) if num(r[i]) is not None]
    return statistics.median(v) if v else None
labels = {
    "1tx-hot": "pgbench 1 tx, hot rows", "1tx-nohot": "pgbench 1 tx, no hot rows",
    "2tx-hot": "pgbench 2 tx, hot rows", "2tx-nohot": "pgbench 2 tx, no hot rows",
    "ctx-hot": "ctxguard pairs, hot rows", "ctx-nohot": "ctxguard pairs, no hot rows",
}
base = {"hot": "1tx-hot", "nohot": "1tx-nohot"}
print(f"\ndurable writes: {clients} clients, medians of {len(rows(points[0]))} interleaved rounds"
      f" (pgbench scripts {'with' if events == '1' else 'without'} the scope_events rows)")
hdr = ("what", "pairs/s", "p50_us", "p99_us", "ratio", "rounds", "pg_us", "server_us",
       "client_us", "machine_us")
fmt = "{:<28} {:>8} {:>8} {:>8} {:>6}  {:<16} {:>6} {:>9} {:>9} {:>10}"
print(fmt.format(*hdr))
ratios = {}
for p in points:
    hot = "nohot" if p.endswith("nohot") else "hot"
    b = base[hot]
    per_round = [num(r[0]) / num(rb[0]) if num(rb[0]) else None for r, rb in zip(rows(p), rows(b))]
    m, mb = med(p, 0), med(b, 0)
    ratio = m / mb if m is not None and mb else None
    ratios[p] = ratio
    cells = [labels[p]] + [f"{med(p, i):.0f}" if med(p, i) is not None else "n/a" for i in range(3)]
    cells.append(f"{ratio:.2f}" if ratio is not None else "n/a")
    cells.append(" ".join(f"{x:.2f}" for x in per_round if x is not None))
    cells += [f"{med(p, i):.0f}" if med(p, i) is not None else "-" for i in range(3, 7)]
    print(fmt.format(*cells))
def verdict(p, target):
    r = ratios.get(p)
    return f"{r:.2f}x -> {'met' if r is not None and r >= target else 'NOT met'}" if r else "n/a"
print(f"\ntargets (issue 15): ctxguard >= 1.0x the 1-tx script without hot rows: "
      f"{verdict('ctx-nohot', 1.0)}; >= 5x with hot rows: {verdict('ctx-hot', 5.0)}")
print("  also: PostgreSQL CPU per pair at or below the 1-tx script's (pg_us), "
      "server CPU per pair halved (server_us, against the baseline in bench/README.md)")
PY
stop_server
trap - EXIT
