"""The newcomer's scripts as a newcomer runs them: `make run` (scripts/run.sh) with its own
services in a temporary RUN_DIR, on the tests' build. What it starts keeps none of the
caller's open files (a lock the caller held stays free after it returns), a second run reuses
the demo key instead of minting another, `.run/target` names where the server listens, and
`stop` stops everything. scripts/fetch_tokens.sh says why npm failed."""

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

import cgtest

SOURCE = cgtest.require_env("CG_SOURCE_DIR")


def script_env(extra):
    """The caller's environment without any CTXGUARD_* setting, plus `extra`."""
    return cgtest.clean_env(extra)


def alive(pid):
    """True while the process runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


class RunScript(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="cg-run-")
        cls.run_dir = os.path.join(cls.dir, "run")
        cls.env = script_env({"RUN_DIR": cls.run_dir, "SKIP_BUILD": "1",
                              "BUILD_DIR": cgtest.require_env("CG_BUILD_DIR")})

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(SOURCE, "scripts", "run.sh"), "stop"], env=cls.env,
                       capture_output=True, timeout=120)
        subprocess.run([os.path.join(SOURCE, "scripts", "services.sh"), "destroy", cls.run_dir],
                       capture_output=True, timeout=120)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_script(self, *args, pass_fds=()):
        r = subprocess.run([os.path.join(SOURCE, "scripts", "run.sh")] + list(args),
                           env=self.env, cwd=SOURCE, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=300, pass_fds=pass_fds)
        self.assertEqual(r.returncode, 0, f"run.sh {args}: {r.stdout[-2000:]}{r.stderr[-3000:]}")
        return r

    def read(self, name):
        with open(os.path.join(self.run_dir, name), encoding="utf-8") as f:
            return f.read().strip()

    def test_run_twice_then_stop(self):
        # 1. A caller holding a lock on an open file starts the server.
        lock_path = os.path.join(self.dir, "caller.lock")
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        first = self.run_script(pass_fds=(fd,))
        os.close(fd)  # the caller's copy; only an inherited one could still hold the lock
        probe = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fail("a process started by run.sh kept the caller's lock")
        finally:
            os.close(probe)
        pid = int(self.read("ctxguard.pid"))
        inherited = [os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd")]
        self.assertNotIn(lock_path, inherited)

        # 2. .run/target is where it listens; the demo key works there.
        target = self.read("target")
        self.assertRegex(target, r"^127\.0\.0\.1:\d+$")
        self.assertIn(f"target      {target}", first.stdout)
        key = self.read("demo_key")
        self.assertTrue(key.startswith("cgk_"), key)
        ctl = cgtest.require_env("CG_CTL_BIN")
        who = subprocess.run([ctl, "--key", key, "whoami"], capture_output=True, text=True,
                             timeout=30, env=script_env({"CTXGUARD_TARGET": target}))
        self.assertEqual(who.returncode, 0, who.stderr)
        self.assertIn("demo", who.stdout)
        self.assertIn("ctxguardctl key create", first.stdout)
        # The console's address is printed, and the demo key reads its tenant through the
        # console's JSON API there.
        console = self.read("console_url")
        self.assertRegex(console, r"^http://127\.0\.0\.1:\d+/$")
        self.assertIn(f"console     {console}", first.stdout)
        req = urllib.request.Request(console + "api/v1/AdminService/WhoAmI",
                                     headers={"Authorization": "Bearer " + key})
        with urllib.request.urlopen(req, timeout=20) as r:
            self.assertEqual(json.loads(r.read().decode())["tenant_name"], "demo")
        with urllib.request.urlopen(console, timeout=20) as r:
            self.assertIn("script-src 'self'", r.headers["Content-Security-Policy"])
        # `make demo` moves the demo session's budgets.
        self.assertIn("make demo", first.stdout)
        demo = self.run_script("demo", "2")
        self.assertIn("demo-session", demo.stdout)
        req = urllib.request.Request(
            console + "api/v1/BudgetService/GetUsage?scope.session_id=demo-session"
            "&scope.task_id=plan&depth=1", headers={"Authorization": "Bearer " + key})
        with urllib.request.urlopen(req, timeout=20) as r:
            plan = json.loads(r.read().decode())["root"]
        self.assertEqual(sorted(c["scope"]["agent_id"] for c in plan["children"]),
                         ["a1", "a2", "a3"])
        self.assertGreaterEqual(plan["used_tokens"], 6 * 100 * 3 // 4)

        # 3. Again: the same key, none minted.
        second = self.run_script()
        self.assertEqual(self.read("demo_key"), key)
        self.assertIn("reusing the demo key", second.stdout)
        self.assertNotIn("ctxguardctl key create", second.stdout)
        self.assertNotEqual(int(self.read("ctxguard.pid")), pid, "the server was restarted")

        # 4. stop: the server and the services are gone.
        pid = int(self.read("ctxguard.pid"))
        self.assertTrue(alive(pid))
        self.run_script("stop")
        self.assertFalse(alive(pid), "the server still runs after stop")
        status = subprocess.run([os.path.join(SOURCE, "scripts", "run.sh"), "status"],
                                env=self.env, capture_output=True, text=True, timeout=60)
        self.assertIn("ctxguard: stopped", status.stdout)


class FetchTokens(cgtest.TestCase):
    def test_npm_failure_says_why(self):
        with tempfile.TemporaryDirectory() as d:
            # An empty cache and a registry that refuses connections, no retries.
            env = script_env({"CG_TOKEN_CACHE": os.path.join(d, "cache"),
                              "npm_config_registry": "http://127.0.0.1:1/",
                              "npm_config_fetch_retries": "0"})
            r = subprocess.run([os.path.join(SOURCE, "scripts", "fetch_tokens.sh"),
                                os.path.join(d, "out")], env=env, capture_output=True,
                               text=True, timeout=120)
            self.assertNotEqual(r.returncode, 0)
            self.assertRegex(r.stderr, r"npm pack gpt-tokenizer@4 failed \(registry "
                                       r"http://127\.0\.0\.1:1/\):\n.*ECONNREFUSED")
            self.assertFalse(os.path.exists(os.path.join(d, "out", "o200k_base.cgtok")))


if __name__ == "__main__":
    unittest.main()
