"""Limits of one call and of its scope, end to end: a tenant's max_call_tokens bounds one
Commit or RecordUsage (INVALID_ARGUMENT, reason CALL_TOKENS_ABOVE_LIMIT, nothing recorded);
a Commit above its reservation is recorded in full and reported by an OVERRUN event on
WatchUsage; CheckBudget, Reserve and RecordUsage need a scope (or scope.tenant = true)."""

import uuid

import grpc

import cgtest
import test_error_details
from cgtest import admin_pb2, budget_pb2, budget_pb2_grpc, common_pb2
from test_watch import Watcher

B = budget_pb2
T = B.UsageEventType
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def scope(session="", task="", tenant=False):
    return common_pb2.Scope(session_id=session, task_id=task, tenant=tenant)


def usage(input_tokens=0, output_tokens=0, cache_read=0, cache_write=0):
    return common_pb2.TokenUsage(input_tokens=input_tokens, output_tokens=output_tokens,
                                 cache_read_tokens=cache_read, cache_write_tokens=cache_write)


class Limits(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def setUp(self):
        self.tenant = self.srv.create_tenant().tenant_id
        self.md = cgtest.bearer(self.srv.create_key(self.tenant, role="agent").secret)
        self.op_md = cgtest.bearer(self.srv.create_key(self.tenant, role="admin").secret)
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.task = scope(self.s, "t1")
        self.set_budget(scope(self.s), 1_000_000_000)
        self.set_budget(self.task, 1_000_000_000)

    def set_budget(self, sc, limit):
        self.stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
            limit_tokens=limit, mode=B.BUDGET_MODE_SOFT)), metadata=self.op_md, timeout=10)

    def reserve(self, tokens, md=None):
        return self.stub.Reserve(B.ReserveRequest(scope=self.task, tokens=tokens,
                                                  delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                 metadata=md or self.md, timeout=10).reservation.reservation_id

    def commit(self, rid, u, md=None):
        return self.stub.Commit(B.CommitRequest(reservation_id=rid, usage=u),
                                metadata=md or self.md, timeout=10)

    def record(self, u, sc=..., md=None):
        return self.stub.RecordUsage(B.RecordUsageRequest(
            scope=self.task if sc is ... else sc, usage=u,
            idempotency_key="k-" + uuid.uuid4().hex), metadata=md or self.md, timeout=10)

    def used(self, sc=None):
        root = self.stub.GetUsage(B.GetUsageRequest(scope=sc or self.task), metadata=self.md,
                                  timeout=10).root
        return root.used_tokens, root.reserved_tokens

    def assertAboveLimit(self, fn, *args, tokens, limit):
        err = self.assertRpcError(INVALID, fn, *args,
                                  contains=("usage", f"{tokens} tokens", f"max_call_tokens {limit}"))
        info = test_error_details.Details(err).info
        self.assertEqual(info.reason, "CALL_TOKENS_ABOVE_LIMIT")
        self.assertEqual(info.metadata["tokens"], str(tokens))
        self.assertEqual(info.metadata["max_call_tokens"], str(limit))
        self.assertEqual(info.metadata["field"], "usage")

    # -- max_call_tokens

    def test_default_bound_refuses_one_call_above_ten_million_and_records_nothing(self):
        rid = self.reserve(100)
        self.assertAboveLimit(self.commit, rid, usage(10_000_001), tokens=10_000_001,
                              limit=10_000_000)
        self.assertAboveLimit(self.record, usage(5_000_000, 5_000_001), tokens=10_000_001,
                              limit=10_000_000)
        # The example: 400,000,000 tokens (each count within its own bound) against a
        # 100-token reservation.
        self.assertAboveLimit(self.commit, rid,
                              usage(100_000_000, 100_000_000, 100_000_000, 100_000_000),
                              tokens=400_000_000, limit=10_000_000)
        self.assertEqual(self.used(), (0, 100), "nothing recorded; the hold is still there")
        # At the bound itself the call is recorded.
        self.commit(rid, usage(10_000_000))
        self.assertEqual(self.used(), (10_000_000, 0))

    def test_a_tenant_setting_bounds_its_calls(self):
        self.srv.admin().UpdateTenantSettings(admin_pb2.UpdateTenantSettingsRequest(
            tenant_id=self.tenant, settings=admin_pb2.TenantSettings(max_call_tokens=1000)),
            metadata=self.srv.admin_md(), timeout=10)
        # The setting reaches a key when it is looked up: a new key has it at once.
        md = cgtest.bearer(self.srv.create_key(self.tenant, role="agent").secret)
        self.assertAboveLimit(self.record, usage(600, 401, 0, 0), ..., md, tokens=1001,
                              limit=1000)
        rid = self.reserve(100, md=md)
        self.assertAboveLimit(self.commit, rid, usage(1, 0, 1000, 0), md, tokens=1001,
                              limit=1000)
        self.assertEqual(self.used(), (0, 100))
        self.record(usage(1000), md=md)
        self.commit(rid, usage(0, 0, 0, 1000), md=md)
        self.assertEqual(self.used(), (2000, 0))

    # -- OVERRUN

    def test_commit_above_its_reservation_counts_at_once_and_reports_an_overrun(self):
        w = Watcher(self.stub, self.md, scope=self.task,
                    event_types=[T.Value("USAGE_EVENT_TYPE_OVERRUN")])
        self.addCleanup(w.cancel)
        rid = self.reserve(100)
        resp = self.commit(rid, usage(300, 200))
        self.assertEqual(resp.overrun_tokens, 400)
        self.assertEqual(self.used(), (500, 0), "the whole spend counts at once")
        ev = w.next(timeout=10)
        self.assertIsNotNone(ev, w.error)
        self.assertEqual(ev.type, T.Value("USAGE_EVENT_TYPE_OVERRUN"))
        self.assertEqual((ev.scope.session_id, ev.scope.task_id), (self.s, "t1"))
        self.assertEqual(ev.reservation.reservation_id, rid)
        self.assertEqual(ev.reservation.tokens, 100)
        self.assertEqual(ev.reservation.state, B.RESERVATION_STATE_COMMITTED)
        cu = ev.reservation.committed_usage
        self.assertEqual((cu.input_tokens, cu.output_tokens), (300, 200))
        self.assertEqual(ev.status.used_tokens, 500)
        self.assertIn("held 100 tokens; 500 committed", ev.message)
        # A commit within its reservation makes none.
        self.commit(self.reserve(100), usage(100))
        self.assertTrue(w.none_within(1.0))

    # -- a spend names its scope

    def test_spending_without_a_scope_is_refused(self):
        calls = {
            "CheckBudget": lambda sc: self.stub.CheckBudget(B.CheckBudgetRequest(
                scope=sc, estimated_tokens=10, delay_mode=B.DELAY_MODE_RETURN_ONLY),
                metadata=self.md, timeout=10),
            "Reserve": lambda sc: self.stub.Reserve(B.ReserveRequest(
                scope=sc, tokens=10, delay_mode=B.DELAY_MODE_RETURN_ONLY), metadata=self.md,
                timeout=10),
            "RecordUsage": lambda sc: self.record(usage(10), sc=sc),
        }
        for name, fn in calls.items():
            with self.subTest(name):
                for sc in (None, scope()):
                    err = self.assertRpcError(INVALID, fn, sc,
                                              contains=("scope", "scope.tenant = true"))
                    info = test_error_details.Details(err).info
                    self.assertEqual(info.reason, "SCOPE_REQUIRED")
                    self.assertEqual(info.metadata["field"], "scope")
                self.assertRpcError(INVALID, fn, scope(self.s, tenant=True),
                                    contains="scope.tenant")
                fn(scope(tenant=True))
        used, reserved = self.used(scope(tenant=True))
        self.assertEqual((used, reserved), (10, 10), "tenant = true spends on the tenant")

    def test_other_rpcs_take_an_empty_scope_or_tenant_true_as_the_tenant(self):
        self.record(usage(7), sc=scope(tenant=True))
        for sc in (None, scope(), scope(tenant=True)):
            root = self.stub.GetUsage(B.GetUsageRequest(scope=sc), metadata=self.md,
                                      timeout=10).root
            self.assertEqual((root.level, root.used_tokens), (common_pb2.SCOPE_LEVEL_TENANT, 7))
        self.assertRpcError(INVALID, self.stub.GetUsage,
                            B.GetUsageRequest(scope=scope(self.s, tenant=True)),
                            metadata=self.md, timeout=10, contains="scope.tenant")
        self.assertRpcError(INVALID, self.stub.SetBudget, B.SetBudgetRequest(
            scope=scope(self.s, tenant=True), settings=B.BudgetSettings(limit_tokens=5)),
            metadata=self.op_md, timeout=10, contains="scope.tenant")
