"""WatchUsage opens while the worker pool is saturated by blocking work: every pool thread
waits on a row that another session holds locked (Reserves of one tenant, write batching
off, a 30 s statement timeout) and more Reserves queue behind them. Streams of another
tenant opened meanwhile must not queue behind that work: each gets its snapshot, or is
shed at once with a clear status (UNAVAILABLE / RESOURCE_EXHAUSTED), within a generous
correctness deadline (10 s; the open itself takes milliseconds). Before the open lane,
every open waited for the pool, here for the whole lock."""

import statistics
import subprocess
import threading
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc
from test_budget_faults import scope, setup_tenant

B = budget_pb2

STREAMS = 200
OPEN_DEADLINE_S = 10
IO_THREADS = 8
SHED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)


class RowLocker:
    """A psql session holding the tenant's budget row FOR UPDATE until release()."""

    def __init__(self, dsn, tenant_id):
        self.dsn = dsn
        self.app = "cg_locker_" + uuid.uuid4().hex[:8]
        self.proc = subprocess.Popen(
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            text=True, env=cgtest.clean_env({"PGAPPNAME": self.app}))
        self.proc.stdin.write("BEGIN;\nSELECT 1 FROM scopes WHERE tenant_id = "
                              f"'{tenant_id}' AND level = 1 FOR UPDATE;\n")
        self.proc.stdin.flush()
        self.wait_for(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                      f"'{self.app}' AND state = 'idle in transaction'", 1, "the row lock")

    def waiters(self):
        """Backends waiting for the locker, directly or behind another waiter."""
        return int(cgtest.psql(
            "WITH RECURSIVE w(pid) AS (SELECT pid FROM pg_stat_activity WHERE "
            f"application_name = '{self.app}' UNION SELECT a.pid FROM pg_stat_activity a "
            "JOIN w ON w.pid = ANY(pg_blocking_pids(a.pid))) SELECT count(*) - 1 FROM w",
            self.dsn).strip())

    def wait_for(self, sql, at_least, what, timeout=30):
        deadline = time.monotonic() + timeout
        while int(cgtest.psql(sql, self.dsn).strip() or 0) < at_least:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def release(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("ROLLBACK;\n\\q\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def open_one(stub, md, watched, out, i):
    """Opens one stream; out[i] = (seconds to the first message or status, what)."""
    start = time.monotonic()
    it = stub.WatchUsage(B.WatchUsageRequest(scope=watched, send_snapshot=True), metadata=md,
                         timeout=OPEN_DEADLINE_S)
    try:
        first = next(it)
        out[i] = (time.monotonic() - start, B.UsageEventType.Name(first.type))
    except grpc.RpcError as e:
        out[i] = (time.monotonic() - start, e.code())
    except StopIteration:
        out[i] = (time.monotonic() - start, "ended without a message")
    finally:
        it.cancel()


class WatchOpenUnderLoad(cgtest.TestCase):
    def test_opens_do_not_queue_behind_blocking_work(self):
        srv = cgtest.start_server(self, log_level="info", env={
            "CTXGUARD_WRITE_BATCHING": "false", "CTXGUARD_IO_THREADS": str(IO_THREADS),
            "CTXGUARD_PG_STATEMENT_TIMEOUT_MS": "30000"})
        busy_tenant, busy_md, busy_stub, busy_task = setup_tenant(srv, 10 ** 9)
        _, md, stub, task = setup_tenant(srv, 10 ** 9)
        watched = scope(task.session_id)
        locker = RowLocker(srv.dsn, busy_tenant)
        self.addCleanup(locker.release)

        # Every pool thread blocked on the lock, and as many Reserves again queued.
        reserves = [busy_stub.Reserve.future(B.ReserveRequest(scope=busy_task, tokens=1),
                                             metadata=busy_md, timeout=60)
                    for _ in range(IO_THREADS * 3)]
        deadline = time.monotonic() + 30
        while locker.waiters() < IO_THREADS:
            self.assertLess(time.monotonic(), deadline,
                            f"Reserves waiting on the lock: {locker.waiters()}; "
                            f"{[f.exception() for f in reserves if f.done()][:3]}")
            time.sleep(0.05)

        out = [None] * STREAMS
        threads = [threading.Thread(target=open_one, args=(stub, md, watched, out, i))
                   for i in range(STREAMS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(OPEN_DEADLINE_S + 20)
        self.assertEqual(locker.waiters(), IO_THREADS,
                         "the pool stayed saturated while the streams opened")
        locker.release()
        for f in reserves:
            f.result(timeout=60)

        snap = sorted(s for s, what in out if what == "USAGE_EVENT_TYPE_SNAPSHOT")
        shed = [what for _, what in out if what in SHED]
        other = [(round(s, 2), what) for s, what in out
                 if what != "USAGE_EVENT_TYPE_SNAPSHOT" and what not in SHED]
        median = statistics.median(snap) if snap else None
        print(f"\n{STREAMS} opens with the pool saturated: {len(snap)} snapshots (median "
              f"{median if median is None else round(median, 3)} s, max "
              f"{snap[-1] if snap else None}), {len(shed)} shed, {len(other)} other",
              flush=True)
        self.assertEqual(other, [], "every open got its snapshot or a shed status in time")
        self.assertGreater(len(snap), 0, "some opens were accepted")


if __name__ == "__main__":
    import unittest
    unittest.main()
