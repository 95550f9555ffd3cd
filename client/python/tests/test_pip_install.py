"""The package as a user installs it, offline on Debian 12: `pip install` into a fresh venv
(--system-site-packages, so Debian's grpcio, protobuf, grpc_tools and hatchling are
visible; --no-build-isolation --no-index: nothing is downloaded), then `import ctxguard`
in that venv guards a call against a real server. And `python3 -m build --no-isolation`
makes an sdist and a wheel with the generated modules and py.typed."""

import os
import shutil
import subprocess
import tempfile
import textwrap
import zipfile

import sdkenv
from sdkenv import cgtest

PKG_ROOT = sdkenv.PKG_ROOT
PYTHON = cgtest.PYTHON  # /usr/bin/python3


def run(argv, **kw):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout[-4000:]}")
    return r.stdout


def offline_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env["PIP_NO_INDEX"] = "1"  # belt and braces: never reach an index
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


class InstallTest(sdkenv.ServerCase):
    def test_pip_install_into_a_fresh_venv_then_guard(self):
        with tempfile.TemporaryDirectory(prefix="cg_sdk_venv_") as tmp:
            venv = os.path.join(tmp, "venv")
            run([PYTHON, "-m", "venv", "--system-site-packages", venv])
            py = os.path.join(venv, "bin", "python")
            run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", PKG_ROOT],
                env=offline_env(), cwd=tmp)
            s = "venv-" + os.urandom(4).hex()
            self.client.set_budget(s, 10_000)
            script = textwrap.dedent(f"""
                import ctxguard, os
                assert ctxguard.__file__.startswith({venv!r}), ctxguard.__file__
                c = ctxguard.Client({self.srv.target!r}, api_key=os.environ["CG_KEY"])
                with c.guard({s!r}, 500, model="gpt-4o") as g:
                    g.commit_from({{"usage": {{"prompt_tokens": 42, "completion_tokens": 8}}}})
                print("used", c.get_usage({s!r}).root.used_tokens)
            """)
            env = dict(offline_env(), CG_KEY=self.key)
            out = run([py, "-c", script], env=env, cwd=tmp)  # cwd: not the source tree
            self.assertIn("used 50", out)
            self.assertEqual(self.used(s).used_tokens, 50)

    def test_build_makes_an_sdist_and_a_wheel(self):
        with tempfile.TemporaryDirectory(prefix="cg_sdk_build_") as tmp:
            # Debian 12 lacks python3-editables, which python3-build's dependency check wants
            # for hatchling; the build itself does not need it: --skip-dependency-check.
            run([PYTHON, "-m", "build", "--no-isolation", "--skip-dependency-check",
                 "--outdir", tmp, PKG_ROOT], env=offline_env(), cwd=tmp)
            wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
            sdists = [f for f in os.listdir(tmp) if f.endswith(".tar.gz")]
            self.assertEqual(len(wheels), 1, os.listdir(tmp))
            self.assertEqual(len(sdists), 1, os.listdir(tmp))
            names = set(zipfile.ZipFile(os.path.join(tmp, wheels[0])).namelist())
            for want in ("ctxguard/py.typed", "ctxguard/client.py",
                         "ctxguard/_proto/ctxguard/v1/budget_pb2.py",
                         "ctxguard/_proto/ctxguard/v1/budget_pb2.pyi",
                         "ctxguard/_proto/ctxguard/v1/budget_pb2_grpc.py",
                         "ctxguard/_rpc/status_pb2.py", "ctxguard/_rpc/error_details_pb2.py"):
                self.assertIn(want, names)
            self.assertFalse([n for n in names if n.startswith(("grpc/", "google/"))], names)
        # Nothing was generated into the source tree.
        self.assertFalse(os.path.exists(os.path.join(PKG_ROOT, "dist")))


class GenerateTest(sdkenv.ServerCase):
    def test_without_the_google_rpc_protos_errors_fall_back_to_codes(self):
        """Built where golang-github-gogo-googleapis-dev is missing: no ctxguard/_rpc, and a
        call still raises the typed error chosen by the status code."""
        with tempfile.TemporaryDirectory(prefix="cg_sdk_gen_") as tmp:
            pkg = os.path.join(tmp, "ctxguard")
            shutil.copytree(os.path.join(PKG_ROOT, "ctxguard"), pkg,
                            ignore=shutil.ignore_patterns("_proto", "_rpc", "__pycache__"))
            env = dict(offline_env(), CTXGUARD_GOOGLEAPIS_DIR="")
            out = run([PYTHON, "-c", textwrap.dedent(f"""
                import importlib.util, sys
                spec = importlib.util.spec_from_file_location(
                    "g", {os.path.join(PKG_ROOT, "gen_protos.py")!r})
                g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)
                g.DEBIAN_GOOGLEAPIS = "/nonexistent"
                written = g.generate({pkg!r}, root={PKG_ROOT!r})
                assert not [w for w in written if w.startswith("_rpc")], written
            """)], env=env, cwd=tmp)
            self.assertIn("error details will not be decoded", out)
            self.assertFalse(os.path.exists(os.path.join(pkg, "_rpc")))
            script = textwrap.dedent(f"""
                import sys; sys.path.insert(0, {tmp!r})
                import ctxguard
                try:
                    ctxguard.Client({self.srv.target!r}, api_key={self.key!r}).reserve(
                        "no-such-session", 10)
                except ctxguard.ScopeNotFound as e:
                    print("typed", e.reason, e.has_details)
            """)
            out = run([PYTHON, "-c", script], env=env, cwd=tmp)
            self.assertIn("typed SCOPE_NOT_FOUND False", out)


if __name__ == "__main__":
    import unittest
    unittest.main()
