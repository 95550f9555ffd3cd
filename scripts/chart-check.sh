#!/usr/bin/env bash
# chart-check.sh - render the Helm chart helm/ctxguard without helm and validate every
# object it produces; `make chart-check` runs it after `scripts/deps.sh chart`.
#
#   1. builds scripts/chart (Go text/template + sprig, as helm renders; Debian's
#      golang-go, golang-github-masterminds-sprig-dev, golang-gopkg-yaml.v3-dev) into
#      build/chart-check/render;
#   2. installs the validator's npm packages (scripts/chart/package-lock.json, exact
#      versions, integrity-checked by `npm ci`) into build/chart-check/node;
#   3. checks that values.schema.json knows exactly the server's config keys;
#   4. for each values file in helm/ctxguard/ci/: the final values against
#      values.schema.json (ajv, draft-07), then the rendered objects against the
#      Kubernetes API schemas (kubernetes-models, @kubernetes-models/prometheus-operator),
#      unknown fields, and the chart's own rules (labels, probes, security context,
#      migrations only in the hook Job, Services pointing at container ports, ...),
#      then the monitoring objects (scripts/chart/monitoring.cjs): the PrometheusRule holds
#      the rules of rules/ctxguard-alerts.yml bound to the release, its groups pass
#      `promtool check rules`, the dashboard ConfigMap holds dashboards/ctxguard.json;
#   5. negative checks: broken values and deliberately broken copies of the chart must
#      each be rejected with the expected message, or this script fails.
#
# Outputs (values.json, manifest.yaml, NOTES.txt per values file) stay in
# build/chart-check/out/ for reading. CHART_CHECK_DIR moves build/chart-check.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CHART=helm/ctxguard
RELEASE=cg
NAMESPACE=ctxguard
START=$(date +%s%N)

for tool in go node npm promtool; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "chart-check: $tool not found: run scripts/deps.sh chart (or make chart-check)" >&2
        exit 1
    fi
done

mkdir -p "${CHART_CHECK_DIR:-build/chart-check}"
WORK=$(cd "${CHART_CHECK_DIR:-build/chart-check}" && pwd)
RENDER=$WORK/render
OUTDIR=$WORK/out
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"

# 1. The renderer, in GOPATH mode against Debian's Go packages (no module download).
echo "chart-check: building the renderer (scripts/chart, Go $(go env GOVERSION))"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS='' GOCACHE="$WORK/go-cache" \
    go build -o "$RENDER" ./scripts/chart

# 2. The validator's packages, reinstalled only when the lockfile or node changes.
NODE_DIR=$WORK/node
STAMP="$(sha256sum scripts/chart/package-lock.json scripts/chart/package.json | sha256sum | cut -c1-16) node $(node --version)"
if [[ ! -d $NODE_DIR/node_modules || "$(cat "$NODE_DIR/.stamp" 2>/dev/null)" != "$STAMP" ]]; then
    echo "chart-check: npm ci (scripts/chart/package-lock.json) into $NODE_DIR"
    rm -rf "$NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp scripts/chart/package.json scripts/chart/package-lock.json "$NODE_DIR/"
    (cd "$NODE_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$STAMP" >"$NODE_DIR/.stamp"
fi
export NODE_PATH=$NODE_DIR/node_modules
VALIDATE=(node scripts/chart/validate.cjs)

# 3. values.schema.json's `config` against server/base/config.h.
"${VALIDATE[@]}" config-keys --schema "$CHART/values.schema.json" --config-h server/base/config.h

# 4. Every CI values file: values, then objects.
check_values() { # DIR VALUES_FILE...
    local dir=$1
    shift
    local files=()
    local f
    for f in "$@"; do files+=(-f "$f"); done
    "$RENDER" "${files[@]}" --name "$RELEASE" --namespace "$NAMESPACE" \
        --values-only --values-out "$dir/values.json" "$CHART" &&
        "${VALIDATE[@]}" values --schema "$CHART/values.schema.json" --values "$dir/values.json"
}

# The rendered PrometheusRule's spec.groups as rules files (DIR/rules/<name>.rules.yml),
# each checked by promtool, and the monitoring objects against the chart's own rules file and
# dashboard (scripts/chart/monitoring.cjs). Run after render_and_validate on DIR.
check_monitoring() { # DIR CHART_DIR
    local dir=$1 chart=$2 files f
    files=$(node scripts/chart/monitoring.cjs --manifest "$dir/manifest.yaml" \
        --values "$dir/values.json" --namespace "$NAMESPACE" \
        --rules-file "$chart/rules/ctxguard-alerts.yml" \
        --dashboard "$chart/dashboards/ctxguard.json" --out "$dir/rules") || return 1
    for f in $files; do
        if ! promtool check rules "$f" >"$f.log" 2>&1; then
            cat "$f.log" >&2
            return 1
        fi
        echo "    promtool check rules: $(grep -o 'SUCCESS: .*' "$f.log") (${f#"$dir"/})"
    done
}

render_and_validate() { # DIR CHART_DIR VALUES_FILE [RENDER FLAGS...]
    local dir=$1 chart=$2 values=$3
    shift 3
    "$RENDER" -f "$values" --name "$RELEASE" --namespace "$NAMESPACE" --debug "$@" \
        --values-out "$dir/values.json" --notes-out "$dir/NOTES.txt" "$chart" >"$dir/manifest.yaml" &&
        "${VALIDATE[@]}" manifests --manifest "$dir/manifest.yaml" --values "$dir/values.json" \
            --release "$RELEASE" --config-h server/base/config.h
}

CASES=0
OBJECTS=0
shopt -s nullglob
VALUES_FILES=("$CHART"/ci/*.yaml)
if ((${#VALUES_FILES[@]} == 0)); then
    echo "chart-check: no values files in $CHART/ci" >&2
    exit 1
fi
for values in "${VALUES_FILES[@]}"; do
    name=$(basename "$values" .yaml)
    dir=$OUTDIR/$name
    mkdir -p "$dir"
    echo "chart-check: ${values#"$CHART"/}"
    if ! check_values "$dir" "$values" || ! render_and_validate "$dir" "$CHART" "$values" ||
        ! check_monitoring "$dir" "$CHART"; then
        echo "chart-check: FAILED on ${values} (outputs in $dir)" >&2
        exit 1
    fi
    if [[ ! -s $dir/NOTES.txt ]]; then
        echo "chart-check: FAILED: NOTES.txt rendered empty for $values" >&2
        exit 1
    fi
    CASES=$((CASES + 1))
    OBJECTS=$((OBJECTS + $(grep -c '^# Source: ' "$dir/manifest.yaml")))
done

# 5. Negative checks: each must be rejected, with its message. A check that cannot fail
#    is a bug, so a broken input that passes fails the whole run.
NEGATIVE=0
expect_rejected() { # DESCRIPTION EXPECTED_MESSAGE COMMAND...
    local what=$1 expected=$2
    shift 2
    local log=$OUTDIR/negative-$NEGATIVE.log
    if "$@" >"$log" 2>&1; then
        echo "chart-check: FAILED: negative check passed a broken input: $what" >&2
        exit 1
    fi
    if ! grep -qF -- "$expected" "$log"; then
        echo "chart-check: FAILED: negative check '$what' failed without the expected message '$expected':" >&2
        sed 's/^/    /' "$log" >&2
        exit 1
    fi
    echo "    rejected as expected: $what: $(grep -F -m1 -- "$expected" "$log" | sed 's/^ *//')"
    NEGATIVE=$((NEGATIVE + 1))
}

# A copy of the chart with one file (a path in the chart) changed by sed; refuses a change
# that did not apply (the check would then prove nothing).
broken_chart_file() { # NAME FILE SED_EXPRESSION
    local dir=$OUTDIR/broken-$1
    rm -rf "$dir"
    mkdir -p "$dir"
    cp -r "$CHART" "$dir/chart"
    sed -i -e "$3" "$dir/chart/$2"
    if cmp -s "$CHART/$2" "$dir/chart/$2"; then
        echo "chart-check: FAILED: the mutation '$3' of $2 changed nothing" >&2
        exit 1
    fi
    echo "$dir"
}

# The same for a template.
broken_chart() { # NAME TEMPLATE SED_EXPRESSION
    broken_chart_file "$1" "templates/$2" "$3"
}

render_and_check_monitoring() { # DIR CHART_DIR VALUES_FILE
    render_and_validate "$1" "$2" "$3" && check_monitoring "$1" "$2"
}

echo "chart-check: negative checks"
NEG=scripts/chart/negative
DEFAULTS=$CHART/ci/default-values.yaml
mkdir -p "$OUTDIR/neg"

expect_rejected "replicaCount: \"two\" (values.schema.json)" "/replicaCount: must be integer" \
    check_values "$OUTDIR/neg" "$DEFAULTS" "$NEG/wrong-type-values.yaml"
expect_rejected "an unknown top-level key (values.schema.json)" "unknown key 'replicas'" \
    check_values "$OUTDIR/neg" "$DEFAULTS" "$NEG/unknown-key-values.yaml"
expect_rejected "a server key the chart sets (config.migrate_on_start)" "/config: unknown key 'migrate_on_start'" \
    check_values "$OUTDIR/neg" "$DEFAULTS" "$NEG/migrate-on-start-values.yaml"
expect_rejected "no PostgreSQL at all (template fail)" "PostgreSQL is required" \
    "$RENDER" --name "$RELEASE" "$CHART"
expect_rejected "Kubernetes 1.23 (Chart.yaml kubeVersion)" "incompatible with Kubernetes v1.23.0" \
    "$RENDER" -f "$DEFAULTS" --kube-version v1.23.0 "$CHART"

b=$(broken_chart port-type deployment.yaml 's/containerPort: {{ .Values.grpcPort }}/containerPort: "{{ .Values.grpcPort }}"/')
expect_rejected "a containerPort rendered as a string (Kubernetes schema)" "containerPort must be integer" \
    render_and_validate "$b" "$b/chart" "$DEFAULTS"
b=$(broken_chart unknown-field deployment.yaml 's/^\(      \)automountServiceAccountToken:/\1automountServiceAccountTokens:/')
expect_rejected "a misspelt pod field (unknown field)" "/spec/template/spec/automountServiceAccountTokens: unknown field" \
    render_and_validate "$b" "$b/chart" "$DEFAULTS"
b=$(broken_chart migrating-replicas deployment.yaml '/name: CTXGUARD_MIGRATE_ON_START/{n;s/"false"/"true"/}')
expect_rejected "replicas that migrate" "replicas must not migrate" \
    render_and_validate "$b" "$b/chart" "$DEFAULTS"
b=$(broken_chart no-readiness deployment.yaml 's/^\(          \)readinessProbe:/\1readinessProbeOff:/')
expect_rejected "a server without a readiness probe" "has no readinessProbe" \
    render_and_validate "$b" "$b/chart" "$DEFAULTS"
b=$(broken_chart secret-not-hook migrations-secret.yaml '/helm.sh\/hook: pre-install,pre-upgrade/d')
expect_rejected "a migration Job reading a Secret that pre-install has not made" "does not exist yet at pre-install" \
    render_and_validate "$b" "$b/chart" "$DEFAULTS"
b=$(broken_chart long-name service.yaml 's/^  name: {{ include "ctxguard.suffixedName" (dict "ctx" . "suffix" "headless") }}$/  name: {{ include "ctxguard.fullname" . }}-headless/')
expect_rejected "a Service name over 63 characters" "a Service name must be a DNS-1035 label of at most 63 characters" \
    render_and_validate "$b" "$b/chart" "$CHART/ci/existing-secret-values.yaml"
b=$(broken_chart wrong-target-port service.yaml '0,/targetPort: grpc/s//targetPort: grcp/')
expect_rejected "a Service port aimed at no container port" "targetPort grcp is not a port of the container" \
    render_and_validate "$b" "$b/chart" "$DEFAULTS"

FULL=$CHART/ci/full-values.yaml
b=$(broken_chart_file unbound-rule rules/ctxguard-alerts.yml 's/(ctxguard_pool_queued_jobs{job!=""})/(ctxguard_pool_queued_jobs)/')
expect_rejected "an alert rule the chart cannot bind to the release" 'CtxguardPoolBacklog has no job!="" matcher' \
    render_and_check_monitoring "$b" "$b/chart" "$FULL"
b=$(broken_chart_file bad-promql rules/ctxguard-alerts.yml 's/(ctxguard_pool_queued_jobs{job!=""}) > 64/(ctxguard_pool_queued_jobs{job!=""}) > > 64/')
expect_rejected "an alert rule that is not PromQL (promtool check rules)" "could not parse expression" \
    render_and_check_monitoring "$b" "$b/chart" "$FULL"
b=$(broken_chart rules-for-every-job prometheusrule.yaml 's/(replace `job!=""` $sel .expr)/.expr/')
expect_rejected "default rules not bound to the release's job" 'expr still reads every job' \
    render_and_check_monitoring "$b" "$b/chart" "$FULL"
b=$(broken_chart stale-dashboard grafana-dashboard.yaml 's|\.Files\.Get "dashboards/ctxguard.json"|& \| replace "ctxguard_" "cg_"|')
expect_rejected "a dashboard ConfigMap that is not the chart's dashboard" "dashboards/ctxguard.json byte for byte" \
    render_and_check_monitoring "$b" "$b/chart" "$FULL"
b=$(broken_chart_file ignored-dashboard .helmignore '$a dashboards/')
expect_rejected "a dashboard that .helmignore leaves out of the chart" "dashboards/ctxguard.json is missing from the chart" \
    render_and_check_monitoring "$b" "$b/chart" "$FULL"

ELAPSED=$((($(date +%s%N) - START) / 1000000))
printf 'chart-check: OK: %d values files, %d objects valid, %d negative checks rejected as expected (%d.%03d s)\n' \
    "$CASES" "$OBJECTS" "$NEGATIVE" $((ELAPSED / 1000)) $((ELAPSED % 1000))
