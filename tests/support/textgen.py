"""textgen.py - deterministic text of the kinds an agent reads and writes, for ctxguard's test
and benchmark data: C and Python sources, YAML, JSON API bodies, logs, test runner output,
directory listings, git logs, grep hits, diffs, man pages (roff), package lists, Markdown, and
prose in several languages and scripts (Latin, Cyrillic, CJK, Hangul, Greek, Arabic,
Devanagari).

Every function takes a random.Random and returns str; the same seed gives the same text (for
one Python version). Python 3 standard library only. Used by gen_conversations.py (the
conversations), tests/tokens/make_corpus.py (the exactness corpus) and
bench/estimate/corpus.py (the estimator's fitting corpus).
"""

import json

# -- vocabulary ---------------------------------------------------------------------------
SERVICES = ["billing-api", "ledger", "auth-gateway", "search-indexer", "notifier", "payments",
            "inventory", "report-builder", "media-store", "session-broker", "geo-lookup",
            "feature-flags", "audit-trail", "rate-limiter", "order-router", "mailer"]
REPOS = ["platform", "checkout", "core-services", "data-pipeline", "edge", "backoffice",
         "mobile-backend", "infra-tools"]
NOUNS = ["buf", "conn", "pool", "req", "resp", "cache", "entry", "node", "slot", "queue",
         "batch", "chunk", "frame", "token", "lease", "span", "row", "page", "index", "shard",
         "peer", "route", "rule", "limit", "quota", "event", "job", "task", "worker", "timer",
         "header", "cursor", "range", "block", "record", "stream", "socket", "handle", "table",
         "config", "state", "ctx", "arena", "ring", "map", "set", "list", "key", "value", "hash"]
VERBS = ["init", "open", "close", "read", "write", "flush", "parse", "encode", "decode",
         "lookup", "insert", "remove", "resize", "append", "reset", "drain", "acquire",
         "release", "commit", "rollback", "retry", "expire", "merge", "split", "scan", "sync",
         "validate", "apply", "load", "store", "emit", "dispatch", "poll", "bind", "check"]
ADJ = ["max", "min", "next", "prev", "last", "first", "total", "free", "used", "dirty",
       "stale", "pending", "active", "idle", "local", "remote", "raw", "safe", "fast", "slow"]
C_TYPES = ["int", "size_t", "uint32_t", "uint64_t", "int64_t", "bool", "double", "char *",
           "const char *", "void *", "uint8_t *", "unsigned"]
DIRS = ["src", "lib", "internal", "pkg", "cmd", "server", "core", "util", "net", "store",
        "api", "config", "tests", "scripts", "docs", "deploy", "tools"]
EXTS = [".c", ".h", ".py", ".go", ".rs", ".ts", ".yaml", ".json", ".md", ".sql", ".toml",
        ".sh", ".proto", ".txt", ".lock", ".cfg"]
FIRST = ["Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jonas",
         "Keiko", "Lucia", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven",
         "Tomasz", "Ulla", "Viktor", "Wen", "Yusuf", "Zofia"]
LAST = ["Achterberg", "Banerjee", "Castillo", "Dubois", "Eriksen", "Fischer", "Gonzaga",
        "Hoffmann", "Ishikawa", "Jovanovic", "Kowalski", "Lindqvist", "Moreau", "Novak",
        "Okafor", "Petrov", "Quispe", "Rossi", "Sato", "Tanaka", "Umarov", "Varga", "Weber",
        "Yamada", "Zhang"]
REGIONS = ["eu-west-1", "eu-central-1", "us-east-2", "us-west-2", "ap-northeast-1",
           "ap-southeast-2", "sa-east-1", "ca-central-1"]
INSTANCES = ["m6i.large", "m6i.2xlarge", "c7g.xlarge", "r6g.4xlarge", "t3.medium",
             "c6a.8xlarge", "n2-standard-8", "e2-highmem-4"]
LIBS = ["libcurl", "openssl", "zlib", "protobuf-c", "jansson", "hiredis", "libpq", "grpc",
        "lz4", "zstd", "sqlite", "libuv", "pcre2", "yaml-cpp", "boost", "fmt"]
LEVELS = ["DEBUG", "INFO", "INFO", "INFO", "WARN", "ERROR"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
WORDS_EN = ("the a an of to in for on with when after before because while if then that this "
            "request response server client cache timeout retry queue worker connection pool "
            "handler error value field table index commit build test deploy config option "
            "default limit memory thread lock latency throughput tenant session token budget "
            "window message summary record file path directory process signal log level "
            "returns reads writes checks keeps drops sends waits fails passes grows shrinks "
            "every each some most only also never always first last next previous new old "
            "large small slow fast safe stale fresh empty full partial exact rough").split()


def ident(rng, parts=2):
    """A snake_case identifier such as conn_drain or max_batch_slot."""
    words = [rng.choice(NOUNS)]
    if parts >= 2:
        words.insert(0, rng.choice(ADJ) if rng.random() < 0.3 else rng.choice(NOUNS))
    if parts >= 3:
        words.append(rng.choice(VERBS))
    return "_".join(words)


def func_name(rng):
    return f"{rng.choice(NOUNS)}_{rng.choice(VERBS)}"


def camel(rng):
    return rng.choice(NOUNS).capitalize() + rng.choice(NOUNS).capitalize()


def path(rng, ext=None, depth=None):
    depth = depth if depth is not None else rng.randint(1, 3)
    parts = [rng.choice(DIRS) for _ in range(depth)]
    parts.append(ident(rng) + (ext or rng.choice(EXTS)))
    return "/".join(parts)


def person(rng):
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def hexid(rng, n):
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def alnum(rng, n):
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
                   for _ in range(n))


def version(rng):
    return f"{rng.randint(0, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 12)}"


def date(rng, year=None):
    return f"{year or rng.choice([2024, 2025])}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def clock(rng):
    return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


def timestamp(rng):
    return f"{date(rng)}T{clock(rng)}.{rng.randint(0, 999):03d}Z"


def ip(rng):
    return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def host(rng):
    return f"{rng.choice(SERVICES)}-{rng.randint(1, 40)}.{rng.choice(['prod', 'stg', 'dev'])}.internal"


def sentence_en(rng, lo=6, hi=18):
    words = [rng.choice(WORDS_EN) for _ in range(rng.randint(lo, hi))]
    if rng.random() < 0.4:
        words.insert(rng.randrange(len(words)), rng.choice([func_name(rng), path(rng),
                                                            str(rng.randint(2, 5000))]))
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice([".", ".", ".", ":", ";", "?"])


def fit(text, size):
    """text cut to about size characters at a line end (never empty when text is not)."""
    if len(text) <= size:
        return text
    cut = text.rfind("\n", 0, size)
    return text[:cut if cut > size // 2 else size]


def grow(rng, size, piece):
    """Calls piece(rng) until size characters are gathered; returns them joined."""
    out, n = [], 0
    while n < size:
        p = piece(rng)
        out.append(p)
        n += len(p) + 1
    return fit("\n".join(out), size)


# -- source code ----------------------------------------------------------------------------
def _c_expr(rng, names):
    a = rng.choice(names)
    return rng.choice([f"{a} + 1", f"{a} * 2", f"{a} >> {rng.randint(1, 8)}",
                       f"{a} & 0x{rng.randint(1, 255):02x}", f"{a} - {rng.choice(names)}",
                       f"{func_name(rng)}({a})", f"{a}[{rng.choice(names)}]", f"!{a}",
                       f"{a} % {rng.randint(2, 64)}", f"sizeof *{a}"])


def _c_stmt(rng, names, depth):
    r = rng.random()
    a = rng.choice(names)
    if depth < 2 and r < 0.15:
        body = [_c_stmt(rng, names, depth + 1) for _ in range(rng.randint(1, 3))]
        pad = "    " * (depth + 1)
        return (f"if ({a} {rng.choice(['==', '!=', '<', '>=', '>'])} {_c_expr(rng, names)}) {{\n"
                + "\n".join(pad + "    " + b for b in body) + f"\n{pad}}}")
    if depth < 2 and r < 0.25:
        i = rng.choice(["i", "j", "k", "n"])
        body = [_c_stmt(rng, names + [i], depth + 1) for _ in range(rng.randint(1, 3))]
        pad = "    " * (depth + 1)
        return (f"for (size_t {i} = 0; {i} < {a}; {i}++) {{\n"
                + "\n".join(pad + "    " + b for b in body) + f"\n{pad}}}")
    if r < 0.35:
        return f"/* {sentence_en(rng, 4, 12)} */"
    if r < 0.45:
        return f"if ({a} == NULL)\n{'    ' * (depth + 2)}return {rng.choice(['-1', 'NULL', 'false', 'CG_ERR', '0'])};"
    if r < 0.55:
        return f"{func_name(rng)}({a}, {_c_expr(rng, names)});"
    if r < 0.62:
        return f'fprintf(stderr, "{ident(rng)}: %s (%d)\\n", strerror(errno), {a});'
    return f"{a} = {_c_expr(rng, names)};"


def c_function(rng):
    names = [ident(rng, 1) for _ in range(rng.randint(2, 5))]
    ret = rng.choice(C_TYPES)
    params = ", ".join(f"{rng.choice(C_TYPES)} {n}".replace("* ", "*") for n in names[:3])
    body = [_c_stmt(rng, names, 0) for _ in range(rng.randint(3, 12))]
    doc = f"/* {func_name(rng)}: {sentence_en(rng, 5, 14)} */\n" if rng.random() < 0.6 else ""
    return (f"{doc}{'static ' if rng.random() < 0.6 else ''}{ret} {func_name(rng)}({params})\n{{\n"
            + "\n".join("    " + b for b in body)
            + f"\n    return {rng.choice(names) if ret != 'void *' else 'NULL'};\n}}\n").replace(
                "char * ", "char *").replace("void * ", "void *")


def c_struct(rng):
    fields = "\n".join(f"    {rng.choice(C_TYPES)} {ident(rng)};".replace("* ", "*")
                       for _ in range(rng.randint(2, 9)))
    return f"struct {ident(rng)} {{\n{fields}\n}};\n"


def c_source(rng, size=6000, name=None):
    """A C file: a header comment, includes, defines, structs and functions."""
    name = name or path(rng, ".c")
    head = [f"/* {name.rsplit('/', 1)[-1]} - {sentence_en(rng, 6, 16)}",
            f" * {sentence_en(rng, 8, 20)}", " */"]
    inc = sorted({rng.choice(["<stdio.h>", "<stdlib.h>", "<string.h>", "<stdint.h>", "<errno.h>",
                              "<pthread.h>", "<unistd.h>", "<stdbool.h>", "<time.h>",
                              f'"{ident(rng)}.h"', f'"core/{ident(rng)}.h"'])
                  for _ in range(rng.randint(3, 7))})
    parts = ["\n".join(head), "\n".join(f"#include {i}" for i in inc)]
    parts.append("\n".join(f"#define {ident(rng).upper()} {rng.choice([str(rng.randint(1, 65536)), f'(1u << {rng.randint(1, 30)})', f'{rng.randint(1, 99)}.{rng.randint(0, 9)}'])}"
                           for _ in range(rng.randint(1, 5))))

    def piece(r):
        return c_struct(r) if r.random() < 0.2 else c_function(r)
    body = grow(rng, max(200, size - sum(len(p) for p in parts)), piece)
    return fit("\n\n".join(parts) + "\n\n" + body + "\n", size)


def python_source(rng, size=5000, name=None):
    """A Python module: docstring, imports, a class or two and functions."""
    lines = [f'"""{(name or path(rng, ".py")).rsplit("/", 1)[-1]}: {sentence_en(rng, 6, 14)}"""',
             "", *sorted({f"import {rng.choice(['os', 'sys', 'json', 're', 'time', 'logging', 'hashlib', 'itertools', 'subprocess', 'collections'])}" for _ in range(4)}),
             ""]

    def piece(r):
        fn = func_name(r)
        args = ", ".join(ident(r, 1) for _ in range(r.randint(0, 3)))
        out = []
        if r.random() < 0.25:
            out.append(f"class {camel(r)}:")
            out.append(f'    """{sentence_en(r, 5, 12)}"""')
            out.append("")
            out.append(f"    def __init__(self{', ' + args if args else ''}):")
            for a in [a for a in args.split(", ") if a] or ["state"]:
                out.append(f"        self.{a} = {a if args else 'None'}")
            out.append("")
            fn, indent = "    def " + fn, "        "
            args = "self" + (", " + args if args else "")
        else:
            fn, indent = "def " + fn, "    "
        out.append(f"{fn}({args}):")
        if r.random() < 0.5:
            out.append(f'{indent}"""{sentence_en(r, 5, 14)}"""')
        for _ in range(r.randint(2, 9)):
            v = ident(r, 1)
            out.append(indent + r.choice([
                f"{v} = {ident(r, 1)}.get({json.dumps(ident(r))}, {r.randint(0, 100)})",
                f"for {v} in {ident(r, 1)}:\n{indent}    {func_name(r)}({v})",
                f"if not {v}:\n{indent}    raise ValueError(f\"{ident(r)}: {{{v}!r}}\")",
                f"# {sentence_en(r, 4, 12)}",
                f"log.info(\"{ident(r)} %s took %.3f s\", {v}, time.monotonic() - t0)",
                f"{v} = [{ident(r, 1)} for {ident(r, 1)} in {ident(r, 1)} if {ident(r, 1)}]",
                f"return {v}"]))
        return "\n".join(out) + "\n"
    return fit("\n".join(lines) + "\n" + grow(rng, size, piece), size)


def yaml_config(rng, size=1500, service=None):
    service = service or rng.choice(SERVICES)
    lines = [f"# {service} configuration ({rng.choice(['prod', 'staging', 'dev'])})",
             f"service: {service}", f"version: {version(rng)}"]

    def piece(r):
        out = [f"{ident(r)}:"]
        for _ in range(r.randint(1, 6)):
            k = ident(r)
            out.append("  " + r.choice([f"{k}: {r.randint(0, 10000)}", f"{k}: {str(r.random() < .5).lower()}",
                                        f"{k}: \"{path(r)}\"", f"{k}: {r.randint(1, 900)}ms",
                                        f"{k}: {host(r)}:{r.randint(1024, 65000)}",
                                        f"{k}:\n    - {ident(r)}\n    - {ident(r)}"]))
        return "\n".join(out)
    return fit("\n".join(lines) + "\n" + grow(rng, size, piece) + "\n", size)


# -- data and command output ----------------------------------------------------------------
def _json_value(rng, depth=0):
    r = rng.random()
    if depth < 2 and r < 0.12:
        return {ident(rng): _json_value(rng, depth + 1) for _ in range(rng.randint(1, 4))}
    if depth < 2 and r < 0.2:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice([rng.randint(-5, 100000), round(rng.uniform(0, 1000), 3), True, False,
                       None, ident(rng), path(rng), timestamp(rng), host(rng), version(rng),
                       sentence_en(rng, 3, 9), hexid(rng, 12), rng.choice(REGIONS)])


def json_record(rng, kind=None):
    kind = kind or rng.choice(["order", "user", "job", "pod", "alert", "metric", "package"])
    rec = {"id": f"{kind[:3]}_{alnum(rng, 10)}", "kind": kind, "created_at": timestamp(rng)}
    if kind == "order":
        rec.update(status=rng.choice(["paid", "pending", "refunded", "failed"]),
                   amount_cents=rng.randint(100, 900000), currency=rng.choice(["EUR", "USD", "JPY", "GBP"]),
                   items=[{"sku": f"SKU-{rng.randint(1000, 99999)}", "qty": rng.randint(1, 9)}
                          for _ in range(rng.randint(1, 4))])
    elif kind == "user":
        rec.update(name=person(rng), email=f"{rng.choice(FIRST).lower()}.{rng.randint(1, 999)}@example.com",
                   roles=rng.sample(["admin", "viewer", "editor", "billing", "support"], 2),
                   last_login=timestamp(rng), mfa=rng.random() < 0.7)
    elif kind == "job":
        rec.update(name=f"{rng.choice(SERVICES)}-{rng.choice(VERBS)}", state=rng.choice(["succeeded", "failed", "running", "queued"]),
                   duration_ms=rng.randint(5, 900000), attempts=rng.randint(1, 5),
                   node=host(rng))
    elif kind == "pod":
        rec.update(namespace=rng.choice(["default", "payments", "search", "infra"]),
                   phase=rng.choice(["Running", "Pending", "CrashLoopBackOff", "Succeeded"]),
                   restarts=rng.randint(0, 40), image=f"registry.example.com/{rng.choice(SERVICES)}:{version(rng)}",
                   resources={"cpu": f"{rng.randint(1, 8) * 250}m", "memory": f"{rng.randint(1, 32) * 128}Mi"})
    elif kind == "alert":
        rec.update(severity=rng.choice(["critical", "warning", "info"]), service=rng.choice(SERVICES),
                   summary=sentence_en(rng, 5, 12), value=round(rng.uniform(0, 100), 2),
                   labels={ident(rng, 1): ident(rng, 1) for _ in range(rng.randint(1, 4))})
    elif kind == "metric":
        rec.update(name=f"{ident(rng)}_{rng.choice(['seconds', 'bytes', 'total', 'ratio'])}",
                   points=[[1700000000 + 60 * i, round(rng.uniform(0, 500), 2)] for i in range(rng.randint(3, 12))])
    else:
        rec.update(name=rng.choice(LIBS), version=version(rng), license=rng.choice(["MIT", "BSD-3-Clause", "Apache-2.0", "ISC"]),
                   dependencies={rng.choice(LIBS): "^" + version(rng) for _ in range(rng.randint(0, 4))})
    for _ in range(rng.randint(0, 3)):
        rec[ident(rng)] = _json_value(rng)
    return rec


def json_document(rng, size=8000, indent=None):
    """A JSON API body: {"data": [records...], "page": {...}}, about size characters."""
    kind = rng.choice(["order", "user", "job", "pod", "alert", "metric", "package", None])
    recs, n = [], 0
    while n < size:
        rec = json_record(rng, kind)
        recs.append(rec)
        n += len(json.dumps(rec, indent=indent)) + 2
    doc = {"data": recs[:-1] or recs, "page": {"size": len(recs), "next": alnum(rng, 16) if rng.random() < .5 else None},
           "request_id": f"req_{alnum(rng, 12)}"}
    return json.dumps(doc, indent=indent, ensure_ascii=rng.random() < 0.5)


def log_line(rng, service=None):
    service = service or rng.choice(SERVICES)
    lvl = rng.choice(LEVELS)
    msg = rng.choice([
        f"{func_name(rng)} took {rng.randint(1, 5000)} ms (p99 {rng.randint(10, 9000)} ms)",
        f"connection to {host(rng)}:{rng.randint(1024, 65000)} {rng.choice(['reset by peer', 'refused', 'timed out', 'established'])}",
        f"request {alnum(rng, 8)} {rng.choice(['GET', 'POST', 'PUT', 'DELETE'])} /v{rng.randint(1, 3)}/{ident(rng)} -> {rng.choice([200, 200, 201, 204, 400, 404, 409, 429, 500, 502, 503])}",
        f"pool {ident(rng)}: {rng.randint(0, 64)}/{rng.randint(64, 256)} in use, {rng.randint(0, 40)} waiting",
        f"retrying {func_name(rng)} in {rng.randint(10, 8000)} ms (attempt {rng.randint(1, 6)})",
        f"gc pause {rng.uniform(0.1, 80):.1f} ms, heap {rng.randint(40, 4000)} MB",
        f"{sentence_en(rng, 4, 10)}",
        f"loaded {rng.randint(1, 5000)} {ident(rng, 1)}s from {path(rng)}",
        f"tenant={alnum(rng, 6)} user={rng.randint(1, 99999)} {ident(rng)}={rng.randint(0, 99999)}"])
    line = f"{timestamp(rng)} {lvl:<5} [{service}] {msg}"
    if lvl == "ERROR" and rng.random() < 0.3:
        line += "".join(f"\n    at {func_name(rng)} ({path(rng, '.c')}:{rng.randint(1, 2000)})"
                        for _ in range(rng.randint(2, 6)))
    return line


def logs(rng, size=6000, service=None):
    return grow(rng, size, lambda r: log_line(r, service))


def test_output(rng, size=4000):
    """Runner output (pytest-, ctest- or go-test-like) with a few failures and a summary."""
    style = rng.choice(["pytest", "ctest", "gotest", "criterion"])
    out, n, passed, failed = [], 0, 0, 0
    while n < size:
        ok = rng.random() < 0.9
        passed += ok
        failed += not ok
        name = f"test_{ident(rng)}"
        if style == "pytest":
            line = f"tests/{path(rng, '.py', 0)}::{name} {'PASSED' if ok else 'FAILED'} [{min(99, n * 100 // size):3d}%]"
            if not ok:
                line += (f"\n    assert {ident(rng, 1)} == {rng.randint(0, 99)}\nE   AssertionError: "
                         f"expected {rng.randint(1, 500)} rows, got {rng.randint(0, 500)}")
        elif style == "ctest":
            i = passed + failed
            line = f"{i:3d}/{i + 20:3d} Test #{i:3d}: {name} {'.' * rng.randint(3, 30)}   {'Passed' if ok else '***Failed'}  {rng.uniform(0, 9):5.2f} sec"
        elif style == "gotest":
            line = f"--- {'PASS' if ok else 'FAIL'}: Test{camel(rng)} ({rng.uniform(0, 3):.2f}s)"
            if not ok:
                line += f"\n    {path(rng, '_test.go', 0)}:{rng.randint(10, 400)}: got {rng.randint(0, 99)}, want {rng.randint(0, 99)}"
        else:
            line = (f"[----] {path(rng, '.c')}:{rng.randint(1, 900)}: Assertion Failed\n[FAIL] {ident(rng)}::{name}: ({rng.uniform(0, 2):.2f}s)"
                    if not ok else f"[RUN ] {ident(rng)}::{name}\n[PASS] {ident(rng)}::{name}: ({rng.uniform(0, 2):.2f}s)")
        out.append(line)
        n += len(line) + 1
    summary = {"pytest": f"==== {failed} failed, {passed} passed in {rng.uniform(1, 300):.2f}s ====",
               "ctest": f"{100 * passed // max(1, passed + failed)}% tests passed, {failed} tests failed out of {passed + failed}",
               "gotest": f"{'FAIL' if failed else 'ok'}  \t{rng.choice(SERVICES)}/{ident(rng, 1)}\t{rng.uniform(0, 30):.3f}s",
               "criterion": f"[====] Synthesis: Tested: {passed + failed} | Passing: {passed} | Failing: {failed} | Crashing: 0"}[style]
    return "\n".join(out) + "\n" + summary


def dir_listing(rng, size=3000, recursive=False):
    out, n = [f"total {rng.randint(8, 9000)}"], 0
    while n < size:
        is_dir = rng.random() < 0.2
        name = ident(rng) + ("" if is_dir else rng.choice(EXTS))
        line = (f"{'d' if is_dir else '-'}{rng.choice(['rwxr-xr-x', 'rw-r--r--', 'rw-------', 'rwxrwxr-x'])} "
                f"{rng.randint(1, 9):2d} {rng.choice(['root', 'dev', 'ci', 'app'])} {rng.choice(['root', 'dev', 'staff'])} "
                f"{rng.randint(0, 2_000_000) if not is_dir else 4096:>9} {rng.choice(MONTHS)} {rng.randint(1, 28):2d} "
                f"{rng.choice([clock(rng)[:5], str(rng.choice([2023, 2024]))]):>5} {name}")
        if recursive and rng.random() < 0.05:
            line = f"\n./{path(rng, '', 2).rstrip('.')}:\n" + line
        out.append(line)
        n += len(line) + 1
    return fit("\n".join(out), size)


def git_log(rng, size=3000):
    def piece(r):
        files = "\n".join(f" {path(r):<50} | {r.randint(1, 300):4d} {'+' * r.randint(0, 20)}{'-' * r.randint(0, 12)}"
                          for _ in range(r.randint(1, 5)))
        return (f"commit {hexid(r, 40)}\nAuthor: {person(r)} <{r.choice(FIRST).lower()}@example.com>\n"
                f"Date:   {r.choice(WEEKDAYS)[:3]} {r.choice(MONTHS)} {r.randint(1, 28)} {clock(r)} 2025 +0{r.randint(0, 9)}00\n\n"
                f"    {func_name(r)}: {sentence_en(r, 4, 10)}\n\n{files}\n")
    return grow(rng, size, piece)


def grep_hits(rng, size=2500, pattern=None):
    pattern = pattern or ident(rng, 1)
    return grow(rng, size, lambda r: f"{path(r)}:{r.randint(1, 3000)}:    {r.choice(['if', 'return', '//', 'let', 'x ='])} {pattern}{r.choice(['(', '.', '_', ' = ', '->'])}{ident(r)}{r.choice([');', ';', '', ' {'])}")


def diff(rng, size=2500):
    def piece(r):
        p = path(r)
        lines = [f"diff --git a/{p} b/{p}", f"index {hexid(r, 7)}..{hexid(r, 7)} 100644", f"--- a/{p}", f"+++ b/{p}",
                 f"@@ -{r.randint(1, 900)},{r.randint(3, 12)} +{r.randint(1, 900)},{r.randint(3, 12)} @@ {func_name(r)}"]
        for _ in range(r.randint(3, 14)):
            lines.append(r.choice([" ", " ", "+", "-"]) + "    " + _c_stmt(r, [ident(r, 1), ident(r, 1)], 0).split("\n")[0])
        return "\n".join(lines)
    return grow(rng, size, piece)


def man_page(rng, size=4000):
    """roff source of a manual page."""
    name = f"{rng.choice(NOUNS)}{rng.choice(VERBS)}"
    lines = [f'.TH {name.upper()} {rng.choice([1, 5, 8])} "{date(rng)}" "{name} {version(rng)}" "User Commands"',
             ".SH NAME", f"{name} \\- {sentence_en(rng, 3, 8).lower()[:-1]}", ".SH SYNOPSIS",
             f".B {name}\n[\\fB\\-{rng.choice('abcdfhlnqv')}\\fR] [\\fB\\-\\-{ident(rng).replace('_', '-')}\\fR=\\fIN\\fR] \\fIFILE\\fR...",
             ".SH DESCRIPTION"]

    def piece(r):
        if r.random() < 0.3:
            return f".TP\n.BR \\-\\-{ident(r).replace('_', '-')} \" \" \\fI{ident(r, 1).upper()}\\fR\n{sentence_en(r, 8, 20)}"
        return ".PP\n" + " ".join(sentence_en(r, 6, 18) for _ in range(r.randint(1, 4)))
    return fit("\n".join(lines) + "\n" + grow(rng, size, piece) + "\n.SH SEE ALSO\n.BR " + f"{rng.choice(NOUNS)} (1)", size)


def package_list(rng, size=4000):
    """dpkg -l style table."""
    head = ("Desired=Unknown/Install/Remove/Purge/Hold\n| Status=Not/Inst/Conf-files/Unpacked\n"
            "||/ Name                 Version              Architecture Description\n"
            "+++-====================-====================-============-=================================")
    return fit(head + "\n" + grow(rng, size, lambda r: f"ii  {(r.choice(LIBS) + r.choice(['', '-dev', '-common', '-utils', '3', '-doc'])):<20} {version(r) + '-' + str(r.randint(1, 9)):<20} {r.choice(['amd64', 'all', 'arm64']):<12} {sentence_en(r, 3, 8)[:-1]}"), size)


def ps_output(rng, size=2500):
    head = "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"
    return fit(head + "\n" + grow(rng, size, lambda r: f"{r.choice(['root', 'app', 'postgres', 'redis']):<8} {r.randint(1, 99999):>7} {r.uniform(0, 99):4.1f} {r.uniform(0, 30):4.1f} {r.randint(1000, 9999999):>7} {r.randint(100, 999999):>6} ?        {r.choice(['Ss', 'Sl', 'R', 'S<', 'Ssl'])}   {clock(r)[:5]}   {r.randint(0, 99)}:{r.randint(0, 59):02d} /usr/bin/{r.choice(SERVICES)} --{ident(r).replace('_', '-')}={r.randint(1, 999)}"), size)


def kubectl_pods(rng, size=2500):
    head = "NAME                                    READY   STATUS             RESTARTS   AGE"
    return fit(head + "\n" + grow(rng, size, lambda r: f"{r.choice(SERVICES)}-{hexid(r, 10)}-{alnum(r, 5).lower():<16} {r.randint(0, 2)}/2     {r.choice(['Running', 'Running', 'Pending', 'CrashLoopBackOff', 'Completed']):<18} {r.randint(0, 30):<10} {r.randint(1, 90)}{r.choice('mhd')}"), size)


def markdown_doc(rng, lang="en", size=3000):
    def piece(r):
        k = r.random()
        if k < 0.15:
            return f"\n## {prose(r, lang, 1).rstrip('.。')[:60]}\n"
        if k < 0.3:
            return "\n".join(f"- {prose(r, lang, 1)}" for _ in range(r.randint(2, 5)))
        if k < 0.4:
            return f"```\n{r.choice(['make test', 'scripts/run.sh', 'curl -s localhost:8080/healthz'])} {ident(r).replace('_', '-')}\n```"
        return prose(r, lang, r.randint(2, 5))
    return grow(rng, size, piece)


# -- languages ------------------------------------------------------------------------------
# Per language: short phrase banks for agent conversations and prose. Slots: {svc} service,
# {path} file, {func} function, {n} number, {ms} milliseconds. Written for ctxguard.
LANGS = {
    "en": {
        "system": ["You are a coding agent working in the {repo} repository. Use the tools to read, search and change files and to run commands. Keep answers short and name the files you touch.",
                   "You are an SRE assistant with shell access to the {repo} checkout. Investigate before changing anything, and explain each change in one sentence."],
        "ask": ["The {svc} service answers with 502 under load since yesterday's deploy. Find the cause and fix it.",
                "Why does the nightly {svc} job take {n} minutes now? It used to finish in under ten.",
                "Please add retries with exponential backoff to the HTTP client in {path} and keep the tests green.",
                "CI crashes in {func} with a segfault, only on the release build. Can you investigate?",
                "Memory of {svc} grows by about {n} MB per hour. Look for a leak.",
                "Move the config loader in {path} from INI to YAML without breaking existing deployments."],
        "follow": ["Good. Does the same problem exist in {path}?", "Also run the integration tests, not only the unit tests.",
                   "That works locally. What about the staging config?", "Keep the public API unchanged, please.",
                   "Why is {func} called twice per request?", "Let's not touch the database schema in this change.",
                   "Try again with debug logging on.", "Write a short summary for the pull request.",
                   "The reviewer asks for a test that reproduces the bug first.", "Can you check the last {n} lines of the log as well?"],
        "plan": ["I'll start by reading {path}.", "Let me look at the recent logs of {svc}.", "Searching for callers of {func}.",
                 "Running the test suite to see where we stand.", "Fetching the live configuration from the status endpoint.",
                 "I'll compare {path} with the version before the deploy.", "Checking the build output first."],
        "found": ["The problem is in {func}: the connection goes back to the pool before the body is read, so the next request reuses a busy socket.",
                  "{path} builds the cache key from the user id alone, so requests of different tenants collide.",
                  "The client timeout is shorter than the upstream's, so we give up first and retry, which doubles the load.",
                  "All {n} tests pass now; the flaky one depended on the order of a hash map.",
                  "I changed {func} to stream the file instead of reading it whole; peak memory drops by roughly {n} MB.",
                  "The job spends most of its time in {func}, which runs one query per row; I batched it.",
                  "Nothing in {path} changed recently, so the regression must come from the dependency bump."],
        "ack": ["ok", "Sounds good, go ahead.", "Thanks!", "Yes, do that.", "Fine by me."],
        "facts": ["the maintenance window for {svc} is {weekday} at {hhmm} UTC",
                  "{person} is on call for {svc} this week",
                  "the read replica of {svc} listens on port {port}",
                  "we must stay on {lib} {ver} until the vendor patch lands",
                  "the load test peaked at {n} requests per second on {instance}",
                  "the backups of {svc} go to s3://{bucket}/{svc}/daily",
                  "the feature flag {flag} is on for {pct} percent of tenants",
                  "the incident began at {hhmm} UTC on {date}"],
        "words": WORDS_EN,
    },
    "de": {
        "system": ["Du bist ein Coding-Agent im Repository {repo}. Nutze die Werkzeuge, um Dateien zu lesen, zu durchsuchen und zu ändern. Antworte knapp und nenne die Dateien."],
        "ask": ["Der Dienst {svc} liefert seit dem gestrigen Deployment unter Last 502-Fehler. Finde die Ursache und behebe sie.",
                "Warum braucht der nächtliche Job von {svc} jetzt {n} Minuten? Früher war er in zehn Minuten fertig.",
                "Bitte baue in den HTTP-Client in {path} Wiederholungen mit exponentiellem Backoff ein, ohne die Tests zu brechen.",
                "Der Speicherverbrauch von {svc} wächst um etwa {n} MB pro Stunde. Such bitte nach einem Leck."],
        "follow": ["Gut. Gibt es dasselbe Problem auch in {path}?", "Lass bitte auch die Integrationstests laufen.",
                   "Lokal geht es jetzt. Wie sieht es mit der Staging-Konfiguration aus?", "Die öffentliche API soll gleich bleiben.",
                   "Warum wird {func} pro Anfrage zweimal aufgerufen?", "Schreib eine kurze Zusammenfassung für den Pull Request.",
                   "Schau dir bitte auch die letzten {n} Zeilen im Log an."],
        "plan": ["Ich lese zuerst {path}.", "Ich sehe mir die aktuellen Logs von {svc} an.", "Ich suche nach Aufrufern von {func}.",
                 "Ich starte die Testsuite, um den aktuellen Stand zu sehen.", "Ich vergleiche {path} mit der Version vor dem Deployment."],
        "found": ["Das Problem liegt in {func}: Die Verbindung geht zurück in den Pool, bevor die Antwort gelesen ist.",
                  "{path} bildet den Cache-Schlüssel nur aus der Benutzer-ID, dadurch kollidieren Anfragen verschiedener Mandanten.",
                  "Alle {n} Tests laufen jetzt durch; der wackelige Test hing von der Reihenfolge einer Hashtabelle ab.",
                  "Ich habe {func} so geändert, dass die Datei gestreamt wird; der Spitzenverbrauch sinkt um etwa {n} MB.",
                  "Der Job verbringt die meiste Zeit in {func}, das pro Zeile eine Abfrage stellt; jetzt wird gebündelt."],
        "ack": ["Okay", "Klingt gut, mach weiter.", "Danke!", "Ja, bitte.", "Passt."],
        "facts": ["das Wartungsfenster für {svc} ist am {weekday} um {hhmm} UTC",
                  "{person} hat diese Woche Rufbereitschaft für {svc}",
                  "die Lesereplik von {svc} lauscht auf Port {port}",
                  "wir bleiben bei {lib} {ver}, bis der Patch des Herstellers kommt",
                  "der Lasttest erreichte {n} Anfragen pro Sekunde auf {instance}",
                  "die Sicherungen von {svc} liegen unter s3://{bucket}/{svc}/daily"],
        "words": "der die das und oder nicht wenn weil dann auch noch nur schon immer Anfrage Antwort Server Dienst Fehler Zeit Speicher Datei Verzeichnis Warteschlange Verbindung Protokoll Konfiguration Mandant Sitzung Grenze Wert Test Build liest schreibt prüft wartet sendet wächst schnell langsam neu alt groß klein leer voll über unter zwischen nach vor".split(),
    },
    "fr": {
        "system": ["Tu es un agent de développement dans le dépôt {repo}. Utilise les outils pour lire, chercher et modifier les fichiers. Réponds brièvement et cite les fichiers."],
        "ask": ["Le service {svc} renvoie des 502 sous charge depuis le déploiement d'hier. Trouve la cause et corrige-la.",
                "Pourquoi le traitement nocturne de {svc} prend-il maintenant {n} minutes ? Avant, il finissait en moins de dix.",
                "Ajoute des reprises avec attente exponentielle au client HTTP de {path}, sans casser les tests.",
                "La mémoire de {svc} augmente d'environ {n} Mo par heure. Cherche une fuite."],
        "follow": ["Bien. Le même problème existe-t-il dans {path} ?", "Lance aussi les tests d'intégration, s'il te plaît.",
                   "Ça marche en local. Et la configuration de préproduction ?", "Garde l'API publique telle quelle.",
                   "Pourquoi {func} est-elle appelée deux fois par requête ?", "Rédige un court résumé pour la pull request."],
        "plan": ["Je commence par lire {path}.", "Je regarde les journaux récents de {svc}.", "Je cherche les appelants de {func}.",
                 "Je lance la suite de tests pour voir où on en est.", "Je compare {path} avec la version d'avant le déploiement."],
        "found": ["Le problème est dans {func} : la connexion retourne au pool avant que la réponse soit lue.",
                  "{path} construit la clé de cache à partir du seul identifiant utilisateur, donc les locataires se mélangent.",
                  "Les {n} tests passent maintenant ; le test instable dépendait de l'ordre d'une table de hachage.",
                  "J'ai modifié {func} pour lire le fichier en flux ; la mémoire maximale baisse d'environ {n} Mo."],
        "ack": ["D'accord", "Très bien, continue.", "Merci !", "Oui, vas-y."],
        "facts": ["la fenêtre de maintenance de {svc} est le {weekday} à {hhmm} UTC",
                  "{person} est d'astreinte pour {svc} cette semaine",
                  "le réplica en lecture de {svc} écoute sur le port {port}",
                  "on reste sur {lib} {ver} tant que le correctif du fournisseur n'est pas publié",
                  "le test de charge a atteint {n} requêtes par seconde sur {instance}"],
        "words": "le la les un une des et ou pas quand parce que puis aussi encore seulement déjà toujours requête réponse serveur service erreur temps mémoire fichier répertoire file connexion journal configuration locataire session limite valeur test lit écrit vérifie attend envoie grandit rapide lent nouveau ancien grand petit vide plein avant après entre".split(),
    },
    "es": {
        "system": ["Eres un agente de programación en el repositorio {repo}. Usa las herramientas para leer, buscar y cambiar archivos. Responde con brevedad y nombra los archivos."],
        "ask": ["El servicio {svc} devuelve 502 bajo carga desde el despliegue de ayer. Encuentra la causa y corrígela.",
                "¿Por qué el proceso nocturno de {svc} tarda ahora {n} minutos? Antes terminaba en menos de diez.",
                "Añade reintentos con espera exponencial al cliente HTTP de {path} sin romper las pruebas.",
                "La memoria de {svc} crece unos {n} MB por hora. Busca una fuga."],
        "follow": ["Bien. ¿Existe el mismo problema en {path}?", "Ejecuta también las pruebas de integración.",
                   "En local ya funciona. ¿Y la configuración de staging?", "Mantén la API pública sin cambios.",
                   "¿Por qué se llama a {func} dos veces por petición?", "Escribe un resumen corto para el pull request."],
        "plan": ["Empiezo leyendo {path}.", "Reviso los registros recientes de {svc}.", "Busco quién llama a {func}.",
                 "Ejecuto las pruebas para ver el estado actual.", "Comparo {path} con la versión anterior al despliegue."],
        "found": ["El problema está en {func}: la conexión vuelve al pool antes de leer la respuesta.",
                  "{path} construye la clave de caché solo con el id de usuario, así que los inquilinos colisionan.",
                  "Las {n} pruebas pasan ahora; la inestable dependía del orden de un mapa hash.",
                  "Cambié {func} para leer el archivo por partes; el pico de memoria baja unos {n} MB."],
        "ack": ["Vale", "Perfecto, sigue.", "¡Gracias!", "Sí, hazlo."],
        "facts": ["la ventana de mantenimiento de {svc} es el {weekday} a las {hhmm} UTC",
                  "{person} está de guardia para {svc} esta semana",
                  "la réplica de lectura de {svc} escucha en el puerto {port}",
                  "seguimos con {lib} {ver} hasta que llegue el parche del proveedor",
                  "la prueba de carga llegó a {n} peticiones por segundo en {instance}"],
        "words": "el la los las un una y o no cuando porque luego también todavía solo ya siempre petición respuesta servidor servicio error tiempo memoria archivo directorio cola conexión registro configuración inquilino sesión límite valor prueba lee escribe comprueba espera envía crece rápido lento nuevo viejo grande pequeño vacío lleno antes después entre".split(),
    },
    "ru": {
        "system": ["Ты агент-программист в репозитории {repo}. Используй инструменты, чтобы читать, искать и менять файлы. Отвечай кратко и называй файлы."],
        "ask": ["Сервис {svc} после вчерашнего деплоя под нагрузкой отвечает 502. Найди причину и исправь.",
                "Почему ночная задача {svc} теперь идёт {n} минут? Раньше она укладывалась в десять.",
                "Добавь в HTTP-клиент в {path} повторы с экспоненциальной задержкой, тесты должны остаться зелёными.",
                "Память {svc} растёт примерно на {n} МБ в час. Поищи утечку."],
        "follow": ["Хорошо. А в {path} та же проблема есть?", "Запусти, пожалуйста, и интеграционные тесты.",
                   "Локально работает. А что с конфигурацией стенда?", "Публичный API менять не надо.",
                   "Почему {func} вызывается дважды на запрос?", "Напиши короткое описание для пул-реквеста."],
        "plan": ["Сначала прочитаю {path}.", "Посмотрю свежие логи {svc}.", "Ищу, кто вызывает {func}.",
                 "Запускаю тесты, чтобы понять текущее состояние.", "Сравню {path} с версией до деплоя."],
        "found": ["Проблема в {func}: соединение возвращается в пул раньше, чем прочитан ответ.",
                  "{path} строит ключ кэша только из id пользователя, поэтому запросы разных арендаторов смешиваются.",
                  "Все {n} тестов проходят; нестабильный тест зависел от порядка в хеш-таблице.",
                  "Я переписал {func} на потоковое чтение; пик памяти снизился примерно на {n} МБ."],
        "ack": ["Ок", "Хорошо, продолжай.", "Спасибо!", "Да, делай."],
        "facts": ["окно обслуживания {svc} в {weekday} в {hhmm} UTC",
                  "{person} дежурит по {svc} на этой неделе",
                  "реплика для чтения {svc} слушает порт {port}",
                  "остаёмся на {lib} {ver}, пока не выйдет патч поставщика",
                  "нагрузочный тест дошёл до {n} запросов в секунду на {instance}"],
        "words": "и или не когда потому что потом тоже ещё только уже всегда запрос ответ сервер сервис ошибка время память файл каталог очередь соединение журнал конфигурация арендатор сессия лимит значение тест читает пишет проверяет ждёт отправляет растёт быстро медленно новый старый большой маленький пустой полный до после между".split(),
    },
    "ja": {
        "system": ["あなたは {repo} リポジトリで作業するコーディングエージェントです。ツールでファイルを読み、検索し、変更してください。回答は簡潔に、触れたファイル名を示してください。"],
        "ask": ["昨日のデプロイ以降、{svc} サービスが高負荷時に 502 を返します。原因を見つけて修正してください。",
                "{svc} の夜間ジョブが今は {n} 分かかります。以前は十分以内に終わっていました。理由を調べてください。",
                "{path} の HTTP クライアントに指数バックオフ付きのリトライを追加してください。テストは通したままでお願いします。",
                "{svc} のメモリが一時間に約 {n} MB ずつ増えています。リークを探してください。"],
        "follow": ["いいですね。{path} にも同じ問題はありますか？", "結合テストも実行してください。",
                   "ローカルでは動きました。ステージングの設定はどうですか？", "公開 API は変えないでください。",
                   "{func} がリクエストごとに二回呼ばれるのはなぜですか？", "プルリクエスト用に短い要約を書いてください。"],
        "plan": ["まず {path} を読みます。", "{svc} の最近のログを確認します。", "{func} の呼び出し元を検索します。",
                 "現状を知るためにテストを実行します。", "デプロイ前の版と {path} を比較します。"],
        "found": ["問題は {func} にあります。レスポンスを読み終える前に接続がプールへ戻されています。",
                  "{path} はユーザー ID だけでキャッシュキーを作っているため、テナント間で衝突します。",
                  "{n} 件のテストがすべて通りました。不安定だったテストはハッシュマップの順序に依存していました。",
                  "{func} をストリーム読み込みに変えました。ピークメモリが約 {n} MB 減ります。"],
        "ack": ["了解です", "いいですね、進めてください。", "ありがとうございます！", "はい、お願いします。"],
        "facts": ["{svc} のメンテナンス枠は {weekday} の {hhmm} UTC です",
                  "今週の {svc} の当番は {person} さんです",
                  "{svc} の読み取りレプリカはポート {port} で待ち受けています",
                  "ベンダーのパッチが出るまで {lib} {ver} に固定します",
                  "負荷試験は {instance} で毎秒 {n} リクエストに達しました"],
        "words": "リクエスト レスポンス サーバー サービス エラー 時間 メモリ ファイル ディレクトリ キュー 接続 ログ 設定 テナント セッション 上限 値 テスト を が は に で と も から まで 読む 書く 確認する 待つ 送る 増える 速い 遅い 新しい 古い 大きい 小さい 空 前 後 間".split(),
        "cjk": True,
    },
    "zh": {
        "system": ["你是在 {repo} 仓库中工作的编程代理。请使用工具读取、搜索和修改文件。回答要简短，并注明涉及的文件。"],
        "ask": ["自从昨天部署以来，{svc} 服务在高负载下返回 502。请找出原因并修复。",
                "{svc} 的夜间任务现在需要 {n} 分钟，以前十分钟内就能完成。请查一下原因。",
                "请给 {path} 里的 HTTP 客户端加上指数退避重试，测试要保持通过。",
                "{svc} 的内存每小时增长大约 {n} MB，请查找泄漏。"],
        "follow": ["很好。{path} 里也有同样的问题吗？", "请把集成测试也跑一遍。", "本地已经可以了，预发环境的配置呢？",
                   "公共 API 不要改。", "为什么每个请求会调用两次 {func}？", "请为合并请求写一个简短的说明。"],
        "plan": ["我先读一下 {path}。", "我看看 {svc} 最近的日志。", "我搜索 {func} 的调用方。", "我先运行测试，看看现在的状态。",
                 "我把 {path} 和部署前的版本对比一下。"],
        "found": ["问题出在 {func}：在读完响应之前连接就被放回了连接池。",
                  "{path} 只用用户 ID 生成缓存键，所以不同租户的请求会冲突。",
                  "现在 {n} 个测试全部通过；那个不稳定的测试依赖哈希表的顺序。",
                  "我把 {func} 改成了流式读取，峰值内存大约减少 {n} MB。"],
        "ack": ["好的", "可以，继续吧。", "谢谢！", "是的，就这么做。"],
        "facts": ["{svc} 的维护窗口是{weekday} {hhmm} UTC",
                  "本周 {svc} 的值班人是 {person}",
                  "{svc} 的只读副本监听端口 {port}",
                  "在供应商补丁发布之前我们固定使用 {lib} {ver}",
                  "压测在 {instance} 上达到每秒 {n} 个请求"],
        "words": "请求 响应 服务器 服务 错误 时间 内存 文件 目录 队列 连接 日志 配置 租户 会话 上限 数值 测试 读取 写入 检查 等待 发送 增长 快 慢 新 旧 大 小 空 满 之前 之后 之间 的 了 在 和 也 都 就 还".split(),
        "cjk": True,
    },
}
# What an assistant says before a tool call, by the call's kind ({arg}: its path, command,
# pattern or URL).
ACTIONS = {
    'en': {
        'read': ["I'll read {arg} first.", "Let me open {arg}.", "Reading {arg} to see how it is wired."],
        'run': ["Running `{arg}`.", "Let me run `{arg}` to see where we stand.", "I'll check the output of `{arg}`."],
        'search': ["Searching for `{arg}`.", "Let me find where `{arg}` is used."],
        'http': ["Fetching {arg}.", "Checking the live state at {arg}."],
        'list': ["Listing {arg}.", "Let me see what is in {arg}."],
        'write': ["Writing the new version of {arg}.", "Creating {arg}."],
        'edit': ["Editing {arg}.", "Applying the fix to {arg}."],
    },
    'de': {
        'read': ["Ich lese zuerst {arg}.", "Ich öffne {arg}."],
        'run': ["Ich führe `{arg}` aus.", "Mal sehen, was `{arg}` ausgibt."],
        'search': ["Ich suche nach `{arg}`.", "Wo wird `{arg}` verwendet?"],
        'http': ["Ich rufe {arg} ab.", "Ich prüfe den Live-Zustand unter {arg}."],
        'list': ["Ich liste {arg} auf.", "Was liegt in {arg}?"],
        'write': ["Ich schreibe die neue Fassung von {arg}.", "Ich lege {arg} an."],
        'edit': ["Ich ändere {arg}.", "Ich wende die Korrektur auf {arg} an."],
    },
    'fr': {
        'read': ["Je lis d'abord {arg}.", "J'ouvre {arg}."],
        'run': ["Je lance `{arg}`.", "Voyons ce que donne `{arg}`."],
        'search': ["Je cherche `{arg}`.", "Voyons où `{arg}` est utilisé."],
        'http': ["Je récupère {arg}.", "Je vérifie l'état en direct sur {arg}."],
        'list': ["Je liste {arg}.", "Voyons le contenu de {arg}."],
        'write': ["J'écris la nouvelle version de {arg}.", "Je crée {arg}."],
        'edit': ["Je modifie {arg}.", "J'applique la correction dans {arg}."],
    },
    'es': {
        'read': ["Primero leo {arg}.", "Abro {arg}."],
        'run': ["Ejecuto `{arg}`.", "Veamos qué devuelve `{arg}`."],
        'search': ["Busco `{arg}`.", "Veamos dónde se usa `{arg}`."],
        'http': ["Consulto {arg}.", "Reviso el estado en vivo en {arg}."],
        'list': ["Listo {arg}.", "Veamos qué hay en {arg}."],
        'write': ["Escribo la nueva versión de {arg}.", "Creo {arg}."],
        'edit': ["Edito {arg}.", "Aplico la corrección en {arg}."],
    },
    'ru': {
        'read': ["Сначала прочитаю {arg}.", "Открываю {arg}."],
        'run': ["Запускаю `{arg}`.", "Посмотрим, что выдаст `{arg}`."],
        'search': ["Ищу `{arg}`.", "Посмотрю, где используется `{arg}`."],
        'http': ["Запрашиваю {arg}.", "Проверяю текущее состояние на {arg}."],
        'list': ["Смотрю содержимое {arg}.", "Что лежит в {arg}?"],
        'write': ["Записываю новую версию {arg}.", "Создаю {arg}."],
        'edit': ["Правлю {arg}.", "Вношу исправление в {arg}."],
    },
    'ja': {
        'read': ["まず {arg} を読みます。", "{arg} を開きます。"],
        'run': ["`{arg}` を実行します。", "`{arg}` の出力を確認します。"],
        'search': ["`{arg}` を検索します。", "`{arg}` の使用箇所を探します。"],
        'http': ["{arg} を取得します。", "{arg} で現在の状態を確認します。"],
        'list': ["{arg} の中身を一覧します。"],
        'write': ["{arg} の新しい版を書きます。", "{arg} を作成します。"],
        'edit': ["{arg} を編集します。", "{arg} に修正を入れます。"],
    },
    'zh': {
        'read': ["我先读一下 {arg}。", "打开 {arg}。"],
        'run': ["运行 `{arg}`。", "看看 `{arg}` 的输出。"],
        'search': ["搜索 `{arg}`。", "查找 `{arg}` 的使用位置。"],
        'http': ["获取 {arg}。", "在 {arg} 查看当前状态。"],
        'list': ["列出 {arg} 的内容。"],
        'write': ["写入 {arg} 的新版本。", "创建 {arg}。"],
        'edit': ["修改 {arg}。", "在 {arg} 中应用修复。"],
    },
}
# Prose only (the corpora): words of other scripts.
EXTRA_WORDS = {
    "ko": "요청 응답 서버 서비스 오류 시간 메모리 파일 디렉터리 대기열 연결 로그 설정 테넌트 세션 한도 값 테스트 읽는다 쓴다 확인한다 기다린다 보낸다 빠르다 느리다 새로운 오래된 큰 작은".split(),
    "el": "αίτημα απάντηση διακομιστής υπηρεσία σφάλμα χρόνος μνήμη αρχείο κατάλογος ουρά σύνδεση καταγραφή ρύθμιση συνεδρία όριο τιμή δοκιμή διαβάζει γράφει ελέγχει περιμένει στέλνει γρήγορα αργά νέο παλιό μεγάλο μικρό".split(),
    "ar": "طلب استجابة خادم خدمة خطأ وقت ذاكرة ملف دليل طابور اتصال سجل إعداد جلسة حد قيمة اختبار يقرأ يكتب يفحص ينتظر يرسل سريع بطيء جديد قديم كبير صغير".split(),
    "hi": "अनुरोध उत्तर सर्वर सेवा त्रुटि समय मेमोरी फ़ाइल निर्देशिका कतार कनेक्शन लॉग सेटिंग सत्र सीमा मान परीक्षण पढ़ता लिखता जाँचता प्रतीक्षा भेजता तेज़ धीमा नया पुराना बड़ा छोटा".split(),
}
LANGUAGES = sorted(LANGS)
PROSE_LANGUAGES = sorted(LANGS) + sorted(EXTRA_WORDS)
WEEKDAY_NAMES = {
    "en": WEEKDAYS,
    "de": ["Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"],
    "fr": ["lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"],
    "es": ["lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"],
    "ru": ["понедельник", "вторник", "среду", "четверг", "пятницу", "субботу", "воскресенье"],
    "ja": ["月曜日", "火曜日", "水曜日", "木曜日", "金曜日", "土曜日", "日曜日"],
    "zh": ["周一", "周二", "周三", "周四", "周五", "周六", "周日"],
}


def slots(rng, lang="en"):
    """Values for the phrase banks' slots."""
    return {"svc": rng.choice(SERVICES), "repo": rng.choice(REPOS), "path": path(rng),
            "func": func_name(rng) + "()", "n": rng.randint(3, 900), "person": person(rng),
            "port": rng.randint(1025, 65000), "lib": rng.choice(LIBS), "ver": version(rng),
            "instance": rng.choice(INSTANCES), "bucket": f"{rng.choice(REPOS)}-backups-{rng.randint(10, 99)}",
            "flag": f"{ident(rng)}_v{rng.randint(2, 9)}", "pct": rng.randint(1, 99),
            "weekday": rng.choice(WEEKDAY_NAMES.get(lang, WEEKDAYS)),
            "hhmm": f"{rng.randint(0, 23):02d}:{rng.choice([0, 15, 30, 45]):02d}", "date": date(rng)}


def phrase(rng, lang, kind, **extra):
    bank = LANGS[lang][kind]
    values = slots(rng, lang)
    values.update(extra)
    return rng.choice(bank).format(**values)


def phrases(rng, lang, kind, k, **extra):
    """k sentences of distinct templates of one bank (fewer when the bank is smaller)."""
    bank = LANGS[lang][kind]
    out = []
    for tpl in rng.sample(bank, min(k, len(bank))):
        values = slots(rng, lang)
        values.update(extra)
        out.append(tpl.format(**values))
    return out


def action(rng, lang, kind, arg):
    return rng.choice(ACTIONS[lang][kind]).format(arg=arg)


def prose(rng, lang="en", sentences=3):
    """Sentences in lang: phrase-bank sentences mixed with word salad of the language."""
    out = []
    bank = LANGS.get(lang)
    words = bank["words"] if bank else EXTRA_WORDS[lang]
    cjk = bank is not None and bank.get("cjk")
    for _ in range(sentences):
        if bank is not None and rng.random() < 0.5:
            out.append(phrase(rng, lang, rng.choice(["found", "plan", "follow"])))
            continue
        ws = [rng.choice(words) for _ in range(rng.randint(4, 14))]
        s = ("" if cjk else " ").join(ws)
        if not cjk and lang not in ("ar", "hi", "ko"):
            s = s[0].upper() + s[1:]
        out.append(s + ("。" if cjk else {"hi": "।", "ar": "."}.get(lang, ".")))
    return ("" if cjk else " ").join(out)


# -- the kinds, by name -----------------------------------------------------------------------
KINDS = {
    "c": lambda rng, size: c_source(rng, size),
    "python": lambda rng, size: python_source(rng, size),
    "yaml": lambda rng, size: yaml_config(rng, size),
    "json": lambda rng, size: json_document(rng, size, indent=rng.choice([None, 2])),
    "logs": lambda rng, size: logs(rng, size),
    "tests": lambda rng, size: test_output(rng, size),
    "listing": lambda rng, size: dir_listing(rng, size, recursive=rng.random() < 0.3),
    "gitlog": lambda rng, size: git_log(rng, size),
    "grep": lambda rng, size: grep_hits(rng, size),
    "diff": lambda rng, size: diff(rng, size),
    "man": lambda rng, size: man_page(rng, size),
    "packages": lambda rng, size: package_list(rng, size),
    "ps": lambda rng, size: ps_output(rng, size),
    "pods": lambda rng, size: kubectl_pods(rng, size),
    "markdown": lambda rng, size: markdown_doc(rng, rng.choice(LANGUAGES), size),
    "prose": lambda rng, size: grow(rng, size, lambda r: prose(r, r.choice(PROSE_LANGUAGES), r.randint(2, 6))),
}


def text(rng, kind, size):
    """size characters (about) of one kind of KINDS."""
    return KINDS[kind](rng, size)
