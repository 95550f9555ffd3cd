{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "ctxguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; the release name alone when it already contains the chart's. */}}
{{- define "ctxguard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* fullname-SUFFIX within 63 characters (Service names and a Job's pod labels must fit
     a DNS label). Args: dict "ctx" (the root) "suffix". */}}
{{- define "ctxguard.suffixedName" -}}
{{- $base := include "ctxguard.fullname" .ctx | trunc (int (sub 62 (len .suffix))) | trimSuffix "-" }}
{{- printf "%s-%s" $base .suffix }}
{{- end }}

{{- define "ctxguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Every pod of the release, server and migration Job (NetworkPolicy). */}}
{{- define "ctxguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ctxguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The server's pods only: Deployment, Services, PDB, topology spread. The migration
     Job's pods carry component "migrations", so no Service ever routes to them. */}}
{{- define "ctxguard.serverSelectorLabels" -}}
{{ include "ctxguard.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end }}

{{/* Labels of every object (a component label is added by each template). */}}
{{- define "ctxguard.labels" -}}
helm.sh/chart: {{ include "ctxguard.chart" . }}
{{ include "ctxguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ctxguard
{{- end }}

{{- define "ctxguard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{- define "ctxguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ctxguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding admin-key, pg-dsn and redis-url. */}}
{{- define "ctxguard.secretName" -}}
{{- default (include "ctxguard.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/* The replica count a PodDisruptionBudget protects: the HPA's floor when it owns the count. */}}
{{- define "ctxguard.minReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ int .Values.autoscaling.minReplicas }}{{ else }}{{ int .Values.replicaCount }}{{ end }}
{{- end }}

{{/* Seconds Kubernetes waits after SIGTERM: more than the server's shutdown grace plus
     the preStop pause, or the kubelet would kill calls the server still drains. */}}
{{- define "ctxguard.terminationGracePeriodSeconds" -}}
{{- $graceMs := int (default 10000 .Values.config.shutdown_grace_ms) }}
{{- $pre := int (default 0 .Values.preStopSleepSeconds) }}
{{- $needMs := add $graceMs (mul $pre 1000) }}
{{- if .Values.terminationGracePeriodSeconds }}
{{- $t := int .Values.terminationGracePeriodSeconds }}
{{- if le (mul $t 1000) $needMs }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed config.shutdown_grace_ms (%d ms) + preStopSleepSeconds (%d s)" $t $graceMs $pre) }}
{{- end }}
{{- $t }}
{{- else }}
{{- add (div (add $graceMs 999) 1000) $pre 5 }}
{{- end }}
{{- end }}

{{/* One probe. Args: dict "p" (its values), "port" (the gRPC port), "tls". gRPC probes
     are plaintext, so with TLS the probe checks the port's TCP handshake instead. */}}
{{- define "ctxguard.probe" -}}
{{- if .tls }}
tcpSocket:
  port: grpc
{{- else }}
grpc:
  port: {{ .port }}
  service: {{ .p.service | quote }}
{{- end }}
{{- with .p.initialDelaySeconds }}
initialDelaySeconds: {{ . }}
{{- end }}
periodSeconds: {{ .p.periodSeconds }}
timeoutSeconds: {{ .p.timeoutSeconds }}
failureThreshold: {{ .p.failureThreshold }}
{{- with .p.successThreshold }}
successThreshold: {{ . }}
{{- end }}
{{- end }}

{{/* Values as the CTXGUARD_<KEY> text the server parses: a whole number in YAML reaches
     the template as a float (8388608 would print as 8.388608e+06), so it is printed as
     an integer. */}}
{{- define "ctxguard.configEnv" -}}
{{- range $key, $value := .Values.config }}
{{- $text := toString $value }}
{{- if and (kindIs "float64" $value) (eq (float64 (int64 $value)) $value) }}
{{- $text = toString (int64 $value) }}
{{- end }}
- name: {{ printf "CTXGUARD_%s" ($key | upper) }}
  value: {{ $text | quote }}
{{- end }}
{{- end }}

{{/* PostgreSQL settings of the server and of the migration Job. Arg: dict "ctx" (the
     root), "secret" (the Secret holding pg-dsn when no host is given). */}}
{{- define "ctxguard.pgEnv" -}}
{{- $v := .ctx.Values }}
{{- if $v.postgresql.host }}
{{- with $v.postgresql.passwordSecret }}
{{- if .name }}
# libpq reads the password from PGPASSWORD when the DSN has none.
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ required "postgresql.passwordSecret.key is required with postgresql.passwordSecret.name" .key }}
{{- end }}
{{- end }}
- name: CTXGUARD_PG_DSN
  value: {{ printf "postgresql://%s@%s:%d/%s?sslmode=%s" $v.postgresql.user $v.postgresql.host (int $v.postgresql.port) $v.postgresql.database $v.postgresql.sslmode | quote }}
{{- else }}
- name: CTXGUARD_PG_DSN
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ $v.secrets.keys.pgDsn }}
{{- end }}
{{- end }}

{{/* The PostgreSQL port the NetworkPolicy opens. */}}
{{- define "ctxguard.pgPort" -}}
{{- int (default .Values.postgresql.port .Values.networkPolicy.egress.postgresql.port) }}
{{- end }}

{{/* The LLM endpoint's port: networkPolicy.egress.llm.port, else the one of
     config.llm_base_url, else 443 for https and 80 for http. Empty without an endpoint. */}}
{{- define "ctxguard.llmPort" -}}
{{- $url := default "" .Values.config.llm_base_url }}
{{- if .Values.networkPolicy.egress.llm.port }}
{{- int .Values.networkPolicy.egress.llm.port }}
{{- else if $url }}
{{- $u := urlParse $url }}
{{- $port := regexFind ":[0-9]+$" $u.host | trimPrefix ":" }}
{{- if $port }}
{{- $port }}
{{- else if eq $u.scheme "http" }}80
{{- else }}443
{{- end }}
{{- end }}
{{- end }}

{{/* Checks values that would otherwise give objects that do not work together. */}}
{{- define "ctxguard.validate" -}}
{{- if and (not .Values.secrets.existingSecret) (not .Values.secrets.pgDsn) (not .Values.postgresql.host) }}
{{- fail "PostgreSQL is required: set secrets.pgDsn, secrets.existingSecret (key pg-dsn) or postgresql.host" }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $_ := required "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret)" .Values.tls.secretName }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "serviceMonitor.enabled needs metrics.enabled (and a server with the metrics listener)" }}
{{- end }}
{{- if and .Values.prometheusRule.enabled (not .Values.metrics.enabled) }}
{{- fail "prometheusRule.enabled needs metrics.enabled (and a server with the metrics listener)" }}
{{- end }}
{{- if and .Values.metrics.enabled (eq (int .Values.metrics.port) (int .Values.grpcPort)) }}
{{- fail "metrics.port must differ from grpcPort" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- end }}
