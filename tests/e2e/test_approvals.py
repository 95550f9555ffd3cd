"""Approvals end to end: an APPROVAL-mode budget opens an approval when a request would cross
its limit, ResolveApproval decides it, and the waiting caller just retries. Against real
PostgreSQL; expiry by the clock is covered by tests/integration/test_approvals_store.c (the
shortest approval_ttl_ms is a minute)."""

import os
import subprocess
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
HARD, SOFT, APPROVAL = B.BUDGET_MODE_HARD, B.BUDGET_MODE_SOFT, B.BUDGET_MODE_APPROVAL
PENDING, APPROVED, DENIED, EXPIRED = (B.APPROVAL_STATE_PENDING, B.APPROVAL_STATE_APPROVED,
                                      B.APPROVAL_STATE_DENIED, B.APPROVAL_STATE_EXPIRED)
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def reason_codes(resp):
    return [r.code for r in resp.reasons]


class Tenant:
    """A tenant with its own key and stub on a server, and an operator key that decides the
    approvals (the key that opened an approval may not: SELF_APPROVAL)."""

    def __init__(self, srv):
        t = srv.create_tenant()
        self.id = t.tenant_id
        self.key = srv.create_key(t.tenant_id).secret
        self.md = cgtest.bearer(self.key)
        approver = srv.create_key(t.tenant_id, name="approver", role="operator")
        self.approver_key = approver.secret
        self.approver_key_id = approver.key.key_id
        self.approver_md = cgtest.bearer(self.approver_key)
        self.stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())

    def set(self, sc, limit, mode=HARD, **kw):
        return self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, mode=mode, **kw)),
            metadata=self.md, timeout=10)

    def check(self, sc, tokens, **kw):
        return self.stub.CheckBudget(B.CheckBudgetRequest(
            scope=sc, estimated_tokens=tokens, delay_mode=B.DELAY_MODE_RETURN_ONLY, **kw),
            metadata=self.md, timeout=10)

    def reserve(self, sc, tokens, **kw):
        return self.stub.Reserve(B.ReserveRequest(scope=sc, tokens=tokens,
                                                  delay_mode=B.DELAY_MODE_RETURN_ONLY, **kw),
                                 metadata=self.md, timeout=10)

    def commit(self, rid, tokens):
        return self.stub.Commit(B.CommitRequest(reservation_id=rid,
                                                usage=common_pb2.TokenUsage(input_tokens=tokens)),
                                metadata=self.md, timeout=10)

    def resolve(self, approval_id, decision, **kw):
        return self.stub.ResolveApproval(B.ResolveApprovalRequest(
            approval_id=approval_id, decision=decision, **kw), metadata=self.approver_md,
            timeout=10)

    def get_approval(self, approval_id):
        return self.stub.GetApproval(B.GetApprovalRequest(approval_id=approval_id),
                                     metadata=self.md, timeout=10).approval

    def list_approvals(self, **kw):
        return self.stub.ListApprovals(B.ListApprovalsRequest(**kw), metadata=self.md, timeout=10)


class Approvals(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def setUp(self):
        self.t = Tenant(self.srv)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.sess = scope(self.s)
        self.t.set(self.sess, 1000, APPROVAL)
        # The task's own limit only warns, so that its requests reach the session's approval.
        self.task = scope(self.s, "t1")
        self.t.set(self.task, 1000, SOFT)

    def test_the_orchestrator_waits_for_the_decision_on_watch_usage(self):
        watcher = self.t.stub.WatchUsage(B.WatchUsageRequest(
            scope=self.sess, include_descendants=True,
            event_types=[B.USAGE_EVENT_TYPE_APPROVAL_REQUESTED], send_snapshot=True),
            metadata=self.t.md, timeout=30)
        # The snapshot comes once the stream is subscribed: an event after it is not missed
        # (the open runs on a thread of its own, so it may come after a Reserve sent at once).
        self.assertEqual(next(watcher).type, B.USAGE_EVENT_TYPE_SNAPSHOT)
        first = self.t.reserve(self.task, 1200)
        self.assertEqual(first.decision, B.DECISION_REQUIRE_APPROVAL)
        opened = next(watcher)
        self.assertEqual(opened.type, B.USAGE_EVENT_TYPE_APPROVAL_REQUESTED)
        self.assertEqual(opened.approval.approval_id, first.approval_id)
        self.assertEqual(opened.approval.state, PENDING)
        watcher.cancel()
        # Waiting on the approval itself: the stream ends with OK after the decision.
        wait = self.t.stub.WatchUsage(B.WatchUsageRequest(scope=self.sess,
                                                          approval_id=first.approval_id),
                                      metadata=self.t.md, timeout=30)
        self.t.resolve(first.approval_id, APPROVED)
        events = list(wait)  # ends (OK) once the decision is out
        self.assertEqual([e.type for e in events][-1], B.USAGE_EVENT_TYPE_APPROVAL_DECIDED,
                         [e.type for e in events])
        self.assertEqual(events[-1].approval.state, APPROVED)

    def test_settings_show_the_mode_and_the_default_ttl(self):
        got = self.t.stub.GetBudget(B.GetBudgetRequest(scope=self.sess), metadata=self.t.md,
                                    timeout=10).budget.settings
        self.assertEqual(got.mode, APPROVAL)
        self.assertEqual(got.approval_ttl_ms, 3600000)
        r = self.t.set(self.sess, 1000, APPROVAL, approval_ttl_ms=60000)
        self.assertEqual(r.budget.settings.approval_ttl_ms, 60000)

    def test_open_pending_approve_then_retry_passes_up_to_the_grant(self):
        first = self.t.reserve(self.task, 1200, model="gpt-4o")
        self.assertEqual(first.decision, B.DECISION_REQUIRE_APPROVAL)
        self.assertFalse(first.HasField("reservation"), "REQUIRE_APPROVAL holds nothing")
        self.assertEqual(first.approval_state, PENDING)
        self.assertIn(B.REASON_CODE_APPROVAL_REQUESTED, reason_codes(first))
        approval_id = first.approval_id
        self.assertEqual(len(approval_id), 36)
        self.assertEqual(first.levels[1].reserved_tokens, 0)

        # Asking again (Reserve or CheckBudget) finds the same pending approval.
        again = self.t.check(self.task, 1200)
        self.assertEqual(again.decision, B.DECISION_REQUIRE_APPROVAL)
        self.assertEqual(again.approval_id, approval_id)
        self.assertIn(B.REASON_CODE_APPROVAL_PENDING, reason_codes(again))
        # A dry run opens nothing and names nothing.
        dry = self.t.check(self.task, 1200, dry_run=True)
        self.assertEqual(dry.decision, B.DECISION_REQUIRE_APPROVAL)
        self.assertEqual(dry.approval_id, "")

        a = self.t.get_approval(approval_id)
        self.assertEqual((a.state, a.level, a.requested_tokens, a.overage_tokens, a.limit_tokens),
                         (PENDING, common_pb2.SCOPE_LEVEL_SESSION, 1200, 200, 1000))
        self.assertEqual(a.scope, self.task)
        self.assertEqual(a.model, "gpt-4o")
        self.assertTrue(a.requested_by_key_id)
        self.assertGreater(a.expires_at_unix_ms, a.requested_at_unix_ms)

        done = self.t.resolve(approval_id, APPROVED, decided_by="ops-alice", note="launch day")
        self.assertFalse(done.replayed)
        a = done.approval
        self.assertEqual((a.state, a.granted_tokens, a.decided_by, a.decision_note),
                         (APPROVED, 1200, "ops-alice", "launch day"))
        self.assertEqual(a.decided_by_key_id, self.t.approver_key_id)
        self.assertNotEqual(a.decided_by_key_id, a.requested_by_key_id)
        self.assertGreater(a.decided_at_unix_ms, 0)
        # Who decided and when survive: GetApproval reads them back from the store.
        stored = self.t.get_approval(approval_id)
        self.assertEqual((stored.state, stored.decided_by_key_id, stored.decided_at_unix_ms,
                          stored.requested_by_key_id, stored.decided_by),
                         (APPROVED, a.decided_by_key_id, a.decided_at_unix_ms,
                          a.requested_by_key_id, "ops-alice"))

        # The retry passes: the session's limit is 1000 + 1200 now.
        ok = self.t.reserve(self.task, 1000)
        self.assertEqual(ok.approval_id, "")
        self.assertTrue(ok.reservation.reservation_id)
        session_level = ok.levels[1]
        self.assertEqual(session_level.approved_extra_tokens, 1200)
        self.assertEqual(session_level.limit_tokens, 1000)
        self.assertEqual(session_level.remaining_tokens, 1200)
        self.t.commit(ok.reservation.reservation_id, 1000)
        check = self.t.check(self.sess, 1100)
        self.assertIn(check.decision, (B.DECISION_ALLOW, B.DECISION_ALLOW_WITH_WARNING))
        self.assertIn(B.REASON_CODE_APPROVED_EXTENSION, reason_codes(check))
        # Past the grant, a new approval is needed.
        over = self.t.reserve(self.sess, 1300)
        self.assertEqual(over.decision, B.DECISION_REQUIRE_APPROVAL)
        self.assertNotEqual(over.approval_id, approval_id)

        # The same decision again is a replay; another one names the approval.
        again = self.t.resolve(approval_id, APPROVED)
        self.assertTrue(again.replayed)
        self.assertEqual(again.approval.decided_by, "ops-alice")
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.t.resolve, approval_id,
                            DENIED, contains=approval_id)

    def test_explicit_grant_and_set_budget_ends_the_extension(self):
        a = self.t.check(self.task, 1500).approval_id
        self.t.resolve(a, APPROVED, granted_tokens=300)
        self.assertEqual(self.t.check(self.task, 1300).decision, B.DECISION_ALLOW_WITH_WARNING)
        self.assertEqual(self.t.check(self.task, 1301, dry_run=True).decision,
                         B.DECISION_REQUIRE_APPROVAL)
        self.t.set(self.sess, 1000, APPROVAL)
        self.assertEqual(self.t.check(self.sess, 1001, dry_run=True).decision,
                         B.DECISION_REQUIRE_APPROVAL, "a new budget ends the extension")

    def test_deny_then_deny_until_the_budget_changes(self):
        first = self.t.check(self.task, 1500)
        self.t.resolve(first.approval_id, DENIED, note="no")
        denied = self.t.check(self.task, 1500)
        self.assertEqual(denied.decision, B.DECISION_DENY)
        self.assertEqual((denied.approval_id, denied.approval_state),
                         (first.approval_id, DENIED))
        self.assertIn(B.REASON_CODE_APPROVAL_DENIED, reason_codes(denied))
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.t.reserve, self.task, 1500,
                            contains=first.approval_id)
        # Requests within the limit still pass.
        self.assertTrue(self.t.reserve(self.task, 500).reservation.reservation_id)
        # A changed budget may be asked again.
        self.t.set(self.sess, 1000, APPROVAL)
        fresh = self.t.check(self.task, 1500)
        self.assertEqual(fresh.decision, B.DECISION_REQUIRE_APPROVAL)
        self.assertNotEqual(fresh.approval_id, first.approval_id)

    def test_close_scope_expires_pending_approvals(self):
        self.t.set(scope(self.s, "t2"), 1000, APPROVAL)
        a = self.t.check(scope(self.s, "t2"), 1500).approval_id
        closed = self.t.stub.CloseScope(B.CloseScopeRequest(scope=scope(self.s, "t2")),
                                        metadata=self.t.md, timeout=10)
        self.assertEqual(closed.expired_approvals, 1)
        self.assertEqual(self.t.get_approval(a).state, EXPIRED)
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, self.t.resolve, a, APPROVED,
                            contains="expired")

    def test_list_pages_newest_first_with_filters(self):
        ids = []
        for i in range(3):
            sc = scope(self.s, f"a{i}")
            self.t.set(sc, 100, APPROVAL)
            ids.append(self.t.check(sc, 200).approval_id)
            time.sleep(0.01)  # distinct requested_at: the order is then the creation order
        self.t.resolve(ids[0], DENIED)
        page1 = self.t.list_approvals(scope=self.sess, include_descendants=True, page_size=2)
        self.assertEqual([a.approval_id for a in page1.approvals], [ids[2], ids[1]])
        self.assertTrue(page1.next_page_token)
        page2 = self.t.list_approvals(scope=self.sess, include_descendants=True, page_size=2,
                                      page_token=page1.next_page_token)
        self.assertEqual([a.approval_id for a in page2.approvals], [ids[0]])
        self.assertEqual(page2.next_page_token, "")
        pending = self.t.list_approvals(include_descendants=True, states=[PENDING])
        self.assertEqual({a.approval_id for a in pending.approvals}, {ids[1], ids[2]})
        only_session = self.t.list_approvals(scope=self.sess)
        self.assertEqual(len(only_session.approvals), 0)
        self.assertRpcError(INVALID, self.t.list_approvals, scope=self.sess,
                            page_token=page1.next_page_token, contains="page_token")
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.list_approvals,
                            scope=scope("nope-" + self.s), contains="scope.session_id")

    def test_tenants_do_not_see_each_others_approvals(self):
        a = self.t.check(self.task, 1500).approval_id
        other = Tenant(self.srv)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, other.get_approval, a,
                            contains="approval_id")
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, other.resolve, a, APPROVED,
                            contains="approval_id")
        self.assertEqual(len(other.list_approvals(include_descendants=True).approvals), 0)
        self.assertEqual(self.t.get_approval(a).state, PENDING)

    def test_bad_input_names_the_field(self):
        a = self.t.check(self.task, 1500).approval_id
        cases = [
            (lambda: self.t.resolve("", APPROVED), "approval_id"),
            (lambda: self.t.resolve(a, PENDING), "decision"),
            (lambda: self.t.resolve(a, EXPIRED), "decision"),
            (lambda: self.t.resolve(a, 99), "decision"),
            (lambda: self.t.resolve(a, APPROVED, granted_tokens=-1), "granted_tokens"),
            (lambda: self.t.resolve(a, APPROVED, granted_tokens=10**15 + 1), "granted_tokens"),
            (lambda: self.t.resolve(a, DENIED, granted_tokens=5), "granted_tokens"),
            (lambda: self.t.resolve(a, APPROVED, decided_by="x" * 201), "decided_by"),
            (lambda: self.t.resolve(a, APPROVED, note="x" * 1001), "note"),
            (lambda: self.t.get_approval(""), "approval_id"),
            (lambda: self.t.list_approvals(states=[9]), "states"),
            (lambda: self.t.list_approvals(page_size=1001), "page_size"),
            (lambda: self.t.list_approvals(page_token="garbage"), "page_token"),
            (lambda: self.t.set(self.sess, 1000, APPROVAL, approval_ttl_ms=59999),
             "approval_ttl_ms"),
            (lambda: self.t.set(self.sess, 1000, APPROVAL, approval_ttl_ms=604800001),
             "approval_ttl_ms"),
            (lambda: self.t.set(self.sess, 1000, HARD, approval_ttl_ms=60000), "approval_ttl_ms"),
        ]
        for fn, field in cases:
            with self.subTest(field=field):
                self.assertRpcError(INVALID, fn, contains=field)
        self.assertEqual(self.t.get_approval(a).state, PENDING, "nothing was decided")
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.get_approval, "not-a-uuid",
                            contains="approval_id")

    # ---- ctxguardctl

    def ctl(self, *args, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_KEY"] = self.t.approver_key  # approvals are decided by another key
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, expect,
                         f"ctxguardctl {' '.join(args)}: exit {proc.returncode}\n"
                         f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def test_ctl_approve_deny_and_list(self):
        a = self.t.check(self.task, 1500).approval_id
        listed = self.ctl("approvals", "--pending").stdout
        self.assertIn(a, listed)
        self.assertIn("pending", listed)
        out = self.ctl("approve", a, "--tokens", "700", "--note", "ok", "--by", "bob").stdout
        self.assertIn(f"approval {a}: approved, +700 tokens on the session limit by bob", out)
        self.assertIn("already decided", self.ctl("approve", a).stdout)
        failed = self.ctl("deny", a, expect=1)
        self.assertIn("FAILED_PRECONDITION", failed.stderr)
        self.assertIn(a, failed.stderr)
        self.assertNotIn(a, self.ctl("approvals", "--pending").stdout)
        self.assertIn(a, self.ctl("approvals", self.s).stdout)

        self.t.set(scope(self.s, "t3"), 100, APPROVAL)
        b = self.t.check(scope(self.s, "t3"), 200).approval_id
        out = self.ctl("deny", b, "--note", "too much").stdout
        self.assertIn(f"approval {b}: denied by ", out)
        self.assertEqual(self.t.get_approval(b).decision_note, "too much")

        self.ctl("approve", expect=2)
        self.ctl("approve", b, "--tokens", "many", expect=2)
        missing = self.ctl("approve", str(uuid.uuid4()), expect=1)
        self.assertIn("NOT_FOUND", missing.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
