{{/*
The objects' names are fixed, as in weft.yaml: weft is one per cluster, and the README,
the migration steps and the ConfigMaps users make (weft-env, weft-windows-env) name them.
*/}}

{{- define "weft.namespace" -}}
{{ .Values.namespace.name }}
{{- end }}

{{- define "weft.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "weft.windowsImage" -}}
{{ include "weft.image" . }}-windows-hostprocess
{{- end }}

{{/*
weft.args are the flags for weftd that a DaemonSet's values (linux or windows) add, as a
YAML list, or nothing.
*/}}
{{- define "weft.args" -}}
{{- $args := list -}}
{{- range .iface }}{{ $args = append $args (printf "--iface=%s" .) }}{{ end -}}
{{- range .ifaceRegex }}{{ $args = append $args (printf "--iface-regex=%s" .) }}{{ end -}}
{{- range .args }}{{ $args = append $args . }}{{ end -}}
{{- with $args }}{{ toYaml . }}{{ end -}}
{{- end }}

{{/*
weft.scheduling is what both DaemonSets' pods share about their nodes: the affinity for
the operating system given as .os, tolerations, the node selector, the priority.
*/}}
{{- define "weft.scheduling" -}}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - key: kubernetes.io/os
          operator: In
          values: [{{ .os | quote }}]
        # Nodes still on flannel during a migration. A node without the label (every node
        # of a fresh install) runs weft.
        - key: weftnet.github.io/agent
          operator: NotIn
          values: ["flannel"]
{{- with .root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
priorityClassName: system-node-critical
serviceAccountName: weft
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
weft.netConf is net-conf.json as compact JSON: .Values.netConf when set, else made of the
network values as flannel's chart makes it (a value of 0 or "" leaves its key out). It
fails on a config that the cluster's nodes could not share: with Windows nodes, VXLAN needs
a VNI from 4096 to 65535 given explicitly (Linux nodes would default to 1) and port 4789,
and cannot have IPv6 or DirectRouting. weftd checks the rest when it starts.
*/}}
{{- define "weft.netConf" -}}
{{- $v := .Values -}}
{{- $conf := dict -}}
{{- if $v.netConf -}}
  {{- $conf = fromJson $v.netConf -}}
  {{- if hasKey $conf "Error" -}}
    {{- fail (printf "netConf is not a JSON object: %s" $conf.Error) -}}
  {{- end -}}
{{- else -}}
  {{- if not (or $v.podCidr $v.podCidrv6) -}}
    {{- fail "podCidr, podCidrv6 or both: a cluster network is needed" -}}
  {{- end -}}
  {{- if $v.podCidr -}}
    {{- $_ := set $conf "Network" $v.podCidr -}}
  {{- else -}}
    {{- $_ := set $conf "EnableIPv4" false -}}
  {{- end -}}
  {{- if $v.podCidrv6 -}}
    {{- $_ := set $conf "EnableIPv6" true -}}
    {{- $_ := set $conf "IPv6Network" $v.podCidrv6 -}}
  {{- end -}}
  {{- $backend := dict "Type" $v.backend -}}
  {{- if eq $v.backend "vxlan" -}}
    {{- if $v.vni }}{{ $_ := set $backend "VNI" (int64 $v.vni) }}{{ end -}}
    {{- if $v.backendPort }}{{ $_ := set $backend "Port" (int64 $v.backendPort) }}{{ end -}}
    {{- if $v.mtu }}{{ $_ := set $backend "MTU" (int64 $v.mtu) }}{{ end -}}
    {{- if $v.directRouting }}{{ $_ := set $backend "DirectRouting" true }}{{ end -}}
  {{- end -}}
  {{- $_ := set $conf "Backend" $backend -}}
{{- end -}}
{{- $backend := $conf.Backend | default dict -}}
{{- if and $v.windows.enabled (eq (toString $backend.Type) "vxlan") -}}
  {{- $vni := int64 ($backend.VNI | default 0) -}}
  {{- if or (lt $vni 4096) (gt $vni 65535) -}}
    {{- fail (printf "VXLAN with Windows nodes needs a VNI from 4096 to 65535, given explicitly (vni, or netConf's Backend.VNI); it is %d (0: not given). Or set windows.enabled=false." $vni) -}}
  {{- end -}}
  {{- if ne (int64 ($backend.Port | default 0)) 4789 -}}
    {{- fail "VXLAN with Windows nodes needs UDP port 4789 on every node (backendPort, or netConf's Backend.Port). Or set windows.enabled=false." -}}
  {{- end -}}
  {{- if $conf.EnableIPv6 -}}
    {{- fail "HNS Overlay networks cannot carry IPv6: no podCidrv6 (netConf's IPv6Network) with vxlan and Windows nodes; host-gw can. Or set windows.enabled=false." -}}
  {{- end -}}
  {{- if $backend.DirectRouting -}}
    {{- fail "Windows nodes cannot do DirectRouting (HNS overlay networks always encapsulate). Or set windows.enabled=false." -}}
  {{- end -}}
{{- end -}}
{{- toJson $conf -}}
{{- end }}
