"""Server reflection: a generic tool lists the services and calls them with nothing but
what reflection told it (no generated code for the calls)."""

import grpc
from google.protobuf import descriptor_pb2

import cgtest

EXPECTED_SERVICES = {
    "ctxguard.v1.AdminService",
    "ctxguard.v1.BudgetService",
    "ctxguard.v1.ContextService",
    "grpc.health.v1.Health",
}


def fetch_files(ch, version, symbol):
    """FileDescriptorProtos for `symbol` and everything it imports, asking by file name
    for any import the first answer left out."""
    ns = getattr(cgtest.reflection, version)
    # The first answer is the one to this request (test_one_answer_per_request checks that
    # there are no others).
    a = cgtest.reflection_call(ch, version, [ns.Request(file_containing_symbol=symbol)])[0]
    if a.WhichOneof("message_response") != "file_descriptor_response":
        raise AssertionError(f"file_containing_symbol({symbol}) answered {a}")
    files = {}
    for raw in a.file_descriptor_response.file_descriptor_proto:
        fp = descriptor_pb2.FileDescriptorProto.FromString(raw)
        files[fp.name] = fp
    while True:
        missing = sorted({d for fp in files.values() for d in fp.dependency} - set(files))
        if not missing:
            return files
        answers = cgtest.reflection_call(ch, version, [ns.Request(file_by_filename=m)
                                                       for m in missing])
        for m, a in zip(missing, answers):
            if a.WhichOneof("message_response") != "file_descriptor_response":
                raise AssertionError(f"file_by_filename({m}) answered {a}")
            for raw in a.file_descriptor_response.file_descriptor_proto:
                fp = descriptor_pb2.FileDescriptorProto.FromString(raw)
                files[fp.name] = fp


def fresh_pool(files):
    """A new DynamicPool with the files added in dependency order."""
    dp = cgtest.DynamicPool()
    added = set()

    def add(name):
        if name in added:
            return
        for d in files[name].dependency:
            add(d)
        dp.pool.Add(files[name])
        added.add(name)

    for name in sorted(files):
        add(name)
    return dp


def generic_unary(ch, dp, service, method, request_fields, **kw):
    """Calls service/method with request classes built from the pool only."""
    sd = dp.pool.FindServiceByName(service)
    md = sd.methods_by_name[method]
    req_cls = dp.message(md.input_type.full_name)
    resp_cls = dp.message(md.output_type.full_name)
    call = ch.unary_unary(f"/{sd.full_name}/{md.name}",
                          request_serializer=req_cls.SerializeToString,
                          response_deserializer=resp_cls.FromString)
    return call(req_cls(**request_fields), timeout=10, **kw)


class Reflection(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()

    def list_services(self, version):
        ns = getattr(cgtest.reflection, version)
        answers = cgtest.reflection_call(self.ch, version, [ns.Request(list_services="")])
        self.assertGreaterEqual(len(answers), 1)
        self.assertEqual(answers[0].WhichOneof("message_response"), "list_services_response",
                         str(answers[0]))
        return {s.name for s in answers[0].list_services_response.service}

    def test_v1_lists_every_service(self):
        names = self.list_services("v1")
        self.assertTrue(EXPECTED_SERVICES <= names, f"listed: {sorted(names)}")
        self.assertIn("grpc.reflection.v1.ServerReflection", names)

    def test_v1alpha_lists_every_service(self):
        names = self.list_services("v1alpha")
        self.assertTrue(EXPECTED_SERVICES <= names, f"listed: {sorted(names)}")

    def test_listed_services_all_resolve(self):
        # Every listed service can be resolved to its file (what grpcurl describe does).
        for name in sorted(self.list_services("v1")):
            with self.subTest(service=name):
                files = fetch_files(self.ch, "v1", name)
                dp = fresh_pool(files)
                self.assertEqual(dp.pool.FindServiceByName(name).full_name, name)

    def test_one_answer_per_request(self):
        # A reflection stream answers each request exactly once, in order, and ends when
        # the client half-closes (no extra answer at the end).
        for version in ("v1", "v1alpha"):
            ns = getattr(cgtest.reflection, version)
            for n in (1, 2, 3):
                with self.subTest(version=version, requests=n):
                    reqs = [ns.Request(list_services=""),
                            ns.Request(file_containing_symbol="ctxguard.v1.AdminService"),
                            ns.Request(file_by_filename="ctxguard/v1/common.proto")][:n]
                    answers = cgtest.reflection_call(self.ch, version, reqs)
                    kinds = [a.WhichOneof("message_response") for a in answers]
                    self.assertEqual(len(answers), n, f"{n} requests got {len(answers)} "
                                     f"answers: {kinds}")
                    for req, a in zip(reqs, answers):
                        self.assertEqual(a.original_request, req)

    def test_file_containing_symbol_brings_its_imports(self):
        # budget.proto imports common.proto: one answer carries both (as grpcurl expects).
        for version in ("v1", "v1alpha"):
            ns = getattr(cgtest.reflection, version)
            with self.subTest(version=version):
                a = cgtest.reflection_call(
                    self.ch, version,
                    [ns.Request(file_containing_symbol="ctxguard.v1.BudgetService")])[0]
                names = [descriptor_pb2.FileDescriptorProto.FromString(raw).name
                         for raw in a.file_descriptor_response.file_descriptor_proto]
                self.assertIn("ctxguard/v1/budget.proto", names)
                self.assertIn("ctxguard/v1/common.proto", names)
                dp = fresh_pool(fetch_files(self.ch, version, "ctxguard.v1.CheckBudgetRequest"))
                self.assertEqual(dp.message("ctxguard.v1.CheckBudgetRequest").DESCRIPTOR.full_name,
                                 "ctxguard.v1.CheckBudgetRequest")

    def test_unknown_symbol_gets_not_found_in_the_stream(self):
        ns = cgtest.reflection.v1
        answers = cgtest.reflection_call(
            self.ch, "v1", [ns.Request(file_containing_symbol="ctxguard.v1.Nope"),
                            ns.Request(list_services="")])
        self.assertEqual(len(answers), 2, "the stream goes on after an error answer")
        self.assertEqual(answers[0].WhichOneof("message_response"), "error_response")
        self.assertEqual(answers[0].error_response.error_code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertEqual(answers[1].WhichOneof("message_response"), "list_services_response")

    def test_reflected_admin_service_matches_the_proto(self):
        files = fetch_files(self.ch, "v1", "ctxguard.v1.AdminService")
        dp = fresh_pool(files)
        got = [m.name for m in dp.pool.FindServiceByName("ctxguard.v1.AdminService").methods]
        want = [m[0] for m in cgtest.service_methods(cgtest.admin_pb2, "AdminService")]
        self.assertEqual(got, want)

    def call_ping_and_check(self, version):
        files = fetch_files(self.ch, version, "ctxguard.v1.AdminService")
        dp = fresh_pool(files)
        r = generic_unary(self.ch, dp, "ctxguard.v1.AdminService", "Ping",
                          {"delay_ms": 5, "payload": b"reflected"},
                          metadata=self.srv.admin_md())
        self.assertEqual(r.payload, b"reflected")
        self.assertEqual(r.delay_ms, 5)
        self.assertGreater(r.server_time_unix_ms, 0)

        files = fetch_files(self.ch, version, "grpc.health.v1.Health")
        dp = fresh_pool(files)
        r = generic_unary(self.ch, dp, "grpc.health.v1.Health", "Check", {"service": ""})
        status_enum = dp.pool.FindEnumTypeByName("grpc.health.v1.HealthCheckResponse.ServingStatus")
        self.assertEqual(status_enum.values_by_number[r.status].name, "SERVING")

    def test_v1_generic_client_calls_ping_and_health(self):
        self.call_ping_and_check("v1")

    def test_v1alpha_generic_client_calls_ping_and_health(self):
        self.call_ping_and_check("v1alpha")


if __name__ == "__main__":
    import unittest
    unittest.main()
