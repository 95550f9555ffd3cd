"""Budgets under failure, with load running: a server killed with SIGKILL loses no
acknowledged usage; Redis stopped and started again changes no decision; PostgreSQL
stopped and started again gives UNAVAILABLE (never a false success), then everything
works again by itself. The last two get PostgreSQL and Redis of their own, so that the
other tests running in parallel are not disturbed."""

import threading
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2


def scope(session="", task=""):
    return common_pb2.Scope(session_id=session, task_id=task)



class Load:
    """Threads that Reserve and Commit `each` tokens in a loop against one task, through
    the given servers, recording every acknowledged Commit and every error code.

    hold_at: once that many Commits are acknowledged, no thread starts another Reserve
    until resume() (calls in flight finish): a fault can then be injected while work is
    certainly left, however fast the server is."""

    def __init__(self, servers, md, task, each, threads, per_thread, hold_at=None):
        self.acked = []       # (ledger_entry_id, tokens)
        self.errors = []      # status codes other than RESOURCE_EXHAUSTED
        self.denied = 0
        self.hold_at = hold_at
        self.resumed = threading.Event()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.progress = threading.Condition(self.lock)
        self.threads = [threading.Thread(target=self._run, args=(servers[i % len(servers)], md,
                                                                 task, each, per_thread))
                        for i in range(threads)]

    def _run(self, srv, md, task, each, n):
        stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
        for _ in range(n):
            if self.stop.is_set():
                return
            if self.hold_at is not None:
                with self.lock:
                    held = len(self.acked) >= self.hold_at
                if held and not self.resumed.wait(120):
                    return
            try:
                r = stub.Reserve(B.ReserveRequest(scope=task, tokens=each), metadata=md,
                                 timeout=10)
                c = stub.Commit(B.CommitRequest(reservation_id=r.reservation.reservation_id,
                                                usage=common_pb2.TokenUsage(input_tokens=each)),
                                metadata=md, timeout=10)
                with self.lock:
                    self.acked.append((c.ledger_entry_id, each))
                    self.progress.notify_all()
            except grpc.RpcError as e:
                with self.lock:
                    if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        self.denied += 1
                    else:
                        self.errors.append(e.code())
                    self.progress.notify_all()

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def wait_for(self, predicate, timeout, what):
        cgtest.wait_on(self.progress, predicate, timeout,
                       lambda: f"timed out waiting for {what}: {len(self.acked)} acked, "
                               f"errors {self.errors[-5:]}")

    def resume(self):
        self.resumed.set()

    def join(self, timeout=120):
        for t in self.threads:
            t.join(timeout)


def setup_tenant(srv, task_limit):
    t = srv.create_tenant()
    key = srv.create_key(t.tenant_id).secret
    md = cgtest.bearer(key)
    stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
    sid = "f-" + uuid.uuid4().hex[:6]
    for sc, limit in ((scope(), 10 ** 12), (scope(sid), 10 ** 11), (scope(sid, "t"), task_limit)):
        stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
            limit_tokens=limit, backpressure_disabled=True)), metadata=md, timeout=10)
    return t.tenant_id, md, stub, scope(sid, "t")


def ledger_ids(dsn, schema, tenant_id):
    q = (f"SELECT entry_id, input_tokens FROM {schema}.ledger WHERE tenant_id = '{tenant_id}'")
    rows = [line.split("|") for line in cgtest.psql(q, dsn).split()]
    return {r[0]: int(r[1]) for r in rows}


class KillNine(cgtest.TestCase):
    def test_sigkill_of_a_replica_loses_no_acknowledged_usage(self):
        a = cgtest.start_server(self)
        b = cgtest.start_server(self, schema=a.schema)
        tenant, md, stub, task = setup_tenant(a, 10 ** 9)
        load = Load([a, b], md, task, 5, threads=16, per_thread=60).start()
        load.wait_for(lambda: len(load.acked) >= 100, 60, "100 acknowledged commits")
        b.kill()  # SIGKILL: no shutdown, in-flight calls die with it
        load.join()
        self.assertTrue(load.errors, "the clients of the killed replica saw it go")
        self.assertTrue(all(c in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                  grpc.StatusCode.DEADLINE_EXCEEDED) for c in load.errors),
                        load.errors)
        ledger = ledger_ids(cgtest.pg_dsn(), a.schema, tenant)
        missing = [e for e, _ in load.acked if e not in ledger]
        self.assertEqual(missing, [], "every acknowledged Commit is in the ledger")
        used = stub.GetBudget(B.GetBudgetRequest(scope=task), metadata=md,
                              timeout=10).usage.used_tokens
        self.assertEqual(used, sum(ledger.values()), "counters agree with the ledger")
        self.assertGreaterEqual(used, sum(n for _, n in load.acked))


class OwnStoreFaults(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = cgtest.OwnServices()
        cls.addClassCleanup(cls.svc.close)

    def server(self, **env):
        base = {"CTXGUARD_REDIS_URL": self.svc.redis, "CTXGUARD_HEALTH_INTERVAL_MS": "100",
                "CTXGUARD_PG_CONNECT_TIMEOUT_MS": "500", "CTXGUARD_REDIS_TIMEOUT_MS": "50"}
        base.update(env)
        schema = "s_" + uuid.uuid4().hex[:10]
        cgtest.psql(f"CREATE SCHEMA {schema}", self.svc.pg)
        self.addCleanup(cgtest.psql, f"DROP SCHEMA IF EXISTS {schema} CASCADE", self.svc.pg)
        return cgtest.start_server(self, pg=self.svc.pg, schema=schema, env=base), schema

    def test_redis_restart_changes_no_decision(self):
        srv, _ = self.server()
        tenant, md, stub, task = setup_tenant(srv, 3000)
        # The load holds after 40 commits (at most 40 + 32 in flight) until Redis is down.
        load = Load([srv], md, task, 10, threads=32, per_thread=20, hold_at=40).start()
        self.addCleanup(load.resume)
        load.wait_for(lambda: len(load.acked) >= 40, 60, "40 acknowledged commits")
        self.svc.sh("redis-stop")
        load.resume()
        load.wait_for(lambda: len(load.acked) >= 120, 60, "commits while Redis is down")
        self.svc.sh("redis-start")
        load.join()
        self.assertEqual(load.errors, [], "losing Redis fails no call")
        self.assertEqual(len(load.acked), 300, "the HARD limit is used up exactly")
        used = stub.GetBudget(B.GetBudgetRequest(scope=task), metadata=md,
                              timeout=10).usage.used_tokens
        self.assertEqual(used, 3000)
        self.assertIn("mod=store_redis", srv.log_text(), "the outage was noticed and logged")

    def test_postgresql_restart_is_unavailable_then_recovers(self):
        srv, schema = self.server()
        tenant, md, stub, task = setup_tenant(srv, 10 ** 9)
        load = Load([srv], md, task, 3, threads=8, per_thread=10 ** 6).start()
        self.addCleanup(load.join)
        self.addCleanup(load.stop.set)
        load.wait_for(lambda: len(load.acked) >= 50, 60, "50 acknowledged commits")
        self.svc.sh("pg-stop")
        load.wait_for(lambda: len(load.errors) >= 8, 60, "calls refused while PostgreSQL is down")
        acked_before = len(load.acked)
        self.svc.sh("pg-start")
        load.wait_for(lambda: len(load.acked) >= acked_before + 50, 60,
                      "commits again after PostgreSQL is back")
        load.stop.set()
        load.join()
        allowed = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertTrue(all(c in allowed for c in load.errors),
                        f"only UNAVAILABLE (or a deadline) while PostgreSQL is down: "
                        f"{set(load.errors)}")
        self.assertIn(grpc.StatusCode.UNAVAILABLE, load.errors)
        ledger = ledger_ids(self.svc.pg, schema, tenant)
        missing = [e for e, _ in load.acked if e not in ledger]
        self.assertEqual(missing, [], "no false success: every acknowledged Commit is durable")


if __name__ == "__main__":
    import unittest
    unittest.main()
