"""`ctxguard migrate` and migrate-on-start: ordered, recorded once, safe when concurrent."""

import hashlib
import os
import re
import subprocess
import time

import cgtest
from cgtest import admin_pb2, budget_pb2, budget_pb2_grpc, common_pb2


def migration_versions():
    d = os.path.join(cgtest.SOURCE_DIR, "migrations")
    versions = sorted(int(m.group(1)) for f in os.listdir(d)
                      if (m := re.match(r"^(\d{4})_\w+\.sql$", f)))
    if not versions:
        raise AssertionError(f"no NNNN_name.sql files in {d}")
    return versions


def start_migrate(dsn, extra_env=None):
    env = {"CTXGUARD_PG_DSN": dsn, "CTXGUARD_REDIS_URL": ""}
    env.update(extra_env or {})
    return subprocess.Popen([cgtest.server_bin(), "migrate"], env=cgtest.clean_env(env),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def applied_count(output):
    m = re.search(r"migrations: (\d+) applied", output)
    if m is None:
        raise AssertionError(f"no 'migrations: N applied' line in:\n{output}")
    return int(m.group(1))


class Migrate(cgtest.TestCase):
    def setUp(self):
        self.schema = cgtest.new_schema()
        self.addCleanup(cgtest.drop_schema, self.schema)
        self.dsn = cgtest.dsn_with_schema(cgtest.pg_dsn(), self.schema)

    def recorded(self):
        out = cgtest.psql(f"SELECT version, count(*) FROM {self.schema}.schema_migrations "
                          f"GROUP BY version ORDER BY version")
        return [tuple(int(x) for x in line.split("|")) for line in out.split()]

    def test_four_concurrent_runs_apply_each_version_once(self):
        procs = [start_migrate(self.dsn) for _ in range(4)]
        results = [p.communicate(timeout=60) for p in procs]
        outputs = [o + e for o, e in results]
        for p, out in zip(procs, outputs):
            self.assertEqual(p.returncode, 0, out)
        versions = migration_versions()
        self.assertEqual(self.recorded(), [(v, 1) for v in versions])
        # Between them they applied every migration exactly once.
        self.assertEqual(sum(applied_count(o) for o in outputs), len(versions),
                         "\n---\n".join(outputs))
        # The tables are in this schema (search_path honoured), not in public.
        tables = cgtest.psql("SELECT table_name FROM information_schema.tables "
                             f"WHERE table_schema = '{self.schema}' ORDER BY 1").split()
        for t in ("schema_migrations", "tenants", "api_keys"):
            self.assertIn(t, tables)

        again = start_migrate(self.dsn)
        out, err = again.communicate(timeout=60)
        self.assertEqual(again.returncode, 0, out + err)
        self.assertEqual(applied_count(out + err), 0, out + err)
        self.assertEqual(self.recorded(), [(v, 1) for v in versions])

    def test_replicas_starting_together_migrate_once(self):
        servers = [cgtest.Server(schema=self.schema) for _ in range(3)]
        for s in servers:
            self.addCleanup(s.close)
        for s in servers:  # all three processes start before any is waited for
            s.start_async()
        for s in servers:
            s.finish_start()
        self.assertEqual(self.recorded(), [(v, 1) for v in migration_versions()])
        for s in servers:
            self.assertEqual(cgtest.health.name(cgtest.health_check(s.channel()).status),
                             "SERVING")
        # Any replica sees what another created.
        t = servers[0].create_tenant("shared")
        got = servers[2].admin().GetTenant(cgtest.admin_pb2.GetTenantRequest(tenant_id=t.tenant_id),
                                           metadata=servers[2].admin_md(), timeout=10)
        self.assertEqual(got.tenant.name, "shared")

    def test_unreachable_database_fails_with_a_message(self):
        t0 = time.monotonic()
        p = start_migrate("postgresql://postgres@127.0.0.1:1/none",
                          {"CTXGUARD_PG_CONNECT_TIMEOUT_MS": "500"})
        out, err = p.communicate(timeout=30)
        self.assertNotEqual(p.returncode, 0, out + err)
        self.assertRegex(out + err, r"(?i)migrat|postgres|connect")
        self.assertLess(time.monotonic() - t0, 10)


if __name__ == "__main__":
    import unittest
    unittest.main()


class KeysBeforeRoles(cgtest.TestCase):
    """A deployment's keys made before roles existed (migration 0016) keep working."""

    def test_existing_keys_become_tenant_admins_and_keep_working(self):
        schema = cgtest.new_schema()
        self.addCleanup(cgtest.drop_schema, schema)
        dsn = cgtest.dsn_with_schema(cgtest.pg_dsn(), schema)
        d = os.path.join(cgtest.SOURCE_DIR, "migrations")
        cgtest.psql("CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())", dsn)
        for f in sorted(os.listdir(d)):
            m = re.match(r"^(\d{4})_(\w+)\.sql$", f)
            if m is None or int(m.group(1)) >= 16:
                continue
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                cgtest.psql(fh.read(), dsn)
            cgtest.psql(f"INSERT INTO schema_migrations VALUES ({int(m.group(1))}, "
                        f"'{m.group(2)}')", dsn)
        tenant_id = cgtest.psql("INSERT INTO tenants (name) VALUES ('before-roles')"
                                " RETURNING tenant_id", dsn).strip()
        key_id, secret = "00112233aabbccdd", "A" * 43
        key = f"cgk_{tenant_id.replace('-', '')}_{key_id}_{secret}"
        digest = hashlib.sha256(key.encode()).hexdigest()
        cgtest.psql(f"INSERT INTO api_keys (tenant_id, key_id, secret_hash, name) VALUES "
                    f"('{tenant_id}', '{key_id}', decode('{digest}', 'hex'), 'old')", dsn)

        r = subprocess.run([cgtest.server_bin(), "migrate"], env=cgtest.clean_env(
            {"CTXGUARD_PG_DSN": dsn, "CTXGUARD_REDIS_URL": ""}), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(cgtest.psql("SELECT role FROM api_keys", dsn).strip(), "4")

        srv = cgtest.start_server(self, schema=schema)
        ch = srv.channel()
        md = cgtest.bearer(key)
        me = srv.admin(ch).WhoAmI(admin_pb2.WhoAmIRequest(), metadata=md, timeout=10)
        self.assertEqual(me.role, admin_pb2.API_KEY_ROLE_ADMIN)
        # What a key could do before: set a budget, spend, and create keys of its tenant.
        stub = budget_pb2_grpc.BudgetServiceStub(ch)
        sc = common_pb2.Scope(session_id="s1")
        stub.SetBudget(budget_pb2.SetBudgetRequest(
            scope=sc, settings=budget_pb2.BudgetSettings(limit_tokens=1000)), metadata=md,
            timeout=10)
        r = stub.Reserve(budget_pb2.ReserveRequest(scope=sc, tokens=100), metadata=md, timeout=10)
        self.assertEqual(r.decision, budget_pb2.DECISION_ALLOW, r)
        k = srv.admin(ch).CreateApiKey(admin_pb2.CreateApiKeyRequest(), metadata=md, timeout=10)
        self.assertEqual(k.key.role, admin_pb2.API_KEY_ROLE_AGENT, "new keys default to agent")
