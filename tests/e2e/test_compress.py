"""ContextService.Compress (stateless) and ValidateContext end to end: the sample conversations
of /work/shared/data/conversations compressed to 37.5 % of a 128k window (every output valid,
target met where reachable, report numbers consistent), determinism, the stateless trim
boundary, and bad input."""

import glob
import json
import os

import grpc

import cgtest
from cgtest import common_pb2, context_pb2, context_pb2_grpc

C = context_pb2
DATA = os.environ.get("CG_CONVERSATIONS", "/work/shared/data/conversations")
WINDOW = 128000


def samples():
    return sorted(glob.glob(os.path.join(DATA, "conv-*.json")))


def openai_conv(messages, tools=None, model=None):
    body = {"messages": messages}
    if tools:
        body["tools"] = tools
    if model:
        body["model"] = model
    return common_pb2.Conversation(openai_json=json.dumps(body))


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
        self.assertGreaterEqual(len(files), 20, DATA)
        reached = 0
        for path in files:
            with self.subTest(conversation=os.path.basename(path)):
                d = json.load(open(path))
                conv = openai_conv(d["messages"], d.get("tools"))
                pol = C.CompressionPolicy(target_ratio=0.375, reserved_output_tokens=0)
                resp = self.compress(conversation=conv, model=d["model"],
                                     context_window_tokens=WINDOW, policy=pol, force=True)
                rep = resp.report
                self.check_report(rep, resp.conversation.openai_json)
                self.assertEqual(resp.trim_boundary, rep.trim_boundary_after)
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

    def test_same_input_and_boundary_give_identical_output(self):
        d = json.load(open(samples()[1]))
        conv = openai_conv(d["messages"], d.get("tools"))
        a = self.compress(conversation=conv, model="gpt-4o", context_window_tokens=WINDOW,
                          trim_boundary=5)
        b = self.compress(conversation=conv, model="gpt-4o", context_window_tokens=WINDOW,
                          trim_boundary=5)
        self.assertEqual(a.conversation.openai_json, b.conversation.openai_json)
        self.assertEqual(a.trim_boundary, b.trim_boundary)

    def test_trimming_boundary_round_trip_keeps_the_prefix(self):
        d = json.load(open(samples()[1]))
        msgs = d["messages"]
        starts = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        boundary, prev, kept, turns = 0, None, 0, 0
        pol = C.CompressionPolicy(strategy=C.COMPRESSION_STRATEGY_TRIMMING)
        for end in starts[1:] + [len(msgs)]:
            resp = self.compress(conversation=openai_conv(msgs[:end], d.get("tools")),
                                 model="gpt-4o", context_window_tokens=64000, policy=pol,
                                 trim_boundary=boundary)
            self.assertGreaterEqual(resp.trim_boundary, boundary)
            boundary = resp.trim_boundary
            out = json.loads(resp.conversation.openai_json)
            out = out["messages"] if isinstance(out, dict) else out
            if prev is not None:
                turns += 1
                kept += out[:len(prev)] == prev
            prev = out
        self.assertGreater(boundary, 0)
        self.assertGreaterEqual(kept, 0.8 * turns, f"prefix kept on {kept} of {turns} turns")

    def test_session_id_is_not_implemented_yet(self):
        conv = openai_conv([{"role": "user", "content": "hi"}])
        self.assertRpcError(grpc.StatusCode.UNIMPLEMENTED, self.compress, conversation=conv,
                            session_id="s1", contains=("session_id",))

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
