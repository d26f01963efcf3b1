{{- define "continuum.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "continuum.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "continuum.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "continuum.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "continuum.selectorLabels" -}}
app.kubernetes.io/name: {{ include "continuum.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "continuum.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "continuum.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Kubernetes namespace of the fleet: where the Role lives and what the router watches. */}}
{{- define "continuum.fleetNamespace" -}}
{{- default .Release.Namespace .Values.dynamoPodDiscovery.namespace -}}
{{- end -}}

{{/* continuum.fill sets in .dst every key of .src that .dst has not, map
by map: a key written in .dst stays as written, false and empty values
too (Sprig's merge takes those for unset). */}}
{{- define "continuum.fill" -}}
{{- $dst := .dst -}}
{{- range $k, $v := .src -}}
{{- if not (hasKey $dst $k) -}}
{{- $_ := set $dst $k (deepCopy $v) -}}
{{- else if and (kindIs "map" $v) (kindIs "map" (index $dst $k)) -}}
{{- $_ := include "continuum.fill" (dict "dst" (index $dst $k) "src" $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The router's configuration file. */}}
{{- define "continuum.config" -}}
{{- $cfg := deepCopy (default dict .Values.config) -}}
{{- $d := .Values.dynamoPodDiscovery -}}
{{- $_ := set $cfg "server" (merge (dict "bind_address" (printf "0.0.0.0:%d" (int .Values.service.port))) (default dict $cfg.server)) -}}
{{- $admin := dict "bind_address" (printf "0.0.0.0:%d" (int .Values.service.adminPort)) -}}
{{- if .Values.admin.tokenSecret.name -}}
{{- $_ := set $admin "token" "${CONTINUUM_ADMIN_TOKEN}" -}}
{{- end -}}
{{- $_ := set $cfg "admin" (merge $admin (default dict $cfg.admin)) -}}
{{- if $d.enabled -}}
{{- /* config's own keys win over routerConfig's defaults, a false or empty one included;
shim.pools written in config replaces routerConfig's shim.backends (the two are exclusive). */ -}}
{{- $defaults := deepCopy (default dict $d.routerConfig) -}}
{{- if (($cfg.dynamo | default dict).shim | default dict).pools -}}
{{- $_ := unset ((($defaults.dynamo | default dict).shim) | default dict) "backends" -}}
{{- end -}}
{{- $_ := include "continuum.fill" (dict "dst" $cfg "src" $defaults) -}}
{{- if and (gt (len (default list $d.dynamoNamespaces)) 1) (not (($cfg.dynamo | default dict).shim | default dict).pools) -}}
{{- fail "dynamoPodDiscovery.dynamoNamespaces lists several Dynamo namespaces: set config.dynamo.shim.pools, one pool per namespace (shim.backends serves one namespace only)" -}}
{{- end -}}
{{- $kube := dict "namespace" (include "continuum.fleetNamespace" .) -}}
{{- if $d.dynamoNamespaces -}}
{{- $_ := set $kube "dynamo_namespaces" $d.dynamoNamespaces -}}
{{- else -}}
{{- $_ := set $kube "dynamo_namespace" (required "dynamoPodDiscovery.dynamoNamespace (or dynamoNamespaces) is required: the workers' DYN_NAMESPACE" $d.dynamoNamespace) -}}
{{- end -}}
{{- if not $d.metadata -}}
{{- if and $d.model $d.models -}}
{{- fail "dynamoPodDiscovery.model and dynamoPodDiscovery.models are exclusive" -}}
{{- else if $d.models -}}
{{- $_ := set $kube "models" $d.models -}}
{{- else -}}
{{- $_ := set $kube "model" (required "dynamoPodDiscovery.model (or models) is required when dynamoPodDiscovery.metadata is false: the kubernetes_pods source cannot read models from pods" $d.model) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $kube "watch_reconnect_backoff" (dict "initial" $d.watchReconnectBackoff.initial "max" $d.watchReconnectBackoff.max) -}}
{{- $dyn := default dict $cfg.dynamo -}}
{{- $_ := set $dyn "enabled" true -}}
{{- $_ := set $dyn "discovery" (dict "source" (ternary "kubernetes" "kubernetes_pods" (eq (toString $d.metadata) "true")) "kubernetes" $kube) -}}
{{- $_ := set $cfg "dynamo" $dyn -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The port of the router's event bus listener (config.dynamo.event_bus.listen, HOST:PORT). */}}
{{- define "continuum.busListenPort" -}}
{{- $listen := default "0.0.0.0:7443" (((.Values.config | default dict).dynamo | default dict).event_bus | default dict).listen -}}
{{- required (printf "config.dynamo.event_bus.listen %q: want HOST:PORT" $listen) (trimPrefix ":" (regexFind ":[0-9]+$" $listen)) -}}
{{- end -}}

{{/* Whether the router runs its event bus listener. */}}
{{- define "continuum.busEnabled" -}}
{{- if (((.Values.config | default dict).dynamo | default dict).event_bus | default dict).enabled -}}true{{- end -}}
{{- end -}}

{{/* The port of an event bus client's router URL (https://HOST:PORT). */}}
{{- define "continuum.routerPort" -}}
{{- $u := urlParse (required "the router's event bus listener is required: https://HOST:PORT" .) -}}
{{- if ne $u.scheme "https" -}}
{{- fail (printf "router %q: want https://HOST:PORT" .) -}}
{{- end -}}
{{- $port := trimPrefix ":" (regexFind ":[0-9]+$" $u.host) -}}
{{- required (printf "router %q: want https://HOST:PORT" .) $port -}}
{{- end -}}

{{/* The Secret name holding an event bus client's token; $c is its values, $suffix its objects' suffix. */}}
{{- define "continuum.busTokenSecret" -}}
{{- $c := index . 1 -}}
{{- if $c.tokenSecret.name -}}
{{- $c.tokenSecret.name -}}
{{- else -}}
{{- printf "%s-%s-token" (include "continuum.fullname" (index . 0)) (index . 2) -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of an event bus client ((list . "broker")): a name of
its own, so that the router's selectors, Service and NetworkPolicy never
take its pods. */}}
{{- define "continuum.clientSelectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ printf "%s-%s" (include "continuum.name" $root) (index . 1) }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
{{- end -}}

{{- define "continuum.clientLabels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{ include "continuum.clientSelectorLabels" . }}
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
{{- end -}}

{{/* An event bus client's terminationGracePeriodSeconds: its --drain-grace
(whole seconds or minutes, "10s", "1m") and 20 s for the rest of its stop,
so that the kubelet does not kill it within the drain it promised. */}}
{{- define "continuum.busGrace" -}}
{{- $g := toString . -}}
{{- if regexMatch "^[0-9]+s$" $g -}}
{{- add (trimSuffix "s" $g | int) 20 -}}
{{- else if regexMatch "^[0-9]+m$" $g -}}
{{- add (mul (trimSuffix "m" $g | int) 60) 20 -}}
{{- else -}}
{{- fail (printf "drainGrace %q: give whole seconds or minutes, such as 10s or 1m" $g) -}}
{{- end -}}
{{- end -}}

{{/* continuum.routerChecks fails a render whose router could not work as
configured: a router on the event bus runs as one process (each broker or
kv-listener entry keeps one session, which lands on one pod: every other
replica would route on load it never receives), and a Kubernetes source
needs the API access dynamoPodDiscovery grants (or a KUBECONFIG). */}}
{{- define "continuum.routerChecks" -}}
{{- $cfg := include "continuum.config" . | fromYaml -}}
{{- $dyn := default dict $cfg.dynamo -}}
{{- if and (default dict $dyn.event_bus).enabled (gt (int .Values.replicaCount) 1) -}}
{{- fail "replicaCount: a router with dynamo.event_bus enabled runs as one process (each broker or kv-listener entry keeps one session, on one pod; the other replicas would get no broker)" -}}
{{- end -}}
{{- $source := (default dict $dyn.discovery).source -}}
{{- if and $dyn.enabled (has $source (list "kubernetes" "kubernetes_pods")) (not .Values.dynamoPodDiscovery.enabled) -}}
{{- $kubeconfig := false -}}
{{- range .Values.extraEnv -}}
{{- if eq .name "KUBECONFIG" -}}{{- $kubeconfig = true -}}{{- end -}}
{{- end -}}
{{- if not $kubeconfig -}}
{{- fail (printf "config.dynamo.discovery.source %s reads the Kubernetes API: set dynamoPodDiscovery.enabled (its Role, RoleBinding and token), or give a KUBECONFIG in extraEnv" $source) -}}
{{- end -}}
{{- end -}}
{{- end -}}
