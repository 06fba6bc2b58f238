// Package dist holds weft as users install it, and the tests that keep it installable. It
// has no Go API; the files are:
//
//   - systemd/weftd.service, systemd/weftd.env: weftd under systemd (Type=notify);
//   - net-conf.json: a sample network config, VXLAN with VNI 4096 on port 4789, which
//     clusters with Windows nodes need;
//   - cni/: the CNI configurations for Linux nodes (flannel's, with the type weft) and for
//     Windows nodes under containerd (HNS v2: "apiVersion": 2 and its policies);
//   - kubernetes/weft.yaml: everything for `kubectl apply -f`, with a verbatim copy of
//     kubernetes/rbac.yaml;
//   - helm/weft: the same as a Helm chart, with flannel's chart's settings as values;
//   - windows/install-weftd.ps1: weftd as a Windows service, or only the CNI plugin;
//   - image/: the builder of the Linux image (`make image`), three static binaries in an
//     OCI image layout, no shell;
//   - Dockerfile: the Windows HostProcess image;
//   - prometheus/weft-alerts.yaml: Prometheus alerting rules, and weft-alerts_test.yaml,
//     their unit tests for `promtool test rules`;
//   - grafana/weft-dashboard.json: a Grafana dashboard over the same metrics.
//
// The tests run `systemd-analyze verify` on the unit, create every Kubernetes object with a
// server-side dry run on a real kube-apiserver (internal/kubetest), parse the configs with
// weft's own parsers, check that every flag the files give weftd is one it has, run the
// Linux DaemonSet's CNI installer on a scratch node, check the Dockerfile statically (no
// container engine runs here), and, as root, build the Linux image, unpack it and run the
// DaemonSet's containers in it with runc. promtool checks the alert rules and runs their unit
// tests, and parses every query of the dashboard; the metrics and labels both use must be
// those of the README's table of metrics (internal/promtest). The chart's tests run the real
// Helm (tools/helm, $WEFT_HELM): with the default values the chart must make the objects of
// weft.yaml, and each other value must change exactly what it is for.
package dist
