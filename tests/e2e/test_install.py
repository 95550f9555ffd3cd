"""The installed server stands on its own: `cmake --install` into a temporary prefix puts the
programs, the token data, the migrations and the docs in their FHS places, and the installed
ctxguard, started with no token_data_dir while the build tree's token data is moved away,
counts tokens exactly (the fixture counts of tests/data/conv/texts are o200k_base's, the same
as tiktoken's). The build tree's own server fails to start meanwhile, which shows the data was
really gone from there.

Runs alone (RUN_SERIAL in tests/CMakeLists.txt): no other test may start a build-tree server
while its data is moved away. The data is moved back in every case."""

import os
import shutil
import subprocess
import tempfile

import cgtest
from cgtest import context_pb2, context_pb2_grpc

TEXTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "conv", "texts")


def fixture_counts():
    """{file name: exact o200k_base token count} from the fixtures' TSV (name, tokens, bytes)."""
    counts = {}
    with open(os.path.join(TEXTS, "o200k_counts.tsv"), encoding="utf-8") as f:
        for line in f:
            name, tokens, _ = line.split("\t")
            counts[name] = int(tokens)
    return counts


class InstallTest(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.build = cgtest.require_env("CG_BUILD_DIR")
        cls.prefix = tempfile.mkdtemp(prefix="cg-install-")
        r = subprocess.run(["cmake", "--install", cls.build, "--prefix", cls.prefix],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            shutil.rmtree(cls.prefix, ignore_errors=True)
            raise AssertionError(f"cmake --install failed ({r.returncode}):\n{r.stdout}{r.stderr}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.prefix, ignore_errors=True)

    def installed(self, *parts):
        return os.path.join(self.prefix, *parts)

    def test_files_land_in_their_fhs_places(self):
        for prog in ("ctxguard", "ctxguardctl"):
            path = self.installed("bin", prog)
            self.assertTrue(os.access(path, os.X_OK), f"{path} is not an executable")
        for enc in ("cl100k_base", "o200k_base"):
            path = self.installed("share", "ctxguard", enc + ".cgtok")
            self.assertGreater(os.path.getsize(path), 1 << 20, path)
        sources = sorted(os.listdir(os.path.join(cgtest.require_env("CG_SOURCE_DIR"),
                                                 "migrations")))
        self.assertEqual(sorted(os.listdir(self.installed("share", "ctxguard", "migrations"))),
                         sources)
        for proto in ("budget.proto", "context.proto", "admin.proto", "common.proto"):
            self.assertTrue(os.path.isfile(self.installed("share", "ctxguard", "proto",
                                                          "ctxguard", "v1", proto)), proto)
        docs = os.listdir(self.installed("share", "doc", "ctxguard"))
        for name in ("README.md", "LICENSE", "CHANGELOG.md", "operations.md"):
            self.assertIn(name, docs)
        r = subprocess.run([self.installed("bin", "ctxguard"), "--version"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^ctxguard \d+\.\d+\.\d+")

    def test_installed_server_counts_exactly_without_the_build_tree(self):
        build_data = os.path.join(self.build, "share", "ctxguard")
        moved = build_data + f".moved-by-test-install-{os.getpid()}"
        os.rename(build_data, moved)
        try:
            # The build tree's server has lost its data: it refuses to start, naming the path.
            r = subprocess.run([cgtest.server_bin()], capture_output=True, text=True, timeout=30,
                               env=cgtest.clean_env({"CTXGUARD_PG_DSN": "x"}))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(os.path.join(build_data, "cl100k_base.cgtok"), r.stderr)

            srv = cgtest.Server(env={"CTXGUARD_TOKEN_DATA_DIR": None})
            srv.bin = self.installed("bin", "ctxguard")
            self.addCleanup(srv.close)
            srv.start()
            tenant = srv.create_tenant()
            md = cgtest.bearer(srv.create_key(tenant.tenant_id).secret)
            stub = context_pb2_grpc.ContextServiceStub(srv.channel())
            counts = fixture_counts()
            self.assertGreaterEqual(len(counts), 5)
            for name, want in sorted(counts.items()):
                with open(os.path.join(TEXTS, name), encoding="utf-8") as f:
                    text = f.read()
                got = stub.CountTokens(context_pb2.CountTokensRequest(
                    text=text, encoding=context_pb2.TOKEN_ENCODING_O200K_BASE),
                    metadata=md, timeout=30)
                self.assertEqual(got.method, context_pb2.TOKEN_COUNT_METHOD_EXACT, name)
                self.assertEqual(got.total_tokens, want, name)
        finally:
            os.rename(moved, build_data)


if __name__ == "__main__":
    import unittest
    unittest.main()
