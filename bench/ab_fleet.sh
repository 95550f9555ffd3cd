#!/usr/bin/env bash
# ab_fleet.sh - two builds of the server on the fleet of bench/run.sh, side by side: an
# interleaved A/B of one change's effect on CheckBudget over 100,000 agents.
#
#   BENCH_A=DIR BENCH_B=DIR bench/ab_fleet.sh   DIR: a build directory (DIR/bin/ctxguard)
#   BENCH_ROUNDS=4 BENCH_SECONDS=3              rounds, seconds per measurement
#   BENCH_AB_KINDS="health uniform"             what each round measures on each server:
#                                               health, one (agent 0 only), uniform, zipf
#   BENCH_FLEET_WARMUP=40                       each server's warm-up (agents in order)
#
# Both servers run at once on one PostgreSQL and Redis (.run/bench, fsync off) with one
# fleet (loadgen setup-check --sql, as bench/run.sh); each is warmed up (every agent read
# once, in order), then every round measures each kind on A, then on B, with this
# checkout's bench/loadgen, so that the machine's drift hits both alike. Prints, per build
# and kind, the medians of calls/s, server CPU per call (µs, scaled to the measured
# window as in bench/run.sh) and loadgen CPU per call, and each check kind's ratio to the
# same build's health Check of the same round. Any call that is not OK stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ -n ${BENCH_A:-} && -n ${BENCH_B:-} ]] || { echo "usage: BENCH_A=DIR BENCH_B=DIR $0" >&2; exit 2; }
ROUNDS=${BENCH_ROUNDS:-4}
SECONDS_PER_RUN=${BENCH_SECONDS:-3}
KINDS=${BENCH_AB_KINDS:-"health uniform"}
WARMUP=${BENCH_FLEET_WARMUP:-40}
AGENTS=100000
LG=(build/bin/loadgen)
[[ -x ${LG[0]} ]] || { echo "bench: build first (make build)" >&2; exit 1; }
# shellcheck disable=SC2034 # read by bench/server.sh
DIR=.run/bench
ROOT_OUT=bench/out/ab-fleet
declare -A PIDS PORTS
stop_all() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap stop_all EXIT
# shellcheck source=bench/server.sh
source bench/server.sh
for v in A B; do
    dirvar=BENCH_$v
    BUILD=${!dirvar}
    [[ -x $BUILD/bin/ctxguard && -x $BUILD/bin/ctxguardctl ]] ||
        { echo "bench: $BUILD/bin needs ctxguard and ctxguardctl" >&2; exit 1; }
    OUT=$ROOT_OUT/$v
    mkdir -p "$OUT"
    SERVER_PID=
    rc=0
    bench_server_start || rc=$?
    [[ -z $SERVER_PID ]] || PIDS[$v]=$SERVER_PID # stopped on exit, started or not
    [[ $rc == 0 ]] || exit 1
    PORTS[$v]=$PORT
    [[ $v == A ]] && FLEET_KEY=$KEY # the key works on both: one database
done
psql -X -q -v ON_ERROR_STOP=1 -d "$CTXGUARD_PG_DSN" -c "SET session_replication_role = replica" \
    -c "DELETE FROM scopes WHERE session_id LIKE 'fleet-s%'" >/dev/null
"${LG[@]}" setup-check --target "127.0.0.1:${PORTS[A]}" --key "$FLEET_KEY" --agents "$AGENTS" \
    --prefix fleet --sql >"$ROOT_OUT/fleet-setup.sql"
psql -X -q -v ON_ERROR_STOP=1 -d "$CTXGUARD_PG_DSN" -f "$ROOT_OUT/fleet-setup.sql" >/dev/null
psql -X -q -d "$CTXGUARD_PG_DSN" -c "VACUUM ANALYZE scopes" >/dev/null
COMMON=(--conns 4 --streams 16 --threads 2)
for v in A B; do
    line=$("${LG[@]}" check --key "$FLEET_KEY" --agents "$AGENTS" --prefix fleet --dist seq \
        --target "127.0.0.1:${PORTS[$v]}" "${COMMON[@]}" --seconds "$WARMUP")
    echo "warm-up $v: $line"
done
# shellcheck source=bench/cpu.sh
source bench/cpu.sh
RES=$ROOT_OUT/rounds
: >"$RES"
for round in $(seq 1 "$ROUNDS"); do
    for v in A B; do
        for kind in $KINDS; do
            case $kind in
            health) args=(health) ;;
            one) args=(check --key "$FLEET_KEY" --agents 1 --sessions 1 --tasks 1 --prefix fleet) ;;
            *) args=(check --key "$FLEET_KEY" --agents "$AGENTS" --prefix fleet --dist "$kind") ;;
            esac
            s0=$(proc_ms "${PIDS[$v]}")
            line=$("${LG[@]}" "${args[@]}" --target "127.0.0.1:${PORTS[$v]}" "${COMMON[@]}" \
                --seconds "$SECONDS_PER_RUN" --warmup 1) ||
                { echo "bench: !!! $v $kind had failed calls: $line" >&2; exit 1; }
            s1=$(proc_ms "${PIDS[$v]}")
            echo "$round $v $kind $((s1 - s0)) $line" >>"$RES"
        done
    done
done
/usr/bin/python3 - "$RES" "$SECONDS_PER_RUN" "${BENCH_A}" "${BENCH_B}" <<'PY'
import collections, statistics, sys
res, secs = sys.argv[1], float(sys.argv[2])
names = {"A": sys.argv[3], "B": sys.argv[4]}
d = collections.defaultdict(list)
for line in open(res):
    rnd, v, kind, cpu, rest = line.split(None, 4)
    f = dict(x.split("=", 1) for x in rest.split() if "=" in x)
    ops = int(f["ops"])
    # The server's CPU is read around the whole loadgen run, its 1 s warm-up included.
    srv = float(cpu) * secs / (secs + 1) * 1000 / ops
    d[(v, kind)].append((int(rnd), float(f["per_s"]), srv, float(f["client_cpu_ms"]) * 1000 / ops))
kinds = list(dict.fromkeys(k for _, k in d))
print(f"\nA = {names['A']}, B = {names['B']}: medians of {len(d[('A', kinds[0])])} interleaved rounds")
print(f"{'':2} {'kind':<8} {'calls/s':>9} {'srv_us':>7} {'lg_us':>7}  ratio to health (rounds)")
for v in "AB":
    for k in kinds:
        x = d[(v, k)]
        cells = [v, k, f"{statistics.median(p for _, p, _, _ in x):.0f}",
                 f"{statistics.median(s for _, _, s, _ in x):.2f}",
                 f"{statistics.median(c for _, _, _, c in x):.2f}"]
        ratio = ""
        if k != "health" and (v, "health") in d:
            r = [p / h for (_, p, _, _), (_, h, _, _) in zip(x, d[(v, "health")])]
            ratio = f"{statistics.median(r):.3f} ({' '.join(f'{y:.2f}' for y in r)})"
        print(f"{cells[0]:2} {cells[1]:<8} {cells[2]:>9} {cells[3]:>7} {cells[4]:>7}  {ratio}")
PY
