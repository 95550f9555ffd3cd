"""Scope-bound keys end to end (README "Scope-bound keys"): a key bound to a session, or to a
task of a session, sees and touches only that subtree. Every RPC that names a scope, a
reservation, an approval, a context session or an artifact outside it answers NOT_FOUND
with the reason of a missing thing, word for word what a thing that does not exist gets, so
that nothing tells whether the sibling exists. Also: no self-approval (the key that opened an
approval cannot decide it; who decided and when survive)."""

import json
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2, context_pb2, context_pb2_grpc
from test_error_details import Details

B = budget_pb2
C = context_pb2
NOT_FOUND = grpc.StatusCode.NOT_FOUND
APPROVED = B.APPROVAL_STATE_APPROVED
PENDING = B.APPROVAL_STATE_PENDING


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def usage(tokens):
    return common_pb2.TokenUsage(input_tokens=tokens)


def tool_conversation():
    """One large tool result, offloaded to an artifact by Compress."""
    msgs = [{"role": "user", "content": "read the record"},
            {"role": "assistant", "tool_calls": [
                {"id": "c0", "type": "function",
                 "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "0123456789" * 3000},
            {"role": "assistant", "content": "done"}]
    return common_pb2.Conversation(openai_json=json.dumps({"messages": msgs}))


def answer(err, drop=()):
    """What a client can learn from an error: status, reason, message and metadata (minus
    the keys in drop, which echo the request's own ids)."""
    info = Details(err).info
    meta = {k: v for k, v in info.metadata.items() if k not in drop}
    return err.code(), info.reason, err.details(), meta


class ScopeKeys(cgtest.TestCase):
    BATCHING = True

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_WRITE_BATCHING": "true" if cls.BATCHING else "false"})
        cls.ch = cls.srv.channel()
        cls.budget = budget_pb2_grpc.BudgetServiceStub(cls.ch)
        cls.ctx = context_pb2_grpc.ContextServiceStub(cls.ch)

    def setUp(self):
        t = self.srv.create_tenant()
        self.tenant = t.tenant_id
        tag = uuid.uuid4().hex[:8]
        self.s1, self.s2, self.missing = f"s1-{tag}", f"s2-{tag}", f"gone-{tag}"
        self.admin_key = self.srv.create_key(t.tenant_id, name="admin")
        self.admin = cgtest.bearer(self.admin_key.secret)
        self.session_key = self.srv.create_key(t.tenant_id, name="s1", role="agent",
                                               scope=(self.s1,))
        self.sess = cgtest.bearer(self.session_key.secret)
        self.task = cgtest.bearer(self.srv.create_key(t.tenant_id, name="s1/t1", role="agent",
                                                      scope=(self.s1, "t1")).secret)
        self.op = cgtest.bearer(self.srv.create_key(t.tenant_id, name="op-s1", role="operator",
                                                    scope=(self.s1,)).secret)
        for sc in (scope(self.s1), scope(self.s1, "t1"), scope(self.s1, "t2"), scope(self.s2),
                   scope(self.s2, "t1")):
            self.set(sc, 100000)

    # ---- helpers

    def rpc(self, name, req, md, timeout=10):
        return getattr(self.budget, name)(req, metadata=md, timeout=timeout)

    def set(self, sc, limit, mode=B.BUDGET_MODE_SOFT, md=None):
        return self.rpc("SetBudget", B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, mode=mode)), md or self.admin)

    def reserve(self, sc, tokens, md):
        return self.rpc("Reserve", B.ReserveRequest(scope=sc, tokens=tokens, delay_mode=2), md)

    def usage_of(self, sc):
        return self.rpc("GetUsage", B.GetUsageRequest(scope=sc), self.admin).root

    def watch_first(self, md, **kw):
        """The first message of a WatchUsage stream (or its error)."""
        stream = self.budget.WatchUsage(B.WatchUsageRequest(**kw), metadata=md, timeout=10)
        try:
            return next(stream)
        finally:
            stream.cancel()

    def scoped_calls(self, md, sc):
        """Every BudgetService call naming a scope that md's role may make (operators set
        and close; agents spend)."""
        calls = {
            "GetBudget": lambda: self.rpc("GetBudget", B.GetBudgetRequest(scope=sc), md),
            "GetUsage": lambda: self.rpc("GetUsage", B.GetUsageRequest(scope=sc), md),
            "ListScopes": lambda: self.rpc("ListScopes", B.ListScopesRequest(parent=sc), md),
            "ListApprovals": lambda: self.rpc("ListApprovals", B.ListApprovalsRequest(
                scope=sc, include_descendants=True), md),
            "WatchUsage": lambda: self.watch_first(md, scope=sc, send_snapshot=True),
        }
        if md is self.op:
            calls["SetBudget"] = lambda: self.set(sc, 500, md=md)
            calls["CloseScope"] = lambda: self.rpc("CloseScope", B.CloseScopeRequest(scope=sc),
                                                   md)
        else:
            calls["CheckBudget"] = lambda: self.rpc("CheckBudget", B.CheckBudgetRequest(
                scope=sc, estimated_tokens=10, delay_mode=2), md)
            calls["Reserve"] = lambda: self.reserve(sc, 10, md)
            calls["RecordUsage"] = lambda: self.rpc("RecordUsage", B.RecordUsageRequest(
                scope=sc, usage=usage(5), idempotency_key="k-" + uuid.uuid4().hex), md)
        return calls

    def assertAlike(self, call, hidden, unknown, reason, drop=()):
        """call(hidden) is NOT_FOUND with reason and answers exactly as call(unknown), but
        for the metadata keys in drop (which echo the request's ids)."""
        a = answer(cgtest.rpc_error(call, hidden), drop=drop)
        b = answer(cgtest.rpc_error(call, unknown), drop=drop)
        self.assertEqual(a[:2], (NOT_FOUND, reason), a)
        self.assertEqual(a, b)

    def assertHidden(self, md, outside, missing, reason="SCOPE_NOT_FOUND"):
        """Every scoped call of md on `outside` is NOT_FOUND and answers exactly as on
        `missing` (a scope that does not exist)."""
        got_outside = self.scoped_calls(md, outside)
        got_missing = self.scoped_calls(md, missing)
        for name in got_outside:
            with self.subTest(rpc=name, scope=str(outside).replace("\n", " ")):
                self.assertAlike(lambda calls: calls[name](), got_outside, got_missing, reason)

    # ---- budget RPCs naming a scope

    def test_a_session_key_sees_nothing_beside_or_above_its_session(self):
        self.reserve(scope(self.s2, "t1"), 100, self.admin)
        for md in (self.sess, self.op):
            self.assertHidden(md, scope(self.s2), scope(self.missing))
            self.assertHidden(md, scope(self.s2, "t1"), scope(self.missing, "t1"))
            self.assertHidden(md, scope(self.s2, "t1", "a1"), scope(self.missing, "t1", "a1"))
        # The tenant level is outside too: named explicitly or left empty.
        for sc in (None, scope()):
            with self.subTest(tenant=sc):
                err = cgtest.rpc_error(self.rpc, "GetUsage", B.GetUsageRequest(scope=sc),
                                       self.sess)
                self.assertEqual(answer(err)[:2], (NOT_FOUND, "SCOPE_NOT_FOUND"))
        self.assertEqual(answer(cgtest.rpc_error(
            self.rpc, "ListApprovals", B.ListApprovalsRequest(include_descendants=True),
            self.sess))[:2], (NOT_FOUND, "SCOPE_NOT_FOUND"))
        # An unbound key asking for a scope that does not exist gets the very same answer.
        for name in ("GetUsage", "ListScopes", "WatchUsage", "ListApprovals"):
            with self.subTest(unbound=name):
                mine = answer(cgtest.rpc_error(
                    self.scoped_calls(self.sess, scope(self.s2))[name]))
                unbound = answer(cgtest.rpc_error(
                    self.scoped_calls(self.admin, scope(self.missing))[name]))
                self.assertEqual(mine, unbound)
        # Nothing was written beside the session.
        self.assertEqual(self.usage_of(scope(self.s2)).used_tokens, 0)
        self.assertEqual(self.usage_of(scope(self.s2)).reserved_tokens, 100)
        self.assertEqual(self.rpc("GetBudget", B.GetBudgetRequest(scope=scope(self.s2)),
                                  self.admin).budget.settings.limit_tokens, 100000)
        self.assertEqual(self.usage_of(scope(self.s2)).state, B.SCOPE_STATE_OPEN)

    def test_a_session_key_works_inside_its_session(self):
        self.set(scope(self.s1, "t1", "a1"), 1000)
        r = self.reserve(scope(self.s1, "t1", "a1"), 100, self.sess)
        self.rpc("Commit", B.CommitRequest(reservation_id=r.reservation.reservation_id,
                                           usage=usage(60)), self.sess)
        self.rpc("RecordUsage", B.RecordUsageRequest(scope=scope(self.s1), usage=usage(40),
                                                     idempotency_key="k1"), self.sess)
        self.assertEqual(self.rpc("GetUsage", B.GetUsageRequest(scope=scope(self.s1)),
                                  self.sess).root.used_tokens, 100)
        listed = self.rpc("ListScopes", B.ListScopesRequest(parent=scope(self.s1)), self.sess)
        self.assertEqual(sorted(s.scope.task_id for s in listed.scopes), ["t1", "t2"])
        first = self.watch_first(self.sess, scope=scope(self.s1), send_snapshot=True)
        self.assertEqual(first.type, B.USAGE_EVENT_TYPE_SNAPSHOT)
        self.set(scope(self.s1, "t2"), 2000, md=self.op)
        self.rpc("CloseScope", B.CloseScopeRequest(scope=scope(self.s1, "t2")), self.op)

    def test_a_task_key_sees_only_its_task(self):
        self.reserve(scope(self.s1, "t2"), 100, self.admin)
        self.assertHidden(self.task, scope(self.s1, "t2"), scope(self.s1, "gone"))
        self.assertHidden(self.task, scope(self.s1, "t2", "a1"), scope(self.s1, "gone", "a1"))
        # Its own session is above it: as outside as a sibling session.
        self.assertHidden(self.task, scope(self.s1), scope(self.missing))
        self.assertHidden(self.task, scope(self.s2, "t1"), scope(self.missing, "t1"))
        self.set(scope(self.s1, "t1", "a9"), 1000)
        r = self.reserve(scope(self.s1, "t1", "a9"), 50, self.task)
        self.assertTrue(r.reservation.reservation_id)
        self.assertEqual(self.rpc("GetUsage", B.GetUsageRequest(scope=scope(self.s1, "t1")),
                                  self.task).root.reserved_tokens, 50)

    def test_an_idempotency_key_of_a_sibling_is_not_named(self):
        sibling = self.rpc("RecordUsage", B.RecordUsageRequest(
            scope=scope(self.s2), usage=usage(5), idempotency_key="shared"), self.admin)
        err = cgtest.rpc_error(self.rpc, "RecordUsage", B.RecordUsageRequest(
            scope=scope(self.s1), usage=usage(5), idempotency_key="shared"), self.sess)
        self.assertEqual(err.code(), grpc.StatusCode.ALREADY_EXISTS)
        self.assertNotIn(self.s2, err.details())
        meta = Details(err).info.metadata
        self.assertNotIn("first_scope", meta)
        self.assertNotIn(sibling.ledger_entry_id, json.dumps(dict(meta)))

    # ---- by id: reservations

    def test_commit_and_release_of_a_sibling_reservation_change_nothing(self):
        for holder, md in ((scope(self.s2, "t1"), self.sess), (scope(self.s1, "t2"), self.task)):
            with self.subTest(holder=str(holder).replace("\n", " ")):
                rid = self.reserve(holder, 300, self.admin).reservation.reservation_id
                unknown = str(uuid.uuid4())
                for name, req in (
                        ("Commit", lambda i: B.CommitRequest(reservation_id=i, usage=usage(10))),
                        ("Release", lambda i: B.ReleaseRequest(reservation_id=i))):
                    self.assertAlike(lambda i: self.rpc(name, req(i), md), rid, unknown,
                                     "RESERVATION_NOT_FOUND", drop=("reservation_id",))
                # Untouched: still held, and its owner's Commit settles it.
                self.assertEqual(self.usage_of(holder).reserved_tokens, 300)
                self.assertEqual(self.usage_of(holder).used_tokens, 0)
                done = self.rpc("Commit", B.CommitRequest(reservation_id=rid, usage=usage(200)),
                                self.admin)
                self.assertEqual(done.reservation.state, B.RESERVATION_STATE_COMMITTED)
                self.assertFalse(done.replayed)
                self.assertEqual(self.usage_of(holder).used_tokens, 200)

    # ---- approvals

    def open_approval(self, sc, md):
        self.set(sc, 100, mode=B.BUDGET_MODE_APPROVAL)
        r = self.reserve(sc, 200, md)
        self.assertEqual(r.decision, B.DECISION_REQUIRE_APPROVAL)
        return r.approval_id

    def test_approvals_of_a_sibling_are_invisible(self):
        sibling = self.open_approval(scope(self.s2, "t1"), self.admin)
        mine = self.open_approval(scope(self.s1, "t1"), self.sess)
        unknown = str(uuid.uuid4())
        for name, md, req in (
                ("GetApproval", self.sess, lambda i: B.GetApprovalRequest(approval_id=i)),
                ("ResolveApproval", self.op, lambda i: B.ResolveApprovalRequest(
                    approval_id=i, decision=APPROVED))):
            with self.subTest(rpc=name):
                self.assertAlike(lambda i: self.rpc(name, req(i), md), sibling, unknown,
                                 "APPROVAL_NOT_FOUND", drop=("approval_id",))
        self.assertEqual(self.rpc("GetApproval", B.GetApprovalRequest(approval_id=sibling),
                                  self.admin).approval.state, PENDING)
        listed = self.rpc("ListApprovals", B.ListApprovalsRequest(
            scope=scope(self.s1), include_descendants=True), self.sess)
        self.assertEqual([a.approval_id for a in listed.approvals], [mine])
        everything = self.rpc("ListApprovals", B.ListApprovalsRequest(include_descendants=True),
                              self.admin)
        self.assertEqual({a.approval_id for a in everything.approvals}, {mine, sibling})
        # WatchUsage cannot wait on it either; its own approval it can, without a scope.
        self.assertAlike(lambda i: self.watch_first(self.sess, approval_id=i), sibling, unknown,
                         "APPROVAL_NOT_FOUND", drop=("approval_id",))
        wait = self.budget.WatchUsage(B.WatchUsageRequest(approval_id=mine), metadata=self.sess,
                                      timeout=30)
        self.rpc("ResolveApproval", B.ResolveApprovalRequest(approval_id=mine,
                                                             decision=APPROVED), self.op)
        events = list(wait)
        self.assertEqual(events[-1].type, B.USAGE_EVENT_TYPE_APPROVAL_DECIDED)

    def test_the_key_that_opened_an_approval_cannot_decide_it(self):
        sc = scope(self.s1, "t1")
        approval_id = self.open_approval(sc, self.admin)
        err = cgtest.rpc_error(self.rpc, "ResolveApproval", B.ResolveApprovalRequest(
            approval_id=approval_id, decision=APPROVED), self.admin)
        self.assertEqual(err.code(), grpc.StatusCode.PERMISSION_DENIED)
        info = Details(err).info
        self.assertEqual(info.reason, "SELF_APPROVAL")
        self.assertEqual(info.metadata["approval_id"], approval_id)
        self.assertEqual(info.metadata["key_id"], self.admin_key.key.key_id)
        got = self.rpc("GetApproval", B.GetApprovalRequest(approval_id=approval_id),
                       self.admin).approval
        self.assertEqual((got.state, got.decided_by_key_id, got.decided_at_unix_ms),
                         (PENDING, "", 0), "nothing changed")
        # Agent keys may never decide (the role table), bound or not.
        err = cgtest.rpc_error(self.rpc, "ResolveApproval", B.ResolveApprovalRequest(
            approval_id=approval_id, decision=APPROVED), self.sess)
        self.assertEqual(answer(err)[:2], (grpc.StatusCode.PERMISSION_DENIED, "ROLE_NOT_ALLOWED"))

        second = self.srv.create_key(self.tenant, name="admin-2")
        done = self.rpc("ResolveApproval", B.ResolveApprovalRequest(
            approval_id=approval_id, decision=APPROVED, decided_by="ops"),
            cgtest.bearer(second.secret)).approval
        self.assertEqual(done.decided_by_key_id, second.key.key_id)
        self.assertEqual(done.requested_by_key_id, self.admin_key.key.key_id)
        self.assertGreater(done.decided_at_unix_ms, 0)
        # Who and when survive, in GetApproval and ListApprovals.
        got = self.rpc("GetApproval", B.GetApprovalRequest(approval_id=approval_id),
                       self.admin).approval
        listed = self.rpc("ListApprovals", B.ListApprovalsRequest(scope=sc), self.admin)
        for a in (got, listed.approvals[0]):
            self.assertEqual((a.state, a.decided_by_key_id, a.decided_at_unix_ms, a.decided_by),
                             (APPROVED, second.key.key_id, done.decided_at_unix_ms, "ops"))
        # The approved overage passes now, and the opener's retry of the decision is refused.
        self.assertTrue(self.reserve(sc, 200, self.admin).reservation.reservation_id)
        err = cgtest.rpc_error(self.rpc, "ResolveApproval", B.ResolveApprovalRequest(
            approval_id=approval_id, decision=APPROVED), self.admin)
        self.assertEqual(answer(err)[:2], (grpc.StatusCode.PERMISSION_DENIED, "SELF_APPROVAL"))

    # ---- ContextService

    def compress(self, session, md):
        return self.ctx.Compress(C.CompressRequest(
            conversation=tool_conversation(), model="gpt-4o", context_window_tokens=24000,
            session_id=session, force=True), metadata=md, timeout=60)

    def test_context_sessions_of_a_sibling_are_not_found(self):
        theirs = self.compress(self.s2, self.admin)
        self.assertEqual(len(theirs.report.artifacts), 1, theirs.report)
        art = theirs.report.artifacts[0].artifact_id
        mine = self.compress(self.s1, self.sess)
        calls = {
            "GetHistory": lambda s: self.ctx.GetHistory(C.GetHistoryRequest(session_id=s),
                                                        metadata=self.sess, timeout=10),
            "ListArtifacts": lambda s: self.ctx.ListArtifacts(
                C.ListArtifactsRequest(session_id=s), metadata=self.sess, timeout=10),
            "GetCompressionStats": lambda s: self.ctx.GetCompressionStats(
                C.GetCompressionStatsRequest(session_id=s), metadata=self.sess, timeout=10),
        }
        for name, call in calls.items():
            with self.subTest(rpc=name):
                self.assertAlike(call, self.s2, self.missing, "SESSION_NOT_FOUND",
                                 drop=("session_id",))
                call(self.s1)  # inside: works
        # Unbound, a session that does not exist reads the same.
        unbound = cgtest.rpc_error(self.ctx.GetHistory, C.GetHistoryRequest(
            session_id=self.missing), metadata=self.admin, timeout=10)
        self.assertEqual(answer(unbound, drop=("session_id",)),
                         answer(cgtest.rpc_error(calls["GetHistory"], self.s2),
                                drop=("session_id",)))
        # The tenant-wide figures are outside too.
        self.assertEqual(answer(cgtest.rpc_error(calls["GetCompressionStats"], ""))[:2],
                         (NOT_FOUND, "SESSION_NOT_FOUND"))
        # Writing into it or summarizing it: the same.
        for name, call in (
                ("Compress", lambda: self.compress(self.s2, self.sess)),
                ("Summarize", lambda: self.ctx.Summarize(C.SummarizeRequest(
                    session_id=self.s2, summarizer=C.SUMMARIZER_KIND_EXTRACTIVE),
                    metadata=self.sess, timeout=30))):
            with self.subTest(rpc=name):
                self.assertEqual(answer(cgtest.rpc_error(call))[:2],
                                 (NOT_FOUND, "SESSION_NOT_FOUND"))
        # Its artifact, at any offset, reads as an unknown one.
        for offset in (0, 10 ** 9):
            self.assertAlike(lambda i: self.ctx.GetArtifact(C.GetArtifactRequest(
                artifact_id=i, offset=offset), metadata=self.sess, timeout=10),
                art, "art_" + "a" * 26, "ARTIFACT_NOT_FOUND", drop=("artifact_id",))
        own = mine.report.artifacts[0].artifact_id
        self.assertTrue(self.ctx.GetArtifact(C.GetArtifactRequest(artifact_id=own),
                                             metadata=self.sess, timeout=10).content)
        # The history after all: the sibling's is intact.
        self.assertEqual(self.ctx.GetHistory(C.GetHistoryRequest(session_id=self.s2),
                                             metadata=self.admin, timeout=10).revision, 1)
        # A task-bound key reaches no context session (sessions are above its task); stateless
        # calls touch nothing stored and work for it.
        self.assertEqual(answer(cgtest.rpc_error(
            self.ctx.GetHistory, C.GetHistoryRequest(session_id=self.s1), metadata=self.task,
            timeout=10))[:2], (NOT_FOUND, "SESSION_NOT_FOUND"))
        counted = self.ctx.CountTokens(C.CountTokensRequest(
            conversation=tool_conversation(), model="gpt-4o"), metadata=self.task, timeout=30)
        self.assertGreater(counted.total_tokens, 0)


class ScopeKeysUnbatched(ScopeKeys):
    """The same with write batching off: Commit takes the one-request path."""
    BATCHING = False


if __name__ == "__main__":
    import unittest
    unittest.main()
