{{/* Labels every object carries; `app` is the selector (one per process). */}}
{{- define "svc.labels" -}}
app: {{ .name }}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: svc-platform
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{/* Pod labels: stable across releases of the chart (no chart version), so a pod's labels match its selector. */}}
{{- define "svc.podLabels" -}}
app: {{ .name }}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: svc-platform
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "svc.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The shared settings as one map: config, Kafka, metrics and every peer's address. */}}
{{- define "svc.configData" -}}
{{- $v := .Values -}}
{{- range $k, $val := $v.config }}
{{ $k }}: {{ $val | toString | quote }}
{{- end }}
KAFKA_BROKERS: {{ $v.kafka.brokers | quote }}
KAFKA_PARTITIONS: {{ $v.kafka.partitions | toString | quote }}
KAFKA_REPLICATION_FACTOR: {{ $v.kafka.replicationFactor | toString | quote }}
KAFKA_MIN_INSYNC_REPLICAS: {{ $v.kafka.minInsyncReplicas | toString | quote }}
KAFKA_CREATE_TOPICS: "false"
{{- if $v.kafka.ssl }}
KAFKA_SSL: "true"
{{- if $v.kafka.caSecret.name }}
KAFKA_SSL_CA_FILE: /etc/svc/kafka/ca.crt
{{- end }}
{{- end }}
{{- if $v.kafka.sasl.mechanism }}
KAFKA_SASL_MECHANISM: {{ $v.kafka.sasl.mechanism | quote }}
KAFKA_SASL_USERNAME: {{ $v.kafka.sasl.username | quote }}
{{- end }}
METRICS_PORT: {{ $v.metrics.port | toString | quote }}
METRICS_HOST: "0.0.0.0"
{{- range $name, $s := $v.services }}
{{ upper $name }}_ADDR: {{ printf "dns:///%s:%v" $name $s.port | quote }}
{{- end }}
{{- end }}

{{/* The ConfigMap's name: its content's hash in it, so a change of settings rolls every Deployment. */}}
{{- define "svc.configName" -}}
svc-config-{{ include "svc.configData" . | sha256sum | trunc 10 }}
{{- end }}

{{/* A required key of the Secret. */}}
{{- define "svc.secretEnv" -}}
- name: {{ .key }}
  valueFrom:
    secretKeyRef: { name: {{ .root.Values.secrets.name }}, key: {{ .key }}{{ if .optional }}, optional: true{{ end }} }
{{- end }}

{{/* Kafka credentials (password from a Secret) for the pods that use Kafka. */}}
{{- define "svc.kafkaEnv" -}}
{{- with .Values.kafka.sasl }}
{{- if and .mechanism .passwordSecret.name }}
- name: KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef: { name: {{ .passwordSecret.name }}, key: {{ .passwordSecret.key }} }
{{- end }}
{{- end }}
{{- end }}

{{- define "svc.kafkaCaMount" -}}
{{- if and .Values.kafka.ssl .Values.kafka.caSecret.name }}
- name: kafka-ca
  mountPath: /etc/svc/kafka
  readOnly: true
{{- end }}
{{- end }}

{{- define "svc.kafkaCaVolume" -}}
{{- if and .Values.kafka.ssl .Values.kafka.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.caSecret.name }}
    items:
      - { key: {{ .Values.kafka.caSecret.key }}, path: ca.crt }
{{- end }}
{{- end }}
