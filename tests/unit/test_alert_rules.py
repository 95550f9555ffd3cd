"""The alerting rules shipped for Prometheus (helm/ctxguard/rules/ctxguard-alerts.yml) are
valid (`promtool check rules`) and behave (`promtool test rules` with alert_rules_test.yml:
every alert fires, with its labels and texts, on the series that should raise it, and waits
out its `for`). promtool comes with Debian's prometheus package (scripts/deps.sh).

The chart's PrometheusRule ships the same rules with each `job!=""` matcher replaced by the
release's job and namespace (templates/prometheusrule.yaml), so every vector selector of
every rule must carry exactly that one job matcher."""

import os
import shutil
import subprocess
import unittest

import yaml

import promql_text

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
        self.assertIn("SUCCESS: 12 rules found", r.stdout)

    def rules(self):
        with open(RULES) as f:
            doc = yaml.safe_load(f)
        return [rule for group in doc["groups"] for rule in group["rules"]]

    def test_every_selector_carries_the_job_matcher_the_chart_binds(self):
        for rule in self.rules():
            name = rule.get("alert") or rule.get("record")
            sels = promql_text.selectors(rule["expr"])
            self.assertTrue(sels, f"{name}: no selector found in {rule['expr']!r}")
            for metric, matchers in sels:
                jobs = [(op, value) for label, op, value in matchers if label == "job"]
                self.assertEqual(jobs, [("!=", "")],
                                 f"{name}: {metric} needs exactly one job matcher, job!=\"\"")
            # The chart replaces the text `job!=""`: it must occur in matchers only.
            self.assertEqual(rule["expr"].count('job!=""'), len(sels), name)

    def test_every_alert_says_how_bad_and_what(self):
        for rule in self.rules():
            self.assertIn("alert", rule, "recording rules belong in a file of their own")
            self.assertIn(rule["labels"]["severity"], ("info", "warning", "critical"),
                          rule["alert"])
            self.assertTrue(rule["annotations"]["summary"], rule["alert"])
            self.assertIn("{{ $labels.job }}", rule["annotations"]["description"],
                          rule["alert"])

    def test_every_alert_fires_where_it_should(self):
        r = self.promtool("test", "rules", "alert_rules_test.yml")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCESS", r.stdout)


if __name__ == "__main__":
    unittest.main()
