#!/usr/bin/env node
// monitoring.cjs - checks the chart's monitoring objects against the files they are made
// from, for scripts/chart-check.sh:
//
//   monitoring.cjs --manifest out.yaml --values values.json --namespace NS
//                  --rules-file helm/ctxguard/rules/ctxguard-alerts.yml
//                  --dashboard helm/ctxguard/dashboards/ctxguard.json --out DIR
//
//   - writes the spec.groups of each PrometheusRule to DIR/<name>.rules.yml (a rules file
//     for `promtool check rules`) and prints each path on stdout;
//   - with prometheusRule.defaultRules, the PrometheusRule holds every group of the rules
//     file as "<name>-<group>", rule for rule the same, except that each `job!=""` of an
//     expr is the release's `job="<name>", namespace="<NS>"`; without it, none of them;
//   - with grafanaDashboard.enabled, exactly one ConfigMap labelled grafana_dashboard: "1"
//     holds the dashboard file byte for byte, under its base name.
//
// The packages come from NODE_PATH, as for validate.cjs. Exit status 1 with the reasons on
// stderr when anything differs.
"use strict";

const fs = require("fs");
const path = require("path");
const YAML = require("yaml");

function args(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const k of ["manifest", "values", "namespace", "rules-file", "dashboard", "out"])
    if (!out[k]) throw new Error(`--${k} is required`);
  return out;
}

function objects(manifest) {
  const out = [];
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(manifest, "utf8"), { version: "1.1", uniqueKeys: true })) {
    if (doc.errors.length) throw new Error(doc.errors.map((e) => e.message).join("; "));
    const obj = doc.toJS();
    if (obj) out.push(obj);
  }
  return out;
}

const same = (a, b) => JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
function sorted(v) {
  if (Array.isArray(v)) return v.map(sorted);
  if (v && typeof v === "object") return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]));
  return v;
}

function checkRules(a, values, objs, errs) {
  const file = YAML.parse(fs.readFileSync(a["rules-file"], "utf8"), { version: "1.1" });
  const rules = objs.filter((o) => o.kind === "PrometheusRule");
  const pr = values.prometheusRule || {};
  if (pr.enabled && rules.length !== 1) errs.push(`prometheusRule.enabled: expected 1 PrometheusRule, found ${rules.length}`);
  if (!pr.enabled && rules.length) errs.push("prometheusRule.enabled is false but a PrometheusRule is rendered");
  fs.mkdirSync(a.out, { recursive: true });
  for (const r of rules) {
    const name = r.metadata.name;
    const groups = (r.spec && r.spec.groups) || [];
    const out = path.join(a.out, `${name}.rules.yml`);
    fs.writeFileSync(out, YAML.stringify({ groups }));
    console.log(out);
    const names = groups.map((g) => g.name);
    for (const n of names.filter((n, i) => names.indexOf(n) !== i)) errs.push(`PrometheusRule ${name}: group ${n} appears twice`);
    const bound = `job="${name}", namespace="${a.namespace}"`;
    for (const fg of file.groups) {
      const g = groups.find((x) => x.name === `${name}-${fg.name}`);
      if (!pr.defaultRules) {
        if (g) errs.push(`PrometheusRule ${name}: defaultRules is false but group ${g.name} of the rules file is there`);
        continue;
      }
      if (!g) {
        errs.push(`PrometheusRule ${name}: no group ${name}-${fg.name} (rules file group ${fg.name})`);
        continue;
      }
      if (g.rules.length !== fg.rules.length) errs.push(`PrometheusRule ${name}: group ${g.name} has ${g.rules.length} rules, the rules file ${fg.rules.length}`);
      fg.rules.forEach((want, i) => {
        const got = g.rules[i];
        const what = `PrometheusRule ${name}: ${want.alert || want.record}`;
        if (!got) return;
        if (got.expr.includes('job!=""')) errs.push(`${what}: expr still reads every job (job!="" not bound to the release)`);
        const unbound = { ...got, expr: got.expr.split(bound).join('job!=""') };
        if (!same(unbound, want)) errs.push(`${what}: differs from the rules file:\n      rendered ${JSON.stringify(got)}\n      file     ${JSON.stringify(want)}`);
      });
    }
  }
}

function checkDashboard(a, values, objs, errs) {
  const maps = objs.filter((o) => o.kind === "ConfigMap" && ((o.metadata || {}).labels || {}).grafana_dashboard === "1");
  const enabled = !!(values.grafanaDashboard || {}).enabled;
  if (!enabled) {
    if (maps.length) errs.push("grafanaDashboard.enabled is false but a dashboard ConfigMap is rendered");
    return;
  }
  if (maps.length !== 1) {
    errs.push(`grafanaDashboard.enabled: expected 1 ConfigMap labelled grafana_dashboard: "1", found ${maps.length}`);
    return;
  }
  const key = path.basename(a.dashboard);
  const want = fs.readFileSync(a.dashboard, "utf8");
  const got = (maps[0].data || {})[key];
  if (got === undefined) errs.push(`ConfigMap ${maps[0].metadata.name}: no key ${key}`);
  else if (got !== want) errs.push(`ConfigMap ${maps[0].metadata.name}: ${key} is not ${a.dashboard} byte for byte`);
}

try {
  const a = args(process.argv.slice(2));
  const values = JSON.parse(fs.readFileSync(a.values, "utf8"));
  const objs = objects(a.manifest);
  const errs = [];
  checkRules(a, values, objs, errs);
  checkDashboard(a, values, objs, errs);
  if (errs.length) {
    for (const e of errs) process.stderr.write(`  ${e}\n`);
    process.exit(1);
  }
} catch (e) {
  process.stderr.write(`  ${e.message}\n`);
  process.exit(1);
}
