"""ContextService.Summarize end to end: the extractive summarizer (no LLM configured), the LLM
summarizer against tests/support/fake_llm.py (a real HTTP server on loopback started here)
with every failure path and the fallback it gives, the circuit breaker opening and closing,
PII redacted before anything reaches the LLM (the fake records every body it receives),
German and Japanese summaries, and bad input."""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import grpc

import cgtest
import test_http
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2, context_pb2, context_pb2_grpc

C = context_pb2
K = C.SummarizerKind
R = C.SummaryFallbackReason
AUTO, LLM, EXTRACTIVE = K.SUMMARIZER_KIND_AUTO, K.SUMMARIZER_KIND_LLM, K.SUMMARIZER_KIND_EXTRACTIVE

EN_HEADINGS = ("## Session intent", "## Progress", "## Key decisions", "## Current state",
               "## Next steps", "## Important details")
DE_HEADINGS = ("## Ziel der Sitzung", "## Fortschritt", "## Wichtige Entscheidungen",
               "## Aktueller Stand", "## Nächste Schritte", "## Wichtige Details")
JA_HEADINGS = ("## セッションの目的", "## 進捗", "## 主な決定事項", "## 現在の状況", "## 次のステップ",
               "## 重要な詳細")


def msg(role, text):
    return common_pb2.Message(role=role, parts=[common_pb2.MessagePart(text=text)])


U, A = common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT


def conversation(messages):
    return common_pb2.Conversation(messages=common_pb2.MessageList(messages=messages))


def work_conversation(rounds=12):
    """An English working session with details, decisions and filler."""
    ms = [msg(U, "The export job fails every night since the upgrade. Find out why and fix it.")]
    for i in range(rounds):
        ms.append(msg(A, f"Step {i}: I read src/export/job_{i}.py; the batch size there is "
                         f"{100 + i} rows and the retry delay {i * 50} ms. Nothing else stood "
                         f"out in that module, the code paths look ordinary and well tested."))
        ms.append(msg(U, "OK, keep going and tell me what you find in the next module."))
    ms.append(msg(U, "We decided to move the job to 02:00 UTC instead of midnight."))
    ms.append(msg(A, "Done: the schedule is now 0 2 * * * and the job passed on staging."))
    ms.append(msg(U, "Next, update the runbook in docs/runbook.md."))
    return conversation(ms)


PII = {
    "email": "jane.doe@example.com",
    "phone": "+1 415 555 0100",
    "card": "4111 1111 1111 1111",
    "ssn": "123-45-6789",
    "ipv4": "203.0.113.77",
    "key": "sk-proj-4fT9xQ2mLk8ZpR7vN3bY6cW1dE5hJ0aS",
    "password": "hunter2-Secret!",
}


def pii_conversation():
    ms = [msg(U, f"Our customer {PII['email']} cannot log in. Call her at {PII['phone']}; "
                 f"she paid with {PII['card']} and her SSN on file is {PII['ssn']}."),
          msg(A, f"The login requests come from {PII['ipv4']}. The service uses the key "
                 f"{PII['key']} and the config has password={PII['password']} in it."),
          msg(U, f"Write to {PII['email']} again once it is fixed, and rotate {PII['key']}.")]
    for i in range(10):
        ms.append(msg(A, f"Checked auth module {i}: token lifetime is {30 + i} minutes and the "
                         f"cache holds {1000 * i} entries; nothing wrong there yet, moving on."))
        ms.append(msg(U, "Thanks, continue with the next one."))
    return conversation(ms)


class FakeLLM:
    """tests/support/fake_llm.py on 127.0.0.1:0, with its request log."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fake-llm-")
        port_file = os.path.join(self.dir, "port")
        script = os.path.join(cgtest.SOURCE_DIR, "tests", "support", "fake_llm.py")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--port-file", port_file,
             "--log-file", os.path.join(self.dir, "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError("the fake LLM did not start")
            time.sleep(0.02)
        with open(port_file) as f:
            self.port = int(f.read())
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def control(self, behaviour):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/control",
                                     data=json.dumps({"behaviour": behaviour}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def requests(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/requests", timeout=10) as r:
            return json.loads(r.read())

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


class Client:
    def __init__(self, srv):
        t = srv.create_tenant()
        self.md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        self.stub = context_pb2_grpc.ContextServiceStub(srv.channel())

    def summarize(self, conv, timeout=30, **kw):
        return self.stub.Summarize(C.SummarizeRequest(conversation=conv, **kw),
                                   metadata=self.md, timeout=timeout)


class SummarizeWithoutLLM(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.c = Client(cls.srv)

    def assertSummaryShape(self, r, headings):
        pos = [r.summary.find(h + "\n") for h in headings]
        self.assertTrue(all(p >= 0 for p in pos), r.summary)
        self.assertEqual(pos, sorted(pos), "sections out of order")
        self.assertTrue(r.sections.intent)
        self.assertLessEqual(r.summary_tokens, 400)
        self.assertTrue(r.target_met)

    def test_a_sessions_stored_history_is_summarized(self):
        session = "sum-" + uuid.uuid4().hex[:8]
        conv = work_conversation()
        self.c.stub.Compress(C.CompressRequest(conversation=conv, session_id=session,
                                               model="gpt-4o"), metadata=self.c.md, timeout=30)
        whole = self.c.stub.Summarize(C.SummarizeRequest(session_id=session), metadata=self.c.md,
                                      timeout=30)
        direct = self.c.summarize(conv)
        self.assertEqual(whole.summary, direct.summary, "the history is the conversation sent")
        self.assertEqual(whole.messages_summarized, len(conv.messages.messages))
        part = self.c.stub.Summarize(C.SummarizeRequest(session_id=session, from_position=1,
                                                        to_position=4),
                                     metadata=self.c.md, timeout=30)
        self.assertEqual(part.messages_summarized, 3)
        n = len(conv.messages.messages)
        for req, code, field in (
                (C.SummarizeRequest(session_id="nope-" + session), grpc.StatusCode.NOT_FOUND,
                 "session_id"),
                (C.SummarizeRequest(session_id=session, from_position=n),
                 grpc.StatusCode.OUT_OF_RANGE, "from_position"),
                (C.SummarizeRequest(session_id=session, to_position=n + 1),
                 grpc.StatusCode.OUT_OF_RANGE, "to_position"),
                (C.SummarizeRequest(session_id=session, from_position=3, to_position=2),
                 grpc.StatusCode.INVALID_ARGUMENT, "to_position")):
            with self.subTest(req=str(req)):
                self.assertRpcError(code, self.c.stub.Summarize, req, metadata=self.c.md,
                                    timeout=30, contains=(field,))

    def test_auto_without_llm_is_extractive_and_says_why(self):
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.summarizer_used, EXTRACTIVE)
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_NOT_CONFIGURED)
        self.assertIn("llm_base_url", r.fallback_detail)
        self.assertSummaryShape(r, EN_HEADINGS)
        self.assertEqual(r.language, "en")
        self.assertEqual(r.sections.intent,
                         "The export job fails every night since the upgrade.")
        self.assertIn("We decided to move the job to 02:00 UTC instead of midnight.",
                      list(r.sections.key_decisions))
        self.assertIn("Next, update the runbook in docs/runbook.md.", list(r.sections.next_steps))
        self.assertIn("0 2 * * *", r.sections.current_state)
        self.assertEqual(r.messages_summarized, 28)
        self.assertGreater(r.input_tokens, r.summary_tokens)
        self.assertEqual(r.llm_attempts, 0)

    def test_openai_models_are_counted_exactly(self):
        conv = work_conversation()
        r = self.c.summarize(conv, model="gpt-4o", summarizer=EXTRACTIVE)
        n = self.c.stub.CountTokens(C.CountTokensRequest(conversation=conv, model="gpt-4o"),
                                    metadata=self.c.md, timeout=30)
        self.assertEqual(n.method, C.TOKEN_COUNT_METHOD_EXACT)
        self.assertEqual(r.input_tokens, sum(n.message_tokens))
        s = self.c.stub.CountTokens(C.CountTokensRequest(text=r.summary, model="gpt-4o"),
                                    metadata=self.c.md, timeout=30)
        self.assertEqual(r.summary_tokens, s.total_tokens)

    def test_llm_asked_for_without_llm_is_a_failed_precondition(self):
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.c.summarize,
                            work_conversation(), summarizer=LLM, contains="llm")

    def test_extractive_asked_for(self):
        r = self.c.summarize(work_conversation(), summarizer=EXTRACTIVE, target_tokens=120)
        self.assertEqual(r.summarizer_used, EXTRACTIVE)
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_REQUESTED)
        self.assertLessEqual(r.summary_tokens, 120)
        self.assertTrue(r.target_met)

    def test_german_conversation_gets_a_german_summary(self):
        conv = conversation([
            msg(U, "Der Import-Job bricht seit dem Update jede Nacht ab. Bitte finde die "
                   "Ursache."),
            msg(A, "Ich habe die Logs geprüft: der Speicher ist auf 512 MiB begrenzt und der "
                   "Job braucht 700 MiB."),
            msg(U, "Wir haben uns entschieden, das Limit auf 1 GiB zu erhöhen."),
            msg(A, "Erledigt, das Limit in deploy/values.yaml ist jetzt 1 GiB und der Job läuft "
                   "wieder durch."),
            msg(U, "Als Nächstes bitte die Dokumentation aktualisieren.")])
        r = self.c.summarize(conv)
        self.assertEqual(r.language, "de")
        self.assertSummaryShape(r, DE_HEADINGS)
        self.assertEqual(r.sections.intent,
                         "Der Import-Job bricht seit dem Update jede Nacht ab.")
        self.assertIn("Wir haben uns entschieden, das Limit auf 1 GiB zu erhöhen.",
                      list(r.sections.key_decisions))
        self.assertIn("deploy/values.yaml", r.summary)
        self.assertNotIn("Session intent", r.summary)

    def test_japanese_conversation_gets_a_japanese_summary(self):
        conv = conversation([
            msg(U, "夜間バッチが途中で止まります。原因を調べてください。"),
            msg(A, "ログを確認しました。メモリ上限は 2 GiB です。"),
            msg(U, "リリースは v3.1.0 で行うことに決めました。"),
            msg(A, "タイムアウトを 45 秒に延ばしました。"),
            msg(U, "次にドキュメントを更新してください。")])
        r = self.c.summarize(conv)
        self.assertEqual(r.language, "ja")
        self.assertSummaryShape(r, JA_HEADINGS)
        self.assertEqual(r.sections.intent, "夜間バッチが途中で止まります。")
        self.assertIn("リリースは v3.1.0 で行うことに決めました。", list(r.sections.key_decisions))
        self.assertIn("メモリ上限は 2 GiB です。", r.summary)

    def test_language_field_chooses_the_headings(self):
        r = self.c.summarize(work_conversation(), language="de-CH")
        self.assertEqual(r.language, "de")
        self.assertSummaryShape(r, DE_HEADINGS)

    def test_pii_never_reaches_the_summary_and_is_counted(self):
        r = self.c.summarize(pii_conversation(), summarizer=EXTRACTIVE, target_tokens=600)
        for value in PII.values():
            self.assertNotIn(value, r.summary)
            for item in list(r.sections.key_decisions) + list(r.sections.important_details):
                self.assertNotIn(value, item)
        self.assertIn("<EMAIL_1>", r.summary)
        counts = {common_pb2.PiiType.Name(c.type): c.count for c in r.redactions}
        self.assertEqual(counts.get("PII_TYPE_EMAIL"), 2)  # the same address twice
        for t in ("PII_TYPE_PHONE", "PII_TYPE_CARD_NUMBER", "PII_TYPE_SSN", "PII_TYPE_IPV4"):
            self.assertEqual(counts.get(t), 1, (t, counts))
        self.assertGreaterEqual(counts.get("PII_TYPE_API_KEY", 0), 2, counts)
        self.assertEqual(counts.get("PII_TYPE_SECRET"), 1, counts)

    def test_a_session_keeps_its_pseudonyms_across_requests(self):
        a, b = "alice@example.org", "bob@example.net"

        def labels(session, emails, client=None):
            conv = conversation([msg(U, f"Ticket from {e}: the export at /srv/export/{i}.csv "
                                        f"failed with code {500 + i}.")
                                 for i, e in enumerate(emails)])
            r = (client or self.c).summarize(conv, summarizer=EXTRACTIVE, session_id=session,
                                             target_tokens=600)
            for e in emails:
                self.assertNotIn(e, r.summary)
            return r.summary

        first = labels("sess-pseudo", [a])
        self.assertIn("Ticket from <EMAIL_1>", first)
        # The same session: a keeps <EMAIL_1> though b now comes first.
        again = labels("sess-pseudo", [b, a])
        self.assertIn("Ticket from <EMAIL_2>: the export at /srv/export/0.csv", again)
        self.assertIn("Ticket from <EMAIL_1>: the export at /srv/export/1.csv", again)
        # Another session, or the same session id of another tenant, starts afresh.
        other = labels("sess-other", [b, a])
        self.assertIn("Ticket from <EMAIL_1>: the export at /srv/export/0.csv", other)
        stranger = labels("sess-pseudo", [b], client=Client(self.srv))
        self.assertIn("Ticket from <EMAIL_1>", stranger)

    def test_bad_input_is_refused_with_the_field_named(self):
        s = self.c
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, s.stub.Summarize,
                            C.SummarizeRequest(), metadata=s.md, timeout=10,
                            contains="conversation")
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, s.summarize, conversation([]),
                            contains="conversation")
        for bad in (63, 2001, -5):
            self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, s.summarize,
                                work_conversation(), target_tokens=bad, contains="target_tokens")
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, s.summarize, work_conversation(),
                            summarizer=K.SUMMARIZER_KIND_NONE, contains="summarizer")
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, s.summarize, work_conversation(),
                            language="d e", contains="language")
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, s.summarize, work_conversation(),
                            focus="x" * 2001, contains="focus")
        # Garbage where JSON belongs, and garbage bytes as the whole request.
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, s.summarize,
                            common_pb2.Conversation(openai_json="\x01\x02{[garbage"),
                            contains="conversation")
        raw = s.stub._channel if hasattr(s.stub, "_channel") else None
        call = self.srv.channel().unary_unary("/ctxguard.v1.ContextService/Summarize",
                                              request_serializer=None,
                                              response_deserializer=None)
        for junk in (b"\xff" * 64, bytes(range(256)) * 4, b"\x0a\x05\x12\x03\xc3\x28\xff"):
            err = cgtest.rpc_error(call, junk, metadata=s.md, timeout=10)
            self.assertEqual(err.code(), grpc.StatusCode.INVALID_ARGUMENT, err.details())
        del raw
        # Still serving.
        self.assertEqual(s.summarize(work_conversation()).summarizer_used, EXTRACTIVE)


class SummarizeWithLLM(cgtest.TestCase):
    """Every path of the LLM summarizer; a breaker that does not open here (see below)."""

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        cls.addClassCleanup(cls.llm.close)
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_LLM_BASE_URL": cls.llm.url,
            "CTXGUARD_LLM_API_KEY": "test-key-123",
            "CTXGUARD_LLM_TIMEOUT_MS": "1500",
            "CTXGUARD_LLM_MAX_RETRIES": "2",
            "CTXGUARD_LLM_BREAKER_FAILURES": "1000",
            "CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        cls.c = Client(cls.srv)
        cls.http = test_http.http_port(cls.srv)

    def setUp(self):
        self.llm.control("")
        self.seen = len(self.llm.requests())

    def new_requests(self):
        return self.llm.requests()[self.seen:]

    def test_normal_answer_is_used(self):
        r = self.c.summarize(work_conversation(), focus="export")
        self.assertEqual(r.summarizer_used, LLM)
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_UNSPECIFIED)
        self.assertEqual(r.llm_model, "gpt-4o-mini")
        self.assertEqual(r.llm_attempts, 1)
        self.assertEqual(r.chunks, 0)
        self.assertEqual(r.sections.next_steps, ["fake summary"])
        self.assertIn("Summary of 2 messages", r.sections.intent)
        reqs = self.new_requests()
        self.assertEqual(len(reqs), 1)
        body = reqs[0]["body"]
        self.assertEqual(body["temperature"], 0.2)
        self.assertEqual(reqs[0]["headers"]["authorization"], "Bearer test-key-123")
        system = body["messages"][0]["content"]
        for h in EN_HEADINGS:
            self.assertIn(h + "\n", system)
        self.assertIn("Emphasise: export", system)
        # Every message reached the model, the first as well as the last.
        user = body["messages"][1]["content"]
        self.assertIn("The export job fails every night", user)
        self.assertIn("Step 0:", user)
        self.assertIn("docs/runbook.md", user)

    def metrics(self):
        status, _, text = test_http.get(self.http, "/metrics")
        self.assertEqual(status, 200)
        return text

    def test_metrics_count_the_llm_calls_and_what_compression_saved(self):
        def figures():
            text = self.metrics()
            value = lambda name, labels=None: (  # noqa: E731
                test_http.sample(text, name, labels) if labels is not None
                else test_http.sample_bare(text, name)) or 0
            return {"ok": value("ctxguard_llm_calls_total", 'result="OK"'),
                    "seconds": value("ctxguard_llm_call_seconds_count"),
                    "prompt": value("ctxguard_llm_tokens_total", 'kind="prompt"'),
                    "completion": value("ctxguard_llm_tokens_total", 'kind="completion"'),
                    "triggered": value("ctxguard_compress_calls_total", 'triggered="true"'),
                    "saved": sum(value("ctxguard_compression_tokens_saved_total",
                                       f'layer="{layer}"') for layer in
                                 ("NORMALIZE", "OFFLOAD", "TOOL_RESULT_COMPRESSION",
                                  "WRITE_COMPACTION", "STABLE_PREFIX_TRIM", "SLIDING_WINDOW",
                                  "SUMMARIZE"))}
        before = figures()
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.summarizer_used, LLM)
        after = figures()
        self.assertEqual(after["ok"] - before["ok"], 1)
        self.assertEqual(after["seconds"] - before["seconds"], 1)
        self.assertGreater(after["prompt"], before["prompt"], "the fake LLM reports its usage")
        self.assertGreater(after["completion"], before["completion"])
        # A Compress over its trigger: counted, and what its layers saved.
        body = {"messages": [{"role": "user", "content": f"Step {i}: " + "details here " * 60}
                             for i in range(40)]}
        resp = self.c.stub.Compress(C.CompressRequest(
            conversation=common_pb2.Conversation(openai_json=json.dumps(body)), model="gpt-4o",
            context_window_tokens=8000, summarizer=C.SUMMARIZER_KIND_EXTRACTIVE),
            metadata=self.c.md, timeout=60)
        self.assertTrue(resp.report.triggered)
        final = figures()
        self.assertEqual(final["triggered"] - after["triggered"], 1)
        self.assertEqual(final["saved"] - after["saved"],
                         resp.report.tokens_before - resp.report.tokens_after)

    def test_the_llms_tokens_are_charged_to_a_scope(self):
        """Issue 16 item 6: with charge_scope the summarizer's LLM call is reserved and then
        committed with the usage the LLM reported (the fake's prompt and completion
        counts); a HARD limit too small for it means the LLM is not asked (AUTO falls back
        with BUDGET_EXHAUSTED, LLM gets RESOURCE_EXHAUSTED); Compress's summary layer too."""
        budget = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        s = "charge-" + uuid.uuid4().hex[:8]
        budget.SetBudget(budget_pb2.SetBudgetRequest(
            scope=common_pb2.Scope(session_id=s), settings=budget_pb2.BudgetSettings(
                limit_tokens=1_000_000, mode=budget_pb2.BUDGET_MODE_HARD)),
            metadata=self.c.md, timeout=10)
        r = self.c.summarize(work_conversation(), charge_scope=common_pb2.Scope(session_id=s))
        self.assertEqual(r.summarizer_used, LLM)
        body = self.new_requests()[-1]["body"]
        # The fake's usage: a token per four characters of the messages and of the answer.
        self.assertEqual(r.charged_input_tokens,
                         max(1, sum(len(m["content"]) for m in body["messages"]) // 4))
        self.assertGreater(r.charged_output_tokens, 0)
        got = budget.GetUsage(budget_pb2.GetUsageRequest(scope=common_pb2.Scope(session_id=s)),
                              metadata=self.c.md, timeout=10).root
        self.assertEqual(got.used_tokens, r.charged_input_tokens + r.charged_output_tokens)
        self.assertEqual(got.reserved_tokens, 0, "the hold was settled")
        # Compress's summary layer charges the same way.
        pol = C.CompressionPolicy(target_ratio=0.2, reserved_output_tokens=0,
                                  disabled_layers=[C.COMPRESSION_LAYER_SLIDING_WINDOW])
        before = got.used_tokens
        done = self.c.stub.Compress(C.CompressRequest(
            conversation=common_pb2.Conversation(openai_json=json.dumps(
                {"messages": [{"role": "user", "content": f"Step {i}: " + "look again. " * 30}
                              if i % 2 == 0 else
                              {"role": "assistant", "content": "Looked. " * 30}
                              for i in range(40)]})),
            model="gpt-4o", context_window_tokens=6000, policy=pol, force=True,
            summarizer=LLM, charge_scope=common_pb2.Scope(session_id=s)),
            metadata=self.c.md, timeout=30)
        self.assertTrue(done.report.HasField("summary"), done.report.layers)
        charged = done.report.summary.charged_input_tokens + \
            done.report.summary.charged_output_tokens
        self.assertGreater(charged, 0)
        got = budget.GetUsage(budget_pb2.GetUsageRequest(scope=common_pb2.Scope(session_id=s)),
                              metadata=self.c.md, timeout=10).root
        self.assertEqual(got.used_tokens - before, charged)
        # A limit the call cannot fit: the LLM is not asked.
        tight = "tight-" + uuid.uuid4().hex[:8]
        budget.SetBudget(budget_pb2.SetBudgetRequest(
            scope=common_pb2.Scope(session_id=tight), settings=budget_pb2.BudgetSettings(
                limit_tokens=50, mode=budget_pb2.BUDGET_MODE_HARD)),
            metadata=self.c.md, timeout=10)
        asked = len(self.llm.requests())
        r = self.c.summarize(work_conversation(), charge_scope=common_pb2.Scope(session_id=tight))
        self.assertEqual(r.summarizer_used, EXTRACTIVE)
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_BUDGET_EXHAUSTED)
        self.assertIn("charge_scope", r.fallback_detail)
        self.assertEqual(len(self.llm.requests()), asked, "the LLM was asked anyway")
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.c.summarize,
                            work_conversation(), summarizer=LLM,
                            charge_scope=common_pb2.Scope(session_id=tight),
                            contains=("not asked",))
        self.assertEqual(len(self.llm.requests()), asked)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.c.summarize,
                            work_conversation(), charge_scope=common_pb2.Scope(),
                            contains=("charge_scope",))

    def test_german_conversation_prompt_asks_for_german_headings(self):
        conv = conversation([msg(U, "Bitte prüfe, warum der Build seit gestern so langsam ist "
                                    "und die Tests ständig abbrechen, wir brauchen das bald."),
                             msg(A, "Ich sehe mir die Logs und die Konfiguration des Runners an, "
                                    "dann melde ich mich mit einer Zusammenfassung.")] * 6)
        r = self.c.summarize(conv)
        self.assertEqual(r.summarizer_used, LLM, r.fallback_detail)
        self.assertEqual(r.language, "de")
        system = self.new_requests()[0]["body"]["messages"][0]["content"]
        for h in DE_HEADINGS:
            self.assertIn(h + "\n", system)

    def test_slow_answer_times_out(self):
        self.llm.control("slow:4000")
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.summarizer_used, EXTRACTIVE)
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_TIMEOUT, r.fallback_detail)
        self.assertIn("## Session intent", r.summary)  # nothing lost: a summary all the same
        err = self.assertRpcError(grpc.StatusCode.UNAVAILABLE, self.c.summarize,
                                  work_conversation(), summarizer=LLM, contains="TIMEOUT")
        del err

    def test_rate_limited_then_answered_after_retry_after(self):
        self.llm.control("status:429:1:ram=300")
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.summarizer_used, LLM, r.fallback_detail)
        self.assertEqual(r.llm_attempts, 2)
        reqs = self.new_requests()
        self.assertEqual(len(reqs), 2)
        # The fake stamps a request when it arrives; the answer left a little later.
        self.assertGreaterEqual(reqs[1]["ts"] - reqs[0]["ts"], 0.29)

    def test_server_errors_after_retries_fall_back(self):
        self.llm.control("status:500:all:ra=0")
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.summarizer_used, EXTRACTIVE)
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_LLM_ERROR, r.fallback_detail)
        self.assertEqual(r.llm_attempts, 3)
        self.assertEqual(len(self.new_requests()), 3)
        self.assertRpcError(grpc.StatusCode.UNAVAILABLE, self.c.summarize, work_conversation(),
                            summarizer=LLM, contains="500")

    def test_rate_limited_after_retries_falls_back(self):
        self.llm.control("status:429:all:ram=20")
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_RATE_LIMITED,
                         r.fallback_detail)
        self.assertEqual(r.summarizer_used, EXTRACTIVE)

    def test_garbage_answer_is_invalid_output(self):
        for behaviour in ("garbage", "nochoices", "blank"):
            self.llm.control(behaviour)
            r = self.c.summarize(work_conversation())
            self.assertEqual(r.summarizer_used, EXTRACTIVE)
            self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_INVALID_OUTPUT,
                             (behaviour, r.fallback_detail))

    def test_answer_without_sections_is_invalid_output(self):
        self.llm.control("echo")  # the transcript back: no section headings
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_INVALID_OUTPUT,
                         r.fallback_detail)
        self.assertIn("heading", r.fallback_detail)

    def test_answer_longer_than_the_input_is_not_smaller(self):
        self.llm.control("long")  # every text three times, the prompt's headings included
        r = self.c.summarize(work_conversation())
        self.assertEqual(r.summarizer_used, EXTRACTIVE)
        self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_NOT_SMALLER,
                         r.fallback_detail)
        self.assertLess(r.summary_tokens, r.input_tokens)
        self.assertRpcError(grpc.StatusCode.UNAVAILABLE, self.c.summarize, work_conversation(),
                            summarizer=LLM, contains="not smaller")

    def test_no_raw_pii_reaches_the_llm(self):
        r = self.c.summarize(pii_conversation())
        self.assertEqual(r.summarizer_used, LLM, r.fallback_detail)
        reqs = self.new_requests()
        self.assertEqual(len(reqs), 1)
        sent = json.dumps(reqs[0]["body"], ensure_ascii=False)
        for value in PII.values():
            self.assertNotIn(value, sent)
        self.assertNotIn("4111111111111111", sent.replace(" ", ""))
        self.assertIn("<EMAIL_1>", sent)
        self.assertIn("<PHONE_1>", sent)
        self.assertIn("<CARD_NUMBER_1>", sent)
        # Same value, same label: the address appears twice as <EMAIL_1>, no <EMAIL_2>.
        user = reqs[0]["body"]["messages"][1]["content"]
        self.assertEqual(user.count("<EMAIL_1>"), 2)
        self.assertNotIn("<EMAIL_2>", sent)
        for value in PII.values():
            self.assertNotIn(value, r.summary)

    def test_long_input_is_summarized_hierarchically(self):
        filler = "The nightly export read another batch of records and wrote them out. " * 40
        ms = [msg(U, "Summarize the export investigation.")]
        for i in range(150):
            ms.append(msg(A, f"Batch {i}: {filler}"))
            ms.append(msg(U, "Continue."))
        r = self.c.summarize(conversation(ms), timeout=60)
        self.assertEqual(r.summarizer_used, LLM, r.fallback_detail)
        self.assertGreaterEqual(r.chunks, 2)
        reqs = self.new_requests()
        self.assertEqual(len(reqs), r.chunks + 1)
        for q in reqs[:-1]:
            self.assertIn("one part of a longer session", q["body"]["messages"][0]["content"])
            self.assertLessEqual(len(q["body"]["messages"][1]["content"].encode()), 256 * 1024)
        final = reqs[-1]["body"]["messages"]
        self.assertNotIn("one part of a longer session", final[0]["content"])
        self.assertIn("fake summary", final[1]["content"])  # the parts' summaries, merged
        # The first and the last batch were both read by the model.
        parts = "".join(q["body"]["messages"][1]["content"] for q in reqs[:-1])
        self.assertIn("Batch 0:", parts)
        self.assertIn("Batch 149:", parts)


class SummarizeBreaker(cgtest.TestCase):
    """The shared breaker opens after failed calls, refuses without HTTP, and closes."""

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        cls.addClassCleanup(cls.llm.close)
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_LLM_BASE_URL": cls.llm.url,
            "CTXGUARD_LLM_MAX_RETRIES": "0",
            "CTXGUARD_LLM_BREAKER_FAILURES": "2",
            "CTXGUARD_LLM_BREAKER_COOLDOWN_MS": "1500",
            "CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        cls.c = Client(cls.srv)
        cls.http = test_http.http_port(cls.srv)

    def breaker_state(self):
        text = test_http.get(self.http, "/metrics")[2]
        return test_http.sample_bare(text, "ctxguard_llm_breaker_state")

    def test_breaker_opens_and_closes(self):
        self.assertEqual(self.breaker_state(), 0, "closed")
        self.llm.control("status:503:all")
        for _ in range(2):
            r = self.c.summarize(work_conversation())
            self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_LLM_ERROR)
            self.assertTrue(r.summary)
        before = len(self.llm.requests())
        for _ in range(3):
            r = self.c.summarize(work_conversation())
            self.assertEqual(r.summarizer_used, EXTRACTIVE)
            self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_CIRCUIT_OPEN,
                             r.fallback_detail)
            self.assertEqual(r.llm_attempts, 0)
            self.assertIn("## Session intent", r.summary)  # nothing lost
        self.assertRpcError(grpc.StatusCode.UNAVAILABLE, self.c.summarize, work_conversation(),
                            summarizer=LLM, contains="CIRCUIT_OPEN")
        self.assertEqual(len(self.llm.requests()), before, "an open breaker sent requests")
        self.assertIn(self.breaker_state(), (1, 2), "open (or half-open once the cool-down ends)")
        # The endpoint recovers; after the cool-down one probe goes through and closes it.
        self.llm.control("")
        deadline = time.monotonic() + 15
        while True:
            r = self.c.summarize(work_conversation())
            if r.summarizer_used == LLM:
                break
            self.assertEqual(r.fallback_reason, R.SUMMARY_FALLBACK_REASON_CIRCUIT_OPEN)
            self.assertLess(time.monotonic(), deadline, "the breaker never closed")
            time.sleep(0.1)  # polling the cool-down, not waiting out a race
        for _ in range(3):
            self.assertEqual(self.c.summarize(work_conversation()).summarizer_used, LLM)
        self.assertEqual(self.breaker_state(), 0, "closed again")


class SummarizeCtl(cgtest.TestCase):
    """`ctxguardctl summarize FILE` against a server with the fake LLM."""

    @classmethod
    def setUpClass(cls):
        cls.llm = FakeLLM()
        cls.addClassCleanup(cls.llm.close)
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_LLM_BASE_URL": cls.llm.url,
                                                      "CTXGUARD_LLM_MAX_RETRIES": "0"})
        t = cls.srv.create_tenant()
        cls.key = cls.srv.create_key(t.tenant_id).secret

    def ctl(self, *args, expect=0, stdin=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_KEY"] = self.key
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=60, input=stdin)
        self.assertEqual(proc.returncode, expect,
                         f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def test_summarize_a_file(self):
        path = os.path.join(cgtest.SOURCE_DIR, "tests", "data", "summary", "heldout-de-infra.json")
        out = self.ctl("summarize", path, "--summarizer", "extractive", "--tokens", "300").stdout
        for h in DE_HEADINGS:
            self.assertIn(h + "\n", out)
        self.assertIn("/etc/nginx/conf.d/upstream.conf", out)
        self.assertIn("summarizer=EXTRACTIVE fallback=REQUESTED", out)
        self.assertIn("language=de", out)
        tokens = int(out.split(" tokens=")[1].split()[0])
        self.assertLessEqual(tokens, 300)

    def test_summarize_json_and_llm_and_stdin(self):
        conv = json.dumps([{"role": "user", "content": "Mail jane.doe@example.com about the "
                                                         "outage of the export job, please. "
                                                         * 20},
                           {"role": "assistant", "content": "I will write the mail today and "
                                                            "attach the incident timeline. " * 20}])
        got = json.loads(self.ctl("--json", "summarize", "-", stdin=conv).stdout)
        self.assertEqual(got["summarizer_used"], "SUMMARIZER_KIND_LLM")
        self.assertIn({"type": "PII_TYPE_EMAIL", "count": 20}, got["redactions"])
        self.assertNotIn("jane.doe@example.com", json.dumps(self.llm.requests()))

    def test_anthropic_file_is_detected_and_keeps_its_system_prompt(self):
        conv = json.dumps({"system": "Goal: migrate the billing database to PostgreSQL 15 "
                                     "by Friday.",
                           "messages": [{"role": "user", "content": "Start with the schema."},
                                        {"role": "assistant",
                                         "content": [{"type": "text",
                                                      "text": "I dumped the schema first."}]}]})
        got = json.loads(self.ctl("--json", "summarize", "-", "--summarizer", "extractive",
                                  stdin=conv).stdout)
        self.assertEqual(got["messages_summarized"], 3, "system, user and assistant")
        forced = json.loads(self.ctl("--json", "summarize", "-", "--format", "openai",
                                     "--summarizer", "extractive", stdin=conv).stdout)
        self.assertEqual(forced["messages_summarized"], 2, "read as OpenAI JSON: no system")

    def test_usage_and_server_errors(self):
        err = self.ctl("summarize", "/nonexistent/conv.json", expect=1).stderr
        self.assertIn("No such file", err)
        self.assertIn("--summarizer", self.ctl("summarize", "x.json", "--summarizer", "magic",
                                               expect=2).stderr)
        err = self.ctl("summarize", "-", "--tokens", "5000", expect=1,
                       stdin='[{"role":"user","content":"hi"}]').stderr
        self.assertIn("INVALID_ARGUMENT", err)
        self.assertIn("target_tokens", err)
        err = self.ctl("summarize", "-", expect=1, stdin="\x01 not json").stderr
        self.assertIn("conversation", err)


if __name__ == "__main__":
    import unittest
    unittest.main()
