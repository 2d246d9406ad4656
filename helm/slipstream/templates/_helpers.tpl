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

{{- define "slipstream.redisSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: cache
{{- end -}}

{{/* The shared Redis's URL: cache.redisUrl, else the chart's own Redis when redis.enabled, else "". */}}
{{- define "slipstream.redisUrl" -}}
{{- if .Values.cache.redisUrl -}}
{{- .Values.cache.redisUrl -}}
{{- else if .Values.redis.enabled -}}
{{- printf "redis://%s-redis:6379/0" (include "slipstream.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The gateway config, with the shared Redis when there is one. */}}
{{- define "slipstream.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $server := default dict $config.server -}}
{{/* In-flight streams may run until shortly before Kubernetes kills the pod. */}}
{{- $_ := set $server "shutdown_grace_s" (sub .Values.terminationGracePeriodSeconds 10) -}}
{{- $_ := set $config "server" $server -}}
{{- $cache := default dict $config.cache -}}
{{- $url := include "slipstream.redisUrl" . -}}
{{- if and .Values.cache.redisUrlSecret.name (or .Values.cache.redisUrl .Values.redis.enabled) -}}
{{- fail "cache.redisUrlSecret names the Redis URL: leave cache.redisUrl empty and redis.enabled false" -}}
{{- end -}}
{{- if .Values.cache.redisUrlSecret.name -}}
{{/* The URL (with its password) stays in the Secret: the config names the variable the Deployment fills from it. */}}
{{- $_ := set $cache "store" "redis" -}}
{{- $_ := unset $cache "redis_url" -}}
{{- $_ := set $cache "redis_url_env" "SLIPSTREAM_REDIS_URL" -}}
{{- $_ := set $config "cache" $cache -}}
{{- else if $url -}}
{{- $_ := set $cache "store" "redis" -}}
{{- $_ := set $cache "redis_url" $url -}}
{{- $_ := set $config "cache" $cache -}}
{{- else if and (eq (toString $cache.store) "redis") (not $cache.redis_url) (not $cache.redis_url_env) -}}
{{- fail "config.cache.store is redis but no Redis is given: set cache.redisUrlSecret, cache.redisUrl, or redis.enabled=true" -}}
{{- end -}}
{{- if and .Values.sharePrefixes (or .Values.cache.redisUrlSecret.name $url) -}}
{{/* Replicas given a Redis tell each other their prefix placements through it, unless the config says otherwise. */}}
{{- $routing := default dict $config.routing -}}
{{- if not (hasKey $routing "share_prefixes") -}}
{{- $_ := set $routing "share_prefixes" true -}}
{{- $_ := set $config "routing" $routing -}}
{{- end -}}
{{- end -}}
{{- if .Values.consoleSecret.name -}}
{{/* Console sessions signed with one secret on every replica: a sign-in through the Service holds on any pod. */}}
{{- $auth := default dict $config.auth -}}
{{- $_ := set $auth "console_secret_env" "SLIPSTREAM_CONSOLE_SECRET" -}}
{{- $_ := set $config "auth" $auth -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
