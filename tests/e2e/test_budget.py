"""BudgetService end to end: SetBudget / GetBudget / CheckBudget / Reserve / Commit / Release /
RecordUsage as an orchestrator uses them, against real PostgreSQL, on one and on several
server replicas."""

import threading
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
HARD, SOFT, APPROVAL = B.BUDGET_MODE_HARD, B.BUDGET_MODE_SOFT, B.BUDGET_MODE_APPROVAL


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def usage(inp, out=0, cost=0):
    return common_pb2.TokenUsage(input_tokens=inp, output_tokens=out, cost_micros=cost)


class Tenant:
    """A tenant with its own key and stub on a server."""

    def __init__(self, srv, channel=None):
        t = srv.create_tenant()
        self.id = t.tenant_id
        self.key = srv.create_key(t.tenant_id).secret
        self.md = cgtest.bearer(self.key)
        self.stub = budget_pb2_grpc.BudgetServiceStub(channel or srv.channel())

    def set(self, sc, limit, mode=HARD, **kw):
        return self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, mode=mode, **kw)),
            metadata=self.md, timeout=10)

    def check(self, sc, tokens, **kw):
        return self.stub.CheckBudget(B.CheckBudgetRequest(scope=sc, estimated_tokens=tokens, **kw),
                                     metadata=self.md, timeout=10)

    def reserve(self, sc, tokens, **kw):
        return self.stub.Reserve(B.ReserveRequest(scope=sc, tokens=tokens, **kw), metadata=self.md,
                                 timeout=10)

    def commit(self, rid, u, **kw):
        return self.stub.Commit(B.CommitRequest(reservation_id=rid, usage=u, **kw),
                                metadata=self.md, timeout=10)

    def release(self, rid):
        return self.stub.Release(B.ReleaseRequest(reservation_id=rid), metadata=self.md, timeout=10)

    def record(self, sc, u, key, **kw):
        return self.stub.RecordUsage(B.RecordUsageRequest(scope=sc, usage=u, idempotency_key=key,
                                                          **kw), metadata=self.md, timeout=10)

    def get(self, sc):
        return self.stub.GetBudget(B.GetBudgetRequest(scope=sc), metadata=self.md, timeout=10)


class Budgets(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def setUp(self):
        self.t = Tenant(self.srv)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.t.set(scope(), 100000)
        self.t.set(scope(self.s), 10000)
        self.task = scope(self.s, "t1")
        self.t.set(self.task, 1000)

    def test_set_creates_then_updates_with_versions(self):
        r = self.t.set(scope(self.s, "t2"), 500)
        self.assertTrue(r.created)
        self.assertEqual(r.budget.version, 1)
        self.assertEqual(r.budget.level, common_pb2.SCOPE_LEVEL_TASK)
        self.assertEqual(r.budget.settings.mode, HARD)
        self.assertAlmostEqual(r.budget.settings.warning_ratio, 0.8)
        self.assertEqual([(t.threshold_ratio, t.delay_ms) for t in r.budget.settings.backpressure_tiers],
                         [(0.8, 50), (0.85, 300), (0.9, 750), (0.95, 1500)])
        r2 = self.t.set(scope(self.s, "t2"), 600)
        self.assertFalse(r2.created)
        self.assertEqual(r2.budget.version, 2)
        self.assertEqual(self.t.get(scope(self.s, "t2")).budget.settings.limit_tokens, 600)
        stale = B.SetBudgetRequest(scope=scope(self.s, "t2"), expected_version=1,
                                   settings=B.BudgetSettings(limit_tokens=700))
        self.assertRpcError(grpc.StatusCode.ABORTED, self.t.stub.SetBudget, stale,
                            metadata=self.t.md, timeout=10, contains="expected_version")

    def test_presets_supply_a_missing_limit(self):
        agent = scope(self.s, "t1", "a1")
        # No limit and no preset: the server's default preset (general) gives agents 25,000,
        # more than this task's 1,000 allows.
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.t.set, agent, 0,
                            contains=("limit",))
        self.t.set(scope(), 10**9)
        self.t.set(scope(self.s), 1000000)
        self.t.set(self.task, 100000)
        self.assertEqual(self.t.set(agent, 0).budget.settings.limit_tokens, 25000)
        r = self.t.set(scope(self.s, "t1", "a2"), 0, preset=common_pb2.USE_CASE_PRESET_DEBUGGING)
        self.assertEqual(r.budget.settings.limit_tokens, 75000)
        self.assertEqual(self.t.set(agent, 123, preset=common_pb2.USE_CASE_PRESET_DEBUGGING)
                         .budget.settings.limit_tokens, 123, "a given limit wins")
        r = self.t.set(scope(self.s, "t9"), 0, preset=common_pb2.USE_CASE_PRESET_LONG_RUNNING)
        self.assertEqual(r.budget.settings.limit_tokens, 300000)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.t.set, scope(self.s, "t8"), 0,
                            contains=("settings.limit_tokens", "general", "task"))
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.t.set, scope(self.s, "t8"), 0,
                            preset=9, contains=("settings.preset",))

    def test_child_limit_may_not_exceed_parent(self):
        err = self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.t.set,
                                  scope(self.s, "big"), 20000)
        self.assertIn("session", err.details())
        self.assertIn("task", err.details())

    def test_parent_limit_may_not_drop_below_a_child(self):
        # setUp: session 10,000 > task t1 1,000. The session may not go under 1,000...
        err = self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.t.set, scope(self.s),
                                  999, contains="limit_tokens")
        self.assertIn("below", err.details())
        self.assertEqual(self.t.get(scope(self.s)).budget.settings.limit_tokens, 10000,
                         "nothing changed")
        # ...nor under a grandchild's (an agent below a task without budget).
        self.t.set(scope(self.s, "t9"), 5000)
        self.t.set(scope(self.s, "t9", "a"), 4000)
        self.t.set(scope(self.s, "t9"), 4000)  # equal is fine
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.t.set, scope(self.s, "t9"),
                            3999, contains="below")
        self.t.set(scope(self.s), 5000)  # still above every scope under it

    def test_unknown_parent_is_not_found_naming_the_field(self):
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.set, scope("nope", "t"), 10,
                            contains="session_id")
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.set, scope(self.s, "nope", "a"), 10,
                            contains="task_id")
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.check, scope("nope"), 1)

    def test_check_reports_every_level_and_the_tightest(self):
        r = self.t.check(self.task, 100)
        self.assertEqual(r.decision, B.DECISION_ALLOW)
        self.assertEqual([l.level for l in r.levels], [1, 2, 3])
        self.assertEqual(r.tightest_level, common_pb2.SCOPE_LEVEL_TASK)
        self.assertAlmostEqual(r.tightest_ratio, 0.1)
        self.assertEqual(r.available_tokens, 1000)
        self.assertEqual(r.backpressure_delay_ms, 0)
        # The first answer reads Redis or PostgreSQL (SetBudget wrote the rows it changed
        # to Redis); the next one comes from the server's cache (test_cache.py has more).
        self.assertIn(r.source, (B.BUDGET_SOURCE_CACHE, B.BUDGET_SOURCE_DATABASE))
        self.assertEqual(self.t.check(self.task, 100).source, B.BUDGET_SOURCE_CACHE)

    def test_reserve_commit_release_cycle(self):
        res = self.t.reserve(self.task, 300)
        self.assertEqual(res.decision, B.DECISION_ALLOW)
        rid = res.reservation.reservation_id
        self.assertEqual(res.reservation.state, B.RESERVATION_STATE_ACTIVE)
        self.assertEqual([l.reserved_tokens for l in res.levels], [300, 300, 300])

        # 300 reserved + 500 asked = 0.8 of the task: a warning, and the 0.80 tier's delay.
        chk = self.t.check(self.task, 500, delay_mode=B.DELAY_MODE_RETURN_ONLY)
        self.assertEqual(chk.decision, B.DECISION_ALLOW_WITH_WARNING)
        self.assertEqual(chk.backpressure_delay_ms, 50)
        self.assertEqual(chk.delay_held_ms, 0)
        self.assertIn(B.REASON_CODE_WARNING_THRESHOLD, [x.code for x in chk.reasons])

        err = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.t.reserve, self.task,
                                  701)
        self.assertIn("task", err.details())

        done = self.t.commit(rid, usage(200, 50))
        self.assertEqual(done.reservation.state, B.RESERVATION_STATE_COMMITTED)
        self.assertEqual(done.released_tokens, 50)
        self.assertEqual([l.used_tokens for l in done.levels], [250, 250, 250])
        self.assertEqual([l.reserved_tokens for l in done.levels], [0, 0, 0])
        again = self.t.commit(rid, usage(200, 50))
        self.assertTrue(again.replayed)
        self.assertEqual([l.used_tokens for l in again.levels], [250, 250, 250], "counted once")
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.t.commit, rid, usage(999))
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.t.release, rid)

        other = self.t.reserve(self.task, 100).reservation.reservation_id
        rel = self.t.release(other)
        self.assertEqual(rel.released_tokens, 100)
        self.assertEqual(rel.reservation.state, B.RESERVATION_STATE_RELEASED)
        self.assertTrue(self.t.release(other).replayed)
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.t.commit, other, usage(10))
        late = self.t.commit(other, usage(10), record_if_expired=True)
        self.assertTrue(late.reservation_expired)
        self.assertEqual(self.t.get(self.task).usage.used_tokens, 260)

    def test_backpressure_holds_the_reply_unless_return_only(self):
        self.t.record(self.task, usage(850), "fill-" + self.s)
        t0 = time.monotonic()
        held = self.t.check(self.task, 60)  # 910 / 1000: the 0.90 tier, 750 ms
        took = time.monotonic() - t0
        self.assertEqual(held.backpressure_delay_ms, 750)
        self.assertEqual(held.delay_held_ms, 750)
        self.assertGreaterEqual(took, 0.75)
        t0 = time.monotonic()
        quick = self.t.check(self.task, 60, delay_mode=B.DELAY_MODE_RETURN_ONLY)
        self.assertEqual(quick.backpressure_delay_ms, 750)
        self.assertLess(time.monotonic() - t0, 0.5)

    def test_record_usage_is_idempotent(self):
        key = "call-" + uuid.uuid4().hex
        first = self.t.record(self.task, usage(40, 2), key)
        self.assertFalse(first.replayed)
        again = self.t.record(self.task, usage(40, 2), key)
        self.assertTrue(again.replayed)
        self.assertEqual(again.ledger_entry_id, first.ledger_entry_id)
        self.assertEqual(self.t.get(self.task).usage.used_tokens, 42, "counted once")
        self.assertRpcError(grpc.StatusCode.ALREADY_EXISTS, self.t.record, self.task, usage(41),
                            key, contains="idempotency_key")

    def test_idempotent_reserve_holds_once(self):
        a = self.t.reserve(self.task, 100, idempotency_key="r-" + self.s)
        b = self.t.reserve(self.task, 100, idempotency_key="r-" + self.s)
        self.assertTrue(b.replayed)
        self.assertEqual(a.reservation.reservation_id, b.reservation.reservation_id)
        self.assertEqual(self.t.get(self.task).usage.reserved_tokens, 100)

    def test_soft_budget_warns_instead_of_refusing(self):
        soft = scope(self.s, "soft")
        self.t.set(soft, 100, mode=SOFT)
        r = self.t.reserve(soft, 150)
        self.assertEqual(r.decision, B.DECISION_ALLOW_WITH_WARNING)
        self.assertIn(B.REASON_CODE_TOKEN_LIMIT, [x.code for x in r.reasons])

    def test_tenants_cannot_see_each_other(self):
        other = Tenant(self.srv)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, other.get, scope(self.s))
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, other.reserve, self.task, 1)
        rid = self.t.reserve(self.task, 5).reservation.reservation_id
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, other.commit, rid, usage(5))
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, other.release, rid)

    def test_bad_input_names_the_field_and_changes_nothing(self):
        before = self.t.get(self.task).usage
        cases = [
            (self.t.reserve, (self.task, -5), "tokens"),
            (self.t.reserve, (self.task, 0), "tokens"),
            (self.t.reserve, (self.task, 10 ** 12), "tokens"),
            (self.t.check, (self.task, -1), "estimated_tokens"),
            (self.t.check, (scope("", "t1"), 1), "session_id"),
            (self.t.reserve, (scope("has space"), 1), "session_id"),
            (self.t.commit, ("", usage(1)), "reservation_id"),
            (self.t.commit, (str(uuid.uuid4()), usage(-1)), "usage.input_tokens"),
            (self.t.record, (self.task, usage(0), "k0"), "usage"),
            (self.t.record, (self.task, usage(5), ""), "idempotency_key"),
            (self.t.set, (self.task, 0), "limit_tokens"),
            (self.t.set, (self.task, 10, 7), "mode"),
        ]
        for fn, args, field in cases:
            with self.subTest(fn=fn.__name__, field=field):
                self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, fn, *args, contains=field)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.commit, str(uuid.uuid4()), usage(1))
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.t.set, scope(), 10,
                            allocate_from_parent=True, contains="allocate_from_parent")
        after = self.t.get(self.task)
        self.assertEqual(after.usage.used_tokens, before.used_tokens)
        self.assertEqual(after.usage.reserved_tokens, before.reserved_tokens)
        self.assertEqual(after.budget.version, 1)


class Replicas(cgtest.TestCase):
    """Three server processes on one database, 64 concurrent clients reserving against one
    HARD task budget: no interleaving overspends it, and every acknowledged Commit counts."""

    def test_three_replicas_never_overspend_a_hard_limit(self):
        first = cgtest.start_server(self)
        others = [cgtest.start_server(self, schema=first.schema) for _ in range(2)]
        t = Tenant(first)
        sid = "rep-" + uuid.uuid4().hex[:6]
        t.set(scope(), 10 ** 9)
        t.set(scope(sid), 10 ** 6)
        task = scope(sid, "hard")
        limit, each = 2000, 7
        t.set(task, limit, backpressure_disabled=True)

        servers = [first] + others
        committed, denied, errors = [], [], []
        lock = threading.Lock()

        def client(i):
            ch = servers[i % 3].channel()
            stub = budget_pb2_grpc.BudgetServiceStub(ch)
            for _ in range(12):
                try:
                    r = stub.Reserve(B.ReserveRequest(scope=task, tokens=each), metadata=t.md,
                                     timeout=30)
                except grpc.RpcError as e:
                    with lock:
                        (denied if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else errors).append(
                            e.code())
                    continue
                c = stub.Commit(B.CommitRequest(reservation_id=r.reservation.reservation_id,
                                                usage=usage(each)), metadata=t.md, timeout=30)
                with lock:
                    committed.append(c.recorded_usage.input_tokens)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
        self.assertEqual(errors, [], "only RESOURCE_EXHAUSTED may refuse")
        used = t.get(task).usage
        self.assertEqual(used.used_tokens, sum(committed), "every acknowledged Commit counts")
        self.assertLessEqual(used.used_tokens, limit)
        self.assertEqual(used.reserved_tokens, 0)
        self.assertEqual(len(committed), limit // each, "the budget is used up to the last hold")
        self.assertGreater(len(denied), 0)


if __name__ == "__main__":
    import unittest
    unittest.main()
