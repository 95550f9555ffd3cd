"""The method table's generator (cmake/gen_methods.py) on small fixture protos: an RPC without a
rule, or with a rule that names nobody or no way to run, fails the build naming the RPC; a
complete rule becomes the table entry the server runs by (who may call it, where it runs, its
handler by the naming convention or as named).

Needs protoc, Debian's python3-protobuf and the grpc-proto files (the generator also expects
the health and reflection services), all in scripts/deps.sh's build group.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GENERATOR = os.path.join(ROOT, "cmake", "gen_methods.py")
GRPC_PROTO_DIR = "/usr/share/grpc-proto"
STANDARD_PROTOS = ["grpc/health/v1/health.proto", "grpc/reflection/v1/reflection.proto",
                   "grpc/reflection/v1alpha/reflection.proto"]

sys.path.insert(0, os.path.join(ROOT, "cmake"))
import gen_methods  # noqa: E402

HEADER = """\
syntax = "proto3";
package ctxguard.fixture.v1;
import "ctxguard/v1/options.proto";
message Req {}
message Resp {}
"""


class GenMethods(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cg_gen_methods_")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def generate(self, service_body):
        """Compiles a fixture proto with FixtureService { service_body } (and the standard
        services) and runs the generator on it: (exit code, stderr, generated C or None)."""
        os.makedirs(os.path.join(self.tmp, "fixture"), exist_ok=True)
        with open(os.path.join(self.tmp, "fixture", "fixture.proto"), "w") as f:
            f.write(HEADER + "service FixtureService {\n" + textwrap.dedent(service_body) + "}\n")
        desc = os.path.join(self.tmp, "set.desc")
        protoc = shutil.which("protoc") or "/usr/bin/protoc"
        subprocess.run([protoc, "-I", self.tmp, "-I", os.path.join(ROOT, "proto"),
                        "-I", GRPC_PROTO_DIR, "-I", "/usr/include", "--include_imports",
                        f"--descriptor_set_out={desc}", "fixture/fixture.proto"]
                       + STANDARD_PROTOS, check=True, cwd=self.tmp)
        out = os.path.join(self.tmp, "methods.c")
        r = subprocess.run([sys.executable, GENERATOR, desc, out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        text = None
        if os.path.exists(out):
            with open(out) as f:
                text = f.read()
        return r.returncode, r.stderr, text

    def test_an_rpc_without_a_rule_fails_the_build_naming_it(self):
        code, err, text = self.generate("""
            rpc CheckFixture(Req) returns (Resp) {
              option (ctxguard.v1.rule) = {allow: [CALLER_AGENT], run: RUN_POOL};
            }
            rpc Forgotten(Req) returns (Resp);
        """)
        self.assertEqual(code, 1, err)
        self.assertIn("ctxguard.fixture.v1.FixtureService/Forgotten", err)
        self.assertIn("has no rule", err)
        self.assertNotIn("CheckFixture", err)
        self.assertIsNone(text, "nothing is written when a rule is missing")

    def test_a_rule_that_allows_nobody_or_says_not_how_it_runs_fails(self):
        code, err, _ = self.generate("""
            rpc Nobody(Req) returns (Resp) { option (ctxguard.v1.rule) = {run: RUN_POOL}; }
            rpc Nowhere(Req) returns (Resp) {
              option (ctxguard.v1.rule) = {allow: [CALLER_ADMIN]};
            }
            rpc Unspecified(Req) returns (Resp) {
              option (ctxguard.v1.rule) = {allow: [CALLER_UNSPECIFIED], run: RUN_POOL};
            }
            rpc TenantInline(Req) returns (Resp) {
              option (ctxguard.v1.rule) = {allow: [CALLER_VIEWER], run: RUN_INLINE};
            }
        """)
        self.assertEqual(code, 1, err)
        self.assertIn("FixtureService/Nobody (fixture/fixture.proto): its rule allows nobody", err)
        self.assertIn("FixtureService/Nowhere (fixture/fixture.proto): its rule says not how", err)
        self.assertIn("FixtureService/Unspecified (fixture/fixture.proto): unknown caller", err)
        self.assertIn("FixtureService/TenantInline (fixture/fixture.proto): tenant keys", err)

    def test_rules_become_the_table(self):
        code, err, text = self.generate("""
            rpc CheckFixture(Req) returns (Resp) {
              option (ctxguard.v1.rule) = {
                allow: [CALLER_AGENT, CALLER_ADMIN, CALLER_AGENT]
                run: RUN_TRY_INLINE
              };
            }
            rpc Ping(Req) returns (Resp) {
              option (ctxguard.v1.rule) = {allow: [CALLER_SERVER_ADMIN], run: RUN_INLINE};
            }
            rpc Watch(Req) returns (stream Resp) {
              option (ctxguard.v1.rule) = {
                allow: [CALLER_VIEWER], run: RUN_POOL, handler: "cg_rpc_watcher"
              };
            }
        """)
        self.assertEqual(code, 0, err)

        def entry(path):
            start = text.index(f'.path = "{path}"')
            return text[start:text.index("},", start)]

        check = entry("/ctxguard.fixture.v1.FixtureService/CheckFixture")
        self.assertIn(".allow = CG_ALLOW_AGENT | CG_ALLOW_TENANT_ADMIN,", check)
        self.assertIn(".blocking = true,", check)
        self.assertIn(".try_inline = true,", check)
        self.assertIn(".try_handler = cg_rpc_fixture_check,", check, "the convention")
        self.assertIn(".request_desc = &ctxguard__fixture__v1__req__descriptor,", check)
        ping = entry("/ctxguard.fixture.v1.FixtureService/Ping")
        self.assertIn(".allow = CG_ALLOW_SERVER_ADMIN,", ping)
        self.assertIn(".blocking = false,", ping)
        self.assertNotIn("try_inline", ping)
        watch = entry("/ctxguard.fixture.v1.FixtureService/Watch")
        self.assertIn(".kind = CG_RPC_SERVER_STREAM,", watch)
        self.assertIn(".poll = cg_rpc_watcher_poll,", watch)
        self.assertIn(".open = cg_rpc_watcher_open,", watch)
        health = entry("/grpc.health.v1.Health/Check")
        self.assertIn(".allow = CG_ALLOW_ANYONE,", health)
        self.assertIn('#include "fixture/fixture.pb-c.h"', text)

    def test_c_names_follow_protobuf_c(self):
        self.assertEqual(gen_methods.c_lower("ctxguard.v1.WhoAmIRequest"),
                         "ctxguard__v1__who_am_irequest")
        self.assertEqual(gen_methods.c_lower("grpc.health.v1.HealthCheckRequest"),
                         "grpc__health__v1__health_check_request")
        self.assertEqual(gen_methods.conventional_handler("AdminService", "WhoAmI"),
                         "cg_rpc_admin_who_am_i")
        self.assertEqual(gen_methods.conventional_handler("ContextService", "ValidateContext"),
                         "cg_rpc_context_validate")
        self.assertEqual(gen_methods.conventional_handler("AdminService", "CreateApiKey"),
                         "cg_rpc_admin_create_api_key")


if __name__ == "__main__":
    unittest.main()
