"""Roles of API keys, through the wire: every RPC of the protos called with every kind of key.

The expectations below are written from the README's role table, independently of the
server's method table: a call the role may make must get past authorization (any answer but
PERMISSION_DENIED and UNAUTHENTICATED: empty requests are mostly refused by validation, which
comes after); a call it may not make must be PERMISSION_DENIED with reason ROLE_NOT_ALLOWED
naming the role. An RPC added to a proto without a line here fails the test.
"""

import time
import uuid

import grpc

import cgtest
import test_error_details
from cgtest import admin_pb2, budget_pb2, budget_pb2_grpc, common_pb2, context_pb2

PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED

AGENT, VIEWER, OPERATOR, ADMIN, SERVER = "agent", "viewer", "operator", "admin", "server_admin"
READERS = {AGENT, VIEWER, OPERATOR, ADMIN}
SPENDERS = {AGENT, ADMIN}
MANAGERS = {OPERATOR, ADMIN}

# Who may call what (README "Roles and keys").
EXPECTED = {
    "AdminService/CreateTenant": {SERVER},
    "AdminService/GetTenant": {SERVER, ADMIN},
    "AdminService/ListTenants": {SERVER},
    "AdminService/UpdateTenantSettings": {SERVER, ADMIN},
    "AdminService/CreateApiKey": {SERVER} | MANAGERS,
    "AdminService/ListApiKeys": {SERVER, ADMIN},
    "AdminService/RevokeApiKey": {SERVER, ADMIN},
    "AdminService/WhoAmI": {SERVER} | READERS,
    "AdminService/Ping": {SERVER},
    "AdminService/ListAuditEvents": {SERVER} | MANAGERS,
    "BudgetService/SetBudget": MANAGERS,
    "BudgetService/GetBudget": READERS,
    "BudgetService/CheckBudget": SPENDERS,
    "BudgetService/Reserve": SPENDERS,
    "BudgetService/Commit": SPENDERS,
    "BudgetService/Release": SPENDERS,
    "BudgetService/RecordUsage": SPENDERS,
    "BudgetService/CloseScope": MANAGERS,
    "BudgetService/GetUsage": READERS,
    "BudgetService/ListScopes": READERS,
    "BudgetService/GetUsageHistory": READERS,
    "BudgetService/CreateNotificationChannel": {ADMIN},
    "BudgetService/ListNotificationChannels": {OPERATOR, ADMIN},
    "BudgetService/DeleteNotificationChannel": {ADMIN},
    "BudgetService/ListNotificationDeliveries": {OPERATOR, ADMIN},
    "BudgetService/RedriveNotificationDeliveries": {OPERATOR, ADMIN},
    "BudgetService/WatchUsage": READERS,
    "BudgetService/ResolveApproval": MANAGERS,
    "BudgetService/GetApproval": READERS,
    "BudgetService/ListApprovals": READERS,
    "ContextService/CountTokens": SPENDERS,
    "ContextService/Compress": SPENDERS,
    "ContextService/Summarize": SPENDERS,
    "ContextService/GetArtifact": SPENDERS,
    "ContextService/ListArtifacts": SPENDERS,
    "ContextService/GetHistory": SPENDERS,
    "ContextService/SearchHistory": SPENDERS,
    "ContextService/DeleteSession": MANAGERS,
    "ContextService/ValidateContext": SPENDERS,
    "ContextService/GetCompressionStats": READERS,
}

MODULES = {"AdminService": admin_pb2, "BudgetService": budget_pb2,
           "ContextService": context_pb2}


def proto_methods():
    """(short name, method descriptor, module) of every RPC the protos declare."""
    out = []
    for service, module in MODULES.items():
        for m in module.DESCRIPTOR.services_by_name[service].methods:
            out.append((f"{service}/{m.name}", m, module))
    return out


def call(channel, method, module, metadata):
    """Calls the RPC with an empty request; returns the status code (OK on success)."""
    request_cls = getattr(module, method.input_type.name, None) or getattr(
        common_pb2, method.input_type.name)
    response_cls = getattr(module, method.output_type.name)
    path = f"/{method.containing_service.full_name}/{method.name}"
    try:
        if method.server_streaming:
            # An allowed watch opens and then waits for events: its deadline ends it.
            stream = channel.unary_stream(path, request_serializer=request_cls.SerializeToString,
                                          response_deserializer=response_cls.FromString)
            for _ in stream(request_cls(), metadata=metadata, timeout=1.5):
                break
        else:
            fn = channel.unary_unary(path, request_serializer=request_cls.SerializeToString,
                                     response_deserializer=response_cls.FromString)
            fn(request_cls(), metadata=metadata, timeout=10)
        return grpc.StatusCode.OK, None
    except grpc.RpcError as e:
        return e.code(), e


class Roles(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        cls.budget = budget_pb2_grpc.BudgetServiceStub(cls.ch)
        cls.admin = cls.srv.admin(cls.ch)

    def fresh_key(self, role):
        # A tenant of its own per role: what one role's calls change never affects another's.
        if role == SERVER:
            return self.srv.admin_md()
        tenant = self.srv.create_tenant("roles-" + uuid.uuid4().hex[:8])
        return cgtest.bearer(self.srv.create_key(tenant.tenant_id, role=role).secret)

    def test_every_rpc_has_an_expectation(self):
        declared = {name for name, _, _ in proto_methods()}
        self.assertEqual(declared, set(EXPECTED),
                         "the role table of this test and the protos' RPCs differ")

    def test_every_rpc_with_every_role(self):
        for role in (AGENT, VIEWER, OPERATOR, ADMIN, SERVER):
            md = self.fresh_key(role)
            for name, method, module in proto_methods():
                with self.subTest(role=role, rpc=name):
                    code, err = call(self.ch, method, module, md)
                    self.assertNotEqual(code, UNAUTHENTICATED, err and err.details())
                    if role in EXPECTED[name]:
                        self.assertNotEqual(code, PERMISSION_DENIED,
                                            f"{role} may call {name}: {err and err.details()}")
                        continue
                    self.assertEqual(code, PERMISSION_DENIED, f"{role} may not call {name}")
                    if role == SERVER:
                        self.assertIn("tenant API key", err.details())
                        continue
                    if EXPECTED[name] == {SERVER}:
                        # Tenant management: no tenant key is looked up at all.
                        self.assertIn("needs the admin key", err.details())
                        continue
                    self.assertIn(f"role '{role}'", err.details())
                    info = test_error_details.Details(err).info
                    self.assertEqual(info.reason, "ROLE_NOT_ALLOWED")
                    self.assertEqual(info.metadata["role"], role)
                    self.assertTrue(info.metadata["allowed_roles"])

    def test_agent_cannot_raise_its_limit_or_approve_itself(self):
        # The story: an agent key reserves past an APPROVAL budget, then tries to undo
        # the budget. An operator key is what approves.
        tenant = self.srv.create_tenant("story-" + uuid.uuid4().hex[:8])
        agent = cgtest.bearer(self.srv.create_key(tenant.tenant_id, role=AGENT).secret)
        operator = cgtest.bearer(self.srv.create_key(tenant.tenant_id, role=OPERATOR).secret)
        scope = common_pb2.Scope(session_id="s1")
        self.budget.SetBudget(budget_pb2.SetBudgetRequest(
            scope=scope, settings=budget_pb2.BudgetSettings(
                limit_tokens=1000, mode=budget_pb2.BUDGET_MODE_APPROVAL)),
            metadata=operator, timeout=10)
        r = self.budget.Reserve(budget_pb2.ReserveRequest(scope=scope, tokens=5000),
                                metadata=agent, timeout=10)
        self.assertEqual(r.decision, budget_pb2.DECISION_REQUIRE_APPROVAL, r)
        self.assertTrue(r.approval_id, r)
        self.assertRpcError(PERMISSION_DENIED, self.budget.SetBudget, budget_pb2.SetBudgetRequest(
            scope=scope, settings=budget_pb2.BudgetSettings(limit_tokens=10 ** 9)),
            metadata=agent, timeout=10, contains="role 'agent'")
        self.assertRpcError(PERMISSION_DENIED, self.budget.ResolveApproval,
                            budget_pb2.ResolveApprovalRequest(
                                approval_id=r.approval_id,
                                decision=budget_pb2.APPROVAL_STATE_APPROVED,
                                granted_tokens=10 ** 9),
                            metadata=agent, timeout=10, contains="role 'agent'")
        got = self.budget.GetBudget(budget_pb2.GetBudgetRequest(scope=scope), metadata=agent,
                                    timeout=10)
        self.assertEqual(got.budget.settings.limit_tokens, 1000)
        a = self.budget.GetApproval(budget_pb2.GetApprovalRequest(approval_id=r.approval_id),
                                    metadata=agent, timeout=10).approval
        self.assertEqual(a.state, budget_pb2.APPROVAL_STATE_PENDING)
        # The operator approves: who and when survive on the approval.
        self.budget.ResolveApproval(budget_pb2.ResolveApprovalRequest(
            approval_id=r.approval_id, decision=budget_pb2.APPROVAL_STATE_APPROVED,
            granted_tokens=4000, decided_by="ops"), metadata=operator, timeout=10)
        a = self.budget.GetApproval(budget_pb2.GetApprovalRequest(approval_id=r.approval_id),
                                    metadata=agent, timeout=10).approval
        self.assertEqual(a.state, budget_pb2.APPROVAL_STATE_APPROVED)
        self.assertTrue(a.decided_by_key_id)
        self.assertGreater(a.decided_at_unix_ms, 0)


class KeyGrants(cgtest.TestCase):
    """What a key may create, and keys that expire."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        cls.admin = cls.srv.admin(cls.ch)
        cls.tenant = cls.srv.create_tenant("grants-" + uuid.uuid4().hex[:8])
        cls.operator = cls.srv.create_key(cls.tenant.tenant_id, role=OPERATOR)
        cls.op_md = cgtest.bearer(cls.operator.secret)

    def create(self, md, role=admin_pb2.API_KEY_ROLE_AGENT, session="", task="", ttl_ms=0):
        req = admin_pb2.CreateApiKeyRequest(role=role, ttl_ms=ttl_ms)
        if session:
            req.scope.session_id = session
            req.scope.task_id = task
        return self.admin.CreateApiKey(req, metadata=md, timeout=10)

    def whoami(self, secret):
        return self.admin.WhoAmI(admin_pb2.WhoAmIRequest(), metadata=cgtest.bearer(secret),
                                 timeout=10)

    def test_default_role_is_agent_and_the_creator_is_recorded(self):
        k = self.create(self.op_md, role=admin_pb2.API_KEY_ROLE_UNSPECIFIED)
        self.assertEqual(k.key.role, admin_pb2.API_KEY_ROLE_AGENT)
        self.assertEqual(k.key.created_by_key_id, self.operator.key.key_id)
        self.assertEqual(k.key.tenant_id, self.tenant.tenant_id)
        me = self.whoami(k.secret)
        self.assertEqual(me.role, admin_pb2.API_KEY_ROLE_AGENT)
        self.assertFalse(me.HasField("scope"))

    def test_an_operator_creates_keys_of_at_most_its_own_role(self):
        for role in (admin_pb2.API_KEY_ROLE_AGENT, admin_pb2.API_KEY_ROLE_VIEWER,
                     admin_pb2.API_KEY_ROLE_OPERATOR):
            self.assertEqual(self.create(self.op_md, role=role).key.role, role)
        err = self.assertRpcError(PERMISSION_DENIED, self.create, self.op_md,
                                  role=admin_pb2.API_KEY_ROLE_ADMIN, contains="at most its own")
        self.assertEqual(test_error_details.Details(err).info.reason, "ROLE_NOT_ALLOWED")

    def test_a_bound_key_creates_keys_inside_its_scope_only(self):
        bound = self.create(self.op_md, role=admin_pb2.API_KEY_ROLE_OPERATOR, session="s1")
        md = cgtest.bearer(bound.secret)
        inner = self.create(md, session="s1", task="t1")
        self.assertEqual((inner.key.scope.session_id, inner.key.scope.task_id), ("s1", "t1"))
        me = self.whoami(inner.secret)
        self.assertEqual((me.scope.session_id, me.scope.task_id), ("s1", "t1"))
        for session, task in (("s2", ""), ("", ""), ("s2", "t1")):
            with self.subTest(scope=(session, task)):
                self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.create, md, session=session,
                                    task=task, contains="scope")

    def test_bad_grants_name_the_field(self):
        bad = grpc.StatusCode.INVALID_ARGUMENT
        self.assertRpcError(bad, self.create, self.op_md, role=9, contains="'role'")
        self.assertRpcError(bad, self.create, self.op_md, ttl_ms=-1, contains="ttl_ms")
        self.assertRpcError(bad, self.create, self.op_md, ttl_ms=400 * 86400 * 1000,
                            contains="ttl_ms")
        self.assertRpcError(bad, self.create, self.op_md, session="has space", contains="scope")
        req = admin_pb2.CreateApiKeyRequest()
        req.scope.task_id = "t1"
        self.assertRpcError(bad, self.admin.CreateApiKey, req, metadata=self.op_md, timeout=10,
                            contains="scope.session_id")
        req = admin_pb2.CreateApiKeyRequest(tenant_id=self.tenant.tenant_id,
                                            role=admin_pb2.API_KEY_ROLE_ADMIN)
        req.scope.session_id = "s1"
        self.assertRpcError(bad, self.admin.CreateApiKey, req, metadata=self.srv.admin_md(),
                            timeout=10, contains="admin key acts for the whole tenant")

    def test_a_key_expires(self):
        k = self.create(self.op_md, ttl_ms=1500)
        self.assertGreater(k.key.expires_at_unix_ms, k.key.created_at_unix_ms)
        self.assertEqual(self.whoami(k.secret).expires_at_unix_ms, k.key.expires_at_unix_ms)
        deadline = time.monotonic() + 15
        while True:
            try:
                self.whoami(k.secret)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), UNAUTHENTICATED, e.details())
                info = test_error_details.Details(e).info
                self.assertEqual(info.reason, "API_KEY_EXPIRED")
                self.assertEqual(info.metadata["key_id"], k.key.key_id)
                break
            self.assertLess(time.monotonic(), deadline, "the key never expired")
            time.sleep(0.05)
        self.assertGreaterEqual(time.time() * 1000, k.key.expires_at_unix_ms)

    def test_a_child_never_outlives_its_creator(self):
        parent = self.create(self.op_md, role=admin_pb2.API_KEY_ROLE_OPERATOR, ttl_ms=3_600_000)
        md = cgtest.bearer(parent.secret)
        for ttl in (0, 7_200_000):
            with self.subTest(ttl_ms=ttl):
                child = self.create(md, ttl_ms=ttl)
                self.assertEqual(child.key.expires_at_unix_ms, parent.key.expires_at_unix_ms)
        shorter = self.create(md, ttl_ms=60_000)
        self.assertLess(shorter.key.expires_at_unix_ms, parent.key.expires_at_unix_ms)

    def test_key_list_shows_role_scope_expiry_and_last_use(self):
        k = self.create(self.op_md, session="s9", ttl_ms=3_600_000)
        listed = {x.key_id: x for x in self.admin.ListApiKeys(
            admin_pb2.ListApiKeysRequest(tenant_id=self.tenant.tenant_id),
            metadata=self.srv.admin_md(), timeout=10).keys}
        row = listed[k.key.key_id]
        self.assertEqual(row.last_used_at_unix_ms, 0, "never used")
        self.assertEqual(row.role, admin_pb2.API_KEY_ROLE_AGENT)
        self.assertEqual(row.scope.session_id, "s9")
        self.assertEqual(row.expires_at_unix_ms, k.key.expires_at_unix_ms)
        before = int(time.time() * 1000)
        self.whoami(k.secret)
        listed = {x.key_id: x for x in self.admin.ListApiKeys(
            admin_pb2.ListApiKeysRequest(), metadata=cgtest.bearer(
                self.srv.create_key(self.tenant.tenant_id).secret), timeout=10).keys}
        used = listed[k.key.key_id].last_used_at_unix_ms
        self.assertGreaterEqual(used, before - 1000)
