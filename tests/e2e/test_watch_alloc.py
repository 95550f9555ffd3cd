"""WatchUsage events of a parent with allocated children (allocate_from_parent, migrations
0013 and 0015), against real PostgreSQL: the parent's event status carries allocated_tokens
and counts it in usage_ratio and remaining_tokens; a child's SetBudget, its spending, and its
CloseScope each give the parent a USAGE_CHANGED event; an allocation alone can cross a
threshold; an approved extension counts as well. On the batched write path (write_batching,
the default) and the one-request path."""

import uuid

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2
from test_watch import Watcher, names

B = budget_pb2
T = B.UsageEventType
HARD = B.BUDGET_MODE_HARD
USAGE_CHANGED = T.Value("USAGE_EVENT_TYPE_USAGE_CHANGED")
THRESHOLD_CROSSED = T.Value("USAGE_EVENT_TYPE_THRESHOLD_CROSSED")
WARNING = T.Value("USAGE_EVENT_TYPE_WARNING")
SCOPE_CLOSED = T.Value("USAGE_EVENT_TYPE_SCOPE_CLOSED")


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class WatchAllocation(cgtest.TestCase):
    BATCHING = True

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_WRITE_BATCHING": "true" if cls.BATCHING else "false"})

    def setUp(self):
        t = self.srv.create_tenant()
        self.md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
        # Approvals are decided by another key than the one that opened them.
        self.approver_md = cgtest.bearer(
            self.srv.create_key(t.tenant_id, name="approver", role="operator").secret)
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.session = scope(self.s)
        self.task = scope(self.s, "t1")
        self.set(scope(), 100000)
        self.set(self.session, 1000)

    def set(self, sc, limit, alloc=False):
        return self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, mode=HARD,
                                                allocate_from_parent=alloc)),
            metadata=self.md, timeout=10)

    def watch(self, sc):
        # USAGE_CHANGED at most once per 1 ms: each write below starts after the previous
        # one's events arrived, so none is merged.
        w = Watcher(self.stub, self.md, scope=sc, min_update_interval_ms=1)
        self.addCleanup(w.cancel)
        return w

    def parent_usage(self, w, until=USAGE_CHANGED):
        """The events up to the next one of type `until` (the parent watcher sees only the
        session's events)."""
        got = w.collect(until, timeout=15)
        for e in got:
            self.assertEqual((e.scope.session_id, e.scope.task_id), (self.s, ""), names(got))
        return got

    def assertStatus(self, st, used, reserved, allocated):
        self.assertEqual((st.used_tokens, st.reserved_tokens, st.allocated_tokens),
                         (used, reserved, allocated))
        self.assertEqual(st.limit_tokens, 1000)
        self.assertAlmostEqual(st.usage_ratio, (used + reserved + allocated) / 1000)
        self.assertEqual(st.remaining_tokens, 1000 - used - reserved - allocated)

    def test_child_budget_spending_and_close_show_on_the_parent(self):
        w = self.watch(self.session)
        # The child's SetBudget carves its share out of the session.
        self.set(self.task, 300, alloc=True)
        ev = self.parent_usage(w)[-1]
        self.assertStatus(ev.status, 0, 0, 300)
        # Raising the child's limit moves the allocation (only allocated_tokens changes).
        self.set(self.task, 400, alloc=True)
        self.assertStatus(self.parent_usage(w)[-1].status, 0, 0, 400)
        # The child's Reserve rolls up as reserved and shrinks its share by as much.
        rid = self.stub.Reserve(B.ReserveRequest(scope=self.task, tokens=100),
                                metadata=self.md, timeout=10).reservation.reservation_id
        self.assertStatus(self.parent_usage(w)[-1].status, 0, 100, 300)
        # Commit spends 150 of it (50 over the hold): used 150, the share 250.
        self.stub.Commit(B.CommitRequest(
            reservation_id=rid, usage=common_pb2.TokenUsage(input_tokens=150)),
            metadata=self.md, timeout=10)
        self.assertStatus(self.parent_usage(w)[-1].status, 150, 0, 250)
        # Another hold, left open: CloseScope releases it and returns the whole share.
        self.stub.Reserve(B.ReserveRequest(scope=self.task, tokens=40), metadata=self.md,
                          timeout=10)
        self.assertStatus(self.parent_usage(w)[-1].status, 150, 40, 210)
        closed = self.stub.CloseScope(B.CloseScopeRequest(scope=self.task), metadata=self.md,
                                      timeout=10)
        self.assertEqual(closed.returned_tokens, 250)
        self.assertStatus(self.parent_usage(w)[-1].status, 150, 0, 0)
        # Turning the flag off on a fresh child returns its share too.
        other = scope(self.s, "t2")
        self.set(other, 200, alloc=True)
        self.assertStatus(self.parent_usage(w)[-1].status, 150, 0, 200)
        self.set(other, 200, alloc=False)
        self.assertStatus(self.parent_usage(w)[-1].status, 150, 0, 0)
        self.assertTrue(w.none_within(0.3))

    def test_a_descendants_watcher_sees_the_child_and_the_parent(self):
        w = Watcher(self.stub, self.md, scope=self.session, include_descendants=True,
                    min_update_interval_ms=1)
        self.addCleanup(w.cancel)
        self.set(self.task, 300, alloc=True)
        got = w.collect(T.Value("USAGE_EVENT_TYPE_BUDGET_CHANGED"), timeout=15)
        got += w.collect(USAGE_CHANGED, timeout=15) if len(got) < 2 else []
        by_scope = {(e.scope.task_id, e.type): e for e in got}
        self.assertIn(("", USAGE_CHANGED), by_scope, names(got))
        self.assertEqual(by_scope[("", USAGE_CHANGED)].status.allocated_tokens, 300)
        child = by_scope[("t1", T.Value("USAGE_EVENT_TYPE_BUDGET_CHANGED"))]
        self.assertEqual(child.status.allocated_tokens, 0, "the child holds nothing itself")
        self.assertEqual(child.status.remaining_tokens, 300)

    def test_an_allocation_alone_crosses_thresholds(self):
        w = self.watch(self.session)
        self.set(self.task, 850, alloc=True)  # 0 % -> 85 % of the session
        got = self.parent_usage(w, until=WARNING)
        kinds = [(e.type, round(e.threshold_ratio, 2), e.falling) for e in got]
        self.assertEqual(kinds, [(USAGE_CHANGED, 0, False), (THRESHOLD_CROSSED, 0.8, False),
                                 (THRESHOLD_CROSSED, 0.85, False), (WARNING, 0.8, False)],
                         names(got))
        for e in got:
            self.assertStatus(e.status, 0, 0, 850)
            self.assertGreater(e.backpressure_delay_ms, 0, "the 85 % tier's delay")
        # Closing the child returns the share: the ratio falls back across both tiers.
        self.stub.CloseScope(B.CloseScopeRequest(scope=self.task), metadata=self.md, timeout=10)
        got = w.collect(THRESHOLD_CROSSED, timeout=15)
        got += w.collect(THRESHOLD_CROSSED, timeout=15)
        kinds = [(e.type, round(e.threshold_ratio, 2), e.falling) for e in got]
        self.assertEqual(kinds, [(USAGE_CHANGED, 0, False), (THRESHOLD_CROSSED, 0.85, True),
                                 (THRESHOLD_CROSSED, 0.8, True)], names(got))
        self.assertStatus(got[-1].status, 0, 0, 0)

    def test_an_approved_extension_counts_in_the_events_ratio(self):
        # Approvals extend the limit (approved_extra_tokens): an event's status shows the
        # extension and counts it as decisions do (migration 0015 stores it too).
        sess, task = scope(self.s + "-a"), scope(self.s + "-a", "t1")
        self.stub.SetBudget(B.SetBudgetRequest(scope=sess, settings=B.BudgetSettings(
            limit_tokens=1000, mode=B.BUDGET_MODE_APPROVAL)), metadata=self.md, timeout=10)
        self.stub.SetBudget(B.SetBudgetRequest(scope=task, settings=B.BudgetSettings(
            limit_tokens=1000, mode=B.BUDGET_MODE_SOFT)), metadata=self.md, timeout=10)
        first = self.stub.Reserve(B.ReserveRequest(scope=task, tokens=1200, delay_mode=2),
                                  metadata=self.md, timeout=10)
        self.assertEqual(first.decision, B.DECISION_REQUIRE_APPROVAL)
        self.stub.ResolveApproval(B.ResolveApprovalRequest(
            approval_id=first.approval_id, decision=B.APPROVAL_STATE_APPROVED),
            metadata=self.approver_md, timeout=10)
        w = self.watch(sess)
        self.stub.Reserve(B.ReserveRequest(scope=task, tokens=1000, delay_mode=2),
                          metadata=self.md, timeout=10)
        st = w.collect(USAGE_CHANGED, timeout=15)[-1].status
        self.assertEqual((st.limit_tokens, st.approved_extra_tokens, st.reserved_tokens),
                         (1000, 1200, 1000))
        self.assertEqual(st.remaining_tokens, 1200)
        self.assertAlmostEqual(st.usage_ratio, 1000 / 2200)


class WatchAllocationSingle(WatchAllocation):
    """The same, on the one-request write path (write_batching = false)."""
    BATCHING = False

