"""ctxguardctl against a real server: the admin commands a newcomer runs first, their
output (plain and --json), and their exit codes (0 ok, 1 call failed, 2 usage)."""

import json
import os
import subprocess

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2


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

    def test_key_roles_scopes_and_expiry(self):
        tenant_id = self.ctl("tenant", "create", "ctl-keys", admin=True).stdout.strip()
        made = json.loads(self.ctl("--json", "key", "create", tenant_id, "--role", "operator",
                                   "--name", "ops", admin=True).stdout)
        operator = made["secret"]
        self.assertEqual(made["key"]["role"], "API_KEY_ROLE_OPERATOR")
        # The default role is agent, which the help says.
        plain = self.ctl("key", "create", tenant_id, admin=True).stdout
        self.assertRegex(plain, r"(?m)^role: +agent$")
        self.assertRegex(plain, r"(?m)^scope: +-$")
        self.assertRegex(plain, r"(?m)^expires_at: +never$")
        self.assertIn("agent (the default", self.ctl("key", "create", "--help").stdout)

        # An operator mints an agent key for one task of its own tenant ("-"), for 2 hours.
        out = self.ctl("key", "create", "-", "--role", "agent", "--scope", "s1/t1",
                       "--expires", "2h", "--name", "task-agent", key=operator).stdout
        self.assertRegex(out, r"(?m)^role: +agent$")
        self.assertRegex(out, r"(?m)^scope: +s1/t1$")
        self.assertRegex(out, r"(?m)^expires_at: +20\d\d-")
        self.assertIn(f"tenant_id:   {tenant_id}", out)
        agent = [l.split()[-1] for l in out.splitlines() if l.startswith("secret:")][0]
        who = self.ctl("whoami", key=agent).stdout
        self.assertRegex(who, r"(?m)^role: +agent$")
        self.assertRegex(who, r"(?m)^scope: +s1/t1$")
        self.assertRegex(who, r"(?m)^expires_at: +20\d\d-")
        # An operator cannot mint an admin key.
        self.assertIn("PERMISSION_DENIED", self.ctl("key", "create", "-", "--role", "admin",
                                                    key=operator, expect=1).stderr)

        # A tenant admin key lists its own tenant's keys ("-"; operators may not).
        tenant_admin = json.loads(self.ctl("--json", "key", "create", tenant_id, "--role",
                                           "admin", "--name", "tadmin", admin=True).stdout)
        listed = self.ctl("key", "list", "-", key=tenant_admin["secret"]).stdout.splitlines()
        self.assertEqual(listed[0].split(),
                         ["KEY_ID", "ROLE", "SCOPE", "EXPIRES", "LAST_USED", "REVOKED_AT", "NAME"])
        rows = {l.split()[-1]: l.split() for l in listed[1:] if l.split()}
        self.assertEqual(rows["task-agent"][1:3], ["agent", "s1/t1"])
        self.assertRegex(rows["task-agent"][3], r"^20\d\d-")
        self.assertRegex(rows["task-agent"][4], r"^20\d\d-", "whoami used it")
        self.assertEqual(rows["ops"][1:3], ["operator", "-"])
        self.assertEqual(rows["ops"][3], "never")

        for args, text in ((("--expires", "2 hours"), "--expires must be a duration"),
                           (("--expires", "0s"), "--expires must be a duration"),
                           (("--expires", "400d"), "at most 365d"),
                           (("--role", "root"), "--role must be agent, viewer, operator or admin"),
                           (("--scope", "s/t/a"), "--scope must be SESSION or SESSION/TASK"),
                           (("--scope", "-"), "--scope must be SESSION or SESSION/TASK")):
            with self.subTest(args=args):
                self.assertIn(text, self.ctl("key", "create", "-", *args, key=operator,
                                             expect=2).stderr)

    def test_spends_on_the_tenant_say_so(self):
        tenant_id = self.ctl("tenant", "create", "ctl-spend", admin=True).stdout.strip()
        key = json.loads(self.ctl("--json", "key", "create", tenant_id, "--role", "admin",
                                  admin=True).stdout)["secret"]
        # "-" is the tenant named explicitly (scope.tenant): the server takes the spend.
        self.ctl("record", "-", "--input", "5", "--idempotency-key", "k1", key=key)
        self.ctl("check", "-", "--tokens", "5", key=key)
        self.assertIn("5", self.ctl("usage", "-", key=key).stdout)

    def test_errors_and_usage(self):
        no_key = self.ctl("tenant", "list", expect=2)
        self.assertIn("set CTXGUARD_ADMIN_KEY", no_key.stderr)
        no_key = self.ctl("usage", expect=2)
        self.assertIn("set CTXGUARD_KEY", no_key.stderr)
        self.assertIn("unknown option '--frobnicate'", self.ctl("--frobnicate", expect=2).stderr)
        group = self.ctl("tenant", "--help").stdout
        self.assertIn("tenant create NAME", group)
        self.assertIn("tenant list", group)
        self.assertNotIn("budget set", group, "only the group's commands")
        # Command options: getopt_long (unique prefixes, --opt=V, options after arguments).
        typo = self.ctl("reserve", "x", "--tokns", "5", key="cgk_x", expect=2).stderr
        self.assertIn("unknown or ambiguous option '--tokns'", typo)
        self.assertIn("--tokens needs a value",
                      self.ctl("reserve", "x", "--tokens", key="cgk_x", expect=2).stderr)
        self.assertIn("--return-only takes no value",
                      self.ctl("check", "x", "--return-only=1", key="cgk_x", expect=2).stderr)
        one = self.ctl("commit", "--help").stdout
        self.assertRegex(one, r"(?m)^  --cache-read N +cache read tokens$")
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

    def test_budget_set_changes_only_what_it_is_given(self):
        tenant = self.srv.create_tenant()
        key = self.srv.create_key(tenant.tenant_id).secret
        stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        md = cgtest.bearer(key)
        B = budget_pb2
        self.ctl("budget", "set", "-", "--limit", "100000", key=key)
        missing = self.ctl("budget", "set", "run9", "--mode", "soft", key=key, expect=2)
        self.assertIn("--limit is required for a new budget", missing.stderr)
        nothing = self.ctl("budget", "set", "run9", key=key, expect=2)
        self.assertIn("nothing to set", nothing.stderr)
        self.ctl("budget", "set", "run9", "--limit", "5000", "--mode", "soft", "--warning", "0.6",
                 key=key)
        # Settings the CLI has no flag for, set through the API.
        got = stub.GetBudget(B.GetBudgetRequest(scope=common_pb2.Scope(session_id="run9")), metadata=md,
                             timeout=10).budget
        settings = got.settings
        settings.limit_cost_micros = 777000
        settings.description = "kept"
        stub.SetBudget(B.SetBudgetRequest(scope=common_pb2.Scope(session_id="run9"), settings=settings),
                       metadata=md, timeout=10)

        out = self.ctl("budget", "set", "run9", "--limit", "8000", key=key).stdout
        self.assertIn("limit 8000 tokens, soft, warning at 0.6", out)
        after = stub.GetBudget(B.GetBudgetRequest(scope=common_pb2.Scope(session_id="run9")), metadata=md,
                               timeout=10).budget.settings
        self.assertEqual(after.limit_tokens, 8000)
        self.assertEqual(after.mode, B.BUDGET_MODE_SOFT)
        self.assertAlmostEqual(after.warning_ratio, 0.6)
        self.assertEqual(after.limit_cost_micros, 777000)
        self.assertEqual(after.description, "kept")
        # Only the mode, now.
        self.ctl("budget", "set", "run9", "--mode", "hard", key=key)
        after = stub.GetBudget(B.GetBudgetRequest(scope=common_pb2.Scope(session_id="run9")), metadata=md,
                               timeout=10).budget.settings
        self.assertEqual((after.limit_tokens, after.mode), (8000, B.BUDGET_MODE_HARD))

    def test_budget_flow_for_shell_scripts(self):
        tenant = self.srv.create_tenant()
        key = self.srv.create_key(tenant.tenant_id).secret
        self.ctl("budget", "set", "-", "--limit", "100000", key=key)
        self.ctl("budget", "set", "job", "--limit", "1000", key=key)

        held = self.ctl("reserve", "job", "--tokens", "600", "--return-only", key=key)
        rid = held.stdout.strip()
        self.assertRegex(rid, r"^\S+$", "the reservation id alone on stdout")
        self.assertIn("ALLOW", held.stderr)
        out = self.ctl("commit", rid, "--input", "500", "--output", "50", "--cache-read", "20",
                       key=key).stdout
        self.assertIn("released 30", out)  # held 600, spent 570

        check = self.ctl("check", "job", "--tokens", "600", "--return-only", key=key, expect=3)
        self.assertIn("DENY", check.stdout)
        refused = self.ctl("reserve", "job", "--tokens", "600", key=key, expect=1)
        self.assertIn("RESOURCE_EXHAUSTED", refused.stderr)
        ok = self.ctl("--json", "check", "job", "--tokens", "100", "--return-only", key=key)
        self.assertEqual(json.loads(ok.stdout)["decision"], "DECISION_ALLOW")  # 67 %
        warned = self.ctl("check", "job", "--tokens", "300", "--return-only", key=key)
        self.assertIn("ALLOW_WITH_WARNING", warned.stdout)  # 87 %: over the 0.8 warning

        rid = self.ctl("reserve", "job", "--tokens", "100", "--return-only",
                       key=key).stdout.strip()
        self.assertIn("released 100 tokens", self.ctl("release", rid, key=key).stdout)

        first = self.ctl("record", "job", "--input", "7", "--idempotency-key", "k-1",
                         key=key).stdout
        again = self.ctl("record", "job", "--input", "7", "--idempotency-key", "k-1",
                         key=key).stdout
        self.assertIn("(replayed)", again)
        self.assertEqual(first.split()[2], again.split()[2], "the same ledger entry")
        used = json.loads(self.ctl("--json", "usage", "job", key=key).stdout)
        self.assertEqual(int(used["root"]["used_tokens"]), 570 + 7)

        self.ctl("budget", "set", "gated", "--limit", "100", "--mode", "approval", key=key)
        gated = self.ctl("reserve", "gated", "--tokens", "500", "--return-only", key=key,
                         expect=4)
        self.assertEqual(gated.stdout, "", "no reservation id")
        self.assertRegex(gated.stderr, r"approval \S+: wait for its decision")
        bad = self.ctl("commit", "x", "--input", "many", key=key, expect=2)
        self.assertIn("--input must be a number of tokens", bad.stderr)
