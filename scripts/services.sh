#!/usr/bin/env bash
# services.sh - throwaway PostgreSQL 15 and Redis for `make run` and `make test`.
#
#   scripts/services.sh start [--fast] DIR   start both under DIR (idempotent: reuse what runs)
#   scripts/services.sh stop DIR             stop both (safe to repeat)
#   scripts/services.sh env DIR              print DIR/env (eval "$(scripts/services.sh env DIR)")
#   scripts/services.sh status DIR           exit 0 when both answer
#   scripts/services.sh destroy DIR          stop both and delete DIR and its data
#   scripts/services.sh pg-stop|pg-start|redis-stop|redis-start DIR
#                                            one service only, same port (failure tests)
#   scripts/services.sh pg-stop --immediate DIR   a crash: no checkpoint, recovery at start
#   scripts/services.sh pg-freeze|pg-thaw|redis-freeze|redis-thaw DIR
#                                            SIGSTOP/SIGCONT (PostgreSQL: the postmaster and
#                                            every child): sockets stay open, nothing answers
#   scripts/services.sh free-port [PREFERRED] print PREFERRED if free, else a free port
#   scripts/services.sh redis-cluster-start|redis-cluster-stop DIR
#                                            a 3-master Redis Cluster (no replicas) under
#                                            DIR/cluster; DIR/cluster/env exports
#                                            CG_TEST_REDIS_CLUSTER_URL (its first node) and
#                                            CG_TEST_REDIS_CLUSTER_PORTS
#   scripts/services.sh redis-cluster-node-stop|redis-cluster-node-start DIR N
#                                            node N (1..3) of it only, same port and identity
#
# Both listen on 127.0.0.1 only, on free ports picked here (never 5432/6379), so that
# several runs on one machine do not collide. --fast turns off fsync,
# synchronous_commit and full_page_writes: for test clusters that claim no durability
# (it takes effect when the cluster is created, the first start of a DIR).
#
# DIR/env (sourced by run.sh and test.sh) exports:
#   CTXGUARD_PG_DSN    postgresql://postgres@127.0.0.1:PORT/ctxguard
#   CTXGUARD_REDIS_URL redis://127.0.0.1:PORT/0
#   CG_TEST_PG_DSN, CG_TEST_REDIS_URL   the same values, for the tests
#   CG_TEST_SERVICES, CG_TEST_SERVICES_DIR   this script and DIR, so that a test can stop
#                      and restart one service (pg-stop DIR / pg-start DIR ...)
# Layout: DIR/pg/data (owned by postgres when run as root), DIR/pg/postgres.log,
# DIR/redis/{redis.pid,redis.log}, DIR/ports, DIR/env.
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin
if [[ ! -x $PG_BIN/pg_ctl ]]; then
    # Another major version still works for a throwaway cluster; 15 is what Debian 12 ships.
    cand=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [[ -n $cand && -x $cand/pg_ctl ]] && PG_BIN=$cand
fi
REDIS_SERVER=$(command -v redis-server || echo /usr/bin/redis-server)
REDIS_CLI=$(command -v redis-cli || echo /usr/bin/redis-cli)
DB_NAME=ctxguard
PG_SUPERUSER=postgres
PORT_MIN=15000 # below the kernel's ephemeral range (32768-60999)
PORT_SPAN=17000
LOCK_FILE=${TMPDIR:-/tmp}/ctxguard-services.$(id -u).lock # per user: no permission clash
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
# shellcheck source=scripts/lib.sh
source "$(dirname "$SELF")/lib.sh"

log() { printf 'services: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '2,22p' "$SELF" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- helpers ---------

# Runs a PostgreSQL server-side command as an unprivileged user: initdb and postgres
# refuse root. As root that is the `postgres` user; otherwise the caller itself.
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

port_in_use() {
    local p=$1
    if command -v ss >/dev/null 2>&1; then
        if ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then
            return 0
        fi
    fi
    # Something listening on loopback (or on the wildcard address) accepts this.
    if timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$p" 2>/dev/null; then
        return 0
    fi
    return 1
}

# Prints a free port, neither a default one nor one in "$@" (already picked by this run).
pick_port() {
    local tries=0 p x taken
    while ((tries < 200)); do
        tries=$((tries + 1))
        p=$((PORT_MIN + (RANDOM * 32768 + RANDOM) % PORT_SPAN))
        taken=0
        for x in 5432 6379 50051 "$@"; do
            [[ $p == "$x" ]] && taken=1
        done
        ((taken)) && continue
        port_in_use "$p" && continue
        echo "$p"
        return 0
    done
    die "no free port found in $PORT_MIN-$((PORT_MIN + PORT_SPAN))"
}

read_ports() {
    PG_PORT=""
    REDIS_PORT=""
    if [[ -f $DIR/ports ]]; then
        # shellcheck disable=SC1091
        source "$DIR/ports"
    fi
}

write_ports() {
    printf 'PG_PORT=%s\nREDIS_PORT=%s\n' "$PG_PORT" "$REDIS_PORT" >"$DIR/ports.tmp"
    mv -f "$DIR/ports.tmp" "$DIR/ports"
}

write_env() {
    local pg_dsn="postgresql://$PG_SUPERUSER@127.0.0.1:$PG_PORT/$DB_NAME"
    local redis_url="redis://127.0.0.1:$REDIS_PORT/0"
    {
        echo "# written by scripts/services.sh; source it: . $DIR/env"
        echo "export CTXGUARD_PG_DSN=$pg_dsn"
        echo "export CTXGUARD_REDIS_URL=$redis_url"
        echo "export CG_TEST_PG_DSN=$pg_dsn"
        echo "export CG_TEST_REDIS_URL=$redis_url"
        echo "export CG_TEST_SERVICES=$SELF"
        echo "export CG_TEST_SERVICES_DIR=$DIR"
    } >"$DIR/env.tmp"
    mv -f "$DIR/env.tmp" "$DIR/env"
}

# True when pid runs. A killed daemon whose parent does not reap it (pid 1 in some
# containers) stays a zombie, which kill -0 still reports: zombies count as dead.
alive() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null || true)
    [[ -n $state && $state != Z && $state != X ]]
}

# ---------------------------------------------------------------- PostgreSQL ------

# DIR/pg may be a link to a temp dir (see pg_prepare_dir): hand the postgres user the
# real path, since it may not be able to walk DIR.
pg_dir() { readlink -f "$DIR/pg"; }
pg_data() { echo "$(pg_dir)/data"; }

pg_running() {
    [[ -f $(pg_data)/PG_VERSION ]] || return 1
    local pid
    pid=$(head -n 1 "$(pg_data)/postmaster.pid" 2>/dev/null || true)
    alive "$pid" || return 1
    as_pg "$PG_BIN/pg_ctl" -D "$(pg_data)" status >/dev/null 2>&1
}

pg_ready() {
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U "$PG_SUPERUSER" -d postgres -t 2
}

# Creates DIR/pg, owned by the user the cluster runs as. When that user cannot reach
# DIR (a clone under /root, say), the data lives in a private temp dir that DIR/pg
# links to; `destroy` removes it.
pg_prepare_dir() {
    [[ -e $DIR/pg ]] && return 0
    [[ -L $DIR/pg ]] && rm -f "$DIR/pg" # its temp dir is gone (a reboot): start afresh
    mkdir -p "$DIR/pg"
    if [[ $(id -u) -eq 0 ]]; then
        chown postgres: "$DIR/pg"
        chmod 700 "$DIR/pg"
        if ! as_pg test -w "$DIR/pg" -a -x "$DIR/pg"; then
            rmdir "$DIR/pg"
            local tmp
            tmp=$(mktemp -d "${TMPDIR:-/tmp}/ctxguard-pg.XXXXXX")
            chown postgres: "$tmp"
            chmod 700 "$tmp"
            ln -s "$tmp" "$DIR/pg"
            log "postgres cannot reach $DIR; its data lives in $tmp"
        fi
    fi
}

pg_init() {
    [[ -f $(pg_data)/PG_VERSION ]] && return 0
    log "initdb $(pg_data)"
    as_pg "$PG_BIN/initdb" -D "$(pg_data)" -A trust -U "$PG_SUPERUSER" -E UTF8 --locale=C \
        >"$DIR/pg/initdb.log" 2>&1 || {
        cat "$DIR/pg/initdb.log" >&2
        die "initdb failed"
    }
    # Settings that hold for every start; the port is given at start (it may change).
    local conf
    conf="
# ---- scripts/services.sh ----
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
log_line_prefix = '%m [%p] %q%u@%d '
log_min_duration_statement = -1
"
    if ((FAST)); then
        conf+="
# test cluster: no durability claimed
fsync = off
synchronous_commit = off
full_page_writes = off
"
    fi
    as_pg tee -a "$(pg_data)/postgresql.conf" >/dev/null <<<"$conf"
}

pg_start() {
    pg_prepare_dir
    pg_init
    if pg_running; then
        [[ -n $PG_PORT ]] || die "PostgreSQL runs in $(pg_data) but $DIR/ports has no port"
        log "PostgreSQL already running on 127.0.0.1:$PG_PORT"
    else
        local attempt
        for attempt in 1 2 3; do
            if [[ -z $PG_PORT ]] || port_in_use "$PG_PORT"; then
                [[ -n $PG_PORT ]] && log "port $PG_PORT is taken; picking another"
                PG_PORT=$(pick_port "$REDIS_PORT")
            fi
            # The postmaster.pid of a killed cluster whose pid is a zombie (or reused)
            # would stop the new postmaster: pg_running said it is dead, so drop it.
            rm -f "$(pg_data)/postmaster.pid"
            # The subshell closes what the caller left open (this script's lock on fd 9
            # included) so that the postmaster does not keep it.
            if (
                close_inherited_fds
                as_pg "$PG_BIN/pg_ctl" -D "$(pg_data)" -l "$(pg_dir)/postgres.log" \
                    -o "-p $PG_PORT" -w -t 60 start
            ) >/dev/null 2>&1; then
                break
            fi
            log "PostgreSQL did not start on port $PG_PORT (attempt $attempt); log tail:"
            tail -n 5 "$DIR/pg/postgres.log" >&2 || true
            PG_PORT=""
            ((attempt == 3)) && die "PostgreSQL failed to start; see $DIR/pg/postgres.log"
        done
        log "PostgreSQL started on 127.0.0.1:$PG_PORT"
    fi
    local i
    for ((i = 0; i < 150; i++)); do
        pg_ready && break
        sleep 0.2
    done
    pg_ready || die "PostgreSQL on port $PG_PORT does not accept connections; see $DIR/pg/postgres.log"
    local exists
    exists=$("$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_SUPERUSER" -d postgres -tAq \
        -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")
    if [[ $exists != 1 ]]; then
        "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_SUPERUSER" "$DB_NAME"
    fi
}

pg_stop() {
    local mode=fast
    ((IMMEDIATE)) && mode=immediate
    if pg_running; then
        # A frozen cluster (pg-freeze) would not see the stop request: thaw it first.
        pg_signal CONT 2>/dev/null
        as_pg "$PG_BIN/pg_ctl" -D "$(pg_data)" -m "$mode" -w -t 60 stop >/dev/null
        log "PostgreSQL stopped ($mode)"
    fi
}

# The postmaster's pid, then its children's (backends, checkpointer, WAL writer, ...).
pg_pids() {
    local pm
    pm=$(head -n 1 "$(pg_data)/postmaster.pid" 2>/dev/null || true)
    alive "$pm" || die "PostgreSQL does not run in $(pg_data)"
    echo "$pm"
    # stat: pid (comm) state ppid ...; comm may hold spaces and parentheses. A process
    # that exits meanwhile makes cat fail: not an error.
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } |
        awk -v pm="$pm" '{ pid = $1; sub(/^.*\) /, ""); if ($2 == pm) print pid }'
}

# SIGSTOP (freeze) or SIGCONT (thaw) to the postmaster and its children, in one kill: the
# postmaster comes first, so it forks no child that the signal would miss.
pg_signal() {
    local sig=$1 pids
    pids=$(pg_pids)
    # shellcheck disable=SC2086 # one word per pid
    kill "-$sig" $pids 2>/dev/null || true
    log "PostgreSQL sent SIG$sig"
}

# ---------------------------------------------------------------- Redis -----------

redis_pid() {
    local pid
    [[ -f $DIR/redis/redis.pid ]] || return 1
    pid=$(cat "$DIR/redis/redis.pid" 2>/dev/null || true)
    alive "$pid" || return 1
    # Guard against a recycled pid belonging to something else.
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] || return 1
    echo "$pid"
}

redis_ready() {
    [[ $("$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

redis_start() {
    mkdir -p "$DIR/redis"
    if redis_pid >/dev/null; then
        [[ -n $REDIS_PORT ]] || die "Redis runs for $DIR but $DIR/ports has no port"
        log "Redis already running on 127.0.0.1:$REDIS_PORT"
    else
        local attempt i
        for attempt in 1 2 3; do
            if [[ -z $REDIS_PORT ]] || port_in_use "$REDIS_PORT"; then
                [[ -n $REDIS_PORT ]] && log "port $REDIS_PORT is taken; picking another"
                REDIS_PORT=$(pick_port "$PG_PORT")
            fi
            rm -f "$DIR/redis/redis.pid"
            if (
                close_inherited_fds
                exec "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
                    --appendonly no --daemonize yes --pidfile "$DIR/redis/redis.pid" \
                    --logfile "$DIR/redis/redis.log" --dir "$DIR/redis" --maxclients 4096
            ) >/dev/null 2>&1; then
                for ((i = 0; i < 100; i++)); do
                    redis_pid >/dev/null && redis_ready && break
                    sleep 0.1
                done
                redis_pid >/dev/null && redis_ready && break
            fi
            log "Redis did not start on port $REDIS_PORT (attempt $attempt); log tail:"
            tail -n 5 "$DIR/redis/redis.log" >&2 || true
            REDIS_PORT=""
            ((attempt == 3)) && die "Redis failed to start; see $DIR/redis/redis.log"
        done
        log "Redis started on 127.0.0.1:$REDIS_PORT"
    fi
    redis_ready || die "Redis on port $REDIS_PORT does not answer PING"
}

redis_stop() {
    local pid i
    pid=$(redis_pid) || return 0
    kill -CONT "$pid" 2>/dev/null || true # frozen by redis-freeze: let it see the TERM
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$DIR/redis/redis.pid"
    log "Redis stopped"
}

# ---------------------------------------------------------------- Redis Cluster ---

# Each node lives in DIR/cluster/nN with its nodes.conf (its identity and slots: a node
# started again rejoins with them, empty, as no data is saved). The ports come from
# pick_port, below 22768: a node's bus port, its port + 10000, stays below the ephemeral
# range.
# cluster-require-full-coverage no: a stopped master takes its slots down, not the others'.

cluster_node_pid() {
    local pid f=$DIR/cluster/n$1/redis.pid
    [[ -f $f ]] || return 1
    pid=$(cat "$f" 2>/dev/null || true)
    alive "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] || return 1
    echo "$pid"
}

cluster_node_start() {
    local i=$1 port=$2 d=$DIR/cluster/n$1 k
    mkdir -p "$d"
    cluster_node_pid "$i" >/dev/null && return 0
    rm -f "$d/redis.pid"
    (
        close_inherited_fds
        cd "$d"
        exec "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log" --dir "$d" \
            --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
            --cluster-require-full-coverage no --maxclients 4096
    ) >/dev/null 2>&1 || die "Redis cluster node $i did not start; see $d/redis.log"
    for ((k = 0; k < 100; k++)); do
        [[ $("$REDIS_CLI" -p "$port" ping 2>/dev/null) == PONG ]] && return 0
        sleep 0.1
    done
    die "Redis cluster node $i on port $port does not answer; see $d/redis.log"
}

cluster_node_stop() {
    local pid k
    pid=$(cluster_node_pid "$1") || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((k = 0; k < 100; k++)); do
        alive "$pid" || break
        sleep 0.1
    done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
    rm -f "$DIR/cluster/n$1/redis.pid"
}

# Waits until every node says cluster_state:ok.
cluster_wait_ok() {
    local k p ok
    for ((k = 0; k < 200; k++)); do
        ok=1
        for p in "${CLUSTER_PORTS[@]}"; do
            "$REDIS_CLI" -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
        done
        ((ok)) && return 0
        sleep 0.1
    done
    die "the Redis cluster did not reach cluster_state:ok"
}

cluster_start() {
    local i
    if [[ -f $DIR/cluster/ports ]]; then
        read -r -a CLUSTER_PORTS <"$DIR/cluster/ports"
        for i in 1 2 3; do cluster_node_start "$i" "${CLUSTER_PORTS[$((i - 1))]}"; done
        cluster_wait_ok
        return 0
    fi
    CLUSTER_PORTS=()
    local p k
    for i in 1 2 3; do
        # A port whose bus port is free too, neither of them one of the other nodes', and
        # the bus port below the kernel's ephemeral range (32768-60999), where an outgoing
        # connection could hold it.
        for ((k = 0; k < 200; k++)); do
            p=$(pick_port "$PG_PORT" "$REDIS_PORT" "${CLUSTER_PORTS[@]}" \
                $((${CLUSTER_PORTS[0]:-0} + 10000)) $((${CLUSTER_PORTS[1]:-0} + 10000)))
            ((p + 10000 < 32768)) || continue
            port_in_use $((p + 10000)) || [[ " ${CLUSTER_PORTS[*]} " == *" $((p + 10000)) "* ]] ||
                break
        done
        CLUSTER_PORTS+=("$p")
        cluster_node_start "$i" "$p"
    done
    "$REDIS_CLI" --cluster create "${CLUSTER_PORTS[@]/#/127.0.0.1:}" --cluster-replicas 0 \
        --cluster-yes >"$DIR/cluster/create.log" 2>&1 || {
        cat "$DIR/cluster/create.log" >&2
        die "redis-cli --cluster create failed"
    }
    echo "${CLUSTER_PORTS[*]}" >"$DIR/cluster/ports"
    {
        echo "export CG_TEST_REDIS_CLUSTER_URL=redis://127.0.0.1:${CLUSTER_PORTS[0]}/0"
        echo "export CG_TEST_REDIS_CLUSTER_PORTS='${CLUSTER_PORTS[*]}'"
    } >"$DIR/cluster/env"
    cluster_wait_ok
    log "Redis cluster started on 127.0.0.1:${CLUSTER_PORTS[*]}"
}

# ---------------------------------------------------------------- commands --------

FAST=0
IMMEDIATE=0
CMD=${1:-}
[[ -n $CMD ]] || usage
shift
if [[ $CMD == free-port ]]; then
    # free-port [PREFERRED]: PREFERRED when nothing listens on it, else a free port.
    if [[ -n ${1:-} ]] && ! port_in_use "$1"; then
        echo "$1"
    else
        pick_port
    fi
    exit 0
fi
while [[ ${1:-} == --* ]]; do
    case $1 in
    --fast) FAST=1 ;;
    --immediate) IMMEDIATE=1 ;;
    *) usage ;;
    esac
    shift
done
NODE=""
if [[ $CMD == redis-cluster-node-* ]]; then
    [[ $# -eq 2 && $2 =~ ^[123]$ ]] || usage
    NODE=$2
    set -- "$1"
fi
[[ $# -eq 1 ]] || usage
case $CMD in
start | redis-cluster-start) mkdir -p "$1" ;;
stop | destroy | pg-stop | redis-stop | redis-cluster-stop) [[ -d $1 ]] || exit 0 ;;
*) [[ -d $1 ]] || die "$1 does not exist: run '$0 start $1' first" ;;
esac
DIR=$(cd "$1" && pwd)

with_lock() {
    # One start at a time on this machine: picking a port and binding it is then atomic
    # with respect to other runs of this script.
    # The daemons started under it close it (close_inherited_fds), or they would hold it
    # for life.
    exec 9>>"$LOCK_FILE"
    flock -w 120 9 || die "could not take $LOCK_FILE"
}

case $CMD in
start)
    [[ -x $PG_BIN/pg_ctl ]] || die "PostgreSQL binaries not found; run scripts/deps.sh"
    [[ -x $REDIS_SERVER ]] || die "redis-server not found; run scripts/deps.sh"
    with_lock
    read_ports
    pg_start
    write_ports
    redis_start
    write_ports
    write_env
    log "ready: $DIR/env"
    ;;
stop)
    read_ports
    for i in 1 2 3; do cluster_node_stop "$i"; done
    redis_stop
    pg_stop
    ;;
env)
    [[ -f $DIR/env ]] || die "$DIR/env does not exist: run '$0 start $DIR' first"
    cat "$DIR/env"
    ;;
status)
    read_ports
    ok=0
    if pg_running && [[ -n $PG_PORT ]] && pg_ready; then
        echo "postgresql: running on 127.0.0.1:$PG_PORT"
    else
        echo "postgresql: stopped"
        ok=1
    fi
    if redis_pid >/dev/null && [[ -n $REDIS_PORT ]] && redis_ready; then
        echo "redis: running on 127.0.0.1:$REDIS_PORT"
    else
        echo "redis: stopped"
        ok=1
    fi
    exit $ok
    ;;
destroy)
    read_ports
    for i in 1 2 3; do cluster_node_stop "$i"; done
    redis_stop
    pg_stop
    if [[ -L $DIR/pg ]]; then
        target=$(readlink "$DIR/pg")
        [[ $target == "${TMPDIR:-/tmp}"/ctxguard-pg.* ]] && rm -rf "$target"
    fi
    rm -rf "$DIR"
    ;;
pg-start)
    with_lock
    read_ports
    [[ -n $PG_PORT ]] || die "no recorded PostgreSQL port in $DIR/ports: use start"
    port_before=$PG_PORT
    pg_start
    [[ $PG_PORT == "$port_before" ]] || { write_ports; write_env; log "PostgreSQL moved to port $PG_PORT"; }
    ;;
pg-stop)
    read_ports
    pg_stop
    ;;
pg-freeze)
    pg_signal STOP
    ;;
pg-thaw)
    # Nothing runs: nothing to thaw (a cleanup may thaw what a failed test left stopped).
    pg_running || exit 0
    pg_signal CONT
    ;;
redis-freeze | redis-thaw)
    if ! pid=$(redis_pid); then
        [[ $CMD == redis-thaw ]] && exit 0
        die "Redis does not run for $DIR"
    fi
    sig=STOP
    [[ $CMD == redis-thaw ]] && sig=CONT
    kill "-$sig" "$pid"
    log "Redis sent SIG$sig"
    ;;
redis-start)
    with_lock
    read_ports
    [[ -n $REDIS_PORT ]] || die "no recorded Redis port in $DIR/ports: use start"
    port_before=$REDIS_PORT
    redis_start
    [[ $REDIS_PORT == "$port_before" ]] || { write_ports; write_env; log "Redis moved to port $REDIS_PORT"; }
    ;;
redis-stop)
    read_ports
    redis_stop
    ;;
redis-cluster-start)
    [[ -x $REDIS_SERVER ]] || die "redis-server not found; run scripts/deps.sh"
    with_lock
    read_ports
    cluster_start
    ;;
redis-cluster-stop)
    for i in 1 2 3; do cluster_node_stop "$i"; done
    rm -rf "$DIR/cluster"
    ;;
redis-cluster-node-stop)
    cluster_node_stop "$NODE"
    ;;
redis-cluster-node-start)
    [[ -f $DIR/cluster/ports ]] || die "no Redis cluster in $DIR: use redis-cluster-start"
    read -r -a CLUSTER_PORTS <"$DIR/cluster/ports"
    cluster_node_start "$NODE" "${CLUSTER_PORTS[$((NODE - 1))]}"
    ;;
*)
    usage
    ;;
esac
