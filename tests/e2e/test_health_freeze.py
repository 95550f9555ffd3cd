"""Health with PostgreSQL frozen (SIGSTOP on the postmaster and every backend: the sockets
stay open, nothing answers): grpc.health.v1 Check turns NOT_SERVING within 1 s of the
freeze, with a load of writes blocking the pool and the sweeper, and without load; after
SIGCONT it is SERVING again. WatchUsage opens meanwhile are refused at once with
UNAVAILABLE. The calls that failed meanwhile failed with UNAVAILABLE or a
deadline, never INTERNAL. The server runs with the default health settings: the bound is
the defaults' (health_interval_ms + health_timeout_ms = 750 ms).

The requirement is 1 s; the assertion allows 1.5 s for a loaded 2-core machine and prints
the figure measured. PostgreSQL and Redis are the test's own (scripts/services.sh)."""

import os
import signal
import subprocess
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2
from test_budget_faults import Load, scope, setup_tenant

B = budget_pb2

# The requirement (1 s) plus slack for a loaded CI machine.
BOUND_S = 1.5


def health_status(channel):
    try:
        return cgtest.health_check(channel, timeout=2).status
    except grpc.RpcError as e:
        return e.code()


class Frozen:
    """PostgreSQL's processes stopped with SIGSTOP (the postmaster first, so that it forks
    no backend that would escape), resumed with SIGCONT by thaw() or on cleanup."""

    def __init__(self, svc):
        data = os.path.join(svc.dir, "pg", "data")
        with open(os.path.join(data, "postmaster.pid")) as f:
            self.postmaster = int(f.readline().strip())
        self.pids = []

    def children(self):
        r = subprocess.run(["pgrep", "-P", str(self.postmaster)], stdout=subprocess.PIPE,
                           text=True, timeout=10)
        return [int(p) for p in r.stdout.split()]

    def freeze(self):
        os.kill(self.postmaster, signal.SIGSTOP)
        self.pids = [self.postmaster] + self.children()
        for pid in self.pids[1:]:
            os.kill(pid, signal.SIGSTOP)
        return time.monotonic()

    def thaw(self):
        for pid in self.pids + self.children():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.pids = []


class HealthFreeze(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = cgtest.OwnServices()
        cls.addClassCleanup(cls.svc.close)

    def server(self):
        schema = "s_" + uuid.uuid4().hex[:10]
        cgtest.psql(f"CREATE SCHEMA {schema}", self.svc.pg)
        self.addCleanup(cgtest.psql, f"DROP SCHEMA IF EXISTS {schema} CASCADE", self.svc.pg)
        # Default health settings: the bound under test is the one a deployment gets.
        return cgtest.start_server(self, pg=self.svc.pg, schema=schema,
                                   env={"CTXGUARD_REDIS_URL": self.svc.redis})

    def freeze_and_measure(self, srv, what, while_frozen=None):
        """Freezes PostgreSQL, returns the seconds until Check said NOT_SERVING; runs
        while_frozen() then, before the thaw."""
        channel = srv.channel()
        self.assertEqual(health_status(channel), cgtest.health.SERVING)
        frozen = Frozen(self.svc)
        self.addCleanup(frozen.thaw)
        start = frozen.freeze()
        seen = None
        while time.monotonic() - start < 15:
            if health_status(channel) == cgtest.health.NOT_SERVING:
                seen = time.monotonic() - start
                break
            time.sleep(0.02)
        if seen is not None and while_frozen is not None:
            while_frozen()
        frozen.thaw()
        print(f"\n{what}: NOT_SERVING {seen if seen is None else round(seen, 3)} s after the "
              f"freeze (requirement 1 s, asserted {BOUND_S} s)", flush=True)
        self.assertIsNotNone(seen, "health never turned NOT_SERVING with PostgreSQL frozen")
        self.assertLessEqual(seen, BOUND_S, f"{what}: NOT_SERVING only {seen:.3f} s after the "
                                            f"freeze")
        deadline = time.monotonic() + 20
        while health_status(channel) != cgtest.health.SERVING:
            self.assertLess(time.monotonic(), deadline, "SERVING again after SIGCONT")
            time.sleep(0.05)
        return seen

    def test_freeze_without_load_is_not_serving_within_a_second(self):
        srv = self.server()
        self.freeze_and_measure(srv, "without load")

    def test_freeze_under_write_load_is_not_serving_within_a_second(self):
        srv = self.server()
        tenant, md, stub, task = setup_tenant(srv, 10 ** 10)
        # More writers than pool threads (8): every pool thread is blocked on the frozen
        # PostgreSQL while the freeze lasts, and so is the sweeper.
        load = Load([srv], md, task, 3, threads=24, per_thread=10 ** 6).start()
        self.addCleanup(load.join)
        self.addCleanup(load.stop.set)
        load.wait_for(lambda: len(load.acked) >= 50, 60, "50 acknowledged commits")
        watched = scope(task.session_id)

        def opens_are_refused():
            # Not serving: a WatchUsage open is refused at once, not queued for a store.
            for _ in range(5):
                start = time.monotonic()
                err = cgtest.rpc_error(lambda: next(stub.WatchUsage(
                    B.WatchUsageRequest(scope=watched, send_snapshot=True), metadata=md,
                    timeout=10)))
                self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
                self.assertLess(time.monotonic() - start, 5, "refused promptly")

        self.freeze_and_measure(srv, "under write load", opens_are_refused)
        acked = len(load.acked)
        load.wait_for(lambda: len(load.acked) >= acked + 50, 60, "commits after the thaw")
        load.stop.set()
        load.join()
        allowed = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertTrue(all(c in allowed for c in load.errors),
                        f"only UNAVAILABLE or a deadline during the freeze: {set(load.errors)}")


if __name__ == "__main__":
    import unittest
    unittest.main()
