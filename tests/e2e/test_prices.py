"""The price table (`prices` setting): Commit and RecordUsage price what they record when
the caller gives no cost, Reserve and CheckBudget price the estimate against cost limits,
and a bad table stops the start naming the key."""

import subprocess
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
PRICES = "m-cheap=2.5/10/1.25/3.75; big-*=100/200"


class Prices(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_PRICES": PRICES})

    def setUp(self):
        t = self.srv.create_tenant()
        self.md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.s = common_pb2.Scope(session_id="p-" + uuid.uuid4().hex[:6])
        self.stub.SetBudget(B.SetBudgetRequest(scope=self.s, settings=B.BudgetSettings(
            limit_tokens=10 ** 9, limit_cost_micros=100000, backpressure_disabled=True)),
            metadata=self.md, timeout=10)

    def record(self, usage, model, key=None):
        return self.stub.RecordUsage(B.RecordUsageRequest(
            scope=self.s, usage=usage, model=model, idempotency_key=key or uuid.uuid4().hex),
            metadata=self.md, timeout=10)

    def test_recorded_usage_is_priced_by_kind(self):
        # 1,000 in at $2.50/M + 100 out at $10/M + 4,000 cache read at $1.25/M + 1,000
        # cache write at $3.75/M = 2,500 + 1,000 + 5,000 + 3,750 micros.
        r = self.record(common_pb2.TokenUsage(input_tokens=1000, output_tokens=100,
                                              cache_read_tokens=4000, cache_write_tokens=1000),
                        "m-cheap")
        self.assertTrue(r.price_known)
        self.assertEqual(r.recorded_usage.cost_micros, 12250)
        levels = {lvl.level: lvl for lvl in r.levels}
        self.assertEqual(levels[common_pb2.SCOPE_LEVEL_SESSION].used_cost_micros, 12250,
                         "the priced cost counts against the cost limit")

    def test_prefix_entries_and_unknown_models(self):
        r = self.record(common_pb2.TokenUsage(input_tokens=10, output_tokens=10), "big-model-2")
        self.assertEqual(r.recorded_usage.cost_micros, 3000)
        r = self.record(common_pb2.TokenUsage(input_tokens=10), "nobody-knows")
        self.assertFalse(r.price_known)
        self.assertEqual(r.recorded_usage.cost_micros, 0)
        r = self.record(common_pb2.TokenUsage(input_tokens=10, cost_micros=777), "nobody-knows")
        self.assertTrue(r.price_known, "a cost given by the caller is known")
        self.assertEqual(r.recorded_usage.cost_micros, 777)

    def test_commit_prices_and_reserve_respects_the_cost_limit(self):
        res = self.stub.Reserve(B.ReserveRequest(scope=self.s, tokens=1000, model="m-cheap",
                                                 estimated_output_tokens=200),
                                metadata=self.md, timeout=10)
        # 800 in at $2.50/M + 200 out at $10/M = 2,000 + 2,000 micros held
        self.assertEqual(res.reservation.estimated_cost_micros, 4000)
        done = self.stub.Commit(B.CommitRequest(reservation_id=res.reservation.reservation_id,
                                                usage=common_pb2.TokenUsage(input_tokens=800,
                                                                            output_tokens=100)),
                                metadata=self.md, timeout=10)
        self.assertEqual(done.recorded_usage.cost_micros, 3000)
        self.assertTrue(done.price_known)
        # 1,000 tokens of big-* cost 100,000+ micros: over the 100,000 cost limit.
        err = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.stub.Reserve,
                                  B.ReserveRequest(scope=self.s, tokens=1000, model="big-x"),
                                  metadata=self.md, timeout=10)
        self.assertIn("cost", err.details())
        chk = self.stub.CheckBudget(B.CheckBudgetRequest(scope=self.s, estimated_tokens=1000,
                                                         model="big-x",
                                                         delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                    metadata=self.md, timeout=10)
        self.assertEqual(chk.decision, B.DECISION_DENY)
        self.assertEqual(chk.estimated_cost_micros, 100000)


class BadTable(cgtest.TestCase):
    def test_a_bad_table_stops_the_start_naming_the_key(self):
        env = cgtest.clean_env({"CTXGUARD_PRICES": "gpt-4o=abc", "CTXGUARD_PG_DSN": "x"})
        r = subprocess.run([cgtest.server_bin()], env=env, capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("'prices'", r.stderr)
        self.assertIn("gpt-4o=abc", r.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()


class Builtin(cgtest.TestCase):
    """No `prices` setting: the built-in table prices the common models; with
    prices_builtin off nothing is priced."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.off = cgtest.start_class_server(cls, env={"CTXGUARD_PRICES_BUILTIN": "false"})

    def tenant(self, srv):
        t = srv.create_tenant()
        md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
        s = common_pb2.Scope(session_id="b-" + uuid.uuid4().hex[:6])
        stub.SetBudget(B.SetBudgetRequest(scope=s, settings=B.BudgetSettings(
            limit_tokens=10 ** 9, limit_cost_micros=50000, backpressure_disabled=True)),
            metadata=md, timeout=10)
        return stub, md, s

    def test_a_dated_snapshot_is_priced_by_the_builtin_table(self):
        stub, md, s = self.tenant(self.srv)
        r = stub.RecordUsage(B.RecordUsageRequest(
            scope=s, model="claude-sonnet-4-5-20250929", idempotency_key="a",
            usage=common_pb2.TokenUsage(input_tokens=1000, output_tokens=100,
                                        cache_read_tokens=10000, cache_write_tokens=1000)),
            metadata=md, timeout=10)
        # 1,000 x $3 + 100 x $15 + 10,000 x $0.30 + 1,000 x $3.75 per million, in micros.
        self.assertTrue(r.price_known)
        self.assertEqual(r.recorded_usage.cost_micros, 3000 + 1500 + 3000 + 3750)

    def test_a_cost_refusal_speaks_of_money(self):
        stub, md, s = self.tenant(self.srv)
        chk = stub.CheckBudget(B.CheckBudgetRequest(
            scope=s, estimated_tokens=20000, model="claude-opus-4-1",
            delay_mode=B.DELAY_MODE_RETURN_ONLY), metadata=md, timeout=10)
        self.assertEqual(chk.decision, B.DECISION_DENY)
        cost = [x.message for x in chk.reasons if x.code == B.REASON_CODE_COST_LIMIT]
        self.assertEqual(len(cost), 1, list(chk.reasons))
        self.assertIn("cost limit ($0.000000 used and reserved of $0.050000)", cost[0])
        self.assertNotIn("tokens", cost[0])

    def test_off_means_only_the_setting(self):
        stub, md, s = self.tenant(self.off)
        r = stub.RecordUsage(B.RecordUsageRequest(
            scope=s, model="claude-sonnet-4-5", idempotency_key="a",
            usage=common_pb2.TokenUsage(input_tokens=1000)), metadata=md, timeout=10)
        self.assertFalse(r.price_known)
        self.assertEqual(r.recorded_usage.cost_micros, 0)
