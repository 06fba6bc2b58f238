package dist_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/weftnet/weft/linux"
)

// The chart, relative to dist/.
const chartDir = "helm/weft"

// envHelm names the environment variable holding the helm binary, which `make test` sets
// to what tools/helm/install-helm.sh builds. Without it the tests look for that build in
// .cache/helm/bin of this checkout.
const envHelm = "WEFT_HELM"

// allOptions sets every value of the chart away from its default, each to something a
// real cluster could use.
const allOptions = `
namespace: {name: weft-system, create: true}
podCidr: 10.50.0.0/16
serviceCidr: 10.60.0.0/16
backend: host-gw
image: {repository: registry.example/weft, tag: dev, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
nodeSelector: {weftnet.github.io/pool: blue}
linux:
  iface: [eth1]
  ifaceRegex: ["^ens"]
  ipMasq: false
  networkPolicy: true
  args: [--log-level=debug]
  resources: {requests: {cpu: 200m, memory: 128Mi}, limits: {memory: 512Mi}}
  cniBinDir: /usr/libexec/cni
  cniConfDir: /etc/cni/conf.d
windows:
  apiServer: {host: 10.0.0.5, port: 6443}
  iface: [Ethernet]
  args: [--log-level=debug]
  resources: {limits: {memory: 1Gi}}
`

func helmBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv(envHelm)
	if p == "" {
		p = filepath.Join("..", ".cache", "helm", "bin", "helm")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no helm (%v): run `make deps` or tools/helm/install-helm.sh .cache/helm/bin, or set $%s", err, envHelm)
	}
	return p
}

// runHelm runs helm with args, and values (YAML, "" for none) on its standard input, and
// returns its standard output; the error holds its standard error. Helm's configuration,
// cache and data are in a scratch directory: no repository or plugin of the user's takes
// part.
func runHelm(t *testing.T, values string, args ...string) ([]byte, error) {
	t.Helper()
	if values != "" {
		args = append(slices.Clone(args), "--values=-")
	}
	home := t.TempDir()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache",
		"HELM_DATA_HOME="+home+"/data")
	cmd.Stdin = strings.NewReader(values)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}

// renderChart returns the objects `helm template` makes of the chart with values.
func renderChart(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelm(t, values, "template", "weft", chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return parseManifest(t, "helm template", out)
}

// objectSet holds a manifest's objects by kind, namespace and name, in a form to compare:
// the JSON files of ConfigMaps parsed, since their layout means nothing.
type objectSet map[string]map[string]any

func objectsOf(t *testing.T, source string, objs []*unstructured.Unstructured) objectSet {
	t.Helper()
	set := objectSet{}
	for _, o := range objs {
		key := o.GetKind() + " " + o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			key = o.GetKind() + " " + ns + "/" + o.GetName()
		}
		if _, dup := set[key]; dup {
			t.Fatalf("%s: %s twice", source, key)
		}
		obj := o.DeepCopy().Object
		if data, ok := obj["data"].(map[string]any); ok && o.GetKind() == "ConfigMap" {
			for k, v := range data {
				if s, ok := v.(string); ok && strings.HasSuffix(k, ".json") {
					data[k] = parseJSON(t, s)
				}
			}
		}
		set[key] = obj
	}
	return set
}

// parseJSON decodes JSON as unstructured objects hold it (whole numbers as int64).
func parseJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := utiljson.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v in %s", err, s)
	}
	return v
}

// key returns the key of the object of kind named name, in whatever namespace.
func (s objectSet) key(t *testing.T, kind, name string) string {
	t.Helper()
	for key := range s {
		if strings.HasPrefix(key, kind+" ") && (strings.HasSuffix(key, " "+name) || strings.HasSuffix(key, "/"+name)) {
			return key
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return ""
}

func (s objectSet) get(t *testing.T, kind, name string) map[string]any {
	t.Helper()
	return s[s.key(t, kind, name)]
}

// at follows path (object keys and list indexes) from v, failing the test where it leads
// nowhere.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for i, p := range path {
		var ok bool
		switch p := p.(type) {
		case string:
			var m map[string]any
			if m, ok = v.(map[string]any); ok {
				v, ok = m[p]
			}
		case int:
			var l []any
			if l, ok = v.([]any); ok && p < len(l) {
				v = l[p]
			} else {
				ok = false
			}
		}
		if !ok {
			t.Fatalf("nothing at %v", path[:i+1])
		}
	}
	return v
}

func object(t *testing.T, v any, path ...any) map[string]any {
	t.Helper()
	m, ok := at(t, v, path...).(map[string]any)
	if !ok {
		t.Fatalf("%v is not an object", path)
	}
	return m
}

// cfgData is the data of ConfigMap weft-cfg.
func (s objectSet) cfgData(t *testing.T) map[string]any {
	t.Helper()
	return object(t, s.get(t, "ConfigMap", configMapName), "data")
}

func (s objectSet) podSpec(t *testing.T, ds string) map[string]any {
	t.Helper()
	return object(t, s.get(t, "DaemonSet", ds), "spec", "template", "spec")
}

// container returns the container (in list "containers" or "initContainers") of a
// DaemonSet's pods.
func (s objectSet) container(t *testing.T, ds, list, name string) map[string]any {
	t.Helper()
	cs, _ := at(t, s.podSpec(t, ds), list).([]any)
	for _, c := range cs {
		if c, ok := c.(map[string]any); ok && c["name"] == name {
			return c
		}
	}
	t.Fatalf("DaemonSet %s: no %s %s", ds, list, name)
	return nil
}

// containers are every container of every DaemonSet.
func (s objectSet) containers(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ds := range []string{linuxDS, windowsDS} {
		for _, list := range []string{"initContainers", "containers"} {
			for _, c := range at(t, s.podSpec(t, ds), list).([]any) {
				out = append(out, c.(map[string]any))
			}
		}
	}
	return out
}

func appendArgs(c map[string]any, args ...any) {
	c["args"] = append(c["args"].([]any), args...)
}

// windowsCNI is the Windows CNI configuration's weft plugin.
func (s objectSet) windowsCNI(t *testing.T) map[string]any {
	t.Helper()
	return object(t, s.cfgData(t), "cni-conf-windows.json", "plugins", 0)
}

// chartCase is a set of values and what they change in the default objects.
type chartCase struct {
	name   string
	values string
	edit   func(t *testing.T, want objectSet)
}

func chartCases() []chartCase {
	return []chartCase{{
		name:   "host-gw",
		values: `backend: host-gw`,
		edit: func(t *testing.T, want objectSet) {
			want.cfgData(t)["net-conf.json"] = parseJSON(t, `{"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}`)
			// An L2Bridge network, named as flannel names it.
			object(t, want.cfgData(t), "cni-conf-windows.json")["name"] = "cbr0"
			object(t, want.windowsCNI(t), "delegate")["type"] = "win-bridge"
		},
	}, {
		name:   "VNI",
		values: `{vni: 5000, backendPort: 4789, mtu: 1400}`,
		edit: func(t *testing.T, want objectSet) {
			object(t, want.cfgData(t), "net-conf.json")["Backend"] = parseJSON(t, `{"Type": "vxlan", "VNI": 5000, "Port": 4789, "MTU": 1400}`)
			object(t, want.cfgData(t), "cni-conf-windows.json")["name"] = "flannel.5000"
		},
	}, {
		name: "Linux only, dual stack, flannel's VXLAN defaults",
		values: `{windows: {enabled: false}, podCidrv6: "fd00:10:244::/56", vni: 0, backendPort: 8472,
			directRouting: true}`,
		edit: func(t *testing.T, want objectSet) {
			delete(want, want.key(t, "DaemonSet", windowsDS))
			delete(want.cfgData(t), "cni-conf-windows.json")
			want.cfgData(t)["net-conf.json"] = parseJSON(t, `{"Network": "10.244.0.0/16", "EnableIPv6": true,
				"IPv6Network": "fd00:10:244::/56", "Backend": {"Type": "vxlan", "Port": 8472, "DirectRouting": true}}`)
		},
	}, {
		name:   "network",
		values: `{podCidr: 10.50.0.0/16, serviceCidr: 10.60.0.0/16}`,
		edit: func(t *testing.T, want objectSet) {
			object(t, want.cfgData(t), "net-conf.json")["Network"] = "10.50.0.0/16"
			policies := at(t, want.windowsCNI(t), "delegate", "policies").([]any)
			object(t, policies[0], "value", "Settings")["Exceptions"] = []any{"10.50.0.0/16", "10.60.0.0/16"}
			object(t, policies[1], "value", "Settings")["DestinationPrefix"] = "10.60.0.0/16"
		},
	}, {
		name: "flannel's net-conf.json and a CNI configuration of one's own",
		values: `
netConf: '{"Network": "10.1.0.0/16", "SubnetLen": 25, "Backend": {"Type": "vxlan", "VNI": 4097, "Port": 4789, "Name": "vxlan0"}}'
cniConf: '{"name": "cbr0", "cniVersion": "1.0.0", "plugins": [{"type": "weft", "delegate": {"hairpinMode": false}}]}'
podCidr: 10.99.0.0/16`,
		edit: func(t *testing.T, want objectSet) {
			data := want.cfgData(t)
			data["net-conf.json"] = parseJSON(t, `{"Network": "10.1.0.0/16", "SubnetLen": 25, "Backend": {"Type": "vxlan", "VNI": 4097, "Port": 4789, "Name": "vxlan0"}}`)
			data["cni-conf.json"] = parseJSON(t, `{"name": "cbr0", "cniVersion": "1.0.0", "plugins": [{"type": "weft", "delegate": {"hairpinMode": false}}]}`)
			object(t, data, "cni-conf-windows.json")["name"] = "vxlan0"
			policy := object(t, want.windowsCNI(t), "delegate", "policies", 0, "value", "Settings")
			policy["Exceptions"] = []any{"10.1.0.0/16", "10.96.0.0/12"}
		},
	}, {
		name:   "image",
		values: `{image: {repository: registry.example/weft, tag: dev, pullPolicy: Always}, imagePullSecrets: [{name: regcred}]}`,
		edit: func(t *testing.T, want objectSet) {
			for _, c := range want.containers(t) {
				c["image"] = strings.Replace(c["image"].(string), "ghcr.io/weftnet/weft:v0.1.0", "registry.example/weft:dev", 1)
				c["imagePullPolicy"] = "Always"
			}
			for _, ds := range []string{linuxDS, windowsDS} {
				want.podSpec(t, ds)["imagePullSecrets"] = []any{map[string]any{"name": "regcred"}}
			}
		},
	}, {
		name:   "interfaces and flags",
		values: `{linux: {iface: [eth1, 10.0.0.1], ifaceRegex: ["^ens"], args: [--log-level=debug], ipMasq: false}, windows: {iface: [Ethernet]}}`,
		edit: func(t *testing.T, want objectSet) {
			weftd := want.container(t, linuxDS, "containers", weftdContainer)
			weftd["args"] = slices.DeleteFunc(weftd["args"].([]any), func(a any) bool { return a == "--ip-masq" })
			appendArgs(weftd, "--iface=eth1", "--iface=10.0.0.1", "--iface-regex=^ens", "--log-level=debug")
			appendArgs(want.container(t, windowsDS, "containers", weftdContainer), "--iface=Ethernet")
		},
	}, {
		name: "resources",
		// Helm merges maps with the defaults: Windows keeps its requests.
		values: `{linux: {resources: {requests: {cpu: 200m, memory: 128Mi}, limits: {memory: 512Mi}}},
			windows: {resources: {limits: {memory: 1Gi}}}}`,
		edit: func(t *testing.T, want objectSet) {
			want.container(t, linuxDS, "containers", weftdContainer)["resources"] = parseJSON(t,
				`{"requests": {"cpu": "200m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}`)
			object(t, want.container(t, windowsDS, "containers", weftdContainer), "resources")["limits"] =
				map[string]any{"memory": "1Gi"}
		},
	}, {
		name:   "network policy",
		values: `{linux: {networkPolicy: true}}`,
		edit: func(t *testing.T, want objectSet) {
			appendArgs(want.container(t, linuxDS, "containers", weftdContainer), "--network-policy")
			maps.Copy(want, objectsOf(t, networkPolicyFile, loadManifest(t, networkPolicyFile)))
		},
	}, {
		name:   "network policy on Windows",
		values: `{windows: {networkPolicy: true}}`,
		edit: func(t *testing.T, want objectSet) {
			appendArgs(want.container(t, windowsDS, "containers", weftdContainer), "--network-policy")
			maps.Copy(want, objectsOf(t, networkPolicyFile, loadManifest(t, networkPolicyFile)))
		},
	}, {
		name:   "tolerations and node selector",
		values: `{tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}], nodeSelector: {weftnet.github.io/pool: blue}}`,
		edit: func(t *testing.T, want objectSet) {
			for _, ds := range []string{linuxDS, windowsDS} {
				spec := want.podSpec(t, ds)
				spec["tolerations"] = parseJSON(t, `[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]`)
				spec["nodeSelector"] = map[string]any{"weftnet.github.io/pool": "blue"}
			}
		},
	}, {
		name:   "CNI directories",
		values: `{linux: {cniBinDir: /usr/libexec/cni, cniConfDir: /etc/cni/conf.d}}`,
		edit: func(t *testing.T, want objectSet) {
			for _, v := range want.podSpec(t, linuxDS)["volumes"].([]any) {
				switch v := v.(map[string]any); v["name"] {
				case "cni-plugin":
					object(t, v, "hostPath")["path"] = "/usr/libexec/cni"
				case "cni":
					object(t, v, "hostPath")["path"] = "/etc/cni/conf.d"
				}
			}
		},
	}, {
		name:   "Windows API server",
		values: `{windows: {apiServer: {host: 10.0.0.5, port: 6443}}}`,
		edit: func(t *testing.T, want objectSet) {
			want["ConfigMap "+namespace+"/weft-windows-env"] = parseJSON(t, `{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": {"name": "weft-windows-env", "namespace": "`+namespace+`", "labels": {"app.kubernetes.io/name": "weft"}},
				"data": {"KUBERNETES_SERVICE_HOST": "10.0.0.5", "KUBERNETES_SERVICE_PORT": "6443"}}`).(map[string]any)
		},
	}, {
		name:   "namespace of one's own",
		values: `{namespace: {name: weft-system, create: false}}`,
		edit: func(t *testing.T, want objectSet) {
			delete(want, want.key(t, "Namespace", namespace))
			moved := objectSet{}
			for key, o := range want {
				if md := object(t, o, "metadata"); md["namespace"] != nil {
					md["namespace"] = "weft-system"
					key = strings.Replace(key, namespace+"/", "weft-system/", 1)
				}
				moved[key] = o
			}
			clear(want)
			maps.Copy(want, moved)
			object(t, want.get(t, "ClusterRoleBinding", "weft"), "subjects", 0)["namespace"] = "weft-system"
		},
	}}
}

// TestHelmDefaults: with its default values the chart makes the objects of weft.yaml and
// rbac.yaml, the same to the last field: the chart and the manifests cannot drift apart.
func TestHelmDefaults(t *testing.T) {
	want := objectsOf(t, allInOne, loadManifest(t, allInOne))
	for key, o := range objectsOf(t, rbacFile, loadManifest(t, rbacFile)) {
		if d := cmp.Diff(want[key], o); d != "" {
			t.Errorf("%s: %s differs from the copy in %s (-%s +%s):\n%s", rbacFile, key, allInOne, allInOne, rbacFile, d)
		}
	}
	got := objectsOf(t, "helm template", renderChart(t, ""))
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("helm template with the default values differs from %s (-%s +chart):\n%s", allInOne, allInOne, d)
	}
}

// TestHelmValues: each value changes what it should, and nothing else: the objects the
// chart makes with it are the default ones with that change. What it makes also works:
// weft's parsers take the configs (net-conf.json on every operating system that has a
// DaemonSet, the CNI configurations through the plugin), and weftd has every flag the
// DaemonSets give it.
func TestHelmValues(t *testing.T) {
	defaults := renderChart(t, "")
	uses := flagUses{}
	for _, c := range append(chartCases(), chartCase{name: "every value", values: allOptions}) {
		t.Run(c.name, func(t *testing.T) {
			objs := renderChart(t, c.values)
			if c.edit != nil {
				want := objectsOf(t, "defaults", defaults)
				c.edit(t, want)
				if d := cmp.Diff(want, objectsOf(t, "helm template", objs)); d != "" {
					t.Errorf("helm template with %s differs from the defaults so changed (-want +chart):\n%s", c.values, d)
				}
			}
			checkConfigs(t, objs)
			uses.addDaemonSets(t, "chart with "+c.name, objs)
		})
	}
	uses.check(t)
}

// checkConfigs: the ConfigMap's configurations pass weft's parsers, for each DaemonSet's
// operating system.
func checkConfigs(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	data := configMapData(t, objs)
	net := parseNetConf(t, data)
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		goos, _, _ := unstructured.NestedString(o.Object, "spec", "template", "spec", "os", "name")
		if err := planeCaps(goos).Check(net); err != nil {
			t.Errorf("net-conf.json on %s: %v", goos, err)
		}
		if goos == "windows" {
			checkWindowsCNI(t, data)
		} else {
			checkLinuxCNI(t, data)
		}
	}
}

// TestHelmRefuses: the chart refuses values that would make a cluster its nodes cannot
// run, naming the value, before anything reaches the cluster; the Windows rules hold only
// while the Windows DaemonSet is on.
func TestHelmRefuses(t *testing.T) {
	for _, c := range []struct {
		values      string
		want        string // in helm's error
		linuxOnlyOK bool   // fine with windows.enabled=false
	}{
		{`vni: 1`, "needs a VNI from 4096 to 65535", true},
		{`vni: 0`, "needs a VNI from 4096 to 65535, given explicitly", true},
		{`backendPort: 8472`, "needs UDP port 4789", true},
		{`podCidrv6: "fd00::/56"`, "cannot carry IPv6", true},
		{`directRouting: true`, "cannot do DirectRouting", true},
		{`netConf: '{"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan", "VNI": 1}}'`, "needs a VNI", true},
		{`netConf: 'Network=10.1.0.0/16'`, "netConf is not a JSON object", false},
		{`cniConf: '{"name": "cbr0", "plugins": [{"type": "flannel"}]}'`, "cniConf has no plugin of type weft", false},
		{`backend: udp`, "/backend", false},
		{`vin: 4097`, "'vin' not allowed", false},
		{`mtu: 50`, "/mtu", false},
		{`podCidr: 10.244.0.0`, "/podCidr", false},
		{`podCidr: ""`, "a cluster network is needed", false},
		{`serviceCidr: ""`, "/serviceCidr", false},
		{`linux: {iface: eth0}`, "/linux/iface", false},
	} {
		t.Run(c.values, func(t *testing.T) {
			_, err := runHelm(t, c.values, "template", "weft", chartDir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("helm template with %s: %v; want an error saying %q", c.values, err, c.want)
			}
			if !c.linuxOnlyOK {
				return
			}
			objs := renderChart(t, c.values+"\nwindows: {enabled: false}")
			checkConfigs(t, objs)
		})
	}
}

// TestHelmLint: helm lint --strict finds nothing in the chart, with the default values or
// with any of the tests' others.
func TestHelmLint(t *testing.T) {
	for _, c := range append(chartCases(), chartCase{name: "defaults"}, chartCase{name: "every value", values: allOptions}) {
		out, err := runHelm(t, c.values, "lint", "--strict", chartDir)
		if err != nil || !bytes.Contains(out, []byte("1 chart(s) linted, 0 chart(s) failed")) {
			t.Errorf("values %s: %v\n%s", c.name, err, out)
		}
	}
}

// TestHelmAPIServer creates what the chart makes, with the default values and with every
// value changed, on a real kube-apiserver with a server-side dry run and strict field
// validation (serverDryRun). Then helm installs the chart there for real, upgrades it and
// uninstalls it: Helm keeps its record of the release in the release's namespace, which
// the chart's objects are not in.
func TestHelmAPIServer(t *testing.T) {
	defaults, options := renderChart(t, ""), renderChart(t, allOptions)
	rc := startAPIServer(t).Admin()
	t.Run("dry run, defaults", func(t *testing.T) { serverDryRun(t, rc, defaults) })
	t.Run("dry run, every value", func(t *testing.T) { serverDryRun(t, rc, options) })
	t.Run("install, upgrade, uninstall", func(t *testing.T) { helmInstall(t, rc) })
}

// helmInstall installs the chart as a user would, with the release in namespace default,
// upgrades it with another VNI, and uninstalls it. Its objects go in a namespace of their
// own, away from the dry runs' kube-flannel.
func helmInstall(t *testing.T, rc *rest.Config) {
	t.Helper()
	const ns = "weft-install"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kube := []string{"--kubeconfig=" + writeKubeconfig(t, rc), "--namespace=default"}
	values := "namespace: {name: " + ns + "}\n"

	out, err := runHelm(t, values, append([]string{"install", "weft", chartDir}, kube...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("create configmap weft-windows-env")) {
		t.Errorf("the notes do not say how to make weft-windows-env:\n%s", out)
	}
	for _, ds := range []string{linuxDS, windowsDS} {
		if _, err := cs.AppsV1().DaemonSets(ns).Get(ctx, ds, metav1.GetOptions{}); err != nil {
			t.Errorf("after helm install: DaemonSet %s: %v", ds, err)
		}
	}
	nsObj, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || nsObj.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("after helm install: namespace %s: %v, labels %v; want it for privileged pods", ns, err, nsObj.GetLabels())
	}

	if _, err := runHelm(t, values+"vni: 4097\n", append([]string{"upgrade", "weft", chartDir}, kube...)...); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, configMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if net := parseNetConf(t, cm.Data); linux.Capabilities().VNI(net.Backend) != 4097 {
		t.Errorf("after helm upgrade with vni 4097: net-conf.json %s", cm.Data["net-conf.json"])
	}

	if _, err := runHelm(t, "", append([]string{"uninstall", "weft"}, kube...)...); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().DaemonSets(ns).Get(ctx, linuxDS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall: DaemonSet %s: %v; want not found", linuxDS, err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, "weft", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall: ClusterRole weft: %v; want not found", err)
	}
}

// writeKubeconfig writes a kubeconfig file for rc, which authenticates with a token.
func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
