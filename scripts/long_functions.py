#!/usr/bin/env python3
"""long_functions.py - lists the functions of server/ longer than 100 lines.

A function's length is the lines of its definition, from the first line of its signature to
its closing brace. The scan counts braces the way the house style writes them (clang-format,
BreakBeforeBraces: Linux): a function's body opens with a `{` alone in column 0 and closes
with the next `}` in column 0; the signature is the lines above the `{` back to the previous
blank line, comment, preprocessor line or top-level item.

Prints every long function, then checks them against KNOWN_LONG below: a long function that
is not listed there (a new one, or one that was split and grew back under a new name) fails
with exit status 1; a listed function that is no longer long is reported so that the list
shrinks with the code. Run:  scripts/long_functions.py  (also the ctest `lint_long_functions`).
"""
import os
import re
import sys

MAX_LINES = 100

# The long functions allowed, as "path relative to server/: function". Empty since issue 14
# split the last of them: keep it so; never add a function here to make a new one pass.
KNOWN_LONG = set()

NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")


def signature_start(lines, brace):
    """The index of the first line of the signature whose body opens at lines[brace]."""
    i = brace - 1
    while i > 0:
        prev = lines[i - 1]
        s = prev.strip()
        if (s == "" or prev.startswith("}") or prev.startswith("#") or s.endswith(";")
                or s.endswith("*/") or s.startswith("//")):
            break
        i -= 1
    return i


def functions(path):
    """[(name, first line (1-based), length in lines)] of the functions defined in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i].rstrip() != "{":
            i += 1
            continue
        start = signature_start(lines, i)
        m = NAME.search(" ".join(lines[start:i]))
        end = i + 1
        while end < len(lines) and not lines[end].startswith("}"):
            end += 1
        if m is not None:
            out.append((m.group(1), start + 1, end - start + 1))
        i = end + 1
    return out


def long_functions(root):
    found = {}
    server = os.path.join(root, "server")
    for dirpath, _, files in os.walk(server):
        for name in sorted(files):
            if not name.endswith(".c"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, server)
            for fn, line, length in functions(path):
                if length > MAX_LINES:
                    found[f"{rel}: {fn}"] = (line, length)
    return found


def main(argv):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = argv[1] if len(argv) > 1 else here
    if not os.path.isdir(os.path.join(root, "server")):
        print(f"long_functions: no server/ under {root}", file=sys.stderr)
        return 2
    found = long_functions(root)
    failed = False
    for key in sorted(found):
        line, length = found[key]
        known = key in KNOWN_LONG
        print(f"{'known' if known else 'NEW'}: {key} ({length} lines, line {line})")
        failed |= not known
    for key in sorted(KNOWN_LONG - set(found)):
        print(f"no longer over {MAX_LINES} lines (shrink KNOWN_LONG): {key}")
    print(f"long_functions: {len(found)} functions over {MAX_LINES} lines")
    print("long_functions: FAIL (a new function over the limit)" if failed else "long_functions: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
