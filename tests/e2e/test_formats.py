"""The four JSON formats end to end (issue 16, item 7): the same conversation written as
OpenAI chat, Anthropic messages, OpenAI Responses input items and Gemini contents counts the
same, compresses in its own format (the answer reads back in it, the summary's head names the
span, tool pairs survive), comes back byte for byte when nothing is reduced, is judged by its
provider's rules in ValidateContext, and a session's history reads back in each format;
GetCompressionStats tells how full the session's window is."""

import json
import uuid

import grpc

import cgtest
from cgtest import common_pb2, context_pb2 as C, context_pb2_grpc

FORMATS = ("openai", "anthropic", "responses", "gemini")
FIELD = {"openai": "openai_json", "anthropic": "anthropic_json",
         "responses": "responses_json", "gemini": "gemini_json"}
FORMAT_ENUM = {"openai": common_pb2.CONVERSATION_FORMAT_OPENAI_CHAT,
               "anthropic": common_pb2.CONVERSATION_FORMAT_ANTHROPIC_MESSAGES,
               "responses": common_pb2.CONVERSATION_FORMAT_OPENAI_RESPONSES,
               "gemini": common_pb2.CONVERSATION_FORMAT_GEMINI_CONTENTS}


def turns(n, size=40):
    """n (user text, assistant text, call id, tool result) turns of a build session."""
    return [(f"Step {i}: the cache is {i * 64} MB on node-{i % 7}. " + "Details follow. " * size,
             f"Checked step {i}; reading /srv/build/{i}.log next. " + "More words. " * size,
             f"call_{i}", f"log {i}: " + "compiler output line\n" * size) for i in range(n)]


def as_format(fmt, steps, system="You are a build assistant."):
    """The conversation of steps (each: user, assistant with a read_file call, its result,
    assistant text) as a request body in fmt."""
    def args(i):
        return {"path": f"/srv/build/{i}.log"}

    def args_text(i):  # compact, as the formats that carry an object write it
        return json.dumps(args(i), separators=(",", ":"))
    body = []
    if fmt == "openai":
        body.append({"role": "system", "content": system})
        for i, (u, a, cid, res) in enumerate(steps):
            body += [{"role": "user", "content": u},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"id": cid, "type": "function", "function": {
                             "name": "read_file", "arguments": args_text(i)}}]},
                     {"role": "tool", "tool_call_id": cid, "content": res},
                     {"role": "assistant", "content": a}]
        return {"messages": body}
    if fmt == "anthropic":
        for i, (u, a, cid, res) in enumerate(steps):
            body += [{"role": "user", "content": u},
                     {"role": "assistant", "content": [
                         {"type": "tool_use", "id": cid, "name": "read_file", "input": args(i)}]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": cid, "content": res}]},
                     {"role": "assistant", "content": a}]
        return {"system": system, "messages": body}
    if fmt == "responses":
        for i, (u, a, cid, res) in enumerate(steps):
            body += [{"role": "user", "content": u},
                     {"type": "function_call", "call_id": cid, "name": "read_file",
                      "arguments": args_text(i)},
                     {"type": "function_call_output", "call_id": cid, "output": res},
                     {"role": "assistant", "content": a}]
        return {"instructions": system, "input": body}
    for i, (u, a, cid, res) in enumerate(steps):
        body += [{"role": "user", "parts": [{"text": u}]},
                 {"role": "model", "parts": [
                     {"functionCall": {"name": "read_file", "args": args(i)}}]},
                 {"role": "user", "parts": [
                     {"functionResponse": {"name": "read_file", "response": {"output": res}}}]},
                 {"role": "model", "parts": [{"text": a}]}]
    return {"systemInstruction": {"parts": [{"text": system}]}, "contents": body}


def conversation(fmt, body, text=None):
    return common_pb2.Conversation(**{FIELD[fmt]: text if text is not None else json.dumps(body)})


def texts_of(fmt, doc):
    """Every user/assistant text of a document in fmt (strings), in order; system prompts
    (each format keeps them elsewhere) and tool results are left out."""
    out = []
    if fmt in ("openai", "anthropic"):
        items = doc["messages"] if isinstance(doc, dict) else doc
    elif fmt == "responses":
        items = doc["input"] if isinstance(doc, dict) else doc
    else:
        items = doc["contents"] if isinstance(doc, dict) else doc
    for m in items:
        if m.get("role") in ("system", "developer", "tool"):
            continue
        if fmt == "gemini":
            out += [p["text"] for p in m.get("parts", []) if "text" in p]
            continue
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [b["text"] for b in content if isinstance(b, dict) and "text" in b]
    return out


class Formats(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.stub = context_pb2_grpc.ContextServiceStub(cls.srv.channel())
        tenant = cls.srv.create_tenant()
        cls.md = cgtest.bearer(cls.srv.create_key(tenant.tenant_id).secret)

    def call(self, method, request):
        return getattr(self.stub, method)(request, metadata=self.md, timeout=60)

    def test_the_same_conversation_counts_the_same_in_every_format(self):
        """Plain text and tool calls: the model sees the same tokens whatever the wire
        format (the framing is the model's, not the format's)."""
        steps = turns(3, size=5)
        totals = {}
        for fmt in FORMATS:
            r = self.call("CountTokens", C.CountTokensRequest(
                conversation=conversation(fmt, as_format(fmt, steps)), model="gpt-4o"))
            totals[fmt] = r.total_tokens
            self.assertEqual(r.method, C.TOKEN_COUNT_METHOD_EXACT, fmt)
        # Gemini carries a function response as a JSON object ({"output": ...}) where the
        # others carry the bare text: a few tokens per result more.
        self.assertEqual(totals["openai"], totals["anthropic"], totals)
        self.assertEqual(totals["openai"], totals["responses"], totals)
        self.assertLess(abs(totals["gemini"] - totals["openai"]), 12 * 3, totals)

    def test_nothing_reduced_comes_back_byte_for_byte(self):
        steps = turns(2, size=3)
        for fmt in FORMATS:
            with self.subTest(format=fmt):
                # Spaces, key order and escapes a re-encoding would change.
                text = json.dumps(as_format(fmt, steps), indent=2, ensure_ascii=True)
                text = text.replace('"role": "user"', '"role" :"user"', 1)
                r = self.call("Compress", C.CompressRequest(
                    conversation=conversation(fmt, None, text), model="gpt-4o",
                    context_window_tokens=200000))
                self.assertFalse(r.report.triggered)
                self.assertEqual(r.conversation.WhichOneof("content"), FIELD[fmt])
                self.assertEqual(getattr(r.conversation, FIELD[fmt]), text)

    def test_compress_answers_in_the_format_it_was_given(self):
        steps = turns(24)
        for fmt in FORMATS:
            with self.subTest(format=fmt):
                body = as_format(fmt, steps)
                r = self.call("Compress", C.CompressRequest(
                    conversation=conversation(fmt, body), model="gpt-4o",
                    context_window_tokens=8000, summarizer=C.SUMMARIZER_KIND_EXTRACTIVE,
                    policy=C.CompressionPolicy(reserved_output_tokens=0)))
                self.assertTrue(r.report.triggered)
                self.assertLess(r.report.tokens_after, r.report.tokens_before)
                self.assertEqual(r.conversation.WhichOneof("content"), FIELD[fmt])
                out = json.loads(getattr(r.conversation, FIELD[fmt]))
                # The answer reads back in its format and the provider's rules hold.
                v = self.call("ValidateContext", C.ValidateContextRequest(
                    conversation=conversation(fmt, out), model="gpt-4o",
                    reserved_output_tokens=0))
                self.assertTrue(v.valid, [(i.kind, i.message) for i in v.issues])
                texts = texts_of(fmt, out)
                heads = [t for t in texts if t.startswith("[ctxguard summary of input messages")]
                self.assertEqual(len(heads), 1, texts[:3])
                # The last user turn is kept verbatim.
                self.assertIn(steps[-1][0], texts)
                # The top-level system prompt stays where the format keeps it.
                if fmt == "responses":
                    self.assertEqual(out["instructions"], "You are a build assistant.")
                if fmt == "gemini":
                    self.assertEqual(out["systemInstruction"]["parts"][0]["text"],
                                     "You are a build assistant.")
                if fmt == "anthropic":
                    self.assertEqual(out["system"], "You are a build assistant.")

    def test_answers_can_be_asked_in_another_format(self):
        body = as_format("responses", turns(2, size=3))
        for fmt in FORMATS:
            with self.subTest(to=fmt):
                r = self.call("Compress", C.CompressRequest(
                    conversation=conversation("responses", body), model="gpt-4o",
                    response_format=FORMAT_ENUM[fmt]))
                out = json.loads(getattr(r.conversation, FIELD[fmt]))
                v = self.call("ValidateContext", C.ValidateContextRequest(
                    conversation=conversation(fmt, out), model="gpt-4o"))
                self.assertTrue(v.valid, [(i.kind, i.message) for i in v.issues])
                self.assertEqual(texts_of(fmt, out), texts_of("responses", body))

    def test_validate_applies_each_formats_rules(self):
        orphan = {"input": [{"role": "user", "content": "hi"},
                            {"type": "function_call_output", "call_id": "nope", "output": "x"}]}
        v = self.call("ValidateContext", C.ValidateContextRequest(
            conversation=conversation("responses", orphan), model="gpt-4o"))
        self.assertEqual(v.provider, C.PROVIDER_DIALECT_OPENAI)
        self.assertFalse(v.valid)
        self.assertIn(C.VALIDATION_ISSUE_KIND_ORPHAN_TOOL_RESULT, [i.kind for i in v.issues])
        # Gemini: GOOGLE's rules, whatever the model (roles alternate, user first).
        two_models = {"contents": [{"role": "user", "parts": [{"text": "hi"}]},
                                   {"role": "model", "parts": [{"text": "a"}]},
                                   {"role": "model", "parts": [{"text": "b"}]}]}
        v = self.call("ValidateContext", C.ValidateContextRequest(
            conversation=conversation("gemini", two_models), model="gpt-4o"))
        self.assertEqual(v.provider, C.PROVIDER_DIALECT_GOOGLE)
        self.assertFalse(v.valid)
        self.assertIn(C.VALIDATION_ISSUE_KIND_NON_ALTERNATING_ROLES, [i.kind for i in v.issues])

    def test_bad_documents_name_the_field_and_the_path(self):
        cases = [
            ("responses", '{"input": [{"type": "web_search_call", "id": "ws_1"}]}',
             "conversation.responses_json: $.input[0]"),
            ("responses", '[{"type": "function_call", "name": "f", "arguments": "{}"}]',
             "conversation.responses_json: $[0].call_id"),
            ("gemini", '{"contents": [{"role": "robot", "parts": [{"text": "x"}]}]}',
             "conversation.gemini_json: $.contents[0].role"),
            ("gemini", '[{"role": "user", "parts": [{"executableCode": {"code": "1"}}]}]',
             "conversation.gemini_json: $[0].parts[0]"),
        ]
        for fmt, text, want in cases:
            with self.subTest(text=text):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.call("CountTokens", C.CountTokensRequest(
                        conversation=conversation(fmt, None, text), model="gpt-4o"))
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(want, cm.exception.details())

    def test_session_history_and_window_use_in_every_format(self):
        sid = "formats-" + uuid.uuid4().hex[:12]
        body = as_format("gemini", turns(24))
        r = self.call("Compress", C.CompressRequest(
            conversation=conversation("gemini", body), model="gpt-4o", session_id=sid,
            context_window_tokens=8000, summarizer=C.SUMMARIZER_KIND_EXTRACTIVE,
            policy=C.CompressionPolicy(reserved_output_tokens=1000)))
        self.assertTrue(r.report.triggered)
        stats = self.call("GetCompressionStats", C.GetCompressionStatsRequest(session_id=sid))
        self.assertEqual(stats.current_tokens, r.report.tokens_after)
        self.assertEqual(stats.context_window_tokens, 8000)
        self.assertEqual(stats.effective_window_tokens, r.report.effective_window_tokens)
        self.assertAlmostEqual(stats.window_utilization,
                               r.report.tokens_after / r.report.effective_window_tokens)
        self.assertLess(stats.window_utilization, 1.0)
        self.assertGreater(stats.current_at_unix_ms, 0)
        # A tenant-wide read has no single window.
        whole = self.call("GetCompressionStats", C.GetCompressionStatsRequest())
        self.assertEqual(whole.current_tokens, 0)
        for fmt in FORMATS:
            with self.subTest(history_as=fmt):
                h = self.call("GetHistory", C.GetHistoryRequest(
                    session_id=sid, response_format=FORMAT_ENUM[fmt], page_size=1000))
                out = json.loads(getattr(h.conversation, FIELD[fmt]))
                self.assertEqual(texts_of(fmt, out), texts_of("gemini", body))
