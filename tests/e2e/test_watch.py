"""BudgetService WatchUsage end to end: events of writes made on one replica reach a
watcher on another (two servers on one schema), in order and numbered per scope; filters,
snapshot, heartbeat, bad input and shutdown."""

import queue
import signal
import threading
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
T = B.UsageEventType


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class Watcher:
    """A WatchUsage stream read by a thread into a queue."""

    def __init__(self, stub, md, **req):
        self.q = queue.Queue()
        # The snapshot is made once the server has subscribed the stream: waiting for it
        # tells the test that writes from now on will be seen. It is dropped unless the
        # test asked for it.
        self.keep_snapshot = req.get("send_snapshot", False)
        req["send_snapshot"] = True
        self.it = stub.WatchUsage(B.WatchUsageRequest(**req), metadata=md, timeout=120)
        self.error = None
        threading.Thread(target=self._run, daemon=True).start()
        first = self.q.get(timeout=10)
        if first is None or first.type != B.USAGE_EVENT_TYPE_SNAPSHOT:
            raise AssertionError(f"the stream did not open with its snapshot: {self.error}")
        if self.keep_snapshot:
            self.q.queue.appendleft(first)

    def _run(self):
        try:
            for ev in self.it:
                self.q.put(ev)
        except grpc.RpcError as e:
            self.error = e
        self.q.put(None)

    def next(self, timeout=10, skip_heartbeats=True):
        deadline = time.monotonic() + timeout
        while True:
            ev = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            if ev is None or not skip_heartbeats or ev.type != B.USAGE_EVENT_TYPE_HEARTBEAT:
                return ev

    def collect(self, until_type, timeout=10):
        out = []
        while True:
            ev = self.next(timeout)
            if ev is None:
                raise AssertionError(f"stream ended: {self.error}; got {names(out)}")
            out.append(ev)
            if ev.type == until_type:
                return out

    def none_within(self, seconds):
        try:
            ev = self.next(seconds)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected event {T.Name(ev.type)}")

    def cancel(self):
        self.it.cancel()


def names(events):
    return [(T.Name(e.type).replace("USAGE_EVENT_TYPE_", ""), e.scope.agent_id or e.scope.task_id
             or e.scope.session_id or "tenant", round(e.threshold_ratio, 2)) for e in events]


class Watch(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = cgtest.start_class_server(cls)
        cls.b = cgtest.start_class_server(cls, schema=cls.a.schema)

    def setUp(self):
        t = self.a.create_tenant()
        self.tenant = t.tenant_id
        self.md = cgtest.bearer(self.a.create_key(t.tenant_id).secret)
        # Approvals are decided by another key than the one that opened them.
        self.approver_md = cgtest.bearer(
            self.a.create_key(t.tenant_id, name="approver", role="operator").secret)
        self.sa = budget_pb2_grpc.BudgetServiceStub(self.a.channel())
        self.sb = budget_pb2_grpc.BudgetServiceStub(self.b.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.set(scope(), 100000)
        self.set(scope(self.s), 10000)
        self.set(scope(self.s, "t1"), 1000)

    def set(self, sc, limit, stub=None, **kw):
        return (stub or self.sa).SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, **kw)), metadata=self.md,
            timeout=10)

    def reserve(self, sc, tokens):
        return self.sa.Reserve(B.ReserveRequest(scope=sc, tokens=tokens, delay_mode=2),
                               metadata=self.md, timeout=10).reservation.reservation_id

    def commit(self, rid, tokens):
        return self.sa.Commit(B.CommitRequest(
            reservation_id=rid, usage=common_pb2.TokenUsage(input_tokens=tokens)),
            metadata=self.md, timeout=10)

    def watch(self, stub=None, **req):
        w = Watcher(stub or self.sb, self.md, **req)  # returns once subscribed
        self.addCleanup(w.cancel)
        return w

    def test_events_of_writes_on_a_replica_reach_a_watcher_on_another_in_order(self):
        task = scope(self.s, "t1")
        # USAGE_CHANGED at most once per 1 ms per scope (0 would mean the default, 1 s): each
        # write starts after the previous one's events arrived, a round trip later, so none
        # is merged and every sequence number is seen.
        w = self.watch(scope=task, min_update_interval_ms=1)
        rid = self.reserve(task, 700)
        got = w.collect(T.Value("USAGE_EVENT_TYPE_USAGE_CHANGED"))
        self.commit(rid, 820)      # 82 %: crosses 80 % and the warning ratio
        got += w.collect(T.Value("USAGE_EVENT_TYPE_WARNING"))
        rid = self.reserve(task, 90)   # 91 %: 85 %, 90 %
        got += w.collect(T.Value("USAGE_EVENT_TYPE_THRESHOLD_CROSSED"))
        got += w.collect(T.Value("USAGE_EVENT_TYPE_THRESHOLD_CROSSED"))
        self.commit(rid, 180)      # 100 %: 95 %, exhausted
        got += w.collect(T.Value("USAGE_EVENT_TYPE_EXHAUSTED"))
        self.set(task, 2000)       # budget changed, the ratio falls to 50 %
        got += w.collect(T.Value("USAGE_EVENT_TYPE_BUDGET_CHANGED"))
        got += w.collect(T.Value("USAGE_EVENT_TYPE_THRESHOLD_CROSSED"))
        self.sa.CloseScope(B.CloseScopeRequest(scope=task), metadata=self.md, timeout=10)
        got += w.collect(T.Value("USAGE_EVENT_TYPE_SCOPE_CLOSED"), timeout=15)
        kinds = [n[0] for n in names(got)]
        self.assertEqual(kinds[:4], ["USAGE_CHANGED", "USAGE_CHANGED", "THRESHOLD_CROSSED",
                                     "WARNING"], names(got))
        self.assertEqual(kinds.count("USAGE_CHANGED"), 4, names(got))
        crossed = [(round(e.threshold_ratio, 2), e.falling) for e in got
                   if e.type == T.Value("USAGE_EVENT_TYPE_THRESHOLD_CROSSED")]
        self.assertEqual(crossed[:4], [(0.8, False), (0.85, False), (0.9, False), (0.95, False)])
        self.assertIn("EXHAUSTED", kinds)
        self.assertEqual(kinds[-1], "SCOPE_CLOSED")
        self.assertIn((0.95, True), crossed, "a raised limit makes falling crossings")
        seqs = [e.sequence for e in got]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "consecutive")
        for e in got:
            self.assertEqual(e.scope.task_id, "t1")
            self.assertEqual(e.level, common_pb2.SCOPE_LEVEL_TASK)
            self.assertTrue(e.event_id)
        ex = [e for e in got if e.type == T.Value("USAGE_EVENT_TYPE_EXHAUSTED")][0]
        self.assertEqual(ex.status.used_tokens, 1000)
        self.assertEqual(ex.status.limit_tokens, 1000)

    def test_descendants_and_type_filter(self):
        agent = scope(self.s, "t1", "a1")
        self.set(agent, 100)
        only_session = self.watch(scope=scope(self.s), min_update_interval_ms=0)
        tree = self.watch(scope=scope(self.s), include_descendants=True,
                          event_types=[T.Value("USAGE_EVENT_TYPE_WARNING")])
        self.reserve(agent, 90)
        got = tree.collect(T.Value("USAGE_EVENT_TYPE_WARNING"))
        self.assertEqual([(e.type, e.scope.agent_id) for e in got],
                         [(T.Value("USAGE_EVENT_TYPE_WARNING"), "a1")])
        mine = only_session.collect(T.Value("USAGE_EVENT_TYPE_USAGE_CHANGED"))
        self.assertEqual([(e.scope.session_id, e.scope.task_id) for e in mine], [(self.s, "")])
        self.assertEqual(mine[0].status.reserved_tokens, 90)

    def test_snapshot_first(self):
        self.reserve(scope(self.s, "t1"), 100)
        w = self.watch(scope=scope(self.s), send_snapshot=True, include_descendants=True)
        ev = w.next()
        self.assertEqual(ev.type, T.Value("USAGE_EVENT_TYPE_SNAPSHOT"))
        self.assertEqual(ev.snapshot.reserved_tokens, 100)
        self.assertEqual([c.scope.task_id for c in ev.snapshot.children], ["t1"])
        self.assertEqual(ev.sequence, 0)

    def test_usage_changed_is_throttled_per_scope(self):
        task = scope(self.s, "t1")
        w = self.watch(scope=task, min_update_interval_ms=3000)
        for _ in range(4):
            self.reserve(task, 10)
        first = w.next()
        self.assertEqual(first.status.reserved_tokens, 10)
        last = w.next(timeout=8)  # the latest one, after the interval
        self.assertEqual(last.status.reserved_tokens, 40)
        self.assertGreater(last.sequence, first.sequence + 1, "the gap shows what was merged")

    def open_approval(self):
        """A PENDING approval of a task in APPROVAL mode; its id."""
        sc = scope(self.s, "ap")
        self.set(sc, 100, mode=B.BUDGET_MODE_APPROVAL)
        r = self.sa.Reserve(B.ReserveRequest(scope=sc, tokens=200, delay_mode=2),
                            metadata=self.md, timeout=10)
        self.assertEqual(r.decision, B.DECISION_REQUIRE_APPROVAL)
        return r.approval_id

    def decide(self, approval_id):
        self.sa.ResolveApproval(B.ResolveApprovalRequest(
            approval_id=approval_id, decision=B.APPROVAL_STATE_APPROVED),
            metadata=self.approver_md, timeout=10)

    def test_approval_id_mode_ends_ok_after_the_decision(self):
        approval = self.open_approval()
        w = self.watch(approval_id=approval.upper())
        # Another approval's events (synthetic, through the SQL function the server uses and
        # announced as the server announces them) are not this stream's.
        other = str(uuid.uuid4())
        t = T.Value("USAGE_EVENT_TYPE_APPROVAL_REQUESTED")
        cgtest.psql(f"SELECT pg_notify('cg_events', p) FROM cg_events_append("
                    f"'{self.tenant}', '[{{\"s\":\"{self.s}\",\"t\":\"\",\"a\":\"\","
                    f"\"type\":{t},\"ref\":\"{other}\",\"refs\":1}}]',"
                    f" {int(time.time() * 1000)}) AS p", dsn=self.a.dsn)
        self.reserve(scope(self.s), 10)
        self.decide(approval)
        got = w.next()
        self.assertEqual(got.type, T.Value("USAGE_EVENT_TYPE_APPROVAL_DECIDED"))
        self.assertEqual(got.approval.approval_id, approval)
        self.assertEqual(got.approval.state, B.APPROVAL_STATE_APPROVED)
        self.assertIsNone(w.next(), "the stream ends after the decision")
        self.assertIsNone(w.error, "with OK")

    def test_approval_decided_before_the_stream_opened_is_sent_at_once(self):
        approval = self.open_approval()
        self.decide(approval)
        it = self.sb.WatchUsage(B.WatchUsageRequest(approval_id=approval), metadata=self.md,
                                timeout=10)
        events = list(it)  # no wait for an event that happened already: ends with OK
        self.assertEqual([e.type for e in events],
                         [T.Value("USAGE_EVENT_TYPE_APPROVAL_DECIDED")])
        self.assertEqual(events[0].approval.state, B.APPROVAL_STATE_APPROVED)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, lambda: list(self.sb.WatchUsage(
            B.WatchUsageRequest(approval_id=str(uuid.uuid4())), metadata=self.md, timeout=10)),
            contains=("approval_id",))

    def test_heartbeat(self):
        w = self.watch(scope=scope(self.s), heartbeat_interval_ms=1000)
        t0 = time.monotonic()
        ev = w.next(timeout=5, skip_heartbeats=False)
        self.assertEqual(ev.type, B.USAGE_EVENT_TYPE_HEARTBEAT)
        ev = w.next(timeout=5, skip_heartbeats=False)
        self.assertEqual(ev.type, B.USAGE_EVENT_TYPE_HEARTBEAT)
        self.assertLess(time.monotonic() - t0, 4.0)

    def test_bad_input_and_auth(self):
        cases = [
            (dict(heartbeat_interval_ms=999), grpc.StatusCode.INVALID_ARGUMENT,
             "heartbeat_interval_ms"),
            (dict(min_update_interval_ms=60001), grpc.StatusCode.INVALID_ARGUMENT,
             "min_update_interval_ms"),
            (dict(event_types=[T.Value("USAGE_EVENT_TYPE_HEARTBEAT")]),
             grpc.StatusCode.INVALID_ARGUMENT, "event_types[0]"),
            (dict(event_types=[0]), grpc.StatusCode.INVALID_ARGUMENT, "event_types[0]"),
            (dict(approval_id="nope"), grpc.StatusCode.INVALID_ARGUMENT, "approval_id"),
            (dict(scope=scope("", "t")), grpc.StatusCode.INVALID_ARGUMENT, "session_id"),
            (dict(scope=scope("no-such")), grpc.StatusCode.NOT_FOUND, "session"),
        ]
        for req, code, text in cases:
            with self.subTest(req=req):
                it = self.sb.WatchUsage(B.WatchUsageRequest(**req), metadata=self.md, timeout=10)
                self.assertRpcError(code, next, it, contains=text)
        it = self.sb.WatchUsage(B.WatchUsageRequest(), timeout=10)
        self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, next, it)
        # Another tenant's scope is not found.
        other = self.a.create_tenant()
        md = cgtest.bearer(self.a.create_key(other.tenant_id).secret)
        it = self.sb.WatchUsage(B.WatchUsageRequest(scope=scope(self.s)), metadata=md,
                                timeout=10)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, next, it)

    def test_resume_sends_the_stored_events_first_then_the_live_ones(self):
        since = int(time.time() * 1000) - 1000
        for tokens in (100, 200, 50):  # three USAGE_CHANGED of t1 (and of the session)
            self.commit(self.reserve(scope(self.s, "t1"), tokens), tokens)
        # Another replica, the stored events of the session's subtree since `since`: of the
        # USAGE_CHANGED only each scope's latest, i.e. its usage now.
        w = self.watch(scope=scope(self.s), include_descendants=True, min_update_interval_ms=1,
                       event_types=[B.USAGE_EVENT_TYPE_USAGE_CHANGED],
                       resume_from_unix_ms=since)
        replayed = {}
        while set(replayed) != {"t1", ""}:
            ev = w.next()
            self.assertEqual(ev.type, B.USAGE_EVENT_TYPE_USAGE_CHANGED, names([ev]))
            self.assertNotIn(ev.scope.task_id, replayed, "a scope's older state came too")
            replayed[ev.scope.task_id] = ev
        self.assertEqual(replayed["t1"].status.used_tokens, 350)
        self.assertEqual(replayed[""].status.used_tokens, 350)
        # Then live: t1's next events (the hold, then the commit) follow the replayed one,
        # with no repeat and no gap.
        self.commit(self.reserve(scope(self.s, "t1"), 5), 5)
        live = []
        while len(live) < 2:
            ev = w.next()
            if ev.scope.task_id == "t1":
                live.append(ev)
        self.assertEqual([e.sequence for e in live],
                         [replayed["t1"].sequence + 1, replayed["t1"].sequence + 2])
        self.assertEqual((live[0].status.reserved_tokens, live[1].status.used_tokens), (5, 355))
        # A filter that matches none of the stored events replays none.
        other = self.watch(scope=scope(self.s), include_descendants=True,
                           event_types=[B.USAGE_EVENT_TYPE_RESERVATION_EXPIRED],
                           resume_from_unix_ms=since)
        self.assertTrue(other.none_within(1.0))

    def test_a_resume_past_what_it_holds_says_older_events_were_left_out(self):
        since = int(time.time() * 1000) - 1000
        # 510 spends on t1: 1,020 USAGE_CHANGED in the session's subtree (t1's and the
        # session's), more than the 1,000 a resume reads.
        for _ in range(510):
            self.sa.RecordUsage(B.RecordUsageRequest(
                scope=scope(self.s, "t1"), usage=common_pb2.TokenUsage(input_tokens=1),
                idempotency_key="k-" + uuid.uuid4().hex), metadata=self.md, timeout=10)
        w = self.watch(scope=scope(self.s), include_descendants=True, min_update_interval_ms=1,
                       resume_from_unix_ms=since)
        first = w.next()
        self.assertIn("older stored events were left out", first.message)
        got = {first.scope.task_id: first}
        while set(got) != {"t1", ""}:
            ev = w.next()
            self.assertNotIn("left out", ev.message)
            got[ev.scope.task_id] = ev
        self.assertEqual(got["t1"].status.used_tokens, 510)


class WatchShutdown(cgtest.TestCase):
    def test_stream_ends_unavailable_at_sigterm(self):
        srv = cgtest.start_server(self)
        t = srv.create_tenant()
        md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
        w = Watcher(stub, md, heartbeat_interval_ms=1000)
        self.assertEqual(w.next(timeout=5, skip_heartbeats=False).type,
                         B.USAGE_EVENT_TYPE_HEARTBEAT)
        srv.signal(signal.SIGTERM)
        while w.next(timeout=10, skip_heartbeats=True) is not None:
            pass
        self.assertIsNotNone(w.error)
        self.assertEqual(w.error.code(), grpc.StatusCode.UNAVAILABLE)
        srv.wait_exit(15)
