"""The ctxguard package against a real server (cgtest.Server): guard, typed errors,
backpressure, approvals, watch, CountTokens/Compress on OpenAI dicts, AsyncClient."""

import asyncio
import json
import os
import re
import sys
import threading
import time
import uuid

import grpc

import sdkenv
from sdkenv import cgtest, ctxguard
from ctxguard import (ApprovalRequired, AsyncClient, BudgetExhausted, Client, InvalidArgument,
                      ScopeNotFound, Unavailable)
from ctxguard import budget_pb2 as B


def sid(prefix="s"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class GuardTest(sdkenv.ServerCase):
    def test_commits_recorded_usage_on_success(self):
        s = sid()
        self.client.set_budget(s, 100_000)
        with self.client.guard(f"{s}", 2000, model="gpt-4o") as g:
            self.assertTrue(g.reservation_id)
            self.assertEqual(self.used(s).reserved_tokens, 2000)
            g.record(input_tokens=120, output_tokens=30, cache_read_tokens=10,
                     cache_write_tokens=5)
        self.assertEqual(g.commit_response.reservation.state, B.RESERVATION_STATE_COMMITTED)
        root = self.client.get_usage(s, include_by_model=True).root
        self.assertEqual((root.usage.input_tokens, root.usage.output_tokens,
                          root.usage.cache_read_tokens, root.usage.cache_write_tokens),
                         (120, 30, 10, 5))
        self.assertEqual(root.used_tokens, 165)
        self.assertEqual(root.reserved_tokens, 0)
        self.assertEqual(root.open_reservations, 0)
        # One ledger entry, for the model.
        self.assertEqual([(m.model, m.calls) for m in root.by_model], [("gpt-4o", 1)])
        # And in the session's spend history (the last hour by minute).
        h = self.client.usage_history(s)
        self.assertEqual((h.step_seconds, h.total_entries, h.total.input_tokens,
                          h.total.output_tokens), (60, 1, 120, 30))
        self.assertEqual(sum(p.entries for p in h.points), 1)

    def test_commit_from_a_provider_response_and_the_scope_dataclass(self):
        s = sid()
        self.client.set_budget(s, 100_000)
        self.client.set_budget(f"{s}/t1", 50_000)
        self.client.set_budget(ctxguard.Scope(s, "t1", "a1"), 10_000)
        resp = {"model": "gpt-4o", "usage": {"prompt_tokens": 700, "completion_tokens": 40,
                                              "prompt_tokens_details": {"cached_tokens": 600}}}
        with self.client.guard(ctxguard.Scope(s, "t1", "a1"), 1000) as g:
            g.commit_from(resp)
        u = self.used(f"{s}/t1/a1").usage
        self.assertEqual((u.input_tokens, u.output_tokens, u.cache_read_tokens), (100, 40, 600))
        self.assertEqual(self.used(s).used_tokens, 740)  # rolled up to the session

    def test_commits_the_estimate_when_nothing_was_recorded(self):
        s = sid()
        self.client.set_budget(s, 100_000)
        with self.client.guard(s, 900, estimated_output_tokens=200):
            pass
        u = self.used(s)
        self.assertEqual((u.usage.input_tokens, u.usage.output_tokens), (700, 200))
        self.assertEqual(u.reserved_tokens, 0)

    def test_releases_on_exception_and_reraises(self):
        s = sid()
        self.client.set_budget(s, 100_000)

        class Boom(Exception):
            pass

        with self.assertRaises(Boom):
            with self.client.guard(s, 5000) as g:
                self.assertEqual(self.used(s).reserved_tokens, 5000)
                g.record(input_tokens=10)
                raise Boom()
        u = self.used(s)
        self.assertEqual((u.used_tokens, u.reserved_tokens, u.open_reservations), (0, 0, 0))

    def test_decorator(self):
        s = sid()
        self.client.set_budget(s, 100_000)

        @self.client.guard(s, 500, model="claude-sonnet-4")
        def call_model(text):
            return {"type": "message", "usage": {"input_tokens": len(text), "output_tokens": 9,
                                                 "cache_read_input_tokens": 0,
                                                 "cache_creation_input_tokens": 100}}

        call_model("abcd")
        call_model("abcdefgh")
        u = self.used(s).usage
        self.assertEqual((u.input_tokens, u.output_tokens, u.cache_write_tokens), (12, 18, 200))

    def test_budget_exhausted_on_a_hard_limit(self):
        s = sid()
        self.client.set_budget(s, 1000, mode="HARD")
        with self.assertRaises(BudgetExhausted) as cm:
            with self.client.guard(s, 5000):
                self.fail("the guarded block ran past a HARD limit")
        e = cm.exception
        self.assertEqual(e.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(e.reason, "BUDGET_EXHAUSTED")
        self.assertIsInstance(e, ctxguard.CtxguardError)
        # The server's own ErrorInfo, not a fallback: the refusing level and its figures.
        self.assertTrue(e.has_details)
        self.assertEqual(e.metadata["limit_tokens"], "1000")
        self.assertEqual(e.metadata["requested_tokens"], "5000")
        self.assertEqual(e.metadata["level"], "session")
        self.assertEqual(self.used(s).reserved_tokens, 0)

    def test_approval_required_then_approved(self):
        s = sid()
        self.client.set_budget(s, 1000, mode="APPROVAL")
        with self.assertRaises(ApprovalRequired) as cm:
            with self.client.guard(s, 4000):
                self.fail("the guarded block ran without an approval")
        aid = cm.exception.approval_id
        self.assertTrue(aid)
        self.assertEqual(self.client.get_approval(aid).state, B.APPROVAL_STATE_PENDING)
        self.assertEqual([a.approval_id for a in self.client.list_approvals(s).approvals], [aid])

        decided = []
        t = threading.Thread(target=lambda: decided.append(
            self.client.wait_for_approval(aid, timeout=20)))
        t.start()
        # The key that opened the approval may not decide it: an operator key does.
        with self.assertRaises(ctxguard.CtxguardError) as self_approval:
            self.client.resolve_approval(aid, approve=True)
        self.assertEqual(self_approval.exception.code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(self_approval.exception.reason, "SELF_APPROVAL")
        operator = self.srv.create_key(self.tenant.tenant_id, name="approver", role="operator")
        with Client(self.srv.target, api_key=operator.secret, timeout=15) as approver:
            approver.resolve_approval(aid, approve=True, granted_tokens=4000, note="ok")
        t.join(25)
        self.assertEqual(decided[0].state, B.APPROVAL_STATE_APPROVED)
        self.assertEqual(self.client.get_approval(aid).decided_by_key_id, operator.key.key_id)
        with self.client.guard(s, 4000) as g:
            g.record(input_tokens=3000)
        self.assertEqual(self.used(s).used_tokens, 3000)

    def test_backpressure_held_by_the_server(self):
        s = sid()
        self.client.set_budget(s, 10_000, backpressure_tiers=[(0.9, 750)])
        self.client.record_usage(s, {"input_tokens": 8900})
        t0 = time.monotonic()
        with self.client.guard(s, 200) as g:
            elapsed = time.monotonic() - t0
            g.record(input_tokens=50)
        self.assertGreaterEqual(elapsed, 0.75)
        self.assertEqual(g.backpressure_delay_ms, 750)
        self.assertGreaterEqual(g.response.delay_held_ms, 740)
        self.assertEqual(g.slept_seconds, 0.0)

    def test_backpressure_slept_by_the_client_with_a_hook(self):
        s = sid()
        self.client.set_budget(s, 10_000, backpressure_tiers=[(0.9, 750)])
        self.client.record_usage(s, {"input_tokens": 8900})
        asked = []

        def hook(delay_s, resp):
            asked.append((delay_s, resp.delay_held_ms))
            return None  # sleep what the server asks

        t0 = time.monotonic()
        with self.client.guard(s, 200, delay="client", on_backpressure=hook) as g:
            elapsed = time.monotonic() - t0
        self.assertEqual(asked, [(0.75, 0)])  # RETURN_ONLY: the server held nothing
        self.assertGreaterEqual(elapsed, 0.75)
        self.assertEqual(g.slept_seconds, 0.75)

        chosen = []

        def longer(delay_s, resp):
            chosen.append(delay_s)
            return delay_s + 0.25

        t0 = time.monotonic()
        with self.client.guard(s, 200, delay="client", on_backpressure=longer) as g:
            elapsed = time.monotonic() - t0
        self.assertEqual(chosen, [0.75])
        self.assertGreaterEqual(elapsed, 1.0)
        self.assertEqual(g.slept_seconds, 1.0)


class KeysTest(sdkenv.ServerCase):
    def test_an_orchestrator_mints_a_scoped_expiring_agent_key(self):
        made = self.client.create_api_key(name="worker", role="agent", scope="s1/t1",
                                          ttl_ms=3_600_000)
        self.assertEqual(made.key.role, ctxguard.admin_pb2.API_KEY_ROLE_AGENT)
        self.assertEqual((made.key.scope.session_id, made.key.scope.task_id), ("s1", "t1"))
        self.assertGreater(made.key.expires_at_unix_ms, made.key.created_at_unix_ms)
        with ctxguard.Client(self.srv.target, api_key=made.secret, timeout=15) as worker:
            me = worker.who_am_i()
            self.assertEqual(me.role, ctxguard.admin_pb2.API_KEY_ROLE_AGENT)
            self.assertEqual(me.scope.task_id, "t1")
            with self.assertRaises(ctxguard.PermissionDenied):
                worker.create_api_key(role="agent")


class ErrorsTest(sdkenv.ServerCase):
    def test_scope_not_found(self):
        with self.assertRaises(ScopeNotFound) as cm:
            self.client.reserve("no-such-session", 10)
        self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertEqual(cm.exception.reason, "SCOPE_NOT_FOUND")
        with self.assertRaises(ScopeNotFound):
            with self.client.guard("no-such-session/t", 10):
                pass

    def test_a_spend_names_its_scope(self):
        # No scope is refused (never a silent spend on the whole tenant); TENANT or "-"
        # names the tenant.
        for spend in (lambda sc: self.client.record_usage(sc, {"input_tokens": 5}),
                      lambda sc: self.client.check_budget(sc, 5),
                      lambda sc: self.client.reserve(sc, 5)):
            for no_scope in (None, ""):
                with self.assertRaises(InvalidArgument) as cm:
                    spend(no_scope)
                self.assertEqual(cm.exception.reason, "SCOPE_REQUIRED")
                self.assertEqual(cm.exception.field, "scope")
        before = self.client.get_usage().root.used_tokens
        self.client.record_usage(ctxguard.TENANT, {"input_tokens": 5})
        self.client.reserve("-", 5)
        self.assertGreaterEqual(self.client.get_usage().root.used_tokens, before + 5)

    def test_invalid_argument_names_the_field(self):
        s = sid()
        with self.assertRaises(InvalidArgument) as cm:
            self.client.set_budget(s, 1000, warning_ratio=1.5)
        self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(cm.exception.field, "settings.warning_ratio", str(cm.exception))

    def test_reservation_not_found_and_unauthenticated(self):
        with self.assertRaises(ctxguard.ReservationNotFound):
            self.client.release(str(uuid.uuid4()))
        bad = Client(self.srv.target, api_key="cgk_nope", timeout=5)
        self.addCleanup(bad.close)
        with self.assertRaises(ctxguard.Unauthenticated):
            bad.get_usage()

    def test_unavailable_when_nothing_listens(self):
        c = Client("127.0.0.1:1", api_key=self.key, timeout=1.5)
        self.addCleanup(c.close)
        t0 = time.monotonic()
        with self.assertRaises(Unavailable) as cm:
            c.get_usage()
        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertLess(time.monotonic() - t0, 10)  # retries stay within the deadline


class ContextTest(sdkenv.ServerCase):
    MESSAGES = [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
    ]

    def raw_count(self, openai_json, model):
        stub = cgtest.context_pb2_grpc.ContextServiceStub(self.srv.channel())
        C = cgtest.context_pb2
        return stub.CountTokens(
            C.CountTokensRequest(model=model,
                                 conversation=cgtest.common_pb2.Conversation(
                                     openai_json=openai_json)),
            metadata=cgtest.bearer(self.key), timeout=10)

    def test_count_tokens_on_openai_dicts(self):
        one = self.client.count_tokens([{"role": "user", "content": "Hello"}], model="gpt-4o")
        # OpenAI's chat accounting: 3 per message + "user" (1) + "Hello" (1) + 3 priming.
        self.assertEqual(one.total_tokens, 8)
        self.assertEqual(one.method, "EXACT")
        self.assertEqual(one.encoding, "O200K_BASE")
        c = self.client.count_tokens(self.MESSAGES, model="gpt-4o")
        raw = self.raw_count(json.dumps(self.MESSAGES), "gpt-4o")
        self.assertEqual(c.total_tokens, raw.total_tokens)
        self.assertEqual(c.message_tokens, list(raw.message_tokens))
        self.assertEqual(len(c.message_tokens), 4)

    def test_count_tokens_anthropic_format(self):
        c = self.client.count_tokens([{"role": "user", "content": "Hello there"}],
                                     model="claude-sonnet-4", format="anthropic",
                                     system="Be brief.")
        self.assertGreater(c.total_tokens, 0)
        self.assertIn(c.method, ("ESTIMATED", "CALIBRATED"))
        self.assertEqual(len(c.message_tokens), 2)  # the system became a leading message

    def test_compress_messages_on_openai_dicts(self):
        msgs = [{"role": "system", "content": "You are a helpful assistant."}]
        for i in range(40):
            msgs.append({"role": "user", "content": f"Question {i}: " + "tell me more " * 40})
            msgs.append({"role": "assistant", "content": f"Answer {i}: " + "here it is " * 40})
        before = self.client.count_tokens(msgs, model="gpt-4o").total_tokens
        r = self.client.compress_messages(msgs, "gpt-4o", context_window_tokens=before // 2,
                                          policy={"strategy": "TRIMMING"})
        self.assertTrue(r.report.triggered)
        self.assertEqual(r.tokens_before, before)
        self.assertLess(len(r.messages), len(msgs))
        self.assertEqual(r.messages[0], msgs[0])  # the system message is kept as it was
        self.assertTrue(all(isinstance(m, dict) and "role" in m for m in r.messages))
        self.assertEqual(r.messages[-1]["role"], "assistant")
        after = self.client.count_tokens(r.messages, model="gpt-4o").total_tokens
        self.assertEqual(after, r.tokens_after)
        self.assertLess(after, before)


    def test_compress_messages_in_responses_and_gemini_formats(self):
        """Responses input items and Gemini contents go in with their system prompt and come
        back in the same format: items/contents as dicts, the prompt apart."""
        items, contents = [], []
        for i in range(30):
            q, a = f"Question {i}: " + "tell me more " * 40, f"Answer {i}: " + "here it is " * 40
            items += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            contents += [{"role": "user", "parts": [{"text": q}]},
                         {"role": "model", "parts": [{"text": a}]}]
        for fmt, msgs in (("responses", items), ("gemini", contents)):
            with self.subTest(format=fmt):
                before = self.client.count_tokens(msgs, model="gpt-4o", format=fmt,
                                                  system="Be brief.").total_tokens
                r = self.client.compress_messages(msgs, "gpt-4o", format=fmt, system="Be brief.",
                                                  context_window_tokens=before // 2,
                                                  summarizer="EXTRACTIVE")
                self.assertTrue(r.report.triggered)
                self.assertLess(len(r.messages), len(msgs))
                if fmt == "responses":
                    self.assertEqual(r.system, "Be brief.")
                    self.assertTrue(all(m["role"] in ("user", "assistant") for m in r.messages))
                else:
                    self.assertEqual(r.system, {"parts": [{"text": "Be brief."}]})
                    self.assertTrue(all(m["role"] in ("user", "model") for m in r.messages))
                # The newest user text as it was (assistant text may be trimmed; the summary,
                # a user message, may share a message with it).
                newest = msgs[-2]["content"] if fmt == "responses" else msgs[-2]["parts"][0]["text"]
                self.assertIn(json.dumps(newest), json.dumps(r.messages))
                after = self.client.count_tokens(r.messages, model="gpt-4o", format=fmt,
                                                 system=r.system).total_tokens
                self.assertEqual(after, r.tokens_after)

    def test_conversation_formats(self):
        from ctxguard import _common
        c = _common.conversation([{"role": "user", "parts": [{"text": "hi"}]}], format="gemini",
                                 system="sys")
        self.assertEqual(c.WhichOneof("content"), "gemini_json")
        self.assertEqual(json.loads(c.gemini_json),
                         {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                          "systemInstruction": {"parts": [{"text": "sys"}]}})
        c = _common.conversation([{"role": "user", "content": "hi"}], format="responses",
                                 system="sys")
        self.assertEqual(json.loads(c.responses_json),
                         {"input": [{"role": "user", "content": "hi"}], "instructions": "sys"})
        with self.assertRaises(ValueError):
            _common.conversation([], format="openai", system="sys")
        with self.assertRaises(ValueError):
            _common.conversation([], format="bard")


class RecallTest(sdkenv.ServerCase):
    """Issue 16 item 3: whatever Compress trimmed or summarized in a session, the pointer it
    left leads back to the original through the ctxguard_recall tool (GetHistory), and a
    search of the history finds it (SearchHistory)."""

    def test_every_planted_fact_is_in_the_output_or_behind_its_pointer(self):
        msgs = [{"role": "system", "content": "You are a build assistant."}]
        facts = []
        for i in range(40):
            code, path = f"K{i * 37 + 5}Z", f"/srv/build/job{i}.txt"
            msgs.append({"role": "user", "content": f"Turn {i}: the access code is {code}. "
                         + "Please keep going with the plan. " * 30})
            msgs.append({"role": "assistant", "content": f"Noted; I wrote it to {path}. "
                         + "Working on the next step now. " * 30})
            facts += [(len(msgs) - 2, code), (len(msgs) - 1, path)]
        before = self.client.count_tokens(msgs, model="gpt-4o").total_tokens
        sid = "recall-" + uuid.uuid4().hex[:10]
        r = self.client.compress_messages(msgs, "gpt-4o", context_window_tokens=before // 3,
                                          session_id=sid, policy={"reserved_output_tokens": 0})
        self.assertTrue(r.report.triggered)
        out = json.dumps(r.messages)
        trimmed = {int(n) for n in re.findall(r"\[trimmed: history (\d+)\]", out)}
        spans = [(int(a), int(b)) for a, b in
                 re.findall(r"\[ctxguard summary of messages (\d+)-(\d+)", out)]
        self.assertTrue(trimmed or spans, "the call reduced something")
        followed = 0
        for idx, fact in facts:
            if fact in out:
                continue
            span = next(((a, b) for a, b in spans if a <= idx <= b), None)
            if span is None:
                self.assertIn(idx, trimmed, f"message {idx} ({fact}) went without a pointer")
                span = (idx, idx)
            text = self.client.recall(sid, json.dumps({"from_position": idx,
                                                       "to_position": idx}))
            self.assertIn(fact, text, f"ctxguard_recall({idx}) from pointer {span}")
            followed += 1
        self.assertGreater(followed, 10)
        # Search finds a fact by what was said, with its position.
        code = facts[2][1]
        found = self.client.recall(sid, {"query": code.lower()})
        self.assertIn(f"history position {facts[2][0]} (user, text)", found)
        hits = self.client.search_history(sid, r"job[0-9]+\.txt", regex=True, page_size=7)
        seen = [m.position for m in hits.matches]
        while hits.next_page_token:
            hits = self.client.search_history(sid, r"job[0-9]+\.txt", regex=True,
                                              page_size=7, page_token=hits.next_page_token)
            seen += [m.position for m in hits.matches]
        self.assertEqual(seen, [i for i, f in facts if f.startswith("/srv/")])

    def test_the_tool_definition_and_bad_calls(self):
        tool = ctxguard.recall_tool("openai")
        self.assertEqual(tool["function"]["name"], ctxguard.RECALL_TOOL_NAME)
        self.assertEqual(ctxguard.recall_tool("anthropic")["input_schema"]["type"], "object")
        json.dumps(tool)  # plain JSON, as a provider takes it
        sid = "recall-" + uuid.uuid4().hex[:10]
        self.client.compress_messages([{"role": "user", "content": "hello"}], "gpt-4o",
                                      session_id=sid)
        self.assertIn("exactly one", self.client.recall(sid, {"from_position": 0, "query": "x"}))
        self.assertIn("query", self.client.recall(sid, {"query": "a(b", "regex": True}))
        self.assertIn("not JSON", self.client.recall(sid, "{"))
        self.assertIn("hello", self.client.recall(sid, {"from_position": 0}))
        self.assertIn("no match", self.client.recall(sid, {"query": "absent"}))
        self.assertIn("session_id", self.client.recall("nope-" + sid, {"query": "x"}))


class WatchTest(sdkenv.ServerCase):
    def test_watch_yields_an_event_after_a_commit(self):
        s = sid()
        self.client.set_budget(s, 100_000)
        seen = []
        with self.client.watch(s, include_descendants=True, send_snapshot=True,
                               min_update_interval_ms=0, timeout=30) as w:
            for ev in w:
                seen.append(ev)
                if ev.type == B.USAGE_EVENT_TYPE_SNAPSHOT:
                    with self.client.guard(s, 300) as g:  # the stream is subscribed now
                        g.record(input_tokens=77)
                elif (ev.type == B.USAGE_EVENT_TYPE_USAGE_CHANGED
                      and ev.status.used_tokens == 77):
                    break
        self.assertEqual(seen[0].type, B.USAGE_EVENT_TYPE_SNAPSHOT)
        self.assertEqual(seen[-1].type, B.USAGE_EVENT_TYPE_USAGE_CHANGED,
                         [B.UsageEventType.Name(e.type) for e in seen])
        self.assertEqual(seen[-1].scope.session_id, s)


class AsyncTest(sdkenv.ServerCase):
    def test_async_flow(self):
        s = sid()

        async def main():
            async with AsyncClient(self.srv.target, api_key=self.key, timeout=15) as c:
                await c.set_budget(s, 10_000)
                async with c.guard(s, 1000, model="gpt-4o") as g:
                    g.record(input_tokens=400, output_tokens=100)
                root = (await c.get_usage(s)).root
                with self.assertRaises(BudgetExhausted):
                    async with c.guard(s, 20_000):
                        pass
                with self.assertRaises(RuntimeError):
                    async with c.guard(s, 2000):
                        raise RuntimeError("provider failed")

                @c.guard(s, 100)
                async def decorated():
                    return {"usage": {"prompt_tokens": 10, "completion_tokens": 2}}

                await decorated()
                count = await c.count_tokens([{"role": "user", "content": "Hello"}],
                                             model="gpt-4o")
                events = []
                async for ev in c.watch(s, send_snapshot=True, timeout=10):
                    events.append(ev)
                    break
                after = (await c.get_usage(s)).root
                return root, count, events, after

        root, count, events, after = asyncio.run(main())
        self.assertEqual((root.used_tokens, root.reserved_tokens), (500, 0))
        self.assertEqual(count.total_tokens, 8)
        self.assertEqual(events[0].type, B.USAGE_EVENT_TYPE_SNAPSHOT)
        self.assertEqual((after.used_tokens, after.reserved_tokens), (512, 0))

    def test_cancelled_during_the_client_side_delay_releases(self):
        s = sid()
        self.client.set_budget(s, 10_000, backpressure_tiers=[(0.9, 750)])
        self.client.record_usage(s, {"input_tokens": 8900})

        async def main():
            async with AsyncClient(self.srv.target, api_key=self.key, timeout=15) as c:
                sleeping = asyncio.Event()

                def hook(delay_s, resp):
                    sleeping.set()  # reserved; the guard sleeps next
                    return 30.0

                async def guarded():
                    async with c.guard(s, 200, delay="client", on_backpressure=hook):
                        raise AssertionError("the block ran before the delay was over")

                task = asyncio.ensure_future(guarded())
                await asyncio.wait_for(sleeping.wait(), 15)
                self.assertEqual(self.used(s).reserved_tokens, 200)
                task.cancel()  # while it sleeps
                with self.assertRaises(asyncio.CancelledError):
                    await task

        asyncio.run(main())
        u = self.used(s)
        self.assertEqual((u.used_tokens, u.reserved_tokens, u.open_reservations), (8900, 0, 0))

    def test_sync_client_in_async_with(self):
        s = sid()
        self.client.set_budget(s, 10_000)

        async def main():
            async with self.client.guard(s, 100) as g:
                g.record(output_tokens=33)

        asyncio.run(main())
        self.assertEqual(self.used(s).used_tokens, 33)


class RestartTest(cgtest.TestCase):
    """A server restart in the middle of a guard loop: every iteration either commits
    (calls retried across the restart) or raises Unavailable, and nothing committed is lost."""

    def test_survives_a_restart(self):
        schema = cgtest.new_schema()
        self.addCleanup(cgtest.drop_schema, schema)
        first = cgtest.Server(schema=schema, log_level="info")
        self.addCleanup(first.close)
        first.start()
        port = first.port
        tenant = first.create_tenant()
        key = first.create_key(tenant.tenant_id).secret
        client = Client(first.target, api_key=key, timeout=20)
        self.addCleanup(client.close)
        s = sid()
        client.set_budget(s, 1_000_000)

        restarted = threading.Event()
        servers = [first]
        failures = []
        took = []

        def restart():
            t0 = time.monotonic()
            first.stop()
            second = cgtest.Server(schema=schema, log_level="info",
                                   env={"CTXGUARD_LISTEN": f"127.0.0.1:{port}"})
            servers.append(second)
            self.addCleanup(second.close)
            second.start()
            took.append(time.monotonic() - t0)
            restarted.set()

        committed = 0
        after_restart = 0
        restarter = None
        deadline = time.monotonic() + 120
        while after_restart < 10 and time.monotonic() < deadline:
            if committed == 10 and restarter is None:
                restarter = threading.Thread(target=restart)
                restarter.start()
            was_restarted = restarted.is_set()
            try:
                with client.guard(s, 100, model="gpt-4o") as g:
                    g.record(input_tokens=10, output_tokens=5)
                committed += 1
                after_restart += was_restarted
            except Unavailable as e:
                failures.append(e)
        restarter.join(60)
        if os.environ.get("CG_SDK_VERBOSE"):
            print(f"\nrestart: {committed} commits, {len(failures)} Unavailable: {[(e.method, str(e)) for e in failures]}; restart took {took}", file=sys.stderr)
        self.assertTrue(restarted.is_set(), "the server was not restarted")
        self.assertEqual(servers[1].port, port)
        # Failures are allowed only as Unavailable (caught above); most calls must have
        # been carried across the restart by retries.
        self.assertGreaterEqual(committed, 20)
        self.assertLessEqual(len(failures), 2, [str(e) for e in failures])
        root = client.get_usage(s, include_by_model=True).root
        self.assertEqual(root.used_tokens, 15 * committed,
                         f"{committed} commits, {len(failures)} Unavailable")
        if not failures:
            self.assertEqual(root.reserved_tokens, 0)
        self.assertEqual([(m.model, m.calls) for m in root.by_model], [("gpt-4o", committed)])


if __name__ == "__main__":
    import unittest
    unittest.main()
