"""No mutable file-level state in server/ (STYLE.md "Memory"): long-lived objects belong to
the application object that main.c builds (server/app/app.h).

Reads the symbol tables of the built server objects (nm) and fails on any writable data
symbol, that is in .data or .bss (nm types d/D/b/B; .data.rel.ro, where constant tables of
pointers go in position-independent code, is read-only after relocation and not counted),
unless the allow-list below names it: logging's settings and one-time initialisation.

CG_BUILD_DIR: the build tree (its CMakeFiles/<target>.dir/server/**.o); CC: the compiler
the self-check uses (default cc).
"""

import glob
import os
import shutil
import subprocess
import tempfile
import unittest

# (source path under server/, symbol): why it may be written after start.
ALLOWED = {
    ("base/log.c", "min_level"): "logging's settings (cg_log_setup, once at start)",
    ("base/log.c", "line_format"): "logging's settings (cg_log_setup, once at start)",
    ("base/log.c", "out_fd"): "logging's settings (cg_log_setup, once at start)",
    ("base/crypto.c", "sha256_once"): "one-time init (pthread_once)",
    ("base/crypto.c", "sha256_md"): "one-time init (pthread_once)",
    ("llm/llm.c", "curl_once"): "one-time init (pthread_once)",
    ("llm/llm.c", "curl_init_rc"): "one-time init (pthread_once)",
}

# Symbols the sanitizers and coverage instrumentation add to every object.
TOOL_PREFIXES = ("__asan", "___asan", "__ubsan", "__sancov", "__odr_asan", "__llvm", ".L")


def writable_symbols(obj):
    """(symbol, nm type, section) of the writable data symbols obj defines. Static locals
    keep their name without GCC's ".N" suffix."""
    out = subprocess.run(["nm", "-f", "sysv", "--defined-only", obj], check=True,
                         capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) < 7 or cols[2] not in ("b", "B", "d", "D"):
            continue
        name, section = cols[0], cols[6]
        if section.startswith(".data.rel.ro") or name.startswith(TOOL_PREFIXES):
            continue
        base, dot, suffix = name.rpartition(".")
        if dot and suffix.isdigit():
            name = base
        found.append((name, cols[2], section))
    return found


def source_of(obj):
    """server/-relative source path of a CMake object file (".../server/base/log.c.o")."""
    return obj.split("/server/", 1)[1][: -len(".o")]


def violations(objects):
    bad = []
    for obj in objects:
        src = source_of(obj)
        for name, kind, section in writable_symbols(obj):
            if (src, name) not in ALLOWED:
                bad.append(f"server/{src}: {name} (nm {kind}, {section})")
    return bad


class FileState(unittest.TestCase):
    def test_server_objects_define_no_writable_data_outside_the_allow_list(self):
        build = os.environ.get("CG_BUILD_DIR", "build")
        objects = sorted(glob.glob(os.path.join(build, "CMakeFiles", "*.dir", "server", "**",
                                                "*.o"), recursive=True))
        # Every layer and main.c: an empty or partial list would pass for the wrong reason.
        dirs = {source_of(o).split("/")[0] for o in objects}
        for layer in ("base", "core", "store", "llm", "service", "rpc", "app", "transport", "main.c"):
            self.assertIn(layer, dirs, f"no objects of server/{layer} under {build}")
        bad = violations(objects)
        self.assertEqual(bad, [], "mutable file-level state (move it into the application "
                         "object, server/app/app.h, or a per-thread object):\n  " +
                         "\n  ".join(bad))

    def test_the_check_sees_a_static_counter_and_not_a_constant_table(self):
        cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "server", "probe"))
            src = os.path.join(tmp, "server", "probe", "probe.c")
            with open(src, "w") as f:
                f.write("static int counter;\n"
                        "static const char *const names[] = {\"a\", \"b\"};\n"
                        "int bump(void) { static long calls; return ++counter + (int)++calls; }\n"
                        "const char *name(int i) { return names[i & 1]; }\n")
            obj = src + ".o"
            subprocess.run([cc, "-O2", "-fPIE", "-c", src, "-o", obj], check=True)
            bad = violations([obj])
        self.assertEqual(len(bad), 2, bad)
        self.assertTrue(any(": counter " in b for b in bad), bad)
        self.assertTrue(any(": calls " in b for b in bad), bad)


if __name__ == "__main__":
    unittest.main()
