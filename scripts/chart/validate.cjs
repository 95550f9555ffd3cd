#!/usr/bin/env node
// validate.cjs - checks what scripts/chart/render produced, for scripts/chart-check.sh.
//
//   validate.cjs values     --schema values.schema.json --values values.json
//       the final values against the chart's JSON Schema (draft-07, ajv), as helm
//       checks them before it renders anything;
//   validate.cjs manifests  --manifest out.yaml --values values.json --release NAME
//                           --config-h server/base/config.h
//       every rendered object against the Kubernetes API schemas of kubernetes-models
//       (and @kubernetes-models/prometheus-operator for monitoring.coreos.com/v1), plus
//       unknown fields, plus the checks a reviewer of this chart would make by hand;
//   validate.cjs config-keys --schema values.schema.json --config-h server/base/config.h
//       values.schema.json's `config` keys against the server's configuration table.
//
// The packages come from NODE_PATH (chart-check.sh installs them with `npm ci` outside
// the source tree). Exit status 1 with the reasons on stderr when anything fails.
"use strict";

const fs = require("fs");

function args(argv) {
  const out = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith("--")) out[argv[i].slice(2)] = argv[++i];
    else out._.push(argv[i]);
  }
  return out;
}

function fail(lines) {
  for (const l of lines) process.stderr.write(`  ${l}\n`);
  process.exit(1);
}

// ---------------------------------------------------------------- values.schema.json

function checkValues(a) {
  const Ajv = require("ajv"); // ajv's default export validates JSON Schema draft-07
  const schema = JSON.parse(fs.readFileSync(a.schema, "utf8"));
  const values = JSON.parse(fs.readFileSync(a.values, "utf8"));
  const ajv = new Ajv({ allErrors: true, strict: true });
  const validate = ajv.compile(schema);
  if (validate(values)) return;
  fail(
    ["values don't meet the specifications of values.schema.json:"].concat(
      validate.errors.map((e) => {
        const where = e.instancePath || "(top level)";
        if (e.keyword === "additionalProperties")
          return `${where}: unknown key '${e.params.additionalProperty}'`;
        return `${where}: ${e.message}`;
      })
    )
  );
}

// ---------------------------------------------------------------- config.h keys

// Rows of CG_CONFIG_TABLE: XX(key, TYPE, default, min, max, choices, help).
function configTable(path) {
  const src = fs.readFileSync(path, "utf8");
  const row = /XX\((\w+),\s*(\w+),\s*("(?:[^"\\]|\\.)*"|\w+),\s*(-?\d+),\s*(-?\d+),\s*(NULL|"[^"]*")/g;
  const keys = new Map();
  for (const m of src.matchAll(row)) {
    keys.set(m[1], { type: m[2], min: Number(m[4]), max: Number(m[5]), choices: m[6] === "NULL" ? null : m[6].slice(1, -1).split("|") });
  }
  if (keys.size < 10) throw new Error(`${path}: found only ${keys.size} configuration keys`);
  return keys;
}

// Keys the chart sets itself; values.schema.json must refuse them in `config`.
// (http_listen: metrics.enabled and metrics.port.)
const CHART_OWNED = ["listen", "pg_dsn", "redis_url", "admin_key", "migrate_on_start", "llm_api_key", "tls_cert", "tls_key", "tls_client_ca", "http_listen"];

function checkConfigKeys(a) {
  const table = configTable(a["config-h"]);
  const schema = JSON.parse(fs.readFileSync(a.schema, "utf8"));
  const props = schema.properties.config.properties;
  const errs = [];
  if (schema.properties.config.additionalProperties !== false) errs.push("config must refuse unknown keys (additionalProperties: false)");
  for (const [key, t] of table) {
    const p = props[key];
    if (CHART_OWNED.includes(key)) {
      if (p) errs.push(`config.${key} is set by the chart but values.schema.json accepts it`);
      continue;
    }
    if (!p) {
      errs.push(`config.${key} (server/base/config.h) is missing from values.schema.json`);
      continue;
    }
    const want = { INT: "integer", DOUBLE: "number", BOOL: "boolean" }[t.type] || "string";
    if (p.type !== want) errs.push(`config.${key}: type ${p.type}, config.h says ${t.type} (${want})`);
    if ((t.type === "INT" || t.type === "DOUBLE") && (p.minimum !== t.min || p.maximum !== t.max))
      errs.push(`config.${key}: bounds ${p.minimum}..${p.maximum}, config.h says ${t.min}..${t.max}`);
    if (t.type === "ENUM" && JSON.stringify(p.enum) !== JSON.stringify(t.choices))
      errs.push(`config.${key}: enum ${JSON.stringify(p.enum)}, config.h says ${JSON.stringify(t.choices)}`);
  }
  for (const key of Object.keys(props)) if (!table.has(key)) errs.push(`config.${key} is in values.schema.json but not in server/base/config.h`);
  for (const key of CHART_OWNED) if (!table.has(key)) errs.push(`chart-owned key ${key} is not in server/base/config.h`);
  if (errs.length) fail(["values.schema.json's config keys differ from server/base/config.h:"].concat(errs));
  console.log(`config keys: ${Object.keys(props).length} settable + ${CHART_OWNED.length} set by the chart = ${table.size} keys of server/base/config.h`);
}

// ---------------------------------------------------------------- Kubernetes schemas

// The kubernetes-models class of an object, e.g. apps/v1 Deployment ->
// require("kubernetes-models/apps/v1/Deployment").Deployment.
function modelClass(apiVersion, kind) {
  // The core group's apiVersion is "v1": kubernetes-models/v1/Service.
  const candidates = [`kubernetes-models/${apiVersion}/${kind}`, `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`];
  for (const mod of candidates) {
    let exp;
    try {
      exp = require(mod);
    } catch (e) {
      if (e.code === "MODULE_NOT_FOUND" || e.code === "ERR_PACKAGE_PATH_NOT_EXPORTED") continue;
      throw e;
    }
    const cls = exp[kind];
    if (cls && cls.apiVersion === apiVersion && cls.kind === kind) return cls;
  }
  return null;
}

// The models' validators are compiled JSON Schemas of the Kubernetes OpenAPI, which
// does not forbid unknown fields (the API server refuses them on strict field
// validation, helm's client-side validation too). A validator reads every property its
// schema knows of an object, so we let it validate through proxies that record which
// keys it reads: a key of a typed object that it never read is unknown. Objects whose
// keys it enumerated are maps (labels, annotations...), those it never touched are
// free-form: both are skipped.
function trackedValidate(cls, obj) {
  const nodes = [];
  const proxies = new WeakMap();
  const wrap = (v, path) => {
    if (v === null || typeof v !== "object") return v;
    if (proxies.has(v)) return proxies.get(v);
    const info = { path, obj: v, read: new Set(), enumerated: false };
    nodes.push(info);
    const p = new Proxy(v, {
      get(t, k, r) {
        if (typeof k !== "string") return Reflect.get(t, k, r);
        info.read.add(k);
        const x = Reflect.get(t, k, r);
        return Object.prototype.hasOwnProperty.call(t, k) ? wrap(x, `${path}/${k}`) : x;
      },
      has(t, k) {
        if (typeof k === "string") info.read.add(k);
        return Reflect.has(t, k);
      },
      ownKeys(t) {
        info.enumerated = true;
        return Reflect.ownKeys(t);
      },
    });
    proxies.set(v, p);
    return p;
  };
  const model = new cls(obj);
  const errors = [];
  try {
    cls.prototype.validate.call(wrap(model, ""));
  } catch (e) {
    errors.push(e.message.replace(/^data/, "").split(", data").join("\n      "));
  }
  for (const n of nodes) {
    if (Array.isArray(n.obj) || n.enumerated || n.read.size === 0) continue;
    for (const k of Object.keys(n.obj)) if (!n.read.has(k)) errors.push(`${n.path}/${k}: unknown field`);
  }
  return errors;
}

// ---------------------------------------------------------------- rendered manifests

function readManifests(path) {
  const YAML = require("yaml");
  const text = fs.readFileSync(path, "utf8");
  const out = [];
  // The renderer's (and helm template's) stream: documents after "---" lines, each
  // introduced by "# Source: <template>".
  for (const chunk of text.split(/^---[ \t]*$/m)) {
    if (!chunk.trim()) continue;
    const m = chunk.match(/^# Source: (.*)$/m);
    const source = m ? m[1] : "?";
    // YAML 1.1, as the Kubernetes tools read manifests (yes/no/on/off are booleans);
    // duplicate keys are errors.
    const docs = YAML.parseAllDocuments(chunk, { version: "1.1", uniqueKeys: true });
    for (const doc of docs) {
      if (doc.errors.length) throw new Error(`${source}: ${doc.errors.map((e) => e.message).join("; ")}`);
      const obj = doc.toJS();
      if (obj !== null && obj !== undefined) out.push({ source, obj });
    }
  }
  return out;
}

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;

const matches = (selector, labels) =>
  !!selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => (labels || {})[k] === v);

const get = (o, path) => path.split(".").reduce((x, k) => (x == null ? undefined : x[k]), o);

function checkManifests(a) {
  const values = JSON.parse(fs.readFileSync(a.values, "utf8"));
  const release = a.release;
  const table = configTable(a["config-h"]);
  const items = readManifests(a.manifest);
  const errs = [];
  const notes = [];
  const counts = {};
  const err = (it, msg) => errs.push(`${it.obj.kind || "?"} ${get(it.obj, "metadata.name") || "?"} (${it.source}): ${msg}`);

  // 1. Every object against its API schema, unknown fields included.
  const seen = new Set();
  for (const it of items) {
    const { apiVersion, kind } = it.obj;
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      err(it, "no apiVersion/kind");
      continue;
    }
    const cls = modelClass(apiVersion, kind);
    if (!cls) {
      err(it, `no schema for ${apiVersion} ${kind}`);
      continue;
    }
    for (const e of trackedValidate(cls, it.obj)) err(it, e);
    counts[kind] = (counts[kind] || 0) + 1;
    const name = get(it.obj, "metadata.name");
    if (typeof name !== "string" || !DNS1123_SUBDOMAIN.test(name) || name.length > 253) err(it, `metadata.name ${JSON.stringify(name)} is not a DNS-1123 name`);
    if (kind === "Service" && !(DNS1035_LABEL.test(name) && name.length <= 63)) err(it, `a Service name must be a DNS-1035 label of at most 63 characters`);
    if (kind === "Job" && name.length > 63) err(it, "a Job name must fit a label value (63 characters): its pods are labelled with it");
    const id = `${kind}/${get(it.obj, "metadata.namespace") || ""}/${name}`;
    if (seen.has(id)) err(it, "rendered twice");
    seen.add(id);
  }

  // 2. The release's labels on every object.
  for (const it of items) {
    const l = get(it.obj, "metadata.labels") || {};
    if (l["app.kubernetes.io/instance"] !== release) err(it, `label app.kubernetes.io/instance must be ${release}`);
    if (l["app.kubernetes.io/managed-by"] !== "Helm") err(it, "label app.kubernetes.io/managed-by must be Helm");
    for (const k of ["app.kubernetes.io/name", "app.kubernetes.io/version", "helm.sh/chart"]) if (!l[k]) err(it, `label ${k} is missing`);
  }

  const of = (kind) => items.filter((it) => it.obj.kind === kind);
  const deployments = of("Deployment");
  const jobs = of("Job");
  const isHook = (it) => !!get(it.obj, "metadata.annotations")?.["helm.sh/hook"];
  const hookEvents = (it) => (get(it.obj, "metadata.annotations")?.["helm.sh/hook"] || "").split(",").map((s) => s.trim());
  const hookWeight = (it) => Number(get(it.obj, "metadata.annotations")?.["helm.sh/hook-weight"] || 0);

  // 3. Pods: security context, resources, an emptyDir /tmp.
  const checkPod = (it, podSpec) => {
    const psc = podSpec.securityContext || {};
    if (psc.runAsNonRoot !== true) err(it, "pod securityContext.runAsNonRoot must be true");
    if (!(Number.isInteger(psc.runAsUser) && psc.runAsUser > 0)) err(it, "pod securityContext.runAsUser must be a non-root uid");
    if (get(psc, "seccompProfile.type") !== "RuntimeDefault") err(it, "pod seccompProfile must be RuntimeDefault");
    if (podSpec.automountServiceAccountToken !== false) err(it, "the pod must not mount a service account token (the server never calls the API)");
    for (const c of podSpec.containers || []) {
      const sc = c.securityContext || {};
      if (sc.readOnlyRootFilesystem !== true) err(it, `container ${c.name}: readOnlyRootFilesystem must be true`);
      if (sc.allowPrivilegeEscalation !== false) err(it, `container ${c.name}: allowPrivilegeEscalation must be false`);
      if (!(get(sc, "capabilities.drop") || []).includes("ALL")) err(it, `container ${c.name}: capabilities must drop ALL`);
      if (sc.runAsNonRoot === false || sc.runAsUser === 0) err(it, `container ${c.name}: must not run as root`);
      if (!get(c, "resources.requests.cpu") || !get(c, "resources.requests.memory") || !get(c, "resources.limits.memory"))
        err(it, `container ${c.name}: resources need cpu and memory requests and a memory limit`);
      const tmp = (c.volumeMounts || []).find((m) => m.mountPath === "/tmp");
      const vol = tmp && (podSpec.volumes || []).find((v) => v.name === tmp.name);
      if (!vol || !vol.emptyDir) err(it, `container ${c.name}: /tmp must be an emptyDir (the root filesystem is read-only)`);
      const names = (c.env || []).map((e) => e.name);
      for (const n of names.filter((n, i) => names.indexOf(n) !== i)) err(it, `container ${c.name}: env ${n} is set twice`);
      for (const n of names.filter((n) => n.startsWith("CTXGUARD_"))) {
        const key = n.slice("CTXGUARD_".length).toLowerCase();
        if (!table.has(key)) err(it, `container ${c.name}: ${n} is not a key of server/base/config.h (the server refuses to start)`);
      }
    }
  };

  // 4. The server: one Deployment, probes, never migrating.
  if (deployments.length !== 1) errs.push(`expected 1 Deployment, found ${deployments.length}`);
  const dep = deployments[0];
  const podLabels = get(dep?.obj, "spec.template.metadata.labels") || {};
  let containerPorts = [];
  if (dep) {
    const spec = dep.obj.spec;
    const pod = spec.template.spec;
    checkPod(dep, pod);
    if (!matches(spec.selector.matchLabels, podLabels)) err(dep, "spec.selector does not select its own pods");
    const c = pod.containers.find((x) => x.name === "ctxguard");
    if (!c) err(dep, "no container named ctxguard");
    else {
      containerPorts = c.ports || [];
      const grpc = containerPorts.find((p) => p.name === "grpc");
      if (!grpc) err(dep, "container ctxguard has no port named grpc");
      const env = Object.fromEntries((c.env || []).map((e) => [e.name, e]));
      const tls = !!env.CTXGUARD_TLS_CERT;
      for (const [probe, service] of [["startupProbe", "liveness"], ["readinessProbe", ""], ["livenessProbe", "liveness"]]) {
        const p = c[probe];
        if (!p) err(dep, `container ctxguard has no ${probe}`);
        else if (p.grpc) {
          if (tls) err(dep, `${probe}: a gRPC probe cannot reach a TLS port`);
          if (!grpc || p.grpc.port !== grpc.containerPort) err(dep, `${probe}: gRPC probe port ${p.grpc.port} is not the grpc port`);
          if ((p.grpc.service || "") !== service) err(dep, `${probe}: health service must be "${service}"`);
        } else if (p.tcpSocket) {
          if (!tls) err(dep, `${probe}: without TLS the probe must be gRPC`);
        } else err(dep, `${probe}: must be a grpc (or, with TLS, tcpSocket) probe`);
      }
      if (get(env, "CTXGUARD_MIGRATE_ON_START.value") !== "false") err(dep, "replicas must not migrate: CTXGUARD_MIGRATE_ON_START must be \"false\"");
      if ([...(c.command || []), ...(c.args || [])].includes("migrate")) err(dep, "replicas must not run `ctxguard migrate`");
      if (!env.CTXGUARD_PG_DSN) err(dep, "no CTXGUARD_PG_DSN");
      if (get(env, "CTXGUARD_LISTEN.value") !== `0.0.0.0:${grpc && grpc.containerPort}`) err(dep, "CTXGUARD_LISTEN must be the grpc port on all addresses");
    }
    const hpa = of("HorizontalPodAutoscaler");
    if (hpa.length) {
      if (spec.replicas !== undefined) err(dep, "with an HPA the Deployment must not set replicas (each upgrade would reset the count)");
      for (const h of hpa) if (get(h.obj, "spec.scaleTargetRef.name") !== dep.obj.metadata.name || get(h.obj, "spec.scaleTargetRef.kind") !== "Deployment") err(h, "scaleTargetRef is not the Deployment");
    } else if (values.autoscaling?.enabled) errs.push("autoscaling.enabled but no HorizontalPodAutoscaler");
  }

  // 5. The migration Job: a pre-install and pre-upgrade hook whose pods no Service,
  //    PDB or Deployment selects, and whose chart-made Secrets exist before it does.
  const migrateJobs = jobs.filter((j) => (j.obj.spec?.template?.spec?.containers || []).some((c) => [...(c.command || []), ...(c.args || [])].includes("migrate")));
  if (values.migrations?.enabled && migrateJobs.length !== 1) errs.push(`migrations.enabled: expected 1 migration Job, found ${migrateJobs.length}`);
  if (!values.migrations?.enabled && migrateJobs.length) errs.push("migrations.enabled is false but a migration Job is rendered");
  for (const j of jobs) {
    const pod = j.obj.spec.template.spec;
    checkPod(j, pod);
    const ev = hookEvents(j);
    if (!ev.includes("pre-install") || !ev.includes("pre-upgrade")) err(j, "must be a helm hook on pre-install and pre-upgrade");
    if (!["Never", "OnFailure"].includes(pod.restartPolicy)) err(j, "restartPolicy must be Never or OnFailure");
    const labels = get(j.obj, "spec.template.metadata.labels") || {};
    if (dep && matches(dep.obj.spec.selector.matchLabels, labels)) err(j, "its pods match the Deployment's selector (Services would route to them)");
    for (const c of pod.containers) {
      for (const e of c.env || []) {
        const ref = get(e, "valueFrom.secretKeyRef.name");
        const made = ref && of("Secret").find((s) => s.obj.metadata.name === ref);
        if (!made) continue;
        if (!isHook(made) || !hookEvents(made).includes("pre-install") || hookWeight(made) >= hookWeight(j))
          err(j, `reads Secret ${ref}, which does not exist yet at pre-install (it must be a pre-install hook of lower weight)`);
        else if (!(made.obj.data || {})[e.valueFrom.secretKeyRef.key] && !e.valueFrom.secretKeyRef.optional)
          err(j, `Secret ${ref} has no key ${e.valueFrom.secretKeyRef.key}`);
      }
    }
  }

  // 6. Services, PDB, NetworkPolicy, ServiceMonitor point at what exists.
  const portOf = (target) => containerPorts.find((p) => (typeof target === "string" ? p.name === target : p.containerPort === target));
  for (const s of of("Service")) {
    if (!matches(s.obj.spec.selector, podLabels)) err(s, "its selector does not select the Deployment's pods");
    for (const p of s.obj.spec.ports || []) {
      const target = p.targetPort === undefined ? p.port : p.targetPort;
      if (!portOf(target)) err(s, `port ${p.name}: targetPort ${target} is not a port of the container`);
    }
    for (const j of jobs) if (matches(s.obj.spec.selector, get(j.obj, "spec.template.metadata.labels"))) err(s, `selects the pods of Job ${j.obj.metadata.name}`);
  }
  for (const p of of("PodDisruptionBudget")) {
    if (!matches(get(p.obj, "spec.selector.matchLabels"), podLabels)) err(p, "its selector does not select the Deployment's pods");
    if ((p.obj.spec.minAvailable === undefined) === (p.obj.spec.maxUnavailable === undefined)) err(p, "needs exactly one of minAvailable and maxUnavailable");
  }
  for (const n of of("NetworkPolicy")) {
    if (!matches(get(n.obj, "spec.podSelector.matchLabels"), podLabels)) err(n, "does not apply to the Deployment's pods");
    const ingressPorts = (n.obj.spec.ingress || []).flatMap((r) => (r.ports || []).map((p) => p.port));
    if (!ingressPorts.some((p) => portOf(p)?.name === "grpc")) err(n, "does not let clients reach the grpc port");
    const egressPorts = (n.obj.spec.egress || []).flatMap((r) => (r.ports || []).map((p) => p.port));
    if (!egressPorts.includes(53)) err(n, "blocks DNS");
  }
  for (const m of of("ServiceMonitor")) {
    const svcs = of("Service").filter((s) => matches(get(m.obj, "spec.selector.matchLabels"), s.obj.metadata.labels));
    if (!svcs.length) err(m, "selects no Service of the release");
    for (const ep of m.obj.spec.endpoints || [])
      if (!svcs.some((s) => (s.obj.spec.ports || []).some((p) => p.name === ep.port))) err(m, `no selected Service has a port named ${ep.port}`);
  }

  if (errs.length) fail(errs);
  for (const n of new Set(notes)) console.log(`    note: ${n}`);
  const kinds = Object.entries(counts)
    .sort()
    .map(([k, n]) => `${k} ${n}`)
    .join(", ");
  console.log(`    ${items.length} objects valid (${kinds})`);
}

const a = args(process.argv.slice(2));
try {
  switch (a._[0]) {
    case "values":
      checkValues(a);
      break;
    case "manifests":
      checkManifests(a);
      break;
    case "config-keys":
      checkConfigKeys(a);
      break;
    default:
      console.error("usage: validate.cjs values|manifests|config-keys ...");
      process.exit(2);
  }
} catch (e) {
  fail([e.message]);
}
