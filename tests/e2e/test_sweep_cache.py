"""The sweeper and CheckBudget's process cache across replicas (server/service/sweep.c):
a reservation that expires on one server changes only its path's rows, so another server
refreshes that path and keeps every other cached path of the tenant, instead of dropping
the tenant's whole cache (a refill storm for a big fleet whose agents die holding
reservations).

Two servers on one database, without Redis, so that BUDGET_SOURCE_CACHE means the process
cache: A sweeps every 0.2 s, B never in the test's time (its sweeper's interval is the
largest allowed), so the expiry is A's and B hears of it only through cg_rows."""

import time
import uuid

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
CACHE = B.BUDGET_SOURCE_CACHE
DEADLINE_S = 15  # the sweep runs every 0.2 s: slack for a loaded machine
KEEP_CHECKS = 25  # checks of the unrelated path after the refresh, 40 ms apart


def scope(session):
    return common_pb2.Scope(session_id=session)


def check(stub, md, sc):
    return stub.CheckBudget(B.CheckBudgetRequest(scope=sc, estimated_tokens=10,
                                                 delay_mode=B.DELAY_MODE_RETURN_ONLY),
                            metadata=md, timeout=10)


def reserved(resp):
    return [lv.reserved_tokens for lv in resp.levels]


class ExpiryAcrossReplicas(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = cgtest.start_class_server(cls, env={"CTXGUARD_SWEEP_INTERVAL_MS": "200",
                                                    "CTXGUARD_REDIS_URL": ""})
        cls.b = cgtest.start_class_server(cls, schema=cls.a.schema,
                                          env={"CTXGUARD_SWEEP_INTERVAL_MS": "600000",
                                               "CTXGUARD_REDIS_URL": ""})

    def test_an_expiry_refreshes_its_path_and_keeps_the_others(self):
        t = self.a.create_tenant()
        md = cgtest.bearer(self.a.create_key(t.tenant_id).secret)
        sa = budget_pb2_grpc.BudgetServiceStub(self.a.channel())
        sb = budget_pb2_grpc.BudgetServiceStub(self.b.channel())
        keep, gone = "keep-" + uuid.uuid4().hex[:6], "gone-" + uuid.uuid4().hex[:6]
        for sc, limit in ((common_pb2.Scope(tenant=True), 10 ** 9), (scope(keep), 10 ** 6),
                          (scope(gone), 10 ** 6)):
            sa.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
                limit_tokens=limit, backpressure_disabled=True)), metadata=md, timeout=10)
        r = sa.Reserve(B.ReserveRequest(scope=scope(gone), tokens=300, ttl_ms=1000),
                       metadata=md, timeout=10)
        self.assertEqual(r.decision, B.DECISION_ALLOW)
        # Both paths in B's cache, the hold seen on both levels of the expiring one.
        for stub in (sa, sb):
            for sc in (scope(keep), scope(gone)):
                check(stub, md, sc)
        self.assertEqual(check(sa, md, scope(keep)).source, CACHE)
        self.assertEqual(check(sb, md, scope(keep)).source, CACHE)
        held = check(sb, md, scope(gone))
        self.assertEqual((held.source, reserved(held)), (CACHE, [300, 300]))

        # A's sweeper gives the hold back; B refreshes that path (the tenant row with it).
        deadline = time.monotonic() + DEADLINE_S
        seen = held
        while reserved(seen) != [0, 0] and time.monotonic() < deadline:
            time.sleep(0.05)  # a polling step, not a wait for the sweep
            seen = check(sb, md, scope(gone))
        self.assertEqual(reserved(seen), [0, 0], f"B's view of the expired path after "
                                                 f"{DEADLINE_S} s")
        # The other path of the tenant stayed in B's cache: its own row was never dropped
        # (a whole-tenant drop, which the announcement of the sweep used to be, would make
        # it read PostgreSQL at least once), and its tenant row is the refreshed one.
        for _ in range(KEEP_CHECKS):
            r = check(sb, md, scope(keep))
            self.assertEqual((r.source, reserved(r)), (CACHE, [0, 0]))
            time.sleep(0.04)
        # The sweeping server kept its own cache of the other path too, and has the
        # expired path as the sweep left it.
        mine = check(sa, md, scope(keep))
        self.assertEqual((mine.source, reserved(mine)), (CACHE, [0, 0]))
        self.assertEqual(reserved(check(sa, md, scope(gone))), [0, 0])


if __name__ == "__main__":
    import unittest
    unittest.main()
