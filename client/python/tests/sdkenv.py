"""Support for the ctxguard Python package's tests.

Reuses tests/e2e/cgtest.py (a real server on an ephemeral port with its own schema). cgtest
puts its own generated `ctxguard.v1` stubs (a namespace package) on sys.path; this module
then loads *this* package instead: the package's source copied to a temporary folder with
its generated modules (gen_protos.py, as the build hook makes them), first on sys.path, so
the tests exercise what a build installs without writing into the source tree.
"""

import os
import shutil
import sys
import tempfile
import atexit
import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # client/python
SOURCE_DIR = os.environ.get("CG_SOURCE_DIR") or os.path.normpath(os.path.join(PKG_ROOT, "..", ".."))
sys.path.append(os.path.join(SOURCE_DIR, "tests", "e2e"))  # after ours: names like test_install

import cgtest  # noqa: E402  (generates its stubs; binds ctxguard.v1 to them)

# cgtest's stubs stay reachable through cgtest.budget_pb2 & co.; drop the names from
# sys.modules so that `import ctxguard` finds the package below.
for _name in [n for n in sys.modules if n == "ctxguard" or n.startswith("ctxguard.")]:
    del sys.modules[_name]

_PKG_DIR = tempfile.mkdtemp(prefix="cg_sdk_py_")
atexit.register(shutil.rmtree, _PKG_DIR, True)


def _load_gen():
    spec = importlib.util.spec_from_file_location("ctxguard_gen_protos",
                                                  os.path.join(PKG_ROOT, "gen_protos.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _load_gen()
shutil.copytree(os.path.join(PKG_ROOT, "ctxguard"), os.path.join(_PKG_DIR, "ctxguard"),
                ignore=shutil.ignore_patterns("_proto", "_rpc", "__pycache__"))
gen.generate(os.path.join(_PKG_DIR, "ctxguard"), root=PKG_ROOT, python=cgtest.PYTHON)
sys.path.insert(0, _PKG_DIR)

import ctxguard  # noqa: E402

if not ctxguard.__file__.startswith(_PKG_DIR):
    raise RuntimeError(f"`import ctxguard` gave {ctxguard.__file__}, not the test copy")


class ServerCase(cgtest.TestCase):
    """One server for the class; each test gets a tenant, a key and a Client."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, log_level="info")

    def setUp(self):
        self.tenant = self.srv.create_tenant()
        self.key = self.srv.create_key(self.tenant.tenant_id).secret
        self.client = ctxguard.Client(self.srv.target, api_key=self.key, timeout=15)
        self.addCleanup(self.client.close)

    def used(self, scope):
        return self.client.get_usage(scope).root
