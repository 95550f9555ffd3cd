"""Spend forecasts end to end against a real server and PostgreSQL: GetUsage says when each
budget runs out at its recent rate; a budget whose forecast falls under the horizon gets one
FORECAST_EXHAUSTION event (on WatchUsage and to a subscribed webhook), none again while it
stays under, and another after it left the horizon and came back."""

import json
import time
import uuid

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2
from test_notify import Receiver

B = budget_pb2
FORECAST = B.USAGE_EVENT_TYPE_FORECAST_EXHAUSTION


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class Forecast(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_FORECAST_INTERVAL_MS": "200",
            "CTXGUARD_FORECAST_WINDOW_MINUTES": "2",
            "CTXGUARD_FORECAST_HORIZON_MINUTES": "60",
            "CTXGUARD_NOTIFY_INTERVAL_MS": "100",
            "CTXGUARD_NOTIFY_ALLOW_PRIVATE_ADDRESSES": "true"})

    def setUp(self):
        t = self.srv.create_tenant()
        self.tenant = t.tenant_id
        self.md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]

    def set(self, sc, limit):
        self.stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
            limit_tokens=limit)), metadata=self.md, timeout=10)

    def spend(self, sc, tokens, cache_read=0):
        self.stub.RecordUsage(B.RecordUsageRequest(
            scope=sc, usage=common_pb2.TokenUsage(input_tokens=tokens,
                                                  cache_read_tokens=cache_read),
            idempotency_key="k-" + uuid.uuid4().hex), metadata=self.md, timeout=10)

    def events(self):
        return int(cgtest.psql(
            f"SELECT count(*) FROM scope_events WHERE tenant_id = '{self.tenant}'"
            f" AND session_id = '{self.s}' AND task_id = '' AND type = 14", self.srv.dsn))

    def marked(self):
        return int(cgtest.psql(f"SELECT count(*) FROM forecast_alerts WHERE tenant_id ="
                               f" '{self.tenant}'", self.srv.dsn))

    def test_get_usage_forecasts_each_budget(self):
        self.set(scope(self.s), 100000)
        self.set(scope(self.s, "t"), 50000)
        self.set(scope(self.s, "idle"), 50000)
        before = int(time.time() * 1000)
        self.spend(scope(self.s, "t"), 20000)  # 10,000 a minute over the 2-minute window
        root = self.stub.GetUsage(B.GetUsageRequest(scope=scope(self.s), depth=1),
                                  metadata=self.md, timeout=10).root
        after = int(time.time() * 1000)
        f = root.forecast
        self.assertAlmostEqual(f.tokens_per_minute, 10000.0)
        self.assertAlmostEqual(f.seconds_to_exhaustion, 480.0)  # 80,000 left
        self.assertTrue(before + 480000 <= f.exhaustion_unix_ms <= after + 480000)
        kids = {c.scope.task_id: c.forecast for c in root.children}
        self.assertAlmostEqual(kids["t"].seconds_to_exhaustion, 180.0)  # 30,000 left
        self.assertEqual((kids["idle"].tokens_per_minute, kids["idle"].exhaustion_unix_ms),
                         (0.0, 0))
        # The tenant has no budget: no forecast on it.
        tenant = self.stub.GetUsage(B.GetUsageRequest(), metadata=self.md, timeout=10).root
        self.assertFalse(tenant.HasField("forecast"))

    def test_a_budget_under_the_horizon_is_alerted_once_per_crossing(self):
        rx = Receiver()
        self.addCleanup(rx.close)
        self.stub.CreateNotificationChannel(B.CreateNotificationChannelRequest(
            kind=B.NOTIFICATION_CHANNEL_KIND_WEBHOOK, url=rx.url, event_types=[FORECAST]),
            metadata=self.md, timeout=10)
        self.set(scope(self.s), 100000)
        watcher = self.stub.WatchUsage(B.WatchUsageRequest(
            scope=scope(self.s), event_types=[FORECAST], send_snapshot=True),
            metadata=self.md, timeout=60)
        self.assertEqual(next(watcher).type, B.USAGE_EVENT_TYPE_SNAPSHOT)
        self.spend(scope(self.s), 20000)
        e = next(watcher)
        self.assertEqual(e.type, FORECAST)
        self.assertAlmostEqual(e.forecast.tokens_per_minute, 10000.0)
        self.assertGreater(e.forecast.exhaustion_unix_ms, e.occurred_at_unix_ms)
        self.assertAlmostEqual(e.forecast.seconds_to_exhaustion, 480.0, delta=1.0)
        self.assertEqual(e.period_start_unix_ms, 0)
        self.assertIn("runs out in 8 min", e.message)
        cgtest.wait_until(lambda: len(rx.posts()) == 1, 20, "the webhook gets the forecast")
        body = json.loads(rx.posts()[0][1])
        self.assertEqual((body["type"], body["ref_tokens"]), ("FORECAST_EXHAUSTION", 10000))
        # More spend, still under: no second event while the mark stays.
        self.spend(scope(self.s), 1000)
        # The limit raised far above: the forecast leaves the horizon, the mark goes...
        self.set(scope(self.s), 10**10)
        cgtest.wait_until(lambda: self.marked() == 0, 20, "the mark is cleared (re-armed)")
        self.assertEqual(self.events(), 1)
        # ...and coming back under the horizon alerts again.
        self.set(scope(self.s), 100000)
        e = next(watcher)
        self.assertEqual(e.type, FORECAST)
        self.assertEqual(self.events(), 2)
        watcher.cancel()

    def test_cache_reads_count_as_the_budget_counts_them(self):
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(self.s), settings=B.BudgetSettings(
            limit_tokens=100000, exclude_cache_read_tokens=True)), metadata=self.md,
            timeout=10)
        self.spend(scope(self.s), 2000, cache_read=40000)
        f = self.stub.GetUsage(B.GetUsageRequest(scope=scope(self.s)), metadata=self.md,
                               timeout=10).root.forecast
        self.assertAlmostEqual(f.tokens_per_minute, 1000.0)


class ForecastMetric(cgtest.TestCase):
    def test_the_soonest_exhaustion_is_a_metric(self):
        from test_http import get, http_port, sample
        srv = cgtest.start_server(self, env={
            "CTXGUARD_FORECAST_INTERVAL_MS": "200", "CTXGUARD_FORECAST_WINDOW_MINUTES": "2",
            "CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        port = http_port(srv)
        t = srv.create_tenant()
        md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
        s = "s-" + uuid.uuid4().hex[:8]
        for sc, limit in ((scope(s), 100000), (scope(s, "t"), 50000)):
            stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
                limit_tokens=limit)), metadata=md, timeout=10)
        stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(s, "t"), usage=common_pb2.TokenUsage(input_tokens=20000),
            idempotency_key="k"), metadata=md, timeout=10)

        def seconds(level):
            return sample(get(port, "/metrics")[2], "ctxguard_budget_exhaustion_seconds",
                          f'tenant_id="{t.tenant_id}",level="{level}"')

        cgtest.wait_until(lambda: seconds("task") is not None, 20, "the forecast metric")
        self.assertAlmostEqual(seconds("task"), 180.0, delta=1.0)  # 30,000 left at 10,000/min
        self.assertAlmostEqual(seconds("session"), 480.0, delta=1.0)
        self.assertIsNone(seconds("tenant"))  # no budget there
