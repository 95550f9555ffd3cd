#!/usr/bin/env bash
# gen_unicode_classes.sh - regenerates server/core/unicode_classes.c from ICU (Unicode 15.0,
# the version of the regex tables inside npm tiktoken; see scripts/gen_unicode_classes.c).
# Needs Debian 12's libicu-dev (ICU 72). The output is committed: the build does not run this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O1 -o "$tmp/gen" scripts/gen_unicode_classes.c $(pkg-config --cflags --libs icu-uc)
"$tmp/gen" >"$tmp/out.c"
mv "$tmp/out.c" server/core/unicode_classes.c
echo "wrote server/core/unicode_classes.c"
