"""Error mapping of the typed errors, both ways the server may answer:
- with a google.rpc.Status in `grpc-status-details-bin` (ErrorInfo, BadRequest, RetryInfo),
  encoded here with the genuine google.rpc messages (package google.rpc, built from the
  Debian protos into a private pool: not the package's renamed copies), sent through a real
  gRPC round trip by an in-process grpcio server that answers every call with that status;
- without details (the status code and message alone).
The ctxguard server's own answers are covered in test_client; this pins the decoding."""

import asyncio
import os
import subprocess
import tempfile
import unittest
from concurrent import futures

import grpc
from google.protobuf import descriptor_pb2

import sdkenv
from sdkenv import cgtest, ctxguard, gen

GOOGLEAPIS = gen.find_googleapis_dir()


def google_rpc():
    """google.rpc.Status / ErrorInfo / BadRequest / RetryInfo from the real protos."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rpc.desc")
        subprocess.run(["protoc", "-I", GOOGLEAPIS, "--include_imports",
                        f"--descriptor_set_out={out}", "google/rpc/status.proto",
                        "google/rpc/error_details.proto"], check=True)
        with open(out, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = cgtest.DynamicPool(fds.file)
    return {n: pool.message(f"google.rpc.{n}")
            for n in ("Status", "ErrorInfo", "BadRequest", "RetryInfo")}


def pack_into(status, msg):
    a = status.details.add()  # google.protobuf.Any of the private pool
    a.type_url = "type.googleapis.com/" + msg.DESCRIPTOR.full_name
    a.value = msg.SerializeToString()


class FixedStatusServer:
    """An in-process grpcio server answering every method with one status (and details)."""

    def __init__(self, code, message, details_bin=None):
        def handler(request, context):
            if details_bin is not None:
                context.set_trailing_metadata((("grpc-status-details-bin", details_bin),))
            context.abort(code, message)

        class Generic(grpc.GenericRpcHandler):
            def service(self, call_details):
                return grpc.unary_unary_rpc_method_handler(handler)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((Generic(),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def close(self):
        self.server.stop(0)


class DetailsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if GOOGLEAPIS is None:
            raise AssertionError("google/rpc/status.proto not found: apt-get install "
                                 "golang-github-gogo-googleapis-dev (scripts/deps.sh build)")
        cls.M = google_rpc()
        if ctxguard._stubs.status_pb2 is None:
            raise AssertionError("the package was generated without google/rpc stubs")

    def status(self, code, message, reason, metadata=None, violations=(), retry_s=None):
        M = self.M
        st = M["Status"](code=code.value[0], message=message)
        info = M["ErrorInfo"](reason=reason, domain="ctxguard")
        for k, v in (metadata or {}).items():
            info.metadata[k] = v
        pack_into(st, info)
        if violations:
            br = M["BadRequest"]()
            for f, d in violations:
                br.field_violations.add(field=f, description=d)
            pack_into(st, br)
        if retry_s is not None:
            ri = M["RetryInfo"]()
            ri.retry_delay.seconds = int(retry_s)
            ri.retry_delay.nanos = int(retry_s % 1 * 1e9)
            pack_into(st, ri)
        return st.SerializeToString()

    def call(self, code, message, details, method="Reserve", **kw):
        srv = FixedStatusServer(code, message, details)
        self.addCleanup(srv.close)
        c = ctxguard.Client(f"127.0.0.1:{srv.port}", api_key="k", timeout=5)
        self.addCleanup(c.close)
        with self.assertRaises(ctxguard.CtxguardError) as cm:
            c.call(method, **kw)
        return cm.exception

    def test_reason_decides_the_class(self):
        d = self.status(grpc.StatusCode.RESOURCE_EXHAUSTED, "task: 9,800 + 400 > 10,000",
                        "BUDGET_EXHAUSTED", {"level": "TASK", "limit_tokens": "10000"})
        e = self.call(grpc.StatusCode.RESOURCE_EXHAUSTED, "task: 9,800 + 400 > 10,000", d,
                      scope="s/t", tokens=400)
        self.assertIsInstance(e, ctxguard.BudgetExhausted)
        self.assertEqual(e.reason, "BUDGET_EXHAUSTED")
        self.assertEqual(e.metadata, {"level": "TASK", "limit_tokens": "10000"})
        self.assertTrue(e.has_details)
        self.assertEqual(e.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        # The reason wins over the code: a NOT_FOUND that is about a reservation.
        d = self.status(grpc.StatusCode.NOT_FOUND, "no such reservation",
                        "RESERVATION_NOT_FOUND")
        e = self.call(grpc.StatusCode.NOT_FOUND, "no such reservation", d, method="GetUsage")
        self.assertIsInstance(e, ctxguard.ReservationNotFound)
        d = self.status(grpc.StatusCode.UNAVAILABLE, "PostgreSQL down", "STORE_UNAVAILABLE",
                        retry_s=0.25)
        e = self.call(grpc.StatusCode.UNAVAILABLE, "PostgreSQL down", d, method="Summarize")
        self.assertIsInstance(e, ctxguard.Unavailable)
        self.assertAlmostEqual(e.retry_delay, 0.25)

    def test_bad_request_gives_the_field(self):
        d = self.status(grpc.StatusCode.INVALID_ARGUMENT, "tokens must be 1..100000000",
                        "INVALID_ARGUMENT", violations=[("tokens", "must be 1..100000000")])
        e = self.call(grpc.StatusCode.INVALID_ARGUMENT, "tokens must be 1..100000000", d)
        self.assertIsInstance(e, ctxguard.InvalidArgument)
        self.assertEqual(e.field, "tokens")
        self.assertEqual(e.field_violations, [("tokens", "must be 1..100000000")])

    def test_async_client_decodes_too(self):
        d = self.status(grpc.StatusCode.NOT_FOUND, "scope.task_id: unknown", "SCOPE_NOT_FOUND",
                        {"field": "scope.task_id"})
        srv = FixedStatusServer(grpc.StatusCode.NOT_FOUND, "scope.task_id: unknown", d)
        self.addCleanup(srv.close)

        async def main():
            async with ctxguard.AsyncClient(f"127.0.0.1:{srv.port}", api_key="k",
                                            timeout=5) as c:
                try:
                    await c.get_usage("s/t")
                except ctxguard.CtxguardError as e:
                    return e
            return None

        e = asyncio.run(main())
        self.assertIsInstance(e, ctxguard.ScopeNotFound)
        self.assertEqual(e.metadata["field"], "scope.task_id")
        self.assertEqual(e.field, "scope.task_id")  # no BadRequest: ErrorInfo's `field`


class FallbackTest(unittest.TestCase):
    """No details: the class follows the code (and the method), the field the message."""

    def call(self, code, message, method, **kw):
        srv = FixedStatusServer(code, message)
        self.addCleanup(srv.close)
        c = ctxguard.Client(f"127.0.0.1:{srv.port}", api_key="k", timeout=5)
        self.addCleanup(c.close)
        with self.assertRaises(ctxguard.CtxguardError) as cm:
            c.call(method, **kw)
        self.assertFalse(cm.exception.has_details)
        return cm.exception

    def test_by_code(self):
        e = self.call(grpc.StatusCode.RESOURCE_EXHAUSTED, "task: 9,800 + 400 > 10,000 tokens",
                      "Reserve", scope="s/t", tokens=400)
        self.assertIsInstance(e, ctxguard.BudgetExhausted)
        self.assertEqual(e.reason, "BUDGET_EXHAUSTED")
        e = self.call(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      "request of 9000000 bytes is over max_message_bytes", "CountTokens")
        self.assertIsInstance(e, ctxguard.MessageTooLarge)
        e = self.call(grpc.StatusCode.NOT_FOUND, "scope.session_id: no such session",
                      "GetUsage", scope="s")
        self.assertIsInstance(e, ctxguard.ScopeNotFound)
        e = self.call(grpc.StatusCode.NOT_FOUND, "no such approval", "GetApproval",
                      approval_id="x")
        self.assertIsInstance(e, ctxguard.ApprovalNotFound)
        e = self.call(grpc.StatusCode.INVALID_ARGUMENT, "field 'settings' is required",
                      "SetBudget", scope="s")
        self.assertIsInstance(e, ctxguard.InvalidArgument)
        self.assertEqual(e.field, "settings")
        e = self.call(grpc.StatusCode.INVALID_ARGUMENT,
                      "conversation.openai_json: $.messages[3].role: unknown role \"bot\"",
                      "CountTokens")
        self.assertEqual(e.field, "conversation.openai_json")
        e = self.call(grpc.StatusCode.PERMISSION_DENIED, "admin key", "GetUsage")
        self.assertIsInstance(e, ctxguard.PermissionDenied)

    def test_unavailable_is_retried_only_when_safe(self):
        hits = []

        def handler_for(method):
            def handler(request, context):
                hits.append(method)
                context.abort(grpc.StatusCode.UNAVAILABLE, "down")
            return handler

        class Generic(grpc.GenericRpcHandler):
            def service(self, call_details):
                return grpc.unary_unary_rpc_method_handler(handler_for(call_details.method))

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers((Generic(),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, 0)
        c = ctxguard.Client(f"127.0.0.1:{port}", api_key="k", timeout=3,
                            retry=ctxguard.RetryPolicy(max_attempts=3, initial_backoff=0.01))
        self.addCleanup(c.close)
        with self.assertRaises(ctxguard.Unavailable):
            c.get_usage("s")
        self.assertEqual(len(hits), 3)  # a read: retried
        hits.clear()
        with self.assertRaises(ctxguard.Unavailable):
            c.summarize([{"role": "user", "content": "hi"}])
        self.assertEqual(len(hits), 1)  # may call an LLM: not retried
        hits.clear()
        with self.assertRaises(ctxguard.Unavailable):
            c.set_budget("s", 10, expected_version=3)
        self.assertEqual(len(hits), 1)  # conditional write: not retried
        hits.clear()
        with self.assertRaises(ctxguard.Unavailable):
            c.record_usage("s", {"input_tokens": 1})  # a generated idempotency key
        self.assertEqual(len(hits), 3)


if __name__ == "__main__":
    unittest.main()
