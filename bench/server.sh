# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables set here are the caller's
# server.sh - sourced by the benches: throwaway PostgreSQL and Redis in $DIR (scripts/
# services.sh, fsync off), a ctxguard server on a free port logging to $LOG, a tenant and an
# admin key of it. Needs BUILD, DIR and OUT set. Sets SERVER_PID, PORT, ADMIN_KEY, TENANT,
# KEY and CTL (ctxguardctl against the server, an array), defines server_cpu_ms and
# bench_server_stop (the caller traps it). Extra server settings: CTXGUARD_* in the
# environment of the caller.

bench_server_start() {
    scripts/services.sh start --fast "$DIR" >/dev/null
    # shellcheck disable=SC1090,SC1091
    source "$DIR/env"
    ADMIN_KEY=bench-admin-key-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    LOG=$OUT/server.log
    : >"$LOG"
    CTXGUARD_LISTEN=127.0.0.1:0 CTXGUARD_ADMIN_KEY=$ADMIN_KEY CTXGUARD_LOG_LEVEL=info \
        "$BUILD/bin/ctxguard" >"$LOG" 2>&1 &
    SERVER_PID=$!
    # The server picks a free port and logs it; wait (bounded) for that line, then SERVING.
    if ! bench_wait_log 'msg=listening' || ! bench_wait_log 'reachable: SERVING'; then
        echo "bench: server did not start; log:" >&2
        cat "$LOG" >&2
        return 1
    fi
    PORT=$(grep -m1 -o 'msg=listening.* port=[0-9]*' "$LOG" | sed 's/.*port=//')
    CTL=("$BUILD/bin/ctxguardctl" --target "127.0.0.1:$PORT")
    "${CTL[@]}" health >/dev/null
    TENANT=$(CTXGUARD_ADMIN_KEY=$ADMIN_KEY "${CTL[@]}" --json tenant create bench |
        /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("tenant_id") or d["tenant"]["tenant_id"])')
    KEY=$(CTXGUARD_ADMIN_KEY=$ADMIN_KEY "${CTL[@]}" --json key create "$TENANT" --name bench --role admin |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
}

bench_wait_log() {
    for _ in $(seq 1 400); do
        grep -q "$1" "$LOG" && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

bench_server_stop() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
}

# The server's CPU time so far (all threads: utime + stime), in ms.
server_cpu_ms() {
    awk -v t="$((1000 / $(getconf CLK_TCK)))" '{ sub(/^.*\) /, ""); print ($12 + $13) * t }' \
        "/proc/$SERVER_PID/stat"
}
