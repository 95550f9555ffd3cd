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

{{- define "ctxguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ctxguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ctxguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ctxguard.labels" -}}
helm.sh/chart: {{ include "ctxguard.chart" . }}
{{ include "ctxguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: server
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

{{/* One probe. Args: dict "p" (the probe's values) "port" "tls". */}}
{{- define "ctxguard.probe" -}}
{{- if and (eq .p.type "grpc") (not .tls) }}
grpc:
  port: {{ .port }}
  {{- if .p.service }}
  service: {{ .p.service | quote }}
  {{- end }}
{{- else }}
tcpSocket:
  port: grpc
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

{{/* Checks values that would otherwise give a server that refuses to start. */}}
{{- define "ctxguard.validate" -}}
{{- range $k := list "listen" "pg_dsn" "redis_url" "admin_key" "tls_cert" "tls_key" "tls_client_ca" }}
{{- if hasKey $.Values.config $k }}
{{- fail (printf "config.%s is set by the chart: use grpcPort, secrets, postgresql, redis or tls instead" $k) }}
{{- end }}
{{- end }}
{{- if and (not .Values.secrets.existingSecret) (not .Values.secrets.pgDsn) (not .Values.postgresql.host) }}
{{- fail "PostgreSQL is required: set secrets.pgDsn, secrets.existingSecret (key pg-dsn) or postgresql.host" }}
{{- end }}
{{- if and .Values.secrets.adminKey (lt (len .Values.secrets.adminKey) 16) }}
{{- fail "secrets.adminKey must be at least 16 characters" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- end }}
