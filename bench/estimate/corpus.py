#!/usr/bin/env python3
"""Builds the estimator's fitting corpus (never from the test conversations): documents of each
kind an agent reads, generated with a fixed seed by tests/support/textgen.py (C sources,
English prose, man pages, Python, JSON, logs, package lists, multilingual text in Cyrillic,
CJK, Hangul, Greek, Arabic and Devanagari scripts, command output: listings, process tables,
git logs, grep hits, test runs, diffs), plus this repository's own files (C, Markdown, SQL,
proto, YAML, scripts) as the kind "repo". Nothing outside the repository is read. Chunks of
64..8192 bytes cut at UTF-8 boundaries; each document goes wholly to the fit set or the
held-out set (by a hash of its name).

usage: corpus.py OUT_DIR   -> OUT_DIR/{fit,holdout}.chunks (u32 length + bytes, repeated)
                              and OUT_DIR/{fit,holdout}.kinds (one kind per chunk)
"""
import glob, hashlib, os, random, struct, sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import textgen as tg  # noqa: E402

out = sys.argv[1]
rng = random.Random(7)


def doc_size(r, lo=500, hi=64_000):
    return int(lo * (hi / lo) ** r.random())  # log-uniform


def english(r, size):
    return tg.grow(r, size, lambda q: tg.prose(q, "en", q.randint(2, 7)) + "\n")


def multilingual(r, size):
    lang = r.choice([l for l in tg.PROSE_LANGUAGES if l != "en"])
    if lang in tg.LANGS and r.random() < 0.4:
        return tg.markdown_doc(r, lang, size)
    return tg.grow(r, size, lambda q: tg.prose(q, lang, q.randint(2, 7)) + "\n")


def command_output(r, size):
    return tg.text(r, r.choice(["listing", "ps", "pods", "gitlog", "grep", "tests", "diff"]), size)


# kind, document maker (rng, size), documents, size range
SOURCES = [
    ("c", lambda r, n: tg.c_source(r, n), 300, (500, 64_000)),
    ("prose", english, 400, (500, 64_000)),
    ("man", lambda r, n: tg.man_page(r, n), 300, (500, 32_000)),
    ("python", lambda r, n: tg.python_source(r, n), 350, (500, 64_000)),
    ("json", lambda r, n: tg.json_document(r, n, indent=r.choice([None, 2, 4])), 150, (300, 64_000)),
    ("logs", lambda r, n: tg.logs(r, n), 12, (20_000, 400_000)),
    ("pkglist", lambda r, n: tg.package_list(r, n), 2, (100_000, 400_000)),
    ("multilingual", multilingual, 300, (500, 32_000)),
    ("cmdout", command_output, 10, (20_000, 400_000)),
]
REPO_GLOBS = ["server/**/*.[ch]", "client/*.[ch]", "tests/**/*.[ch]", "bench/**/*.[ch]",
              "**/*.md", "migrations/*.sql", "proto/**/*.proto", "helm/**/*.yaml",
              "scripts/*", "tests/**/*.py", "bench/**/*.py"]


def chunks(text):
    data = text.encode()
    i = 0
    while i < len(data):
        n = int(64 * (2 ** rng.uniform(0, 7)))  # 64 B .. 8 KiB, log-uniform
        j = min(len(data), i + n)
        while j < len(data) and (data[j] & 0xC0) == 0x80:
            j += 1
        yield data[i:j]
        i = j


def documents():
    for kind, make, count, (lo, hi) in SOURCES:
        for i in range(count):
            r = random.Random(f"estimate-corpus:{kind}:{i}")
            yield kind, f"{kind}:{i}", make(r, doc_size(r, lo, hi)), 60 if kind == "cmdout" else 40
    paths = sorted({p for g in REPO_GLOBS for p in glob.glob(os.path.join(ROOT, g), recursive=True)
                    if os.path.isfile(p) and "/build" not in p[len(ROOT):]})
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                yield "repo", os.path.relpath(p, ROOT), f.read(4 << 20), 40
        except (OSError, UnicodeDecodeError):
            continue


sets = {"fit": [], "holdout": []}
for kind, name, text, per_doc in documents():
    if len(text) < 64:
        continue
    which = "holdout" if int(hashlib.sha1(name.encode()).hexdigest(), 16) % 4 == 0 else "fit"
    cs = list(chunks(text))
    rng.shuffle(cs)
    for c in cs[:per_doc]:
        sets[which].append((kind, c))

os.makedirs(out, exist_ok=True)
for name, items in sets.items():
    with open(os.path.join(out, name + ".chunks"), "wb") as f, \
         open(os.path.join(out, name + ".kinds"), "w") as k:
        for kind, c in items:
            f.write(struct.pack("<I", len(c)))
            f.write(c)
            k.write(kind + "\n")
    print(name, len(items), "chunks", sum(len(c) for _, c in items), "bytes")
