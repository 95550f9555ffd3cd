#!/usr/bin/env bash
# image.sh - build the container image and check it.
#
#   scripts/image.sh build   make ctxguard:<version> and ctxguard:latest from Containerfile
#   scripts/image.sh smoke   run the image's server from its own root against throwaway
#                            PostgreSQL and Redis and check it from the host (non-zero on
#                            any failure)
#   scripts/image.sh base    only make debian:bookworm-slim when local storage has none
#   scripts/image.sh sizes   the image's size, its base's and what the runtime stage adds
#
# build: installs buildah and mmdebstrap when missing (scripts/deps.sh image). Nothing is
# pulled from a registry: when `buildah images` has no debian:bookworm-slim, it is made here
# (mmdebstrap minbase of bookworm from the Debian mirror this machine's apt names, /dev
# emptied, the host's resolv.conf and hostname left out) and committed under that name.
# Then `buildah bud --isolation chroot --layers` (cached layers: a rebuild after a source
# change redoes only the compile and what follows). The host's CA bundle (CG_IMAGE_CA,
# default NODE_EXTRA_CA_CERTS, else /etc/ssl/certs/ca-certificates.crt) reaches the build
# stage as the secret `npm_ca`, for npm only; it is in no layer.
#
# smoke: IMAGE (default ctxguard:latest) is mounted (buildah from + mount); PostgreSQL and
# Redis start under a temp dir (services.sh start --fast); the image's entrypoint runs
# chrooted into the mounted root, /proc and /dev bound, as the image's user, with the
# image's environment plus the DSN, the Redis URL, an admin key and a free loopback port:
# first `migrate`, then the default command (the server). From the host, the build tree's
# ctxguardctl (CG_CTL, default build/bin/ctxguardctl, built here when missing or out of
# date; the build group of scripts/deps.sh is installed first) checks health SERVING,
# creates a tenant and an API key, and counts tests/data/conv/texts/prose.txt exactly
# (o200k_base and gpt-4o, against o200k_counts.tsv); the image's own ctxguardctl checks
# health too. The image itself: user 10001 (nologin), entrypoint, exposed port, version
# label, no compiler or -dev package, no apt lists or caches, no build-time CA. The server
# must then stop cleanly on SIGTERM. On every exit path the server is stopped, the binds
# undone, the working containers unmounted and removed and the services destroyed.
#
# smoke needs root (chroot, mount). build was made and tested as root; without root, buildah
# and mmdebstrap would need user namespaces (uidmap, /etc/subuid ranges): not tried.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SRC=$(pwd)

IMAGE_NAME=ctxguard
BASE_IMAGE=debian:bookworm-slim
APP_UID=10001

log() { printf 'image: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

project_version() {
    sed -n 's/^project(ctxguard VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt"
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

have_base() {
    buildah images --format '{{.Name}}:{{.Tag}}' 2>/dev/null |
        grep -qE "(^|/)${BASE_IMAGE//./\\.}\$"
}

# ---------------------------------------------------------------- base -------------

BASE_TMP=
BASE_CTR=
base_cleanup() {
    if [[ -n $BASE_CTR ]]; then
        buildah rm "$BASE_CTR" >/dev/null 2>&1 || true
    fi
    if [[ -n $BASE_TMP ]]; then
        rm -rf "$BASE_TMP"
    fi
}

make_base() {
    if have_base; then
        log "$BASE_IMAGE is in local storage"
        return 0
    fi
    command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: scripts/deps.sh image"
    # The mirror: what this machine's apt uses (deb822 sources or a one-line list).
    local mirror=()
    if [[ -s /etc/apt/sources.list.d/debian.sources ]]; then
        mirror=(/etc/apt/sources.list.d/debian.sources)
    elif [[ -s /etc/apt/sources.list ]] && grep -q '^deb ' /etc/apt/sources.list; then
        mirror=(/etc/apt/sources.list)
    fi
    local started=$SECONDS
    trap base_cleanup EXIT
    BASE_TMP=$(mktemp -d "${TMPDIR:-/var/tmp}/ctxguard-base.XXXXXX")
    log "making $BASE_IMAGE: mmdebstrap --variant=minbase bookworm ${mirror[*]}"
    # /dev is left empty (a container runtime provides it); mmdebstrap copies the host's
    # resolv.conf and hostname in, which are the runtime's to provide too.
    mmdebstrap --quiet --variant=minbase --format=tar \
        --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
        bookworm - "${mirror[@]}" </dev/null |
        mmtarfilter --path-exclude='/dev/*' >"$BASE_TMP/rootfs.tar"
    BASE_CTR=$(buildah from --pull=never scratch)
    # A local tar archive given to `buildah add` is unpacked (owners, modes, links kept).
    buildah add "$BASE_CTR" "$BASE_TMP/rootfs.tar" / >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd bash --created-by 'mmdebstrap --variant=minbase bookworm (scripts/image.sh)' \
        --label org.opencontainers.image.description='Debian 12 minbase, made by mmdebstrap' \
        "$BASE_CTR"
    buildah commit --quiet --rm "$BASE_CTR" "$BASE_IMAGE" >/dev/null
    BASE_CTR=
    base_cleanup
    BASE_TMP=
    trap - EXIT
    log "$BASE_IMAGE made in $((SECONDS - started)) s"
}

# ---------------------------------------------------------------- build ------------

cmd_build() {
    scripts/deps.sh image
    local started=$SECONDS version source_url ca
    make_base
    version=$(project_version)
    [[ -n $version ]] || die "no project VERSION in CMakeLists.txt"
    source_url=${CG_IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null || true)}
    local args=(--isolation chroot --layers --pull=never
        --build-arg "VERSION=$version" --build-arg "SOURCE_URL=$source_url"
        --build-arg "JOBS=${JOBS:-2}"
        -t "$IMAGE_NAME:$version" -t "$IMAGE_NAME:latest" -f Containerfile)
    ca=${CG_IMAGE_CA:-${NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}}
    if [[ -s $ca ]]; then
        args+=(--secret "id=npm_ca,src=$ca")
    else
        log "no CA bundle at '$ca': npm uses node's own CAs"
    fi
    log "buildah bud ${args[*]} ."
    buildah bud "${args[@]}" .
    log "built $IMAGE_NAME:$version and $IMAGE_NAME:latest in $((SECONDS - started)) s"
    cmd_sizes
}

# Sizes: `buildah images` (as it rounds them), then from the manifests (layers as
# uncompressed tars): the base's layers, the image's, and each layer the image has on top of
# its base (what the runtime stage adds) with the instruction that made it.
cmd_sizes() {
    local image=${IMAGE:-$IMAGE_NAME:latest}
    buildah inspect --type image "$image" >/dev/null 2>&1 || die "no image $image: make image"
    buildah images --format '{{.Name}}:{{.Tag}}  {{.ID}}  {{.Size}}' |
        grep -E "^[^ ]*(/$IMAGE_NAME:|/${BASE_IMAGE//./\\.} )" | sed 's/^/image:   /' >&2
    python3 - "$image" "$BASE_IMAGE" <<'PY' >&2
import json, re, subprocess, sys

def inspect(name):
    out = subprocess.run(["buildah", "inspect", "--type", "image", name],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)

def mib(n):
    return "%.1f MiB" % (n / 1048576)

image, base = sys.argv[1:3]
img, bas = inspect(image), inspect(base)
il = json.loads(img["Manifest"])["layers"]
bl = json.loads(bas["Manifest"])["layers"]
isum, bsum = sum(l["size"] for l in il), sum(l["size"] for l in bl)
if [l["digest"] for l in il[:len(bl)]] != [l["digest"] for l in bl]:
    print("image: %s is not built on the %s in local storage" % (image, base))
    sys.exit(1)
made = [h.get("created_by", "") for h in img["OCIv1"].get("history", [])
        if not h.get("empty_layer")]
print("image: layers of %s: %s; of %s: %s" % (base, mib(bsum), image, mib(isum)))
added = il[len(bl):]
for layer, by in zip(added, made[len(made) - len(added):]):
    # the RUN's build arguments and shell are left out
    by = re.sub(r"^(\|\d+ (\S+=\S* )*)?(/bin/sh -c )?(#\(nop\) )?", "", " ".join(by.split()))
    print("image:   + %10s  %s" % (mib(layer["size"]), by[:90]))
print("image: added by the runtime stage: %s" % mib(isum - bsum))
PY
}

# ---------------------------------------------------------------- smoke ------------

SM_TMP=
SM_CTR=
SM_ROOT=
SM_BASE_CTR=
SM_PID=
smoke_cleanup() {
    local rc=$? pid link i m
    set +e
    if [[ -n $SM_PID ]] && kill -0 "$SM_PID" 2>/dev/null; then
        kill -TERM "$SM_PID" 2>/dev/null
        for ((i = 0; i < 100; i++)); do
            kill -0 "$SM_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$SM_PID" 2>/dev/null
    fi
    if [[ -n $SM_ROOT ]]; then
        # Anything else still running with its root in the image (a hung client).
        for link in /proc/[0-9]*/root; do
            pid=${link#/proc/}
            pid=${pid%/root}
            [[ $(readlink "$link" 2>/dev/null) == "$SM_ROOT" ]] || continue
            kill -KILL "$pid" 2>/dev/null
        done
        for m in dev proc; do
            if mountpoint -q "$SM_ROOT/$m"; then
                umount -R "$SM_ROOT/$m" 2>/dev/null || umount -R -l "$SM_ROOT/$m"
            fi
        done
    fi
    if [[ -n $SM_CTR ]]; then
        buildah umount "$SM_CTR" >/dev/null
        buildah rm "$SM_CTR" >/dev/null
    fi
    if [[ -n $SM_BASE_CTR ]]; then
        buildah umount "$SM_BASE_CTR" >/dev/null
        buildah rm "$SM_BASE_CTR" >/dev/null
    fi
    if [[ -n $SM_TMP ]]; then
        scripts/services.sh destroy "$SM_TMP/services" 2>/dev/null
        rm -rf "$SM_TMP"
    fi
    if ((rc == 0)); then
        log "smoke: passed"
    else
        log "smoke: FAILED (exit $rc)"
    fi
    exit "$rc"
}

FAILS=0
check() { # check DESCRIPTION COMMAND...: one line, pass or fail
    local what=$1
    shift
    if "$@"; then
        printf 'smoke: ok    %s\n' "$what"
    else
        printf 'smoke: FAIL  %s\n' "$what"
        FAILS=$((FAILS + 1))
    fi
}

inspect() { buildah inspect --type image --format "$1" "$IMAGE"; }

# True while the server answers health SERVING to CLIENT... (a ctxguardctl command line).
serving() {
    local out
    out=$(timeout 5 "$@" --target "$TARGET" health 2>&1) || return 1
    grep -qw SERVING <<<"$out" && ! grep -qw NOT_SERVING <<<"$out"
}

json_field() { # json_field KEY < JSON: the first value of KEY, breadth-first
    python3 -c '
import json, sys
key = sys.argv[1]
queue = [json.load(sys.stdin)]
while queue:
    cur = queue.pop(0)
    if isinstance(cur, dict):
        if key in cur and not isinstance(cur[key], (dict, list)):
            print(cur[key]); sys.exit(0)
        queue.extend(cur.values())
    elif isinstance(cur, list):
        queue.extend(cur)
sys.exit(1)' "$1"
}

cmd_smoke() {
    [[ $(id -u) -eq 0 ]] || die "smoke needs root (buildah mount, chroot, mount)"
    IMAGE=${IMAGE:-$IMAGE_NAME:latest}
    local started=$SECONDS
    buildah inspect --type image "$IMAGE" >/dev/null 2>&1 || die "no image $IMAGE: make image"
    # PostgreSQL, Redis and the host's client come from the build group.
    scripts/deps.sh build
    if [[ -n ${CG_CTL:-} ]]; then
        CTL=$CG_CTL
        [[ -x $CTL ]] || die "CG_CTL=$CTL is not an executable"
    else
        # Only the client, in the build tree `make build` uses (configured the same way, so
        # a later `make build` or `make test` goes on from here).
        CTL=$SRC/build/bin/ctxguardctl
        local t=$SECONDS
        if [[ ! -f build/CMakeCache.txt ]]; then
            cmake -S . -B build -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
                >"${TMPDIR:-/tmp}/ctxguard-smoke-cmake.$$.log" 2>&1 ||
                { cat "${TMPDIR:-/tmp}/ctxguard-smoke-cmake.$$.log" >&2; die "cmake failed"; }
            rm -f "${TMPDIR:-/tmp}/ctxguard-smoke-cmake.$$.log"
        fi
        cmake --build build -j"${JOBS:-2}" --target ctxguardctl >/dev/null ||
            die "building the host's ctxguardctl failed"
        log "smoke: host client build/bin/ctxguardctl up to date ($((SECONDS - t)) s)"
    fi

    local texts=$SRC/tests/data/conv/texts want
    want=$(awk -F'\t' '$1 == "prose.txt" { print $2 }' "$texts/o200k_counts.tsv")
    [[ $want =~ ^[0-9]+$ ]] || die "no o200k count of prose.txt in $texts/o200k_counts.tsv"

    trap smoke_cleanup EXIT
    trap 'exit 130' INT TERM
    SM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/ctxguard-smoke.XXXXXX")

    # ---- the image's configuration
    local version user entry=() cmd=() ports
    version=$(project_version)
    mapfile -t entry < <(inspect '{{range .OCIv1.Config.Entrypoint}}{{println .}}{{end}}')
    mapfile -t cmd < <(inspect '{{range .OCIv1.Config.Cmd}}{{println .}}{{end}}')
    mapfile -t IMG_ENV < <(inspect '{{range .OCIv1.Config.Env}}{{println .}}{{end}}')
    user=$(inspect '{{.OCIv1.Config.User}}')
    ports=$(inspect '{{range $p, $v := .OCIv1.Config.ExposedPorts}}{{$p}} {{end}}')
    log "smoke: $IMAGE: entrypoint [${entry[*]}] cmd [${cmd[*]}] user '$user' ports '$ports'"
    check "entrypoint is /usr/bin/ctxguard" [ "${entry[*]}" = /usr/bin/ctxguard ]
    check "exposes 50051/tcp" grep -qw 50051/tcp <<<"$ports"
    check "version label is $version" \
        [ "$(inspect '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')" = "$version" ]
    check "licenses label is Apache-2.0" \
        [ "$(inspect '{{index .OCIv1.Config.Labels "org.opencontainers.image.licenses"}}')" = Apache-2.0 ]
    IMG_UID=${user%%:*}
    IMG_GID=${user#*:}
    [[ $user == *:* ]] || IMG_GID=$IMG_UID
    check "runs as uid $APP_UID (USER $user)" [ "$IMG_UID" = "$APP_UID" ]
    [[ $IMG_UID =~ ^[0-9]+$ && $IMG_GID =~ ^[0-9]+$ ]] ||
        die "USER '$user' is not numeric uid[:gid]: nothing to run the server as"
    ((${#entry[@]} > 0)) || die "the image has no entrypoint"

    # ---- the image's files
    SM_CTR=$(buildah from --pull=never --quiet "$IMAGE")
    SM_ROOT=$(buildah mount "$SM_CTR")
    local passwd
    passwd=$(awk -F: -v u="$APP_UID" '$3 == u' "$SM_ROOT/etc/passwd")
    log "smoke: passwd entry: $passwd"
    check "uid $APP_UID in /etc/passwd with no login shell" \
        grep -qE "^[^:]+:[^:]*:$APP_UID:$APP_UID:[^:]*:[^:]*:/usr/sbin/nologin\$" <<<"$passwd"
    local found
    found=$(cd "$SM_ROOT" && ls -d usr/bin/cc usr/bin/gcc* usr/bin/c++ usr/bin/g++* usr/bin/cpp* \
        usr/bin/clang* usr/bin/tcc usr/bin/ld usr/bin/as usr/lib/gcc 2>/dev/null || true)
    check "no compiler, linker or assembler${found:+ (found: ${found//$'\n'/ })}" [ -z "$found" ]
    found=$(dpkg-query --admindir="$SM_ROOT/var/lib/dpkg" -W -f='${db:Status-Status} ${Package}\n' |
        awk '$1 == "installed" { print $2 }' |
        grep -E '^((gcc|cpp|g\+\+|clang|tcc)(-[0-9.]+)?|binutils.*|build-essential|make|nodejs|npm|.*-dev)$' ||
        true)
    check "no toolchain or -dev package installed${found:+ (found: ${found//$'\n'/ })}" [ -z "$found" ]
    found=$(find "$SM_ROOT/var/lib/apt/lists" "$SM_ROOT/var/cache/apt" -type f ! -name lock 2>/dev/null)
    check "no apt lists or caches${found:+ (found: ${found//$'\n'/ })}" [ -z "$found" ]
    local f missing=""
    for f in usr/share/ctxguard/cl100k_base.cgtok usr/share/ctxguard/o200k_base.cgtok \
        usr/bin/ctxguardctl; do
        [[ -s $SM_ROOT/$f ]] || missing+=" /$f"
    done
    for f in "$SRC"/migrations/*.sql; do
        f=usr/share/ctxguard/migrations/${f##*/}
        [[ -s $SM_ROOT/$f ]] || missing+=" /$f"
    done
    check "token data, every migration and ctxguardctl in the image${missing:+ (missing:$missing)}" \
        [ -z "$missing" ]
    # The build-time CA: the local authorities of this machine must not be in the image.
    local crt line leaked=""
    for crt in /usr/local/share/ca-certificates/*.crt; do
        [[ -s $crt ]] || continue
        line=$(sed -n '/BEGIN CERTIFICATE/{n;p;q}' "$crt")
        [[ -n $line ]] || continue
        if grep -rqF --exclude-dir=proc --exclude-dir=dev -e "$line" "$SM_ROOT"; then
            leaked+=" $(basename "$crt")"
        fi
    done
    check "no local CA of the build machine in the image${leaked:+ (found:$leaked)}" [ -z "$leaked" ]

    # ---- services, mounts, the server
    scripts/services.sh start --fast "$SM_TMP/services"
    local pg_dsn redis_url admin_key port
    pg_dsn=$(. "$SM_TMP/services/env" && echo "$CTXGUARD_PG_DSN")
    redis_url=$(. "$SM_TMP/services/env" && echo "$CTXGUARD_REDIS_URL")
    admin_key=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
    port=$(scripts/services.sh free-port)
    TARGET=127.0.0.1:$port
    # Loopback, not the image's 0.0.0.0: this machine's network is shared with the chroot.
    EXTRA_ENV=(CTXGUARD_PG_DSN="$pg_dsn" CTXGUARD_REDIS_URL="$redis_url"
        CTXGUARD_ADMIN_KEY="$admin_key" CTXGUARD_LISTEN="$TARGET")
    # A command line running what follows from the image's root as its user, with only the
    # image's environment and these settings.
    local in_image=(env -i "${IMG_ENV[@]}" "${EXTRA_ENV[@]}"
        chroot --userspec="$IMG_UID:$IMG_GID" --groups="$IMG_GID" "$SM_ROOT")
    mount -t proc proc "$SM_ROOT/proc"
    mount --rbind /dev "$SM_ROOT/dev"
    mount --make-rslave "$SM_ROOT/dev"

    log "smoke: ${entry[*]} migrate (in the image, uid $IMG_UID)"
    if ! timeout 120 "${in_image[@]}" "${entry[@]}" migrate >"$SM_TMP/migrate.log" 2>&1; then
        cat "$SM_TMP/migrate.log" >&2
        die "ctxguard migrate failed"
    fi
    check "ctxguard migrate exits 0" true
    sed 's/^/  migrate: /' "$SM_TMP/migrate.log" | tail -n 3 >&2

    log "smoke: ${entry[*]} ${cmd[*]} on $TARGET (in the image, uid $IMG_UID)"
    "${in_image[@]}" "${entry[@]}" "${cmd[@]}" >"$SM_TMP/server.log" 2>&1 &
    SM_PID=$!
    local deadline=$((SECONDS + 30)) up=0
    while ((SECONDS < deadline)); do
        if ! kill -0 "$SM_PID" 2>/dev/null; then
            break
        fi
        if serving env -i "$CTL"; then
            up=1
            break
        fi
        sleep 0.2
    done
    if ((!up)); then
        tail -n 20 "$SM_TMP/server.log" >&2
        kill -0 "$SM_PID" 2>/dev/null || die "the image's server exited (log above)"
        die "the image's server did not report SERVING within 30 s"
    fi
    check "health SERVING from the host ($CTL)" true
    local st
    # real, effective, saved and file-system ids, and the supplementary groups
    st=$(awk '/^(Uid|Gid|Groups):/ { $1 = $1; printf "%s%s", sep, $0; sep = ", " }' \
        "/proc/$SM_PID/status")
    check "the server process runs as $IMG_UID:$IMG_GID ($st)" [ "$st" = \
        "Uid: $IMG_UID $IMG_UID $IMG_UID $IMG_UID, Gid: $IMG_GID $IMG_GID $IMG_GID $IMG_GID, Groups: $IMG_GID" ]
    check "the server process's root is the image" [ "$(readlink "/proc/$SM_PID/root")" = "$SM_ROOT" ]
    check "the server is the image's /usr/bin/ctxguard" \
        [ "$(readlink "/proc/$SM_PID/exe")" = "$SM_ROOT/usr/bin/ctxguard" ]
    check "health SERVING from the image's own ctxguardctl" \
        serving "${in_image[@]}" /usr/bin/ctxguardctl

    # ---- tenant, key, an exact count
    local out tenant key total
    out=$(env -i CTXGUARD_ADMIN_KEY="$admin_key" timeout 30 "$CTL" --target "$TARGET" --json \
        tenant create image-smoke) || die "tenant create failed: $out"
    tenant=$(json_field tenant_id <<<"$out") || die "no tenant_id in: $out"
    check "tenant created ($tenant)" true
    out=$(env -i CTXGUARD_ADMIN_KEY="$admin_key" timeout 30 "$CTL" --target "$TARGET" --json \
        key create "$tenant" --name smoke --role admin) || die "key create failed: $out"
    key=$(json_field secret <<<"$out") || die "no secret in: $out"
    check "API key created" true
    local how
    for how in "--encoding o200k_base" "--model gpt-4o"; do
        # shellcheck disable=SC2086 # two words each
        out=$(env -i timeout 30 "$CTL" --target "$TARGET" --key "$key" --json count \
            "$texts/prose.txt" --text $how) || die "count $how failed: $out"
        total=$(json_field total_tokens <<<"$out") || die "no total_tokens in: $out"
        check "CountTokens prose.txt $how: $total tokens, o200k_counts.tsv says $want" \
            [ "$total" = "$want" ]
    done

    # ---- a clean stop
    kill -TERM "$SM_PID"
    local rc=0
    deadline=$((SECONDS + 30))
    while kill -0 "$SM_PID" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 0.1
    done
    if kill -0 "$SM_PID" 2>/dev/null; then
        check "the server stops on SIGTERM within 30 s" false
    else
        wait "$SM_PID" || rc=$?
        check "the server stops on SIGTERM, exit $rc" [ "$rc" = 0 ]
    fi
    SM_PID=
    # What the container's writable layer holds now is what migrate, the server and the
    # clients wrote into the image's filesystem: nothing, so a read-only root works.
    local upper
    upper=$(findmnt -no OPTIONS "$SM_ROOT" | tr ',' '\n' | sed -n 's/^upperdir=//p')
    if [[ -d $upper ]]; then
        found=$(cd "$upper" && find . -mindepth 1 | head -n 5)
        check "nothing written into the image's filesystem${found:+ (found: ${found//$'\n'/ })}" \
            [ -z "$found" ]
    else
        log "smoke: no overlay upper directory for $SM_ROOT: writes not checked"
    fi

    # ---- sizes: `buildah images`, and the bytes in the root the runtime stage added
    local base_root root_b base_b
    SM_BASE_CTR=$(buildah from --pull=never --quiet "$BASE_IMAGE")
    base_root=$(buildah mount "$SM_BASE_CTR")
    root_b=$(du -sxb "$SM_ROOT" | cut -f1)
    base_b=$(du -sxb "$base_root" | cut -f1)
    IMAGE=$IMAGE cmd_sizes
    log "du: image root $(mib "$root_b"), base root $(mib "$base_b"), added $(mib $((root_b - base_b)))"
    log "packages the runtime stage added, largest first (dpkg Installed-Size, KiB):"
    join -v1 \
        <(dpkg-query --admindir="$SM_ROOT/var/lib/dpkg" -W -f='${Package} ${Installed-Size}\n' | sort) \
        <(dpkg-query --admindir="$base_root/var/lib/dpkg" -W -f='${Package}\n' | sort) |
        sort -k2,2nr | awk '{ n++; sum += $2; if (n <= 12) printf "  %-28s %6d\n", $1, $2 }
            END { printf "  (%d packages, %d KiB in all)\n", n, sum }' >&2
    log "smoke: $((SECONDS - started)) s"
    ((FAILS == 0)) || die "$FAILS check(s) failed"
}

case ${1:-} in
build) cmd_build ;;
smoke) cmd_smoke ;;
base)
    [[ $(id -u) -eq 0 ]] || die "needs root"
    make_base
    ;;
sizes) cmd_sizes ;;
*)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
