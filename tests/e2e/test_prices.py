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
