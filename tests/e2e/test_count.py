"""CountTokens: exact counts with OpenAI chat accounting (checked against OpenAI's published
example and against the C counter, build/bin/tok_count), estimates for models without a
public tokenizer, bad input, and online calibration from Commit / RecordUsage (convergence,
drift, one use per estimate, tenant isolation), on the batched and the one-request write
paths. Also: the server refuses to start without valid token data."""

import json
import os
import subprocess
import tempfile
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2, context_pb2, context_pb2_grpc

C = context_pb2
B = budget_pb2
CL100K = C.TOKEN_ENCODING_CL100K_BASE
O200K = C.TOKEN_ENCODING_O200K_BASE
EXACT = C.TOKEN_COUNT_METHOD_EXACT
ESTIMATED = C.TOKEN_COUNT_METHOD_ESTIMATED
CALIBRATED = C.TOKEN_COUNT_METHOD_CALIBRATED

# OpenAI's cookbook ("How to count tokens with tiktoken"): num_tokens_from_messages gives
# 129 for gpt-4 / gpt-3.5-turbo (cl100k_base) and 124 for gpt-4o (o200k_base).
COOKBOOK = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that "
                                  "translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user",
     "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant",
     "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user",
     "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
                "for increased leverage."},
    {"role": "system", "name": "example_assistant",
     "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean "
                                "for the client deliverable."},
]


def tok_count(texts):
    """The C counter's (cl100k, cl100k_special, o200k, o200k_special) of each text."""
    exe = os.path.join(cgtest.require_env("CG_BUILD_DIR"), "bin", "tok_count")
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, t in enumerate(texts):
            p = os.path.join(d, f"{i}.txt")
            with open(p, "wb") as f:
                f.write(t.encode() if isinstance(t, str) else t)
            paths.append(p)
        out = subprocess.run([exe] + paths, capture_output=True, text=True, check=True,
                             timeout=60).stdout.split("\n")
    return [tuple(int(x) for x in line.split()) for line in out if line.strip()]


def text_msg(role, text, name=""):
    return common_pb2.Message(role=role, name=name, parts=[common_pb2.MessagePart(text=text)])


def structured(msgs, tools=()):
    return common_pb2.Conversation(messages=common_pb2.MessageList(messages=msgs), tools=tools)


class Count(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def setUp(self):
        t = self.srv.create_tenant()
        self.md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
        self.ctx = context_pb2_grpc.ContextServiceStub(self.srv.channel())

    def count(self, md=None, **kw):
        return self.ctx.CountTokens(C.CountTokensRequest(**kw),
                                    metadata=self.md if md is None else md, timeout=30)

    # ---------------------------------------------------------------- exact ---------

    def test_openai_cookbook_example(self):
        conv = common_pb2.Conversation(openai_json=json.dumps({"messages": COOKBOOK}))
        for model, enc, want in (("gpt-4", CL100K, 129), ("gpt-3.5-turbo", CL100K, 129),
                                 ("gpt-4o", O200K, 124)):
            with self.subTest(model=model):
                r = self.count(conversation=conv, model=model)
                self.assertEqual(r.total_tokens, want)
                self.assertEqual(r.method, EXACT)
                self.assertEqual(r.encoding, enc)
                self.assertEqual(r.error_bound_tokens, 0)
                self.assertEqual(r.estimate_id, "", "exact counts need no calibration")
                self.assertEqual(len(r.message_tokens), 6)
                self.assertEqual(sum(r.message_tokens) + 3, r.total_tokens, "reply priming")
                self.assertGreater(r.context_window_tokens, 0)
                b = r.breakdown
                self.assertEqual(b.content_tokens + b.overhead_tokens, r.total_tokens)

    def test_text_matches_the_c_counter_with_and_without_specials(self):
        texts = ["hello world", "tiktoken is great!", "Привет, мир! 你好，世界 🙂👍🏽",
                 "x <|endoftext|> y <|endofprompt|>", " " * 300 + "\n\n\t" + "1234567890" * 20]
        ref = tok_count(texts)
        for t, (cl, cl_sp, o2, o2_sp) in zip(texts, ref):
            for enc, plain, special in ((CL100K, cl, cl_sp), (O200K, o2, o2_sp)):
                with self.subTest(text=t[:20], enc=enc):
                    r = self.count(text=t, encoding=enc)
                    self.assertEqual((r.total_tokens, r.breakdown.text_tokens), (plain, plain))
                    self.assertEqual(r.method, EXACT)
                    r = self.count(text=t, encoding=enc, allow_special_tokens=True)
                    self.assertEqual(r.total_tokens, special)
        self.assertEqual(ref[0], (2, 2, 2, 2))
        self.assertLess(ref[3][1] + 6, ref[3][0], "the specials are 1 token each when allowed")

    def test_structured_openai_and_anthropic_forms_count_alike(self):
        rows = [("user", "What is the capital of France?"),
                ("assistant", "Paris. Anything else? Ça va?"),
                ("user", "No, thanks — 谢谢")]
        role = {"user": common_pb2.ROLE_USER, "assistant": common_pb2.ROLE_ASSISTANT,
                "system": common_pb2.ROLE_SYSTEM}
        msgs = [text_msg(common_pb2.ROLE_SYSTEM, "Be brief.")] + [text_msg(role[r], t)
                                                                  for r, t in rows]
        a = self.count(conversation=structured(msgs), model="gpt-4.1")
        o = self.count(conversation=common_pb2.Conversation(openai_json=json.dumps(
            [{"role": "system", "content": "Be brief."}]
            + [{"role": r, "content": t} for r, t in rows])), model="gpt-4.1")
        n = self.count(conversation=common_pb2.Conversation(anthropic_json=json.dumps(
            {"system": "Be brief.", "messages": [{"role": r, "content": t} for r, t in rows]})),
            encoding=O200K)
        self.assertEqual(list(a.message_tokens), list(o.message_tokens))
        self.assertEqual(list(a.message_tokens), list(n.message_tokens))
        self.assertEqual(a.total_tokens, n.total_tokens)
        # Per message: 3 + role + content (OpenAI's accounting), from the C counter.
        ref = tok_count(["system", "Be brief."] + [x for r, t in rows for x in (r, t)])
        want = [3 + ref[2 * i][2] + ref[2 * i + 1][2] for i in range(4)]
        self.assertEqual(list(a.message_tokens), want)
        self.assertEqual(a.total_tokens, sum(want) + 3)

    def test_text_and_conversation_add_up(self):
        conv = structured([text_msg(common_pb2.ROLE_USER, "hi there")])
        only = self.count(conversation=conv, encoding=CL100K)
        both = self.count(conversation=conv, text="hello world", encoding=CL100K)
        self.assertEqual(both.total_tokens, only.total_tokens + 2)
        self.assertEqual(both.breakdown.text_tokens, 2)

    def test_tool_definitions_count_as_their_compact_json(self):
        params = {"type": "object", "properties": {"city": {"type": "string"}},
                  "required": ["city"]}
        tool = common_pb2.ToolDefinition(name="get_weather", description="Weather \"now\"\nin a city",
                                         parameters_json=json.dumps(params))
        conv = structured([text_msg(common_pb2.ROLE_USER, "Weather in Oslo?")], tools=[tool])
        r = self.count(conversation=conv, model="gpt-4o")
        rendered = json.dumps({"type": "function", "function": {
            "name": "get_weather", "description": "Weather \"now\"\nin a city",
            "parameters": params}}, separators=(",", ":"), ensure_ascii=False)
        # parameters are kept as given: the Python dump of the schema is that text here.
        rendered = rendered.replace(json.dumps(params, separators=(",", ":")), json.dumps(params))
        self.assertEqual(r.breakdown.tool_definition_tokens, tok_count([rendered])[0][2])
        no_tools = self.count(conversation=structured([text_msg(common_pb2.ROLE_USER,
                                                                "Weather in Oslo?")]), model="gpt-4o")
        self.assertEqual(r.total_tokens - no_tools.total_tokens,
                         r.breakdown.tool_definition_tokens)

    def test_tool_definition_escapes_match_json(self):
        desc = "ctl \x01\x1f\b\f\t\r\n quote \" back \\ del \x7f ünï 😀" * 40
        tool = common_pb2.ToolDefinition(name="t", description=desc)
        r = self.count(conversation=structured([], tools=[tool]), encoding=CL100K)
        rendered = json.dumps({"type": "function", "function": {"name": "t", "description": desc}},
                              separators=(",", ":"), ensure_ascii=False)
        self.assertEqual(r.total_tokens, tok_count([rendered])[0][0])
        self.assertEqual(list(r.message_tokens), [])

    def test_tool_calls_and_results(self):
        call = common_pb2.MessagePart(tool_call=common_pb2.ToolCall(
            id="call_1", name="get_weather", arguments_json='{"city":"Oslo"}'))
        result = common_pb2.MessagePart(tool_result=common_pb2.ToolResult(
            tool_call_id="call_1", content="12 degrees, rain"))
        conv = structured([common_pb2.Message(role=common_pb2.ROLE_ASSISTANT, parts=[call]),
                           common_pb2.Message(role=common_pb2.ROLE_TOOL, parts=[result])])
        r = self.count(conversation=conv, encoding=O200K)
        ref = [x[2] for x in tok_count(["assistant", "get_weather", '{"city":"Oslo"}', "tool",
                                         "12 degrees, rain"])]
        self.assertEqual(list(r.message_tokens),
                         [3 + ref[0] + ref[1] + ref[2] + 3, 3 + ref[3] + ref[4]])

    def test_images_by_dimensions(self):
        def img(w, h, detail=""):
            return structured([common_pb2.Message(role=common_pb2.ROLE_USER, parts=[
                common_pb2.MessagePart(image=common_pb2.ImageContent(
                    media_type="image/png", width=w, height=h, url="https://x.test/a.png",
                    detail=detail))])])
        # OpenAI's tile rule: 1024x1024 -> 768x768 -> 4 tiles: 85 + 4 * 170.
        self.assertEqual(self.count(conversation=img(1024, 1024), model="gpt-4o")
                         .breakdown.image_tokens, 765)
        self.assertEqual(self.count(conversation=img(512, 512), model="gpt-4o")
                         .breakdown.image_tokens, 255)
        self.assertEqual(self.count(conversation=img(4000, 3000, "low"), model="gpt-4o")
                         .breakdown.image_tokens, 85)
        self.assertEqual(self.count(conversation=img(0, 0), model="gpt-4o")
                         .breakdown.image_tokens, 765, "unknown size: a 1024x1024 image")

    def test_a_large_request_is_counted_on_the_pool_alike(self):
        text = ("The quick brown fox jumps over the lazy dog 42 times. Привет! " * 6000)
        ref = tok_count([text])[0]
        self.assertGreater(len(text.encode()), 64 * 1024)
        r = self.count(text=text, model="gpt-4")
        self.assertEqual(r.total_tokens, ref[0])
        r = self.count(text=text, model="o3-mini")
        self.assertEqual(r.total_tokens, ref[2])

    # ---------------------------------------------------------------- estimates -----

    def test_models_without_a_tokenizer_are_estimated(self):
        conv = common_pb2.Conversation(openai_json=json.dumps({"messages": COOKBOOK}))
        r = self.count(conversation=conv, model="claude-sonnet-4-5")
        self.assertEqual(r.method, ESTIMATED)
        self.assertEqual(r.encoding, C.TOKEN_ENCODING_UNSPECIFIED)
        self.assertEqual(r.estimator_profile, "claude")
        self.assertGreater(r.error_bound_tokens, 0)
        self.assertTrue(r.estimate_id)
        self.assertEqual(len(r.message_tokens), 6)
        self.assertGreater(r.context_window_tokens, 0)
        self.assertTrue(90 <= r.total_tokens <= 200, r.total_tokens)
        u = self.count(conversation=conv, model="no-such-model-7")
        self.assertEqual((u.method, u.estimator_profile, u.context_window_tokens),
                         (ESTIMATED, "default", 0), "unknown model: the default estimator")
        self.assertNotEqual(u.estimate_id, r.estimate_id)
        # A named encoding wins over the model's estimator; the window stays the model's.
        e = self.count(conversation=conv, model="claude-sonnet-4-5", encoding=CL100K)
        self.assertEqual((e.method, e.total_tokens), (EXACT, 129))
        self.assertEqual(e.context_window_tokens, r.context_window_tokens)

    # ---------------------------------------------------------------- bad input -----

    def test_bad_requests_name_the_field(self):
        code = grpc.StatusCode.INVALID_ARGUMENT
        self.assertRpcError(code, self.count, contains="conversation")
        self.assertRpcError(code, self.count, text="x", encoding=7, contains="encoding")
        self.assertRpcError(code, self.count, text="x", model="m" * 201, contains="model")
        self.assertRpcError(code, self.count, conversation=common_pb2.Conversation(
            openai_json='{"messages": [{"role": "user", "content": "a"}, {"role": "bot"}]}'),
            contains=("conversation.openai_json", "$.messages[1]"))
        self.assertRpcError(code, self.count, conversation=common_pb2.Conversation(
            openai_json='{"messages": [ '), contains="conversation.openai_json")
        self.assertRpcError(code, self.count, conversation=common_pb2.Conversation(
            anthropic_json="[" * 500 + "]" * 500), contains="conversation.anthropic_json")
        self.assertRpcError(code, self.count, conversation=common_pb2.Conversation(),
                            contains="conversation")
        self.assertRpcError(code, self.count, conversation=structured(
            [common_pb2.Message(role=common_pb2.ROLE_USER)] * 200001),
            contains="conversation.messages")

    def test_invalid_utf8_is_refused_at_the_wire(self):
        call = self.srv.channel().unary_unary("/ctxguard.v1.ContextService/CountTokens")
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, call, b"\x12\x03a\xff\xfe",
                            metadata=self.md, timeout=10, contains="text")

    def test_needs_a_tenant_key(self):
        self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, self.count, md=(), text="x",
                            encoding=CL100K)
        self.assertRpcError(grpc.StatusCode.PERMISSION_DENIED, self.count,
                            md=self.srv.admin_md(), text="x", encoding=CL100K)


class CountWithoutPostgres(cgtest.TestCase):
    """Counting needs no database: exact counts go on, estimates go on uncalibrated and
    without an estimate_id. The shared PostgreSQL stays up; the server reaches it through a
    proxy this test cuts."""

    def test_counts_while_postgres_is_unreachable(self):
        host, port = cgtest.dsn_host_port(cgtest.pg_dsn())
        proxy = cgtest.TcpProxy(host, port)
        self.addCleanup(proxy.close)
        dsn = cgtest.dsn_with_host_port(cgtest.pg_dsn(), "127.0.0.1", proxy.port)
        srv = cgtest.start_server(self, pg=dsn, env={"CTXGUARD_PG_CONNECT_TIMEOUT_MS": "500"})
        t = srv.create_tenant()
        md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        ctx = context_pb2_grpc.ContextServiceStub(srv.channel())
        conv = common_pb2.Conversation(openai_json=json.dumps(COOKBOOK))
        before = ctx.CountTokens(C.CountTokensRequest(conversation=conv, model="claude-3-haiku"),
                                 metadata=md, timeout=10)
        self.assertTrue(before.estimate_id)
        proxy.cut()
        r = ctx.CountTokens(C.CountTokensRequest(conversation=conv, model="gpt-4"), metadata=md,
                            timeout=10)
        self.assertEqual((r.method, r.total_tokens), (EXACT, 129))
        e = ctx.CountTokens(C.CountTokensRequest(conversation=conv, model="claude-3-haiku"),
                            metadata=md, timeout=10)
        self.assertEqual((e.method, e.estimate_id), (ESTIMATED, ""))
        self.assertEqual(e.total_tokens, before.total_tokens)
        # The server logs before it answers, but its log reaches this process through a pipe
        # read by another thread: wait for the line (bounded) rather than race it.
        self.assertIsNotNone(srv.err.wait_for("estimate not recorded", timeout=10),
                             srv.log_text())


class Calibration(cgtest.TestCase):
    """A synthetic provider whose tokenizer makes RATIO x the default estimate."""

    RATIO = 1.6
    env = None

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env=cls.env)

    def tenant(self):
        t = self.srv.create_tenant()
        md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
        scope = common_pb2.Scope(session_id="cal-" + uuid.uuid4().hex[:6])
        budget_pb2_grpc.BudgetServiceStub(self.srv.channel()).SetBudget(
            B.SetBudgetRequest(scope=scope, settings=B.BudgetSettings(
                limit_tokens=10 ** 9, backpressure_disabled=True)), metadata=md, timeout=10)
        return t.tenant_id, md, scope

    def setUp(self):
        self.ctx = context_pb2_grpc.ContextServiceStub(self.srv.channel())
        self.budget = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())

    def conv(self, i):
        text = f"Step {i}: read the log, fix the failing test in src/parser.c, line {i * 7}. " * 5
        return structured([text_msg(common_pb2.ROLE_USER, text)])

    def estimate(self, md, i, model="claude-opus-4"):
        return self.ctx.CountTokens(C.CountTokensRequest(conversation=self.conv(i), model=model),
                                    metadata=md, timeout=10)

    def raw(self, md, i):
        """The uncalibrated estimate of conversation i (a tenant that never calibrated)."""
        return self.estimate(md, i, model="claude-opus-4-raw").total_tokens

    def commit(self, md, scope, estimate_id, provider, via_record=False):
        usage = common_pb2.TokenUsage(input_tokens=provider, output_tokens=10)
        if via_record:
            return self.budget.RecordUsage(B.RecordUsageRequest(
                scope=scope, usage=usage, model="claude-opus-4", idempotency_key=uuid.uuid4().hex,
                estimate_id=estimate_id), metadata=md, timeout=10)
        res = self.budget.Reserve(B.ReserveRequest(scope=scope, tokens=provider + 10,
                                                   model="claude-opus-4",
                                                   estimate_id=estimate_id),
                                  metadata=md, timeout=10)
        return self.budget.Commit(B.CommitRequest(
            reservation_id=res.reservation.reservation_id, usage=usage,
            provider_input_tokens=provider), metadata=md, timeout=10)

    def run_provider(self, md, scope, ratio, steps, start):
        """Counts, then commits the provider's count; returns the relative errors."""
        errors = []
        for i in range(start, start + steps):
            e = self.estimate(md, i)
            truth = round(ratio * self.raw(md, i))
            errors.append(abs(e.total_tokens - truth) / truth)
            done = self.commit(md, scope, e.estimate_id, truth, via_record=i % 3 == 2)
            self.assertTrue(done.calibration_updated, f"step {i}")
            self.assertGreater(done.calibration_factor, 1.0)
        return errors, e

    def test_error_shrinks_toward_zero_and_follows_drift(self):
        _, md, scope = self.tenant()
        errors, last = self.run_provider(md, scope, self.RATIO, 6, 0)
        self.assertEqual(self.estimate(md, 0, model="claude-opus-4-raw").method, ESTIMATED)
        self.assertGreater(errors[0], 0.3, "uncalibrated: about 1 - 1/1.6 off")
        self.assertLess(errors[-1], 0.03, errors)
        self.assertEqual(last.method, CALIBRATED)
        self.assertEqual(last.calibration.samples, 5)
        self.assertGreater(last.calibration.updated_at_unix_ms, 0)
        # The provider changes: later samples weigh at least 0.2 each.
        drift, last = self.run_provider(md, scope, 2.2, 14, 100)
        self.assertGreater(drift[0], 0.2)
        self.assertLess(drift[-1], 0.05, drift)
        self.assertTrue(all(b <= a + 0.02 for a, b in zip(drift, drift[1:])), drift)
        self.assertTrue(1.9 < last.calibration.factor <= 2.2, last.calibration)

    def test_an_estimate_calibrates_once_and_only_its_tenant(self):
        _, md_a, scope_a = self.tenant()
        _, md_b, scope_b = self.tenant()
        e = self.estimate(md_a, 1)
        self.assertEqual(e.method, ESTIMATED)
        truth = round(self.RATIO * e.total_tokens)
        # Tenant B cannot use A's estimate.
        self.assertFalse(self.commit(md_b, scope_b, e.estimate_id, truth).calibration_updated)
        self.assertTrue(self.commit(md_a, scope_a, e.estimate_id, truth).calibration_updated)
        again = self.commit(md_a, scope_a, e.estimate_id, truth, via_record=True)
        self.assertFalse(again.calibration_updated, "an estimate is used once")
        self.assertEqual(again.calibration_factor, 1.0)
        self.assertEqual(self.estimate(md_a, 2).method, CALIBRATED)
        b = self.estimate(md_b, 2)
        self.assertEqual(b.method, ESTIMATED, "tenant A's factor is not B's")
        self.assertFalse(b.HasField("calibration"))
        # Unknown ids and commits without one change nothing and never fail the commit.
        self.assertFalse(self.commit(md_b, scope_b, "no-such-estimate", 100).calibration_updated)
        self.assertFalse(self.commit(md_b, scope_b, "", 100).calibration_updated)
        self.assertEqual(self.estimate(md_b, 3).method, ESTIMATED)


class CalibrationOneByOne(Calibration):
    """The same on the one-request write path (write_batching off)."""

    env = {"CTXGUARD_WRITE_BATCHING": "false"}


class ModelMap(cgtest.TestCase):
    """The model_map setting adds models and re-maps names without a new build."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_MODEL_MAP": "acme-lm=o200k_base@50000; gpt-4o=claude; zeta=kimi@300000"})

    def setUp(self):
        t = self.srv.create_tenant()
        self.md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
        self.ctx = context_pb2_grpc.ContextServiceStub(self.srv.channel())

    def count(self, model):
        return self.ctx.CountTokens(C.CountTokensRequest(text="hello world, a mapped model",
                                                         model=model),
                                    metadata=self.md, timeout=30)

    def test_mapped_models_count_as_mapped(self):
        r = self.count("acme-lm-2")
        self.assertEqual(r.method, C.TOKEN_COUNT_METHOD_EXACT)
        self.assertEqual(r.encoding, C.TOKEN_ENCODING_O200K_BASE)
        self.assertEqual(r.context_window_tokens, 50000)
        r = self.count("gpt-4o-mini")
        self.assertNotEqual(r.method, C.TOKEN_COUNT_METHOD_EXACT, "the map wins over the table")
        self.assertEqual(r.estimator_profile, "claude")
        r = self.count("zeta-9")
        self.assertEqual((r.estimator_profile, r.context_window_tokens), ("kimi", 300000))
        r = self.count("gpt-4.1")
        self.assertEqual(r.method, C.TOKEN_COUNT_METHOD_EXACT, "the rest of the table stands")

    def test_a_bad_map_stops_the_start(self):
        for bad in ("acme=nope", "acme", "=o200k_base", "acme=o200k_base@12"):
            env = cgtest.clean_env({"CTXGUARD_MODEL_MAP": bad, "CTXGUARD_PG_DSN": "x"})
            r = subprocess.run([cgtest.server_bin()], env=env, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertIn("model_map", r.stderr)


class TokenData(cgtest.TestCase):
    def start(self, directory):
        env = cgtest.clean_env({"CTXGUARD_TOKEN_DATA_DIR": directory, "CTXGUARD_PG_DSN": "x"})
        return subprocess.run([cgtest.server_bin()], env=env, capture_output=True, text=True,
                              timeout=30)

    def test_missing_token_data_stops_the_start(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.start(d)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("token_data_dir", r.stderr)
            self.assertIn(os.path.join(d, "cl100k_base.cgtok"), r.stderr)

    def test_corrupt_token_data_stops_the_start(self):
        src = os.path.join(cgtest.require_env("CG_BUILD_DIR"), "share", "ctxguard")
        with tempfile.TemporaryDirectory() as d:
            for name in ("cl100k_base", "o200k_base"):
                with open(os.path.join(src, name + ".cgtok"), "rb") as f:
                    data = bytearray(f.read())
                if name == "o200k_base":
                    data[len(data) // 2] ^= 0x55
                with open(os.path.join(d, name + ".cgtok"), "wb") as f:
                    f.write(data)
            r = self.start(d)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("token_data_dir", r.stderr)
            self.assertIn(os.path.join(d, "o200k_base.cgtok"), r.stderr)

    def test_print_config_shows_the_directory(self):
        env = cgtest.clean_env({"CTXGUARD_TOKEN_DATA_DIR": "/some/where"})
        r = subprocess.run([cgtest.server_bin(), "--print-config"], env=env, capture_output=True,
                           text=True, timeout=30)
        self.assertIn("/some/where", r.stdout)


class CtlCount(cgtest.TestCase):
    """ctxguardctl count FILE: format detection, plain and --json output, exit codes."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        t = cls.srv.create_tenant()
        cls.key = cls.srv.create_key(t.tenant_id).secret

    def ctl(self, *args, expect=0, stdin=None):
        env = cgtest.clean_env({"CTXGUARD_TARGET": self.srv.target, "CTXGUARD_KEY": self.key})
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=30, input=stdin)
        self.assertEqual(proc.returncode, expect, f"ctxguardctl {' '.join(args)}: exit "
                         f"{proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def file(self, content):
        f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        self.addCleanup(os.unlink, f.name)
        f.write(content)
        f.close()
        return f.name

    def test_openai_file_exact(self):
        path = self.file(json.dumps({"model": "gpt-4", "messages": COOKBOOK}))
        out = self.ctl("count", path, "--model", "gpt-4").stdout
        self.assertRegex(out, r"total:\s+129\n")
        self.assertIn("exact (cl100k_base)", out)
        self.assertIn("format:      openai", out)
        self.assertEqual(len([ln for ln in out.split("\n") if ln.startswith("  ")]), 6)
        got = json.loads(self.ctl("--json", "count", path, "--encoding", "o200k_base").stdout)
        self.assertEqual(int(got["total_tokens"]), 124)
        self.assertEqual(got["method"], "TOKEN_COUNT_METHOD_EXACT")
        self.assertEqual(len(got["message_tokens"]), 6)

    def test_anthropic_file_is_detected(self):
        conv = {"system": "Be brief.", "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w",
                                               "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": "rain"}]}]}
        path = self.file(json.dumps(conv))
        out = self.ctl("count", path, "--model", "gpt-4o").stdout
        self.assertIn("format:      anthropic", out)
        ctx = context_pb2_grpc.ContextServiceStub(self.srv.channel())
        r = ctx.CountTokens(C.CountTokensRequest(conversation=common_pb2.Conversation(
            anthropic_json=json.dumps(conv)), model="gpt-4o"), metadata=cgtest.bearer(self.key),
            timeout=10)
        self.assertRegex(out, rf"total:\s+{r.total_tokens}\n")
        self.assertEqual(len(r.message_tokens), 4, "system + 3")

    def test_responses_and_gemini_files_are_detected(self):
        responses = {"instructions": "Be brief.", "input": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "function_call", "call_id": "t1", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "t1", "output": "rain"}]}
        gemini = [{"role": "user", "parts": [{"text": "Weather in Oslo?"}]},
                  {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {}}}]},
                  {"role": "user", "parts": [{"functionResponse": {
                      "name": "w", "response": {"output": "rain"}}}]}]
        ctx = context_pb2_grpc.ContextServiceStub(self.srv.channel())
        for fmt, field, conv in (("responses", "responses_json", responses),
                                 ("gemini", "gemini_json", gemini)):
            with self.subTest(format=fmt):
                out = self.ctl("count", self.file(json.dumps(conv)), "--model", "gpt-4o").stdout
                self.assertIn(f"format:      {fmt}", out)
                r = ctx.CountTokens(C.CountTokensRequest(conversation=common_pb2.Conversation(
                    **{field: json.dumps(conv)}), model="gpt-4o"),
                    metadata=cgtest.bearer(self.key), timeout=10)
                self.assertRegex(out, rf"total:\s+{r.total_tokens}\n")

    def test_text_and_estimates(self):
        text = "Grüße aus Köln — 12345 tokens?\n" * 50
        path = self.file(text)
        out = self.ctl("count", path, "--text", "--encoding", "cl100k_base").stdout
        self.assertRegex(out, rf"total:\s+{tok_count([text])[0][0]}\n")
        out = self.ctl("count", "-", "--text", "--model", "gemini-2.5-pro", stdin=text).stdout
        self.assertIn("estimated (profile gemini", out)
        self.assertIn("estimate_id:", out)

    def test_errors(self):
        path = self.file("just some words")
        self.assertIn("--text", self.ctl("count", path, expect=2).stderr)
        self.ctl("count", path, "--encoding", "p50k_base", expect=2)
        self.ctl("count", "/nonexistent/file.json", expect=1)
        bad = self.ctl("count", self.file('{"messages": [{"role": "robot", "content": "x"}]}'),
                       expect=1)
        self.assertIn("INVALID_ARGUMENT", bad.stderr)
        self.assertIn("$.messages[0].role", bad.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
