"""Spend history end to end (BudgetService.GetUsageHistory, `ctxguardctl usage --history`)
against a real server and PostgreSQL: random traffic from several threads (batched and
single writes, Commit and RecordUsage at every level, releases that spend nothing) and then
every scope's history, at each resolution, equals what its ledger entries sum to; steps are
dense and aligned; bad requests are named by field; bound keys stay in their subtree; the
sweeper deletes buckets past their resolution's retention and no others."""

import datetime
import json
import os
import random
import subprocess
import threading
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
         "cost_micros")


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def ledger_sums(srv, tenant, ids, where=""):
    """What the ledger holds for the scope ids (and below it): the five kinds and entries."""
    cond = [f"tenant_id = '{tenant}'"]
    for col, v in zip(("session_id", "task_id", "agent_id"), ids):
        if v:
            cond.append(f"{col} = '{v}'")
    row = cgtest.psql(
        "SELECT coalesce(sum(input_tokens),0), coalesce(sum(output_tokens),0),"
        " coalesce(sum(cache_read_tokens),0), coalesce(sum(cache_write_tokens),0),"
        " coalesce(sum(cost_micros),0), count(*) FROM ledger WHERE "
        + " AND ".join(cond) + where, srv.dsn).strip()
    return tuple(int(x) for x in row.split("|"))


def point_sums(resp):
    t = resp.total
    return (t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_write_tokens,
            t.cost_micros, resp.total_entries)


class History(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_SWEEP_INTERVAL_MS": "200",
                                                      "CTXGUARD_RETENTION_INTERVAL_MS": "200",
                                                      "CTXGUARD_ROLLUP_MINUTE_DAYS": "1",
                                                      "CTXGUARD_ROLLUP_HOUR_DAYS": "3"})

    def setUp(self):
        t = self.srv.create_tenant()
        self.tenant = t.tenant_id
        self.key = self.srv.create_key(t.tenant_id).secret
        self.md = cgtest.bearer(self.key)
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]

    def history(self, sc=None, md=None, **kw):
        return self.stub.GetUsageHistory(B.GetUsageHistoryRequest(scope=sc, **kw),
                                         metadata=md or self.md, timeout=10)

    def set(self, sc, limit):
        self.stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
            limit_tokens=limit)), metadata=self.md, timeout=10)

    def random_usage(self, rng):
        return common_pb2.TokenUsage(input_tokens=rng.randint(0, 5000),
                                     output_tokens=rng.randint(0, 2000),
                                     cache_read_tokens=rng.randint(0, 3000),
                                     cache_write_tokens=rng.randint(0, 500),
                                     cost_micros=rng.randint(1, 90000))

    def traffic(self, seed, paths, calls):
        """One thread's calls: Reserve+Commit, Reserve+Release or RecordUsage on a random
        path of `paths` (a session, task or agent)."""
        rng = random.Random(seed)
        stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        for _ in range(calls):
            sc = scope(*rng.choice(paths))
            kind = rng.random()
            if kind < 0.5:
                rid = stub.Reserve(B.ReserveRequest(scope=sc, tokens=rng.randint(1, 9000)),
                                   metadata=self.md, timeout=10).reservation.reservation_id
                stub.Commit(B.CommitRequest(reservation_id=rid, usage=self.random_usage(rng)),
                            metadata=self.md, timeout=10)
            elif kind < 0.65:
                rid = stub.Reserve(B.ReserveRequest(scope=sc, tokens=rng.randint(1, 9000)),
                                   metadata=self.md, timeout=10).reservation.reservation_id
                stub.Release(B.ReleaseRequest(reservation_id=rid), metadata=self.md,
                             timeout=10)
            else:
                stub.RecordUsage(B.RecordUsageRequest(
                    scope=sc, usage=self.random_usage(rng),
                    idempotency_key="k-" + uuid.uuid4().hex), metadata=self.md, timeout=10)

    def test_random_traffic_sums_equal_the_ledger_at_every_scope_and_resolution(self):
        self.set(scope(), 10**12)
        sessions = [self.s, self.s + "b"]
        paths = []
        for s in sessions:
            self.set(scope(s), 10**11)
            paths.append((s,))
            for t in ("t1", "t2"):
                self.set(scope(s, t), 10**10)
                paths.append((s, t))
                for a in ("a1", "a2"):
                    self.set(scope(s, t, a), 10**9)
                    paths.append((s, t, a))
        threads = [threading.Thread(target=self.traffic, args=(seed, paths, 40))
                   for seed in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        self.assertFalse(any(th.is_alive() for th in threads))

        now = int(time.time() * 1000)
        checked = 0
        for ids in [("",)] + paths:
            sc = scope(*ids)
            want = ledger_sums(self.srv, self.tenant, ids)
            self.assertGreater(want[5], 0, ids)
            for step in (60, 3600, 86400):
                with self.subTest(scope=ids, step=step):
                    r = self.history(sc, from_unix_ms=now - 2 * 86400 * 1000,
                                     to_unix_ms=now + 60000, step_seconds=step)
                    self.assertEqual(point_sums(r), want)
                    self.assertEqual(sum(p.entries for p in r.points), want[5])
                    for k in KINDS:
                        self.assertEqual(sum(getattr(p.usage, k) for p in r.points),
                                         getattr(r.total, k))
                    self.assertEqual(r.resolution, {60: 1, 3600: 2, 86400: 3}[step])
                    checked += 1
        self.assertEqual(checked, 3 * (1 + len(paths)))

        # Minute by minute, each step holds exactly the entries created in it.
        r = self.history(scope(self.s), from_unix_ms=now - 3600 * 1000, to_unix_ms=now + 60000,
                         step_seconds=60)
        rows = cgtest.psql(
            "SELECT (floor(extract(epoch FROM date_trunc('minute', created_at)) * 1000))::int8,"
            " sum(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens),"
            " count(*) FROM ledger WHERE tenant_id = '%s' AND session_id = '%s'"
            " GROUP BY 1 ORDER BY 1" % (self.tenant, self.s), self.srv.dsn).split()
        want_steps = {int(a): (int(b), int(c)) for a, b, c in (x.split("|") for x in rows)}
        got_steps = {p.start_unix_ms: (p.usage.input_tokens + p.usage.output_tokens
                                       + p.usage.cache_read_tokens
                                       + p.usage.cache_write_tokens, p.entries)
                     for p in r.points if p.entries}
        self.assertEqual(got_steps, want_steps)

    def test_steps_are_dense_aligned_and_chosen(self):
        self.set(scope(self.s), 10**6)
        rid = self.stub.Reserve(B.ReserveRequest(scope=scope(self.s), tokens=10),
                                metadata=self.md, timeout=10).reservation.reservation_id
        self.stub.Commit(B.CommitRequest(reservation_id=rid, usage=common_pb2.TokenUsage(
            input_tokens=7, output_tokens=3)), metadata=self.md, timeout=10)
        r = self.history(scope(self.s))  # the last hour by minute
        self.assertEqual(r.step_seconds, 60)
        self.assertEqual(r.resolution, B.USAGE_RESOLUTION_MINUTE)
        self.assertEqual(len(r.points), (r.to_unix_ms - r.from_unix_ms) // 60000)
        self.assertIn(len(r.points), (60, 61))
        self.assertEqual(r.from_unix_ms % 60000, 0)
        starts = [p.start_unix_ms for p in r.points]
        self.assertEqual(starts, list(range(r.from_unix_ms, r.to_unix_ms, 60000)))
        self.assertEqual(sum(p.entries for p in r.points), 1)
        self.assertEqual((r.total.input_tokens, r.total.output_tokens), (7, 3))

        # A week with no step: the first step that covers it in <= 400 steps (an hour: 15
        # minutes would take 672), summed from the hourly buckets.
        now = int(time.time() * 1000)
        r = self.history(scope(self.s), from_unix_ms=now - 7 * 86400 * 1000, to_unix_ms=now)
        self.assertEqual((r.step_seconds, r.resolution), (3600, B.USAGE_RESOLUTION_HOUR))
        self.assertEqual(r.total_entries, 1)
        self.assertLess(abs(r.retained_from_unix_ms - (now - 3 * 86400 * 1000)), 60000)
        r = self.history(scope(self.s), from_unix_ms=now - 90 * 86400 * 1000, to_unix_ms=now)
        self.assertEqual((r.step_seconds, r.resolution), (21600, B.USAGE_RESOLUTION_HOUR))
        r = self.history(scope(self.s), from_unix_ms=now - 300 * 86400 * 1000, to_unix_ms=now)
        self.assertEqual((r.step_seconds, r.resolution), (86400, B.USAGE_RESOLUTION_DAY))
        self.assertEqual(r.retained_from_unix_ms, 0)  # days: kept forever by default
        self.assertEqual(r.total_entries, 1)
        # A scope without usage reads as zeros, every step present.
        self.set(scope(self.s, "idle"), 10)
        r = self.history(scope(self.s, "idle"), step_seconds=300)
        self.assertTrue(r.points)
        self.assertEqual(r.total_entries, 0)
        self.assertTrue(all(p.entries == 0 and p.usage.input_tokens == 0 for p in r.points))

    def test_bad_requests_are_named(self):
        self.set(scope(self.s), 10**6)
        now = int(time.time() * 1000)
        cases = [
            (dict(step_seconds=61), INVALID, "step_seconds"),
            (dict(step_seconds=367 * 86400), INVALID, "step_seconds"),
            (dict(from_unix_ms=now - 30 * 86400 * 1000, to_unix_ms=now, step_seconds=60),
             INVALID, "step_seconds"),
            (dict(from_unix_ms=now, to_unix_ms=now - 1000), INVALID, "from_unix_ms"),
            (dict(from_unix_ms=-5), INVALID, "from_unix_ms"),
            (dict(to_unix_ms=-5), INVALID, "to_unix_ms"),
        ]
        for kw, code, field in cases:
            with self.subTest(kw=kw):
                self.assertRpcError(code, self.history, scope(self.s), contains=(field,), **kw)
        self.assertRpcError(NOT_FOUND, self.history, scope(self.s, "nope"),
                            contains=("scope.task_id",))
        self.assertRpcError(NOT_FOUND, self.history, scope("nope"),
                            contains=("scope.session_id",))
        self.assertRpcError(INVALID, self.history, scope("", "t"), contains=("scope.session_id",))

    def test_keys_see_their_own_subtree_and_tenant(self):
        self.set(scope(self.s), 10**6)
        self.set(scope(self.s, "t"), 10**6)
        bound = cgtest.bearer(self.srv.create_key(self.tenant, role="agent",
                                                  scope=(self.s, "t")).secret)
        viewer = cgtest.bearer(self.srv.create_key(self.tenant, role="viewer").secret)
        self.stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(self.s, "t"), usage=common_pb2.TokenUsage(input_tokens=5),
            idempotency_key="once"), metadata=self.md, timeout=10)
        self.assertEqual(self.history(scope(self.s, "t"), md=bound).total.input_tokens, 5)
        self.assertEqual(self.history(scope(), md=viewer).total.input_tokens, 5)
        self.assertRpcError(NOT_FOUND, self.history, scope(self.s), md=bound)
        self.assertRpcError(NOT_FOUND, self.history, scope(), md=bound)
        # Another tenant's key sees nothing of this tenant's session.
        other = self.srv.create_tenant()
        other_md = cgtest.bearer(self.srv.create_key(other.tenant_id).secret)
        self.assertRpcError(NOT_FOUND, self.history, scope(self.s), md=other_md)
        self.assertEqual(self.history(scope(), md=other_md).total_entries, 0)

    def test_sweeper_deletes_buckets_past_their_retention_only(self):
        self.set(scope(self.s), 10**6)
        day = 86400 * 1000
        now = int(time.time() * 1000)
        old = now - 2 * day  # past minutes' 1 day, within hours' 3 days
        older = now - 5 * day  # past both; days are kept forever
        for res, at in ((1, old), (2, old), (3, old), (1, older), (2, older), (3, older)):
            cgtest.psql(
                "INSERT INTO usage_rollups (tenant_id, session_id, task_id, agent_id,"
                " resolution, bucket_start, input_tokens, entries) VALUES ('%s', '%s', '', '',"
                " %d, date_trunc('minute', to_timestamp(%d / 1000.0)), 11, 1)"
                % (self.tenant, self.s, res, at), self.srv.dsn)

        def left():
            return cgtest.psql(
                "SELECT resolution, (extract(epoch FROM bucket_start) * 1000)::int8 < %d"
                " FROM usage_rollups WHERE tenant_id = '%s' ORDER BY 1, 2"
                % (now - 3 * day, self.tenant), self.srv.dsn).split()

        cgtest.wait_until(lambda: left() == ["2|f", "3|f", "3|t"], 20,
                          "the sweeper deletes minute buckets older than 1 day and hour "
                          f"buckets older than 3 days (left: {left()})")
        r = self.history(scope(self.s), from_unix_ms=now - 10 * day, to_unix_ms=now,
                         step_seconds=86400)
        self.assertEqual(r.total.input_tokens, 22)

    def test_ctl_usage_history_draws_the_steps(self):
        self.set(scope(self.s), 10**6)
        for n in (1000, 3000):
            self.stub.RecordUsage(B.RecordUsageRequest(
                scope=scope(self.s), usage=common_pb2.TokenUsage(input_tokens=n,
                                                                 cost_micros=2500),
                idempotency_key=f"c{n}"), metadata=self.md, timeout=10)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_KEY"] = self.key
        ctl = cgtest.require_env("CG_CTL_BIN")

        def run(*args, expect=0):
            p = subprocess.run([ctl] + list(args), env=env, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, expect, p.stdout + p.stderr)
            return p

        out = run("usage", self.s, "--history", "--since", "30m", "--step", "5m").stdout
        lines = out.splitlines()
        steps = [x for x in lines if "|" in x]
        self.assertIn(len(steps), (6, 7))
        full = [x for x in steps if " 4000 tokens" in x]
        self.assertEqual(len(full), 1, out)
        self.assertIn("#" * 40, full[0])
        self.assertIn("2 calls", full[0])
        self.assertIn("$0.005000", full[0])
        today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        self.assertTrue(full[0].startswith(today), full[0])
        self.assertIn("total: 4000 tokens (input 4000", out)
        got = json.loads(run("--json", "usage", self.s, "--history", "--since", "2h").stdout)
        self.assertEqual(int(got["totalEntries"] if "totalEntries" in got
                             else got["total_entries"]), 2)
        self.assertIn("--step", run("usage", self.s, "--history", "--step", "90s",
                                    expect=2).stderr)
        self.assertIn("--history", run("usage", self.s, "--since", "1h", expect=2).stderr)
