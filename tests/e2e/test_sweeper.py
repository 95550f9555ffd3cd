"""The sweeper end to end: a real server with sweep_interval_ms = 200 gives back the holds of
reservations nobody commits or releases, without any request arriving; and calendar resets
of tenant budgets are accepted and report their period in the tenant's time zone.

The reset itself happens at midnight, which a test cannot wait for without faking the
server's clock: that is covered by tests/integration/test_sweep_store.c with an injected
clock (Europe/Berlin on its DST days, America/New_York at a month's end, the sweeper
resetting a tenant nobody calls for)."""

import datetime
import time
import uuid
import zoneinfo

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2
from test_watch import Watcher, names

B = budget_pb2
DEADLINE_S = 15  # the sweep runs every 0.2 s: far more than enough, never a fixed sleep


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class Tenant:
    def __init__(self, srv, time_zone=""):
        t = srv.create_tenant(time_zone=time_zone)
        self.id = t.tenant_id
        self.md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        self.stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())

    def set(self, sc, limit, **kw):
        return self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, mode=B.BUDGET_MODE_HARD,
                                                **kw)),
            metadata=self.md, timeout=10)

    def get(self, sc):
        return self.stub.GetBudget(B.GetBudgetRequest(scope=sc), metadata=self.md, timeout=10)

    def reserve(self, sc, tokens, **kw):
        return self.stub.Reserve(B.ReserveRequest(scope=sc, tokens=tokens, **kw),
                                 metadata=self.md, timeout=10)


class Sweeper(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_SWEEP_INTERVAL_MS": "200"})

    def setUp(self):
        self.t = Tenant(self.srv)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.levels = [scope(), scope(self.s), scope(self.s, "t1"), scope(self.s, "t1", "a1")]
        for sc, limit in zip(self.levels, (100000, 10000, 1000, 500)):
            self.t.set(sc, limit)

    def reserved(self):
        return [self.t.get(sc).usage.reserved_tokens for sc in self.levels]

    def wait_reserved(self, want):
        """Polls GetBudget until every level holds `want` (a list, tenant first)."""
        deadline = time.monotonic() + DEADLINE_S
        got = self.reserved()
        while got != want and time.monotonic() < deadline:
            time.sleep(0.05)  # a polling step, not a wait for the sweep
            got = self.reserved()
        self.assertEqual(got, want, f"reserved tokens per level after {DEADLINE_S} s")

    def test_an_expired_hold_returns_to_every_level_without_a_commit(self):
        r = self.t.reserve(self.levels[3], 300, ttl_ms=1000)
        self.assertEqual(r.decision, B.DECISION_ALLOW)
        self.assertEqual(self.reserved(), [300, 300, 300, 300])
        # Nobody commits or releases: the sweeper gives the hold back.
        self.wait_reserved([0, 0, 0, 0])
        # The reservation is settled as expired: a late Commit records nothing and returns
        # nothing twice.
        self.assertRpcError(
            grpc.StatusCode.FAILED_PRECONDITION, self.t.stub.Commit,
            B.CommitRequest(reservation_id=r.reservation.reservation_id,
                            usage=common_pb2.TokenUsage(input_tokens=10)),
            metadata=self.t.md, timeout=10, contains=("expired",))
        self.assertEqual(self.reserved(), [0, 0, 0, 0])
        self.assertEqual([self.t.get(sc).usage.used_tokens for sc in self.levels], [0, 0, 0, 0])
        # A late Release is a repeat, not an error; a late Commit that asks for it records
        # the spend (it happened) without giving the hold back a second time.
        rel = self.t.stub.Release(B.ReleaseRequest(reservation_id=r.reservation.reservation_id),
                                  metadata=self.t.md, timeout=10)
        self.assertTrue(rel.replayed)
        self.assertEqual(rel.reservation.state, B.RESERVATION_STATE_EXPIRED)
        late = self.t.stub.Commit(B.CommitRequest(reservation_id=r.reservation.reservation_id,
                                                  usage=common_pb2.TokenUsage(input_tokens=10),
                                                  record_if_expired=True),
                                  metadata=self.t.md, timeout=10)
        self.assertTrue(late.reservation_expired)
        self.assertEqual(self.reserved(), [0, 0, 0, 0])
        self.assertEqual([self.t.get(sc).usage.used_tokens for sc in self.levels],
                         [10, 10, 10, 10])
        # The budget is whole again: the agent can reserve the rest of its limit.
        self.t.reserve(self.levels[3], 490)

    def test_an_expired_hold_makes_the_falling_crossings_it_undoes(self):
        task = self.levels[2]  # limit 1000
        w = Watcher(self.t.stub, self.t.md, scope=task, min_update_interval_ms=1)
        self.addCleanup(w.cancel)
        self.t.reserve(task, 860, ttl_ms=1000, delay_mode=B.DELAY_MODE_RETURN_ONLY)
        T = B.USAGE_EVENT_TYPE_THRESHOLD_CROSSED
        rising = [e for e in w.collect(B.USAGE_EVENT_TYPE_WARNING) if e.type == T]
        self.assertEqual([(round(e.threshold_ratio, 2), e.falling) for e in rising],
                         [(0.8, False), (0.85, False)], names(rising))
        # Nobody commits: the sweeper gives the hold back, and the task's usage falls back
        # across both thresholds before the reservation is reported expired.
        swept = w.collect(B.USAGE_EVENT_TYPE_RESERVATION_EXPIRED, timeout=DEADLINE_S)
        falling = [(round(e.threshold_ratio, 2), e.falling) for e in swept if e.type == T]
        self.assertEqual(falling, [(0.85, True), (0.8, True)], names(swept))
        self.assertIn(B.USAGE_EVENT_TYPE_USAGE_CHANGED, [e.type for e in swept])
        self.assertEqual(swept[-1].status.reserved_tokens, 0)
        self.assertEqual(swept[-1].reservation.tokens, 860)

    def test_a_live_hold_is_not_swept_with_the_expired_one(self):
        self.t.reserve(self.levels[2], 70, ttl_ms=600000)
        self.t.reserve(self.levels[3], 200, ttl_ms=1000)
        self.assertEqual(self.reserved(), [270, 270, 270, 200])
        self.wait_reserved([70, 70, 70, 0])


def local(ms, zone):
    return datetime.datetime.fromtimestamp(ms / 1000, tz=zoneinfo.ZoneInfo(zone))


class Resets(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_SWEEP_INTERVAL_MS": "200"})

    def check_period(self, budget, zone, monthly):
        start, nxt = budget.period_start_unix_ms, budget.next_reset_unix_ms
        now = time.time() * 1000
        self.assertLessEqual(start, now)
        self.assertLess(now, nxt + 60000)  # a boundary passed during the test at worst
        a, b = local(start, zone), local(nxt, zone)
        self.assertEqual((a.hour, a.minute, a.second, a.microsecond), (0, 0, 0, 0), a)
        self.assertEqual((b.hour, b.minute, b.second, b.microsecond), (0, 0, 0, 0), b)
        if monthly:
            self.assertEqual(a.day, 1)
            self.assertEqual(b.day, 1)
            self.assertEqual((b.year * 12 + b.month) - (a.year * 12 + a.month), 1)
        else:
            self.assertEqual(b.date() - a.date(), datetime.timedelta(days=1))

    def test_daily_and_monthly_tenant_budgets_report_their_period(self):
        zone = "Europe/Berlin"
        t = Tenant(self.srv, time_zone=zone)
        r = t.set(scope(), 100000, reset_period=B.RESET_PERIOD_DAILY)
        self.assertEqual(r.budget.settings.reset_period, B.RESET_PERIOD_DAILY)
        self.check_period(r.budget, zone, monthly=False)
        got = t.get(scope()).budget
        self.assertEqual(got.period_start_unix_ms, r.budget.period_start_unix_ms)
        self.assertEqual(got.next_reset_unix_ms, r.budget.next_reset_unix_ms)

        r = t.set(scope(), 100000, reset_period=B.RESET_PERIOD_MONTHLY)
        self.assertEqual(r.budget.settings.reset_period, B.RESET_PERIOD_MONTHLY)
        self.check_period(r.budget, zone, monthly=True)

        r = t.set(scope(), 100000, reset_period=B.RESET_PERIOD_NONE)
        self.assertEqual((r.budget.period_start_unix_ms, r.budget.next_reset_unix_ms), (0, 0))

    def test_a_time_zone_far_from_utc_gets_its_own_midnight(self):
        zone = "Pacific/Kiritimati"  # UTC+14
        t = Tenant(self.srv, time_zone=zone)
        r = t.set(scope(), 5000, reset_period=B.RESET_PERIOD_DAILY)
        self.check_period(r.budget, zone, monthly=False)

    def test_below_the_tenant_a_reset_period_is_refused(self):
        t = Tenant(self.srv)
        t.set(scope(), 100000)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, t.set, scope("s1"), 1000,
                            reset_period=B.RESET_PERIOD_DAILY,
                            contains=("settings.reset_period",))

    def test_a_budget_without_a_reset_period_has_no_period(self):
        t = Tenant(self.srv)
        r = t.set(scope(), 100000)
        self.assertEqual((r.budget.period_start_unix_ms, r.budget.next_reset_unix_ms), (0, 0))


if __name__ == "__main__":
    import unittest
    unittest.main()
