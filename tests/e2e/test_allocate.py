"""allocate_from_parent end to end (BudgetService, migration 0013), against real PostgreSQL:
a child's share is carved out of its parent so that siblings cannot spend it, the child's
own spending is not counted twice at the parent, a refused share names the parent, closing
or letting a hold expire gives tokens back, and the batched write path (write_batching,
the default) answers as the one-request path does, also under concurrency."""

import random
import threading
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
HARD = B.BUDGET_MODE_HARD
DEADLINE_S = 15


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def usage(inp):
    return common_pb2.TokenUsage(input_tokens=inp)


class Tenant:
    def __init__(self, srv):
        t = srv.create_tenant()
        self.key = srv.create_key(t.tenant_id).secret
        self.md = cgtest.bearer(self.key)
        self.stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())

    def set(self, sc, limit, alloc=False, **kw):
        return self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, mode=HARD,
                                                allocate_from_parent=alloc, **kw)),
            metadata=self.md, timeout=10)

    def get(self, sc):
        return self.stub.GetBudget(B.GetBudgetRequest(scope=sc), metadata=self.md, timeout=10)

    def reserve(self, sc, tokens, **kw):
        return self.stub.Reserve(B.ReserveRequest(scope=sc, tokens=tokens, **kw),
                                 metadata=self.md, timeout=10)

    def commit(self, rid, n):
        return self.stub.Commit(B.CommitRequest(reservation_id=rid, usage=usage(n)),
                                metadata=self.md, timeout=10)

    def release(self, rid):
        return self.stub.Release(B.ReleaseRequest(reservation_id=rid), metadata=self.md,
                                 timeout=10)

    def record(self, sc, n):
        return self.stub.RecordUsage(B.RecordUsageRequest(
            scope=sc, usage=usage(n), idempotency_key=uuid.uuid4().hex),
            metadata=self.md, timeout=10)

    def close(self, sc):
        return self.stub.CloseScope(B.CloseScopeRequest(scope=sc), metadata=self.md, timeout=10)

    def counters(self, sc):
        """(used, reserved, allocated) of a scope."""
        u = self.get(sc).usage
        return (u.used_tokens, u.reserved_tokens, u.allocated_tokens)


class Allocation(cgtest.TestCase):
    BATCHING = True

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_SWEEP_INTERVAL_MS": "200",
            "CTXGUARD_WRITE_BATCHING": "true" if cls.BATCHING else "false"})

    def setUp(self):
        self.t = Tenant(self.srv)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.session = scope(self.s)
        self.t.set(scope(), 100000)
        self.t.set(self.session, 1000)

    def task(self, name):
        return scope(self.s, name)

    def test_shares_are_carved_out_and_siblings_are_denied(self):
        r = self.t.set(self.task("a"), 400, alloc=True)
        self.assertTrue(r.budget.settings.allocate_from_parent)
        self.t.set(self.task("b"), 300, alloc=True)
        self.t.set(self.task("c"), 1000)  # not allocated: spends from the session's free part
        self.assertEqual(self.t.counters(self.session), (0, 0, 700))
        g = self.t.get(self.session).usage
        self.assertEqual(g.remaining_tokens, 300)
        self.assertAlmostEqual(g.usage_ratio, 0.7)
        # A share larger than what is free is refused, naming the parent; nothing changes.
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.t.set, self.task("d"), 301,
                            alloc=True, contains=("session", "scope.session_id", self.s, "300 free",
                                                  "needs 301"))
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.get, self.task("d"))
        self.assertEqual(self.t.counters(self.session), (0, 0, 700))
        # The unallocated sibling gets only the free part.
        self.t.reserve(self.task("c"), 300)
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.t.reserve, self.task("c"), 1,
                            contains="session")
        chk = self.t.stub.CheckBudget(B.CheckBudgetRequest(scope=self.task("c"),
                                                           estimated_tokens=1),
                                      metadata=self.t.md, timeout=10)
        self.assertEqual(chk.decision, B.DECISION_DENY)
        self.assertEqual(chk.levels[1].allocated_tokens, 700)
        # The allocated children still have their whole shares.
        self.t.reserve(self.task("a"), 400)
        self.t.reserve(self.task("b"), 300)
        self.assertEqual(self.t.counters(self.session), (0, 1000, 0))
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.t.reserve, self.task("a"), 1,
                            contains="task")

    def test_child_spending_is_not_counted_twice(self):
        a = self.task("a")
        self.t.set(a, 400, alloc=True)
        rid = self.t.reserve(a, 100).reservation.reservation_id
        self.assertEqual(self.t.counters(self.session), (0, 100, 300))
        self.t.commit(rid, 150)  # more than reserved: the overrun counts too
        self.assertEqual(self.t.counters(self.session), (150, 0, 250))
        self.assertEqual(self.t.counters(a), (150, 0, 0))
        g = self.t.get(self.session).usage
        self.assertEqual(g.remaining_tokens, 600)
        self.assertAlmostEqual(g.usage_ratio, 0.4)
        # A request larger than the child's share counts at the parent only past it.
        self.t.set(self.task("x"), 350, alloc=True)  # session: 150 + 250 + 350 = 750
        chk = self.t.stub.CheckBudget(B.CheckBudgetRequest(scope=a, estimated_tokens=250),
                                      metadata=self.t.md, timeout=10)
        self.assertNotEqual(chk.decision, B.DECISION_DENY)
        self.assertAlmostEqual(chk.levels[1].projected_ratio, 0.75)
        # The tenant counts the session's spending once (it is not allocated).
        self.assertEqual(self.t.counters(scope()), (150, 0, 0))

    def test_overrun_leaves_no_share(self):
        a = self.task("a")
        self.t.set(a, 400, alloc=True)
        self.t.record(a, 500)  # recorded spend is never refused
        self.assertEqual(self.t.counters(self.session), (500, 0, 0))
        self.assertEqual(self.t.get(a).usage.remaining_tokens, -100)
        # The session has 500 free: a new share of 500 fits, 501 does not.
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.t.set, self.task("b"), 501,
                            alloc=True, contains="session")
        self.t.set(self.task("b"), 500, alloc=True)
        self.assertEqual(self.t.counters(self.session), (500, 0, 500))

    def test_changing_the_limit_or_the_flag_moves_the_parents_allocation(self):
        a = self.task("a")
        self.t.set(a, 400, alloc=True)
        self.t.record(a, 100)
        self.assertEqual(self.t.counters(self.session), (100, 0, 300))
        self.t.set(a, 600, alloc=True)
        self.assertEqual(self.t.counters(self.session), (100, 0, 500))
        # Growing the share needs the parent to have the difference free.
        self.t.set(self.task("b"), 400, alloc=True)  # 100 + 500 + 400 = 1000
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.t.set, a, 601, alloc=True,
                            contains=("session", "needs 1 more", "0 free"))
        self.t.set(a, 600, alloc=False)
        self.assertEqual(self.t.counters(self.session), (100, 0, 400))
        self.t.set(a, 200, alloc=True)
        self.assertEqual(self.t.counters(self.session), (100, 0, 500))
        self.assertTrue(self.t.get(a).budget.settings.allocate_from_parent)

    def test_a_parent_without_a_budget_cannot_allocate(self):
        t = Tenant(self.srv)  # no tenant budget
        t.stub.SetBudget(B.SetBudgetRequest(scope=scope("s"), settings=B.BudgetSettings(
            limit_tokens=10)), metadata=t.md, timeout=10)
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, t.set, scope("s2"), 10,
                            alloc=True, contains=("tenant", "no budget", "allocate_from_parent"))
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, t.get, scope("s2"))
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, t.set, scope(), 10, alloc=True,
                            contains="allocate_from_parent")

    def test_close_returns_the_share(self):
        a = self.task("a")
        self.t.set(a, 400, alloc=True)
        self.t.reserve(a, 100)  # held open: CloseScope releases it
        rid = self.t.reserve(a, 60).reservation.reservation_id
        self.t.commit(rid, 50)
        self.assertEqual(self.t.counters(self.session), (50, 100, 250))
        r = self.t.close(a)
        self.assertEqual(r.returned_tokens, 350)
        self.assertEqual(r.released_tokens, 100)
        self.assertEqual(self.t.counters(self.session), (50, 0, 0))
        self.assertEqual(self.t.close(a).returned_tokens, 0)  # already closed
        # The session's free part is back: a sibling can now take 950.
        self.t.set(self.task("b"), 950, alloc=True)

    def test_closing_a_subtree_returns_each_share_to_its_parent(self):
        s2 = "s2-" + uuid.uuid4().hex[:8]
        self.t.set(scope(s2), 5000, alloc=True)
        self.t.set(scope(s2, "t"), 2000, alloc=True)
        self.t.set(scope(s2, "t", "a"), 500, alloc=True)
        self.t.record(scope(s2, "t", "a"), 100)
        self.assertEqual(self.t.counters(scope(s2, "t")), (100, 0, 400))
        self.assertEqual(self.t.counters(scope(s2)), (100, 0, 1900))
        self.assertEqual(self.t.counters(scope())[2], 4900)
        r = self.t.close(scope(s2))
        self.assertEqual(r.returned_tokens, 4900)
        self.assertEqual(r.closed_scopes, 3)
        self.assertEqual(self.t.counters(scope()), (100, 0, 0))
        tree = self.t.stub.GetUsage(B.GetUsageRequest(scope=scope(s2), depth=2,
                                                      include_closed=True),
                                    metadata=self.t.md, timeout=10)
        self.assertEqual(tree.root.allocated_tokens, 0)
        self.assertEqual(tree.root.children[0].allocated_tokens, 0)

    def test_usage_tree_shows_allocations(self):
        self.t.set(self.task("a"), 400, alloc=True)
        tree = self.t.stub.GetUsage(B.GetUsageRequest(scope=self.session, depth=1),
                                    metadata=self.t.md, timeout=10)
        self.assertEqual(tree.root.allocated_tokens, 400)
        self.assertEqual(tree.root.remaining_tokens, 600)
        self.assertEqual(tree.path[0].allocated_tokens, 0)
        self.assertEqual(self.t.counters(scope())[2], 0, "the session itself is not allocated")

    def test_an_expired_hold_returns_to_the_share(self):
        a = self.task("a")
        self.t.set(a, 400, alloc=True)
        self.t.reserve(a, 300, ttl_ms=1000)
        self.assertEqual(self.t.counters(self.session), (0, 300, 100))
        deadline = time.monotonic() + DEADLINE_S
        got = self.t.counters(self.session)
        while got != (0, 0, 400) and time.monotonic() < deadline:
            time.sleep(0.05)  # a polling step, not a wait for the sweep
            got = self.t.counters(self.session)
        self.assertEqual(got, (0, 0, 400))
        self.assertEqual(self.t.counters(a), (0, 0, 0))

    def concurrent(self, fn, jobs, threads=16):
        """Runs fn(job) for every job on `threads` threads at once; returns the results."""
        results = [None] * len(jobs)
        start = threading.Barrier(threads)
        lock = threading.Lock()
        pending = list(enumerate(jobs))

        def run():
            start.wait()
            while True:
                with lock:
                    if not pending:
                        return
                    i, job = pending.pop()
                results[i] = fn(job)

        ts = [threading.Thread(target=run) for _ in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        return results

    def try_reserve(self, sc, tokens):
        try:
            self.t.reserve(sc, tokens)
            return True
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
            return False

    def test_concurrent_reserves_get_exact_answers(self):
        a, b, c = self.task("a"), self.task("b"), self.task("c")
        self.t.set(a, 300, alloc=True)
        self.t.set(b, 300, alloc=True)
        self.t.set(c, 1000)
        jobs = [a] * 10 + [b] * 10 + [c] * 12
        random.Random(7).shuffle(jobs)
        ok = self.concurrent(lambda sc: self.try_reserve(sc, 50), jobs)
        passed = {name: sum(1 for sc, o in zip(jobs, ok) if o and sc.task_id == name)
                  for name in "abc"}
        # a and b each get exactly their shares; c exactly the session's free 400.
        self.assertEqual(passed, {"a": 6, "b": 6, "c": 8})
        self.assertEqual(self.t.counters(self.session), (0, 1000, 0))

    def test_sixteen_threads_never_pass_a_limit(self):
        a, b, c = self.task("a"), self.task("b"), self.task("c")
        self.t.set(a, 300, alloc=True)
        self.t.set(b, 250, alloc=True)
        self.t.set(c, 1000)
        limits = {"a": 300, "b": 250, "c": 1000}
        rng = random.Random(11)
        jobs = [(rng.choice((a, b, c)), rng.randint(1, 60), rng.random()) for _ in range(400)]
        violations = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                used, reserved, allocated = self.t.counters(self.session)
                if used + reserved + allocated > 1000:
                    violations.append((used, reserved, allocated))

        def job(j):
            sc, n, p = j
            try:
                rid = self.t.reserve(sc, n).reservation.reservation_id
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
                return
            if p < 0.4:
                self.t.commit(rid, max(1, n // 2))
            elif p < 0.6:
                self.t.release(rid)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            self.concurrent(job, jobs)
        finally:
            stop.set()
            watcher.join()
        self.assertEqual(violations, [])
        for sc in (a, b, c):
            used, reserved, _ = self.t.counters(sc)
            self.assertLessEqual(used + reserved, limits[sc.task_id])
        used, reserved, allocated = self.t.counters(self.session)
        self.assertLessEqual(used + reserved + allocated, 1000)
        # The session's allocation is exactly the children's remaining shares.
        shares = 0
        for sc in (a, b):
            u, r, _ = self.t.counters(sc)
            shares += max(0, limits[sc.task_id] - u - r)
        self.assertEqual(allocated, shares)
        # Everything the children hold rolls up once.
        child = [self.t.counters(sc) for sc in (a, b, c)]
        self.assertEqual(used, sum(x[0] for x in child))
        self.assertEqual(reserved, sum(x[1] for x in child))


class AllocationSingle(Allocation):
    """The same, on the one-request write path (write_batching = false)."""
    BATCHING = False

