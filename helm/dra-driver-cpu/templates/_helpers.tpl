{{/* Chart name, shortened to the 63 characters a label value allows. */}}
{{- define "dracpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "dracpu.fullname" -}}
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

{{- define "dracpu.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dracpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dracpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dracpu.labels" -}}
helm.sh/chart: {{ include "dracpu.chart" . }}
{{ include "dracpu.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "dracpu.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dracpu.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference of one service: dict "svc" (the service's values) "name" (its image name)
"root" (the chart context). Each part is the service's own value, else the top-level `image.*`
(the reference chart's keys), else the default: `<imageRegistry>/dracpu-<name>` and the chart's
appVersion, so one chart version installs a matching set, and any one service can still be
pinned to another version.
*/}}
{{- define "dracpu.image" -}}
{{- $top := .root.Values.image | default dict -}}
{{- $registry := trimSuffix "/" (.root.Values.imageRegistry | default "") -}}
{{- $default := ternary (printf "%s/dracpu-%s" $registry .name) (printf "dracpu-%s" .name) (ne $registry "") -}}
{{- $repository := .svc.image.repository | default $top.repository | default $default -}}
{{- $tag := .svc.image.tag | default $top.tag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end }}

{{- define "dracpu.pullPolicy" -}}
{{- $top := .root.Values.image | default dict -}}
{{- .svc.image.pullPolicy | default $top.pullPolicy | default .root.Values.imagePullPolicy -}}
{{- end }}

{{/*
Resources of one container: dict "svc" "name" "root" as above. The service's own non-empty
`resources`, else the top-level `resources` (the reference chart's key), else the chart's
default for that container.
*/}}
{{- define "dracpu.resources" -}}
{{- $defaults := dict
    "topology" (dict "requests" (dict "cpu" "10m" "memory" "64Mi") "limits" (dict "memory" "256Mi"))
    "allocator" (dict "requests" (dict "cpu" "20m" "memory" "64Mi") "limits" (dict "memory" "256Mi"))
    "dra-plugin" (dict "requests" (dict "cpu" "20m" "memory" "96Mi") "limits" (dict "memory" "384Mi"))
    "nri-plugin" (dict "requests" (dict "cpu" "20m" "memory" "64Mi") "limits" (dict "memory" "256Mi"))
    "api" (dict "requests" (dict "cpu" "20m" "memory" "96Mi") "limits" (dict "memory" "384Mi")) -}}
{{- $chosen := .svc.resources | default .root.Values.resources | default (get $defaults .name) -}}
{{- $out := dict -}}
{{- with $chosen.requests }}{{- $_ := set $out "requests" . -}}{{- end }}
{{- with $chosen.limits }}{{- $_ := set $out "limits" . -}}{{- end }}
{{- toYaml $out -}}
{{- end }}

{{/* The api's port: api.port, else healthzPort (the reference chart's key), else 8080. */}}
{{- define "dracpu.apiPort" -}}
{{- int (.Values.api.port | default .Values.healthzPort | default 8080) -}}
{{- end }}

{{/* Flags every container gets: the config file (one `--config=PATH` argument, as the
     reference passes it), verbosity, and the log format unless it is the services' default
     (text): a service image one release behind, which has no such flag, still starts. */}}
{{- define "dracpu.commonArgs" -}}
{{- $args := list (printf "--config=%s" (include "dracpu.configFile" .)) "-v" (toString .Values.args.logLevel) -}}
{{- $format := .Values.args.loggingFormat | default "text" -}}
{{- if ne $format "text" -}}
{{- $args = append $args (printf "--logging-format=%s" $format) -}}
{{- end -}}
{{- toYaml $args -}}
{{- end }}

{{/* The dra-plugin's `--metadata-versions=LIST`, only when it is not the default (v1beta1),
     for the same reason. */}}
{{- define "dracpu.metadataArgs" -}}
{{- $versions := join "," (.Values.draPlugin.metadataVersions | default (list "v1beta1")) -}}
{{- if ne $versions "v1beta1" -}}
{{- toYaml (list (printf "--metadata-versions=%s" $versions)) -}}
{{- else -}}
[]
{{- end -}}
{{- end }}

{{/*
The kubelet root, checked and cleaned. values.schema.json already refuses an empty or relative
value; this repeats the check because `helm upgrade --reuse-values` and `--set x=null` reach the
template with values the schema did not see in that shape. Null or absent means the default.
Cleaned the way the dra-plugin joins paths, so the flag and the mounts name the same directory
in text, not only after the kernel collapses `//`.
*/}}
{{- define "dracpu.kubeletRootDir" -}}
{{- $root := "/var/lib/kubelet" -}}
{{- if hasKey .Values "kubeletRootDir" -}}
{{- if not (kindIs "invalid" .Values.kubeletRootDir) -}}
{{- $root = toString .Values.kubeletRootDir -}}
{{- if eq $root "" -}}
{{- fail "kubeletRootDir must not be empty: set the kubelet's --root-dir, or null for /var/lib/kubelet" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (isAbs $root) -}}
{{- fail (printf "kubeletRootDir must be an absolute path, got %q" $root) -}}
{{- end -}}
{{- $clean := clean $root -}}
{{- /* sun_path holds 107 bytes plus the NUL; the registration socket is the longest path
       the dra-plugin creates under the root. */ -}}
{{- $socket := clean (printf "%s/plugins_registry/dra.cpu/dra.cpu-reg.sock" $clean) -}}
{{- if gt (len $socket) 107 -}}
{{- fail (printf "kubeletRootDir %q is too long: the registration socket %q would be %d bytes, over the 107 a unix socket path can hold" $clean $socket (len $socket)) -}}
{{- end -}}
{{- $clean -}}
{{- end }}

{{/* Directories under the kubelet root, cleaned as whole paths ("/" + "/plugins" is "/plugins"). */}}
{{- define "dracpu.pluginsDir" -}}
{{- printf "%s/plugins" . | clean -}}
{{- end }}

{{/* The driver's own directory under plugins_registry: the kubelet's plugin watcher finds
     registration sockets in subdirectories too, so no other plugin's socket is mounted. */}}
{{- define "dracpu.pluginsRegistryDir" -}}
{{- printf "%s/plugins_registry/dra.cpu" . | clean -}}
{{- end }}

{{/*
The config file every service reads: driverConfig, with the deprecated args.* values folded in
(args wins, as an explicit flag would over the file), and apiVersion filled in.
*/}}
{{- define "dracpu.effectiveConfig" -}}
{{- $config := deepCopy (.Values.driverConfig | default dict) -}}
{{- $_ := set $config "apiVersion" ($config.apiVersion | default "v1alpha1") -}}
{{- range $field := list "cpuDeviceMode" "groupBy" "reservedCPUs" "hostnameOverride" -}}
{{- $value := get $.Values.args $field -}}
{{- if $value -}}
{{- $_ := set $config $field $value -}}
{{- end -}}
{{- end -}}
{{- /* The driver refuses these combinations at start; the chart says so at install. */ -}}
{{- $mode := $config.cpuDeviceMode | default "grouped" -}}
{{- $allocator := $config.allocator | default "cpumanager" -}}
{{- if and (eq $mode "grouped") (eq ($config.groupBy | default "numanode") "machine") (ne $allocator "external") -}}
{{- fail (printf "driverConfig: groupBy 'machine' needs allocator 'external' (got %q): an external allocator picks the CPUs of the one machine device" $allocator) -}}
{{- end -}}
{{- if and (ne $mode "grouped") (eq $allocator "external") -}}
{{- fail (printf "driverConfig: allocator 'external' needs cpuDeviceMode 'grouped' (got %q)" $mode) -}}
{{- end -}}
{{- toYaml $config -}}
{{- end }}

{{/* Paths inside the pod, shared by every container that uses them. */}}
{{- define "dracpu.socketDir" -}}/run/dracpu{{- end }}
{{- define "dracpu.configFile" -}}/etc/dracpu/config.yaml{{- end }}
{{- define "dracpu.sysfsRoot" -}}/host/sys{{- end }}
{{- define "dracpu.cdiDir" -}}/var/run/cdi{{- end }}

{{/*
Hardening every container shares: no privilege escalation, no capabilities, an immutable root
filesystem. The per-container user is set next to each container, with the reason for it.
*/}}
{{- define "dracpu.hardening" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Probes of a gRPC service on its unix socket: dict "socket" PATH. */}}
{{- /*
The probes of a gRPC service (dict: socket, name = its values key, root). The kubelet's grpc
probe dials TCP only and the services listen on unix sockets, so with probes.handler `http`
each service also serves /livez over HTTP (`--probe-address`, dracpu.core.probes): the
kubelet's httpGet, answered inside the service by its own gRPC health check, starts no process.
With `exec` the probe runs `dracpu health` in the container (about 0.15 CPU-seconds of Python
per run; far more on a loaded or emulated node). Both accept NOT_SERVING (the process answers
while it waits for a restarting peer). The startup probe runs often and stops at its first
success; liveness then runs rarely. No readiness probe here: the api container's /readyz wants
SERVING from all four and carries the pod's readiness; a readiness probe per container would
add nothing but probe traffic, and with a long period keep a new pod NotReady for up to that
period (a kubelet started less than one period ago delays each probe's first run by a random
part of it: prober worker.run).
*/}}
{{- define "dracpu.grpcProbes" -}}
{{- $svc := index .root.Values .name }}
{{- range $kind := list "startup" "liveness" }}
{{ $kind }}Probe:
  {{- if eq $.root.Values.probes.handler "http" }}
  httpGet:
    path: /livez
    port: {{ index $.root.Values.probes.ports $.name }}
  {{- else }}
  exec:
    command: ["dracpu", "health", "--live", "--socket", {{ $.socket | quote }}]
  {{- end }}
  {{- include "dracpu.probeTiming" (dict "kind" $kind "svc" $svc "root" $.root) | nindent 2 }}
{{- end }}
{{- end }}

{{- /* The `--probe-address :PORT` of a gRPC service (dict: name, root), a YAML list. */}}
{{- define "dracpu.probeArgs" -}}
{{- if eq .root.Values.probes.handler "http" }}
{{- $seen := dict (include "dracpu.apiPort" .root | int | toString) "the api" }}
{{- range $key := list "topology" "allocator" "draPlugin" "nriPlugin" }}
{{- $port := index $.root.Values.probes.ports $key | int | toString }}
{{- if hasKey $seen $port }}
{{- fail (printf "probes.ports.%s %s is also the port of %s: every listener of the pod needs a port of its own" $key $port (get $seen $port)) }}
{{- end }}
{{- $_ := set $seen $port (printf "probes.ports.%s" $key) }}
{{- end }}
{{- toYaml (list "--probe-address" (printf ":%d" (index .root.Values.probes.ports .name | int))) }}
{{- else }}
[]
{{- end }}
{{- end }}

{{- /* One probe's timing (dict: kind startup|liveness|readiness, svc = the service's values,
root): the service's own probes.<kind> fields over the top-level probes.<kind>. */}}
{{- define "dracpu.probeTiming" -}}
{{- $own := index (.svc.probes | default dict) .kind | default dict }}
{{- $timing := merge (deepCopy $own) (deepCopy (index .root.Values.probes .kind)) -}}
initialDelaySeconds: {{ $timing.initialDelaySeconds | default 0 | int }}
periodSeconds: {{ $timing.periodSeconds | int }}
timeoutSeconds: {{ $timing.timeoutSeconds | int }}
failureThreshold: {{ $timing.failureThreshold | int }}
{{- end }}

{{/* Environment every container gets: the node name from the downward API. */}}
{{- define "dracpu.env" -}}
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: PYTHONUNBUFFERED
  value: "1"
{{- end }}

{{/*
The pod's affinity: `affinity`, with `nodeArchitectures` as a required `kubernetes.io/arch`
requirement. Terms of a required node affinity are ORed, so the requirement is added to each of
the user's terms (or makes the one term when there is none): no term can then match a node the
images cannot run on. Empty when both are.
*/}}
{{- define "dracpu.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- $architectures := .Values.nodeArchitectures | default list -}}
{{- if $architectures -}}
{{- $arch := dict "key" "kubernetes.io/arch" "operator" "In" "values" $architectures -}}
{{- $node := $affinity.nodeAffinity | default dict -}}
{{- $required := $node.requiredDuringSchedulingIgnoredDuringExecution | default dict -}}
{{- $terms := $required.nodeSelectorTerms | default (list (dict)) -}}
{{- $withArch := list -}}
{{- range $term := $terms -}}
{{- $term = deepCopy ($term | default dict) -}}
{{- $_ := set $term "matchExpressions" (append ($term.matchExpressions | default list) $arch) -}}
{{- $withArch = append $withArch $term -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $withArch -}}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
{{- $_ := set $affinity "nodeAffinity" $node -}}
{{- end -}}
{{- if $affinity -}}
{{- toYaml $affinity -}}
{{- end -}}
{{- end }}

{{/* The monitoring.coreos.com/v1 kinds the cluster serves (dict "root" "kind"). */}}
{{- define "dracpu.servesMonitoring" -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) -}}
true
{{- end -}}
{{- end }}

{{/* Scrape settings of a monitor's endpoint (its values), and the node as a label: the
     driver's metrics describe one node each. */}}
{{- define "dracpu.scrapeEndpoint" -}}
port: http
path: /metrics
{{- with .interval }}
interval: {{ . }}
{{- end }}
{{- with .scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
    action: replace
{{- end }}

{{/* Labels and hook annotations of the uninstall check's objects (dict "root" "weight"). */}}
{{- define "dracpu.uninstallCheckMeta" -}}
labels:
  {{- include "dracpu.labels" .root | nindent 2 }}
  app.kubernetes.io/component: uninstall-check
annotations:
  helm.sh/hook: pre-delete
  helm.sh/hook-weight: {{ .weight | quote }}
  helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
