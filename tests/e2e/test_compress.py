"""ContextService.Compress (stateless) and ValidateContext end to end: sample conversations
compressed to 37.5 % of a 128k window (every output valid, target met where reachable, report
numbers consistent), determinism, the stateless trim boundary, and bad input.

The samples are generated for this run by tests/support/gen_conversations.py (the seed of the
build's set, 24 conversations of 3 to ~280 messages, seven languages, planted facts) into a
temporary directory; $CG_EXTRA_CONVERSATIONS, when it names a directory, adds its conv-*.json
after them."""

import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid

import grpc

import cgtest
from cgtest import common_pb2, context_pb2, context_pb2_grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import gen_conversations  # noqa: E402

C = context_pb2
WINDOW = 128000
_generated = None  # the TemporaryDirectory of setUpModule


def setUpModule():
    global _generated
    _generated = tempfile.TemporaryDirectory(prefix="cg-conversations-")
    gen_conversations.generate(_generated.name)


def tearDownModule():
    _generated.cleanup()


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def samples():
    """The generated conversations, then those of $CG_EXTRA_CONVERSATIONS if set."""
    files = sorted(glob.glob(os.path.join(_generated.name, "conv-*.json")))
    extra = os.environ.get("CG_EXTRA_CONVERSATIONS")
    if extra:
        more = sorted(glob.glob(os.path.join(extra, "conv-*.json")))
        if not more:
            raise AssertionError(f"CG_EXTRA_CONVERSATIONS={extra}: no conv-*.json there")
        files += more
    return files


def openai_conv(messages, tools=None, model=None):
    body = {"messages": messages}
    if tools:
        body["tools"] = tools
    if model:
        body["model"] = model
    return common_pb2.Conversation(openai_json=json.dumps(body))


def long_chat():
    """A long chat of a build session (121 messages) that the summary layer can shorten."""
    msgs = [{"role": "system", "content": "You are a build assistant."}]
    for i in range(60):
        msgs.append({"role": "user", "content": f"Step {i}: the cache size is {i * 64} MB "
                     f"and the job runs on node-{i % 7}. " + "Details follow. " * 40})
        msgs.append({"role": "assistant", "content": f"Noted step {i}; next I check "
                     f"/srv/build/{i}.log for errors. " + "More words here. " * 40})
    return msgs


class CompressTest(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        tenant = cls.srv.create_tenant()
        cls.md = cgtest.bearer(cls.srv.create_key(tenant.tenant_id).secret)
        cls.stub = context_pb2_grpc.ContextServiceStub(cls.ch)

    def compress(self, **kw):
        return self.stub.Compress(C.CompressRequest(**kw), metadata=self.md, timeout=60)

    def validate(self, **kw):
        return self.stub.ValidateContext(C.ValidateContextRequest(**kw), metadata=self.md,
                                         timeout=60)

    def check_report(self, rep, out_json):
        """The report's numbers agree with each other and with the output."""
        msgs = json.loads(out_json)
        msgs = msgs["messages"] if isinstance(msgs, dict) else msgs
        self.assertEqual(rep.messages_after, len(rep.source_indexes))
        self.assertEqual(rep.layers[0].layer, C.COMPRESSION_LAYER_NORMALIZE)
        self.assertEqual(rep.layers[0].tokens_before, rep.tokens_before)
        prev = rep.tokens_before
        for layer in rep.layers:
            self.assertEqual(layer.tokens_before, prev, layer)
            self.assertEqual(layer.tokens_saved, layer.tokens_before - layer.tokens_after)
            if layer.outcome != C.LAYER_OUTCOME_APPLIED:
                self.assertEqual(layer.tokens_after, layer.tokens_before, layer)
            prev = layer.tokens_after
        self.assertEqual(prev, rep.tokens_after)
        self.assertEqual(rep.target_reached, not rep.triggered or rep.tokens_after <=
                         rep.target_tokens)
        self.assertEqual(rep.under_ceiling, rep.tokens_after <= rep.ceiling_tokens)
        self.assertGreaterEqual(rep.trim_boundary_after, rep.trim_boundary_before)
        self.assertEqual(rep.boundary_moved, rep.trim_boundary_after != rep.trim_boundary_before)
        self.assertLessEqual(rep.target_tokens, rep.trigger_tokens)
        self.assertLessEqual(rep.trigger_tokens, rep.ceiling_tokens)
        self.assertLessEqual(rep.ceiling_tokens, rep.effective_window_tokens)
        self.assertGreaterEqual(len(msgs), 1)

    def test_sample_conversations_reach_the_target_and_stay_valid(self):
        files = samples()
        self.assertGreaterEqual(len(files), 20)
        reached, over_window, compressed, untouched = 0, 0, 0, 0
        for path in files:
            with self.subTest(conversation=os.path.basename(path)):
                d = load(path)
                conv = openai_conv(d["messages"], d.get("tools"))
                pol = C.CompressionPolicy(target_ratio=0.375, reserved_output_tokens=0)
                resp = self.compress(conversation=conv, model=d["model"],
                                     context_window_tokens=WINDOW, policy=pol, force=True)
                rep = resp.report
                self.check_report(rep, resp.conversation.openai_json)
                self.assertEqual(resp.trim_boundary, rep.trim_boundary_after)
                over_window += rep.tokens_before > WINDOW
                compressed += rep.tokens_after < rep.tokens_before
                untouched += rep.tokens_before <= rep.target_tokens
                # 37.5 % of the window less the system prompt and the tools.
                self.assertLessEqual(rep.target_tokens, int(0.375 * WINDOW))
                codes = {w.code for w in rep.warnings}
                if rep.target_reached:
                    reached += 1
                    self.assertLessEqual(rep.tokens_after, rep.target_tokens)
                else:
                    self.assertIn(C.COMPRESSION_WARNING_CODE_TARGET_UNREACHABLE, codes)
                # The output is one the provider accepts, and ValidateContext counts it as
                # the report did.
                v = self.validate(conversation=resp.conversation, model=d["model"],
                                  context_window_tokens=WINDOW, reserved_output_tokens=0)
                self.assertTrue(v.valid, [i.message for i in v.issues])
                self.assertEqual(v.prompt_tokens, rep.tokens_after)
                if d["model"].startswith("gpt"):
                    self.assertEqual(rep.count_method, C.TOKEN_COUNT_METHOD_EXACT)
                else:
                    self.assertIn(C.COMPRESSION_WARNING_CODE_ESTIMATED_COUNTS, codes)
        self.assertEqual(reached, len(files), "the target is reachable for every sample")
        # The set spans what the cascade must handle: conversations above the whole window,
        # others compressed below the target, and small ones already under it.
        self.assertGreaterEqual(over_window, 3)
        self.assertGreaterEqual(compressed, 8)
        self.assertGreaterEqual(untouched, 3)

    def summary_layer(self, summarizer):
        """Compresses a long chat with the sliding window off, so that the summary layer
        must do the work; returns (response, the summary layer's result)."""
        msgs = long_chat()
        pol = C.CompressionPolicy(target_ratio=0.2, reserved_output_tokens=0,
                                  disabled_layers=[C.COMPRESSION_LAYER_SLIDING_WINDOW])
        resp = self.compress(conversation=openai_conv(msgs), model="gpt-4o",
                             context_window_tokens=40000, policy=pol, force=True,
                             summarizer=summarizer)
        layer = next(l for l in resp.report.layers
                     if l.layer == C.COMPRESSION_LAYER_SUMMARIZE)
        return resp, layer

    def test_the_summary_layer_writes_a_summary(self):
        resp, layer = self.summary_layer(C.SUMMARIZER_KIND_EXTRACTIVE)
        self.assertEqual(layer.outcome, C.LAYER_OUTCOME_APPLIED, layer)
        self.assertGreater(layer.tokens_saved, 0)
        out = json.loads(resp.conversation.openai_json)
        out = out["messages"] if isinstance(out, dict) else out
        self.assertLess(len(out), 121, "the middle became one message")
        self.assertEqual(sum("Session intent" in json.dumps(m) for m in out), 1,
                         "one summary message, with the summary's sections")
        self.check_report(resp.report, resp.conversation.openai_json)
        v = self.validate(conversation=resp.conversation, model="gpt-4o")
        self.assertTrue(v.valid, [i.message for i in v.issues])

    def test_a_failing_summary_leaves_the_other_layers_work(self):
        # No LLM is configured: LLM-only summaries fail; the layer says so and nothing else
        # is lost (the output is still valid and reduced by the layers that ran).
        resp, layer = self.summary_layer(C.SUMMARIZER_KIND_LLM)
        self.assertEqual(layer.outcome, C.LAYER_OUTCOME_FAILED, layer)
        self.assertTrue(layer.detail)
        self.assertIn(C.COMPRESSION_WARNING_CODE_LAYER_FAILED,
                      {w.code for w in resp.report.warnings})
        self.check_report(resp.report, resp.conversation.openai_json)

    def test_pinned_messages_survive_every_layer(self):
        """Message.pinned through gRPC: a pinned user question and a pinned assistant answer
        in the middle of a long chat stay in the output unchanged under the sliding window
        and the summary, in both strategies; when the pins alone exceed the target, the
        warning says how many tokens they hold."""
        chat = long_chat()
        pins = {21: "question 20", 30: "answer 14"}

        def as_messages(pinned_all=False):
            out = []
            for i, m in enumerate(chat):
                role = {"system": common_pb2.ROLE_SYSTEM, "user": common_pb2.ROLE_USER,
                        "assistant": common_pb2.ROLE_ASSISTANT}[m["role"]]
                text = m["content"] + (f" [{pins[i]}]" if i in pins else "")
                out.append(common_pb2.Message(role=role, pinned=pinned_all or i in pins,
                                              parts=[common_pb2.MessagePart(text=text)]))
            return out

        for strategy in (C.COMPRESSION_STRATEGY_SUMMARIZING, C.COMPRESSION_STRATEGY_TRIMMING):
            for summarizer in (C.SUMMARIZER_KIND_NONE, C.SUMMARIZER_KIND_EXTRACTIVE):
                with self.subTest(strategy=strategy, summarizer=summarizer):
                    msgs = as_messages()
                    conv = common_pb2.Conversation(messages=common_pb2.MessageList(messages=msgs))
                    pol = C.CompressionPolicy(strategy=strategy, target_ratio=0.2,
                                              reserved_output_tokens=0)
                    resp = self.compress(conversation=conv, model="gpt-4o",
                                         context_window_tokens=12000, policy=pol, force=True,
                                         summarizer=summarizer)
                    rep = resp.report
                    # The layer that would take them ran: the window (SUMMARIZING: only
                    # under a summary, so not at all with summarizer NONE), the trimming of
                    # the prefix (TRIMMING, which is under its ceiling then).
                    layers = {l.layer: l.outcome for l in rep.layers}
                    summarizing = strategy == C.COMPRESSION_STRATEGY_SUMMARIZING
                    if summarizing and summarizer == C.SUMMARIZER_KIND_NONE:
                        self.assertEqual(layers[C.COMPRESSION_LAYER_SLIDING_WINDOW],
                                         C.LAYER_OUTCOME_SKIPPED, rep.layers)
                        self.assertEqual(len(rep.source_indexes), len(msgs), "nothing went")
                        continue
                    self.assertLess(rep.tokens_after, rep.tokens_before, "it did compress")
                    busy = (C.COMPRESSION_LAYER_SLIDING_WINDOW if summarizing
                            else C.COMPRESSION_LAYER_STABLE_PREFIX_TRIM)
                    applied = {l.layer for l in rep.layers
                               if l.outcome == C.LAYER_OUTCOME_APPLIED}
                    self.assertIn(busy, applied, rep.layers)
                    out = list(resp.conversation.messages.messages)
                    for src in pins:
                        at = list(rep.source_indexes).index(src)
                        self.assertEqual(out[at], msgs[src], f"pinned message {src} changed")
        # Every message pinned: nothing can go, and the report says why.
        conv = common_pb2.Conversation(
            messages=common_pb2.MessageList(messages=as_messages(pinned_all=True)))
        resp = self.compress(conversation=conv, model="gpt-4o", context_window_tokens=12000,
                             policy=C.CompressionPolicy(target_ratio=0.2,
                                                        reserved_output_tokens=0),
                             force=True)
        rep = resp.report
        self.assertFalse(rep.target_reached)
        self.assertEqual(rep.tokens_after, rep.tokens_before)
        warned = [w.message for w in rep.warnings
                  if w.code == C.COMPRESSION_WARNING_CODE_TARGET_UNREACHABLE]
        self.assertTrue(warned and "pinned" in warned[0], rep.warnings)

    def test_user_turns_go_only_under_a_summary_naming_them(self):
        """Issue 16 item 2, as found from outside: 84 plain-text messages compressed with the
        default policy. Every user message is in the output verbatim or inside the span the
        one summary message names, stateless ("input messages A-B") and in a session
        ("session history positions"); with summarizer NONE nothing goes. The trimming
        policy's escalation (pushed over its ceiling) keeps the same promise."""
        chat = long_chat()[:85]
        body = common_pb2.Conversation(openai_json=json.dumps({"messages": chat}))
        users = [i for i, m in enumerate(chat) if m["role"] == "user"]

        def check(resp, head):
            out = json.loads(resp.conversation.openai_json)["messages"]
            texts = []
            for m in out:
                c = m["content"]
                texts += [c] if isinstance(c, str) else [p.get("text", "") for p in c]
            summaries = [t for t in texts if t.startswith("[ctxguard summary of ")]
            self.assertEqual(len(summaries), 1, texts[:3])
            self.assertTrue(summaries[0].startswith(head), summaries[0][:160])
            span = re.match(r"\[ctxguard summary of [a-z ]*messages (\d+)-(\d+)", summaries[0])
            first, last = int(span[1]), int(span[2])
            rep = resp.report
            self.assertEqual((first, last), (rep.summary.first_source_index,
                                             rep.summary.last_source_index))
            lost = [i for i in users if chat[i]["content"] not in
                    "\n".join(texts) and not first <= i <= last]
            self.assertEqual(lost, [], "user messages gone without a summary")
            return first, last, summaries[0]

        pol = C.CompressionPolicy(reserved_output_tokens=0)
        resp = self.compress(conversation=body, model="gpt-4o", context_window_tokens=12000,
                             policy=pol)
        layers = {l.layer: l for l in resp.report.layers}
        self.assertEqual(layers[C.COMPRESSION_LAYER_SLIDING_WINDOW].outcome,
                         C.LAYER_OUTCOME_APPLIED)
        first, last, _ = check(resp, "[ctxguard summary of input messages ")
        self.assertGreater(last - first, 10)
        # Nothing goes without a summarizer.
        resp = self.compress(conversation=body, model="gpt-4o", context_window_tokens=12000,
                             policy=pol, summarizer=C.SUMMARIZER_KIND_NONE)
        self.assertEqual(len(resp.report.source_indexes), len(chat))
        # The trimming policy over its ceiling: its escalation summarizes, never drops.
        tpol = C.CompressionPolicy(strategy=C.COMPRESSION_STRATEGY_TRIMMING,
                                   reserved_output_tokens=0)
        resp = self.compress(conversation=body, model="gpt-4o", context_window_tokens=4000,
                             policy=tpol)
        check(resp, "[ctxguard summary of input messages ")
        # In a session the head names history positions, which GetHistory serves.
        sid = "s-" + uuid.uuid4().hex[:12]
        resp = self.compress(conversation=body, model="gpt-4o", context_window_tokens=12000,
                             policy=pol, session_id=sid)
        first, last, text = check(resp, "[ctxguard summary of messages ")
        self.assertIn("session history positions", text.split("\n", 1)[0])
        hist = self.stub.GetHistory(C.GetHistoryRequest(session_id=sid, from_position=first,
                                                        page_size=1),
                                    metadata=self.md)
        got = hist.conversation.messages.messages[0].parts[0].text
        self.assertEqual(got, chat[first]["content"])

    def test_search_history_pages_matches_and_refuses_bad_input(self):
        """SearchHistory over a session's stored history: a substring either case, a regular
        expression paged three matches at a time (the pages join to the whole list, in
        order, with exact offsets), and the refusals that name the field."""
        chat = long_chat()
        sid = "search-" + uuid.uuid4().hex[:10]
        self.compress(conversation=common_pb2.Conversation(
            openai_json=json.dumps({"messages": chat})), model="gpt-4o", session_id=sid)

        def search(**kw):
            return self.stub.SearchHistory(C.SearchHistoryRequest(session_id=sid, **kw),
                                           metadata=self.md, timeout=30)

        r = search(query="NODE-3.", ignore_case=True, context_bytes=10)
        want = [i for i, m in enumerate(chat) if "node-3." in m["content"]]
        self.assertEqual([m.position for m in r.matches], want)
        m = r.matches[0]
        text = chat[m.position]["content"]
        self.assertEqual(text[m.offset:m.offset + m.length], "node-3.")
        self.assertEqual(text[m.snippet_offset:m.snippet_offset + len(m.snippet)], m.snippet)
        self.assertEqual((m.role, m.part_kind, m.part_index), (common_pb2.ROLE_USER, "text", 0))
        self.assertEqual(r.total_messages, len(chat))
        self.assertEqual(list(search(query="NODE-3.").matches), [])  # case counts by default
        seen, token, pages = [], "", 0
        while True:
            r = search(query=r"/srv/build/[0-9]+\.log", regex=True, page_size=3,
                       page_token=token, from_position=0)
            seen += [(m.position, m.offset) for m in r.matches]
            pages += 1
            token = r.next_page_token
            if not token:
                break
        want = [(i, m["content"].index("/srv/build/")) for i, m in enumerate(chat)
                if m["role"] == "assistant"]
        self.assertEqual(seen, want)
        self.assertEqual(pages, 20)
        later = [i for i, m in enumerate(chat) if i >= 100 and "Step 5" in m["content"]]
        self.assertEqual([m.position for m in search(query="Step 5", from_position=100).matches],
                         later)  # Step 50..59, not Step 5 at 11
        for kw, field in ((dict(query=""), "query"), (dict(query="a(b", regex=True), "query"),
                          (dict(query="(a)\\1", regex=True), "query"),
                          (dict(query="x", page_size=101), "page_size"),
                          (dict(query="x", context_bytes=1001), "context_bytes"),
                          (dict(query="x", from_position=-1), "from_position"),
                          (dict(query="x", page_token="p12"), "page_token")):
            with self.subTest(**kw):
                with self.assertRaises(grpc.RpcError) as e:
                    search(**kw)
                self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(field, e.exception.details())
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.SearchHistory(C.SearchHistoryRequest(session_id="nope-" + sid, query="x"),
                                    metadata=self.md, timeout=30)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_same_input_and_boundary_give_identical_output(self):
        d = load(samples()[1])
        conv = openai_conv(d["messages"], d.get("tools"))
        a = self.compress(conversation=conv, model="gpt-4o", context_window_tokens=WINDOW,
                          trim_boundary=5)
        b = self.compress(conversation=conv, model="gpt-4o", context_window_tokens=WINDOW,
                          trim_boundary=5)
        self.assertEqual(a.conversation.openai_json, b.conversation.openai_json)
        self.assertEqual(a.trim_boundary, b.trim_boundary)

    def test_trimming_boundary_round_trip_keeps_the_prefix(self):
        d = load(samples()[1])
        msgs = d["messages"]
        starts = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        boundary, prev, kept, turns, moves, other_breaks = 0, None, 0, 0, 0, []
        pol = C.CompressionPolicy(strategy=C.COMPRESSION_STRATEGY_TRIMMING)
        for end in starts[1:] + [len(msgs)]:
            resp = self.compress(conversation=openai_conv(msgs[:end], d.get("tools")),
                                 model="gpt-4o", context_window_tokens=64000, policy=pol,
                                 trim_boundary=boundary)
            self.assertGreaterEqual(resp.trim_boundary, boundary)
            self.assertEqual(resp.report.boundary_moved, resp.trim_boundary != boundary)
            boundary = resp.trim_boundary
            out = json.loads(resp.conversation.openai_json)
            out = out["messages"] if isinstance(out, dict) else out
            if prev is not None:
                turns += 1
                moves += resp.report.boundary_moved
                same = out[:len(prev)] == prev
                kept += same
                if not same and not resp.report.boundary_moved:
                    other_breaks.append(end)
            prev = out
        self.assertGreater(boundary, 0)
        self.assertGreaterEqual(turns, 20)
        # The prompt prefix changes when the boundary moves, and otherwise at most once: the
        # turn the cascade first triggers, when L1 may compact a large tool result after the
        # boundary. How often the boundary moves depends on how much each turn adds against
        # the hysteresis (0.75 x the trigger), not on every turn.
        self.assertLessEqual(len(other_breaks), 1, f"prefix changed without a move at {other_breaks}")
        self.assertLessEqual(moves, turns // 2, f"the boundary moved on {moves} of {turns} turns")
        self.assertEqual(kept, turns - moves - len(other_breaks))

    def test_bad_input_gets_a_status_naming_the_field(self):
        bad = grpc.StatusCode.INVALID_ARGUMENT
        self.assertRpcError(bad, self.compress, contains=("conversation",))
        self.assertRpcError(bad, self.compress,
                            conversation=common_pb2.Conversation(openai_json='[{"role":"user",'),
                            contains=("conversation.openai_json", "$"))
        self.assertRpcError(bad, self.compress,
                            conversation=openai_conv([{"role": "bot", "content": "x"}]),
                            contains=("role",))
        ok = openai_conv([{"role": "user", "content": "hi"}])
        self.assertRpcError(bad, self.compress, conversation=ok, trim_boundary=-1,
                            contains=("trim_boundary",))
        self.assertRpcError(bad, self.compress, conversation=ok, context_window_tokens=-5,
                            contains=("context_window_tokens",))
        self.assertRpcError(bad, self.compress, conversation=ok,
                            policy=C.CompressionPolicy(target_ratio=1.5),
                            contains=("policy.target_ratio",))
        self.assertRpcError(bad, self.compress, conversation=ok,
                            policy=C.CompressionPolicy(trigger_ratio=0.5, target_ratio=0.6),
                            contains=("policy.target_ratio",))
        self.assertRpcError(bad, self.compress, conversation=ok,
                            policy=C.CompressionPolicy(
                                disabled_layers=[C.COMPRESSION_LAYER_NORMALIZE]),
                            contains=("disabled_layers",))
        self.assertRpcError(bad, self.compress, conversation=ok, provider=42,
                            contains=("provider",))
        self.assertRpcError(bad, self.validate, contains=("conversation",))

    def test_orphan_tool_result_is_repaired_or_rejected(self):
        msgs = [{"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "ghost", "content": "lost"},
                {"role": "assistant", "content": "hello"}]
        conv = openai_conv(msgs)
        v = self.validate(conversation=conv)
        self.assertFalse(v.valid)
        self.assertEqual(v.issues[0].kind, C.VALIDATION_ISSUE_KIND_ORPHAN_TOOL_RESULT)
        self.assertEqual(v.issues[0].message_index, 1)
        resp = self.compress(conversation=conv)
        out = json.loads(resp.conversation.openai_json)["messages"]
        self.assertEqual([m["role"] for m in out], ["user", "assistant"])
        repaired = [w for w in resp.report.warnings
                    if w.code == C.COMPRESSION_WARNING_CODE_INPUT_REPAIRED]
        self.assertEqual(repaired[0].message_index, 1)
        self.assertTrue(self.validate(conversation=resp.conversation).valid)
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.compress,
                            conversation=conv, reject_invalid_input=True,
                            contains=("ORPHAN_TOOL_RESULT",))

    def test_headroom_below_the_reserve_is_reported(self):
        conv = openai_conv([{"role": "user", "content": "word " * 5000}])
        v = self.validate(conversation=conv, model="gpt-4o", context_window_tokens=8000)
        kinds = {i.kind for i in v.issues}
        self.assertIn(C.VALIDATION_ISSUE_KIND_HEADROOM_BELOW_RESERVE, kinds)
        self.assertEqual(v.headroom_tokens, 8000 - v.prompt_tokens)
        self.assertEqual(v.count_method, C.TOKEN_COUNT_METHOD_EXACT)

    def test_huge_message_and_many_messages(self):
        big = openai_conv([{"role": "user", "content": "x" * (10 << 20)}])
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.compress, conversation=big)
        # 100,000 messages (about 5 MB of JSON) pass the message size cap but not the memory
        # cap of a conversation (4 x max_message_bytes): a clear status naming the field.
        msgs = []
        for i in range(50000):
            msgs.append({"role": "user", "content": f"q{i}"})
            msgs.append({"role": "assistant", "content": f"a{i} detail detail"})
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.compress,
                            conversation=openai_conv(msgs), contains=("conversation",))
        msgs = msgs[:20000]
        resp = self.compress(conversation=openai_conv(msgs), model="gpt-4o",
                             context_window_tokens=WINDOW)
        rep = resp.report
        self.assertTrue(rep.triggered)
        self.assertTrue(rep.target_reached, rep)
        self.check_report(rep, resp.conversation.openai_json)
        self.assertTrue(self.validate(conversation=resp.conversation).valid)


def out_messages(conv):
    out = json.loads(conv.openai_json)
    return out["messages"] if isinstance(out, dict) else out


def all_text(msgs):
    """Every string in a list of OpenAI messages, joined (for fact lookups)."""
    parts = []

    def walk(v):
        if isinstance(v, str):
            parts.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(msgs)
    return "\n".join(parts)


class SessionTest(cgtest.TestCase):
    """Stateful Compress: history, boundary and artifacts kept in PostgreSQL and read back."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        cls.stub = context_pb2_grpc.ContextServiceStub(cls.ch)
        tenant = cls.srv.create_tenant()
        cls.md = cgtest.bearer(cls.srv.create_key(tenant.tenant_id).secret)
        other = cls.srv.create_tenant()
        cls.other_md = cgtest.bearer(cls.srv.create_key(other.tenant_id).secret)

    def rpc(self, name, req, md=None):
        return getattr(self.stub, name)(req, metadata=md or self.md, timeout=60)

    def compress(self, **kw):
        return self.rpc("Compress", C.CompressRequest(**kw))

    def history(self, session, **kw):
        """Every message of the session's history (paged through), in OpenAI form."""
        msgs, token = [], ""
        while True:
            h = self.rpc("GetHistory", C.GetHistoryRequest(
                session_id=session, page_size=50, page_token=token,
                response_format=common_pb2.CONVERSATION_FORMAT_OPENAI_CHAT, **kw))
            msgs += out_messages(h.conversation)
            token = h.next_page_token
            if not token:
                return msgs, h

    def artifact_bytes(self, art_id):
        data, off = b"", 0
        while True:
            r = self.rpc("GetArtifact", C.GetArtifactRequest(artifact_id=art_id, offset=off,
                                                             length=7000))
            data += r.content
            off += len(r.content)
            if r.eof:
                return data, r.artifact

    def test_every_planted_fact_is_recoverable_and_the_history_is_the_input(self):
        files = samples()
        facts, artifacts = 0, 0
        for path in files:
            d = load(path)
            with self.subTest(conversation=os.path.basename(path)):
                session = "s-" + uuid.uuid4().hex
                conv = openai_conv(d["messages"], d.get("tools"))
                pol = C.CompressionPolicy(target_ratio=0.375, reserved_output_tokens=0)
                resp = self.compress(conversation=conv, model=d["model"],
                                     context_window_tokens=WINDOW, policy=pol, force=True,
                                     session_id=session)
                rep = resp.report
                self.assertTrue(rep.compaction_id)
                self.assertEqual(rep.history_revision, 1)
                self.assertEqual(rep.history_messages_added, len(d["messages"]))
                self.assertTrue(rep.target_reached or any(
                    w.code == C.COMPRESSION_WARNING_CODE_TARGET_UNREACHABLE
                    for w in rep.warnings))
                hist, h = self.history(session)
                self.assertEqual(len(hist), len(d["messages"]))
                self.assertEqual(h.total_messages, len(d["messages"]))
                self.assertEqual(h.trim_boundary, resp.trim_boundary)
                self.assertEqual([m["role"] for m in hist], [m["role"] for m in d["messages"]])
                self.assertEqual(all_text(hist), all_text(d["messages"]))
                # Artifacts: whole, hash-checked, listed in order.
                arts = []
                for a in rep.artifacts:
                    self.assertTrue(a.artifact_id.startswith("art_"))
                    data, info = self.artifact_bytes(a.artifact_id)
                    self.assertEqual(len(data), a.size_bytes)
                    self.assertEqual(hashlib.sha256(data).hexdigest(), a.sha256)
                    self.assertEqual(info.session_id, session)
                    arts.append(data.decode("utf-8"))
                listed = self.rpc("ListArtifacts", C.ListArtifactsRequest(session_id=session))
                self.assertEqual([a.artifact_id for a in listed.artifacts],
                                 [a.artifact_id for a in rep.artifacts])
                # Every planted fact: in the output, its artifacts or the history.
                out = all_text(out_messages(resp.conversation)) + "\n".join(arts)
                stored = all_text(hist)
                for n in d["needles"]:
                    self.assertTrue(n["fact"] in out or n["fact"] in stored, n)
                facts += len(d["needles"])
                artifacts += len(arts)
        # Not vacuous: the set plants facts everywhere and has tool outputs large enough
        # for the offload layer.
        self.assertGreaterEqual(facts, 100)
        self.assertGreater(artifacts, 0)

    def test_turns_append_to_the_history_and_the_boundary_is_kept(self):
        d = load(samples()[1])
        msgs = d["messages"]
        session = "s-" + uuid.uuid4().hex
        pol = C.CompressionPolicy(strategy=C.COMPRESSION_STRATEGY_TRIMMING)
        boundary, seen = 0, 0
        ends = [i for i, m in enumerate(msgs) if m["role"] == "user"][1:] + [len(msgs)]
        for end in ends[::10]:
            resp = self.compress(conversation=openai_conv(msgs[:end], d.get("tools")),
                                 model="gpt-4o", context_window_tokens=64000, policy=pol,
                                 session_id=session)
            rep = resp.report
            self.assertEqual(rep.history_messages_added, end - seen)
            self.assertEqual(rep.history_revision, 1)
            self.assertEqual(rep.trim_boundary_before, boundary)
            self.assertGreaterEqual(resp.trim_boundary, boundary)
            boundary, seen = resp.trim_boundary, end
        self.assertGreater(boundary, 0)
        # A different boundary from the caller is ignored with a warning.
        resp = self.compress(conversation=openai_conv(msgs[:seen], d.get("tools")),
                             model="gpt-4o", context_window_tokens=64000, policy=pol,
                             session_id=session, trim_boundary=1)
        self.assertIn(C.COMPRESSION_WARNING_CODE_BOUNDARY_ADJUSTED,
                      {w.code for w in resp.report.warnings})
        self.assertEqual(resp.report.trim_boundary_before, boundary)
        self.assertEqual(resp.report.history_messages_added, 0)

    def test_append_sync_and_divergence(self):
        d = load(samples()[0])
        msgs = d["messages"]
        session = "s-" + uuid.uuid4().hex
        a = self.compress(conversation=openai_conv(msgs[:10]), session_id=session,
                          session_sync=C.SESSION_SYNC_APPEND)
        self.assertEqual(a.report.history_messages_added, 10)
        b = self.compress(conversation=openai_conv(msgs[10:]), session_id=session,
                          session_sync=C.SESSION_SYNC_APPEND)
        self.assertEqual(b.report.messages_before, len(msgs))
        self.assertEqual(b.report.history_messages_added, len(msgs) - 10)
        hist, h = self.history(session)
        self.assertEqual(all_text(hist), all_text(msgs))
        # FULL with a conversation that differs at message 3: a new revision.
        changed = json.loads(json.dumps(msgs))
        changed[3]["content"] = "something else entirely"
        c = self.compress(conversation=openai_conv(changed), session_id=session)
        self.assertEqual(c.report.history_revision, 2)
        div = [w for w in c.report.warnings
               if w.code == C.COMPRESSION_WARNING_CODE_HISTORY_DIVERGED]
        self.assertEqual(div[0].message_index, 3)
        new, h2 = self.history(session)
        self.assertEqual((h2.revision, h2.latest_revision), (2, 2))
        self.assertIn("something else entirely", all_text(new))
        old, h1 = self.history(session, revision=1)
        self.assertEqual(h1.revision, 1)
        self.assertEqual(all_text(old), all_text(msgs))

    def test_dry_run_stores_nothing_and_reads_are_scoped(self):
        session = "s-" + uuid.uuid4().hex
        conv = openai_conv([{"role": "user", "content": "hi"}])
        self.compress(conversation=conv, session_id=session, dry_run=True)
        nf = grpc.StatusCode.NOT_FOUND
        self.assertRpcError(nf, self.rpc, "GetHistory", C.GetHistoryRequest(session_id=session),
                            contains=("session_id",))
        self.compress(conversation=conv, session_id=session)
        self.rpc("GetHistory", C.GetHistoryRequest(session_id=session))
        self.assertRpcError(nf, self.rpc, "GetHistory", C.GetHistoryRequest(session_id=session),
                            self.other_md)
        self.assertRpcError(nf, self.rpc, "GetArtifact",
                            C.GetArtifactRequest(artifact_id="art_nope"), contains=("artifact_id",))
        bad = grpc.StatusCode.INVALID_ARGUMENT
        self.assertRpcError(bad, self.rpc, "GetArtifact", C.GetArtifactRequest(),
                            contains=("artifact_id",))
        self.assertRpcError(bad, self.rpc, "ListArtifacts", C.ListArtifactsRequest(),
                            contains=("session_id",))
        self.assertRpcError(bad, self.compress, conversation=conv, session_id="has space",
                            contains=("session_id",))

    def test_artifact_ranges_and_paging(self):
        session = "s-" + uuid.uuid4().hex
        msgs = [{"role": "user", "content": "read them"},
                {"role": "assistant", "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": "read_file", "arguments": "{}"}} for i in range(3)]}]
        for i in range(3):
            msgs.append({"role": "tool", "tool_call_id": f"c{i}",
                         "content": f"file {i} " + "0123456789" * 3000})
        msgs.append({"role": "assistant", "content": "done"})
        resp = self.compress(conversation=openai_conv(msgs), model="gpt-4o",
                             context_window_tokens=60000, session_id=session, force=True)
        arts = resp.report.artifacts
        self.assertEqual(len(arts), 3)
        self.assertEqual([a.tool_call_id for a in arts], ["c0", "c1", "c2"])
        out = out_messages(resp.conversation)
        self.assertIn(arts[0].artifact_id, out[2]["content"])
        r = self.rpc("GetArtifact", C.GetArtifactRequest(artifact_id=arts[1].artifact_id,
                                                         offset=5, length=10))
        self.assertEqual(r.content, b"1 01234567")
        self.assertFalse(r.eof)
        self.assertRpcError(grpc.StatusCode.OUT_OF_RANGE, self.rpc, "GetArtifact",
                            C.GetArtifactRequest(artifact_id=arts[1].artifact_id,
                                                 offset=10 ** 6))
        ids, token = [], ""
        while True:
            page = self.rpc("ListArtifacts", C.ListArtifactsRequest(
                session_id=session, page_size=1, page_token=token))
            ids += [a.artifact_id for a in page.artifacts]
            token = page.next_page_token
            if not token:
                break
        self.assertEqual(ids, [a.artifact_id for a in arts])
        only = self.rpc("ListArtifacts", C.ListArtifactsRequest(session_id=session,
                                                                tool_call_id="c2"))
        self.assertEqual([a.artifact_id for a in only.artifacts], [arts[2].artifact_id])

    def test_compression_stats_add_up_the_reports(self):
        d = load(samples()[1])
        msgs = d["messages"]
        session = "s-" + uuid.uuid4().hex
        reports = []
        for end, strategy in ((120, C.COMPRESSION_STRATEGY_TRIMMING),
                              (180, C.COMPRESSION_STRATEGY_TRIMMING),
                              (len(msgs), C.COMPRESSION_STRATEGY_SUMMARIZING)):
            resp = self.compress(conversation=openai_conv(msgs[:end], d.get("tools")),
                                 model="gpt-4o", context_window_tokens=64000,
                                 policy=C.CompressionPolicy(strategy=strategy),
                                 session_id=session)
            reports.append(resp.report)
        # A dry run is not counted.
        self.compress(conversation=openai_conv(msgs, d.get("tools")), model="gpt-4o",
                      context_window_tokens=64000, session_id=session, dry_run=True)
        st = self.rpc("GetCompressionStats", C.GetCompressionStatsRequest(session_id=session))
        self.assertEqual(st.compress_calls, 3)
        self.assertEqual(st.triggered_calls, sum(r.triggered for r in reports))
        self.assertEqual(st.tokens_before, sum(r.tokens_before for r in reports))
        self.assertEqual(st.tokens_after, sum(r.tokens_after for r in reports))
        self.assertEqual(st.tokens_saved, st.tokens_before - st.tokens_after)
        self.assertEqual(st.artifacts_created, sum(len(r.artifacts) for r in reports))
        self.assertEqual(st.artifact_bytes, sum(a.size_bytes for r in reports for a in r.artifacts))
        self.assertEqual(st.boundary_moves, sum(r.boundary_moved for r in reports))
        self.assertEqual(st.cache_tokens_invalidated,
                         sum(r.cache_tokens_invalidated for r in reports))
        self.assertEqual(st.trim_boundary, reports[-1].trim_boundary_after)
        self.assertEqual(st.history_messages, len(msgs))
        by_strategy = {s.strategy: s for s in st.by_strategy}
        self.assertEqual(by_strategy[C.COMPRESSION_STRATEGY_TRIMMING].calls, 2)
        self.assertEqual(by_strategy[C.COMPRESSION_STRATEGY_SUMMARIZING].calls, 1)
        self.assertEqual(sum(s.tokens_saved for s in st.by_strategy), st.tokens_saved)
        for ls in st.by_layer:
            runs = [l for r in reports for l in r.layers if l.layer == ls.layer]
            self.assertEqual(ls.applied,
                             sum(l.outcome == C.LAYER_OUTCOME_APPLIED for l in runs), ls)
            self.assertEqual(ls.tokens_saved, sum(l.tokens_saved for l in runs
                                                  if l.outcome == C.LAYER_OUTCOME_APPLIED))
        tenant = self.rpc("GetCompressionStats", C.GetCompressionStatsRequest())
        self.assertGreaterEqual(tenant.compress_calls, st.compress_calls)
        self.assertEqual(self.rpc("GetCompressionStats", C.GetCompressionStatsRequest(),
                                  self.other_md).compress_calls, 0)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.rpc, "GetCompressionStats",
                            C.GetCompressionStatsRequest(session_id="s-unknown"),
                            contains=("session_id",))
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.rpc, "GetCompressionStats",
                            C.GetCompressionStatsRequest(since_unix_ms=-1),
                            contains=("since_unix_ms",))


class CtlCompress(cgtest.TestCase):
    """ctxguardctl compress FILE: the report on stdout and the result in --out."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        t = cls.srv.create_tenant()
        cls.key = cls.srv.create_key(t.tenant_id).secret

    def ctl(self, *args, expect=0):
        env = cgtest.clean_env({"CTXGUARD_TARGET": self.srv.target, "CTXGUARD_KEY": self.key})
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, expect, f"ctxguardctl {' '.join(args)}: exit "
                         f"{proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def test_compress_a_sample_and_write_the_result(self):
        path = samples()[0]
        with tempfile.TemporaryDirectory() as d:
            src = load(path)
            conv_path = os.path.join(d, "in.json")
            with open(conv_path, "w") as f:
                json.dump({"messages": src["messages"], "tools": src.get("tools", [])}, f)
            out_path = os.path.join(d, "out.json")
            r = self.ctl("compress", conv_path, "--model", src["model"], "--window", "20000",
                         "--target-ratio", "0.3", "--force", "--out", out_path)
            self.assertIn("tokens: ", r.stdout)
            self.assertIn("NORMALIZE", r.stdout)
            out = load(out_path)
            msgs = out["messages"] if isinstance(out, dict) else out
            self.assertGreater(len(msgs), 0)
            self.assertLess(len(json.dumps(msgs)), len(json.dumps(src["messages"])))
            j = json.loads(self.ctl("--json", "compress", conv_path, "--model", src["model"],
                                    "--window", "20000", "--force").stdout)
            self.assertIn("report", j)
        self.ctl("compress", "/nonexistent.json", expect=1)
        self.ctl("compress", path, "--strategy", "nope", expect=2)
