"""Tenants, API keys and the `authorization: Bearer <key>` contract, from a Python client."""

import time
import urllib.parse
import uuid

import grpc

import cgtest
from cgtest import admin_pb2, budget_pb2, budget_pb2_grpc, context_pb2, context_pb2_grpc

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
NOT_FOUND = grpc.StatusCode.NOT_FOUND
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED


def key_parts(secret):
    """cgk_<tenant hex>_<key id>_<secret> -> (tenant hex, key id, secret part)."""
    prefix, tenant, key_id, rest = secret.split("_", 3)
    assert prefix == "cgk", secret
    return tenant, key_id, rest


class Auth(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        cls.admin = cls.srv.admin(cls.ch)
        cls.budget = budget_pb2_grpc.BudgetServiceStub(cls.ch)
        cls.context = context_pb2_grpc.ContextServiceStub(cls.ch)
        cls.tenant = cls.srv.create_tenant("acme-" + uuid.uuid4().hex[:6], "Europe/Berlin")
        cls.created = cls.srv.create_key(cls.tenant.tenant_id, "ci")
        cls.key = cls.created.secret
        cls.other = cls.srv.create_tenant("other-" + uuid.uuid4().hex[:6])
        cls.other_key = cls.srv.create_key(cls.other.tenant_id).secret

    def list_keys(self):
        return self.admin.ListApiKeys(admin_pb2.ListApiKeysRequest(tenant_id=self.tenant.tenant_id),
                                      metadata=self.srv.admin_md(), timeout=10)

    def whoami(self, metadata):
        return self.admin.WhoAmI(admin_pb2.WhoAmIRequest(), metadata=metadata, timeout=10)

    def whoami_fails(self, code, metadata, contains=()):
        return self.assertRpcError(code, self.admin.WhoAmI, admin_pb2.WhoAmIRequest(),
                                   metadata=metadata, timeout=10, contains=contains)

    # -- keys

    def test_created_key_is_shown_once_and_never_listed(self):
        c = self.created
        self.assertTrue(c.secret.startswith("cgk_"), c.secret)
        tenant_hex, key_id, secret_part = key_parts(c.secret)
        self.assertEqual(tenant_hex, self.tenant.tenant_id.replace("-", ""))
        self.assertEqual(key_id, c.key.key_id)
        self.assertRegex(c.key.key_id, r"^[0-9a-f]{16}$")
        self.assertEqual(c.key.tenant_id, self.tenant.tenant_id)
        self.assertEqual(c.key.name, "ci")
        self.assertEqual(c.key.revoked_at_unix_ms, 0)
        self.assertGreater(c.key.created_at_unix_ms, 0)

        listed = self.list_keys()
        self.assertIn(c.key.key_id, [k.key_id for k in listed.keys])
        raw = listed.SerializeToString()
        self.assertNotIn(c.secret.encode(), raw)
        self.assertNotIn(secret_part.encode(), raw, "ListApiKeys must never show a secret")

    def test_whoami_with_tenant_key(self):
        r = self.whoami(cgtest.bearer(self.key))
        self.assertEqual(admin_pb2.WhoAmIResponse.Kind.Name(r.kind), "KIND_TENANT")
        self.assertEqual(r.tenant_id, self.tenant.tenant_id)
        self.assertEqual(r.tenant_name, self.tenant.name)
        self.assertEqual(r.key_id, self.created.key.key_id)

    def test_whoami_with_admin_key(self):
        r = self.whoami(self.srv.admin_md())
        self.assertEqual(admin_pb2.WhoAmIResponse.Kind.Name(r.kind), "KIND_ADMIN")
        self.assertEqual(r.tenant_id, "")
        self.assertEqual(r.key_id, "")

    def test_scheme_is_case_insensitive(self):
        # RFC 7235: the auth scheme is case-insensitive.
        r = self.whoami((("authorization", "bearer " + self.key),))
        self.assertEqual(r.tenant_id, self.tenant.tenant_id)

    # -- UNAUTHENTICATED

    def test_missing_authorization(self):
        self.whoami_fails(UNAUTHENTICATED, None, contains="authorization")
        self.assertRpcError(UNAUTHENTICATED, self.budget.GetBudget, budget_pb2.GetBudgetRequest(),
                            timeout=10, contains="authorization")
        self.assertRpcError(UNAUTHENTICATED, self.admin.ListTenants, admin_pb2.ListTenantsRequest(),
                            timeout=10, contains="authorization")

    def test_garbage_authorization(self):
        cases = {
            "Bearer garbage": "authorization",
            "Basic x": "authorization",
            "Bearer": "authorization",
            "Bearer ": "authorization",
            "": "authorization",
            self.key: "authorization",  # the key without the scheme
            "Bearer " + self.key + "x": "authorization",
            "Bearer cgk_": "authorization",
        }
        for value, name in cases.items():
            with self.subTest(authorization=value[:40]):
                self.whoami_fails(UNAUTHENTICATED, (("authorization", value),), contains=name)
                self.assertRpcError(UNAUTHENTICATED, self.budget.GetBudget,
                                    budget_pb2.GetBudgetRequest(),
                                    metadata=(("authorization", value),), timeout=10)

    def test_wrong_secret(self):
        self.whoami(cgtest.bearer(self.key))  # the right key first (and any cache warmed)
        tenant_hex, key_id, secret = key_parts(self.key)
        flipped = secret[:5] + ("A" if secret[5] != "A" else "B") + secret[6:]
        forged = f"cgk_{tenant_hex}_{key_id}_{flipped}"
        self.assertEqual(len(forged), len(self.key))
        self.whoami_fails(UNAUTHENTICATED, cgtest.bearer(forged), contains="authorization")
        self.assertRpcError(UNAUTHENTICATED, self.budget.GetBudget, budget_pb2.GetBudgetRequest(),
                            metadata=cgtest.bearer(forged), timeout=10)

    def test_key_presented_for_another_tenant(self):
        _, key_id, secret = key_parts(self.key)
        for tenant in (self.other.tenant_id, str(uuid.uuid4())):
            forged = f"cgk_{tenant.replace('-', '')}_{key_id}_{secret}"
            with self.subTest(tenant=tenant):
                self.whoami_fails(UNAUTHENTICATED, cgtest.bearer(forged), contains="authorization")

    def test_unknown_key_id(self):
        tenant_hex, _, secret = key_parts(self.key)
        forged = f"cgk_{tenant_hex}_{'0' * 16}_{secret}"
        self.whoami_fails(UNAUTHENTICATED, cgtest.bearer(forged), contains="authorization")

    def test_revoked_key(self):
        c = self.srv.create_key(self.tenant.tenant_id, "to-revoke")
        md = cgtest.bearer(c.secret)
        self.assertEqual(self.whoami(md).key_id, c.key.key_id)  # works (and is cached)
        r = self.admin.RevokeApiKey(
            admin_pb2.RevokeApiKeyRequest(tenant_id=self.tenant.tenant_id, key_id=c.key.key_id),
            metadata=self.srv.admin_md(), timeout=10)
        self.assertGreater(r.key.revoked_at_unix_ms, 0)
        self.whoami_fails(UNAUTHENTICATED, md, contains="revoked")
        self.assertRpcError(UNAUTHENTICATED, self.budget.GetBudget, budget_pb2.GetBudgetRequest(),
                            metadata=md, timeout=10)
        listed = self.list_keys()
        revoked = [k for k in listed.keys if k.key_id == c.key.key_id]
        self.assertEqual(len(revoked), 1)
        self.assertGreater(revoked[0].revoked_at_unix_ms, 0)
        # The tenant's other key is untouched.
        self.assertEqual(self.whoami(cgtest.bearer(self.key)).key_id, self.created.key.key_id)

    def test_wrong_admin_key(self):
        self.assertRpcError(UNAUTHENTICATED, self.admin.ListTenants, admin_pb2.ListTenantsRequest(),
                            metadata=cgtest.bearer(self.srv.admin_key + "x"), timeout=10,
                            contains="admin key")
        self.whoami_fails(UNAUTHENTICATED, cgtest.bearer(self.srv.admin_key[:-1] + "#"))

    # -- PERMISSION_DENIED

    def test_tenant_key_on_server_admin_rpcs(self):
        # Even a tenant admin key manages no tenant but its own.
        md = cgtest.bearer(self.key)
        calls = [
            (self.admin.ListTenants, admin_pb2.ListTenantsRequest()),
            (self.admin.CreateTenant, admin_pb2.CreateTenantRequest(name="sneaky")),
            (self.admin.Ping, admin_pb2.PingRequest()),
        ]
        for fn, req in calls:
            with self.subTest(rpc=type(req).__name__):
                self.assertRpcError(PERMISSION_DENIED, fn, req, metadata=md, timeout=10,
                                    contains="admin key")

    def test_agent_key_on_tenant_admin_rpcs(self):
        md = cgtest.bearer(self.srv.create_key(self.tenant.tenant_id, role="agent").secret)
        tid = self.tenant.tenant_id
        calls = [
            (self.admin.GetTenant, admin_pb2.GetTenantRequest(tenant_id=tid)),
            (self.admin.CreateApiKey, admin_pb2.CreateApiKeyRequest(tenant_id=tid)),
            (self.admin.ListApiKeys, admin_pb2.ListApiKeysRequest(tenant_id=tid)),
        ]
        for fn, req in calls:
            with self.subTest(rpc=type(req).__name__):
                self.assertRpcError(PERMISSION_DENIED, fn, req, metadata=md, timeout=10,
                                    contains="role 'agent'")

    def test_tenant_admin_key_cannot_reach_another_tenant(self):
        md = cgtest.bearer(self.key)
        oid = self.other.tenant_id
        for fn, req in ((self.admin.GetTenant, admin_pb2.GetTenantRequest(tenant_id=oid)),
                        (self.admin.CreateApiKey, admin_pb2.CreateApiKeyRequest(tenant_id=oid)),
                        (self.admin.ListApiKeys, admin_pb2.ListApiKeysRequest(tenant_id=oid))):
            with self.subTest(rpc=type(req).__name__):
                self.assertRpcError(NOT_FOUND, fn, req, metadata=md, timeout=10,
                                    contains="tenant_id")

    def test_admin_key_on_tenant_rpcs(self):
        for fn, req in ((self.budget.SetBudget, budget_pb2.SetBudgetRequest()),
                        (self.budget.GetUsage, budget_pb2.GetUsageRequest())):
            with self.subTest(rpc=type(req).__name__):
                self.assertRpcError(PERMISSION_DENIED, fn, req, metadata=self.srv.admin_md(),
                                    timeout=10, contains="tenant")

    def test_tenant_key_passes_authentication_on_tenant_rpcs(self):
        # Past authentication each service judges the request itself.
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.context.Summarize,
                            context_pb2.SummarizeRequest(), metadata=cgtest.bearer(self.key),
                            timeout=10, contains="conversation")
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.budget.SetBudget,
                            budget_pb2.SetBudgetRequest(), metadata=cgtest.bearer(self.key),
                            timeout=10, contains="settings")


class AdminApi(cgtest.TestCase):
    def test_tenants_page_in_creation_order(self):
        srv = cgtest.start_server(self)
        admin, md = srv.admin(), srv.admin_md()
        made = [srv.create_tenant(f"page-{i}").tenant_id for i in range(5)]
        seen, token, pages = [], "", 0
        while True:
            r = admin.ListTenants(admin_pb2.ListTenantsRequest(page_size=2, page_token=token),
                                  metadata=md, timeout=10)
            self.assertLessEqual(len(r.tenants), 2)
            seen += [t.tenant_id for t in r.tenants]
            pages += 1
            token = r.next_page_token
            if not token:
                break
            self.assertLess(pages, 10, "paging does not end")
        self.assertEqual(seen, made)
        got = admin.GetTenant(admin_pb2.GetTenantRequest(tenant_id=made[3]), metadata=md,
                              timeout=10).tenant
        self.assertEqual((got.tenant_id, got.name, got.time_zone), (made[3], "page-3", "UTC"))


class RedisLoss(cgtest.TestCase):
    """Redis is a cache: losing it never fails an RPC nor keeps a revoked key alive here."""

    def test_auth_works_without_redis(self):
        u = urllib.parse.urlsplit(cgtest.redis_url())
        proxy = cgtest.TcpProxy(u.hostname, u.port)
        self.addCleanup(proxy.close)
        srv = cgtest.start_server(self, env={
            "CTXGUARD_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"})
        tenant = srv.create_tenant()
        k1 = srv.create_key(tenant.tenant_id)
        k2 = srv.create_key(tenant.tenant_id)
        admin = srv.admin()

        def whoami(k):
            return admin.WhoAmI(admin_pb2.WhoAmIRequest(), metadata=cgtest.bearer(k.secret),
                                timeout=10)

        for k in (k1, k2):  # both looked up (and cached) while Redis is there
            self.assertEqual(whoami(k).key_id, k.key.key_id)
        proxy.cut()
        t0 = time.monotonic()
        self.assertEqual(whoami(k1).key_id, k1.key.key_id)
        admin.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(tenant_id=tenant.tenant_id,
                                                         key_id=k2.key.key_id),
                           metadata=srv.admin_md(), timeout=10)
        self.assertRpcError(UNAUTHENTICATED, admin.WhoAmI, admin_pb2.WhoAmIRequest(),
                            metadata=cgtest.bearer(k2.secret), timeout=10)
        k3 = srv.create_key(tenant.tenant_id)
        self.assertEqual(whoami(k3).key_id, k3.key.key_id)
        self.assertLess(time.monotonic() - t0, 3.0, "Redis loss made calls slow")
        self.assertRegex(srv.log_text(), r"lvl=warn .*(?i:redis)")
        self.assertEqual(cgtest.health.name(cgtest.health_check(srv.channel()).status), "SERVING")


class NoAdminKey(cgtest.TestCase):
    """A server without admin_key: AdminService is disabled, tenant keys still work."""

    def test_admin_rpcs_are_permission_denied(self):
        # Tenants and keys made by a server that has the admin key, in a schema that the
        # server without one shares.
        with_key = cgtest.start_server(self)
        tenant = with_key.create_tenant()
        key = with_key.create_key(tenant.tenant_id).secret
        srv = cgtest.start_server(self, schema=with_key.schema, env={"CTXGUARD_ADMIN_KEY": None})
        admin = srv.admin()
        for md in (cgtest.bearer(cgtest.ADMIN_KEY), None, cgtest.bearer(key)):
            with self.subTest(authorization=md and md[0][1][:12]):
                self.assertRpcError(PERMISSION_DENIED, admin.ListTenants,
                                    admin_pb2.ListTenantsRequest(), metadata=md, timeout=10,
                                    contains="admin_key")
                self.assertRpcError(PERMISSION_DENIED, admin.CreateTenant,
                                    admin_pb2.CreateTenantRequest(name="x"), metadata=md,
                                    timeout=10, contains="admin_key")
                self.assertRpcError(PERMISSION_DENIED, admin.Ping, admin_pb2.PingRequest(),
                                    metadata=md, timeout=10)
        r = admin.WhoAmI(admin_pb2.WhoAmIRequest(), metadata=cgtest.bearer(key), timeout=10)
        self.assertEqual(r.tenant_id, tenant.tenant_id)
        # The old admin key is just a wrong key now.
        self.assertRpcError(UNAUTHENTICATED, admin.WhoAmI, admin_pb2.WhoAmIRequest(),
                            metadata=cgtest.bearer(cgtest.ADMIN_KEY), timeout=10)


if __name__ == "__main__":
    import unittest
    unittest.main()
