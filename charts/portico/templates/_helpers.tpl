{{/* The image every container runs. */}}
{{- define "portico.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The labels of one component's objects and the selector of its pods. */}}
{{- define "portico.labels" -}}
app.kubernetes.io/name: portico
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* The memberlist Secret's name. */}}
{{- define "portico.memberlistSecret" -}}
{{ .Values.memberlist.existingSecret | default "portico-memberlist" }}
{{- end }}

{{/* A Portico object from a values item: its name, and every other field as its spec. */}}
{{- define "portico.object" -}}
{{- $item := index . 1 -}}
apiVersion: portico.dev/v1alpha1
kind: {{ index . 0 }}
metadata:
  name: {{ required "every pool, peer and advertisement needs a name" $item.name }}
spec:
  {{- omit $item "name" "l2Advertisement" | toYaml | nindent 2 }}
{{- end }}

{{/* The Secrets the speakers may get, by name: the gossip key, the password Secrets of the BGP
peers in values, and speaker.secretNames (BFD keys, peers made outside the chart). */}}
{{- define "portico.speakerSecretNames" -}}
{{- $names := list (include "portico.memberlistSecret" .) }}
{{- range .Values.bgp.peers }}
{{- with .passwordSecret }}
{{- $names = append $names .name }}
{{- end }}
{{- end }}
{{- $names = concat $names (.Values.speaker.secretNames | default list) }}
{{- $names | uniq | toJson }}
{{- end }}
