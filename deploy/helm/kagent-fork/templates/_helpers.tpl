{{/*
Names, labels and images in kagent's chart's spelling (helm/kagent/templates/_helpers.tpl), so that
kagent-fork's objects sort and select like kagent's own.
*/}}
{{- define "kagent-fork.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if .Values.nameOverride }}
{{- printf "%s-%s" .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "kagent-fork.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{- define "kagent-fork.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: api
{{- end }}

{{- define "kagent-fork.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kagent-fork.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kagent
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* registry/repository:tag; the image's own values win over the global `registry` and `tag`, then appVersion. */}}
{{- define "kagent-fork.image" -}}
{{- $registry := .Values.image.registry | default .Values.registry -}}
{{- $tag := .Values.image.tag | default .Values.tag | default .Chart.AppVersion -}}
{{- printf "%s:%s" (join "/" (compact (list $registry .Values.image.repository))) $tag -}}
{{- end }}

{{- define "kagent-fork.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kagent-fork.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end }}

{{/* kagent's Service names: <kagent fullname>-ui and -controller, in this namespace. */}}
{{- define "kagent-fork.kagentUi" -}}
{{- printf "%s-ui" .Values.kagent.fullname -}}
{{- end }}

{{/* The in-cluster base URL of this Service. */}}
{{- define "kagent-fork.serviceUrl" -}}
{{- printf "http://%s.%s.svc:%d" (include "kagent-fork.fullname" .) (include "kagent-fork.namespace" .) (.Values.service.ports.port | int) -}}
{{- end }}

{{/*
The paths of kagent-fork's API as regular expressions, anchored at both ends, with the methods they answer:
one list for the HTTPRoute (which matches methods) and the Ingress (which cannot). Kept in step with
openapi.yaml by tests/test_deploy_manifests.py.
*/}}
{{- define "kagent-fork.routes" -}}
- method: POST
  path: ^/api/sessions/[^/]+/(fork|rewind|whatif|experiments)$
- method: POST
  path: ^/api/sessions/[^/]+/rewinds/[^/]+/undo$
- method: GET
  path: ^/api/sessions/[^/]+/(invocations|forks|tree|transcript|rewinds|whatifs|experiments)$
- method: GET
  path: ^/api/sessions/[^/]+/compare/[^/]+$
- method: GET
  path: ^/api/(whatif|experiments)/[^/]+$
- method: POST
  path: ^/api/((whatif|experiments)/[^/]+/cancel|experiments/[^/]+/(judge|votes|discard|discard/undo))$
- path: ^/mcp/?$
- method: GET
  path: ^/(ui/[^/]*|api/fork-explorer/(sessions|whoami|agents))$
- method: GET
  path: ^/api/suites(/[^/]+(/export|/runs(/[^/]+(/plot\.svg|/cases/[^/]+)?)?)?)?$
- method: POST
  path: ^/api/suites(/import|/[^/]+/(cases|runs|runs/[^/]+/(cancel|keep)))?$
- method: DELETE
  path: ^/api/suites/[^/]+/cases/[^/]+$
{{- end }}

{{/*
Guards that values.schema.json cannot say: a PDB with exactly one threshold (kagent's kagent.pdb.validate), a
database to connect to.
*/}}
{{- define "kagent-fork.validate" -}}
{{- $pdb := .Values.pdb -}}
{{- if $pdb.enabled -}}
{{- $hasMin := not (kindIs "invalid" $pdb.minAvailable) -}}
{{- $hasMax := not (kindIs "invalid" $pdb.maxUnavailable) -}}
{{- if and $hasMin $hasMax -}}
{{- fail "pdb: minAvailable and maxUnavailable are mutually exclusive. Set exactly one (to use maxUnavailable, set pdb.minAvailable=null)." -}}
{{- end -}}
{{- if not (or $hasMin $hasMax) -}}
{{- fail "pdb is enabled but neither minAvailable nor maxUnavailable is set. Set exactly one." -}}
{{- end -}}
{{- if and $hasMin (not (kindIs "string" $pdb.minAvailable)) (ge (int $pdb.minAvailable) (int $.Values.replicaCount)) -}}
{{- fail (printf "pdb.minAvailable (%d) must be below replicaCount (%d): such a budget lets no pod be evicted, so every node drain hangs. Raise replicaCount or set pdb.enabled=false." (int $pdb.minAvailable) (int $.Values.replicaCount)) -}}
{{- end -}}
{{- end -}}
{{- $pg := .Values.database.postgres -}}
{{- if not (or $pg.urlFile $pg.url $pg.fromKagentRelease) -}}
{{- fail "No database configured. Set database.postgres.url, database.postgres.urlFile, or database.postgres.fromKagentRelease (kagent's release, for its bundled database)." -}}
{{- end -}}
{{- end }}
