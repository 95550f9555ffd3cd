#!/usr/bin/env bash
# ab_writes.sh - two builds of the server on the durable write path of bench/writes.sh, side
# by side: an interleaved A/B of one change's effect on Reserve+Commit pairs.
#
#   BENCH_A=DIR BENCH_B=DIR bench/ab_writes.sh   DIR: a build directory (DIR/bin/ctxguard)
#   BENCH_ROUNDS=4 BENCH_SECONDS=8               rounds, seconds per measurement
#   BENCH_AB_LAYOUTS="tenants"                   tenants (no hot rows), hot, or both
#   BENCH_CLIENTS=64                             loadgen slots (4 connections x CLIENTS/4)
#
# Both servers run at once on the durable PostgreSQL of bench/writes.sh (.run/bench-durable,
# fsync on) and its Redis, with the same slots (loadgen setup-pairs through A: the keys work
# on both). Every round measures each layout on A, then on B, with this checkout's loadgen.
# While one is measured the other is idle but for its background threads, and its events
# thread hears the writes (every replica does): PostgreSQL and the machine carry both, so
# compare A with B, not with bench/writes.sh. Prints, per build and layout, the medians of
# pairs/s, server CPU per pair (µs), PostgreSQL CPU per pair (every backend) and loadgen CPU
# per pair. Any call that is not OK stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ -n ${BENCH_A:-} && -n ${BENCH_B:-} ]] || { echo "usage: BENCH_A=DIR BENCH_B=DIR $0" >&2; exit 2; }
ROUNDS=${BENCH_ROUNDS:-4}
SECONDS_PER_RUN=${BENCH_SECONDS:-8}
LAYOUTS=${BENCH_AB_LAYOUTS:-tenants}
CLIENTS=${BENCH_CLIENTS:-64}
LG=(build/bin/loadgen)
[[ -x ${LG[0]} ]] || { echo "bench: build first (make build)" >&2; exit 1; }
((CLIENTS % 4 == 0 && CLIENTS >= 4)) || { echo "bench: BENCH_CLIENTS must be a multiple of 4" >&2; exit 1; }
DIR=.run/bench-durable
OUT=bench/out/ab-writes
mkdir -p "$OUT"
scripts/services.sh start "$DIR" >/dev/null
# shellcheck disable=SC1090,SC1091
source "$DIR/env"
[[ $(psql -X -At -d "$CTXGUARD_PG_DSN" -c 'SHOW fsync') == on ]] ||
    { echo "bench: $DIR has fsync off; remove it (scripts/services.sh destroy $DIR)" >&2; exit 1; }
PM_PID=$(head -n 1 "$DIR/pg/data/postmaster.pid")

declare -A PIDS PORTS
stop_all() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap stop_all EXIT
ADMIN_KEY=bench-admin-key-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
for v in A B; do
    dirvar=BENCH_$v
    build=${!dirvar}
    [[ -x $build/bin/ctxguard ]] || { echo "bench: no $build/bin/ctxguard" >&2; exit 1; }
    log=$OUT/server-$v.log
    : >"$log"
    CTXGUARD_LISTEN=127.0.0.1:0 CTXGUARD_ADMIN_KEY=$ADMIN_KEY CTXGUARD_LOG_LEVEL=info \
        "$build/bin/ctxguard" >"$log" 2>&1 &
    PIDS[$v]=$!
    for _ in $(seq 1 400); do
        grep -q 'reachable: SERVING' "$log" && break
        kill -0 "${PIDS[$v]}" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.05
    done
    grep -q 'reachable: SERVING' "$log" || { echo "bench: server $v did not start" >&2; exit 1; }
    PORTS[$v]=$(grep -m1 -o 'msg=listening.* port=[0-9]*' "$log" | sed 's/.*port=//')
done

TARGET=127.0.0.1:${PORTS[A]}
CTL=(build/bin/ctxguardctl --target "$TARGET")
RUN_ID=ab$$-$(date +%s)
for layout in $LAYOUTS; do
    case $layout in
    hot)
        tenant=$(CTXGUARD_ADMIN_KEY=$ADMIN_KEY "${CTL[@]}" --json tenant create "ab-$RUN_ID" |
            /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("tenant_id") or d["tenant"]["tenant_id"])')
        key=$(CTXGUARD_ADMIN_KEY=$ADMIN_KEY "${CTL[@]}" --json key create "$tenant" --name bench --role admin |
            /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
        "${LG[@]}" setup-pairs --target "$TARGET" --layout hot --key "$key" --clients "$CLIENTS" \
            --slots "$OUT/slots-hot" --prefix "$RUN_ID"
        ;;
    tenants)
        "${LG[@]}" setup-pairs --target "$TARGET" --layout tenants --admin-key "$ADMIN_KEY" \
            --clients "$CLIENTS" --slots "$OUT/slots-tenants" --prefix "$RUN_ID"
        ;;
    *) echo "bench: unknown layout $layout (hot, tenants)" >&2; exit 2 ;;
    esac
done

# shellcheck source=bench/cpu.sh
source bench/cpu.sh
RES=$OUT/rounds
: >"$RES"
for round in $(seq 1 "$ROUNDS"); do
    for v in A B; do
        for layout in $LAYOUTS; do
            s0=$(proc_ms "${PIDS[$v]}")
            p0=$(pg_cpu_ms)
            line=$("${LG[@]}" pairs --target "127.0.0.1:${PORTS[$v]}" --slots "$OUT/slots-$layout" \
                --conns 4 --streams $((CLIENTS / 4)) --seconds "$SECONDS_PER_RUN" --warmup 0) ||
                { echo "bench: !!! $v $layout had failed calls: $line" >&2; exit 1; }
            s1=$(proc_ms "${PIDS[$v]}")
            p1=$(pg_cpu_ms)
            echo "$round $v $layout $((s1 - s0)) $((p1 - p0)) $line" >>"$RES"
        done
    done
done
/usr/bin/python3 - "$RES" "${BENCH_A}" "${BENCH_B}" <<'PY'
import collections, statistics, sys
res = sys.argv[1]
names = {"A": sys.argv[2], "B": sys.argv[3]}
d = collections.defaultdict(list)
for line in open(res):
    rnd, v, layout, srv, pg, rest = line.split(None, 5)
    f = dict(x.split("=", 1) for x in rest.split() if "=" in x)
    ops = int(f["ops"])
    d[(v, layout)].append((float(f["per_s"]), float(srv) * 1000 / ops, float(pg) * 1000 / ops,
                           float(f["client_cpu_ms"]) * 1000 / ops))
layouts = list(dict.fromkeys(k for _, k in d))
print(f"\nA = {names['A']}, B = {names['B']}: medians of {len(d[('A', layouts[0])])} interleaved rounds")
print(f"{'':2} {'layout':<8} {'pairs/s':>8} {'server_us':>10} {'pg_us':>7} {'lg_us':>6}  server_us (rounds)")
for v in "AB":
    for k in layouts:
        x = d[(v, k)]
        med = [statistics.median(r[i] for r in x) for i in range(4)]
        print(f"{v:2} {k:<8} {med[0]:>8.0f} {med[1]:>10.1f} {med[2]:>7.0f} {med[3]:>6.1f}  "
              + " ".join(f"{r[1]:.0f}" for r in x))
PY
