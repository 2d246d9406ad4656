{{- define "slipstream.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "slipstream.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "slipstream.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The gateway config with the Redis URL from cache.redisUrl, when given. */}}
{{- define "slipstream.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $server := default dict $config.server -}}
{{/* In-flight streams may run until shortly before Kubernetes kills the pod. */}}
{{- $_ := set $server "shutdown_grace_s" (sub .Values.terminationGracePeriodSeconds 10) -}}
{{- $_ := set $config "server" $server -}}
{{- if .Values.cache.redisUrl -}}
{{- $cache := default dict $config.cache -}}
{{- $_ := set $cache "store" "redis" -}}
{{- $_ := set $cache "redis_url" .Values.cache.redisUrl -}}
{{- $_ := set $config "cache" $cache -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
