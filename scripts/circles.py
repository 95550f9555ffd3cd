#!/usr/bin/env python3
"""circles.py - finds import circles in server/: files (and folders) that call each other.

The graph is the linker's, read from the object files of a build: file A depends on file B
when A.o has an undefined symbol that B.o defines (`nm -g --defined-only` and `nm -u`).
It also fails when rpc/ calls store/, llm/ or the process cache directly (FORBIDDEN below):
those go through a service; and when service/ or core/ uses protobuf-c, gRPC (or, for core/,
libpq, hiredis, curl) symbols (FORBIDDEN_SYMBOLS). A circle is a strongly connected component with more than one
file (or more than one folder: base, core, store, llm, service, rpc, app, transport, and main for server/main.c).
Generated code that a layer's library compiles (build/gen/<file>, e.g. rpc's method table,
which names every handler) counts as that layer's file and is shown as <layer>/gen/<file>;
the protobuf-c messages (library cg_proto, below every layer) are left out.

Prints every circle, then checks them against KNOWN_CIRCLES below: a circle that is not
inside a known one (a new circle, or a known one that grew) fails with exit status 1;
a known circle that is gone is reported so that the list shrinks with the code.
Run after a build:  scripts/circles.py build   (also the ctest `lint_circles`).
"""
import os
import subprocess
import sys

# Circles that exist today and are removed by later work, each a set of files. None is left
# (issue 14 removed the last ones); never add a circle here to make a new one pass.
KNOWN_CIRCLES = []

# Calls that skip a layer the house style puts between them: the handlers of rpc/ reach the
# stores, the process cache and the LLM only through a service (service/), so that each flow
# has one place. (folder, folder or file prefix it must not call)
FORBIDDEN = [
    ("rpc", "store/"),
    ("rpc", "llm/"),
    ("rpc", "service/cache.c"),
]

# Symbols a folder must not use at all: services work in domain types, never protobuf.
FORBIDDEN_SYMBOLS = [
    ("service", ("protobuf_c_", "ctxguard__v1__", "grpc_")),
    ("core", ("protobuf_c_", "ctxguard__v1__", "grpc_", "PQ", "redis", "curl_")),
]

FOLDERS = ("base", "core", "store", "llm", "service", "rpc", "app", "transport")


def nm(obj, flags):
    out = subprocess.run(["nm", *flags, obj], check=True, capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def objects(build, root):
    """{source path relative to server/ (generated: <layer>/gen/<file>): object path} for every
    server/ source built and every generated source of a layer's library (cg_<layer>)."""
    found = {}
    for dirpath, _, files in os.walk(os.path.join(build, "CMakeFiles")):
        for name in files:
            if not name.endswith(".c.o"):
                continue
            obj = os.path.join(dirpath, name)
            rel = obj.split(os.sep + "server" + os.sep, 1)
            if len(rel) == 2:
                src = rel[1][: -len(".o")]
                # An object left behind by a file that no longer exists is not part of the code.
                if os.path.exists(os.path.join(root, "server", src)):
                    found[src] = obj
                continue
            generated = generated_source(build, obj)
            if generated is not None:
                found[generated] = obj
    return found


def generated_source(build, obj):
    """<layer>/gen/<file> for an object of build/gen/<file> compiled by the library of a
    layer (CMakeFiles/cg_<layer>.dir/gen/...), else None (tests, the client, cg_proto)."""
    rel = os.path.relpath(obj, os.path.join(build, "CMakeFiles")).split(os.sep)
    if len(rel) < 3 or rel[1] != "gen" or not rel[0].startswith("cg_"):
        return None
    layer = rel[0][len("cg_"):].removesuffix(".dir")
    src = "/".join(rel[2:]).removesuffix(".o")
    if layer not in FOLDERS or not os.path.exists(os.path.join(build, "gen", src)):
        return None  # not a layer's, or left behind by a generator that no longer writes it
    return f"{layer}/gen/{src}"


def file_graph(objs):
    defined = {}
    for src, obj in objs.items():
        for sym in nm(obj, ["-g", "--defined-only"]):
            defined.setdefault(sym, src)
    graph = {src: set() for src in objs}
    for src, obj in objs.items():
        for sym in nm(obj, ["-u"]):
            dst = defined.get(sym)
            if dst is not None and dst != src:
                graph[src].add(dst)
    return graph


def sccs(graph):
    """Tarjan's strongly connected components (iterative), each a sorted list."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                out.append(sorted(comp))
    return [c for c in out if len(c) > 1]


def folder_of(src):
    top = src.split("/", 1)[0]
    return top if top in FOLDERS else "main"


def folder_graph(graph):
    folders = {}
    for src, dsts in graph.items():
        a = folder_of(src)
        folders.setdefault(a, set())
        for dst in dsts:
            b = folder_of(dst)
            folders.setdefault(b, set())
            if a != b:
                folders[a].add(b)
    return folders


def edges_within(graph, comp):
    members = set(comp)
    return sorted(f"{a} -> {b}" for a in comp for b in graph[a] if b in members)


def main(argv):
    build = argv[1] if len(argv) > 1 else "build"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    objs = objects(build, root)
    if not objs:
        print(f"circles: no server objects under {build}/CMakeFiles: build first", file=sys.stderr)
        return 2
    graph = file_graph(objs)
    failed = False

    file_circles = sccs(graph)
    print(f"circles: {len(objs)} files, {sum(len(d) for d in graph.values())} file dependencies")
    for comp in file_circles:
        known = any(set(comp) <= k for k in KNOWN_CIRCLES)
        print(f"file circle ({'known' if known else 'NEW'}): {' '.join(comp)}")
        for e in edges_within(graph, comp):
            print(f"    {e}")
        failed |= not known
    for k in KNOWN_CIRCLES:
        if not any(set(c) == k for c in file_circles):
            print(f"known circle gone or smaller (shrink KNOWN_CIRCLES): {' '.join(sorted(k))}")

    folders = folder_graph(graph)
    for comp in sccs(folders):
        print(f"folder circle (NEW): {' '.join(comp)}")
        for a in comp:
            for src, dsts in sorted(graph.items()):
                if folder_of(src) != a:
                    continue
                for dst in sorted(dsts):
                    if folder_of(dst) in comp and folder_of(dst) != a:
                        print(f"    {src} -> {dst}")
        failed = True

    for src, dsts in sorted(graph.items()):
        for dst in sorted(dsts):
            for folder, target in FORBIDDEN:
                if folder_of(src) == folder and dst.startswith(target):
                    print(f"skipped layer (NEW): {src} -> {dst} ({folder}/ calls {target} "
                          "only through a service)")
                    failed = True

    for src, obj in sorted(objs.items()):
        for folder, prefixes in FORBIDDEN_SYMBOLS:
            if folder_of(src) != folder:
                continue
            for sym in nm(obj, ["-u"]):
                if sym.startswith(prefixes):
                    print(f"forbidden symbol (NEW): {src} uses {sym} ({folder}/ never does)")
                    failed = True

    print("circles: FAIL (a new import circle or skipped layer)" if failed else "circles: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
