"""BudgetService CloseScope / GetUsage / ListScopes end to end, and ctxguardctl `budget set`
and `usage`, against a real server and PostgreSQL: what a dashboard and an orchestrator
finishing its work see, bad input named by field, and tenants kept apart."""

import json
import os
import subprocess
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
INVALID, NOT_FOUND = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class Tenant:
    """A tenant with its own key and stub on a server."""

    def __init__(self, srv):
        t = srv.create_tenant()
        self.id = t.tenant_id
        self.key = srv.create_key(t.tenant_id).secret
        self.md = cgtest.bearer(self.key)
        self.stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())

    def set(self, sc, limit, **kw):
        return self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, **kw)),
            metadata=self.md, timeout=10)

    def reserve(self, sc, tokens):
        return self.stub.Reserve(B.ReserveRequest(scope=sc, tokens=tokens), metadata=self.md,
                                 timeout=10)

    def commit(self, rid, tokens, **kw):
        return self.stub.Commit(B.CommitRequest(
            reservation_id=rid, usage=common_pb2.TokenUsage(input_tokens=tokens), **kw),
            metadata=self.md, timeout=10)

    def close(self, sc):
        return self.stub.CloseScope(B.CloseScopeRequest(scope=sc), metadata=self.md, timeout=10)

    def record(self, sc, u, key=None, **kw):
        return self.stub.RecordUsage(B.RecordUsageRequest(
            scope=sc, usage=u, idempotency_key=key or "k-" + uuid.uuid4().hex, **kw),
            metadata=self.md, timeout=10)

    def usage(self, sc=None, **kw):
        return self.stub.GetUsage(B.GetUsageRequest(scope=sc, **kw), metadata=self.md,
                                  timeout=10)

    def list(self, parent=None, **kw):
        return self.stub.ListScopes(B.ListScopesRequest(parent=parent, **kw), metadata=self.md,
                                    timeout=10)


class Scopes(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def setUp(self):
        self.t = Tenant(self.srv)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.t.set(scope(), 100000)
        self.t.set(scope(self.s), 10000)
        self.t.set(scope(self.s, "t1"), 5000)
        self.t.set(scope(self.s, "t1", "a1"), 1000)
        self.t.set(scope(self.s, "t2"), 5000)

    # ------------------------------------------------------------------ usage detail --

    def test_usage_by_kind_model_and_last_activity(self):
        a1, t2 = scope(self.s, "t1", "a1"), scope(self.s, "t2")
        self.t.record(a1, common_pb2.TokenUsage(input_tokens=100, output_tokens=20,
                                                cache_read_tokens=300, cache_write_tokens=4),
                      model="gpt-4o")
        self.t.record(a1, common_pb2.TokenUsage(input_tokens=10), model="claude-sonnet")
        self.t.record(t2, common_pb2.TokenUsage(input_tokens=7, output_tokens=1), model="gpt-4o")
        root = self.t.usage(scope(self.s), depth=2, include_by_model=True).root
        u = root.usage
        self.assertEqual((u.input_tokens, u.output_tokens, u.cache_read_tokens,
                          u.cache_write_tokens), (117, 21, 300, 4))
        self.assertEqual([(m.model, m.calls, m.usage.input_tokens) for m in root.by_model],
                         [("gpt-4o", 2, 107), ("claude-sonnet", 1, 10)], "most used first")
        t1 = next(c for c in root.children if c.scope.task_id == "t1")
        a1_node = t1.children[0]
        self.assertEqual([m.model for m in a1_node.by_model], ["gpt-4o", "claude-sonnet"])
        self.assertEqual(a1_node.usage.cache_read_tokens, 300)
        self.assertGreater(a1_node.last_activity_unix_ms, 0)
        self.assertGreaterEqual(root.last_activity_unix_ms, a1_node.last_activity_unix_ms)
        self.assertEqual(len(self.t.usage(scope(self.s)).root.by_model), 0, "only when asked")

    def test_exclude_cache_read_tokens_leaves_them_out_of_that_limit(self):
        a1 = scope(self.s, "t1", "a1")
        r = self.t.set(a1, 1000, exclude_cache_read_tokens=True)
        self.assertTrue(r.budget.settings.exclude_cache_read_tokens)
        self.t.record(a1, common_pb2.TokenUsage(input_tokens=50, cache_read_tokens=400))
        rid = self.t.reserve(a1, 100).reservation.reservation_id
        self.t.stub.Commit(B.CommitRequest(reservation_id=rid, usage=common_pb2.TokenUsage(
            input_tokens=30, cache_read_tokens=200)), metadata=self.t.md, timeout=10)
        nodes = self.t.usage(scope(self.s, "t1"), depth=1).root
        agent = nodes.children[0]
        self.assertEqual(agent.used_tokens, 80, "the agent's limit leaves cache reads out")
        self.assertEqual(nodes.used_tokens, 680, "the task's limit counts them")
        self.assertEqual(agent.usage.cache_read_tokens, 600, "they are still reported")
        # Turning the exclusion off puts them back; on again takes them out.
        self.t.set(a1, 1000)
        self.assertEqual(self.t.usage(a1).root.used_tokens, 680)
        self.t.set(a1, 1000, exclude_cache_read_tokens=True)
        self.assertEqual(self.t.usage(a1).root.used_tokens, 80)

    def test_list_by_last_activity_pages_most_recent_first(self):
        for t in ("t3", "t4", "t5"):
            self.t.set(scope(self.s, t), 100)
        order = ["t4", "t1", "t5", "t2"]
        for t in order:
            self.t.record(scope(self.s, t), common_pb2.TokenUsage(input_tokens=1))
        seen, token = [], ""
        while True:
            page = self.t.list(scope(self.s), order=B.SCOPE_ORDER_LAST_ACTIVITY_DESC,
                               page_size=2, page_token=token)
            seen += [u.scope.task_id for u in page.scopes]
            token = page.next_page_token
            if not token:
                break
        self.assertEqual(seen, list(reversed(order)) + ["t3"], "never active comes last")

    def test_record_usage_at_a_past_time_counts_and_keeps_its_time(self):
        a1 = scope(self.s, "t1", "a1")
        past = int(time.time() * 1000) - 3_600_000
        self.t.record(a1, common_pb2.TokenUsage(input_tokens=5), key="past-1",
                      occurred_at_unix_ms=past)
        self.assertEqual(self.t.usage(a1).root.used_tokens, 5)
        stored = cgtest.psql(f"SELECT floor(extract(epoch FROM created_at) * 1000)::int8"
                             f" FROM ledger WHERE tenant_id = '{self.t.id}'"
                             f" AND idempotency_key = 'past-1'", dsn=self.srv.dsn).strip()
        self.assertEqual(int(stored), past)
        self.assertRpcError(INVALID, self.t.record, a1, common_pb2.TokenUsage(input_tokens=5),
                            occurred_at_unix_ms=int(time.time() * 1000) + 3_600_000,
                            contains=("occurred_at_unix_ms",))
        self.assertEqual(self.t.usage(a1).root.used_tokens, 5, "nothing recorded")

    # ------------------------------------------------------------------ CloseScope --

    def test_close_releases_holds_refuses_reserve_and_is_idempotent(self):
        held = self.t.reserve(scope(self.s, "t1", "a1"), 300).reservation.reservation_id
        self.t.reserve(scope(self.s, "t1"), 20)
        other = self.t.reserve(scope(self.s, "t2"), 40).reservation.reservation_id

        r = self.t.close(scope(self.s, "t1"))
        self.assertEqual(r.released_reservations, 2)
        self.assertEqual(r.released_tokens, 320)
        self.assertEqual(r.closed_scopes, 2, "the task and its agent")
        self.assertEqual(r.returned_tokens, 0, "nothing is allocated from parents")
        self.assertFalse(r.already_closed)
        self.assertEqual(r.usage.state, B.SCOPE_STATE_CLOSED)
        self.assertEqual(r.usage.reserved_tokens, 0)
        self.assertEqual(r.usage.scope.task_id, "t1")

        # The holds are back on every level; the sibling's stays.
        session = self.t.usage(scope(self.s)).root
        self.assertEqual(session.reserved_tokens, 40)
        self.assertEqual(self.t.usage().root.reserved_tokens, 40)

        # No more spend on the task or its agent; a late Commit of a released hold fails.
        for sc in (scope(self.s, "t1"), scope(self.s, "t1", "a1")):
            self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.t.reserve, sc, 1,
                                contains=("closed",))
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.t.commit, held, 10)
        self.t.commit(other, 30)

        again = self.t.close(scope(self.s, "t1"))
        self.assertTrue(again.already_closed)
        self.assertEqual((again.released_reservations, again.released_tokens,
                          again.closed_scopes), (0, 0, 0))

    def test_close_bad_input_and_other_tenants(self):
        self.assertRpcError(INVALID, self.t.close, scope(), contains=("scope",))
        self.assertRpcError(INVALID, self.t.close, None, contains=("scope",))
        self.assertRpcError(INVALID, self.t.close, scope("", "t1"), contains=("scope.session_id",))
        self.assertRpcError(NOT_FOUND, self.t.close, scope(self.s, "nope"),
                            contains=("scope.task_id",))
        other = Tenant(self.srv)
        self.assertRpcError(NOT_FOUND, other.close, scope(self.s), contains=("scope.session_id",))
        self.assertEqual(self.t.usage(scope(self.s)).root.state, B.SCOPE_STATE_OPEN)

    # ------------------------------------------------------------------ GetUsage ----

    def test_usage_tree_with_path_ratios_and_depth(self):
        rid = self.t.reserve(scope(self.s, "t1", "a1"), 100).reservation.reservation_id
        self.t.commit(rid, 640)
        self.t.reserve(scope(self.s, "t1", "a1"), 50)

        r = self.t.usage(scope(self.s, "t1"), depth=1)
        root = r.root
        self.assertEqual(root.scope.task_id, "t1")
        self.assertEqual(root.level, common_pb2.SCOPE_LEVEL_TASK)
        self.assertTrue(root.has_budget)
        self.assertEqual(root.budget.settings.limit_tokens, 5000)
        self.assertEqual((root.used_tokens, root.reserved_tokens), (640, 50))
        self.assertEqual(root.remaining_tokens, 5000 - 690)
        self.assertAlmostEqual(root.usage_ratio, 690 / 5000)
        self.assertEqual(root.open_reservations, 1)
        self.assertEqual(root.child_count, 1)
        self.assertEqual(len(root.children), 1)
        agent = root.children[0]
        self.assertEqual(agent.scope.agent_id, "a1")
        self.assertAlmostEqual(agent.usage_ratio, 690 / 1000)
        self.assertFalse(root.children_truncated)
        self.assertEqual([p.level for p in r.path],
                         [common_pb2.SCOPE_LEVEL_TENANT, common_pb2.SCOPE_LEVEL_SESSION])
        self.assertEqual(r.path[1].used_tokens, 640)
        self.assertGreater(r.evaluated_at_unix_ms, 0)

        # The tenant, all the way down, one child per node.
        whole = self.t.usage(depth=3, max_children=1).root
        self.assertEqual(whole.level, common_pb2.SCOPE_LEVEL_TENANT)
        self.assertEqual(len(whole.children), 1)
        self.assertEqual(len(whole.children[0].children), 1)
        self.assertTrue(whole.children[0].children_truncated, "t2 left out")
        self.assertEqual(whole.children[0].child_count, 2)
        self.assertEqual(len(self.t.usage(depth=0).root.children), 0)

    def test_usage_bad_input_and_isolation(self):
        self.assertRpcError(INVALID, self.t.usage, scope(self.s), depth=4, contains=("depth",))
        self.assertRpcError(INVALID, self.t.usage, scope(self.s), max_children=1001,
                            contains=("max_children",))
        self.assertRpcError(NOT_FOUND, self.t.usage, scope(self.s, "t1", "zz"),
                            contains=("scope.agent_id",))
        other = Tenant(self.srv)
        self.assertRpcError(NOT_FOUND, other.usage, scope(self.s), contains=("scope.session_id",))
        empty = other.usage(depth=3).root
        self.assertFalse(empty.has_budget)
        self.assertEqual(len(empty.children), 0, "tenant B sees none of tenant A's sessions")

    def test_closed_children_only_when_asked(self):
        self.t.close(scope(self.s, "t2"))
        self.assertEqual([c.scope.task_id for c in self.t.usage(scope(self.s), depth=1)
                          .root.children], ["t1"])
        both = self.t.usage(scope(self.s), depth=1, include_closed=True).root.children
        self.assertEqual([(c.scope.task_id, c.state) for c in both],
                         [("t1", B.SCOPE_STATE_OPEN), ("t2", B.SCOPE_STATE_CLOSED)])

    # ------------------------------------------------------------------ ListScopes --

    def test_list_pages_by_creation_and_by_use(self):
        for i in range(3, 8):
            self.t.set(scope(self.s, f"t{i}"), 1000)
        rid = self.t.reserve(scope(self.s, "t5"), 10).reservation.reservation_id
        self.t.commit(rid, 300)
        rid = self.t.reserve(scope(self.s, "t3"), 10).reservation.reservation_id
        self.t.commit(rid, 100)

        def all_pages(**kw):
            names, token, pages = [], "", 0
            while True:
                r = self.t.list(scope(self.s), page_size=2, page_token=token, **kw)
                names += [x.scope.task_id for x in r.scopes]
                self.assertTrue(all(len(x.children) == 0 for x in r.scopes))
                pages += 1
                token = r.next_page_token
                if not token:
                    return names, pages

        names, pages = all_pages()
        self.assertEqual(names, ["t1", "t2", "t3", "t4", "t5", "t6", "t7"])
        self.assertEqual(pages, 4)
        names, _ = all_pages(order=B.SCOPE_ORDER_USED_TOKENS_DESC)
        self.assertEqual(names[:3], ["t5", "t3", "t1"])
        self.assertEqual(sorted(names), sorted(["t1", "t2", "t3", "t4", "t5", "t6", "t7"]))

        # Every agent of the session; sessions of the tenant; closed ones only when asked.
        agents = self.t.list(scope(self.s), level=common_pb2.SCOPE_LEVEL_AGENT)
        self.assertEqual([a.scope.agent_id for a in agents.scopes], ["a1"])
        self.t.close(scope(self.s, "t1"))
        self.assertEqual(len(self.t.list(scope(self.s), level=common_pb2.SCOPE_LEVEL_AGENT)
                             .scopes), 0)
        self.assertEqual(len(self.t.list(scope(self.s), level=common_pb2.SCOPE_LEVEL_AGENT,
                                         include_closed=True).scopes), 1)
        self.assertEqual([x.scope.session_id for x in self.t.list().scopes], [self.s])

    def test_list_bad_input_and_isolation(self):
        first = self.t.list(scope(self.s), page_size=1)
        token = first.next_page_token
        self.assertTrue(token)
        self.assertRpcError(INVALID, self.t.list, scope(self.s), page_token="garbage",
                            contains=("page_token",))
        self.assertRpcError(INVALID, self.t.list, scope(self.s), page_token=token + "0",
                            contains=("page_token",))
        self.assertRpcError(INVALID, self.t.list, scope(self.s), page_size=1, page_token=token,
                            include_closed=True, contains=("page_token",))
        self.assertRpcError(INVALID, self.t.list, scope(self.s), page_size=1001,
                            contains=("page_size",))
        self.assertRpcError(INVALID, self.t.list, scope(self.s),
                            level=common_pb2.SCOPE_LEVEL_SESSION, contains=("level",))
        self.assertRpcError(INVALID, self.t.list, scope(self.s, "t1", "a1"), contains=("level",))
        self.assertRpcError(INVALID, self.t.list, scope(self.s), level=9, contains=("level",))
        self.assertRpcError(INVALID, self.t.list, scope(self.s), order=9, contains=("order",))
        self.assertRpcError(INVALID, self.t.list, scope("", "t1"), contains=("parent.session_id",))
        self.assertRpcError(NOT_FOUND, self.t.list, scope(self.s, "nope"),
                            contains=("parent.task_id",))
        other = Tenant(self.srv)
        self.assertRpcError(NOT_FOUND, other.list, scope(self.s), contains=("parent.session_id",))
        self.assertEqual(len(other.list().scopes), 0)

    # ------------------------------------------------------------------ ctxguardctl -

    def ctl(self, *args, key=None, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_KEY"] = self.t.key if key is None else key
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, expect,
                         f"ctxguardctl {' '.join(args)}: exit {proc.returncode}\n"
                         f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def test_ctl_budget_set_and_usage(self):
        out = self.ctl("budget", "set", f"{self.s}/t9", "--limit", "1000", "--mode", "soft",
                       "--warning", "0.5").stdout
        self.assertIn("t9", out)
        got = self.t.stub.GetBudget(B.GetBudgetRequest(scope=scope(self.s, "t9")),
                                    metadata=self.t.md, timeout=10).budget.settings
        self.assertEqual((got.limit_tokens, got.mode, got.warning_ratio),
                         (1000, B.BUDGET_MODE_SOFT, 0.5))
        made = json.loads(self.ctl("--json", "budget", "set", f"{self.s}/t9/a", "--limit",
                                   "100").stdout)
        self.assertEqual(made["budget"]["settings"]["limit_tokens"], 100)

        rid = self.t.reserve(scope(self.s, "t9"), 100).reservation.reservation_id
        self.t.commit(rid, 640)
        self.t.reserve(scope(self.s, "t9"), 50)
        text = self.ctl("usage", self.s).stdout
        line = next(x for x in text.splitlines() if "task t9" in x)
        self.assertRegex(line, r"\[#+\.+\]\s+640/1000 \(64%\)\s+reserved 50")
        self.assertIn(f"session {self.s}", text)
        self.assertIn("agent a", text)
        # --allocate carves the task's limit out of the session; usage shows the share.
        self.ctl("budget", "set", f"{self.s}/t8", "--limit", "200", "--allocate")
        text = self.ctl("usage", self.s).stdout
        line = next(x for x in text.splitlines() if f"session {self.s}" in x)
        self.assertIn("allocated 200", line)

        tree = json.loads(self.ctl("--json", "usage", "-").stdout)
        self.assertEqual(tree["root"]["level"], "SCOPE_LEVEL_TENANT")
        self.assertEqual(self.ctl("usage").returncode, 0)

        # Exit codes: usage errors 2, failed calls 1 with the status and the field.
        self.ctl("budget", "set", self.s, expect=2)
        self.ctl("budget", "set", self.s, "--limit", "many", expect=2)
        self.ctl("budget", "set", self.s, "--limit", "10", "--mode", "loud", expect=2)
        self.ctl("budget", "set", "a/b/c/d", "--limit", "10", expect=2)
        bad = self.ctl("usage", f"{self.s}/nope", expect=1)
        self.assertIn("NOT_FOUND", bad.stderr)
        self.assertIn("scope.task_id", bad.stderr)
        denied = self.ctl("usage", key="cgk_not_a_real_key", expect=1)
        self.assertIn("UNAUTHENTICATED", denied.stderr)
