#!/usr/bin/env bash
# events.sh - the JSON API's live feed (Server-Sent Events) under load: what STREAMS idle
# streams cost the server (CPU per second, resident memory per stream), and how long EVENTS
# committed events take to reach all of them (p50/p99 from the event's time to its frame
# read by the client), with the server's CPU per frame (bench/events.py).
#
#   bench/events.sh           build/ (BUILD=...), STREAMS=30, EVENTS=50
#
# Starts a server (bench/server.sh: throwaway PostgreSQL and Redis in .run/bench-events)
# with the HTTP listener on a free port and room for the streams.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD=${BUILD:-build}
OUT=bench/out
DIR=.run/bench-events
STREAMS=${STREAMS:-30}
EVENTS=${EVENTS:-50}
mkdir -p "$OUT"
export CTXGUARD_HTTP_LISTEN=127.0.0.1:0 CTXGUARD_HTTP_MAX_CONNECTIONS=$((STREAMS + 16))
export CTXGUARD_HTTP_EVENT_STREAMS_MAX=$((STREAMS + 1)) CTXGUARD_HTTP_EVENT_STREAMS_PER_KEY=$STREAMS
# shellcheck source=bench/server.sh
source bench/server.sh
trap bench_server_stop EXIT
bench_server_start || exit 1
HTTP_PORT=$(grep -m1 -o 'msg="http listening".* port=[0-9]*' "$LOG" | sed 's/.*port=//')
[[ -n $HTTP_PORT ]] || { echo "events: no http port in $LOG" >&2; exit 1; }
/usr/bin/python3 bench/events.py "$HTTP_PORT" "$SERVER_PID" "$KEY" "${CTL[@]}" -- "$STREAMS" "$EVENTS" |
    tee "$OUT/events.txt"
