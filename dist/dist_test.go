package dist_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/cni"
	"github.com/weftnet/weft/cni/install"
	"github.com/weftnet/weft/dist/image"
	"github.com/weftnet/weft/internal/atomicfile"
	"github.com/weftnet/weft/internal/buildinfo"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
)

// planeCaps are the capabilities of the data plane weftd runs on goos, as a DaemonSet's
// os.name names it.
func planeCaps(goos string) backend.Capabilities {
	if goos == "windows" {
		return windows.Capabilities()
	}
	return linux.Capabilities()
}

// The files under test, relative to dist/ (the test's working directory).
const (
	allInOne = "kubernetes/weft.yaml"
	// kubeProxyWindows runs kube-proxy on weft's Windows nodes.
	kubeProxyWindows = "kubernetes/kube-proxy-windows.yaml"
	rbacFile         = "kubernetes/rbac.yaml"
	// networkPolicyFile is --network-policy's RBAC, applied beside the others.
	networkPolicyFile = "kubernetes/network-policy.yaml"
	unitFile          = "systemd/weftd.service"
	envFile           = "systemd/weftd.env"
	netConfFile       = "net-conf.json"
	linuxCNI          = "cni/10-weft.conflist"
	windowsCNI        = "cni/10-weft-windows.conflist"
	installScript     = "windows/install-weftd.ps1"
	dockerfile        = "Dockerfile"
	dockerignore      = "Dockerfile.dockerignore"
	alertRules        = "prometheus/weft-alerts.yaml"
	alertTests        = "prometheus/weft-alerts_test.yaml"
	dashboardFile     = "grafana/weft-dashboard.json"
	readme            = "../README.md" // its table of metrics is what the rules may use
)

// What the manifests are made of.
const (
	namespace      = "kube-flannel"
	configMapName  = "weft-cfg"
	linuxDS        = "weft"
	windowsDS      = "weft-windows"
	weftdContainer = "weftd"
	healthzPort    = 8285
	agentLabel     = "weftnet.github.io/agent"
)

// Markers around the copy of rbac.yaml in weft.yaml.
const (
	beginRBAC = "# --- begin rbac.yaml: a verbatim copy of rbac.yaml, checked by dist/dist_test.go ---\n"
	endRBAC   = "# --- end rbac.yaml ---\n"
)

// updateEnv, set to anything, makes TestAllInOneCarriesRBAC copy rbac.yaml into weft.yaml
// instead of failing.
const updateEnv = "WEFT_UPDATE_DIST"

// The ConfigMap's keys and the files they must equal.
var configMapFiles = map[string]string{
	"net-conf.json":         netConfFile,
	"cni-conf.json":         linuxCNI,
	"cni-conf-windows.json": windowsCNI,
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadManifest decodes every document of a YAML manifest file, as kubectl would send them.
func loadManifest(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	return parseManifest(t, path, readFile(t, path))
}

// parseManifest decodes every document of a YAML manifest (what is named name in errors).
// Keys given twice are an error, as they are for kubectl: a lenient parser would silently
// keep one of them.
func parseManifest(t *testing.T, name string, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var objs []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		data, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, doc, err)
		}
		js, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, doc, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue // only comments
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: document %d: %v", name, doc, err)
		}
		objs = append(objs, u)
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among the %d objects", kind, name, len(objs))
	return nil
}

// decode turns an object into its typed form, refusing fields the type does not have:
// a misspelt field would otherwise vanish here and be caught only by the API server.
func decode(t *testing.T, u *unstructured.Unstructured, into any) {
	t.Helper()
	js, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

func daemonSet(t *testing.T, objs []*unstructured.Unstructured, name string) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	decode(t, find(t, objs, "DaemonSet", name), &ds)
	return &ds
}

func configMapData(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	var cm corev1.ConfigMap
	decode(t, find(t, objs, "ConfigMap", configMapName), &cm)
	return cm.Data
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// jsonEqual says whether two JSON texts hold the same value, whatever their layout.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%v in %s", err, a)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	ja, _ := json.Marshal(va) // maps marshal with sorted keys
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// TestAllInOneCarriesRBAC: weft.yaml, the file users apply, holds rbac.yaml verbatim, so
// that the RBAC the Kubernetes tests check is the RBAC users get.
func TestAllInOneCarriesRBAC(t *testing.T) {
	all, rbac := string(readFile(t, allInOne)), string(readFile(t, rbacFile))
	if !strings.HasSuffix(rbac, "\n") {
		rbac += "\n" // the end marker needs a line of its own
	}
	b, e := strings.Index(all, beginRBAC), strings.Index(all, endRBAC)
	if b < 0 || e < b {
		t.Fatalf("%s: the markers around the copy of %s are missing:\n%s%s", allInOne, rbacFile, beginRBAC, endRBAC)
	}
	if all[b+len(beginRBAC):e] == rbac {
		return
	}
	if os.Getenv(updateEnv) != "" {
		updated := all[:b+len(beginRBAC)] + rbac + all[e:]
		if err := os.WriteFile(allInOne, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("copied %s into %s", rbacFile, allInOne)
		return
	}
	t.Errorf("%s's copy of %s is out of date; copy it again with\n\t%s=1 go test ./dist -run TestAllInOneCarriesRBAC", allInOne, rbacFile, updateEnv)
}

// TestManifestObjects: weft.yaml holds what an install needs, each piece referring to the
// others by the right names.
func TestManifestObjects(t *testing.T) {
	objs := loadManifest(t, allInOne)
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	want := []string{"Namespace/" + namespace, "ServiceAccount/weft", "ClusterRole/weft", "ClusterRoleBinding/weft",
		"ConfigMap/" + configMapName, "DaemonSet/" + linuxDS, "DaemonSet/" + windowsDS}
	if !slices.Equal(got, want) {
		t.Fatalf("%s holds %v, want %v (in that order: the namespace first)", allInOne, got, want)
	}
	for _, o := range objs[1:] {
		if ns := o.GetNamespace(); o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding" && ns != namespace {
			t.Errorf("%s %s: namespace %q, want %s", o.GetKind(), o.GetName(), ns, namespace)
		}
	}
	for _, name := range []string{linuxDS, windowsDS} {
		ds := daemonSet(t, objs, name)
		if sa := ds.Spec.Template.Spec.ServiceAccountName; sa != "weft" {
			t.Errorf("DaemonSet %s: service account %q, want weft (rbac.yaml's)", name, sa)
		}
		var vols []string
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				vols = append(vols, v.ConfigMap.Name)
			}
		}
		if !slices.Contains(vols, configMapName) {
			t.Errorf("DaemonSet %s: does not mount ConfigMap %s", name, configMapName)
		}
	}
}

// TestDaemonSets checks what each DaemonSet must have to run weftd on every node of its
// system: the host's network, every taint tolerated, the node name, health probes that
// kubelet can reach, requests, and the files and privileges weftd and the CNI installer
// use.
func TestDaemonSets(t *testing.T) {
	objs := loadManifest(t, allInOne)
	data := configMapData(t, objs)
	for _, tc := range []struct {
		name string
		os   string
	}{{linuxDS, "linux"}, {windowsDS, "windows"}} {
		t.Run(tc.name, func(t *testing.T) {
			ds := daemonSet(t, objs, tc.name)
			spec := ds.Spec.Template.Spec
			if !spec.HostNetwork {
				t.Error("hostNetwork is not true: weftd programs the node's network")
			}
			if spec.OS == nil || string(spec.OS.Name) != tc.os {
				t.Errorf("spec.os = %v, want %s", spec.OS, tc.os)
			}
			if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
				return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
			}) {
				t.Errorf("tolerations %v do not tolerate every taint", spec.Tolerations)
			}
			checkAffinity(t, spec.Affinity, tc.os)
			if spec.PriorityClassName != "system-node-critical" {
				t.Errorf("priorityClassName %q, want system-node-critical: the node's network must not be evicted first", spec.PriorityClassName)
			}

			c := container(t, spec.Containers, weftdContainer)
			if !slices.Contains(c.Args, "--kube-subnet-mgr") {
				t.Errorf("weftd's args %q lack --kube-subnet-mgr", c.Args)
			}
			if tc.os == "linux" && !slices.Contains(c.Args, "--ip-masq") {
				t.Errorf("weftd's args %q lack --ip-masq", c.Args)
			}
			checkFieldEnv(t, c, "NODE_NAME", "spec.nodeName")
			checkFieldEnv(t, c, "WEFTD_HEALTHZ_IP", "status.hostIP")
			checkProbes(t, c)
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				for _, cc := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
					if _, ok := cc.Resources.Requests[r]; !ok {
						t.Errorf("container %s requests no %s", cc.Name, r)
					}
				}
			}
			checkConfigMapPaths(t, spec, data)

			if tc.os == "linux" {
				checkLinux(t, spec, c)
			} else {
				checkWindows(t, spec, weftdContainer)
			}
		})
	}
}

func checkAffinity(t *testing.T, a *corev1.Affinity, goos string) {
	t.Helper()
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatal("no required node affinity")
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 {
		t.Fatalf("%d node selector terms, want 1 (terms are ORed)", len(terms))
	}
	want := []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelOSStable, Operator: corev1.NodeSelectorOpIn, Values: []string{goos}},
		// Migration: nodes labelled for flannel are left to it; unlabelled nodes run weft.
		{Key: agentLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"flannel"}},
	}
	for _, w := range want {
		if !slices.ContainsFunc(terms[0].MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == w.Key && r.Operator == w.Operator && slices.Equal(r.Values, w.Values)
		}) {
			t.Errorf("node affinity %v lacks %v", terms[0].MatchExpressions, w)
		}
	}
}

func checkFieldEnv(t *testing.T, c corev1.Container, name, field string) {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
				t.Errorf("env %s: want it from the downward API's %s", name, field)
			}
			return
		}
	}
	t.Errorf("container %s: no env %s", c.Name, name)
}

// checkProbes: liveness on /healthz and readiness on /readyz, on the port weftd's health
// server listens on, which is also the metrics port.
func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	var portName string
	for _, p := range c.Ports {
		if p.ContainerPort == healthzPort {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Fatalf("container %s declares no port %d (weftd's health and metrics)", c.Name, healthzPort)
	}
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", p.kind)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || (g.Port.String() != portName && g.Port.IntValue() != healthzPort) {
			t.Errorf("%s probe GET %s on port %s, want %s on %d", p.kind, g.Path, g.Port.String(), p.path, healthzPort)
		}
	}
}

// configMapRef matches a file of a mounted ConfigMap named in a command line, with either
// kind of slash (Windows HostProcess commands use backslashes).
var configMapRef = regexp.MustCompile(`[/\\]etc[/\\]kube-flannel[/\\]([A-Za-z0-9._-]+)`)

// checkConfigMapPaths: every file of the ConfigMap that a command names is a key of it.
func checkConfigMapPaths(t *testing.T, spec corev1.PodSpec, data map[string]string) {
	t.Helper()
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.MountPath == "/etc/kube-flannel"
		}
		for _, arg := range append(slices.Clone(c.Command), c.Args...) {
			for _, m := range configMapRef.FindAllStringSubmatch(arg, -1) {
				if !mounted {
					t.Errorf("container %s names %s but does not mount the ConfigMap at /etc/kube-flannel", c.Name, m[0])
				}
				if _, ok := data[m[1]]; !ok {
					t.Errorf("container %s names %s, which ConfigMap %s lacks", c.Name, m[0], configMapName)
				}
			}
		}
	}
}

func checkLinux(t *testing.T, spec corev1.PodSpec, weftd corev1.Container) {
	t.Helper()
	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mountsOf := func(c corev1.Container) map[string]string { // host path -> mount path
		m := map[string]string{}
		for _, vm := range c.VolumeMounts {
			if hp, ok := hostPaths[vm.Name]; ok {
				m[hp] = vm.MountPath
			}
		}
		return m
	}
	if got := mountsOf(weftd)["/run/flannel"]; got != "/run/flannel" {
		t.Errorf("weftd mounts the host's /run/flannel (subnet.env) at %q, want /run/flannel", got)
	}
	sc := weftd.SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "NET_ADMIN") || !slices.Contains(sc.Capabilities.Add, "NET_RAW") {
		t.Error("weftd lacks CAP_NET_ADMIN (netlink, nftables) or CAP_NET_RAW (the probes' ICMP sockets)")
	}
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want 1 that installs the CNI plugin", len(spec.InitContainers))
	}
	install := spec.InitContainers[0]
	m := mountsOf(install)
	for _, hp := range []string{"/opt/cni/bin", "/etc/cni/net.d"} {
		if m[hp] == "" {
			t.Errorf("init container %s does not mount the host's %s", install.Name, hp)
		}
	}
}

func checkWindows(t *testing.T, spec corev1.PodSpec, name string) {
	t.Helper()
	sc := spec.SecurityContext
	if sc == nil || sc.WindowsOptions == nil || sc.WindowsOptions.HostProcess == nil || !*sc.WindowsOptions.HostProcess {
		t.Fatal("not a HostProcess pod (securityContext.windowsOptions.hostProcess)")
	}
	if u := sc.WindowsOptions.RunAsUserName; u == nil || *u != `NT AUTHORITY\SYSTEM` {
		t.Errorf(`runAsUserName %v, want NT AUTHORITY\SYSTEM: HNS needs it`, u)
	}
	var env []string
	for _, e := range container(t, spec.Containers, name).EnvFrom {
		if e.ConfigMapRef != nil && (e.ConfigMapRef.Optional == nil || !*e.ConfigMapRef.Optional) {
			env = append(env, e.ConfigMapRef.Name)
		}
	}
	if len(env) != 1 {
		t.Errorf("%s on Windows takes its environment (the API server's address) from ConfigMaps %v, want one required", name, env)
	}
}

// TestManifestDryRun creates every object of weft.yaml on a real kube-apiserver with a
// server-side dry run and strict field validation (serverDryRun).
func TestManifestDryRun(t *testing.T) {
	serverDryRun(t, startAPIServer(t).Admin(), append(loadManifest(t, allInOne), loadManifest(t, kubeProxyWindows)...))
}

// TestKubeProxyWindows: kube-proxy-windows.yaml runs, on Windows nodes that run weft,
// weftctl kube-proxy from weft's Windows image with weftd.exe's subnet file (weft-windows's
// --subnet-file), which starts kube-proxy.exe in kernelspace mode; the pod reads the API
// server's address from weft-windows's ConfigMap. (e2e's TestKubeProxyExeUnderWine runs
// this command line, as shipped, under Wine.)
func TestKubeProxyWindows(t *testing.T) {
	ds := daemonSet(t, loadManifest(t, kubeProxyWindows), "weft-kube-proxy-windows")
	weftd := daemonSet(t, loadManifest(t, allInOne), windowsDS)
	spec := ds.Spec.Template.Spec
	if spec.OS == nil || spec.OS.Name != "windows" || !spec.HostNetwork {
		t.Errorf("spec.os %v, hostNetwork %v: want Windows, the host's network", spec.OS, spec.HostNetwork)
	}
	checkWindows(t, spec, "kube-proxy")
	checkAffinity(t, spec.Affinity, "windows")
	c := container(t, spec.Containers, "kube-proxy")
	wc := container(t, weftd.Spec.Template.Spec.Containers, weftdContainer)
	if c.Image != wc.Image || len(c.Command) != 1 || c.Command[0] != `%CONTAINER_SANDBOX_MOUNT_POINT%\weft\weftctl.exe` {
		t.Errorf("container %s: image %s, command %q; want weftctl.exe of weft-windows's image %s", c.Name, c.Image, c.Command, wc.Image)
	}
	var subnetFile string
	for _, a := range wc.Args {
		if v, ok := strings.CutPrefix(a, "--subnet-file="); ok {
			subnetFile = v
		}
	}
	i := slices.Index(c.Args, "--")
	if i < 0 || len(c.Args) < i+3 || c.Args[0] != "kube-proxy" || !slices.Contains(c.Args[:i], "--subnet-file="+subnetFile) ||
		!slices.Contains(c.Args[i+2:], "--proxy-mode=kernelspace") || !slices.Contains(c.Args[i+2:], "--hostname-override=$(NODE_NAME)") {
		t.Errorf("args %q: want weftctl kube-proxy --subnet-file=%s -- KUBE-PROXY --proxy-mode=kernelspace --hostname-override=$(NODE_NAME) ...", c.Args, subnetFile)
	}
	checkFieldEnv(t, c, "NODE_NAME", "spec.nodeName")
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != wc.EnvFrom[0].ConfigMapRef.Name {
		t.Errorf("envFrom %+v: want weft-windows's ConfigMap, %+v", c.EnvFrom, wc.EnvFrom)
	}
}

// startAPIServer starts a kube-apiserver configured as clusters that run node agents are.
func startAPIServer(t *testing.T) *kubetest.Server {
	t.Helper()
	// Such clusters allow privileged pods (kubeadm sets this flag); HostProcess pods are
	// privileged ones, refused otherwise.
	return kubetest.Start(t, kubetest.Options{Args: []string{"--allow-privileged=true"}})
}

// serverDryRun creates objs on the API server of rc with a server-side dry run and strict
// field validation: the schema, defaulting, validation and admission of the API server a
// user applies them to. Namespaces are then created for real (the namespaced objects need
// them), and so are service accounts, so that each DaemonSet's pod, as the DaemonSet
// controller would make it, can be dry-run too: pods pass admission plugins that DaemonSets
// do not (PodSecurity enforcement, the service account, the priority class). Warnings from
// the server are errors too. Several sets of objects can be tried on one server when each
// has namespaces of its own.
func serverDryRun(t *testing.T, rc *rest.Config, objs []*unstructured.Unstructured) {
	t.Helper()
	rc = rest.CopyConfig(rc)
	warnings := &warningRecorder{}
	rc.WarningHandler = warnings

	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	client := func(o *unstructured.Unstructured) dynamic.ResourceInterface {
		t.Helper()
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, o.GetName(), err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			return dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		return dyn.Resource(m.Resource)
	}
	ctx := context.Background()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict}
	create := func(o *unstructured.Unstructured, opts metav1.CreateOptions) {
		t.Helper()
		if _, err := client(o).Create(ctx, o, opts); err != nil {
			t.Errorf("create %s %s (dry run %v): %v", o.GetKind(), o.GetName(), opts.DryRun, err)
		}
	}

	stored := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	// Namespaces first, wherever they are in objs: the rest goes in them.
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			create(o, dryRun)
			create(o, stored)
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace":
		case "ServiceAccount":
			create(o, dryRun)
			create(o, stored)
		default:
			create(o, dryRun)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			create(podOf(t, o), dryRun)
		}
	}
	// A dry run must have stored nothing: the ConfigMaps and DaemonSets are not there.
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" && o.GetKind() != "DaemonSet" {
			continue
		}
		if _, err := client(o).Get(ctx, o.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s: after a dry run, get says %v; want not found", o.GetKind(), o.GetName(), err)
		}
	}
	for _, w := range warnings.all() {
		t.Errorf("API server warning: %s", w)
	}
}

// podOf is the pod the DaemonSet controller would make of ds's template.
func podOf(t *testing.T, ds *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	tmpl, ok, err := unstructured.NestedMap(ds.Object, "spec", "template")
	if err != nil || !ok {
		t.Fatalf("DaemonSet %s: no spec.template (%v)", ds.GetName(), err)
	}
	md, _, _ := unstructured.NestedMap(tmpl, "metadata")
	if md == nil {
		md = map[string]any{}
	}
	md["name"] = ds.GetName() + "-dry-run"
	md["namespace"] = ds.GetNamespace()
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   md,
		"spec":       tmpl["spec"],
	}}
}

// warningRecorder keeps the API server's warnings (deprecations, PodSecurity in warn mode,
// fields it dropped).
type warningRecorder struct {
	mu   sync.Mutex
	list []string
}

var _ rest.WarningHandler = (*warningRecorder)(nil)

func (w *warningRecorder) HandleWarningHeader(code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}

// TestNetConf: the sample net-conf.json and the ConfigMap's are the same, pass weft's
// parser, and suit Linux and Windows nodes alike (VNI 4096, port 4789).
func TestNetConf(t *testing.T) {
	data := configMapData(t, loadManifest(t, allInOne))
	sample := readFile(t, netConfFile)
	if !jsonEqual(t, sample, []byte(data["net-conf.json"])) {
		t.Errorf("ConfigMap %s's net-conf.json differs from %s", configMapName, netConfFile)
	}
	for _, src := range []struct {
		name string
		data []byte
	}{{netConfFile, sample}, {"ConfigMap " + configMapName, []byte(data["net-conf.json"])}} {
		cfg, err := subnet.ParseConfig(src.data)
		if err != nil {
			t.Errorf("%s: %v", src.name, err)
			continue
		}
		for _, goos := range []string{"linux", "windows"} {
			if err := planeCaps(goos).Check(cfg); err != nil {
				t.Errorf("%s on %s: %v", src.name, goos, err)
			}
		}
		if cfg.Backend.Type != subnet.BackendVXLAN || linux.Capabilities().VNI(cfg.Backend) != 4096 || cfg.Backend.Port != 4789 {
			t.Errorf("%s: backend %+v, want vxlan with VNI 4096 and port 4789 (mixed clusters)", src.name, cfg.Backend)
		}
	}
}

// TestCNIConfigs: the CNI configurations shipped as files and in the ConfigMap are the
// same; each is a configuration list a runtime accepts; its weft entry, as the runtime
// hands it to the plugin, passes the plugin's own parser and makes the delegate intended
// for the network config of the same ConfigMap.
func TestCNIConfigs(t *testing.T) {
	data := configMapData(t, loadManifest(t, allInOne))
	for key, file := range configMapFiles {
		if !jsonEqual(t, readFile(t, file), []byte(data[key])) {
			t.Errorf("ConfigMap %s's %s differs from %s", configMapName, key, file)
		}
	}
	t.Run("linux", func(t *testing.T) { checkLinuxCNI(t, data) })
	t.Run("windows", func(t *testing.T) { checkWindowsCNI(t, data) })

	// The runtime uses the first configuration by file name: once the installer has set
	// flannel's aside, weft's is the one; after a rollback flannel's installer writes its
	// own again, and it comes first.
	t.Run("runtime's choice", func(t *testing.T) {
		dir := t.TempDir()
		// The installer's temporary file is atomicfile's: .NAME.tmp-RANDOM.
		for _, f := range []string{"10-weft.conflist", "10-flannel.conflist" + install.DisabledSuffix, ".10-weft.conflist.tmp-123456"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(data["cni-conf.json"]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		exts := []string{".conf", ".conflist", ".json"}
		files, err := libcni.ConfFiles(dir, exts)
		if err != nil || len(files) != 1 || filepath.Base(files[0]) != "10-weft.conflist" {
			t.Errorf("configurations the runtime sees: %v, %v; want only 10-weft.conflist", files, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "10-flannel.conflist"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		files, _ = libcni.ConfFiles(dir, exts)
		slices.Sort(files)
		if len(files) == 0 || filepath.Base(files[0]) != "10-flannel.conflist" {
			t.Errorf("after a rollback the runtime sees %v first, want 10-flannel.conflist", files)
		}
	})
}

// testSubnet is a node's subnet for the CNI checks: 10.244.7.0/24, or the first /24 of
// another network.
func testSubnet(t *testing.T, net *subnet.Config) netip.Prefix {
	t.Helper()
	node := netip.MustParsePrefix("10.244.7.0/24")
	if !net.Network.Contains(node.Addr()) {
		node = netip.PrefixFrom(net.Network.Addr(), max(24, net.Network.Bits())).Masked()
	}
	if !net.Network.Contains(node.Addr()) {
		t.Fatalf("test subnet %s is outside the network %s", node, net.Network)
	}
	return node
}

func parseNetConf(t *testing.T, data map[string]string) *subnet.Config {
	t.Helper()
	net, err := subnet.ParseConfig([]byte(data["net-conf.json"]))
	if err != nil {
		t.Fatalf("ConfigMap %s's net-conf.json: %v", configMapName, err)
	}
	return net
}

// checkLinuxCNI: the ConfigMap's cni-conf.json, as the runtime hands it to the weft plugin,
// makes the bridge delegate that flannel's would, over the node's subnet.
func checkLinuxCNI(t *testing.T, data map[string]string) {
	t.Helper()
	net := parseNetConf(t, data)
	node := testSubnet(t, net)
	env := subnet.NewEnv(net.Network, node, netip.Prefix{}, netip.Prefix{}, 1450, true)
	conf := weftEntry(t, []byte(data["cni-conf.json"]))
	d, err := cni.BuildDelegate(cni.Linux, conf, env, hnsfile.Network{})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name string
		Type string
		IPAM struct {
			Ranges [][]struct{ Subnet string }
		}
	}
	if err := json.Unmarshal(d.Config, &got); err != nil {
		t.Fatal(err)
	}
	// cbr0 is flannel's network name: pods made by flannel are torn down under it.
	if d.Type != "bridge" || got.Name != "cbr0" || len(got.IPAM.Ranges) != 1 || got.IPAM.Ranges[0][0].Subnet != node.String() {
		t.Errorf("delegate %s %s, want bridge named cbr0 with host-local on %s", d.Type, d.Config, node)
	}
}

// checkWindowsCNI: the ConfigMap's cni-conf-windows.json alone names the HNS network of
// net-conf.json's backend and the delegate that goes with it (weftd does not write
// hns.json), keeps the cluster network and the service network from outbound NAT, and is
// in the form containerd needs: "apiVersion": 2, whose policies are HNS v2 endpoint
// policies (Type and Settings only: a v1 policy's ExceptionList or ROUTE would be dropped
// or refused), and a cniVersion the runtime may CHECK with (0.4.0 or later).
func checkWindowsCNI(t *testing.T, data map[string]string) {
	t.Helper()
	net := parseNetConf(t, data)
	node := testSubnet(t, net)
	list := []byte(data["cni-conf-windows.json"])
	conf := weftEntry(t, list)
	d, err := cni.BuildDelegate(cni.Windows, conf, subnet.NewEnv(net.Network, node, netip.Prefix{}, netip.Prefix{}, 1450, false), hnsfile.Network{})
	if err != nil {
		t.Fatal(err)
	}
	hnsName, delegate := net.Backend.Name, "win-overlay"
	switch {
	case net.Backend.Type == subnet.BackendHostGW:
		delegate = "win-bridge"
		if hnsName == "" {
			hnsName = "cbr0"
		}
	case hnsName == "":
		hnsName = fmt.Sprintf("flannel.%d", windows.Capabilities().VNI(net.Backend))
	}
	var got struct {
		Name       string
		APIVersion int `json:"apiVersion"`
		Policies   []struct {
			Name  string
			Value json.RawMessage
		}
	}
	if err := json.Unmarshal(d.Config, &got); err != nil {
		t.Fatal(err)
	}
	if d.Type != delegate || got.Name != hnsName {
		t.Errorf("delegate %s named %q, want %s named %q (%s finds the HNS network by it)", d.Type, got.Name, delegate, hnsName, delegate)
	}
	if got.APIVersion != 2 {
		t.Errorf("delegate apiVersion %d, want 2: containerd's CNI_NETNS is a namespace GUID, which %s's v1 path cannot take", got.APIVersion, delegate)
	}
	l, err := libcni.NetworkConfFromBytes(list)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := version.GreaterThanOrEqualTo(l.CNIVersion, "0.4.0"); err != nil || !ok {
		t.Errorf("cniVersion %q: the runtime cannot CHECK pods before 0.4.0 (%v)", l.CNIVersion, err)
	}
	var nat, route []string
	for i, p := range got.Policies {
		if p.Name != "EndpointPolicy" {
			t.Errorf("policy %d is a %q, want an EndpointPolicy", i, p.Name)
		}
		var v struct {
			Type     string
			Settings json.RawMessage
		}
		dec := json.NewDecoder(bytes.NewReader(p.Value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Errorf("policy %d %s is not in HNS v2's form (Type and Settings): %v", i, p.Value, err)
			continue
		}
		switch v.Type {
		case "OutBoundNAT":
			var s struct{ Exceptions []string }
			if err := json.Unmarshal(v.Settings, &s); err != nil {
				t.Errorf("OutBoundNAT settings %s: %v", v.Settings, err)
			}
			nat = append(nat, s.Exceptions...)
		case "SDNRoute":
			var s struct {
				DestinationPrefix string
				NeedEncap         bool
			}
			if err := json.Unmarshal(v.Settings, &s); err != nil || !s.NeedEncap {
				t.Errorf("SDNRoute settings %s (%v): want a destination with NeedEncap", v.Settings, err)
			}
			route = append(route, s.DestinationPrefix)
		default:
			t.Errorf("policy %d of type %q: want OutBoundNAT or SDNRoute", i, v.Type)
		}
	}
	if !slices.Contains(nat, net.Network.String()) {
		t.Errorf("OutBoundNAT exceptions %v lack the cluster network %s", nat, net.Network)
	}
	if len(route) == 0 {
		t.Error("no SDNRoute: service traffic would not go through the vSwitch")
	}
	for _, r := range route {
		if !slices.Contains(nat, r) {
			t.Errorf("service network %s has an SDNRoute policy but is not an OutBoundNAT exception %v", r, nat)
		}
	}
}

// weftEntry parses a configuration list as a runtime does and returns its weft plugin's
// configuration as the runtime passes it on (with the list's name and cniVersion), parsed
// by the plugin.
func weftEntry(t *testing.T, list []byte) cni.Config {
	t.Helper()
	l, err := libcni.NetworkConfFromBytes(list)
	if err != nil {
		t.Fatalf("not a CNI configuration list: %v", err)
	}
	for _, p := range l.Plugins {
		if p.Network.Type != "weft" {
			continue
		}
		p, err := libcni.InjectConf(p, map[string]any{"name": l.Name, "cniVersion": l.CNIVersion})
		if err != nil {
			t.Fatal(err)
		}
		conf, err := cni.ParseConfig(p.Bytes)
		if err != nil {
			t.Fatalf("the weft plugin refuses its configuration: %v", err)
		}
		return conf
	}
	t.Fatalf("no plugin of type weft in %s", list)
	return cni.Config{}
}

// flannelConf is flannel's configuration as a node running flannel has it.
const flannelConf = `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"isDefaultGateway":true}}]}`

// hostMount is a directory of a scratch node standing in for one of a container's volume
// mounts.
type hostMount struct {
	source   string // the directory on this machine
	readOnly bool
}

// fakeNode makes, under root, what container c of the pod spec mounts: a directory for each
// hostPath volume, at root/host/<its path> (the node's file system), holding flannel's
// configuration if it is /etc/cni/net.d, and a directory with the ConfigMap's keys as
// files, as kubelet projects it. It returns the mounts by the container's path.
func fakeNode(t *testing.T, root string, spec corev1.PodSpec, c corev1.Container, data map[string]string) map[string]hostMount {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]hostMount{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Fatalf("container %s mounts %s, which is not a volume of the pod", c.Name, m.Name)
		}
		var dir string
		switch {
		case v.HostPath != nil:
			dir = filepath.Join(root, "host", v.HostPath.Path)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if v.HostPath.Path == "/etc/cni/net.d" {
				writeFile(t, filepath.Join(dir, "10-flannel.conflist"), flannelConf, 0o644)
			}
		case v.ConfigMap != nil && v.ConfigMap.Name == configMapName:
			dir = filepath.Join(root, "configmap", m.Name)
			for k, v := range data {
				writeFile(t, filepath.Join(dir, k), v, 0o644)
			}
		default:
			t.Fatalf("container %s mounts volume %s, which this test cannot make", c.Name, m.Name)
		}
		mounts[m.MountPath] = hostMount{source: dir, readOnly: m.ReadOnly}
	}
	return mounts
}

// writeFile writes a file of a scratch node, making its directories.
func writeFile(t *testing.T, path, data string, perm os.FileMode) {
	t.Helper()
	if err := atomicfile.Write(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
}

// checkInstalled checks a scratch node after the CNI installer ran: the plugin (the
// given bytes, mode 0755) in /opt/cni/bin, the ConfigMap's cni-conf.json (mode 0644) in
// /etc/cni/net.d with flannel's configuration set aside and nothing else there. It
// returns the plugin's file, to tell whether a later run replaced it.
func checkInstalled(t *testing.T, root string, plugin []byte, data map[string]string) os.FileInfo {
	t.Helper()
	binDir, netDir := filepath.Join(root, "host/opt/cni/bin"), filepath.Join(root, "host/etc/cni/net.d")
	fi, err := os.Stat(filepath.Join(binDir, "weft"))
	if err != nil {
		t.Fatalf("the plugin is not installed: %v", err)
	}
	if fi.Mode() != 0o755 {
		t.Errorf("plugin mode %v, want 0755", fi.Mode())
	}
	if !bytes.Equal(readFile(t, filepath.Join(binDir, "weft")), plugin) {
		t.Error("the installed plugin differs from the image's")
	}
	entries, err := os.ReadDir(netDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"10-flannel.conflist" + install.DisabledSuffix, "10-weft.conflist"}; !slices.Equal(names, want) {
		t.Errorf("/etc/cni/net.d holds %v, want %v", names, want)
	}
	if got := readFile(t, filepath.Join(netDir, "10-weft.conflist")); string(got) != data["cni-conf.json"] {
		t.Errorf("10-weft.conflist is\n%s\nwant the ConfigMap's cni-conf.json:\n%s", got, data["cni-conf.json"])
	}
	if cf, err := os.Stat(filepath.Join(netDir, "10-weft.conflist")); err != nil || cf.Mode() != 0o644 {
		t.Errorf("10-weft.conflist: %v, %v; want mode 0644", cf, err)
	}
	if got := readFile(t, filepath.Join(netDir, "10-flannel.conflist"+install.DisabledSuffix)); string(got) != flannelConf {
		t.Errorf("flannel's configuration set aside is %s", got)
	}
	return fi
}

// TestInstallCNI runs the Linux DaemonSet's init container, as the manifest gives it, with
// the plugin built from this checkout, on a scratch node: it installs itself and the
// ConfigMap's configuration and sets flannel's aside; a second run (a restarted pod)
// changes nothing. TestImageInRunc runs the same in the image, with a real runtime.
func TestInstallCNI(t *testing.T) {
	objs := loadManifest(t, allInOne)
	data := configMapData(t, objs)
	spec := daemonSet(t, objs, linuxDS).Spec.Template.Spec
	ic := spec.InitContainers[0]
	cmd := append(slices.Clone(ic.Command), ic.Args...)
	if len(cmd) < 2 || cmd[0] != image.PluginPath || cmd[1] != "install" {
		t.Fatalf("init container runs %q, want %s install ...", cmd, image.PluginPath)
	}
	root := t.TempDir()
	mounts := fakeNode(t, root, spec, ic, data)
	plugin := buildCommand(t, "weft")
	args := slices.Clone(cmd[1:])
	for i, a := range args {
		// Each path under a mount, moved to the directory standing in for it.
		k, v, ok := strings.Cut(a, "=")
		for mp, m := range mounts {
			if rest, under := strings.CutPrefix(v, mp); ok && under && (rest == "" || rest[0] == '/') {
				args[i] = k + "=" + m.source + rest
			}
		}
		// As root, a path left alone would be this machine's.
		if _, v, ok := strings.Cut(args[i], "="); ok && strings.HasPrefix(v, "/") && !strings.HasPrefix(v, root) {
			t.Fatalf("init container argument %s is under no volume mount of %s", a, ic.Name)
		}
	}
	var first os.FileInfo
	for run := 1; run <= 2; run++ {
		out, err := exec.Command(plugin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("run %d: %s %q: %v\n%s", run, plugin, args, err, out)
		}
		fi := checkInstalled(t, root, readFile(t, plugin), data)
		if run == 1 {
			first = fi
		} else if !os.SameFile(first, fi) {
			t.Error("the second run replaced the plugin that the first installed")
		}
	}
}

// buildCommand builds one of weft's commands (weftd, weftctl, weft) from this checkout
// into a temporary directory.
func buildCommand(t *testing.T, name string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build %s with", name)
	}
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/weftnet/weft/cmd/"+name)
	cmd.Dir = ".."
	// VCS stamping would need git and a repository this user owns; it says nothing here.
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, out)
	}
	return bin
}

// unitSettings reads a systemd unit's Key=Value lines by section.
func unitSettings(data []byte) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	section := ""
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, _ := strings.Cut(line, "=")
			out[section][strings.TrimSpace(k)] = append(out[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out
}

// TestSystemdUnit: the unit is what weftd needs (Type=notify: weftd reports READY=1 after
// its first convergence) and systemd-analyze verify finds nothing wrong with it, run on a
// copy whose ExecStart is a weftd built from this checkout (verify insists that the
// binary exists).
func TestSystemdUnit(t *testing.T) {
	unit := readFile(t, unitFile)
	s := unitSettings(unit)["Service"]
	for key, want := range map[string]string{
		"Type":            "notify",
		"ExecStart":       "/usr/local/bin/weftd",
		"EnvironmentFile": "/etc/weft/weftd.env",
		"Restart":         "always",
	} {
		if got := s[key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s=%q, want %s", unitFile, key, got, want)
		}
	}
	if km := s["KillMode"]; len(km) > 0 && km[len(km)-1] != "control-group" && km[len(km)-1] != "mixed" {
		t.Errorf("%s: KillMode=%s would leave processes behind", unitFile, km[len(km)-1])
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd): the unit was not verified")
	}
	weftd := buildCommand(t, "weftd")
	copyPath := filepath.Join(t.TempDir(), "weftd.service")
	if err := os.WriteFile(copyPath, bytes.ReplaceAll(unit, []byte("ExecStart=/usr/local/bin/weftd"), []byte("ExecStart="+weftd)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", copyPath).CombinedOutput()
	// verify exits 0 on settings it ignores ("Failed to parse ..., ignoring"): any output
	// is a finding.
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}

// weftdFlags returns the flags weftd has, from its -h output.
func weftdFlags(t *testing.T, weftd string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(weftd, "-h").CombinedOutput() // -h exits 1 after the usage
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["etcd-endpoints"] {
		t.Fatalf("no flags in weftd -h:\n%s", out)
	}
	return flags
}

var (
	envName  = regexp.MustCompile(`(?m)^#?\s*(?:WEFTD|FLANNELD)_([A-Z0-9_]+)=`)
	flagArg  = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)`)
	psFlag   = regexp.MustCompile(`\.Add\(['"]--([a-z0-9][a-z0-9-]*)`)
	psEnv    = regexp.MustCompile(`\bWEFTD_([A-Z0-9_]+)=`)
	nonFlags = map[string]bool{} // WEFTD_ variables that are not flags: none so far
)

func envToFlag(name string) string { return strings.ToLower(strings.ReplaceAll(name, "_", "-")) }

// TestWeftdFlags: every flag, and every WEFTD_ or FLANNELD_ variable, that the unit's
// environment file, the DaemonSets and the Windows install script give weftd is one
// weftd has. weftd refuses unknown flags on the command line, and ignores unknown
// variables, which is worse.
func TestWeftdFlags(t *testing.T) {
	uses := flagUses{}
	for _, m := range envName.FindAllStringSubmatch(string(readFile(t, envFile)), -1) {
		uses.add(envToFlag(m[1]), envFile)
	}
	uses.addDaemonSets(t, allInOne, loadManifest(t, allInOne))
	ps := string(readFile(t, installScript))
	for _, m := range psFlag.FindAllStringSubmatch(ps, -1) {
		uses.add(m[1], installScript)
	}
	for _, m := range psEnv.FindAllStringSubmatch(ps, -1) {
		uses.add(envToFlag(m[1]), installScript)
	}
	uses.check(t)
}

// flagUses maps each flag given to weftd to where it is given.
type flagUses map[string][]string

func (u flagUses) add(flag, where string) {
	if !nonFlags[flag] && !slices.Contains(u[flag], where) {
		u[flag] = append(u[flag], where)
	}
}

// addDaemonSets adds the flags, and the WEFTD_ variables, that the DaemonSets of objs
// (from source) give weftd.
func (u flagUses) addDaemonSets(t *testing.T, source string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		where := fmt.Sprintf("%s DaemonSet %s", source, o.GetName())
		c := container(t, daemonSet(t, objs, o.GetName()).Spec.Template.Spec.Containers, weftdContainer)
		for _, a := range c.Args {
			if m := flagArg.FindStringSubmatch(a); m != nil {
				u.add(m[1], where)
			}
		}
		for _, e := range c.Env {
			if n, ok := strings.CutPrefix(e.Name, "WEFTD_"); ok {
				u.add(envToFlag(n), where)
			}
		}
	}
}

// check fails for every flag that weftd, built from this checkout, does not have.
func (u flagUses) check(t *testing.T) {
	t.Helper()
	have := weftdFlags(t, buildCommand(t, "weftd"))
	var missing []string
	for flag, where := range u {
		if !have[flag] {
			missing = append(missing, fmt.Sprintf("--%s (%s)", flag, strings.Join(where, ", ")))
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		t.Errorf("weftd has no flag %s", m)
	}
}

// TestInstallScript checks the PowerShell script statically (no PowerShell here): every
// parameter is documented and every documented parameter exists, and the Windows
// DaemonSet calls it with parameters it has.
func TestInstallScript(t *testing.T) {
	ps := string(readFile(t, installScript))
	start := strings.Index(ps, "param(")
	end := strings.Index(ps[max(start, 0):], "\n)")
	if start < 0 || end < 0 {
		t.Fatalf("%s: no param( ... ) block", installScript)
	}
	var params, documented []string
	for _, m := range regexp.MustCompile(`\[(?:string|string\[\]|switch|int)\]\$(\w+)`).FindAllStringSubmatch(ps[start:start+end], -1) {
		params = append(params, m[1])
	}
	for _, m := range regexp.MustCompile(`(?m)^\.PARAMETER (\w+)\s*$`).FindAllStringSubmatch(ps, -1) {
		documented = append(documented, m[1])
	}
	if len(params) == 0 {
		t.Fatalf("%s: no parameters found", installScript)
	}
	if !slices.Equal(params, documented) {
		t.Errorf("%s: parameters %v, documented (.PARAMETER, in the same order) %v", installScript, params, documented)
	}

	ic := daemonSet(t, loadManifest(t, allInOne), windowsDS).Spec.Template.Spec.InitContainers[0]
	args := append(slices.Clone(ic.Command), ic.Args...)
	i := slices.Index(args, "-File")
	if i < 0 || i+1 >= len(args) || !strings.HasSuffix(args[i+1], `\`+filepath.Base(installScript)) {
		t.Fatalf("the Windows init container does not run %s: %q", filepath.Base(installScript), args)
	}
	for _, a := range args[i+2:] {
		if p, ok := strings.CutPrefix(a, "-"); ok && !slices.ContainsFunc(params, func(q string) bool { return strings.EqualFold(p, q) }) {
			t.Errorf("the Windows init container passes %s, which %s lacks", a, installScript)
		}
	}
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T, data []byte) []instruction {
	t.Helper()
	var out []instruction
	var cur *instruction
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // comments (and parser directives) are dropped, even inside continuations
		}
		cont := strings.HasSuffix(trimmed, `\`)
		trimmed = strings.TrimSuffix(trimmed, `\`)
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			out = append(out, instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
			cur = &out[len(out)-1]
		} else {
			cur.args += " " + strings.TrimSpace(trimmed)
		}
		if !cont {
			cur = nil
		}
	}
	if cur != nil {
		t.Fatalf("%s: ends in a continuation", dockerfile)
	}
	return out
}

// stage is one FROM of a Dockerfile and the files its COPYs put in the image.
type stage struct {
	name, base string
	files      map[string]bool // absolute paths in the image
	entrypoint []string
}

// has says whether path is a file of the stage or a directory holding one.
func (s *stage) has(path string) bool {
	for f := range s.files {
		if f == path || strings.HasPrefix(f, path+"/") {
			return true
		}
	}
	return false
}

func (s *stage) String() string { return s.name }

var argRef = regexp.MustCompile(`\$\{?(\w+)\}?`)

// TestDockerfile checks the Dockerfile of the Windows image without a container engine,
// which this machine lacks: the build stage is Go with CGO off and builds the three
// commands; every file copied from the context exists and is not ignored; the Windows
// stage, the last, copies what the build produces and starts weftd; and the paths the
// Windows DaemonSet runs are in the image. (The Linux image is dist/image's: TestImageFiles.)
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, readFile(t, dockerfile))
	args := map[string]string{}
	var stages []*stage
	var built []string // what the build stage's go build produces, by package
	ignore := readIgnore(t)
	for _, in := range ins {
		where := fmt.Sprintf("%s:%d", dockerfile, in.line)
		var cur *stage
		if len(stages) > 0 {
			cur = stages[len(stages)-1]
		}
		switch in.cmd {
		case "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			if cur == nil {
				args[k] = v
			}
		case "FROM":
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			st := &stage{base: argRef.ReplaceAllStringFunc(f[0], func(ref string) string {
				return args[argRef.FindStringSubmatch(ref)[1]]
			}), files: map[string]bool{}}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			if st.base == "" || strings.Contains(st.base, "$") {
				t.Errorf("%s: base image %q does not resolve", where, f[0])
			}
			stages = append(stages, st)
		case "RUN":
			if !strings.Contains(in.args, "go build") {
				continue
			}
			if !strings.Contains(in.args, "CGO_ENABLED=0") {
				t.Errorf("%s: go build without CGO_ENABLED=0: the runtime image has no libc to link", where)
			}
			for _, pkg := range regexp.MustCompile(`\./cmd/(\w+)`).FindAllStringSubmatch(in.args, -1) {
				if _, err := os.Stat(filepath.Join("..", "cmd", pkg[1])); err != nil {
					t.Errorf("%s: builds %s: %v", where, pkg[0], err)
				}
				built = append(built, pkg[1])
			}
			if !strings.Contains(in.args, "-o /out/") {
				t.Errorf("%s: go build does not write to /out/", where)
			}
			if !strings.Contains(in.args, "-tags="+buildinfo.Tags+" ") {
				t.Errorf("%s: go build without -tags=%s (buildinfo.Tags)", where, buildinfo.Tags)
			}
		case "COPY":
			copyInto(t, where, in.args, cur, built, ignore)
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &cur.entrypoint); err != nil {
				t.Errorf("%s: ENTRYPOINT is not in exec form (a JSON list): %v", where, err)
			}
		}
	}
	byName := map[string]*stage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	if b := byName["build"]; b == nil || !strings.HasPrefix(b.base, "golang:") {
		t.Fatalf("no stage build FROM golang")
	}
	if !slices.Equal(built, []string{"weftd", "weftctl", "weft"}) {
		t.Errorf("the build stage builds %v, want weftd, weftctl and weft", built)
	}
	windows := stages[len(stages)-1]
	if windows.name != "windows" || len(stages) != 2 {
		t.Fatalf("stages %v: want build and windows, the default target (the Linux image is dist/image's)", stages)
	}
	if len(windows.entrypoint) == 0 {
		t.Errorf("stage %s has no ENTRYPOINT", windows.name)
	}

	// The DaemonSet runs what the image holds.
	objs := loadManifest(t, allInOne)
	wspec := daemonSet(t, objs, windowsDS).Spec.Template.Spec
	const sandbox = `%CONTAINER_SANDBOX_MOUNT_POINT%\`
	for _, c := range append(slices.Clone(wspec.InitContainers), wspec.Containers...) {
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			rest, ok := strings.CutPrefix(a, sandbox)
			if !ok || strings.HasPrefix(rest, `etc\kube-flannel\`) {
				continue // not a file of the image (the ConfigMap is checked elsewhere)
			}
			if p := "/" + strings.ReplaceAll(rest, `\`, "/"); !windows.has(p) {
				t.Errorf("the Windows DaemonSet's %s runs %s, which is not in the image %v", c.Name, a, windows.files)
			}
		}
	}
}

// TestImageFiles: the Linux DaemonSet runs what the Linux image (dist/image) holds, which
// has no shell: weftd, the image's entrypoint, and in the init container the plugin's own
// installer. TestImageInRunc runs them in the image.
func TestImageFiles(t *testing.T) {
	files := map[string]bool{}
	for _, b := range image.Binaries() {
		files[b.Path] = true
	}
	spec := daemonSet(t, loadManifest(t, allInOne), linuxDS).Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if len(c.Command) == 0 || !files[c.Command[0]] {
			t.Errorf("container %s runs %q, which is not in the image %v", c.Name, c.Command, image.Binaries())
		}
	}
	if cmd := container(t, spec.Containers, weftdContainer).Command; !slices.Equal(cmd, []string{image.WeftdPath}) {
		t.Errorf("weftd's container runs %q, want the image's weftd, %s", cmd, image.WeftdPath)
	}
}

// copyInto checks one COPY and records the files it puts in the stage.
func copyInto(t *testing.T, where, argStr string, st *stage, built []string, ignored func(string) bool) {
	t.Helper()
	f := strings.Fields(argStr)
	from := ""
	for len(f) > 0 && strings.HasPrefix(f[0], "--") {
		if v, ok := strings.CutPrefix(f[0], "--from="); ok {
			from = v
		}
		f = f[1:]
	}
	if len(f) < 2 {
		t.Errorf("%s: COPY needs a source and a destination", where)
		return
	}
	srcs, dst := f[:len(f)-1], f[len(f)-1]
	for _, src := range srcs {
		switch from {
		case "":
			if _, err := os.Stat(filepath.Join("..", src)); err != nil {
				t.Errorf("%s: COPY %s: not in the build context: %v", where, src, err)
			}
			if src != "." && ignored(filepath.ToSlash(filepath.Clean(src))) {
				t.Errorf("%s: COPY %s: excluded by %s", where, src, dockerignore)
			}
		case "build":
			base := strings.TrimPrefix(src, "/out/")
			exe := strings.HasSuffix(base, ".exe")
			if !strings.HasPrefix(src, "/out/") || !slices.Contains(built, strings.TrimSuffix(base, ".exe")) {
				t.Errorf("%s: COPY --from=build %s: the build stage does not produce it", where, src)
			}
			if exe != (st.name == "windows") {
				t.Errorf("%s: COPY %s into stage %s: .exe files are for the windows stage only", where, src, st.name)
			}
		default:
			t.Errorf("%s: COPY --from=%s: unknown stage", where, from)
		}
		if strings.HasSuffix(dst, "/") {
			st.files[dst+filepath.Base(src)] = true
		} else {
			st.files[dst] = true
		}
	}
}

// readIgnore returns a matcher for the Dockerfile's ignore file, after checking that it
// keeps out nothing the build needs: go.mod, go.sum and the directory of every package of
// this module that the commands import, on Linux and on Windows.
func readIgnore(t *testing.T) func(string) bool {
	t.Helper()
	var patterns []string
	for line := range strings.Lines(string(readFile(t, dockerignore))) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if line[0] == '!' {
			t.Fatalf("%s: exceptions (%s) are beyond this test's matcher", dockerignore, line)
		}
		patterns = append(patterns, strings.Trim(line, "/"))
	}
	ignored := func(path string) bool {
		parts := strings.Split(path, "/")
		for i := range parts {
			prefix := strings.Join(parts[:i+1], "/")
			for _, p := range patterns {
				if ok, _ := filepath.Match(p, prefix); ok {
					return true
				}
				if rest, ok := strings.CutPrefix(p, "**/"); ok {
					if ok, _ := filepath.Match(rest, parts[i]); ok {
						return true
					}
				}
			}
		}
		return false
	}
	needed := []string{"go.mod", "go.sum"}
	for _, goos := range []string{"linux", "windows"} {
		needed = append(needed, moduleDirs(t, goos)...)
	}
	for _, p := range needed {
		if ignored(p) {
			t.Errorf("%s keeps %s out of the build context; the image build needs it", dockerignore, p)
		}
	}
	return ignored
}

// moduleDirs lists the directories, relative to the repository, of this module's packages
// that weftd, weftctl and weft import when built for goos.
func moduleDirs(t *testing.T, goos string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}",
		"./cmd/weftd", "./cmd/weftctl", "./cmd/weft")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list for %s: %v", goos, err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" {
			rel, err := filepath.Rel(root, line)
			if err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
	}
	return dirs
}
