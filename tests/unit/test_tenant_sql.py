"""No statement of the PostgreSQL store reaches across tenants (DESIGN.md section 5): the
schema stays distributable by tenant_id (Citus; docs/operations.md "On a distributed
PostgreSQL").

A static check, without an SQL parser. Each server/store/store_pg*.c is run through the C
preprocessor (CC, default cc), so that the SQL its macros assemble is whole; every run of
adjacent string literals is one piece of SQL (a statement, or a fragment that a statement
splices in with %s). In each piece, every reference to a tenant-scoped table (FROM, JOIN,
UPDATE, INTO, USING, or after a comma in a FROM list; the tables are those with a
tenant_id column in migrations/) must be tied to one tenant, by a predicate on its own
tenant_id in its own query block, that is the parenthesised group it stands in, without
the subqueries nested in that group:

- alias.tenant_id (or tenant_id, for a table without an alias) = / IN / = ANY a value,
  or = another reference's tenant_id (a join on tenant_id);
- (alias.tenant_id, ...) IN / = (...) (a row of keys that starts with it);
- an INSERT names tenant_id first in its column list.

And every tenant_id compared with a parameter in one piece names the same parameter: a
statement is about one tenant. What legitimately spans tenants is listed in CROSS_TENANT
with its reason (file, first words of the piece); an entry that matches nothing fails too,
so that the list cannot go stale.
"""

import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PG_INCLUDE = "/usr/include/postgresql"

# Tables without tenant_id: kept on the coordinator (or as reference tables) on Citus.
GLOBAL_TABLES = {
    "schema_migrations": "the migration runner's version table (store_pg.c), one row per "
                         "migration, written under its advisory lock",
}

# (source file, the piece's start after whitespace is collapsed): why it spans tenants.
CROSS_TENANT = {
    ("store_pg_sweep.c", "SELECT tenant_id::text FROM tenants WHERE $1::text = '' OR"):
        "the retention walk's cursor over every tenant, a page at a time; the page's "
        "statements then name its tenants (tenant_id = ANY of the page)",
    ("store_pg_sweep.c", "WITH r AS (SELECT tenant_id FROM scopes WHERE session_id"):
        "the sweeper's read of the tenants with work due (a due reset, expired holds or "
        "approvals), through partial indexes keyed by the due time (0026_sweep_due), so "
        "that a pass costs the work due, not the number of tenants; read-only, and each "
        "tenant's work then runs in statements of its own",
    ("store_pg_history.c", "SELECT t::text FROM (SELECT tenant_id AS t FROM usage_rollups"):
        "the forecast pass's read of the tenants with spend in the window or a budget marked "
        "under the horizon, through the index of recent minute buckets (0027_forecast_due), "
        "so that a pass costs the tenants with recent spend, not every tenant; read-only, "
        "each tenant's forecast then runs in statements of its own",
    ("store_pg_tenants.c", "SELECT tenant_id::text, name, time_zone,"):
        "ListTenants of the server's admin (both pages' statements): the tenants of the "
        "whole deployment, in creation order",
    ("store_pg_tenants.c", "WITH made AS (INSERT INTO tenants (name, time_zone,"):
        "CreateTenant: the new tenant's id is made by the row's default (gen_random_uuid), "
        "and its audit row takes that id from the insert",
    ("store_pg_notify.c", "WITH due AS (SELECT tenant_id, delivery_id FROM"):
        "the notifiers' claim of due webhook deliveries of every tenant (store_notify.h): "
        "each replica's one notifier thread sends them all; every row it then reads or "
        "settles is named by its own tenant_id",
    ("store_pg_gauges.c", "WITH pending AS ( SELECT count(*)::int8 AS n,"):
        "the metrics' figures of the whole deployment (store_gauges.h): the pending "
        "approvals' count and oldest request, and the top N budgets grouped by tenant; "
        "aggregates over partial indexes, read-only, from the monitor thread every 10 s",
}

TABLE_REF = r"\b(?:FROM|JOIN|UPDATE|INTO|USING)\s+(?:ONLY\s+)?({tables})\b"
COMMA_REF = r",\s*({tables})\s+(?:AS\s+)?([a-z_][a-z0-9_]*)\b"
NOT_ALIAS = {"where", "set", "on", "join", "left", "right", "inner", "cross", "full", "order",
             "group", "limit", "for", "using", "values", "select", "returning", "default",
             "union", "natural", "as", "and", "or", "having", "window", "offset", "lateral",
             "except", "intersect", "with"}


def tenant_tables():
    """{table: has a tenant_id column} of every CREATE TABLE in migrations/."""
    tables = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "migrations", "*.sql"))):
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"--[^\n]*", "", f.read())
        for m in re.finditer(r"CREATE TABLE\s+(?:IF NOT EXISTS\s+)?(\w+)\s*\(", text, re.I):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            body = text[m.end():i]
            tables[m.group(1).lower()] = re.search(r"^\s*tenant_id\s", body, re.M) is not None
    return tables


# ------------------------------------------------------------------ C to SQL pieces --------

def preprocess(path):
    cc = os.environ.get("CC") or shutil.which("cc") or "cc"
    r = subprocess.run([cc, "-E", "-I", os.path.join(ROOT, "server"), "-I", PG_INCLUDE, path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{cc} -E {path} failed:\n{r.stderr[-2000:]}")
    return r.stdout


TOKEN = re.compile(r'''
    (?P<marker>^\#\s*(?P<line>\d+)\s+"(?P<file>[^"]*)"[^\n]*$)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<char>'(?:[^'\\\n]|\\.)*')
  | (?P<space>\s+)
  | (?P<other>[A-Za-z_0-9]+|.)
''', re.M | re.X)


def unescape(lit):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)),
                  lit[1:-1])


def sql_pieces(preprocessed, source_name):
    """(line, text) of every run of adjacent string literals that came from source_name."""
    pieces, run, run_line = [], [], 0
    cur_file, cur_line = "", 0
    for m in TOKEN.finditer(preprocessed):
        kind = m.lastgroup
        if kind == "marker":
            cur_file, cur_line = os.path.basename(m.group("file")), int(m.group("line"))
            continue
        if kind == "string" and cur_file == source_name:
            if not run:
                run_line = cur_line
            run.append(unescape(m.group()))
        elif kind != "space" and run:
            pieces.append((run_line, "".join(run)))
            run = []
        if kind == "space":
            cur_line += m.group().count("\n")
    if run:
        pieces.append((run_line, "".join(run)))
    return pieces


# ------------------------------------------------------------------ the check -------------

def blank_nested(text, start, end):
    """text[start:end] with every parenthesised group whose content starts with SELECT or
    WITH (a subquery: its own block) replaced by spaces."""
    out = list(text[start:end])
    depth_starts = []
    for i in range(start, end):
        c = text[i]
        if c == "(":
            depth_starts.append(i)
        elif c == ")" and depth_starts:
            j = depth_starts.pop()
            if re.match(r"\(\s*(SELECT|WITH)\b", text[j:i + 1], re.I):
                for k in range(j + 1, i):
                    out[k - start] = " "
    return "".join(out)


def block_of(text, pos):
    """(start, end) of the innermost parenthesised group containing pos (the whole text at
    the top level)."""
    depth, start = 0, 0
    for i in range(pos - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            if depth == 0:
                start = i + 1
                break
            depth -= 1
    depth, end = 0, len(text)
    for i in range(pos, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            if depth == 0:
                end = i
                break
            depth -= 1
    return start, end


def references(sql, tables):
    """(position, table, alias or None, keyword) of each tenant-table reference."""
    names = "|".join(sorted(tables, key=len, reverse=True))
    refs = []
    for m in re.finditer(TABLE_REF.format(tables=names), sql, re.I):
        after = sql[m.end():]
        a = re.match(r"\s+(?:AS\s+)?([a-z_][a-z0-9_]*)\b", after, re.I)
        alias = a.group(1) if a and a.group(1).lower() not in NOT_ALIAS else None
        keyword = m.group().split()[0].upper()
        refs.append((m.start(1), m.group(1).lower(), alias, keyword))
    for m in re.finditer(COMMA_REF.format(tables=names), sql, re.I):
        if m.group(2).lower() not in NOT_ALIAS:
            refs.append((m.start(1), m.group(1).lower(), m.group(2), "FROM"))
    return refs


def tied(sql, pos, table, alias, keyword, refs):
    """Whether the reference at pos is tied to one tenant (see the module comment). refs:
    every reference of the piece; a bare tenant_id belongs to a reference's table when it
    is the only one in its block."""
    if keyword == "INTO":
        # INSERT INTO t [AS a] (tenant_id, ...): the column list right after the name.
        m = re.match(r"\w+(?:\s+AS\s+\w+)?\s*\(\s*tenant_id\s*[,)]", sql[pos:], re.I)
        return m is not None
    start, end = block_of(sql, pos)
    block = blank_nested(sql, start, end)
    alone = [r for r in refs if block_of(sql, r[0]) == (start, end)] == [(pos, table, alias,
                                                                           keyword)]
    names = {alias or table} | ({""} if alone or not alias else set())
    for name in names:
        col = (re.escape(name) + r"\.tenant_id" if name else r"(?<![.\w])tenant_id") + r"\b"
        if re.search(col + r"\s*(=|IN\b)", block, re.I):
            return True
        if re.search(r"=\s*" + col, block, re.I):
            return True
        if re.search(r"\(\s*" + col + r"\s*,[^()]*\)\s*(=|IN\b)", block, re.I):
            return True
    return False


def check_piece(sql, tables):
    """The problems of one piece of SQL (empty when fine)."""
    flat = " ".join(sql.split())
    problems = []
    refs = references(flat, tables)
    for pos, table, alias, keyword in refs:
        if not tied(flat, pos, table, alias, keyword, refs):
            problems.append(f"{keyword} {table}{' ' + alias if alias else ''} is not tied to "
                            f"one tenant_id")
    params = set(re.findall(r"tenant_id\s*(?:=|>|IN)\s*(?:NULLIF\()?\$(\d+)", flat, re.I))
    params |= set(re.findall(r"\$(\d+)(?:::\w+)?\s*=\s*\w*\.?tenant_id\b", flat, re.I))
    if len(params) > 1:
        problems.append(f"tenant_id compared with several parameters: "
                        f"{', '.join('$' + p for p in sorted(params))}")
    return problems


def scan(paths, tables, allowed):
    """(problems, unused allow-list keys): problems are 'file:line: what: SQL start'."""
    tenant = {t for t, has in tables.items() if has}
    problems, used = [], set()
    for path in paths:
        name = os.path.basename(path)
        for line, sql in sql_pieces(preprocess(path), name):
            found = check_piece(sql, tenant)
            flat = " ".join(sql.split())
            if not found:
                continue
            key = next((k for k in allowed if k[0] == name and flat.startswith(k[1])), None)
            if key is not None:
                used.add(key)
                continue
            problems += [f"{name}:{line}: {p}: {flat[:160]}" for p in found]
    return problems, set(allowed) - used


class TenantSql(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.tables = tenant_tables()

    def test_every_table_has_tenant_id_or_is_listed_as_global(self):
        self.assertIn("ledger", self.tables, "migrations/ was not read")
        no_tenant = sorted(t for t, has in self.tables.items() if not has)
        self.assertEqual([t for t in no_tenant if t not in GLOBAL_TABLES], [],
                         "tables without tenant_id must be listed in GLOBAL_TABLES with a reason")

    def test_no_store_statement_reaches_across_tenants(self):
        paths = sorted(glob.glob(os.path.join(ROOT, "server", "store", "store_pg*.c")))
        self.assertGreater(len(paths), 5)
        problems, unused = scan(paths, self.tables, CROSS_TENANT)
        self.assertEqual(problems, [], "statements not tied to one tenant (fix them, or add "
                                       "them to CROSS_TENANT with the reason they may span "
                                       "tenants)")
        self.assertEqual(unused, set(), "CROSS_TENANT entries that match no statement")

    def test_the_check_finds_what_it_should(self):
        """The checker itself, on C made up for the purpose: it must flag each bad piece
        and pass each good one."""
        tables = {"ledger": True, "scopes": True, "tenants": True, "schema_migrations": False}
        bad = {
            "untied": 'f("SELECT entry_id FROM ledger WHERE entry_id = $1");',
            "other_column": 'f("SELECT 1 FROM ledger g WHERE g.session_id = $1");',
            "one_side_of_a_join": 'f("SELECT 1 FROM ledger g JOIN scopes s ON s.session_id '
                                  '= g.session_id WHERE g.tenant_id = $1");',
            "filter_only_in_a_subquery": 'f("SELECT 1 FROM ledger WHERE entry_id IN (SELECT '
                                         'entry_id FROM ledger WHERE tenant_id = $1)");',
            "update": 'f("UPDATE scopes SET used_tokens = 0 WHERE session_id = $1");',
            "insert_without": 'f("INSERT INTO ledger (entry_id, tenant_id) VALUES ($1, $2)");',
            "two_tenants": 'f("SELECT 1 FROM ledger g, scopes s WHERE g.tenant_id = $1 '
                           'AND s.tenant_id = $2");',
            "macro": '#define COLS "entry_id"\nf("SELECT " COLS " FROM ledger");',
            "bare_column_of_two": 'f("SELECT 1 FROM ledger g, scopes s WHERE tenant_id = $1 '
                                  'AND s.session_id = g.session_id");',
        }
        good = {
            "filtered": 'f("SELECT entry_id FROM ledger WHERE tenant_id = $1::uuid");',
            "aliased": 'f("SELECT 1 FROM ledger g WHERE g.tenant_id = $1::uuid");',
            "join": 'f("SELECT 1 FROM ledger g JOIN scopes s ON s.tenant_id = g.tenant_id '
                    'AND s.session_id = g.session_id WHERE g.tenant_id = $1");',
            "insert": 'f("INSERT INTO ledger AS l (tenant_id, entry_id) VALUES ($1, $2)");',
            "row": 'f("DELETE FROM ledger WHERE (tenant_id, entry_id) IN (SELECT tenant_id, '
                   'entry_id FROM ledger WHERE tenant_id = $1 LIMIT 5)");',
            "global": 'f("SELECT version FROM schema_migrations ORDER BY version");',
            "bare_column": 'f("SELECT 1 FROM ledger g, unnest(g.x) AS u(a) WHERE tenant_id '
                           '= $1");',
        }
        with tempfile.TemporaryDirectory() as d:
            for name, body in list(bad.items()) + list(good.items()):
                path = os.path.join(d, f"{name}.c")
                with open(path, "w") as f:
                    f.write("void f(const char *);\nvoid g(void) {\n" + body + "\n}\n")
            for name in bad:
                with self.subTest(bad=name):
                    problems, _ = scan([os.path.join(d, f"{name}.c")], tables, {})
                    self.assertNotEqual(problems, [], f"{bad[name]!r} passed")
            for name in good:
                with self.subTest(good=name):
                    problems, _ = scan([os.path.join(d, f"{name}.c")], tables, {})
                    self.assertEqual(problems, [], good[name])


if __name__ == "__main__":
    unittest.main()
