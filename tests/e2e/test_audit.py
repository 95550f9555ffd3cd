"""The audit trail end to end (ListAuditEvents, README "Audit trail"): every privileged
change writes one append-only row in the transaction of the change, with who (key id and
role), what (kind, scope, target, before -> after) and the request id; a failed change
writes none. Filters, paging, permissions and tenant isolation. Against real PostgreSQL."""

import json
import os
import subprocess
import uuid

import grpc

import cgtest
from cgtest import admin_pb2, budget_pb2, budget_pb2_grpc, common_pb2

A, B = admin_pb2, budget_pb2
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def rid():
    return "audit-" + uuid.uuid4().hex[:12]


class Audit(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.admin = cls.srv.admin()
        cls.budget = budget_pb2_grpc.BudgetServiceStub(cls.srv.channel())

    def setUp(self):
        self.tid = self.srv.create_tenant().tenant_id
        made = self.srv.create_key(self.tid, role="admin")
        self.key_id, self.md = made.key.key_id, cgtest.bearer(made.secret)

    def md_rid(self, md, request_id):
        return tuple(md) + (("x-request-id", request_id),)

    def events(self, md=None, **kw):
        kw.setdefault("tenant_id", self.tid)
        return self.admin.ListAuditEvents(A.ListAuditEventsRequest(**kw),
                                          metadata=md or self.srv.admin_md(), timeout=10).events

    def only(self, **kw):
        got = self.events(**kw)
        self.assertEqual(len(got), 1, got)
        return got[0]

    def set_budget(self, sc, limit, md=None, request_id="", expected_version=0, **settings):
        metadata = md or self.md
        if request_id:
            metadata = self.md_rid(metadata, request_id)
        return self.budget.SetBudget(B.SetBudgetRequest(
            scope=sc, expected_version=expected_version,
            settings=B.BudgetSettings(limit_tokens=limit, **settings)),
            metadata=metadata, timeout=10)

    # ---- what each change writes

    def test_tenant_created_by_the_server_admin(self):
        r = rid()
        t = self.admin.CreateTenant(A.CreateTenantRequest(name="audited", time_zone="UTC"),
                                    metadata=self.md_rid(self.srv.admin_md(), r), timeout=10)
        e = self.only(tenant_id=t.tenant.tenant_id, kind="tenant_created")
        self.assertEqual((e.actor_key_id, e.actor_role, e.request_id), ("", "server_admin", r))
        self.assertEqual(e.target, t.tenant.tenant_id)
        self.assertEqual(e.before_json, "")
        after = json.loads(e.after_json)
        self.assertEqual((after["name"], after["time_zone"]), ("audited", "UTC"))
        self.assertEqual(after["max_call_tokens"], 10000000)
        self.assertFalse(e.HasField("scope"))

    def test_budget_set_new_then_update_and_a_failed_update_leaves_no_row(self):
        r1, r2, r3 = rid(), rid(), rid()
        self.set_budget(scope("s1"), 1000, request_id=r1, description="first")
        self.set_budget(scope("s1"), 2000, request_id=r2, mode=B.BUDGET_MODE_SOFT)
        self.assertRpcError(grpc.StatusCode.ABORTED, self.set_budget, scope("s1"), 3000,
                            request_id=r3, expected_version=1)
        rows = self.events(kind="budget_set")
        self.assertEqual([e.request_id for e in rows], [r2, r1], "newest first, none for r3")
        new, update = rows[1], rows[0]
        self.assertEqual((new.actor_key_id, new.actor_role), (self.key_id, "admin"))
        self.assertEqual(new.scope.session_id, "s1")
        self.assertEqual(new.before_json, "", "a new budget has no before")
        after = json.loads(new.after_json)
        self.assertEqual((after["limit_tokens"], after["mode"], after["version"],
                          after["description"]), (1000, "HARD", 1, "first"))
        before, after = json.loads(update.before_json), json.loads(update.after_json)
        self.assertEqual((before["limit_tokens"], before["mode"], before["version"]),
                         (1000, "HARD", 1))
        self.assertEqual((after["limit_tokens"], after["mode"], after["version"]),
                         (2000, "SOFT", 2))
        self.assertGreater(rows[0].audit_id, rows[1].audit_id)

    def test_scope_closed(self):
        self.set_budget(scope("s1"), 1000)
        self.set_budget(scope("s1", "t1"), 500)
        r = rid()
        self.budget.CloseScope(B.CloseScopeRequest(scope=scope("s1")),
                               metadata=self.md_rid(self.md, r), timeout=10)
        e = self.only(kind="scope_closed")
        self.assertEqual((e.request_id, e.scope.session_id, e.scope.task_id), (r, "s1", ""))
        self.assertEqual(json.loads(e.before_json), {"closed": False})
        after = json.loads(e.after_json)
        self.assertEqual((after["closed"], after["closed_scopes"]), (True, 2))
        # Closing again changes nothing: no second row.
        self.budget.CloseScope(B.CloseScopeRequest(scope=scope("s1")), metadata=self.md,
                               timeout=10)
        self.assertEqual(len(self.events(kind="scope_closed")), 1)

    def open_approval(self, session):
        agent_md = cgtest.bearer(self.srv.create_key(self.tid, role="agent").secret)
        self.set_budget(scope(session), 100, mode=B.BUDGET_MODE_APPROVAL)
        got = self.budget.CheckBudget(B.CheckBudgetRequest(
            scope=scope(session), estimated_tokens=500, delay_mode=B.DELAY_MODE_RETURN_ONLY),
            metadata=agent_md, timeout=10)
        self.assertTrue(got.approval_id, got)
        return got.approval_id

    def test_approval_approved_and_denied(self):
        operator = self.srv.create_key(self.tid, role="operator")
        op_md = cgtest.bearer(operator.secret)
        yes, no = self.open_approval("sa"), self.open_approval("sb")
        r1, r2 = rid(), rid()
        self.budget.ResolveApproval(B.ResolveApprovalRequest(
            approval_id=yes, decision=B.APPROVAL_STATE_APPROVED, granted_tokens=700,
            note="go ahead"), metadata=self.md_rid(op_md, r1), timeout=10)
        self.budget.ResolveApproval(B.ResolveApprovalRequest(
            approval_id=no, decision=B.APPROVAL_STATE_DENIED, note="no"),
            metadata=self.md_rid(self.md, r2), timeout=10)
        e = self.only(kind="approval_approved")
        self.assertEqual((e.actor_key_id, e.actor_role, e.request_id, e.target),
                         (operator.key.key_id, "operator", r1, yes))
        self.assertEqual(e.scope.session_id, "sa")
        self.assertEqual(json.loads(e.before_json)["state"], "PENDING")
        after = json.loads(e.after_json)
        self.assertEqual((after["state"], after["granted_tokens"], after["note"]),
                         ("APPROVED", 700, "go ahead"))
        d = self.only(kind="approval_denied")
        self.assertEqual((d.actor_key_id, d.actor_role, d.request_id, d.target),
                         (self.key_id, "admin", r2, no))
        self.assertEqual(json.loads(d.after_json)["state"], "DENIED")
        # A replayed decision changes nothing: no second row.
        self.budget.ResolveApproval(B.ResolveApprovalRequest(
            approval_id=no, decision=B.APPROVAL_STATE_DENIED), metadata=op_md, timeout=10)
        self.assertEqual(len(self.events(kind="approval_denied")), 1)

    def test_api_key_created_and_revoked(self):
        r1, r2 = rid(), rid()
        made = self.admin.CreateApiKey(A.CreateApiKeyRequest(
            tenant_id=self.tid, name="ci", role=A.API_KEY_ROLE_VIEWER, ttl_ms=3600000,
            scope=scope("s9")), metadata=self.md_rid(self.md, r1), timeout=10)
        kid = made.key.key_id
        created = [x for x in self.events(kind="api_key_created") if x.target == kid]
        self.assertEqual(len(created), 1)
        e = created[0]
        self.assertEqual((e.actor_key_id, e.actor_role, e.request_id), (self.key_id, "admin", r1))
        after = json.loads(e.after_json)
        self.assertEqual((after["role"], after["scope_session_id"], after["name"]),
                         ("viewer", "s9", "ci"))
        self.assertEqual(after["expires_at_unix_ms"], made.key.expires_at_unix_ms)
        self.assertNotIn(made.secret, e.after_json)
        self.admin.RevokeApiKey(A.RevokeApiKeyRequest(tenant_id=self.tid, key_id=kid),
                                metadata=self.md_rid(self.md, r2), timeout=10)
        self.admin.RevokeApiKey(A.RevokeApiKeyRequest(tenant_id=self.tid, key_id=kid),
                                metadata=self.md, timeout=10)  # again: no second row
        e = self.only(kind="api_key_revoked")
        self.assertEqual((e.target, e.request_id), (kid, r2))
        self.assertIsNone(json.loads(e.before_json)["revoked_at_unix_ms"])
        self.assertGreater(json.loads(e.after_json)["revoked_at_unix_ms"], 0)

    def test_tenant_settings_updated(self):
        r = rid()
        self.admin.UpdateTenantSettings(A.UpdateTenantSettingsRequest(
            tenant_id=self.tid, settings=A.TenantSettings(
                redact_types=[common_pb2.PII_TYPE_EMAIL], redact_artifacts=True,
                max_call_tokens=5000)),
            metadata=self.md_rid(self.md, r), timeout=10)
        e = self.only(kind="tenant_settings_updated")
        self.assertEqual((e.actor_key_id, e.request_id), (self.key_id, r))
        before, after = json.loads(e.before_json), json.loads(e.after_json)
        self.assertEqual((before["redact_artifacts"], before["max_call_tokens"]),
                         (False, 10000000))
        self.assertEqual((after["redact_artifacts"], after["max_call_tokens"]), (True, 5000))
        self.assertEqual((before["redact_types"], after["redact_types"]), ([], [1]))

    # ---- reading the trail

    def test_filters_and_paging(self):
        for i in range(7):
            self.set_budget(scope("p%d" % (i % 2)), 100 + i)
        self.set_budget(scope("p0", "t"), 50)
        every = self.events(kind="budget_set")
        self.assertEqual(len(every), 8)
        seen, token = [], ""
        while True:
            page = self.admin.ListAuditEvents(A.ListAuditEventsRequest(
                tenant_id=self.tid, kind="budget_set", page_size=3, page_token=token),
                metadata=self.srv.admin_md(), timeout=10)
            self.assertLessEqual(len(page.events), 3)
            seen += [e.audit_id for e in page.events]
            token = page.next_page_token
            if not token:
                break
        self.assertEqual(seen, [e.audit_id for e in every], "no duplicates, no gaps")
        self.assertEqual(seen, sorted(seen, reverse=True))
        p0 = self.events(scope=scope("p0"), kind="budget_set")
        self.assertEqual(len(p0), 5)
        self.assertEqual(len(self.events(scope=scope("p0", "t"))), 1)
        self.assertEqual(len(self.events(actor_key_id=self.key_id, kind="budget_set")), 8)
        self.assertEqual(len(self.events(actor_key_id="admin", kind="budget_set")), 0)
        self.assertGreaterEqual(len(self.events(actor_key_id="admin")), 1)  # key creation
        newest = every[0].at_unix_ms
        self.assertEqual(len(self.events(kind="budget_set", since_unix_ms=newest + 1)), 0)
        self.assertEqual(len(self.events(kind="budget_set", until_unix_ms=every[-1].at_unix_ms)),
                         0)

    def test_bad_arguments_name_the_field(self):
        ask = lambda **kw: self.events(**kw)  # noqa: E731
        self.assertRpcError(INVALID, ask, page_token="x1", contains="page_token")
        self.assertRpcError(INVALID, ask, page_token="0", contains="page_token")
        self.assertRpcError(INVALID, ask, kind="Budget-Set", contains="kind")
        self.assertRpcError(INVALID, ask, kind="k" * 41, contains="kind")
        self.assertRpcError(INVALID, ask, page_size=1001, contains="page_size")
        self.assertRpcError(INVALID, ask, actor_key_id="bad key", contains="actor_key_id")
        self.assertRpcError(INVALID, ask, since_unix_ms=-1, contains="since_unix_ms")
        self.assertRpcError(INVALID, ask, tenant_id="", contains="tenant_id")

    def test_permissions_and_isolation(self):
        for role in ("viewer", "agent"):
            md = cgtest.bearer(self.srv.create_key(self.tid, role=role).secret)
            self.assertRpcError(grpc.StatusCode.PERMISSION_DENIED, self.events, md=md,
                                tenant_id="")
        other = self.srv.create_tenant().tenant_id
        other_md = cgtest.bearer(self.srv.create_key(other, role="admin").secret)
        self.set_budget(scope("mine"), 100)
        # Another tenant's key sees its own rows only, and cannot name this tenant.
        theirs = self.events(md=other_md, tenant_id="")
        self.assertTrue(theirs)
        self.assertNotIn(self.tid, {e.tenant_id for e in theirs})
        self.assertFalse([e for e in theirs if e.kind == "budget_set"])
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.events, md=other_md)
        # The tenant's own operator sees them, without naming its tenant.
        op_md = cgtest.bearer(self.srv.create_key(self.tid, role="operator").secret)
        self.assertEqual(len(self.events(md=op_md, tenant_id="", kind="budget_set")), 1)

    def test_scope_bound_operator_sees_its_subtree_only(self):
        self.set_budget(scope("s1"), 100)
        self.set_budget(scope("s1", "t1"), 50)
        self.set_budget(scope("s2"), 100)
        bound = cgtest.bearer(self.srv.create_key(self.tid, role="operator",
                                                  scope=("s1",)).secret)
        rows = self.events(md=bound, tenant_id="")
        self.assertEqual(sorted((e.scope.session_id, e.scope.task_id) for e in rows),
                         [("s1", ""), ("s1", "t1")])
        self.assertEqual(len(self.events(md=bound, tenant_id="", scope=scope("s1", "t1"))), 1)
        # A scope outside its subtree does not exist for it (as for every scoped RPC).
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.events, md=bound, tenant_id="",
                            scope=scope("s2"))

    def test_append_only(self):
        self.set_budget(scope("s1"), 100)
        schema = self.srv.schema
        for sql in (f"UPDATE {schema}.audit_events SET kind = 'x'",
                    f"DELETE FROM {schema}.audit_events",
                    f"TRUNCATE {schema}.audit_events"):
            with self.assertRaises(AssertionError) as caught:
                cgtest.psql(sql)
            self.assertIn("append-only", str(caught.exception))
        self.assertEqual(len(self.events(kind="budget_set")), 1)


class AuditCtl(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def ctl(self, *args, admin=True, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        if admin:
            env["CTXGUARD_ADMIN_KEY"] = self.srv.admin_key
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, expect,
                         f"ctxguardctl {' '.join(args)}: exit {proc.returncode}\n"
                         f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def test_audit_lists_filters_and_pages(self):
        tid = self.srv.create_tenant().tenant_id
        made = self.srv.create_key(tid, role="admin")
        stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        for s in ("c1", "c2", "c3"):
            stub.SetBudget(B.SetBudgetRequest(scope=scope(s),
                                              settings=B.BudgetSettings(limit_tokens=10)),
                           metadata=cgtest.bearer(made.secret), timeout=10)
        out = self.ctl("audit", tid).stdout
        lines = [line for line in out.splitlines() if "budget_set" in line]
        self.assertEqual(len(lines), 3, out)
        self.assertIn(made.key.key_id, lines[0])
        self.assertIn("c3", lines[0], "newest first")
        self.assertIn("->", lines[0])
        self.assertIn("api_key_created", out)
        self.assertRegex(out, r"admin \(server_admin\)")
        got = json.loads(self.ctl("--json", "audit", tid, "--kind", "budget_set",
                                  "--scope", "c2").stdout)
        self.assertEqual([e["scope"]["session_id"] for e in got["events"]], ["c2"])
        # --limit smaller than the rows: the ctl pages by itself up to the limit.
        got = json.loads(self.ctl("--json", "audit", tid, "--kind", "budget_set",
                                  "--limit", "2").stdout)
        self.assertEqual(len(got["events"]), 2)
        got = json.loads(self.ctl("--json", "audit", tid, "--actor", "admin").stdout)
        self.assertEqual({e["kind"] for e in got["events"]}, {"tenant_created", "api_key_created"})
        bad = self.ctl("audit", tid, "--kind", "Bad-Kind", expect=1)
        self.assertIn("kind", bad.stderr)
