"""CheckBudget's caches (server/service/cache.c, server/store/store_redis.c) with real
servers: a second server process sees the writes of the first (invalidation across
replicas through LISTEN/NOTIFY and the Redis rows), a revocation takes effect at once,
Redis flushed or killed changes no answer and the cache refills, and PostgreSQL stopped
makes CheckBudget follow on_store_failure (FAIL_CLOSED, FAIL_OPEN, LOCAL_ALLOWANCE) and
recover by itself. The Redis and PostgreSQL faults get services of their own
(cgtest.OwnServices), so that tests running in parallel are not disturbed."""

import subprocess
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
CACHE = B.BUDGET_SOURCE_CACHE
DATABASE = B.BUDGET_SOURCE_DATABASE
POLICY = B.BUDGET_SOURCE_STORE_FAILURE_POLICY


def scope(session="", task=""):
    # No ids: the tenant, named as a spend must name it.
    return common_pb2.Scope(session_id=session, task_id=task, tenant=not session)


def check(stub, md, sc, tokens=100):
    return stub.CheckBudget(B.CheckBudgetRequest(scope=sc, estimated_tokens=tokens,
                                                 delay_mode=B.DELAY_MODE_RETURN_ONLY),
                            metadata=md, timeout=10)


def set_budget(stub, md, sc, limit, **settings):
    stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
        limit_tokens=limit, **settings)), metadata=md, timeout=10)


def record(stub, md, sc, tokens):
    stub.RecordUsage(B.RecordUsageRequest(scope=sc, usage=common_pb2.TokenUsage(
        input_tokens=tokens), idempotency_key=uuid.uuid4().hex), metadata=md, timeout=10)


def used_on_path(resp):
    return [lv.used_tokens for lv in resp.levels]


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = predicate()
        if ok:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def tenant_of(srv):
    t = srv.create_tenant()
    key = srv.create_key(t.tenant_id).secret
    return t.tenant_id, cgtest.bearer(key)


class AcrossReplicas(cgtest.TestCase):
    """Two server processes on one database: B's cache learns of A's writes."""

    @classmethod
    def setUpClass(cls):
        # B keeps rows for a minute: whatever it sees sooner, a notification told it.
        cls.a = cgtest.start_class_server(cls)
        cls.b = cgtest.start_class_server(cls, schema=cls.a.schema,
                                          env={"CTXGUARD_CACHE_ROW_TTL_MS": "60000"})

    def test_a_write_on_one_server_is_seen_by_check_on_the_other(self):
        tenant, md = tenant_of(self.a)
        sa = budget_pb2_grpc.BudgetServiceStub(self.a.channel())
        sb = budget_pb2_grpc.BudgetServiceStub(self.b.channel())
        sid = "x-" + uuid.uuid4().hex[:6]
        set_budget(sa, md, scope(), 10 ** 9)
        set_budget(sa, md, scope(sid), 1000, backpressure_disabled=True)
        first = check(sb, md, scope(sid))
        self.assertEqual(used_on_path(first), [0, 0])
        second = check(sb, md, scope(sid))
        self.assertEqual(second.source, CACHE, "B answers from its cache once filled")

        # A records usage that crosses the warning ratio (an event, hence a NOTIFY).
        record(sa, md, scope(sid), 850)
        seen = wait_until(lambda: (lambda r: (used_on_path(r)[1] == 850, r))(
            check(sb, md, scope(sid))), 5, "B to see A's RecordUsage")
        self.assertEqual(seen.decision, B.DECISION_ALLOW_WITH_WARNING)
        # A lowers the limit (BUDGET_CHANGED): B follows without waiting for its TTL.
        set_budget(sa, md, scope(sid), 900, backpressure_disabled=True)
        wait_until(lambda: (lambda r: (r.levels[1].limit_tokens == 900, r))(
            check(sb, md, scope(sid))), 5, "B to see A's SetBudget")
        # B's own writes are in B's cache at once.
        record(sb, md, scope(sid), 10)
        mine = check(sb, md, scope(sid))
        self.assertEqual(used_on_path(mine)[1], 860)
        self.assertEqual(mine.source, CACHE)

    def test_a_counter_move_below_every_threshold_reaches_the_other_server(self):
        # No threshold is crossed (USAGE_CHANGED only): B keeps rows for 60 s, yet A's
        # cg_rows announcement after its COMMIT drops them; 10 s is slack for a loaded
        # machine, twice: B refills and must hear the next write as well.
        tenant, md = tenant_of(self.a)
        sa = budget_pb2_grpc.BudgetServiceStub(self.a.channel())
        sb = budget_pb2_grpc.BudgetServiceStub(self.b.channel())
        sid = "y-" + uuid.uuid4().hex[:6]
        set_budget(sa, md, scope(), 10 ** 9)
        set_budget(sa, md, scope(sid), 10 ** 6, backpressure_disabled=True)
        check(sb, md, scope(sid))
        self.assertEqual(check(sb, md, scope(sid)).source, CACHE)
        for total in (100, 150):
            record(sa, md, scope(sid), total - (100 if total == 150 else 0))
            seen = wait_until(lambda: (lambda r: (used_on_path(r) == [total, total], r))(
                check(sb, md, scope(sid))), 10, f"B to see A's RecordUsage ({total})")
            self.assertEqual(seen.decision, B.DECISION_ALLOW)
            # Refilled once, B answers from its cache again.
            wait_until(lambda: (lambda r: (r.source == CACHE and used_on_path(r)[1] == total,
                                           r))(check(sb, md, scope(sid))),
                       10, "B to answer from its cache again")

    def test_revocation_takes_effect_at_once(self):
        tenant, md = tenant_of(self.a)
        stub = budget_pb2_grpc.BudgetServiceStub(self.a.channel())
        set_budget(stub, md, scope(), 10 ** 6)
        for _ in range(3):
            check(stub, md, scope())  # the key is in A's key cache now
        keys = self.a.admin().ListApiKeys(cgtest.admin_pb2.ListApiKeysRequest(tenant_id=tenant),
                                          metadata=self.a.admin_md(), timeout=10).keys
        self.assertEqual(len(keys), 1)
        key_id = keys[0].key_id
        self.a.admin().RevokeApiKey(cgtest.admin_pb2.RevokeApiKeyRequest(
            tenant_id=tenant, key_id=key_id), metadata=self.a.admin_md(), timeout=10)
        self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, check, stub, md, scope(),
                            contains=("revoked",))


class NoExpiry(cgtest.TestCase):
    """Without Redis, BudgetSource CACHE is the process cache alone: a path stays in it as
    long as no write is announced (the old cache dropped it 1 s after its fill)."""

    @classmethod
    def setUpClass(cls):
        cls.s = cgtest.start_class_server(cls, env={"CTXGUARD_REDIS_URL": ""})

    def test_a_path_stays_cached_past_the_old_expiry(self):
        tenant, md = tenant_of(self.s)
        stub = budget_pb2_grpc.BudgetServiceStub(self.s.channel())
        sid = "z-" + uuid.uuid4().hex[:6]
        set_budget(stub, md, scope(), 10 ** 9)
        set_budget(stub, md, scope(sid), 1000, backpressure_disabled=True)
        check(stub, md, scope(sid))
        self.assertEqual(check(stub, md, scope(sid)).source, CACHE)
        # Past the old default cache_row_ttl_ms (1000 ms): no write, so no reason to drop.
        time.sleep(1.5)
        self.assertEqual(check(stub, md, scope(sid)).source, CACHE)
        # A write of this server is in its cache at once, and hearing it back on cg_rows
        # drops nothing (same row_version).
        record(stub, md, scope(sid), 10)
        for _ in range(20):
            r = check(stub, md, scope(sid))
            self.assertEqual((r.source, used_on_path(r)), (CACHE, [10, 10]))
            time.sleep(0.05)


def redis_cli(url, *args):
    r = subprocess.run(["redis-cli", "-u", url] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError(f"redis-cli {args}: {r.stderr}")
    return r.stdout


class OwnStores(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = cgtest.OwnServices()
        cls.addClassCleanup(cls.svc.close)

    def server(self, **env):
        base = {"CTXGUARD_REDIS_URL": self.svc.redis, "CTXGUARD_HEALTH_INTERVAL_MS": "100",
                "CTXGUARD_PG_CONNECT_TIMEOUT_MS": "500", "CTXGUARD_REDIS_TIMEOUT_MS": "50",
                "CTXGUARD_CACHE_ROW_TTL_MS": "200"}
        base.update(env)
        schema = "s_" + uuid.uuid4().hex[:10]
        cgtest.psql(f"CREATE SCHEMA {schema}", self.svc.pg)
        self.addCleanup(cgtest.psql, f"DROP SCHEMA IF EXISTS {schema} CASCADE", self.svc.pg)
        return cgtest.start_server(self, pg=self.svc.pg, schema=schema, env=base)

    def row_keys(self, tenant):
        return redis_cli(self.svc.redis, "--scan", "--pattern", f"cg:{{{tenant}}}:row2:*").split()

    def test_redis_flushed_or_killed_changes_no_answer_and_refills(self):
        srv = self.server()
        tenant, md = tenant_of(srv)
        stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
        sid = "r-" + uuid.uuid4().hex[:6]
        set_budget(stub, md, scope(), 10 ** 9)
        set_budget(stub, md, scope(sid), 10 ** 6, backpressure_disabled=True)
        check(stub, md, scope(sid))
        self.assertEqual(len(self.row_keys(tenant)), 2, "the path's rows are in Redis")

        redis_cli(self.svc.redis, "FLUSHALL")
        record(stub, md, scope(sid), 7)
        self.assertEqual(used_on_path(check(stub, md, scope(sid)))[1], 7)
        time.sleep(0.25)  # past the process cache's TTL: the next read goes to the stores
        self.assertEqual(used_on_path(check(stub, md, scope(sid)))[1], 7)
        wait_until(lambda: (len(self.row_keys(tenant)) == 2, self.row_keys(tenant)), 5,
                   "Redis to be refilled after FLUSHALL")

        self.svc.sh("redis-stop")
        try:
            for i in range(5):
                record(stub, md, scope(sid), 1)
                time.sleep(0.05)
                r = check(stub, md, scope(sid))
                self.assertEqual(used_on_path(r)[1], 8 + i, "Redis down changes no answer")
        finally:
            self.svc.sh("redis-start")
        time.sleep(0.25)
        wait_until(lambda: (lambda r: (r.source == CACHE and used_on_path(r)[1] == 12, r))(
            check(stub, md, scope(sid))), 10, "answers from the cache again")
        def refilled():
            time.sleep(0.2)  # past the process cache's TTL: reads reach Redis again
            check(stub, md, scope(sid))
            keys = self.row_keys(tenant)
            return len(keys) == 2, keys
        wait_until(refilled, 15, "Redis to be refilled after its restart")

    def wait_health(self, srv, status):
        ch = srv.channel()
        wait_until(lambda: (lambda s: (s == status, s))(
            cgtest.health_check(ch).status), 30, f"health {status}")

    def test_postgresql_down_follows_on_store_failure_then_recovers(self):
        srv = self.server()
        tenant, md = tenant_of(srv)
        stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
        open_, closed, allowance = "open", "closed", "allow"
        set_budget(stub, md, scope(), 10 ** 9, on_store_failure=B.ON_STORE_FAILURE_FAIL_OPEN)
        set_budget(stub, md, scope(open_), 10 ** 6, backpressure_disabled=True,
                   on_store_failure=B.ON_STORE_FAILURE_FAIL_OPEN)
        set_budget(stub, md, scope(closed), 10 ** 6)  # FAIL_CLOSED by default
        set_budget(stub, md, scope(allowance), 10 ** 6, backpressure_disabled=True,
                   on_store_failure=B.ON_STORE_FAILURE_LOCAL_ALLOWANCE,
                   local_allowance_tokens=300)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, set_budget, stub, md,
                            scope("bad"), 10, on_store_failure=B.ON_STORE_FAILURE_LOCAL_ALLOWANCE,
                            contains=("local_allowance_tokens",))
        for sc in (open_, closed, allowance):
            check(stub, md, scope(sc))  # known to this process's cache

        self.svc.sh("pg-stop")
        try:
            self.wait_health(srv, cgtest.health.NOT_SERVING)
            r = check(stub, md, scope(open_))
            self.assertEqual(r.decision, B.DECISION_ALLOW_WITH_WARNING)
            self.assertEqual(r.source, POLICY)
            self.assertEqual([x.code for x in r.reasons], [B.REASON_CODE_STORE_UNAVAILABLE])
            self.assertIn("unreachable", r.reasons[0].message)
            self.assertRpcError(grpc.StatusCode.UNAVAILABLE, check, stub, md, scope(closed))
            self.assertRpcError(grpc.StatusCode.UNAVAILABLE, check, stub, md, scope("unknown"))
            decisions = [check(stub, md, scope(allowance)).decision for _ in range(4)]
            self.assertEqual(decisions, [B.DECISION_ALLOW] * 3 + [B.DECISION_DENY],
                             "300 tokens of local allowance: three checks of 100")
            denied = check(stub, md, scope(allowance), tokens=0)
            self.assertEqual(denied.reasons[0].code, B.REASON_CODE_LOCAL_ALLOWANCE)
            self.assertRpcError(grpc.StatusCode.UNAVAILABLE, stub.Reserve,
                                B.ReserveRequest(scope=scope(open_), tokens=1), metadata=md,
                                timeout=10)
        finally:
            self.svc.sh("pg-start")
        self.wait_health(srv, cgtest.health.SERVING)
        r = wait_until(lambda: (lambda r: (r.source in (CACHE, DATABASE), r))(
            check(stub, md, scope(closed))), 30, "CheckBudget from the stores again")
        self.assertEqual(r.decision, B.DECISION_ALLOW)
        # A new outage starts a new allowance.
        r = check(stub, md, scope(allowance))
        self.assertIn(r.source, (CACHE, DATABASE))


if __name__ == "__main__":
    import unittest
    unittest.main()
