"""ctxguardctl against a real server: the admin commands a newcomer runs first, their
output (plain and --json), and their exit codes (0 ok, 1 call failed, 2 usage)."""

import json
import os
import subprocess

import cgtest


class Ctl(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def ctl(self, *args, key=None, admin=False, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        if admin:
            env["CTXGUARD_ADMIN_KEY"] = self.srv.admin_key
        argv = [cgtest.require_env("CG_CTL_BIN")]
        if key is not None:
            argv += ["--key", key]
        proc = subprocess.run(argv + list(args), env=env, capture_output=True, text=True,
                              timeout=30)
        self.assertEqual(proc.returncode, expect,
                         f"ctxguardctl {' '.join(args)}: exit {proc.returncode}\n"
                         f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def test_health_is_serving(self):
        self.assertIn("SERVING", self.ctl("health").stdout)

    def test_tenant_key_whoami_revoke(self):
        tenant_id = self.ctl("tenant", "create", "ctl-co", admin=True).stdout.strip()
        self.assertRegex(tenant_id, r"^[0-9a-f-]{36}$")
        got = json.loads(self.ctl("--json", "tenant", "get", tenant_id, admin=True).stdout)
        self.assertEqual(got["name"], "ctl-co")

        made = json.loads(self.ctl("--json", "key", "create", tenant_id, "--name", "ci",
                                   admin=True).stdout)
        secret, key_id = made["secret"], made["key"]["key_id"]
        self.assertTrue(secret.startswith("cgk_"))

        who = self.ctl("whoami", key=secret).stdout
        self.assertIn(tenant_id, who)
        self.assertIn("ctl-co", who)

        listed = self.ctl("--json", "key", "list", tenant_id, admin=True).stdout
        self.assertIn(key_id, listed)
        self.assertNotIn(secret, listed, "a key's secret is shown once, at creation")

        self.ctl("key", "revoke", tenant_id, key_id, admin=True)
        failed = self.ctl("whoami", key=secret, expect=1)
        self.assertIn("UNAUTHENTICATED", failed.stderr)

    def test_errors_and_usage(self):
        denied = self.ctl("tenant", "list", key="cgk_not_a_real_key", expect=1)
        self.assertIn("UNAUTHENTICATED", denied.stderr)
        bad = self.ctl("tenant", "get", "not-a-uuid", admin=True, expect=1)
        self.assertIn("INVALID_ARGUMENT", bad.stderr)
        self.assertIn("tenant_id", bad.stderr)
        self.ctl("no-such-command", expect=2)
        self.ctl("key", "create", expect=2)

    def test_ping_goes_through_the_reply_timer(self):
        out = self.ctl("ping", "--delay", "120", admin=True).stdout
        self.assertIn("delay_ms=120", out)
