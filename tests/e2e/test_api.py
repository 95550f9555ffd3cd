"""The JSON API on the HTTP listener (/api/v1/, transport/http_api.h) against a real server:
every exposed read and the approval action, with the roles of the gRPC API (viewer reads,
operator acts), the same errors as HTTP statuses with the gRPC code and reason, and hostile
requests refused naming what is wrong."""

import http.client
import json
import uuid

import grpc

import cgtest
from cgtest import admin_pb2, budget_pb2, budget_pb2_grpc, common_pb2, context_pb2
from test_http import http_port

B = budget_pb2


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class Api(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        cls.port = http_port(cls.srv)

    def setUp(self):
        t = self.srv.create_tenant()
        self.tenant = t.tenant_id
        self.keys = {role: self.srv.create_key(t.tenant_id, role=role).secret
                     for role in ("agent", "viewer", "operator", "admin")}
        self.md = cgtest.bearer(self.keys["admin"])
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]

    def call(self, method, path, role="viewer", body=None, headers=None, key=None):
        """(status, parsed JSON) of one request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        h = dict(headers or {})
        if key is not None or role is not None:
            h["Authorization"] = "Bearer " + (key if key is not None else self.keys[role])
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            h["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            text = r.read().decode()
            self.assertEqual(r.getheader("Content-Type"), "application/json; charset=utf-8", text)
            self.assertEqual(r.getheader("Cache-Control"), "no-store")
            return r.status, json.loads(text)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.call("GET", "/api/v1/" + path, **kw)

    def spend(self, tokens):
        self.stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(self.s, "t"), usage=common_pb2.TokenUsage(input_tokens=tokens),
            idempotency_key="k-" + uuid.uuid4().hex), metadata=self.md, timeout=10)

    def test_reads_answer_the_rpcs_as_json(self):
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(self.s), settings=B.BudgetSettings(
            limit_tokens=10000)), metadata=self.md, timeout=10)
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(self.s, "t"), settings=B.BudgetSettings(
            limit_tokens=5000)), metadata=self.md, timeout=10)
        self.spend(1234)
        st, got = self.get(f"BudgetService/GetUsage?scope.session_id={self.s}&depth=1")
        self.assertEqual(st, 200, got)
        self.assertEqual(got["root"]["used_tokens"], 1234)
        self.assertEqual([c["scope"]["task_id"] for c in got["root"]["children"]], ["t"])
        st, got = self.get(f"BudgetService/ListScopes?parent.session_id={self.s}&page_size=10")
        self.assertEqual((st, [x["scope"]["task_id"] for x in got["scopes"]]), (200, ["t"]))
        st, got = self.get(f"BudgetService/GetUsageHistory?scope.session_id={self.s}"
                           "&step_seconds=300")
        self.assertEqual(st, 200, got)
        self.assertEqual((got["step_seconds"], got["total_entries"]), (300, 1))
        self.assertEqual(sum(p["usage"]["input_tokens"] for p in got["points"]), 1234)
        st, got = self.get(f"BudgetService/GetBudget?scope.session_id={self.s}")
        self.assertEqual((st, got["budget"]["settings"]["limit_tokens"]), (200, 10000))
        st, got = self.get("AdminService/WhoAmI")
        self.assertEqual((st, got["role"]), (200, "API_KEY_ROLE_VIEWER"), got)
        st, got = self.get("ContextService/GetCompressionStats")  # the tenant's totals
        self.assertEqual(st, 200, got)
        st, got = self.get("AdminService/ListAuditEvents?page_size=5", role="operator")
        self.assertEqual(st, 200, got)
        self.assertTrue(any("budget" in e["kind"] for e in got["events"]), got)
        st, got = self.get("BudgetService/ListNotificationChannels", role="operator")
        self.assertEqual((st, got["channels"]), (200, []))

    def test_an_operator_approves_and_a_viewer_cannot(self):
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(self.s), settings=B.BudgetSettings(
            limit_tokens=1000, mode=B.BUDGET_MODE_APPROVAL)), metadata=self.md, timeout=10)
        agent = cgtest.bearer(self.keys["agent"])
        first = self.stub.Reserve(B.ReserveRequest(scope=scope(self.s), tokens=1500,
                                                   delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                  metadata=agent, timeout=10)
        self.assertEqual(first.decision, B.DECISION_REQUIRE_APPROVAL)
        aid = first.approval_id
        st, got = self.get("BudgetService/ListApprovals?include_descendants=true"
                           "&states=APPROVAL_STATE_PENDING")
        self.assertEqual((st, [a["approval_id"] for a in got["approvals"]]), (200, [aid]), got)
        body = {"approval_id": aid, "decision": "APPROVAL_STATE_APPROVED",
                "granted_tokens": 600, "note": "ok from the console"}
        st, got = self.call("POST", "/api/v1/BudgetService/ResolveApproval", role="viewer",
                            body=body)
        self.assertEqual(st, 403, got)
        self.assertEqual((got["error"]["code"], got["error"]["reason"]),
                         ("PERMISSION_DENIED", "ROLE_NOT_ALLOWED"))
        st, got = self.call("POST", "/api/v1/BudgetService/ResolveApproval", role="operator",
                            body=body)
        self.assertEqual(st, 200, got)
        self.assertEqual(got["approval"]["state"], "APPROVAL_STATE_APPROVED")
        again = self.stub.Reserve(B.ReserveRequest(scope=scope(self.s), tokens=1500,
                                                   delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                  metadata=agent, timeout=10)
        self.assertNotEqual(again.decision, B.DECISION_REQUIRE_APPROVAL)
        self.assertTrue(again.reservation.reservation_id)
        st, got = self.get(f"BudgetService/GetApproval?approval_id={aid}")
        self.assertEqual((st, got["approval"]["granted_tokens"]), (200, 600))

    def test_errors_are_http_statuses_with_the_grpc_code_reason_and_field(self):
        cases = [
            # (method, path, role/key, body, status, code, text in message or field)
            ("GET", "BudgetService/GetUsage", None, None, 401, "UNAUTHENTICATED", "authorization"),
            ("GET", "BudgetService/GetUsage", "cg_bogus", None, 401, "UNAUTHENTICATED", ""),
            ("GET", "BudgetService/Reserve", "viewer", None, 404, "NOT_FOUND", "no such API"),
            ("GET", "Nope/GetUsage", "viewer", None, 404, "NOT_FOUND", "no such API"),
            ("GET", "BudgetService", "viewer", None, 404, "NOT_FOUND", "no such API"),
            ("POST", "BudgetService/GetUsage", "viewer", {}, 400, "INVALID_ARGUMENT", "GET"),
            ("GET", "BudgetService/ResolveApproval", "operator", None, 400, "INVALID_ARGUMENT",
             "POST"),
            ("GET", "BudgetService/GetUsage?depth=x", "viewer", None, 400, "INVALID_ARGUMENT",
             "depth"),
            ("GET", "BudgetService/GetUsage?depth=-1", "viewer", None, 400, "INVALID_ARGUMENT",
             "depth"),
            ("GET", "BudgetService/GetUsage?depth=9", "viewer", None, 400, "INVALID_ARGUMENT",
             "depth"),
            ("GET", "BudgetService/GetUsage?nope=1", "viewer", None, 400, "INVALID_ARGUMENT",
             "nope"),
            ("GET", "BudgetService/GetUsage?scope=1", "viewer", None, 400, "INVALID_ARGUMENT",
             "scope"),
            ("GET", "BudgetService/GetUsage?scope.session_id=missing", "viewer", None, 404,
             "NOT_FOUND", "scope.session_id"),
            ("GET", "BudgetService/GetUsageHistory?step_seconds=61", "viewer", None, 400,
             "INVALID_ARGUMENT", "step_seconds"),
            ("GET", "BudgetService/ListApprovals?states=NOPE", "viewer", None, 400,
             "INVALID_ARGUMENT", "states"),
            ("GET", "AdminService/ListAuditEvents", "viewer", None, 403, "PERMISSION_DENIED",
             "viewer"),
            ("POST", "BudgetService/ResolveApproval", "operator", "{not json", 400,
             "INVALID_ARGUMENT", "JSON"),
            ("POST", "BudgetService/ResolveApproval", "operator", "[1]", 400,
             "INVALID_ARGUMENT", "object"),
            ("POST", "BudgetService/ResolveApproval", "operator", {"approval_id": {"x": 1}},
             400, "INVALID_ARGUMENT", "approval_id"),
            ("POST", "BudgetService/ResolveApproval", "operator",
             {"approval_id": str(uuid.uuid4()), "decision": "APPROVAL_STATE_APPROVED"}, 404,
             "NOT_FOUND", "approval_id"),
        ]
        for method, path, who, body, status, code, text in cases:
            with self.subTest(method=method, path=path):
                if who is None:
                    st, got = self.call(method, "/api/v1/" + path, role=None, body=body)
                elif who in self.keys:
                    st, got = self.call(method, "/api/v1/" + path, role=who, body=body)
                else:
                    st, got = self.call(method, "/api/v1/" + path, role=None, key=who, body=body)
                self.assertEqual(st, status, got)
                self.assertEqual(got["error"]["code"], code, got)
                self.assertTrue(got["error"]["request_id"])
                where = got["error"]["message"] + " " + got["error"].get("field", "")
                self.assertIn(text, where, got)

    def test_a_caller_request_id_is_kept_and_a_bad_one_replaced(self):
        st, got = self.call("GET", "/api/v1/BudgetService/GetUsage?depth=x",
                            headers={"X-Request-Id": "console-42"})
        self.assertEqual((st, got["error"]["request_id"]), (400, "console-42"))
        st, got = self.call("GET", "/api/v1/BudgetService/GetUsage?depth=x",
                            headers={"X-Request-Id": "bad id <script>"})
        self.assertEqual(st, 400)
        self.assertRegex(got["error"]["request_id"], r"^[0-9a-f]{16}$")

    def test_hostile_ids_come_back_escaped_json(self):
        evil = 's"</script><img/src=x/onerror=alert(1)>\\&amp;'
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(evil), settings=B.BudgetSettings(
            limit_tokens=10)), metadata=self.md, timeout=10)
        import urllib.parse
        st, got = self.get("BudgetService/GetUsage?scope.session_id="
                           + urllib.parse.quote(evil, safe=""))
        self.assertEqual((st, got["root"]["scope"]["session_id"]), (200, evil))


class RateLimit(cgtest.TestCase):
    """Each key gets a burst, then its rate: one request a minute here, so the fourth of four
    quick requests is refused whatever the machine's speed."""

    def test_a_key_past_its_burst_gets_429_and_another_key_does_not(self):
        srv = cgtest.start_server(self, env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0",
                                             "CTXGUARD_HTTP_API_RATE_PER_MIN": "1",
                                             "CTXGUARD_HTTP_API_BURST": "3"})
        port = http_port(srv)
        t = srv.create_tenant()
        keys = [srv.create_key(t.tenant_id, role="viewer").secret for _ in range(2)]

        def who(key):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            try:
                conn.request("GET", "/api/v1/AdminService/WhoAmI",
                             headers={"Authorization": "Bearer " + key})
                r = conn.getresponse()
                return r.status, json.loads(r.read().decode())
            finally:
                conn.close()

        for i in range(3):
            self.assertEqual(who(keys[0])[0], 200, f"request {i} of the burst")
        st, got = who(keys[0])
        self.assertEqual(st, 429, got)
        self.assertEqual(got["error"]["code"], "RESOURCE_EXHAUSTED")
        self.assertIn("1 requests a minute after a burst of 3", got["error"]["message"])
        self.assertRegex(got["error"]["message"], r"retry in \d+ ms")
        self.assertEqual(who(keys[1])[0], 200, "another key has its own bucket")


class RoleParity(cgtest.TestCase):
    """Every endpoint of the API with a key of every role answers as the RPC itself does over
    gRPC with the same key and the same request: the same gRPC code (HTTP 200 for OK), so the
    API has the roles and the checks of the gRPC API, not a copy of them."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        cls.port = http_port(cls.srv)

    def test_every_endpoint_and_role_answers_as_grpc_does(self):
        t = self.srv.create_tenant()
        roles = ("agent", "viewer", "operator", "admin")
        keys = {r: self.srv.create_key(t.tenant_id, role=r).secret for r in roles}
        md = cgtest.bearer(keys["admin"])
        stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        s = "s-" + uuid.uuid4().hex[:8]
        stub.SetBudget(B.SetBudgetRequest(scope=scope(s), settings=B.BudgetSettings(
            limit_tokens=1000)), metadata=md, timeout=10)
        nobody = str(uuid.uuid4())
        # (service, method, request message, query string or JSON body)
        cases = [
            ("BudgetService", "GetUsage", B.GetUsageRequest(scope=scope(s)),
             f"scope.session_id={s}"),
            ("BudgetService", "ListScopes", B.ListScopesRequest(page_size=5), "page_size=5"),
            ("BudgetService", "GetUsageHistory", B.GetUsageHistoryRequest(scope=scope(s)),
             f"scope.session_id={s}"),
            ("BudgetService", "GetBudget", B.GetBudgetRequest(scope=scope(s)),
             f"scope.session_id={s}"),
            ("BudgetService", "GetApproval", B.GetApprovalRequest(approval_id=nobody),
             f"approval_id={nobody}"),
            ("BudgetService", "ListApprovals", B.ListApprovalsRequest(), ""),
            ("BudgetService", "ListNotificationChannels", B.ListNotificationChannelsRequest(),
             ""),
            ("BudgetService", "ListNotificationDeliveries",
             B.ListNotificationDeliveriesRequest(page_size=5), "page_size=5"),
            ("BudgetService", "ResolveApproval", B.ResolveApprovalRequest(
                approval_id=nobody, decision=B.APPROVAL_STATE_DENIED),
             {"approval_id": nobody, "decision": "APPROVAL_STATE_DENIED"}),
            ("ContextService", "GetCompressionStats",
             context_pb2.GetCompressionStatsRequest(session_id=s), f"session_id={s}"),
            ("AdminService", "ListAuditEvents", admin_pb2.ListAuditEventsRequest(page_size=5),
             "page_size=5"),
            ("AdminService", "WhoAmI", admin_pb2.WhoAmIRequest(), ""),
        ]
        channel = self.srv.channel()
        seen = set()
        for service, method, request, http_args in cases:
            call = channel.unary_unary(f"/ctxguard.v1.{service}/{method}",
                                       request_serializer=type(request).SerializeToString,
                                       response_deserializer=lambda b: b)
            for role in roles:
                with self.subTest(method=method, role=role):
                    try:
                        call(request, metadata=cgtest.bearer(keys[role]), timeout=10)
                        want = "OK"
                    except grpc.RpcError as e:
                        want = e.code().name
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
                    h = {"Authorization": "Bearer " + keys[role]}
                    path = f"/api/v1/{service}/{method}"
                    if isinstance(http_args, dict):
                        h["Content-Type"] = "application/json"
                        conn.request("POST", path, body=json.dumps(http_args), headers=h)
                    else:
                        conn.request("GET", path + ("?" + http_args if http_args else ""),
                                     headers=h)
                    r = conn.getresponse()
                    body = json.loads(r.read().decode())
                    conn.close()
                    got = "OK" if r.status == 200 else body["error"]["code"]
                    self.assertEqual(got, want, body)
                    seen.add((method, want))
        # The matrix is not all one answer: some roles are refused and some served.
        self.assertIn(("ResolveApproval", "PERMISSION_DENIED"), seen)
        self.assertIn(("ResolveApproval", "NOT_FOUND"), seen)
        self.assertIn(("GetUsage", "OK"), seen)
