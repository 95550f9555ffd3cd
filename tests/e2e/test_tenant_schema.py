"""The schema stays distributable by tenant (DESIGN.md section 5; docs/operations.md "On a
distributed PostgreSQL"), read from PostgreSQL's catalog after the migrations ran:

- every table has a NOT NULL uuid tenant_id column (the distribution column), unless
  GLOBAL_TABLES lists it with its reason;
- every primary key and unique index of those tables starts with tenant_id (Citus refuses a
  unique constraint without the distribution column), and so does every other index (the
  design's promise: a tenant's rows are found from its id) unless CROSS_TENANT_INDEXES lists
  it with its reason (a non-unique index is built on every shard; an entry that matches no
  index fails too, so that the list cannot go stale);
- every foreign key between them maps tenant_id to tenant_id (Citus: a foreign key between
  distributed tables must include the distribution column on both sides).

The statements' side (no statement reaches across tenants) is tests/unit/test_tenant_sql.py.
A self-test builds a schema that breaks each rule and checks that each break is found.
"""


import cgtest

# Tables without tenant_id: on Citus they stay on the coordinator (a local table), or become
# reference tables.
GLOBAL_TABLES = {
    "schema_migrations": "the migration runner's version table (store_pg.c), one row per "
                         "migration, written under its advisory lock",
}

# Non-unique indexes that do not start with tenant_id: why a read must span tenants.
CROSS_TENANT_INDEXES = {
    ("reservations", "reservations_due"):
        "the sweeper finds the tenants with expired holds by expiry (0026_sweep_due), so that "
        "a pass costs the holds due, not the number of tenants",
    ("approvals", "approvals_due"):
        "the same for pending approvals past their expiry",
    ("scopes", "scopes_reset_due"):
        "the same for tenant budgets whose reset is due",
    ("usage_rollups", "usage_rollups_recent"):
        "the forecast pass finds the tenants with spend in its window by the minute buckets' "
        "start (0027_forecast_due), so that a pass costs the tenants with recent spend",
}


def rows(sql):
    return [line.split("|") for line in cgtest.psql(sql).splitlines() if line]


def catalog_problems(schema, global_tables, cross_tenant_indexes):
    """What in `schema` breaks the rules of the module comment, one line each."""
    problems = []
    listed = set()
    tables = {}
    for name, col in rows(
            f"SELECT c.relname, coalesce((SELECT format_type(a.atttypid, a.atttypmod) "
            f"|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END FROM pg_attribute a "
            f"WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped), '') "
            f"FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'p') ORDER BY 1"):
        tables[name] = col
        if name in global_tables:
            if col:
                problems.append(f"{name}: listed as global but has tenant_id")
        elif col != "uuid not null":
            problems.append(f"{name}: no NOT NULL uuid tenant_id ({col or 'none'}) and not "
                            f"listed as global")
    problems += [f"{name}: listed as global but not in the schema"
                 for name in sorted(set(global_tables) - set(tables))]
    tenant = {name for name, col in tables.items() if col}

    for table, index, primary, unique, first in rows(
            f"SELECT c.relname, ic.relname, i.indisprimary, i.indisunique, coalesce("
            f"(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = i.indrelid "
            f"AND a.attnum = i.indkey[0]), '(an expression)') "
            f"FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            f"JOIN pg_class ic ON ic.oid = i.indexrelid "
            f"JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE n.nspname = '{schema}' ORDER BY 1, 2"):
        if table in tenant and first != "tenant_id":
            kind = ("primary key" if primary == "t" else
                    "unique index" if unique == "t" else "index")
            if kind == "index" and (table, index) in cross_tenant_indexes:
                listed.add((table, index))
                continue
            problems.append(f"{table}: {kind} {index} starts with {first}, not tenant_id")
    problems += [f"{table}: index {index} listed as spanning tenants but no such index does"
                 for table, index in sorted(set(cross_tenant_indexes) - listed)]

    for name, table, ref, cols, ref_cols in rows(
            f"SELECT con.conname, c.relname, rc.relname, "
            f"(SELECT string_agg(a.attname, ',' ORDER BY k.o) FROM unnest(con.conkey) "
            f"WITH ORDINALITY AS k(n, o) JOIN pg_attribute a ON a.attrelid = con.conrelid "
            f"AND a.attnum = k.n), "
            f"(SELECT string_agg(a.attname, ',' ORDER BY k.o) FROM unnest(con.confkey) "
            f"WITH ORDINALITY AS k(n, o) JOIN pg_attribute a ON a.attrelid = con.confrelid "
            f"AND a.attnum = k.n) "
            f"FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid "
            f"JOIN pg_class rc ON rc.oid = con.confrelid "
            f"JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE con.contype = 'f' AND n.nspname = '{schema}' ORDER BY 1"):
        if table not in tenant or ref not in tenant:
            continue
        pairs = list(zip(cols.split(","), ref_cols.split(",")))
        if ("tenant_id", "tenant_id") not in pairs:
            problems.append(f"{table}: foreign key {name} ({cols}) -> {ref} ({ref_cols}) does "
                            f"not map tenant_id to tenant_id")
    return problems


class TenantSchema(cgtest.TestCase):
    def test_migrated_schema_is_distributable_by_tenant(self):
        srv = cgtest.start_server(self)  # applies every migration to its own schema
        problems = catalog_problems(srv.schema, GLOBAL_TABLES, CROSS_TENANT_INDEXES)
        self.assertEqual(problems, [])
        count = rows(f"SELECT count(*) FROM pg_tables WHERE schemaname = '{srv.schema}'")
        self.assertGreater(int(count[0][0]), 10, "the migrations made the tables")

    def test_the_check_finds_what_it_should(self):
        schema = cgtest.new_schema()
        self.addCleanup(cgtest.drop_schema, schema)
        cgtest.psql(f"""
            SET search_path = {schema};
            CREATE TABLE tenants (tenant_id uuid PRIMARY KEY);
            CREATE TABLE good (tenant_id uuid NOT NULL, id int NOT NULL,
                               PRIMARY KEY (tenant_id, id));
            CREATE TABLE global_thing (id int PRIMARY KEY);
            CREATE TABLE nullable (tenant_id uuid, id int);
            CREATE TABLE pk_second (id int, tenant_id uuid NOT NULL, PRIMARY KEY (id, tenant_id));
            CREATE TABLE expr (tenant_id uuid NOT NULL, name text NOT NULL);
            CREATE UNIQUE INDEX expr_name ON expr (lower(name));
            CREATE INDEX good_id ON good (id);
            CREATE INDEX good_listed ON good (id) WHERE id > 0;
            CREATE UNIQUE INDEX good_unique_listed ON good (id, tenant_id);
            CREATE TABLE child (tenant_id uuid NOT NULL, id int NOT NULL, other uuid NOT NULL,
                                PRIMARY KEY (tenant_id, id),
                                CONSTRAINT child_cross FOREIGN KEY (other, id)
                                    REFERENCES good (tenant_id, id),
                                CONSTRAINT child_ok FOREIGN KEY (tenant_id, id)
                                    REFERENCES good (tenant_id, id));
            """)
        problems = catalog_problems(schema, {"schema_migrations": "listed, not there"},
                                    {("good", "good_listed"): "listed, allowed",
                                     ("good", "good_unique_listed"): "unique: never allowed",
                                     ("good", "gone"): "listed, not there"})
        expected = [
            "global_thing: no NOT NULL uuid tenant_id (none) and not listed as global",
            "nullable: no NOT NULL uuid tenant_id (uuid) and not listed as global",
            "schema_migrations: listed as global but not in the schema",
            "expr: unique index expr_name starts with (an expression), not tenant_id",
            "good: index good_id starts with id, not tenant_id",
            "good: unique index good_unique_listed starts with id, not tenant_id",
            "good: index good_unique_listed listed as spanning tenants but no such index does",
            "good: index gone listed as spanning tenants but no such index does",
            "pk_second: primary key pk_second_pkey starts with id, not tenant_id",
            "child: foreign key child_cross (other,id) -> good (tenant_id,id) does not map "
            "tenant_id to tenant_id",
        ]
        self.assertEqual(sorted(problems), sorted(expected))


if __name__ == "__main__":
    import unittest
    unittest.main()
