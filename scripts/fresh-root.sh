#!/usr/bin/env bash
# fresh-root.sh - run commands on a fresh minimal Debian 12, as a newcomer's machine would be.
#
#   scripts/fresh-root.sh [--keep] [--root DIR] COMMAND...
#
# Makes a minimal bookworm root with mmdebstrap (variant apt, plus git, make, sudo and
# ca-certificates: what the README says a machine needs first), from the Debian mirror this
# machine's /etc/apt names; copies this repository's files into it (tracked and untracked but
# not ignored, as in the work tree: no build tree, no .run/, nothing beside it); binds /proc,
# /sys and /dev; and runs COMMAND with bash in the copy (/src/ctxguard) inside a chroot, with
# a clean environment. The exit status is COMMAND's.
#
# The only thing taken from this machine besides the mirror is its certificate authorities:
# the network here presents its own CA for HTTPS, so the host's bundle (and any local CA
# certificates) are copied into the root, and the CA variables set here (NODE_EXTRA_CA_CERTS
# and the like, all naming that bundle) pass through, or npm cannot download anything.
#
# On every exit path (success, failure, Ctrl-C) the processes left running in the root are
# killed, the mounts are undone and the root is deleted (kept with --keep; DIR defaults to a
# new folder under ${TMPDIR:-/tmp}). Needs root (mmdebstrap's root mode, chroot, mount).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SRC=$(pwd)

log() { printf 'fresh-root: %s\n' "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

KEEP=0
ROOT=
while (($# > 0)); do
    case $1 in
    --keep) KEEP=1 ;;
    --root)
        ROOT=${2:?--root needs a directory}
        shift
        ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
    esac
    shift
done
(($# > 0)) || die "usage: $0 [--keep] [--root DIR] COMMAND..."
[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap, chroot and mount)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: scripts/deps.sh image"

if [[ -z $ROOT ]]; then
    ROOT=$(mktemp -d "${TMPDIR:-/tmp}/ctxguard-fresh.XXXXXX")
else
    [[ ! -e $ROOT || -z $(ls -A "$ROOT") ]] || die "$ROOT exists and is not empty"
    mkdir -p "$ROOT"
fi
ROOT=$(cd "$ROOT" && pwd)

# Kills what still runs with its root inside ROOT (PostgreSQL, Redis, the server, when a
# command failed before `make stop`), then unmounts, innermost first.
cleanup() {
    local rc=$? pid link i
    set +e
    for ((i = 0; i < 2; i++)); do
        for link in /proc/[0-9]*/root; do
            pid=${link#/proc/}
            pid=${pid%/root}
            [[ $(readlink "$link" 2>/dev/null) == "$ROOT" ]] || continue
            kill -KILL "$pid" 2>/dev/null
        done
        sleep 0.2
    done
    for m in dev sys proc; do
        if mountpoint -q "$ROOT/$m"; then
            umount -R "$ROOT/$m" 2>/dev/null || umount -R -l "$ROOT/$m"
        fi
    done
    if ((KEEP)); then
        log "kept $ROOT"
    elif [[ -n $(findmnt -rn -o TARGET | grep -F "$ROOT/" || true) ]]; then
        log "mounts remain under $ROOT; not deleting it"
    else
        rm -rf --one-file-system "$ROOT"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The mirror: what this machine's apt uses (deb822 sources or a one-line list).
MIRROR=()
if [[ -s /etc/apt/sources.list.d/debian.sources ]]; then
    MIRROR=(/etc/apt/sources.list.d/debian.sources)
elif [[ -s /etc/apt/sources.list ]] && grep -q '^deb ' /etc/apt/sources.list; then
    MIRROR=(/etc/apt/sources.list)
fi

started=$SECONDS
log "mmdebstrap bookworm into $ROOT"
mmdebstrap --quiet --variant=apt --include=git,make,sudo,ca-certificates \
    bookworm "$ROOT" "${MIRROR[@]}" </dev/null
log "root made in $((SECONDS - started)) s"

cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    # Kept there, update-ca-certificates (run again by later installs) keeps them too.
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi

mkdir -p "$ROOT/src/ctxguard"
git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
    tar -C "$SRC" --null -T - -cf - | tar -C "$ROOT/src/ctxguard" -xf -

mount -t proc proc "$ROOT/proc"
mount -t sysfs sys "$ROOT/sys"
mount --rbind /dev "$ROOT/dev"
mount --make-rslave "$ROOT/dev"

ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
    LANG=C.UTF-8 TERM=dumb CI=${CI:-} DEBIAN_FRONTEND=noninteractive)
for var in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE GIT_SSL_CAINFO; do
    [[ -n ${!var:-} ]] && ENV+=("$var=${!var}")
done

log "running in the root: $*"
set +e
chroot "$ROOT" /usr/bin/env -i "${ENV[@]}" /bin/bash -c 'cd /src/ctxguard && eval "$*"' \
    bash "$@" </dev/null
rc=$?
set -e
log "command exited $rc after $((SECONDS - started)) s in all"
exit "$rc"
