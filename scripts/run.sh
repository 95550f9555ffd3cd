#!/usr/bin/env bash
# run.sh - `make run`: ctxguard on this machine, with its own PostgreSQL and Redis.
#
#   scripts/run.sh          deps, build, services under .run/, migrate, (re)start the
#                           server in the background, wait for SERVING, and show an
#                           authenticated call
#   scripts/run.sh stop     stop the server and the services of .run/ (`make stop`)
#   scripts/run.sh status   what runs
#   scripts/run.sh demo [SECONDS]
#                           traffic on the demo session for SECONDS (default 60; `make demo`):
#                           each second three agents of demo-session/plan reserve and commit
#                           a few hundred tokens, so that the console's budgets move
#
# Files in .run/: env (DSN and Redis URL), admin_key (0600, made once), target
# (host:port of the server), ctxguard.pid, ctxguard.log, demo_key (0600, made once and
# reused while the server accepts it).
# CTXGUARD_PORT picks the port (default 50051, or a free one if that is taken: .run/target
# says which); other CTXGUARD_* settings of the server (CTXGUARD_LOG_LEVEL=debug...) pass
# through. BUILD_DIR (default build) says which build to run; SKIP_BUILD=1 skips deps and
# build; RUN_DIR (default .run) where the files and the services live.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
RUN=${RUN_DIR:-$ROOT/.run}
[[ $RUN == /* ]] || RUN=$ROOT/$RUN
BUILD_DIR=${BUILD_DIR:-build}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
SERVER=$BUILD_DIR/bin/ctxguard
CTL=$BUILD_DIR/bin/ctxguardctl
PY=/usr/bin/python3

log() { printf 'run: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

server_pid() {
    local pid
    [[ -f $RUN/ctxguard.pid ]] || return 1
    pid=$(cat "$RUN/ctxguard.pid" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    local state
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null || true)
    [[ $state != Z && $state != X ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == ctxguard* ]] || return 1
    echo "$pid"
}

stop_server() {
    local pid i
    pid=$(server_pid) || {
        rm -f "$RUN/ctxguard.pid"
        return 0
    }
    log "stopping the server (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    # shutdown_grace_ms defaults to 10 s; give it a little more before SIGKILL.
    for ((i = 0; i < 150; i++)); do
        server_pid >/dev/null || break
        sleep 0.1
    done
    if server_pid >/dev/null; then
        log "the server did not stop in 15 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$RUN/ctxguard.pid"
}

# The server's environment: .run/env and the admin key, and none of ctxguardctl's
# CTXGUARD_* variables (the server rejects CTXGUARD_* names it does not know).
# An array, not a function: `"${SERVER_ENV[@]}" cmd &` then forks once and $! is the
# server's own pid (env and setsid exec).
server_env() {
    SERVER_ENV=(env -u CTXGUARD_TARGET -u CTXGUARD_KEY -u CTXGUARD_PORT
        CTXGUARD_PG_DSN="$CTXGUARD_PG_DSN" CTXGUARD_REDIS_URL="$CTXGUARD_REDIS_URL"
        CTXGUARD_ADMIN_KEY="$ADMIN_KEY")
}

# ctxguardctl against the server of this run; admin_ctl adds the admin key (the CLI
# reads CTXGUARD_ADMIN_KEY for admin commands). Bounded: a hung call fails.
ctl() {
    env -u CTXGUARD_KEY -u CTXGUARD_ADMIN_KEY timeout 30 "$CTL" --target "$TARGET" "$@"
}
admin_ctl() {
    env -u CTXGUARD_KEY CTXGUARD_ADMIN_KEY="$ADMIN_KEY" timeout 30 "$CTL" --target "$TARGET" "$@"
}

# Prints the first value found under any of the given keys, anywhere in a JSON document
# read from stdin (top level first). Empty when none.
json_pick() {
    "$PY" -c '
import json, sys
keys = sys.argv[1:]
try:
    doc = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
def walk(node):
    # breadth-first: top-level fields win over nested ones
    queue = [node]
    while queue:
        cur = queue.pop(0)
        if isinstance(cur, dict):
            for k in keys:
                v = cur.get(k)
                if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v):
                    return str(v)
            queue.extend(cur.values())
        elif isinstance(cur, list):
            queue.extend(cur)
    return ""
print(walk(doc))
' "$@"
}

# tenant_id of the tenant called NAME in a `tenant list --json` document on stdin.
json_tenant_named() {
    "$PY" -c '
import json, sys
name = sys.argv[1]
try:
    doc = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
def walk(node):
    if isinstance(node, dict):
        if node.get("name") == name:
            for k in ("tenant_id", "tenantId", "id"):
                if node.get(k):
                    return str(node[k])
        node = list(node.values())
    if isinstance(node, list):
        for child in node:
            found = walk(child)
            if found:
                return found
    return ""
print(walk(doc))
' "$1"
}

case ${1:-run} in
stop)
    stop_server
    scripts/services.sh stop "$RUN"
    exit 0
    ;;
status)
    if pid=$(server_pid); then
        echo "ctxguard: running (pid $pid) on $(cat "$RUN/target" 2>/dev/null || echo '?')"
    else
        echo "ctxguard: stopped"
    fi
    scripts/services.sh status "$RUN" || true
    exit 0
    ;;
demo)
    secs=${2:-60}
    [[ $secs =~ ^[0-9]+$ ]] || die "demo: SECONDS must be a whole number, not '$secs'"
    pid=$(server_pid) || die "demo: the server is not running: make run first"
    [[ -s $RUN/demo_key && -s $RUN/target ]] || die "demo: no $RUN/demo_key: make run first"
    DEMO_KEY=$(cat "$RUN/demo_key")
    export CTXGUARD_TARGET
    CTXGUARD_TARGET=$(cat "$RUN/target")
    echo "demo: $secs s of traffic on demo-session/plan (agents a1..a3); watch $(cat "$RUN/console_url" 2>/dev/null || echo 'the console')"
    for agent in a1 a2 a3; do # the agents' budgets (the task's 20,000 binds first)
        "$CTL" --key "$DEMO_KEY" budget set "demo-session/plan/$agent" --limit 8000 >/dev/null ||
            die "demo: budget set demo-session/plan/$agent failed"
    done
    for ((i = 0; i < secs; i++)); do
        for agent in a1 a2 a3; do
            tokens=$((100 + RANDOM % 200))
            rc=0
            rid=$("$CTL" --key "$DEMO_KEY" reserve "demo-session/plan/$agent" \
                --tokens "$tokens") || rc=$?
            case $rc in
            0) "$CTL" --key "$DEMO_KEY" commit "$rid" --input $((tokens * 3 / 4)) \
                --output $((tokens / 5)) >/dev/null || die "demo: commit failed" ;;
            3 | 4) ;; # denied, or waiting for an approval, once the budget is spent: shown
            *) die "demo: reserve on demo-session/plan/$agent failed (exit $rc)" ;;
            esac
        done
        sleep 1 # pacing: one round a second, for a person to watch
    done
    "$CTL" --key "$DEMO_KEY" usage demo-session --depth 2
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 [run|stop|status|demo [SECONDS]]" >&2
    exit 2
    ;;
esac

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    scripts/deps.sh build
    scripts/build.sh "$BUILD_DIR"
fi
[[ -x $SERVER && -x $CTL ]] || die "$SERVER or $CTL is missing after the build"

mkdir -p "$RUN"
scripts/services.sh start "$RUN"
# shellcheck disable=SC1091
source "$RUN/env"

if [[ ! -s $RUN/admin_key ]]; then
    (
        umask 077
        od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$RUN/admin_key"
    )
    log "made an admin key: $RUN/admin_key"
fi
chmod 600 "$RUN/admin_key"
ADMIN_KEY=$(cat "$RUN/admin_key")
server_env

stop_server

log "migrating $CTXGUARD_PG_DSN"
"${SERVER_ENV[@]}" "$SERVER" migrate

PORT=$(scripts/services.sh free-port "${CTXGUARD_PORT:-50051}")
TARGET=127.0.0.1:$PORT
echo "$TARGET" >"$RUN/target"
# The HTTP listener: the console, its JSON API, /metrics (on the loopback only).
HTTP_PORT=$(scripts/services.sh free-port "${CTXGUARD_HTTP_PORT:-8080}")
CONSOLE=http://127.0.0.1:$HTTP_PORT/
echo "$CONSOLE" >"$RUN/console_url"

log "starting the server on $TARGET (log: $RUN/ctxguard.log)"
{
    echo
    echo "==== $(date -u +%Y-%m-%dT%H:%M:%SZ) scripts/run.sh starts ctxguard on $TARGET"
} >>"$RUN/ctxguard.log"
# setsid: the server outlives this script and ignores the terminal's Ctrl-C. The subshell
# closes what the caller left open, then execs (env, setsid and the server keep its pid).
(
    close_inherited_fds
    exec "${SERVER_ENV[@]}" CTXGUARD_LISTEN="$TARGET" CTXGUARD_HTTP_LISTEN="127.0.0.1:$HTTP_PORT" \
        setsid "$SERVER" \
        >>"$RUN/ctxguard.log" 2>&1 </dev/null
) &
echo $! >"$RUN/ctxguard.pid"

serving=0
for ((i = 0; i < 100; i++)); do
    # (not server_pid: until exec completes the process may still be called env/setsid)
    if ! kill -0 "$(cat "$RUN/ctxguard.pid")" 2>/dev/null; then
        tail -n 20 "$RUN/ctxguard.log" >&2 || true
        die "the server exited; see $RUN/ctxguard.log"
    fi
    if out=$(env -u CTXGUARD_KEY timeout 5 "$CTL" --target "$TARGET" health 2>/dev/null) && grep -qw SERVING <<<"$out" && ! grep -qw NOT_SERVING <<<"$out"; then
        serving=1
        break
    fi
    sleep 0.2
done
((serving)) || {
    tail -n 20 "$RUN/ctxguard.log" >&2 || true
    die "the server on $TARGET did not report SERVING within 20 s"
}

echo
echo "== ctxguardctl --target $TARGET health"
ctl health

echo
echo "== tenant 'demo' (admin key)"
TENANT_ID=$(admin_ctl --json tenant list 2>/dev/null | json_tenant_named demo || true)
if [[ -n $TENANT_ID ]]; then
    echo "ctxguardctl tenant list: 'demo' exists already: $TENANT_ID"
else
    echo "\$ ctxguardctl tenant create demo"
    out=$(admin_ctl --json tenant create demo) ||
        die "tenant create failed: $out"
    echo "$out"
    TENANT_ID=$(json_pick tenant_id tenantId id <<<"$out")
    [[ -n $TENANT_ID ]] || die "no tenant_id in the output of tenant create"
fi

echo
echo "== an API key for tenant $TENANT_ID"
# The key of an earlier run is reused while the server still takes it for this tenant
# (a revoked key, or a new database, gets a new one).
DEMO_KEY=
if [[ -s $RUN/demo_key ]]; then
    old_key=$(cat "$RUN/demo_key")
    if who=$(ctl --json --key "$old_key" whoami 2>/dev/null) &&
        [[ $(json_pick tenant_id tenantId <<<"$who") == "$TENANT_ID" ]]; then
        DEMO_KEY=$old_key
        echo "reusing the demo key of an earlier run ($RUN/demo_key)"
    fi
fi
if [[ -z $DEMO_KEY ]]; then
    echo "\$ ctxguardctl key create $TENANT_ID --name demo --role admin"
    out=$(admin_ctl --json key create "$TENANT_ID" --name demo --role admin) ||
        die "key create failed: $out"
    echo "$out"
    # {key: {...}, secret: "..."}: the secret is the whole key to present.
    DEMO_KEY=$(json_pick secret api_key apiKey <<<"$out")
    [[ -n $DEMO_KEY ]] || die "no secret in the output of key create"
    (
        umask 077
        printf '%s\n' "$DEMO_KEY" >"$RUN/demo_key"
    )
fi

echo
echo "== an authenticated call"
echo "\$ ctxguardctl --key \$(cat .run/demo_key) whoami"
ctl --key "$DEMO_KEY" whoami

echo
echo "== budgets: the tenant, a session and a task under it, then the usage tree"
for spec in "- 1000000" "demo-session 100000" "demo-session/plan 20000"; do
    read -r sc limit <<<"$spec"
    echo "\$ ctxguardctl budget set $sc --limit $limit"
    ctl --key "$DEMO_KEY" budget set "$sc" --limit "$limit" >/dev/null ||
        die "budget set $sc failed"
done
echo "\$ ctxguardctl usage --depth 2"
ctl --key "$DEMO_KEY" usage --depth 2

echo
echo "== a conversation: its tokens, then a summary (PII redacted first)"
DEMO_CONV=$RUN/demo_conversation.json
cat >"$DEMO_CONV" <<'JSON'
{"messages": [
 {"role": "system", "content": "You are a build assistant."},
 {"role": "user", "content": "The nightly build of ingest fails on the CI runner. Mail the log to ops@example.com."},
 {"role": "assistant", "content": "I will check the runner. The timeout is set to 250 ms in config/prod.yaml; I raise it to 2000 ms."},
 {"role": "user", "content": "Good. Keep the cache at 512 MB and rerun."}
]}
JSON
echo "\$ ctxguardctl count $DEMO_CONV --model gpt-4o"
ctl --key "$DEMO_KEY" count "$DEMO_CONV" --model gpt-4o
echo "\$ ctxguardctl summarize $DEMO_CONV --summarizer extractive"
ctl --key "$DEMO_KEY" summarize "$DEMO_CONV" --summarizer extractive

cat <<EOF

ctxguard is running (pid $(cat "$RUN/ctxguard.pid")).
  target      $TARGET
  console     $CONSOLE (sign in with the demo key: $RUN/demo_key)
  admin key   $RUN/admin_key
  demo key    $RUN/demo_key (tenant $TENANT_ID)
  demo        make demo: a minute of traffic on demo-session, to watch the console move
  log         $RUN/ctxguard.log
  services    $RUN/env (PostgreSQL and Redis)

Try (CTXGUARD_TARGET is where every ctxguardctl command and the README's examples connect;
.run/target holds it):
  export CTXGUARD_TARGET=\$(cat .run/target)
  build/bin/ctxguardctl --key "\$(cat .run/demo_key)" whoami
  build/bin/ctxguardctl --key "\$(cat .run/demo_key)" usage --depth 2
  build/bin/ctxguardctl --key "\$(cat .run/demo_key)" watch demo-session --descendants
  CTXGUARD_ADMIN_KEY="\$(cat .run/admin_key)" build/bin/ctxguardctl tenant list
  CTXGUARD_ADMIN_KEY="\$(cat .run/admin_key)" build/bin/ctxguardctl ping --delay 100

Stop everything with: make stop
EOF
