"""docs/architecture.md names the code it describes as `file: function` (a path under server/,
or from the repository root, then a function or other name defined in that file). This test
fails when one of them no longer exists, so the page cannot drift from the code unnoticed.

A name is found when the file has it as a definition: a line that starts, in column 0, with
the return type and then `name(` (a function), or `struct name {` / `} name;` / `name =`.
"""

import os
import re
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "architecture.md")

# `path/file.c: name`, `path/file.c: struct name`, and lists `file.c: a`, `b` are read as
# the first name only (the others are checked where they are named with their file).
REF = re.compile(r"`((?:[a-z_]+/)*[a-z_0-9]+\.[ch]): (?:struct )?([A-Za-z_][A-Za-z_0-9]*)")


def source(path):
    for base in (os.path.join(ROOT, "server"), ROOT):
        full = os.path.join(base, path)
        if os.path.isfile(full):
            with open(full, encoding="utf-8") as f:
                return f.read()
    return None


def defines(text, name):
    n = re.escape(name)
    patterns = (
        rf"^[A-Za-z_][^;()\n]*[ *]{n}\(",  # a function definition or declaration in column 0
        rf"^struct {n} \{{",
        rf"^\}} {n};",
        rf"^#define {n}\b",
        rf"^(static )?[A-Za-z_][^;(\n]* {n}(\[[^\]]*\])? =",
        rf"^typedef [^;]*\b{n};",
    )
    return any(re.search(p, text, re.M) for p in patterns)


class ArchitectureDoc(unittest.TestCase):
    def test_every_file_and_function_named_exists(self):
        with open(DOC, encoding="utf-8") as f:
            doc = f.read()
        refs = sorted(set(REF.findall(doc)))
        self.assertGreater(len(refs), 40, "the page names its code as `file: function`")
        missing = []
        for path, name in refs:
            text = source(path)
            if text is None:
                missing.append(f"{path}: no such file")
            elif not defines(text, name):
                missing.append(f"{path}: {name} is not defined there")
        self.assertEqual(missing, [], "docs/architecture.md names code that is not there")

    def test_the_check_can_fail(self):
        text = source("service/budget.c")
        self.assertTrue(defines(text, "cg_budget_check"))
        self.assertFalse(defines(text, "cg_budget_no_such_function"))
        self.assertIsNone(source("service/no_such_file.c"))


if __name__ == "__main__":
    unittest.main()
