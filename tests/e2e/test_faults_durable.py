"""Store faults under load on a durable PostgreSQL, with a HARD limit the load reaches.

The other fault tests run on a cluster with fsync off, stop services cleanly and use limits
nobody reaches. Here PostgreSQL and Redis are the test's own, PostgreSQL created without
--fast (fsync and synchronous_commit on: a success reply must mean a durable commit), and
each test gives a task a HARD limit of LIMIT tokens. RESERVE_THREADS clients Reserve EACH
tokens and Commit them; RECORD_THREADS clients RecordUsage on a sibling task. A call that
fails with a transient status is retried as a real client does: Reserve with the same
idempotency key, Commit of the same reservation, RecordUsage with the same key. Every
acknowledged operation is logged on the client side. Reservations are made to outlive the
test (nothing expires, nothing is released), so the task's held + used tokens only grow:
what PostgreSQL holds at the end bounds what it ever held.

The load holds at a quarter of the limit, the fault is injected, the load resumes into it,
the store comes back, and the load runs until every client's Reserve is refused. Then, read
from PostgreSQL with psql:

- no overspend: the task's used + reserved tokens, its ledger total and the tokens of its
  live reservations are at most LIMIT, and so is the total of the Reserves the clients saw
  acknowledged; and the limit was reached (no room for one more Reserve);
- no acknowledged write lost: every acknowledged Reserve is a reservation, every
  acknowledged Commit and RecordUsage a ledger entry with the same amount, and the counters
  agree with the ledger;
- statuses: during a PostgreSQL fault only UNAVAILABLE and DEADLINE_EXCEEDED, never INTERNAL
  (issue 15 item 3b: after a statement timeout the connection's next prepare failed with
  42P05 "prepared statement already exists", answered INTERNAL "storage error"); during a
  Redis fault no failed call at all (Redis is a cache);
- health: NOT_SERVING within HEALTH_BOUND_S of PostgreSQL freezing (SIGSTOP of the postmaster
  and every child: sockets stay open, nothing answers) or crashing (pg_ctl stop -m
  immediate), SERVING again after. The requirement is 1 s (issue 15 item 3a); the bound here
  is 3 s for a loaded 2-core machine, and the measured figure is printed.

Assertions are subtests, so that one run reports every broken property of a fault.
"""

import collections
import sys
import threading
import time
import unittest
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2, health

B = budget_pb2
Code = grpc.StatusCode

LIMIT = 4000           # the task's HARD limit
EACH = 20              # tokens per Reserve (and per Commit: no overrun, nothing released)
RECORD_EACH = 7        # tokens per RecordUsage, on the sibling task
RESERVE_THREADS = 12
RECORD_THREADS = 4
HOLD_AT = 50           # acknowledged Commits before the fault (a quarter of the limit)
CALL_TIMEOUT_S = 2     # the clients' deadline per call
RETRY_PAUSE_S = 0.05   # between retries of a call that failed with a transient status
LOAD_DEADLINE_S = 60   # the load gives up this long after the fault (then the test fails)
HEALTH_BOUND_S = 3.0   # NOT_SERVING after PostgreSQL stops answering (requirement: 1 s)
FREEZE_S = 4.0         # how long PostgreSQL or Redis stays frozen
STUTTER_S = 2.2        # PostgreSQL frozen again right after (see test_postgresql_frozen)
STUTTERS = 3
RESERVATION_TTL_MS = 3_600_000  # the largest: no reservation expires during the test

TRANSIENT = (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED)
# Retried, and counted: INTERNAL is what issue 15 item 3b is about; retrying it lets the
# run go on to check everything else.
RETRIED = TRANSIENT + (Code.INTERNAL,)


class Log:
    """What the clients saw acknowledged, and every status of every attempt."""

    def __init__(self):
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.reserves = {}       # reservation_id -> tokens
        self.commits = {}        # ledger_entry_id -> (reservation_id, tokens)
        self.records = {}        # ledger_entry_id -> tokens
        self.statuses = collections.Counter()   # (method, status name) of failed attempts
        self.lost = []           # acknowledged Reserves the server no longer knew
        self.abandoned = []      # operations still failing when the load ended
        self.denied = 0          # Reserves refused by the limit

    def failed(self, method, code):
        with self.lock:
            self.statuses[(method, code.name)] += 1
            self.changed.notify_all()

    def codes(self):
        with self.lock:
            return {code for (_, code) in self.statuses}

    def wait_for(self, predicate, timeout, what):
        cgtest.wait_on(self.changed, predicate, timeout,
                       lambda: f"timed out waiting for {what}: {len(self.commits)} commits "
                               f"acknowledged, statuses {dict(self.statuses)}")


class Load:
    """The clients (see the module comment), through one server."""

    def __init__(self, srv, md, hard, rec):
        self.log = Log()
        self.md = md
        self.hard = hard
        self.rec = rec
        self.hold_at = HOLD_AT   # no new operation once that many Commits are acknowledged
        self.stop = threading.Event()
        self.give_up_at = None   # monotonic time after which retries stop (set by resume)
        self.reservers = [threading.Thread(target=self._reserve_loop, args=(srv.channel(),),
                                           daemon=True) for _ in range(RESERVE_THREADS)]
        self.recorders = [threading.Thread(target=self._record_loop, args=(srv.channel(),),
                                           daemon=True) for _ in range(RECORD_THREADS)]

    def start(self):
        for t in self.reservers + self.recorders:
            t.start()
        return self

    def resume(self, hold_at=None):
        """Lets the held clients go on, until hold_at Commits are acknowledged (then they
        hold again), or without a hold until the limit refuses them."""
        with self.log.lock:
            self.hold_at = hold_at
            self.give_up_at = time.monotonic() + LOAD_DEADLINE_S
            self.log.changed.notify_all()

    def held(self):
        """Whether the load has reached its hold (calls in flight may still finish)."""
        return self.hold_at is not None and len(self.log.commits) >= self.hold_at

    def _hold(self):
        """Before a new operation: waits while the load holds; false when it is to stop."""
        with self.log.lock:
            deadline = time.monotonic() + 120
            while self.held() and not self.stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.log.changed.wait(left)
        return not self.stop.is_set()

    def _call(self, method, fn, request):
        """fn(request) retried while it fails with a retried status (until the load gives
        up); returns (response, None) or (None, the last RpcError)."""
        while True:
            try:
                return fn(request, metadata=self.md, timeout=CALL_TIMEOUT_S), None
            except grpc.RpcError as e:
                if e.code() != Code.RESOURCE_EXHAUSTED:
                    self.log.failed(method, e.code())
                late = self.give_up_at is not None and time.monotonic() > self.give_up_at
                if e.code() not in RETRIED or late or self.stop.is_set():
                    return None, e
                time.sleep(RETRY_PAUSE_S)

    def _reserve_loop(self, channel):
        stub = budget_pb2_grpc.BudgetServiceStub(channel)
        while self._hold():
            key = "r-" + uuid.uuid4().hex
            r, err = self._call("Reserve", stub.Reserve, B.ReserveRequest(
                scope=self.hard, tokens=EACH, ttl_ms=RESERVATION_TTL_MS, idempotency_key=key))
            if err is not None:
                with self.log.lock:
                    if err.code() == Code.RESOURCE_EXHAUSTED:
                        self.log.denied += 1
                    else:
                        self.log.abandoned.append(("Reserve", key, err.code().name))
                    self.log.changed.notify_all()
                return  # refused by the limit (the end), or given up
            rid = r.reservation.reservation_id
            with self.log.lock:
                self.log.reserves[rid] = r.reservation.tokens
            c, err = self._call("Commit", stub.Commit, B.CommitRequest(
                reservation_id=rid, usage=common_pb2.TokenUsage(input_tokens=EACH)))
            with self.log.lock:
                if err is None:
                    self.log.commits[c.ledger_entry_id] = (rid, EACH)
                elif err.code() in (Code.NOT_FOUND, Code.FAILED_PRECONDITION):
                    self.log.lost.append((rid, err.code().name, err.details()))
                else:
                    self.log.abandoned.append(("Commit", rid, err.code().name))
                self.log.changed.notify_all()
            if err is not None:
                return

    def _record_loop(self, channel):
        stub = budget_pb2_grpc.BudgetServiceStub(channel)
        while self._hold():
            key = "u-" + uuid.uuid4().hex
            r, err = self._call("RecordUsage", stub.RecordUsage, B.RecordUsageRequest(
                scope=self.rec, usage=common_pb2.TokenUsage(input_tokens=RECORD_EACH),
                idempotency_key=key))
            with self.log.lock:
                if err is None:
                    self.log.records[r.ledger_entry_id] = RECORD_EACH
                else:
                    self.log.abandoned.append(("RecordUsage", key, err.code().name))
                self.log.changed.notify_all()
            if err is not None:
                return

    def finish(self):
        """Waits for the reservers to be refused by the limit, then stops the recorders."""
        deadline = (self.give_up_at or time.monotonic()) + 2 * CALL_TIMEOUT_S + 5
        for t in self.reservers:
            t.join(max(0.1, deadline - time.monotonic()))
        with self.log.lock:
            self.stop.set()
            self.log.changed.notify_all()
        for t in self.reservers + self.recorders:
            t.join(2 * CALL_TIMEOUT_S + 5)
        return [t for t in self.reservers if t.is_alive()]


def health_until(channel, want, bound_s):
    """Polls Health/Check until it answers `want`; the seconds that took, or None when it
    did not within bound_s (a Check that fails or times out counts as not yet)."""
    start = time.monotonic()
    while True:
        try:
            if cgtest.health_check(channel, timeout=0.5).status == want:
                return time.monotonic() - start
        except grpc.RpcError:
            pass
        if time.monotonic() - start >= bound_s:
            return None
        time.sleep(0.02)


def pg_rows(dsn, sql):
    return [line.split("|") for line in cgtest.psql(sql, dsn).splitlines() if line]


class DurableFaults(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.svc = cgtest.OwnServices(fast=False, prefix="durable-")
        cls.addClassCleanup(cls.svc.close)

    # -------------------------------------------------------------- set-up -----------

    def start(self):
        """A server on the durable services (schema of its own, defaults for everything
        that decides how fast a fault is seen), a tenant, the two tasks, the load."""
        self.schema = "d_" + uuid.uuid4().hex[:10]
        cgtest.psql(f"CREATE SCHEMA {self.schema}", self.svc.pg)
        self.addCleanup(cgtest.psql, f"DROP SCHEMA IF EXISTS {self.schema} CASCADE",
                        self.svc.pg)
        self.srv = cgtest.start_server(self, pg=self.svc.pg, schema=self.schema,
                                       env={"CTXGUARD_REDIS_URL": self.svc.redis},
                                       log_level="info")
        t = self.srv.create_tenant()
        self.tenant = t.tenant_id
        md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
        stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.session = "df-" + uuid.uuid4().hex[:6]
        hard = common_pb2.Scope(session_id=self.session, task_id="hard")
        rec = common_pb2.Scope(session_id=self.session, task_id="rec")
        for sc, limit in ((common_pb2.Scope(), 10 ** 12),
                          (common_pb2.Scope(session_id=self.session), 10 ** 11),
                          (hard, LIMIT), (rec, 10 ** 10)):
            stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
                mode=B.BUDGET_MODE_HARD, limit_tokens=limit, backpressure_disabled=True)),
                metadata=md, timeout=10)
        self.health_channel = self.srv.channel()
        # Run first (cleanups run last-in first-out): whatever a failed test left frozen or
        # stopped runs again before the server is stopped, its schema dropped, and the next
        # test starts.
        self.addCleanup(self.svc.sh, "pg-start")
        self.addCleanup(self.svc.sh, "redis-start")
        self.addCleanup(self.svc.sh, "pg-thaw")
        self.addCleanup(self.svc.sh, "redis-thaw")
        self.load = Load(self.srv, md, hard, rec).start()
        self.addCleanup(self.load.finish)
        self.load.log.wait_for(self.load.held, 60, f"{HOLD_AT} acknowledged commits")

    # -------------------------------------------------------------- checks -----------

    def check_store(self):
        """No overspend, no acknowledged write lost (see the module comment)."""
        log = self.load.log
        stuck = self.load.finish()
        s, q = self.schema, f"tenant_id = '{self.tenant}' AND session_id = '{self.session}'"
        used, reserved = map(int, pg_rows(self.svc.pg, (
            f"SELECT used_tokens, reserved_tokens FROM {s}.scopes WHERE {q} "
            f"AND task_id = 'hard' AND agent_id = ''"))[0])
        ledger = {r[0]: (r[1], r[2], int(r[3])) for r in pg_rows(self.svc.pg, (
            f"SELECT entry_id, task_id, coalesce(reservation_id::text, ''), input_tokens "
            f"+ output_tokens + cache_read_tokens + cache_write_tokens FROM {s}.ledger "
            f"WHERE {q}"))}
        reservations = {r[0]: (int(r[1]), int(r[2])) for r in pg_rows(self.svc.pg, (
            f"SELECT reservation_id, state, tokens FROM {s}.reservations WHERE {q} "
            f"AND task_id = 'hard'"))}
        hard_ledger = sum(n for task, _, n in ledger.values() if task == "hard")
        live = sum(n for state, n in reservations.values() if state in (1, 2))
        acked_reserved = sum(log.reserves.values())
        print(f"\n  {self._testMethodName}: limit {LIMIT}, used {used} + reserved {reserved}; "
              f"acknowledged: {len(log.reserves)} Reserves ({acked_reserved} tokens), "
              f"{len(log.commits)} Commits, {len(log.records)} RecordUsage; "
              f"{log.denied} Reserves refused; failed attempts {dict(log.statuses)}",
              file=sys.stderr)

        with self.subTest("the load ran to the limit"):
            self.assertEqual(stuck, [], "some clients were still running at the deadline")
            self.assertEqual(log.abandoned, [], "operations still failing when the load ended")
            self.assertGreater(log.denied, 0, "no Reserve was refused: the limit was not reached")
            self.assertGreater(used + reserved, LIMIT - EACH,
                               "a Reserve was refused with room left under the limit")
        with self.subTest("no overspend"):
            self.assertLessEqual(acked_reserved, LIMIT, "Reserves acknowledged beyond the limit")
            self.assertLessEqual(used + reserved, LIMIT)
            self.assertLessEqual(hard_ledger, LIMIT)
            self.assertLessEqual(live, LIMIT)
        with self.subTest("no acknowledged write lost"):
            self.assertEqual(log.lost, [], "acknowledged reservations the server no longer knew")
            missing = [rid for rid in log.reserves
                       if reservations.get(rid, (0, 0))[0] not in (1, 2)]
            self.assertEqual(missing, [], "acknowledged Reserves not in reservations")
            bad = [(e, rid, n) for e, (rid, n) in log.commits.items()
                   if ledger.get(e) != ("hard", rid, n)]
            self.assertEqual(bad, [], "acknowledged Commits not in the ledger as acknowledged")
            bad = [(e, n) for e, n in log.records.items() if ledger.get(e) != ("rec", "", n)]
            self.assertEqual(bad, [], "acknowledged RecordUsage not in the ledger")
            acked = sum(n for _, n in log.commits.values()) + sum(log.records.values())
            self.assertGreaterEqual(sum(n for _, _, n in ledger.values()), acked)
        with self.subTest("the counters agree with the ledger and the reservations"):
            self.assertEqual(used, hard_ledger)
            self.assertEqual(reserved, sum(n for st, n in reservations.values() if st == 1))

    def check_postgres_statuses(self):
        codes = self.load.log.codes()
        # Issue 15 item 3b: INTERNAL "storage error" after a statement timeout (42P05).
        with self.subTest("never INTERNAL during a PostgreSQL fault"):
            failed = [line for line in self.srv.log_text().splitlines()
                      if "statement failed" in line]
            self.assertNotIn("INTERNAL", codes, f"{dict(self.load.log.statuses)}; the server "
                             f"logged {len(failed)} failed statements: {failed[:3]}")
        with self.subTest("only transient statuses during a PostgreSQL fault"):
            self.assertLessEqual(codes - {"INTERNAL"}, {c.name for c in TRANSIENT},
                                 dict(self.load.log.statuses))
            self.assertTrue(codes, "the fault was not seen by any call")

    def check_health(self, what, not_serving_s):
        print(f"  {what}: NOT_SERVING after "
              f"{'never' if not_serving_s is None else f'{not_serving_s:.2f} s'} "
              f"(bound {HEALTH_BOUND_S} s)", file=sys.stderr)
        with self.subTest(f"health NOT_SERVING within {HEALTH_BOUND_S} s of {what}"):
            self.assertIsNotNone(not_serving_s, f"health stayed SERVING for "
                                 f"{HEALTH_BOUND_S} s with PostgreSQL {what}")

    def check_serving_again(self):
        with self.subTest("health SERVING again after the fault"):
            self.assertIsNotNone(health_until(self.health_channel, health.SERVING, 30))

    # -------------------------------------------------------------- the faults -------

    def under_load(self):
        """Lets the held load go on (to hold again at 3 * HOLD_AT) and returns once it runs:
        the fault then comes with calls in flight."""
        self.load.resume(3 * HOLD_AT)
        self.load.log.wait_for(lambda: len(self.load.log.commits) >= HOLD_AT + 10, 60,
                               "the load to run")

    def test_postgresql_crash(self):
        """pg_ctl stop -m immediate under load, then start (crash recovery)."""
        self.start()
        self.under_load()
        self.svc.sh("pg-stop", "--immediate")
        seen = health_until(self.health_channel, health.NOT_SERVING, HEALTH_BOUND_S)
        self.load.resume()
        self.load.log.wait_for(lambda: self.load.log.statuses, 30, "calls refused")
        self.svc.sh("pg-start")
        self.check_health("crashed", seen)
        self.check_serving_again()
        self.check_store()
        self.check_postgres_statuses()

    def test_postgresql_frozen(self):
        """SIGSTOP of the postmaster and its children for FREEZE_S under load, SIGCONT, then
        a stutter: STUTTERS more freezes of STUTTER_S, each right after a thaw. The first
        freeze outlasts what the server waits for an answer (statement timeout + 2 s), so it
        drops its connections and makes new ones at the thaw; the stutters are shorter, so
        the statements they catch on the new connections (their first ones, prepared in the
        same round trip) come back as statement timeouts on connections the server keeps:
        what issue 15 item 3b saw end in INTERNAL."""
        self.start()
        self.under_load()
        self.svc.sh("pg-freeze")
        frozen_at = time.monotonic()
        self.load.resume()  # no hold: the load runs into the stutters
        seen = health_until(self.health_channel, health.NOT_SERVING, HEALTH_BOUND_S)
        time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen_at)))  # the fault's length
        for _ in range(STUTTERS):
            self.svc.sh("pg-thaw")
            self.svc.sh("pg-freeze")
            time.sleep(STUTTER_S)  # the fault's length
        self.svc.sh("pg-thaw")
        self.check_health("frozen", seen)
        self.check_serving_again()
        self.check_store()
        self.check_postgres_statuses()

    def check_no_failed_call(self):
        with self.subTest("Redis is a cache: no call failed"):
            self.assertEqual(dict(self.load.log.statuses), {})

    def test_redis_flushed(self):
        """FLUSHALL under load, again and again while the load runs to the limit."""
        self.start()
        self.load.resume()
        flushes = 0
        while any(t.is_alive() for t in self.load.reservers) and flushes < 200:
            self.assertEqual(self.svc.redis_cli("FLUSHALL"), "OK")
            flushes += 1
            time.sleep(0.05)  # the pace of the flushes
        print(f"\n  {flushes} FLUSHALL under load", file=sys.stderr)
        self.check_store()
        self.check_no_failed_call()

    def test_redis_frozen(self):
        """SIGSTOP of Redis for FREEZE_S under load, then SIGCONT."""
        self.start()
        self.under_load()
        self.svc.sh("redis-freeze")
        frozen_at = time.monotonic()
        self.load.resume()
        time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen_at)))  # the fault's length
        self.svc.sh("redis-thaw")
        self.check_store()
        self.check_no_failed_call()


if __name__ == "__main__":
    unittest.main()
