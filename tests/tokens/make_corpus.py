#!/usr/bin/env python3
"""make_corpus.py - the corpus of the token counter's exactness test.

    make_corpus.py [--real] OUT.records [BUDGET_MB]

--real keeps only real-looking text (conversations, generated documents and the repository's
files: the benchmark's mixed corpus).

Records (u32 little-endian length + bytes) from:
  - every string of the test conversations (tests/support/gen_conversations.py, the build's
    seed: message contents, tool call arguments, tool definitions), and of the conversations
    in $CG_EXTRA_CONVERSATIONS (*.json) when that names a directory;
  - documents of the kinds an agent reads, generated with a fixed seed
    (tests/support/textgen.py): C and Python sources, JSON bodies, logs, man page sources,
    package lists, test output, Markdown and prose in Latin, Cyrillic, CJK, Hangul, Greek,
    Arabic and Devanagari scripts; and files of this repository (server/, client/, tests/data,
    proto/, migrations/, docs and scripts): whole documents (capped) and line groups;
  - a sweep over the code points (all of planes 0, 1 and 14, samples of the others) in the
    contexts that decide a character's class under both pre-tokenizers;
  - generated edge cases with a fixed seed: whitespace and digit runs, contractions in all
    cases, \\r\\n mixes, special-token texts, NUL bytes, invalid UTF-8, long single pieces,
    long hex, base64 and minified-JSON runs.
The budget (default 8 MB) bounds the document part so that npm tiktoken stays within ~60 s.
Nothing outside the repository is read unless $CG_EXTRA_CONVERSATIONS says so.
"""
import base64
import glob
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import gen_conversations  # noqa: E402
import textgen  # noqa: E402

args = sys.argv[1:]
real_only = "--real" in args
args = [a for a in args if a != "--real"]
out_path = args[0]
budget = int(float(args[1] if len(args) > 1 else 8) * 1e6)
rng = random.Random(4)
records = []
stats = {}


def add(kind, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if data:
        records.append(data)
        stats[kind] = stats.get(kind, 0) + len(data)


def strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


# -- conversations ------------------------------------------------------------------------
for doc in gen_conversations.conversations():
    for s in strings(doc):
        add("conversations", s)
extra_dir = os.environ.get("CG_EXTRA_CONVERSATIONS")
if extra_dir:
    extra = sorted(glob.glob(os.path.join(extra_dir, "*.json")))
    if not extra:
        sys.exit(f"make_corpus: CG_EXTRA_CONVERSATIONS={extra_dir}: no *.json there")
    for path in extra:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        for s in strings(doc):
            add("extra-conversations", s)


# -- documents: generated kinds and the repository's files ----------------------------------
GENERATED = ["c", "python", "json", "logs", "man", "packages", "prose", "tests", "markdown",
             "yaml", "listing", "diff"]
REPO_GLOBS = ["server/**/*.c", "server/**/*.h", "client/*.c", "tests/data/**/*.*", "proto/**/*.proto",
              "migrations/*.sql", "docs/*.md", "README.md", "bench/README.md", "scripts/*.sh",
              "scripts/*.py", "helm/**/*.yaml"]


def repo_files():
    paths = sorted({p for g in REPO_GLOBS for p in glob.glob(os.path.join(ROOT, g), recursive=True)
                    if os.path.isfile(p)})
    for path in paths:
        with open(path, "rb") as f:
            yield f.read(200_000)


def generated(kind):
    """Documents of one kind, each of a size the corpus cuts at anyway."""
    for i in range(100_000):
        r = random.Random(f"make_corpus:{kind}:{i}")
        yield textgen.text(r, kind, r.choice([2_000, 8_000, 32_000])).encode("utf-8")


def sources():
    for kind in GENERATED:
        yield kind, generated(kind)
    docs = list(repo_files())
    rng.shuffle(docs)
    yield "repository", iter(docs)


# The repository gets a fifth of the budget, the generated kinds share the rest.
shares = {"repository": budget // 5}
for kind in GENERATED:
    shares[kind] = (budget - budget // 5) // (2 * len(GENERATED))
for kind, docs in sources():
    used = 0
    for data in docs:
        if used >= shares[kind]:
            break
        data = data[:rng.choice([2_000, 8_000, 32_000])]
        add(kind, data)
        lines = data.split(b"\n")
        for i in range(0, min(len(lines), 60), 3):
            add(kind, b"\n".join(lines[i:i + rng.randint(1, 4)]))
        used += 2 * len(data)

# -- code point sweep ---------------------------------------------------------------------
def write_and_exit():
    with open(out_path, "wb") as f:
        for r in records:
            f.write(struct.pack("<I", len(r)))
            f.write(r)
    total = sum(stats.values())
    print(f"make_corpus: {len(records)} records, {total / 1e6:.1f} MB ("
          + ", ".join(f"{k} {v / 1e6:.2f}" for k, v in stats.items()) + ")", file=sys.stderr)
    sys.exit(0)


if real_only:
    write_and_exit()


def sweep_points():
    for cp in range(0, 0x20000):
        yield cp
    for cp in range(0x20000, 0xE0000, 97):
        yield cp
    for cp in range(0xE0000, 0xE1000):
        yield cp
    for cp in range(0xE1000, 0x110000, 1009):
        yield cp


CONTEXTS = ["{c}", "a{c}b", "A{c}a", "{c}a", "{c}A", " {c}", "1{c}2", "'{c}s", "{c}'s",
            "x{c}'S", "\n{c}", "{c} \n", ".{c}a", "{c}{c}a", "A{c}{c}", "{c}\u0301"]
chunk = []
for cp in sweep_points():
    if 0xD800 <= cp <= 0xDFFF:
        continue
    c = chr(cp)
    chunk.append(rng.choice(CONTEXTS).format(c=c) + rng.choice([" ", "", "\t", "  "]))
    if len(chunk) >= 64:
        add("sweep", "".join(chunk))
        chunk = []
add("sweep", "".join(chunk))

# -- generated edge cases -----------------------------------------------------------------
ATOMS = [" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000",
         "\u2028", "\u0085", "\x0b", "\x0c", "1", "12", "123", "1234567", "\u0663\u0664",
         "\u00bd", "\u2167", "'s", "'S", "'t", "'T", "'re", "'RE", "'Ve", "'ll", "'LL", "'m",
         "'d", "'D", "'\u017f", "'x", "'", "don", "I", "HELLO", "World", "hello", "CamelCase",
         "\u00c9cole", "\u01c5", "\u02b0", "\u4e2d\u6587", "\u65e5\u672c\u8a9e",
         "\ud55c\uad6d\uc5b4", "\u0928\u092e\u0938\u094d\u0924\u0947", "e\u0301",
         "\u0301", "\u20dd", "\U0001F600", "\U0001F469\u200D\U0001F4BB", "\U0001F1FA\U0001F1F8",
         "\u200b", "\ufeff", "\u00ad", "<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>",
         "<|fim_middle|>", "<|fim_suffix|>", "<|", "|>", "<|endoftext", "{", "}", "\"key\"",
         ": ", ",", "...", "/", "//", "/*", "*/", "->", "=>", "$", "\x00", "\x00\x00", "\x7f",
         "\u041f\u0440\u0438\u0432\u0435\u0442", "\u0645\u0631\u062d\u0628\u0627",
         "\U0001D400", "\U00010400", "\U00010428", "\U000E0041", "\U0010FFFD"]
BAD = [b"\x80", b"\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
       b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3", b"\xfe\xfe", b"\xf8\x88\x80\x80\x80"]
for _ in range(6000):
    parts = []
    for _ in range(rng.randint(1, 24)):
        if rng.random() < 0.05:
            parts.append(rng.choice(BAD))
        else:
            parts.append(rng.choice(ATOMS).encode("utf-8"))
    add("generated", b"".join(parts))
for n in (1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 200, 1000):
    add("runs", " " * n)
    add("runs", "x" + " " * n)
    add("runs", " " * n + "x")
    add("runs", "\n" * n)
    add("runs", "7" * n)
    add("runs", "a" * n)
    add("runs", "!" * n)
    add("runs", "\U0001F600" * n)
    add("runs", "\u4e2d" * n)
    add("runs", "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)))
for n in (4096, 12000):
    add("long", "".join(rng.choice("0123456789abcdef") for _ in range(n)))
    add("long", base64.b64encode(bytes(rng.randrange(256) for _ in range(n * 3 // 4))).decode())
    add("long", json.dumps([textgen.json_record(rng) for _ in range(n // 200)],
                           separators=(",", ":"))[:n])
    add("long", "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
                        for _ in range(n)))
    add("long", bytes(rng.randrange(256) for _ in range(n)))
    add("long", "".join(rng.choice(["\U0001F600", "\u4e2d", "\u00e9", "\u0301"])
                        for _ in range(n // 4)))
    add("long", " " * n + "x")
    add("long", "\n" * n)
    add("long", "ab" * (n // 2))
    add("long", "\u4e2d" * (n // 3))
    add("long", "".join(rng.choice("!@#$%^&*()_+-=[]{};:,.<>?/|~") for _ in range(n)))
    add("long", "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(n)))
    add("long", "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)))

write_and_exit()
