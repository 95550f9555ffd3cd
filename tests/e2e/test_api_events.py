"""The JSON API's live feed (GET /api/v1/BudgetService/WatchUsage as Server-Sent Events,
transport/http_sse.c) against a real server, read as a browser's or curl's client would: the
frames of events that this test's own traffic committed, heartbeats, errors before the
stream as the API's JSON errors, a resume with Last-Event-ID that brings what committed while
the client was away, and the per-key cap on open streams."""

import http.client
import json
import time
import uuid

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2
from test_http import http_port

B = budget_pb2
PER_KEY = 2
WAIT_S = 20


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class Stream:
    """One event stream, read frame by frame."""

    def __init__(self, port, query, key, headers=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
        h = {"Accept": "text/event-stream"}
        if key is not None:
            h["Authorization"] = "Bearer " + key
        h.update(headers or {})
        self.conn.request("GET", "/api/v1/BudgetService/WatchUsage" + query, headers=h)
        self.r = self.conn.getresponse()
        self.status = self.r.status

    def error(self):
        """The JSON error of a stream that did not open."""
        return json.loads(self.r.read().decode())

    def frame(self):
        """The next frame as a dict of its fields ('data' parsed as JSON)."""
        fields = {}
        while True:
            line = self.r.readline()
            if line == b"":
                raise EOFError("the stream ended")
            line = line.decode().rstrip("\r\n")
            if line == "":
                if fields:
                    if "data" in fields:
                        fields["data"] = json.loads(fields["data"])
                    return fields
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value

    def until(self, want, what):
        """Frames until one for which want(frame) holds (returned); fails after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        seen = []
        while time.monotonic() < deadline:
            f = self.frame()
            if want(f):
                return f
            seen.append(f.get("event"))
        raise AssertionError(f"no {what} within {WAIT_S} s; saw {seen}")

    def close(self):
        self.conn.close()


class Events(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_HTTP_LISTEN": "127.0.0.1:0",
            "CTXGUARD_HTTP_EVENT_STREAMS_PER_KEY": str(PER_KEY)})
        cls.port = http_port(cls.srv)

    def setUp(self):
        t = self.srv.create_tenant()
        self.keys = {role: self.srv.create_key(t.tenant_id, role=role).secret
                     for role in ("viewer", "operator", "admin")}
        self.md = cgtest.bearer(self.keys["admin"])
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.streams = []
        self.made = set()

    def tearDown(self):
        for s in self.streams:
            s.close()

    def open(self, query, role="viewer", key=None, headers=None):
        s = Stream(self.port, query, key if key is not None else self.keys[role], headers)
        self.streams.append(s)
        return s

    def metric(self, name):
        """The value of an unlabelled family on /metrics."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return float(next(line.split()[1] for line in text.splitlines()
                          if line.startswith(name + " ")))

    def spend(self, task, tokens):
        for path in ((self.s,), (self.s, task)):
            if path not in self.made:  # the scopes exist once a budget is set
                self.stub.SetBudget(B.SetBudgetRequest(
                    scope=scope(*path), settings=B.BudgetSettings(limit_tokens=10**9)),
                    metadata=self.md, timeout=10)
                self.made.add(path)
        self.stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(self.s, task), usage=common_pb2.TokenUsage(input_tokens=tokens),
            idempotency_key="k-" + uuid.uuid4().hex), metadata=self.md, timeout=10)

    def usage_of(self, task):
        return lambda f: (f.get("event") == "usage_changed" and
                          f["data"]["scope"].get("task_id") == task)

    def test_a_viewer_sees_committed_usage_and_heartbeats(self):
        self.spend("t1", 1)  # the scopes exist before the stream
        s = self.open(f"?scope.session_id={self.s}&include_descendants=true"
                      "&min_update_interval_ms=1&heartbeat_interval_ms=1000")
        self.assertEqual(s.status, 200)
        self.assertEqual(s.r.getheader("Content-Type"), "text/event-stream; charset=utf-8")
        self.assertEqual(s.r.getheader("Cache-Control"), "no-store")
        self.assertEqual(s.frame(), {"retry": "2000"})
        beat = s.until(lambda f: f.get("event") == "heartbeat", "heartbeat")
        self.assertNotIn("id", beat)
        self.assertEqual(beat["data"]["type"], "USAGE_EVENT_TYPE_HEARTBEAT")
        self.spend("t1", 700)
        f = s.until(self.usage_of("t1"), "usage_changed of t1")
        self.assertEqual(f["data"]["status"]["used_tokens"], 701)
        self.assertEqual(int(f["id"]), f["data"]["occurred_at_unix_ms"])
        self.assertEqual(f["data"]["scope"]["session_id"], self.s)
        self.assertGreater(f["data"]["sequence"], 0)

    def test_a_snapshot_comes_first_when_asked(self):
        self.spend("t1", 5)
        s = self.open(f"?scope.session_id={self.s}&include_descendants=true&send_snapshot=true")
        self.assertEqual(s.status, 200)
        s.frame()  # retry
        f = s.frame()
        self.assertEqual(f["event"], "snapshot")
        self.assertNotIn("id", f)
        self.assertEqual(f["data"]["snapshot"]["used_tokens"], 5)

    def test_errors_before_the_stream_are_the_apis_json_errors(self):
        self.spend("t1", 1)
        cases = [
            (dict(key="ctxg_nope"), f"?scope.session_id={self.s}", 401, "UNAUTHENTICATED"),
            ({}, "?scope.session_id=no-such-session", 404, "NOT_FOUND"),
            ({}, f"?scope.session_id={self.s}&heartbeat_interval_ms=5", 400, "INVALID_ARGUMENT"),
            ({}, f"?scope.session_id={self.s}&resume_from_unix_ms=-1", 400, "INVALID_ARGUMENT"),
            ({}, f"?scope.session_id={self.s}&no_such_field=1", 400, "INVALID_ARGUMENT"),
            ({}, f"?approval_id={uuid.uuid4()}&resume_from_unix_ms=5", 400, "INVALID_ARGUMENT"),
        ]
        for kw, query, status, code in cases:
            with self.subTest(query=query):
                s = self.open(query, **kw)
                self.assertEqual(s.status, status)
                self.assertEqual(s.r.getheader("Content-Type"), "application/json; charset=utf-8")
                self.assertEqual(s.error()["error"]["code"], code)
                s.close()
        s = self.open(f"?scope.session_id={self.s}&heartbeat_interval_ms=5")
        self.assertIn("heartbeat_interval_ms", s.error()["error"]["message"])

    def test_last_event_id_brings_what_committed_while_away(self):
        self.spend("t0", 1)
        query = f"?scope.session_id={self.s}&include_descendants=true&min_update_interval_ms=1"
        s = self.open(query)
        self.spend("t0", 2)
        last = s.until(self.usage_of("t0"), "usage_changed of t0")["id"]
        s.close()
        # Another client watches live, so that the server is known to have delivered these
        # commits (its events thread reads their notifications after the COMMIT, later on
        # a slow machine) before the fresh stream below opens.
        probe = self.open(query)
        # Committed while this client has no stream open; t1 twice: only its latest state
        # is replayed.
        for task, tokens in (("t1", 10), ("t2", 20), ("t1", 30)):
            self.spend(task, tokens)
        latest = {}
        while latest.get("t1") != 40 or latest.get("") != 63:
            f = probe.until(lambda f: f.get("event") == "usage_changed", "a live event")
            latest[f["data"]["scope"].get("task_id", "")] = f["data"]["status"]["used_tokens"]
        probe.close()
        back = self.open(query, headers={"Last-Event-ID": last})
        self.assertEqual(back.status, 200)
        got = {}  # t0 may come again (the margin): repeats are allowed
        while not {"t1", "t2"} <= set(got):
            f = back.until(lambda f: f.get("event") == "usage_changed", "a replayed event")
            got[f["data"]["scope"]["task_id"]] = f["data"]["status"]["used_tokens"]
        self.assertEqual((got["t1"], got["t2"]), (40, 20))
        # A stream opened afresh starts live: what committed before it is not replayed.
        fresh = self.open(query + "&heartbeat_interval_ms=1000")
        fresh.frame()  # retry
        f = fresh.until(lambda f: f.get("event") in ("usage_changed", "heartbeat"),
                        "a heartbeat")
        self.assertEqual(f["event"], "heartbeat")
        # And live events follow the replay on the resumed stream.
        self.spend("t2", 5)
        f = back.until(lambda f: self.usage_of("t2")(f) and
                       f["data"]["status"]["used_tokens"] == 25, "the live event of t2")
        self.assertEqual(f["data"]["status"]["used_tokens"], 25)

    def test_a_key_holds_at_most_its_streams_and_gets_them_back(self):
        self.spend("t1", 1)
        # No heartbeat for 5 minutes: only the server's look at the socket can free a slot.
        query = f"?scope.session_id={self.s}&heartbeat_interval_ms=300000"
        held = [self.open(query) for _ in range(PER_KEY)]
        self.assertEqual([h.status for h in held], [200] * PER_KEY)
        over = self.open(query)
        self.assertEqual(over.status, 429)
        err = over.error()["error"]
        self.assertEqual(err["code"], "RESOURCE_EXHAUSTED")
        self.assertIn("per key", err["message"])
        self.assertEqual(self.open(query, role="operator").status, 200)  # another key
        self.assertEqual(self.metric("ctxguard_http_event_streams"), PER_KEY + 1)
        held[0].close()
        # The server sees the closed connection at the streams' next wake (every 250 ms),
        # without writing to it; the slot is free then.
        deadline = time.monotonic() + WAIT_S
        while True:
            again = self.open(query)
            if again.status == 200 or time.monotonic() > deadline:
                break
            again.close()
            time.sleep(0.2)
        self.assertEqual(again.status, 200)


class Shutdown(cgtest.TestCase):
    def test_open_streams_end_when_the_server_stops(self):
        srv = cgtest.Server(env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        self.addCleanup(srv.close)
        srv.start()
        t = srv.create_tenant()
        key = srv.create_key(t.tenant_id, role="viewer").secret
        streams = [Stream(http_port(srv), "?heartbeat_interval_ms=300000", key)
                   for _ in range(2)]
        for s in streams:
            self.addCleanup(s.close)
            self.assertEqual(s.status, 200)
            self.assertEqual(s.frame(), {"retry": "2000"})
        self.assertEqual(srv.stop(), 0)
        for s in streams:
            with self.assertRaises(EOFError):
                s.frame()
