"""What bad input gets (DESIGN.md §6): a clear status naming the field and the problem,
nothing changed, no crash."""

import random
import uuid

import grpc

import cgtest
from cgtest import admin_pb2, budget_pb2, context_pb2

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND


def field(num, wire_type, payload):
    """A hand-encoded field: tag, then payload (length-prefixed for wire type 2)."""
    tag = varint((num << 3) | wire_type)
    if wire_type == 2:
        return tag + varint(len(payload)) + payload
    return tag + payload


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


MALFORMED = {
    "truncated length": b"\x0a\xff",
    "length past the end": b"\x0a\x05ab",
    "endless varint": b"\x08" + b"\xff" * 11,
    "bad wire type": b"\x0f\x00",
    "field number 0": b"\x02\x01a",
    "end group without start": b"\x0c",
}

BAD_UTF8 = {
    "ff fe": b"\xff\xfe",
    "lone continuation": b"a\x80b",
    "overlong slash": b"\xc0\xaf",
    "surrogate": b"\xed\xa0\x80",
    "truncated sequence": b"abc\xe2\x82",
    "beyond U+10FFFF": b"\xf4\x90\x80\x80",
}


class BadInput(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        cls.admin = cls.srv.admin(cls.ch)
        cls.md = cls.srv.admin_md()
        cls.tenant = cls.srv.create_tenant("bad-input")
        cls.key = cls.srv.create_key(cls.tenant.tenant_id)
        cls.baseline = cls.snapshot()

    @classmethod
    def snapshot(cls):
        tenants = cls.admin.ListTenants(admin_pb2.ListTenantsRequest(page_size=1000),
                                        metadata=cls.md, timeout=10)
        keys = cls.admin.ListApiKeys(admin_pb2.ListApiKeysRequest(tenant_id=cls.tenant.tenant_id),
                                     metadata=cls.md, timeout=10)
        return ([(t.tenant_id, t.name, t.time_zone) for t in tenants.tenants],
                [(k.key_id, k.revoked_at_unix_ms) for k in keys.keys])

    def tearDown(self):
        # After every bad request: still SERVING, a normal call works, nothing changed.
        self.assertTrue(self.srv.running(), "the server died")
        self.assertEqual(cgtest.health.name(cgtest.health_check(self.ch).status), "SERVING")
        now, before = self.snapshot(), self.baseline
        type(self).baseline = now  # only the test that changed something fails
        self.assertEqual(now, before, "bad input changed something")

    def raw(self, method, data, metadata=None):
        return cgtest.raw_unary(self.ch, f"/ctxguard.v1.AdminService/{method}")(
            data, metadata=metadata if metadata is not None else self.md, timeout=10)

    # -- protobuf

    def test_malformed_protobuf_names_the_message_type(self):
        for what, data in MALFORMED.items():
            with self.subTest(what=what):
                self.assertRpcError(INVALID, self.raw, "CreateTenant", data,
                                    contains="CreateTenantRequest")

    def test_malformed_protobuf_on_every_admin_rpc(self):
        for name, _, _, in_type in cgtest.service_methods(admin_pb2, "AdminService"):
            with self.subTest(rpc=name):
                self.assertRpcError(INVALID, self.raw, name, MALFORMED["length past the end"],
                                    contains=in_type.rsplit(".", 1)[1])

    def test_malformed_protobuf_on_tenant_rpcs(self):
        md = cgtest.bearer(self.key.secret)
        for module, service in ((budget_pb2, "BudgetService"), (context_pb2, "ContextService")):
            for name, _, ss, in_type in cgtest.service_methods(module, service):
                if ss:
                    continue
                with self.subTest(rpc=f"{service}/{name}"):
                    self.assertRpcError(
                        INVALID, cgtest.raw_unary(self.ch, f"/ctxguard.v1.{service}/{name}"),
                        MALFORMED["truncated length"], metadata=md, timeout=10,
                        contains=in_type.rsplit(".", 1)[1])

    # -- invalid UTF-8

    def test_invalid_utf8_in_a_string_field_names_the_field(self):
        for what, bad in BAD_UTF8.items():
            with self.subTest(what=what, field="name"):
                self.assertRpcError(INVALID, self.raw, "CreateTenant", field(1, 2, bad),
                                    contains=("name", "utf-8"))
            with self.subTest(what=what, field="time_zone"):
                self.assertRpcError(INVALID, self.raw, "CreateTenant",
                                    field(1, 2, b"ok") + field(2, 2, bad),
                                    contains=("time_zone", "utf-8"))
        self.assertRpcError(INVALID, self.raw, "GetTenant", field(1, 2, b"\xff\xfe"),
                            contains="tenant_id")

    def test_valid_multibyte_utf8_is_not_refused_by_the_decoder(self):
        # 4-byte sequences are valid UTF-8: the answer is about the tenant, not encoding.
        err = cgtest.rpc_error(self.raw, "GetTenant", field(1, 2, "😀".encode()))
        self.assertEqual(err.code(), INVALID, err.details())
        self.assertNotIn("utf-8", err.details().lower())

    # -- CreateTenant fields

    def create(self, name, time_zone=""):
        req = admin_pb2.CreateTenantRequest(name=name, time_zone=time_zone)
        return self.admin.CreateTenant(req, metadata=self.md, timeout=10)

    def test_tenant_name_rules(self):
        self.assertRpcError(INVALID, self.create, "", contains="name")
        self.assertRpcError(INVALID, self.create, "n" * 300, contains="name")
        self.assertRpcError(INVALID, self.create, "n" * 201, contains="name")

    def test_tenant_time_zone_rules(self):
        for tz in ("Mars/Olympus_Mons", "../../../../etc/passwd", "/etc/localtime",
                   "Europe", " UTC", "x" * 300):
            with self.subTest(time_zone=tz):
                self.assertRpcError(INVALID, self.create, "tz-test", tz, contains="time_zone")

    def test_embedded_nul_in_string_fields(self):
        # U+0000 is valid UTF-8 but cannot survive a C string: it must be refused, never
        # silently cut ("Europe/Berlin\0junk" stored as "Europe/Berlin").
        with self.subTest(field="time_zone"):
            self.assertRpcError(INVALID, self.create, "tz-test", "Europe/Berlin\x00junk",
                                contains="time_zone")
        with self.subTest(field="name"):
            self.assertRpcError(INVALID, self.create, "acme\x00junk", contains="name")
        with self.subTest(field="tenant_id"):
            self.assertRpcError(
                INVALID, self.admin.GetTenant,
                admin_pb2.GetTenantRequest(tenant_id=self.tenant.tenant_id + "\x00x"),
                metadata=self.md, timeout=10, contains="tenant_id")

    # -- ids

    def test_non_uuid_tenant_ids(self):
        calls = (
            ("GetTenant", lambda t: self.admin.GetTenant(
                admin_pb2.GetTenantRequest(tenant_id=t), metadata=self.md, timeout=10)),
            ("CreateApiKey", lambda t: self.admin.CreateApiKey(
                admin_pb2.CreateApiKeyRequest(tenant_id=t), metadata=self.md, timeout=10)),
            ("ListApiKeys", lambda t: self.admin.ListApiKeys(
                admin_pb2.ListApiKeysRequest(tenant_id=t), metadata=self.md, timeout=10)),
            ("RevokeApiKey", lambda t: self.admin.RevokeApiKey(
                admin_pb2.RevokeApiKeyRequest(tenant_id=t, key_id=self.key.key.key_id),
                metadata=self.md, timeout=10)),
        )
        for rpc, fn in calls:
            for bad in ("", "not-a-uuid", self.tenant.tenant_id.replace("-", ""),
                        self.tenant.tenant_id + "0", "' OR 1=1 --"):
                with self.subTest(rpc=rpc, tenant_id=bad):
                    self.assertRpcError(INVALID, fn, bad, contains="tenant_id")

    def test_unknown_tenant_is_not_found(self):
        ghost = str(uuid.uuid4())
        self.assertRpcError(NOT_FOUND, self.admin.GetTenant,
                            admin_pb2.GetTenantRequest(tenant_id=ghost),
                            metadata=self.md, timeout=10, contains="tenant")
        self.assertRpcError(NOT_FOUND, self.admin.CreateApiKey,
                            admin_pb2.CreateApiKeyRequest(tenant_id=ghost, name="x"),
                            metadata=self.md, timeout=10, contains="tenant")
        self.assertRpcError(NOT_FOUND, self.admin.RevokeApiKey,
                            admin_pb2.RevokeApiKeyRequest(tenant_id=ghost,
                                                          key_id=self.key.key.key_id),
                            metadata=self.md, timeout=10)

    def test_key_id_rules(self):
        for bad in ("", "xyz", "0" * 15, "0" * 17, "g" * 16):
            with self.subTest(key_id=bad):
                self.assertRpcError(INVALID, self.admin.RevokeApiKey,
                                    admin_pb2.RevokeApiKeyRequest(tenant_id=self.tenant.tenant_id,
                                                                  key_id=bad),
                                    metadata=self.md, timeout=10, contains="key_id")
        self.assertRpcError(NOT_FOUND, self.admin.RevokeApiKey,
                            admin_pb2.RevokeApiKeyRequest(tenant_id=self.tenant.tenant_id,
                                                          key_id="0" * 16),
                            metadata=self.md, timeout=10, contains="key")

    def test_api_key_name_too_long(self):
        self.assertRpcError(INVALID, self.admin.CreateApiKey,
                            admin_pb2.CreateApiKeyRequest(tenant_id=self.tenant.tenant_id,
                                                          name="k" * 201),
                            metadata=self.md, timeout=10, contains="name")

    def test_list_tenants_paging_rules(self):
        self.assertRpcError(INVALID, self.admin.ListTenants,
                            admin_pb2.ListTenantsRequest(page_size=1001), metadata=self.md,
                            timeout=10, contains="page_size")
        self.assertRpcError(INVALID, self.admin.ListTenants,
                            admin_pb2.ListTenantsRequest(page_token="garbage!"), metadata=self.md,
                            timeout=10, contains="page_token")

    # -- Ping

    def ping(self, **kw):
        return self.admin.Ping(admin_pb2.PingRequest(**kw), metadata=self.md, timeout=10)

    def test_ping_payload_over_64_kib(self):
        self.assertEqual(len(self.ping(payload=b"p" * 65536).payload), 65536)
        self.assertRpcError(INVALID, self.ping, payload=b"p" * 65537, contains="payload")
        self.assertRpcError(INVALID, self.ping, payload=b"p" * 100_000, contains="payload")

    def test_ping_delay_over_60_s(self):
        for d in (60001, 70000, 2**32 - 1):
            with self.subTest(delay_ms=d):
                self.assertRpcError(INVALID, self.ping, delay_ms=d, contains="delay_ms")

    # -- metadata

    def test_oversized_authorization_header(self):
        self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, self.admin.WhoAmI,
                            admin_pb2.WhoAmIRequest(),
                            metadata=(("authorization", "Bearer " + "a" * 6000),), timeout=10,
                            contains="authorization")


class EdgeInputAccepted(cgtest.TestCase):
    """The other side of the rules: input at the documented limits is accepted as sent."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.admin = cls.srv.admin()
        cls.md = cls.srv.admin_md()

    def create(self, name, time_zone=""):
        req = admin_pb2.CreateTenantRequest(name=name, time_zone=time_zone)
        return self.admin.CreateTenant(req, metadata=self.md, timeout=10).tenant

    def test_name_limit_counts_characters_not_bytes(self):
        for name in ("n" * 200, "é" * 200, "😀" * 200, "名" * 200, "x"):
            with self.subTest(name=name[:3], chars=len(name), utf8_bytes=len(name.encode())):
                t = self.create(name)
                self.assertEqual(t.name, name)
                got = self.admin.GetTenant(admin_pb2.GetTenantRequest(tenant_id=t.tenant_id),
                                           metadata=self.md, timeout=10).tenant
                self.assertEqual(got.name, name)

    def test_time_zones(self):
        self.assertEqual(self.create("tz").time_zone, "UTC")
        for tz in ("UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Asia/Kolkata"):
            with self.subTest(time_zone=tz):
                self.assertEqual(self.create("tz", tz).time_zone, tz)

    def test_unknown_fields_are_ignored(self):
        # proto3: a newer client's extra fields do not break an older server.
        data = field(1, 2, b"forward") + field(99, 2, b"from the future") + field(100, 0, b"\x01")
        r = cgtest.raw_unary(self.srv.channel(), "/ctxguard.v1.AdminService/CreateTenant")(
            data, metadata=self.md, timeout=10)
        self.assertEqual(admin_pb2.CreateTenantResponse.FromString(r).tenant.name, "forward")


class OversizedMessages(cgtest.TestCase):
    def test_message_over_the_limit_is_resource_exhausted(self):
        srv = cgtest.start_server(self, env={"CTXGUARD_MAX_MESSAGE_BYTES": "65536"})
        ch = srv.channel()
        admin = srv.admin(ch)
        err = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, admin.Ping,
                                  admin_pb2.PingRequest(payload=b"x" * 100_000),
                                  metadata=srv.admin_md(), timeout=10)
        self.assertRegex(err.details(), r"(?i)larger|too large|limit|max")
        # Also on a method that is not implemented and without a key: the size goes first.
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            cgtest.raw_unary(ch, "/ctxguard.v1.ContextService/CountTokens"),
                            b"\x0a" + varint(200_000) + b"u" * 200_000, timeout=10)
        # The connection and the server are fine afterwards.
        self.assertEqual(admin.Ping(admin_pb2.PingRequest(payload=b"y" * 60000),
                                    metadata=srv.admin_md(), timeout=10).payload, b"y" * 60000)
        self.assertEqual(cgtest.health.name(cgtest.health_check(ch).status), "SERVING")


class RandomBytes(cgtest.TestCase):
    """Seeded random bytes to every method, with and without a key: only the statuses a
    client can act on, never INTERNAL or UNKNOWN, and the server stays up."""

    def test_random_bytes_to_every_method(self):
        srv = cgtest.start_server(self)
        ch = srv.channel()
        tenant = srv.create_tenant()
        key = srv.create_key(tenant.tenant_id).secret
        methods = []
        for module, service in ((admin_pb2, "AdminService"), (budget_pb2, "BudgetService"),
                                (context_pb2, "ContextService")):
            for name, _, ss, _ in cgtest.service_methods(module, service):
                methods.append((f"/ctxguard.v1.{service}/{name}", ss))
        rng = random.Random(20240601)
        allowed = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED,
                   grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED}
        bad = []
        for i in range(15):
            n = rng.choice((1, 2, 3, 7, 16, 64, 300))
            data = bytes(rng.getrandbits(8) for _ in range(n))
            # Admin RPCs without a key (no handler runs, nothing is created); tenant RPCs
            # with the tenant key.
            for path, ss in methods:
                md = None if "AdminService" in path else cgtest.bearer(key)
                try:
                    if ss:
                        list(ch.unary_stream(path)(data, metadata=md, timeout=10))
                    else:
                        ch.unary_unary(path)(data, metadata=md, timeout=10)
                    bad.append((path, data.hex(), "OK"))
                except grpc.RpcError as e:
                    if e.code() not in allowed:
                        bad.append((path, data.hex(), e.code().name, e.details()))
        self.assertEqual(bad, [])
        self.assertTrue(srv.running())
        self.assertEqual(cgtest.health.name(cgtest.health_check(ch).status), "SERVING")


if __name__ == "__main__":
    import unittest
    unittest.main()
