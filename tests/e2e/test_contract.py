"""The wire contract up front: every BudgetService and ContextService RPC exists, needs a
tenant key, and answers UNIMPLEMENTED (never a fake success) until it is implemented;
unknown methods are refused at once, not at the caller's deadline."""

import time

import grpc

import cgtest
from cgtest import budget_pb2, context_pb2

SERVICES = ((budget_pb2, "BudgetService"), (context_pb2, "ContextService"))

# RPCs built so far; every other one must still answer UNIMPLEMENTED.
IMPLEMENTED = {("BudgetService", m) for m in ("SetBudget", "GetBudget", "CheckBudget", "Reserve",
                                              "Commit", "Release", "RecordUsage", "CloseScope",
                                              "GetUsage", "ListScopes", "GetUsageHistory",
                                              "WatchUsage", "CreateNotificationChannel",
                                              "ListNotificationChannels",
                                              "DeleteNotificationChannel",
                                              "ListNotificationDeliveries",
                                              "RedriveNotificationDeliveries",
                                              "ResolveApproval", "GetApproval", "ListApprovals")}
IMPLEMENTED |= {("ContextService", m) for m in ("CountTokens", "Summarize", "Compress",
                                                "ValidateContext", "GetArtifact", "ListArtifacts",
                                                "GetHistory", "SearchHistory",
                                                "DeleteSession", "GetCompressionStats")}


def all_methods():
    """(package.Service, method, server_streaming) of every RPC in the generated descriptors."""
    out = []
    for module, service in SERVICES:
        pkg = module.DESCRIPTOR.package
        for name, client_streaming, server_streaming, _ in cgtest.service_methods(module, service):
            assert not client_streaming, f"{service}.{name}: client streaming is unexpected"
            out.append((f"{pkg}.{service}", name, server_streaming))
    return out


def call(ch, service, method, server_streaming, metadata, timeout=10):
    """Calls with an empty request (raw bytes); returns the result or raises RpcError."""
    path = f"/{service}/{method}"
    if server_streaming:
        return list(ch.unary_stream(path)(b"", metadata=metadata, timeout=timeout))
    return ch.unary_unary(path)(b"", metadata=metadata, timeout=timeout)


class Contract(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()
        tenant = cls.srv.create_tenant()
        cls.key = cls.srv.create_key(tenant.tenant_id).secret

    def test_discovery_finds_the_rpcs(self):
        names = {(s.rsplit(".", 1)[1], m) for s, m, _ in all_methods()}
        # A few known ones: the list comes from the descriptors, this only guards the
        # discovery itself.
        for known in (("BudgetService", "CheckBudget"), ("BudgetService", "WatchUsage"),
                      ("ContextService", "Compress"), ("ContextService", "CountTokens")):
            self.assertIn(known, names)
        self.assertGreaterEqual(len(names), 20)
        self.assertTrue(any(ss for _, _, ss in all_methods()), "WatchUsage streams")

    def test_every_rpc_with_a_tenant_key_is_unimplemented(self):
        md = cgtest.bearer(self.key)
        for service, method, ss in all_methods():
            if (service.rsplit(".", 1)[1], method) in IMPLEMENTED:
                continue
            with self.subTest(rpc=f"{service}/{method}"):
                err = self.assertRpcError(grpc.StatusCode.UNIMPLEMENTED, call, self.ch, service,
                                          method, ss, md, contains=method)
                self.assertIn("not implemented", err.details().lower())

    def test_implemented_rpcs_answer_an_empty_request_for_real(self):
        """No longer UNIMPLEMENTED, and a clear verdict on an empty request: a result or a
        caller error, never a server fault."""
        md = cgtest.bearer(self.key)
        names = {(s.rsplit(".", 1)[1], m): (s, ss) for s, m, ss in all_methods()}
        for key in sorted(IMPLEMENTED):
            service, ss = names[key]
            if ss:
                continue  # a stream on an empty request runs until its deadline: see below
            with self.subTest(rpc=f"{service}/{key[1]}"):
                try:
                    call(self.ch, service, key[1], ss, md)
                except grpc.RpcError as err:
                    self.assertIn(err.code(), (grpc.StatusCode.INVALID_ARGUMENT,
                                               grpc.StatusCode.NOT_FOUND,
                                               grpc.StatusCode.FAILED_PRECONDITION),
                                  f"{key[1]}: {err.code().name} {err.details()!r}")

    def test_every_rpc_without_a_key_is_unauthenticated(self):
        for service, method, ss in all_methods():
            with self.subTest(rpc=f"{service}/{method}"):
                self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, call, self.ch, service,
                                    method, ss, None, contains="authorization")

    def test_every_rpc_with_a_bad_key_is_unauthenticated(self):
        for service, method, ss in all_methods():
            with self.subTest(rpc=f"{service}/{method}"):
                self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, call, self.ch, service,
                                    method, ss, cgtest.bearer("cgk_nope"))

    def test_watch_usage_stream(self):
        # Through the generated stub: WatchUsage streams (a heartbeat on an idle tenant).
        stub = cgtest.budget_pb2_grpc.BudgetServiceStub(self.ch)
        it = stub.WatchUsage(budget_pb2.WatchUsageRequest(heartbeat_interval_ms=1000),
                             metadata=cgtest.bearer(self.key), timeout=10)
        first = next(it)
        self.assertEqual(first.type, budget_pb2.USAGE_EVENT_TYPE_HEARTBEAT)
        it.cancel()
        it = stub.WatchUsage(budget_pb2.WatchUsageRequest(), timeout=10)
        self.assertRpcError(grpc.StatusCode.UNAUTHENTICATED, list, it)

    def test_unknown_methods_are_unimplemented_at_once(self):
        ch = self.srv.channel()
        grpc.channel_ready_future(ch).result(timeout=10)
        cgtest.health_check(ch)  # the connection is up and warm
        report = []
        for path in ("/ctxguard.v1.Nope/Nothing", "/x/y", "/ctxguard.v1.BudgetService/Nope",
                     "/grpc.health.v1.Health/Nope"):
            times = []
            for _ in range(5):
                t0 = time.monotonic()
                err = cgtest.rpc_error(ch.unary_unary(path), b"", timeout=30,
                                       metadata=cgtest.bearer(self.key))
                times.append(time.monotonic() - t0)
                self.assertEqual(err.code(), grpc.StatusCode.UNIMPLEMENTED,
                                 f"{path}: {err.code().name} {err.details()!r}")
            report.append(f"{path}: " + ", ".join(f"{t * 1000:.1f}" for t in times) + " ms")
            with self.subTest(path=path):
                # The figure, on the median (2 noisy cores, tests in parallel); and
                # no single call anywhere near the 30 s deadline.
                self.assertLess(cgtest.median(times), 0.1, "\n".join(report))
                self.assertLess(max(times), 1.0, "\n".join(report))
        print("\n  " + "\n  ".join(report))

    def test_unknown_method_stream_is_unimplemented(self):
        t0 = time.monotonic()
        err = cgtest.rpc_error(lambda: list(self.ch.unary_stream("/ctxguard.v1.Nope/Stream")(
            b"", timeout=30)))
        elapsed = time.monotonic() - t0
        self.assertEqual(err.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertLess(elapsed, 1.0)


class Compression(cgtest.TestCase):
    """A gzip-compressed request is read whole: the server decompresses, never truncates."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()

    def test_gzip_request_round_trips(self):
        from cgtest import admin_pb2
        payload = b"abcdefgh" * 6000  # 48 KB that compresses to very little
        ping = self.ch.unary_unary("/ctxguard.v1.AdminService/Ping",
                                   request_serializer=admin_pb2.PingRequest.SerializeToString,
                                   response_deserializer=admin_pb2.PingResponse.FromString)
        resp = ping(admin_pb2.PingRequest(payload=payload), metadata=self.srv.admin_md(),
                    timeout=10, compression=grpc.Compression.Gzip)
        self.assertEqual(resp.payload, payload)


if __name__ == "__main__":
    import unittest
    unittest.main()
