"""Stateful Compress whose summary layer waits on a slow LLM (tests/support/fake_llm.py, a real
HTTP server on loopback, holding the request until the test releases it).

While the LLM request is held open: the server has no transaction open that began before it
("idle in transaction" in pg_stat_activity for the server's connections, told apart by their
application_name) and no lock on the session's tables (pg_locks), both read from a separate
PostgreSQL connection; and other calls of the SAME session are answered (a dry run, and a
call that saves). The waiting call then finds the session saved by another call, loads it
again and runs again, and its answer and the history are those of the two calls run one
after the other."""

import json
import threading
import time
import urllib.request
import uuid

import grpc

import cgtest
import test_summarize
from test_compress import long_chat, openai_conv
from cgtest import context_pb2, context_pb2_grpc

C = context_pb2
WAIT_S = 30  # the bound of every wait below (polled, never slept through)


def with_application_name(dsn, name):
    if "://" in dsn:
        return dsn + ("&" if "?" in dsn else "?") + "application_name=" + name
    return f"{dsn} application_name={name}"


class Call(threading.Thread):
    """fn() on its own thread; outcome is its answer or the exception it raised."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn = fn
        self.outcome = None

    def run(self):
        try:
            self.outcome = self.fn()
        except Exception as e:  # noqa: BLE001 - reported by the test's assertions
            self.outcome = e


class CompressSessionWithSlowLLM(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = test_summarize.FakeLLM()
        cls.addClassCleanup(cls.llm.close)
        cls.app = "cg_e2e_ctx_" + uuid.uuid4().hex[:10]
        cls.srv = cgtest.start_class_server(
            cls, pg=with_application_name(cgtest.pg_dsn(), cls.app),
            env={"CTXGUARD_LLM_BASE_URL": cls.llm.url,
                 "CTXGUARD_LLM_API_KEY": "test-key-123",
                 "CTXGUARD_LLM_TIMEOUT_MS": "40000",
                 "CTXGUARD_LLM_MAX_RETRIES": "0",
                 "CTXGUARD_LLM_BREAKER_FAILURES": "1000"})
        tenant = cls.srv.create_tenant()
        cls.md = cgtest.bearer(cls.srv.create_key(tenant.tenant_id).secret)
        cls.stub = context_pb2_grpc.ContextServiceStub(cls.srv.channel())

    def compress(self, timeout=WAIT_S, **kw):
        return self.stub.Compress(C.CompressRequest(**kw), metadata=self.md, timeout=timeout)

    def let_go(self, count):
        """Lets `count` held LLM requests (or later ones) go."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.llm.port}/release",
                                     data=json.dumps({"count": count}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def release(self):
        """No more holding: what is held goes, what comes is answered at once."""
        self.llm.control("")
        self.let_go(100)

    def start_long_compress(self, session):
        """A stateful APPEND Compress whose summary layer asks the LLM, on its own thread."""
        pol = C.CompressionPolicy(target_ratio=0.2, reserved_output_tokens=0,
                                  disabled_layers=[C.COMPRESSION_LAYER_SLIDING_WINDOW])
        call = Call(lambda: self.compress(
            timeout=90, conversation=openai_conv(long_chat()), model="gpt-4o",
            context_window_tokens=40000, policy=pol, force=True,
            summarizer=C.SUMMARIZER_KIND_LLM, session_id=session,
            session_sync=C.SESSION_SYNC_APPEND))
        call.start()
        return call

    def save_one_message(self, session, text):
        """Another call of the session that saves one message (no summary)."""
        return self.compress(conversation=openai_conv([{"role": "user", "content": text}]),
                             session_id=session, summarizer=C.SUMMARIZER_KIND_NONE,
                             session_sync=C.SESSION_SYNC_APPEND)

    def pg_int(self, sql):
        return int(cgtest.psql(sql).strip())

    def open_transactions(self, since):
        """The server's transactions that began before `since` and are still open."""
        return self.pg_int(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
            f"'{self.app}' AND state LIKE 'idle in transaction%' "
            f"AND xact_start <= '{since}'::timestamptz")

    def session_locks(self):
        """Locks the server's connections hold on the session tables of its schema."""
        tables = ", ".join(f"'{self.srv.schema}.{t}'::regclass" for t in
                           ("context_sessions", "context_history", "context_artifacts",
                            "context_compactions"))
        return self.pg_int(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            f"WHERE a.application_name = '{self.app}' AND l.relation IN ({tables})")

    def wait_for_llm_request_or_end(self, seen, first):
        """True once the LLM has more than `seen` requests, False when the first call ended
        first; polled with a deadline."""
        deadline = time.monotonic() + WAIT_S
        while len(self.llm.requests()) <= seen:
            if not first.is_alive():
                return False
            if time.monotonic() > deadline:
                self.fail("the first call neither asked the LLM nor ended within the bound")
            first.join(0.05)
        return True

    def wait_for_llm_request(self, seen, first):
        if not self.wait_for_llm_request_or_end(seen, first):
            self.fail(f"the first call ended before it asked the LLM: {first.outcome}")

    def test_no_transaction_or_lock_while_the_llm_is_asked(self):
        session = "s-" + uuid.uuid4().hex
        chat = long_chat()
        self.llm.control("hold")
        self.addCleanup(self.release)
        seen = len(self.llm.requests())
        first = self.start_long_compress(session)
        self.wait_for_llm_request(seen, first)
        held_since = cgtest.psql("SELECT clock_timestamp()").strip()

        # The LLM request is held open: nothing of the session is held in PostgreSQL.
        self.assertEqual(self.open_transactions(held_since), 0,
                         "a transaction stays open across the LLM call")
        self.assertEqual(self.session_locks(), 0, "a lock on the session is held across the "
                         "LLM call")

        # Other calls of the same session are answered meanwhile.
        one = [{"role": "user", "content": "A message from the second call."}]
        dry = self.compress(conversation=openai_conv(one), session_id=session, dry_run=True,
                            summarizer=C.SUMMARIZER_KIND_NONE,
                            session_sync=C.SESSION_SYNC_APPEND)
        self.assertEqual(dry.report.messages_before, 1)
        saved = self.save_one_message(session, one[0]["content"])
        self.assertEqual(saved.report.history_messages_added, 1)
        self.assertTrue(first.is_alive(), "the first call did not wait for the LLM")
        self.assertEqual(self.open_transactions(held_since), 0)

        # Released: the first call finds the session saved by the second, runs again on the
        # history the second left, and saves after it.
        self.release()
        first.join(WAIT_S)
        self.assertFalse(first.is_alive(), "the first call did not finish")
        resp = first.outcome
        self.assertIsInstance(resp, C.CompressResponse, resp)
        self.assertEqual(resp.report.messages_before, len(chat) + 1)
        self.assertEqual(resp.report.history_messages_added, len(chat))
        self.assertEqual(resp.report.history_revision, 1)
        layer = next(lr for lr in resp.report.layers
                     if lr.layer == C.COMPRESSION_LAYER_SUMMARIZE)
        self.assertEqual(layer.outcome, C.LAYER_OUTCOME_APPLIED, layer)
        self.assertIn("fake summary", resp.conversation.openai_json)
        hist = self.stub.GetHistory(C.GetHistoryRequest(session_id=session, page_size=5),
                                    metadata=self.md, timeout=WAIT_S)
        self.assertEqual(hist.total_messages, len(chat) + 1)
        self.assertIn("A message from the second call.",
                      str(hist.conversation.messages.messages[0]))
        # The second run asked the LLM again (the first run's answer was thrown away).
        self.assertGreaterEqual(len(self.llm.requests()) - seen, 2)

    def test_a_call_that_keeps_losing_the_race_is_aborted_naming_the_session(self):
        session = "s-" + uuid.uuid4().hex
        self.llm.control("hold")
        self.addCleanup(self.release)
        seen = len(self.llm.requests())
        first = self.start_long_compress(session)
        # Each time the first call asks the LLM, another call saves the session; then the
        # LLM answers. Every attempt of the first call finds the session saved meanwhile.
        saves = 0
        for _ in range(20):
            self.wait_for_llm_request(seen, first)
            seen = len(self.llm.requests())
            self.save_one_message(session, f"saved meanwhile {saves}")
            saves += 1
            self.let_go(1)
            if not self.wait_for_llm_request_or_end(seen, first):
                break
        first.join(WAIT_S)
        self.assertFalse(first.is_alive(), "the first call did not finish")
        err = first.outcome
        self.assertIsInstance(err, grpc.RpcError, err)
        self.assertEqual(err.code(), grpc.StatusCode.ABORTED, err.details())
        self.assertIn(session, err.details())
        self.assertGreaterEqual(saves, 3, "one save during each of the three attempts")
        # Nothing of the aborted call was stored: the history is the other calls' messages.
        hist = self.stub.GetHistory(C.GetHistoryRequest(session_id=session),
                                    metadata=self.md, timeout=WAIT_S)
        self.assertEqual(hist.total_messages, saves)

