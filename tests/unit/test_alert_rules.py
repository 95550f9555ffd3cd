"""The alerting rules shipped for Prometheus (helm/ctxguard/rules/ctxguard-alerts.yml) are
valid (`promtool check rules`) and behave (`promtool test rules` with alert_rules_test.yml:
every alert fires, with its labels and texts, on the series that should raise it, and waits
out its `for`). promtool comes with Debian's prometheus package (scripts/deps.sh)."""

import os
import shutil
import subprocess
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "..", "..", "helm", "ctxguard", "rules", "ctxguard-alerts.yml")


class AlertRules(unittest.TestCase):
    def promtool(self, *args):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.fail("promtool is missing: apt-get install prometheus (scripts/deps.sh)")
        return subprocess.run([promtool, *args], cwd=HERE, capture_output=True, text=True,
                              timeout=120)

    def test_the_rules_are_valid(self):
        r = self.promtool("check", "rules", RULES)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS: 7 rules found", r.stdout)

    def test_every_alert_fires_where_it_should(self):
        r = self.promtool("test", "rules", "alert_rules_test.yml")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS", r.stdout)


if __name__ == "__main__":
    unittest.main()
