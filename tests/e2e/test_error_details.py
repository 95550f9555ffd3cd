"""Machine-readable errors end to end: every error reply carries `grpc-status-details-bin`, a
google.rpc.Status {code, message, details} whose details are an ErrorInfo (reason, domain
"ctxguard", metadata), a BadRequest for invalid arguments and a RetryInfo where retrying
later helps (proto/ctxguard/v1/errors.proto, README "Errors").

The google.rpc messages are read with plain grpcio + protobuf, not with anything of ours:
a descriptor set of the Debian package's google/rpc/status.proto and error_details.proto,
made by the system protoc and loaded into a private pool (cgtest.DynamicPool)."""

import json
import os
import subprocess
import tempfile
import time
import uuid

import grpc
from google.protobuf import descriptor_pb2

import cgtest
from cgtest import admin_pb2, admin_pb2_grpc, budget_pb2, budget_pb2_grpc, common_pb2
from cgtest import context_pb2, context_pb2_grpc

B = budget_pb2
C = context_pb2
GOOGLEAPIS_DIR = "/usr/share/gocode/src/github.com/gogo/googleapis"
DETAILS_KEY = "grpc-status-details-bin"


def _google_rpc_pool():
    if not os.path.exists(os.path.join(GOOGLEAPIS_DIR, "google/rpc/error_details.proto")):
        raise AssertionError(f"{GOOGLEAPIS_DIR}/google/rpc is missing: "
                             "apt-get install golang-github-gogo-googleapis-dev")
    with tempfile.TemporaryDirectory() as tmp:
        desc = os.path.join(tmp, "google_rpc.desc")
        subprocess.run(["protoc", "-I", GOOGLEAPIS_DIR, "-I", "/usr/include", "--include_imports",
                        f"--descriptor_set_out={desc}", "google/rpc/status.proto",
                        "google/rpc/error_details.proto"], check=True)
        with open(desc, "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read()).file
    return cgtest.DynamicPool(files)


_RPC = _google_rpc_pool()
Status = _RPC.message("google.rpc.Status")
DETAIL_TYPES = {name: _RPC.message(name) for name in
                ("google.rpc.ErrorInfo", "google.rpc.BadRequest", "google.rpc.RetryInfo")}


class Details:
    """What an error's grpc-status-details-bin says, decoded."""

    def __init__(self, err):
        md = dict(err.trailing_metadata() or ())
        if DETAILS_KEY not in md:
            raise AssertionError(f"no {DETAILS_KEY} in the trailers of {err.code().name}: "
                                 f"{err.details()!r} ({sorted(md)})")
        self.status = Status.FromString(md[DETAILS_KEY])
        self.by_type = {}
        for any_msg in self.status.details:
            prefix, _, name = any_msg.type_url.rpartition("/")
            if prefix != "type.googleapis.com" or name not in DETAIL_TYPES:
                raise AssertionError(f"unexpected detail type {any_msg.type_url}")
            if name in self.by_type:
                raise AssertionError(f"{name} twice")
            self.by_type[name] = DETAIL_TYPES[name].FromString(any_msg.value)
        self.info = self.by_type.get("google.rpc.ErrorInfo")
        self.bad_request = self.by_type.get("google.rpc.BadRequest")
        self.retry = self.by_type.get("google.rpc.RetryInfo")


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class ErrorDetails(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_MAX_MESSAGE_BYTES": "65536"})
        cls.ch = cls.srv.channel()
        tenant = cls.srv.create_tenant()
        cls.key = cls.srv.create_key(tenant.tenant_id).secret
        cls.md = cgtest.bearer(cls.key)
        cls.budget = budget_pb2_grpc.BudgetServiceStub(cls.ch)
        cls.context = context_pb2_grpc.ContextServiceStub(cls.ch)
        cls.admin = admin_pb2_grpc.AdminServiceStub(cls.ch)

    def details(self, code, fn, *args, reason, info=None, field=None, retry_ms=None,
                contains=(), **kw):
        """fn(*args, **kw) must fail with code; its details must say reason, hold info (a
        subset of ErrorInfo.metadata), the FieldViolation of field (when INVALID_ARGUMENT or
        OUT_OF_RANGE; none otherwise), RetryInfo of retry_ms (None: no RetryInfo) and the same message as
        grpc-message. Returns the decoded Details."""
        err = self.assertRpcError(code, fn, *args, contains=contains, **kw)
        d = Details(err)
        self.assertEqual(d.status.code, code.value[0])
        self.assertEqual(d.status.message, err.details(), "message == grpc-message")
        self.assertIsNotNone(d.info, "always an ErrorInfo")
        self.assertEqual(d.info.domain, "ctxguard")
        self.assertEqual(d.info.reason, reason, f"reason of {err.details()!r}")
        for k, v in (info or {}).items():
            self.assertIn(k, d.info.metadata, f"metadata of {err.details()!r}")
            self.assertEqual(d.info.metadata[k], str(v), f"metadata {k}")
        if field is not None:
            self.assertEqual(d.info.metadata["field"], field)
        if field is not None and code in (grpc.StatusCode.INVALID_ARGUMENT,
                                          grpc.StatusCode.OUT_OF_RANGE):
            self.assertIsNotNone(d.bad_request, "a BadRequest names the field")
            self.assertEqual(len(d.bad_request.field_violations), 1)
            self.assertEqual(d.bad_request.field_violations[0].field, field)
            self.assertEqual(d.bad_request.field_violations[0].description, err.details())
        elif code != grpc.StatusCode.INVALID_ARGUMENT:
            self.assertIsNone(d.bad_request, "a BadRequest only for a bad argument")
        if retry_ms is None:
            self.assertIsNone(d.retry, f"no RetryInfo on {reason}")
        else:
            self.assertIsNotNone(d.retry, f"RetryInfo on {reason}")
            delay = d.retry.retry_delay.seconds * 1000 + d.retry.retry_delay.nanos // 1000000
            self.assertEqual(delay, retry_ms)
        return d

    def new_session(self, limit=1000):
        s = "err-" + uuid.uuid4().hex[:8]
        self.budget.SetBudget(B.SetBudgetRequest(
            scope=scope(s), settings=B.BudgetSettings(limit_tokens=limit,
                                                      mode=B.BUDGET_MODE_HARD)),
            metadata=self.md, timeout=10)
        return s

    # -- BudgetService

    def test_hard_budget_refusal_carries_the_figures(self):
        s = self.new_session(1000)
        self.budget.RecordUsage(B.RecordUsageRequest(
            scope=scope(s), usage=common_pb2.TokenUsage(input_tokens=300),
            idempotency_key="u-" + s), metadata=self.md, timeout=10)
        self.budget.Reserve(B.ReserveRequest(scope=scope(s), tokens=200), metadata=self.md,
                            timeout=10)
        d = self.details(grpc.StatusCode.RESOURCE_EXHAUSTED, self.budget.Reserve,
                         B.ReserveRequest(scope=scope(s), tokens=600), metadata=self.md,
                         timeout=10, reason="BUDGET_EXHAUSTED",
                         info={"scope": s, "level": "session", "limit_tokens": 1000,
                                   "used_tokens": 300, "reserved_tokens": 200,
                                   "requested_tokens": 600, "compress_to_tokens": 500},
                         contains=("HARD token limit",))
        self.assertNotIn("field", d.info.metadata)
        # With 100 of the request's tokens its expected output, the prompt must fit in 400.
        d = self.details(grpc.StatusCode.RESOURCE_EXHAUSTED, self.budget.Reserve,
                         B.ReserveRequest(scope=scope(s), tokens=600,
                                          estimated_output_tokens=100),
                         metadata=self.md, timeout=10, reason="BUDGET_EXHAUSTED",
                         info={"compress_to_tokens": 400})

    def test_a_refused_request_learns_what_to_compress_to(self):
        """Issue 16 item 6, as an orchestrator uses it: CheckBudget refuses a prompt a HARD
        limit cannot take and says the size that fits; Compress with that target_tokens
        makes it fit; the second CheckBudget allows it and Reserve holds it."""
        s = self.new_session(3000)
        msgs = [{"role": "system", "content": "You are a build assistant."}]
        for i in range(30):
            msgs.append({"role": "user", "content": f"Step {i}: " + "check the logs. " * 20})
            msgs.append({"role": "assistant", "content": f"Done {i}: " + "all fine here. " * 20})
        conv = common_pb2.Conversation(openai_json=json.dumps({"messages": msgs}))
        count = self.context.CountTokens(C.CountTokensRequest(conversation=conv, model="gpt-4o"),
                                         metadata=self.md, timeout=10).total_tokens
        self.assertGreater(count, 3000)
        ask = B.CheckBudgetRequest(scope=scope(s), estimated_tokens=count + 500,
                                   estimated_output_tokens=500, model="gpt-4o")
        r = self.budget.CheckBudget(ask, metadata=self.md, timeout=10)
        self.assertEqual(r.decision, B.DECISION_DENY)
        self.assertEqual(r.compress_to_tokens, 3000 - 500)
        done = self.context.Compress(C.CompressRequest(
            conversation=conv, model="gpt-4o",
            policy=C.CompressionPolicy(target_tokens=r.compress_to_tokens)),
            metadata=self.md, timeout=60)
        self.assertTrue(done.report.triggered)
        self.assertLessEqual(done.report.tokens_after, r.compress_to_tokens)
        self.assertEqual(done.report.effective_policy.target_tokens, r.compress_to_tokens)
        again = self.budget.CheckBudget(B.CheckBudgetRequest(
            scope=scope(s), estimated_tokens=done.report.tokens_after + 500,
            estimated_output_tokens=500, model="gpt-4o"), metadata=self.md, timeout=10)
        self.assertNotEqual(again.decision, B.DECISION_DENY)
        self.assertEqual(again.compress_to_tokens, 0)
        self.budget.Reserve(B.ReserveRequest(scope=scope(s),
                                             tokens=done.report.tokens_after + 500),
                            metadata=self.md, timeout=10)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.context.Compress,
                            C.CompressRequest(conversation=conv, model="gpt-4o",
                                              policy=C.CompressionPolicy(target_tokens=-5)),
                            metadata=self.md, timeout=10, contains=("policy.target_tokens",))

    def test_hard_refusal_at_an_agent_names_its_path(self):
        s = self.new_session(1000)
        agent = scope(s, "t1", "a1")
        self.budget.SetBudget(B.SetBudgetRequest(
            scope=scope(s, "t1"), settings=B.BudgetSettings(limit_tokens=1000)),
            metadata=self.md, timeout=10)
        self.budget.SetBudget(B.SetBudgetRequest(
            scope=agent, settings=B.BudgetSettings(limit_tokens=100, mode=B.BUDGET_MODE_HARD)),
            metadata=self.md, timeout=10)
        self.details(grpc.StatusCode.RESOURCE_EXHAUSTED, self.budget.Reserve,
                     B.ReserveRequest(scope=agent, tokens=101), metadata=self.md, timeout=10,
                     reason="BUDGET_EXHAUSTED",
                     info={"scope": f"{s}/t1/a1", "level": "agent", "limit_tokens": 100,
                               "requested_tokens": 101})

    def test_unknown_scope(self):
        self.details(grpc.StatusCode.NOT_FOUND, self.budget.GetUsage,
                     B.GetUsageRequest(scope=scope("nope-" + uuid.uuid4().hex[:8])),
                     metadata=self.md, timeout=10, reason="SCOPE_NOT_FOUND",
                     field="scope.session_id")

    def test_unknown_and_expired_reservations(self):
        rid = str(uuid.uuid4())
        self.details(grpc.StatusCode.NOT_FOUND, self.budget.Commit,
                     B.CommitRequest(reservation_id=rid,
                                     usage=common_pb2.TokenUsage(input_tokens=1)),
                     metadata=self.md, timeout=10, reason="RESERVATION_NOT_FOUND",
                     info={"reservation_id": rid})
        s = self.new_session(1000)
        res = self.budget.Reserve(B.ReserveRequest(scope=scope(s), tokens=10, ttl_ms=1000),
                                  metadata=self.md, timeout=10).reservation
        time.sleep(1.5)
        self.details(grpc.StatusCode.FAILED_PRECONDITION, self.budget.Commit,
                     B.CommitRequest(reservation_id=res.reservation_id,
                                     usage=common_pb2.TokenUsage(input_tokens=5)),
                     metadata=self.md, timeout=10, reason="RESERVATION_EXPIRED",
                     info={"reservation_id": res.reservation_id}, contains=("expired",))

    def test_bad_field_names_it_in_a_field_violation(self):
        s = self.new_session(1000)
        self.details(grpc.StatusCode.INVALID_ARGUMENT, self.budget.RecordUsage,
                     B.RecordUsageRequest(scope=scope(s),
                                          usage=common_pb2.TokenUsage(input_tokens=-5),
                                          idempotency_key="neg-" + s),
                     metadata=self.md, timeout=10, reason="INVALID_ARGUMENT",
                     field="usage.input_tokens")
        self.details(grpc.StatusCode.INVALID_ARGUMENT, self.budget.Commit, B.CommitRequest(),
                     metadata=self.md, timeout=10, reason="INVALID_ARGUMENT",
                     field="reservation_id")

    def test_closed_scope_and_reused_idempotency_key(self):
        s = self.new_session(1000)
        self.budget.RecordUsage(B.RecordUsageRequest(
            scope=scope(s), usage=common_pb2.TokenUsage(input_tokens=1),
            idempotency_key="k-" + s), metadata=self.md, timeout=10)
        self.details(grpc.StatusCode.ALREADY_EXISTS, self.budget.RecordUsage,
                     B.RecordUsageRequest(scope=scope(s),
                                          usage=common_pb2.TokenUsage(input_tokens=2),
                                          idempotency_key="k-" + s),
                     metadata=self.md, timeout=10, reason="IDEMPOTENCY_KEY_REUSED",
                     field="idempotency_key",
                     info={"idempotency_key": "k-" + s, "first_scope": s},
                     contains=(f"first used for session {s} at", "other usage"))
        self.budget.CloseScope(B.CloseScopeRequest(scope=scope(s)), metadata=self.md, timeout=10)
        self.details(grpc.StatusCode.FAILED_PRECONDITION, self.budget.Reserve,
                     B.ReserveRequest(scope=scope(s), tokens=1), metadata=self.md, timeout=10,
                     reason="SCOPE_CLOSED", info={"scope": s, "level": "session"},
                     contains=("closed",))

    def test_version_mismatch(self):
        s = self.new_session(1000)
        self.details(grpc.StatusCode.ABORTED, self.budget.SetBudget, B.SetBudgetRequest(
            scope=scope(s), settings=B.BudgetSettings(limit_tokens=500), expected_version=99),
            metadata=self.md, timeout=10, reason="VERSION_MISMATCH",
            info={"expected_version": 99, "stored_version": 1}, field="expected_version")

    def test_watch_stream_error(self):
        approval = str(uuid.uuid4())
        self.details(grpc.StatusCode.NOT_FOUND, lambda: list(self.budget.WatchUsage(
            B.WatchUsageRequest(approval_id=approval), metadata=self.md, timeout=10)),
            reason="APPROVAL_NOT_FOUND", info={"approval_id": approval})

    # -- authentication, methods, sizes

    def test_unauthenticated(self):
        for md in ((), cgtest.bearer("cgk_not_a_real_key"), (("authorization", "Basic x"),)):
            with self.subTest(md=md):
                self.details(grpc.StatusCode.UNAUTHENTICATED, self.budget.GetBudget,
                             B.GetBudgetRequest(scope=scope("x")), metadata=md, timeout=10,
                             reason="UNAUTHENTICATED")

    def test_wrong_key_kind(self):
        self.details(grpc.StatusCode.PERMISSION_DENIED, self.admin.ListTenants,
                     admin_pb2.ListTenantsRequest(), metadata=self.md, timeout=10,
                     reason="PERMISSION_DENIED", info={"required_key": "admin"})
        self.details(grpc.StatusCode.PERMISSION_DENIED, self.budget.GetBudget,
                     B.GetBudgetRequest(scope=scope("x")), metadata=self.srv.admin_md(),
                     timeout=10, reason="PERMISSION_DENIED", info={"required_key": "tenant"})

    def test_too_large_message(self):
        self.details(grpc.StatusCode.RESOURCE_EXHAUSTED, self.admin.Ping,
                     admin_pb2.PingRequest(payload=b"x" * 100_000), metadata=self.srv.admin_md(),
                     timeout=10, reason="MESSAGE_TOO_LARGE", contains=("larger",))

    def test_unknown_method(self):
        method = "/ctxguard.v1.BudgetService/NoSuchMethod"
        self.details(grpc.StatusCode.UNIMPLEMENTED, cgtest.raw_unary(self.ch, method), b"",
                     timeout=10, reason="UNIMPLEMENTED", info={"method": method})

    # -- AdminService, ContextService, health

    def test_admin_error(self):
        self.details(grpc.StatusCode.NOT_FOUND, self.admin.GetTenant,
                     admin_pb2.GetTenantRequest(tenant_id=str(uuid.uuid4())),
                     metadata=self.srv.admin_md(), timeout=10, reason="TENANT_NOT_FOUND",
                     field="tenant_id")
        self.details(grpc.StatusCode.INVALID_ARGUMENT, self.admin.CreateTenant,
                     admin_pb2.CreateTenantRequest(), metadata=self.srv.admin_md(), timeout=10,
                     reason="INVALID_ARGUMENT", field="name")

    def test_context_service_errors(self):
        self.details(grpc.StatusCode.NOT_FOUND, self.context.GetArtifact,
                     C.GetArtifactRequest(artifact_id="art_nope"), metadata=self.md, timeout=10,
                     reason="ARTIFACT_NOT_FOUND", info={"artifact_id": "art_nope"})
        conv = common_pb2.Conversation(messages=common_pb2.MessageList(messages=[
            common_pb2.Message(role=common_pb2.ROLE_USER,
                               parts=[common_pb2.MessagePart(text="hello")])]))
        self.details(grpc.StatusCode.FAILED_PRECONDITION, self.context.Summarize,
                     C.SummarizeRequest(conversation=conv, summarizer=C.SUMMARIZER_KIND_LLM),
                     metadata=self.md, timeout=10, reason="LLM_NOT_CONFIGURED",
                     field="summarizer")

    def test_conversation_field_path(self):
        result = common_pb2.ToolResult(content="42")  # tool_call_id is required
        conv = common_pb2.Conversation(messages=common_pb2.MessageList(messages=[
            common_pb2.Message(role=common_pb2.ROLE_USER,
                               parts=[common_pb2.MessagePart(text="hi")]),
            common_pb2.Message(role=common_pb2.ROLE_TOOL,
                               parts=[common_pb2.MessagePart(tool_result=result)])]))
        d = self.details(grpc.StatusCode.INVALID_ARGUMENT, self.context.CountTokens,
                         C.CountTokensRequest(conversation=conv, model="gpt-4o"),
                         metadata=self.md, timeout=10, reason="INVALID_ARGUMENT")
        self.assertRegex(d.info.metadata["field"],
                         r"^(conversation\.)?messages\[1\]\.parts\[0\]\.tool_result\.tool_call_id$")
        self.assertEqual(d.bad_request.field_violations[0].field, d.info.metadata["field"])

    def test_health_unknown_service(self):
        self.details(grpc.StatusCode.NOT_FOUND, cgtest.health_check, self.ch,
                     "no.such.Service", reason="SERVICE_NOT_FOUND")

    def test_success_has_no_details(self):
        call = self.admin.Ping.with_call(admin_pb2.PingRequest(payload=b"ok"),
                                         metadata=self.srv.admin_md(), timeout=10)
        self.assertNotIn(DETAILS_KEY, dict(call[1].trailing_metadata() or ()))


class StoreDown(cgtest.TestCase):
    def test_store_unavailable_says_when_to_retry(self):
        host, port = cgtest.dsn_host_port(cgtest.pg_dsn())
        proxy = cgtest.TcpProxy(host, port)
        self.addCleanup(proxy.close)
        dsn = cgtest.dsn_with_host_port(cgtest.pg_dsn(), "127.0.0.1", proxy.port)
        srv = cgtest.start_server(self, pg=dsn, env={"CTXGUARD_PG_CONNECT_TIMEOUT_MS": "500",
                                                     "CTXGUARD_HEALTH_INTERVAL_MS": "100"})
        ch = srv.channel()
        admin = admin_pb2_grpc.AdminServiceStub(ch)
        tenant = srv.create_tenant()
        md = cgtest.bearer(srv.create_key(tenant.tenant_id).secret)
        budget = budget_pb2_grpc.BudgetServiceStub(ch)
        budget.SetBudget(B.SetBudgetRequest(scope=scope("down"),
                                            settings=B.BudgetSettings(limit_tokens=100)),
                         metadata=md, timeout=10)
        proxy.cut()
        err = cgtest.rpc_error(admin.GetTenant, admin_pb2.GetTenantRequest(
            tenant_id=tenant.tenant_id), metadata=srv.admin_md(), timeout=10)
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        d = Details(err)
        self.assertEqual(d.info.reason, "STORE_UNAVAILABLE")
        self.assertEqual(d.status.message, err.details())
        self.assertIsNotNone(d.retry)
        self.assertEqual((d.retry.retry_delay.seconds, d.retry.retry_delay.nanos), (1, 0))
        # A budget write too: Reserve always goes to PostgreSQL.
        err = cgtest.rpc_error(budget.Reserve, B.ReserveRequest(scope=scope("down"), tokens=1),
                               metadata=md, timeout=10)
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE, err.details())
        self.assertEqual(Details(err).info.reason, "STORE_UNAVAILABLE")
        proxy.restore()


if __name__ == "__main__":
    import unittest
    unittest.main()
