"""The Grafana dashboard shipped in helm/ctxguard/dashboards/ctxguard.json, and the metric
names it and the alert rules (helm/ctxguard/rules/ctxguard-alerts.yml) read.

- Structure: a current schemaVersion, the data source as a `datasource` variable of type
  prometheus that every panel and query uses, a `job` variable, unique panel ids, panels
  that do not overlap, every panel with queries that have an expression, every variable an
  expression uses defined.
- Names: metrics_exposition.prom (a replica's /metrics with every family) holds exactly the
  families registered in server/ (names, types, label names where the registration lists
  them), and every metric the dashboard and the rules read is one of them.
- PromQL: a real Prometheus (Debian's prometheus package) is given that exposition as ten
  minutes of two replicas' samples (promtool tsdb create-blocks-from openmetrics), and every
  query of the dashboard, with its variables substituted, must parse, evaluate and return
  series that carry the labels its legend names; every rule's expression must evaluate."""

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

import promql_text

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DASHBOARD = os.path.join(ROOT, "helm", "ctxguard", "dashboards", "ctxguard.json")
RULES = os.path.join(ROOT, "helm", "ctxguard", "rules", "ctxguard-alerts.yml")
EXPOSITION = os.path.join(HERE, "metrics_exposition.prom")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# What the test puts for Grafana's variables: the job the samples are loaded under, "All"
# for the tenants, and the built-ins for a ten-minute range scraped every 15 s.
JOB = "ctxguard"
VARIABLES = {"job": JOB, "tenant": ".*", "__rate_interval": "1m", "__interval": "15s",
             "__range": "10m", "__range_s": "600", "__range_ms": "600000"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                    "__range_ms", "__from", "__to", "__dashboard", "__org", "__user"}
VARIABLE_REF = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
STEP_S, STEPS = 15, 41
INSTANCES = ("ctxguard-0:9090", "ctxguard-1:9090")


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def all_panels(dash):
    """Every panel, those inside collapsed rows included."""
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def query_panels(dash):
    return [p for p in all_panels(dash) if p["type"] != "row"]


def variable_refs(text):
    return {next(g for g in m.groups() if g) for m in VARIABLE_REF.finditer(text)}


def substitute(text):
    def repl(m):
        name = next(g for g in m.groups() if g)
        if name not in VARIABLES:
            raise KeyError(f"no test value for the variable {name} in {text!r}")
        return VARIABLES[name]
    return VARIABLE_REF.sub(repl, text)


def label_values_selector(query):
    """The series selector of a Grafana label_values(selector, label) variable query."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, re.S)
    if m is None:
        raise ValueError(f"not a label_values(selector, label) query: {query!r}")
    return m.group(1), m.group(2)


def rule_exprs():
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return [(r.get("alert") or r.get("record"), r["expr"])
            for g in doc["groups"] for r in g["rules"]]


# ---------------------------------------------------------------- the exposition

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def read_exposition(path=EXPOSITION):
    """({family: type}, [(sample name, {label: value}, value)])."""
    types, samples = {}, []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                types[name] = kind
            elif line and not line.startswith("#"):
                m = SAMPLE.match(line)
                if m is None:
                    raise ValueError(f"{path}: cannot read {line!r}")
                samples.append((m.group(1), dict(LABEL.findall(m.group(2) or "")),
                                float(m.group(3))))
    return types, samples


def family_of(sample_name, types):
    if sample_name in types:
        return sample_name
    for suffix in HISTOGRAM_SUFFIXES:
        base = sample_name[:-len(suffix)]
        if sample_name.endswith(suffix) and types.get(base) == "histogram":
            return base
    return None


# ---------------------------------------------------------------- the sources

FAMILY_NAME = re.compile(r"(?:ctxguard|grpc_server|process)_[a-z0-9_]+")
C_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)
TYPE_WORDS = {"cg_metrics_counter_family": "counter", "cg_metrics_gauge_family": "gauge",
              "cg_metrics_gauge_set_family": "gauge", "cg_metrics_histogram_family": "histogram",
              "CG_METRIC_COUNTER": "counter", "CG_METRIC_GAUGE": "gauge",
              "CG_METRIC_HISTOGRAM": "histogram"}


def registered_families(server_dir):
    """{family: (set of types, label names or None)} of every family name written as a whole
    string literal in server/'s C sources, the type and labels read from the statement (or
    table row) that holds it: the registration call's name or the CG_METRIC_* it passes, and
    its CG_LABELS("...") of literals, if any. A macro defined as such a literal counts where
    it is used."""
    found = {}
    for path in sorted(glob.glob(os.path.join(server_dir, "**", "*.[ch]"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            src = f.read()
        literals = []

        def hide(m):
            tok = m.group()
            if tok.startswith("/"):
                return " "
            if tok.startswith('"'):
                literals.append(tok[1:-1])
                return f'"@{len(literals) - 1}"'
            return "' '"
        code = C_TOKEN.sub(hide, src)
        names = {i: lit for i, lit in enumerate(literals) if FAMILY_NAME.fullmatch(lit)}
        macros = {}
        for m in re.finditer(r'^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+"@(\d+)"[ \t]*$', code, re.M):
            if int(m.group(2)) in names:
                macros[m.group(1)] = names[int(m.group(2))]
                code = code[:m.start()] + " " * (m.end() - m.start()) + code[m.end():]
        uses = [(m.start(), m.end(), names[int(m.group(1))])
                for m in re.finditer(r'"@(\d+)"', code) if int(m.group(1)) in names]
        for macro, name in macros.items():
            uses += [(m.start(), m.end(), name) for m in re.finditer(rf"\b{macro}\b", code)]
        for start, end, name in uses:
            begin = max(code.rfind(c, 0, start) for c in ";{}") + 1
            stops = [i for i in (code.find(c, end) for c in ";}") if i >= 0]
            window = code[begin:min(stops) if stops else len(code)]
            kinds = {kind for word, kind in TYPE_WORDS.items()
                     if re.search(rf"\b{word}\b", window)}
            if len(kinds) > 1:
                raise AssertionError(f"{path}: cannot tell the type of {name} from {window!r}")
            types, labels = found.setdefault(name, (set(), None))
            types |= kinds
            m = re.search(r"\bCG_LABELS\(((?:\s*\"@\d+\"\s*,?)*)\)", window)
            if m is not None:
                labels = {literals[int(i)] for i in re.findall(r'"@(\d+)"', m.group(1))}
            elif re.search(r"\bCG_NO_LABELS\b", window):
                labels = set()
            found[name] = (types, labels if labels is not None else found[name][1])
    return found


# ---------------------------------------------------------------- Prometheus


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A throwaway Prometheus on a free port over a storage dir, without scrape targets."""

    def __init__(self, binary, storage, config):
        self.proc = None
        for _ in range(3):  # another process may take the free port before it binds
            self.port = free_port()
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={storage}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self.wait_ready():
                return
            self.stop()
        raise RuntimeError("prometheus did not become ready")

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready",
                                            timeout=2) as r:
                    if r.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        return False

    def api(self, path, params):
        query = urllib.parse.urlencode(params, doseq=True)
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400/422 carry the error as JSON
            return json.load(e)

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()
        self.proc = None


def openmetrics_history(types, samples, end):
    """The exposition as STEPS samples STEP_S apart up to `end` (unix s) for each of two
    replicas: counters and histograms grow linearly to their value, gauges hold it."""
    lines = []
    for instance in INSTANCES:
        for name, labels, value in samples:
            growing = types[family_of(name, types)] in ("counter", "histogram")
            all_labels = {**labels, "job": JOB, "instance": instance}
            text = ",".join(f'{k}="{v}"' for k, v in all_labels.items())
            for k in range(STEPS):
                v = value * (k + 1) / STEPS if growing else value
                lines.append(f"{name}{{{text}}} {v!r} {end - (STEPS - 1 - k) * STEP_S}")
    return "\n".join(lines) + "\n# EOF\n"


class DashboardStructure(unittest.TestCase):
    def setUp(self):
        self.dash = load_dashboard()

    def test_it_is_a_current_grafana_dashboard(self):
        self.assertGreaterEqual(self.dash["schemaVersion"], 39)
        self.assertTrue(self.dash["uid"])
        self.assertTrue(self.dash["title"])
        self.assertIsNone(self.dash.get("id"), "an exported dashboard carries no id")

    def test_the_data_source_is_a_prometheus_variable_and_job_a_variable(self):
        variables = {v["name"]: v for v in self.dash["templating"]["list"]}
        ds = variables["datasource"]
        self.assertEqual((ds["type"], ds["query"]), ("datasource", "prometheus"))
        job = variables["job"]
        self.assertEqual(job["type"], "query")
        self.assertEqual(job["datasource"], DATASOURCE)
        for v in variables.values():
            if v["type"] == "query":
                self.assertEqual(v["datasource"], DATASOURCE, v["name"])
                label_values_selector(v["query"]["query"])
                self.assertEqual(v["definition"], v["query"]["query"], v["name"])

    def test_panel_ids_are_unique(self):
        ids = [p["id"] for p in all_panels(self.dash)]
        self.assertEqual(len(ids), len(set(ids)), [i for i in ids if ids.count(i) > 1])

    def test_panels_fit_the_grid_and_do_not_overlap(self):
        boxes = []
        for p in all_panels(self.dash):
            g = p["gridPos"]
            self.assertTrue(0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"])
            for other, o in boxes:
                apart = (g["x"] + g["w"] <= o["x"] or o["x"] + o["w"] <= g["x"] or
                         g["y"] + g["h"] <= o["y"] or o["y"] + o["h"] <= g["y"])
                self.assertTrue(apart, f"{p['title']!r} overlaps {other!r}")
            boxes.append((p["title"], g))

    def test_every_panel_queries_the_datasource_variable_with_an_expression(self):
        panels = query_panels(self.dash)
        self.assertGreater(len(panels), 20)
        for p in panels:
            self.assertEqual(p.get("datasource"), DATASOURCE, p["title"])
            self.assertTrue(p.get("targets"), f"{p['title']}: no queries")
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for t in p["targets"]:
                self.assertTrue(t.get("expr", "").strip(), f"{p['title']}: a query without expr")
                self.assertEqual(t.get("datasource", DATASOURCE), DATASOURCE, p["title"])

    def test_every_variable_an_expression_uses_is_defined(self):
        defined = {v["name"] for v in self.dash["templating"]["list"]} | GRAFANA_BUILTINS
        texts = [t["expr"] for p in query_panels(self.dash) for t in p["targets"]]
        texts += [v["query"]["query"] for v in self.dash["templating"]["list"]
                  if v["type"] == "query"]
        for text in texts:
            self.assertLessEqual(variable_refs(text), defined, text)

    def test_it_shows_what_operators_asked_for(self):
        exprs = " ".join(t["expr"] for p in query_panels(self.dash) for t in p["targets"])
        for needle in ("ctxguard_budget_used_ratio", 'level="session"', 'level="tenant"',
                       "ctxguard_llm_tokens_total", "ctxguard_compression_tokens_saved_total",
                       "sum by (decision) (rate(ctxguard_budget_decisions_total",
                       "histogram_quantile(0.99, sum by (le, grpc_method) "
                       "(rate(grpc_server_handling_seconds_bucket",
                       "ctxguard_store_call_seconds_bucket", "ctxguard_store_errors_total",
                       'ctxguard_cache_lookups_total{job=~"$job", layer=~"process|redis", '
                       'result="hit"}', "ctxguard_reservations_total",
                       "ctxguard_approvals_total", "ctxguard_approval_oldest_pending_seconds"):
            self.assertTrue(needle in exprs, f"no panel queries {needle}")


class PromQLText(unittest.TestCase):
    """The selector reader the name checks rely on."""

    def test_it_finds_the_metrics_and_only_them(self):
        expr = ('sum by (job, le) (rate(a_bucket{job!="", x=~"}{"}[5m] offset 1m)) '
                '/ on (job) group_left(instance) max without (pod) (b) > bool 0.9 '
                'and c:recorded unless absent(d{e="f"}) + histogram_quantile(0.5, g[1h:5m])'
                ' or {__name__="h"} or topk(3, i) or count_values("le", j) * inf')
        self.assertEqual(promql_text.metric_names(expr),
                         {"a_bucket", "b", "c:recorded", "d", "g", "h", "i", "j"})
        self.assertEqual(promql_text.selectors('a{job!="", x=~"1|2"}'),
                         [("a", [("job", "!=", ""), ("x", "=~", "1|2")])])

    def test_it_refuses_what_it_cannot_read(self):
        with self.assertRaises(promql_text.PromQLTextError):
            promql_text.selectors("a{job ~ 1}")


class MetricNames(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.types, cls.samples = read_exposition()

    def test_the_exposition_is_valid(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.fail("promtool is missing: apt-get install prometheus (scripts/deps.sh)")
        with open(EXPOSITION) as f:
            r = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True,
                               text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for name, _, _ in self.samples:
            self.assertIsNotNone(family_of(name, self.types), f"{name} has no # TYPE")

    def test_the_exposition_has_exactly_the_families_the_server_registers(self):
        registered = registered_families(os.path.join(ROOT, "server"))
        self.assertGreater(len(registered), 20)
        self.assertEqual(sorted(set(self.types) - set(registered)), [],
                         "in metrics_exposition.prom but registered nowhere in server/")
        self.assertEqual(sorted(set(registered) - set(self.types)), [],
                         "registered in server/ but missing from metrics_exposition.prom")
        for name, (kinds, labels) in registered.items():
            self.assertEqual(kinds, {self.types[name]}, f"{name}: type in server/ vs sample")
            if labels is None:
                continue
            have = {k for s, ls, _ in self.samples if family_of(s, self.types) == name
                    for k in ls if k != "le"}
            self.assertEqual(have, labels, f"{name}: label names in server/ vs sample")

    def test_every_metric_of_the_dashboard_and_the_rules_exists(self):
        dash = load_dashboard()
        exprs = [(p["title"], t["expr"]) for p in query_panels(dash) for t in p["targets"]]
        exprs += [(v["name"], label_values_selector(v["query"]["query"])[0])
                  for v in dash["templating"]["list"] if v["type"] == "query"]
        exprs += rule_exprs()
        used = set()
        for where, expr in exprs:
            names = promql_text.metric_names(substitute(expr))
            self.assertTrue(names, f"{where}: no metric in {expr!r}")
            for name in names:
                self.assertIsNotNone(family_of(name, self.types),
                                     f"{where}: {name} is not a metric ctxguard exposes")
            used |= {family_of(n, self.types) for n in names}
        # The dashboard and rules cover ctxguard's own families (process_* are optional).
        self.assertEqual(sorted(f for f in self.types
                                if f not in used and not f.startswith("process_")
                                and f != "grpc_server_started_total"), [])


class PromQLOnARealPrometheus(unittest.TestCase):
    prom = None

    @classmethod
    def setUpClass(cls):
        prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
        if prometheus is None or promtool is None:
            return  # each test fails in setUp
        cls.tmp = tempfile.TemporaryDirectory(prefix="cg-dash-")
        types, samples = read_exposition()
        cls.end = int(time.time()) - 600
        history = os.path.join(cls.tmp.name, "history.om")
        with open(history, "w") as f:
            f.write(openmetrics_history(types, samples, cls.end))
        data = os.path.join(cls.tmp.name, "data")
        r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", history, data],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            cls.tmp.cleanup()
            raise AssertionError(f"promtool create-blocks-from: {r.stdout}{r.stderr}")
        config = os.path.join(cls.tmp.name, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  evaluation_interval: 1m\n")
        try:
            cls.prom = Prometheus(prometheus, data, config)
        except RuntimeError:
            cls.tmp.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.prom is not None:
            cls.prom.stop()
            cls.tmp.cleanup()

    def setUp(self):
        if self.prom is None:
            self.fail("prometheus or promtool is missing: apt-get install prometheus "
                      "(scripts/deps.sh)")

    def query(self, expr):
        return self.prom.api("query", {"query": expr, "time": self.end})

    def test_the_samples_are_loaded(self):
        r = self.query(f'count(ctxguard_build_info{{job="{JOB}"}})')
        self.assertEqual(r["status"], "success", r)
        self.assertEqual(r["data"]["result"][0]["value"][1], str(len(INSTANCES)))

    def test_a_broken_expression_is_refused(self):
        # What every check below relies on: Prometheus says "error" to what does not parse.
        r = self.query("sum(rate(ctxguard_store_errors_total[5m])")
        self.assertEqual((r["status"], r.get("errorType")), ("error", "bad_data"))

    def test_every_panel_query_parses_and_shows_data_with_its_legend_labels(self):
        for p in query_panels(load_dashboard()):
            for t in p["targets"]:
                with self.subTest(panel=p["title"], refId=t["refId"]):
                    expr = substitute(t["expr"])
                    r = self.query(expr)
                    self.assertEqual(r["status"], "success", f"{expr}: {r}")
                    result = r["data"]["result"]
                    self.assertTrue(result, f"no series for {expr}")
                    for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")):
                        for series in result:
                            self.assertIn(label, series["metric"],
                                          f"legend {{{{{label}}}}} of {expr}")

    def test_every_variable_query_finds_values(self):
        for v in load_dashboard()["templating"]["list"]:
            if v["type"] != "query":
                continue
            selector, label = label_values_selector(substitute(v["query"]["query"]))
            r = self.prom.api(f"label/{label}/values",
                              {"match[]": selector, "start": self.end - 600, "end": self.end})
            self.assertEqual(r["status"], "success", r)
            self.assertTrue(r["data"], f"variable {v['name']}: no values")

    def test_every_rule_expression_evaluates(self):
        for name, expr in rule_exprs():
            with self.subTest(rule=name):
                r = self.query(expr)
                self.assertEqual(r["status"], "success", f"{name}: {r}")


if __name__ == "__main__":
    unittest.main()
