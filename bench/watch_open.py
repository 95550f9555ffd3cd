#!/usr/bin/env python3
"""watch_open.py - how long a burst of WatchUsage opens waits for its snapshots while a load
of writes keeps the worker pool busy (issue 15 item 3c).

    CG_SERVER_BIN=build/bin/ctxguard CG_SOURCE_DIR=. CG_BUILD_DIR=build \\
    CG_TEST_PG_DSN=... CG_TEST_REDIS_URL=... bench/watch_open.py [STREAMS] [WRITERS] [LOCK_S]

Starts a server (tests/e2e/cgtest.py) on the given PostgreSQL and Redis, runs WRITERS
(default 64) threads of Reserve+Commit on one task (hot rows: the pool threads wait on row
locks, write batching off), then opens STREAMS (default 2000) WatchUsage streams with
send_snapshot at once (grpc.aio, one event loop) and prints: how many got their snapshot,
the median / p90 / max seconds from open to snapshot, and how many were shed with which
status. With LOCK_S > 0 another session holds the writers' tenant row locked from just
before the burst for LOCK_S seconds (a PostgreSQL hiccup: every pool thread blocks on it,
the pool's queue fills). A figure, not a test: the machine is shared, and one Python event
loop opening thousands of streams is itself slow (hundreds of ms at 2000).
"""

import asyncio
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))

import grpc  # noqa: E402

import cgtest  # noqa: E402
from cgtest import budget_pb2  # noqa: E402
from test_budget_faults import Load, scope, setup_tenant  # noqa: E402
from test_watch_open_load import RowLocker  # noqa: E402

B = budget_pb2


async def burst(target, md, watched, n):
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_stream("/ctxguard.v1.BudgetService/WatchUsage",
                                    request_serializer=B.WatchUsageRequest.SerializeToString,
                                    response_deserializer=B.UsageEvent.FromString)

        async def one():
            start = time.monotonic()
            stream = call(B.WatchUsageRequest(scope=watched, send_snapshot=True), metadata=md,
                          timeout=60)
            try:
                async for ev in stream:
                    return time.monotonic() - start, B.UsageEventType.Name(ev.type)
                return time.monotonic() - start, "ended"
            except grpc.aio.AioRpcError as e:
                return time.monotonic() - start, e.code().name
            finally:
                stream.cancel()

        return await asyncio.gather(*(one() for _ in range(n)))


class Case:
    """Stands in for a unittest.TestCase: cgtest's helpers register their cleanups here."""

    def __init__(self):
        self.cleanups = []

    def addCleanup(self, fn, *args):  # noqa: N802 - unittest's name
        self.cleanups.append((fn, args))

    def close(self):
        for fn, args in reversed(self.cleanups):
            fn(*args)


def main():
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    writers = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    lock_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0
    case = Case()
    try:
        srv = cgtest.start_server(case, log_level="info",
                                  env={"CTXGUARD_WRITE_BATCHING": "false"})
        wtenant, wmd, _, wtask = setup_tenant(srv, 10 ** 12 // 10)
        _, md, _, task = setup_tenant(srv, 10 ** 9)
        load = Load([srv], wmd, wtask, 1, threads=writers, per_thread=10 ** 6).start()
        load.wait_for(lambda: len(load.acked) >= 200, 60, "the write load")
        acked = len(load.acked)
        if lock_s > 0:
            locker = RowLocker(srv.dsn, wtenant)
            case.addCleanup(locker.release)
            threading.Timer(lock_s, locker.release).start()
            while locker.waiters() < 8:  # io_threads: the pool is blocked
                time.sleep(0.02)
        t0 = time.monotonic()
        out = asyncio.run(burst(srv.target, md, scope(task.session_id), streams))
        wall = time.monotonic() - t0
        writes = (len(load.acked) - acked) / wall
        load.stop.set()
        load.join()
        snaps = sorted(s for s, what in out if what == "USAGE_EVENT_TYPE_SNAPSHOT")
        shed = {}
        for _, what in out:
            if what != "USAGE_EVENT_TYPE_SNAPSHOT":
                shed[what] = shed.get(what, 0) + 1
        q = statistics.quantiles(snaps, n=10) if len(snaps) >= 2 else [0] * 9
        print(f"{streams} opens at once, {writers} writers, row lock {lock_s:g} s ({writes:.0f} Reserve+Commit/s "
              f"meanwhile): {len(snaps)} snapshots, median "
              f"{statistics.median(snaps) if snaps else 0:.3f} s, p90 {q[8]:.3f} s, max "
              f"{snaps[-1] if snaps else 0:.3f} s; not opened: {shed or 'none'}; "
              f"burst took {wall:.1f} s")
    finally:
        case.close()


if __name__ == "__main__":
    main()
