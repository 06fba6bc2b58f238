package kubecluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/e2e/cluster"
)

// Label and values of README's migration ("Migrating from flanneld", Kubernetes).
const (
	agentLabel = "weftnet.github.io/agent"
	// flannelDS is kube-flannel.yml's DaemonSet.
	flannelDS = "kube-flannel-ds"
)

// TestMigrateFromFlannel starts the cluster on flannel (kube-flannel.yml of flannel v0.28.10,
// testdata/kube-flannel.yml), with a pod on each node pinging every other one every 10 ms,
// then replaces flannel with weft node by node following README.md's "Migrating from
// flanneld" (Kubernetes) to the letter, and checks what the README promises: no pod
// restarted or re-created, every node keeps its podCIDR and VTEP MAC, pods made through
// flannel's plugin are deleted through weft's, the pings go on (the lost ones are counted
// per pair), and at the end no flannel is left but what the README says stays.
func TestMigrateFromFlannel(t *testing.T) {
	needLong(t)
	c := newCluster(t, 3)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	work := t.TempDir()
	ping := prepareFlannelCluster(ctx, t, c, repo, work)
	if _, err := c.DeployFlannel(ctx, repo); err != nil {
		t.Fatal(err)
	}
	before := agentNetworks(ctx, t, c)
	for _, n := range c.Nodes() {
		t.Logf("on flannel: node %s: %s", n.Name, before[n.Name])
		if got := cniConfs(t, n); !slices.Equal(got, []string{"10-flannel.conflist"}) {
			t.Fatalf("node %s: /etc/cni/net.d holds %v, want flannel's conflist alone", n.Name, got)
		}
	}

	// A pod on each node, pinging each other: they must live through the migration. And
	// one more, made through flannel's plugin, to be deleted through weft's at the end.
	var pods []*corev1.Pod
	for _, n := range c.Nodes() {
		pods = append(pods, PingPod("ping-"+n.Name, n.Name, ping))
	}
	victim := PingPod("made-by-flannel", c.Nodes()[0].Name, ping)
	states, err := c.RunPods(ctx, append(pods, victim)...)
	if err != nil {
		t.Fatal(err)
	}
	victimState, states := states[len(states)-1], states[:len(states)-1]
	for _, s := range states {
		t.Logf("pod %s on %s: %s, sandbox %.12s", s.Name, s.Node, s.IP, s.Sandbox)
	}
	pings, err := c.StartPings(ctx, states)
	if err != nil {
		t.Fatal(err)
	}
	// The figures: what happened when, relative to the pings' start, to tell which step a
	// lost ping belongs to.
	var figures []string
	figure := func(at time.Time, format string, args ...any) {
		figures = append(figures, fmt.Sprintf("%+8.1fs  ", at.Sub(pings.Start()).Seconds())+fmt.Sprintf(format, args...))
	}
	// started notes when the containers of the pods of kube-flannel with the selector
	// started (their agent taking over).
	started := func(selector, node string) {
		for _, p := range agentPods(ctx, t, c, selector, node) {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					figure(cs.State.Running.StartedAt.Time, "pod %s on %s: container %s started", p.Name, p.Spec.NodeName, cs.Name)
				}
			}
		}
	}

	// README, Kubernetes, step 1: every node left to flannel, flannel's DaemonSet pinned to
	// them (its pods restart once).
	readme := newReadme(t, c, repo)
	readme.run(ctx, "kubectl label nodes --all weftnet.github.io/agent=flannel")
	readme.run(ctx, `kubectl -n kube-flannel patch ds kube-flannel-ds -p '{"spec":{"template":{"spec":{"nodeSelector":{"weftnet.github.io/agent":"flannel"}}}}}'`)
	step := time.Now()
	kubectl(ctx, t, c, "-n", "kube-flannel", "rollout", "status", "ds/"+flannelDS, "--timeout=5m")
	figure(step, "step 1: flannel's DaemonSet pinned, rolled out %v later", time.Since(step).Round(time.Millisecond))
	started("app=flannel", "")
	// How the DaemonSet controller replaced flannel's pods: one node at a time, or all at
	// once if it saw the nodeSelector before the labels.
	kubectl(ctx, t, c, "-n", "kube-flannel", "get", "events", "--field-selector", "involvedObject.kind=DaemonSet",
		"--sort-by=.lastTimestamp", "-o", "custom-columns=TIME:.lastTimestamp,REASON:.reason,MESSAGE:.message")

	// Step 2: weft.yaml (the local image: the only change to the shipped file) with
	// flannel's net-conf.json, and flannel's cni-conf.json with its type changed to weft.
	netConf := readme.run(ctx, `kubectl -n kube-flannel get configmap kube-flannel-cfg -o jsonpath='{.data.net-conf\.json}'`)
	cniConf := kubectl(ctx, t, c, "-n", "kube-flannel", "get", "configmap", "kube-flannel-cfg",
		"-o", `jsonpath={.data.cni-conf\.json}`)
	weftYAML := migrationManifest(t, repo, work, netConf, cniConf)
	readme.run(ctx, "kubectl apply -f weft.yaml", "weft.yaml", weftYAML)
	waitDaemonSet(ctx, t, c, "weft", func(ds int32) error {
		if ds != 0 {
			return fmt.Errorf("%d weft pods wanted while every node is flannel's", ds)
		}
		return nil
	})
	if got := podsOn(ctx, t, c, "app.kubernetes.io/name=weft", ""); len(got) != 0 {
		t.Fatalf("step 2: weft pods %v before any node is switched", got)
	}

	// Step 3, node by node; the first one moved back to flannel and to weft again on the way,
	// as the README says a node can be.
	switchNode := func(n *Node, agent string) {
		step := time.Now()
		want, gone := "app.kubernetes.io/name=weft", "app=flannel"
		if agent == "weft" {
			readme.run(ctx, "kubectl label node node-1 weftnet.github.io/agent=weft --overwrite", "node-1", n.Name)
		} else {
			readme.run(ctx, "kubectl label node node-1 weftnet.github.io/agent=flannel --overwrite", "node-1", n.Name)
			want, gone = gone, want
		}
		pod := waitAgent(ctx, t, c, n.Name, want, gone)
		took := time.Since(step)
		// "Check that the pod is ready and that pods on the node reach pods elsewhere."
		readme.run(ctx, "kubectl -n kube-flannel get pods -o wide --field-selector spec.nodeName=node-1", "node-1", n.Name)
		for _, to := range states {
			if to.Node != n.Name {
				kubectl(ctx, t, c, "exec", "ping-"+n.Name, "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", to.IP.String())
			}
		}
		figure(step, "step 3: node %s labelled %s, its pod %s ready %v later", n.Name, agent, pod, took.Round(time.Millisecond))
		started(want, n.Name)
		if agent == "weft" {
			// What weftd did on the node: adopted flannel's device and lease, changed what
			// differed.
			kubectl(ctx, t, c, "-n", "kube-flannel", "logs", pod, "-c", "weftd")
			kubectl(ctx, t, c, "-n", "kube-flannel", "get", "events", "--field-selector", "involvedObject.name="+pod)
		}
		if agent == "flannel" {
			// What weftd programmed beside flanneld's own stays, as the README says.
			if _, err := runOut(ctx, n.inNode("nft", "list", "table", "ip", "weft")); err != nil {
				t.Errorf("node %s back on flannel: weft's nftables table: %v", n.Name, err)
			}
		}
		confs := []string{"10-flannel.conflist.disabled-by-weft", "10-weft.conflist"}
		if agent == "flannel" {
			// flannel's install writes its configuration again, which the runtime takes.
			confs = []string{"10-flannel.conflist", "10-flannel.conflist.disabled-by-weft", "10-weft.conflist"}
		}
		if got := cniConfs(t, n); !slices.Equal(got, confs) {
			t.Errorf("node %s on %s: /etc/cni/net.d holds %v, want %v", n.Name, agent, got, confs)
		}
	}
	for i, n := range c.Nodes() {
		switchNode(n, "weft")
		if i == 0 {
			switchNode(n, "flannel")
			switchNode(n, "weft")
		}
	}

	// Step 4: flannel removed, the labels too.
	weftPods := podsOn(ctx, t, c, "app.kubernetes.io/name=weft", "")
	for _, line := range []string{
		"kubectl -n kube-flannel delete ds kube-flannel-ds",
		"kubectl -n kube-flannel delete configmap kube-flannel-cfg",
		"kubectl -n kube-flannel delete serviceaccount flannel",
		"kubectl delete clusterrolebinding flannel && kubectl delete clusterrole flannel",
		"kubectl label nodes --all weftnet.github.io/agent-",
	} {
		readme.run(ctx, line)
	}

	// Step 5, on each node, while the pings go on.
	for _, n := range c.Nodes() {
		for _, line := range []string{
			`iptables -t nat -D POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG`,
			`iptables -t nat -F FLANNEL-POSTRTG && iptables -t nat -X FLANNEL-POSTRTG`,
			`iptables -D FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD`,
			`iptables -F FLANNEL-FWD && iptables -X FLANNEL-FWD`,
			`rm /etc/cni/net.d/10-flannel.conflist.disabled-by-weft /opt/cni/bin/flannel`,
		} {
			readme.runOn(ctx, n, line)
		}
	}

	// The pod made through flannel's plugin goes through weft's: its address is given back
	// to host-local, and the delegate configuration flannel's plugin kept is removed.
	if err := c.DeletePods(ctx, "default", victimState.Name); err != nil {
		t.Fatal(err)
	}
	victimNode := c.Nodes()[0]
	for _, f := range []string{
		filepath.Join(victimNode.hostDir("/var/lib/cni"), "networks", "cbr0", victimState.IP.String()),
		filepath.Join(victimNode.hostDir("/var/lib/cni"), "flannel", victimState.Sandbox),
	} {
		// The kubelet tears the sandbox down after the pod is gone from the API server.
		if err := waitGone(ctx, f); err != nil {
			t.Errorf("pod %s made through flannel's plugin, deleted through weft's: %v", victimState.Name, err)
		}
	}

	results, err := pings.Stop(ctx)
	if err != nil {
		t.Error(err)
	}
	figure(time.Now(), "pings stopped; every %v from each pod to each other one (lost on the network: requests "+
		"that left the pod less replies that came in; ping's own count also misses replies its socket dropped "+
		"while it waited for the CPU):", PingInterval)
	for _, r := range results {
		figures = append(figures, "  "+r.Describe(pings.Start()))
		if r.NetReceived == 0 || r.Sent == 0 {
			t.Errorf("ping %s -> %s: nothing answered", r.From, r.To)
		}
		// The README's promise: traffic flows on while flanneld stops and weftd starts.
		// (What ping alone missed, its socket's doing, is in the figures.)
		if r.NetSent != r.NetReceived {
			t.Errorf("ping %s -> %s: %d requests left, %d replies came back: the network lost %d",
				r.From, r.To, r.NetSent, r.NetReceived, r.NetSent-r.NetReceived)
		}
	}
	t.Logf("migration from flannel, figures:\n%s", strings.Join(figures, "\n"))

	// No pod restarted or re-created: same UID, same sandbox, no container restart.
	for _, s := range states {
		now, err := c.PodState(ctx, "default", s.Name)
		if err != nil {
			t.Errorf("pod %s after the migration: %v", s.Name, err)
			continue
		}
		if now != s {
			t.Errorf("pod %s changed in the migration: before %+v, after %+v", s.Name, s, now)
		}
	}
	if got := podsOn(ctx, t, c, "app.kubernetes.io/name=weft", ""); !slices.Equal(got, weftPods) {
		t.Errorf("weft's pods changed in step 4: before %v, after %v", weftPods, got)
	}
	after := agentNetworks(ctx, t, c)
	for _, n := range c.Nodes() {
		t.Logf("on weft: node %s: %s", n.Name, after[n.Name])
		if after[n.Name] != before[n.Name] {
			t.Errorf("node %s: network before the migration %s, after %s", n.Name, before[n.Name], after[n.Name])
		}
	}
	checkNoFlannel(ctx, t, c)
}

// prepareFlannelCluster builds and imports what a cluster on flannel needs (prepareNodes,
// and flannel's images), and returns the ping pods' image.
func prepareFlannelCluster(ctx context.Context, t *testing.T, c *Cluster, repo, work string) string {
	t.Helper()
	flannelBin := filepath.Join(repo, ".cache", "flannel", "bin")
	install(t, filepath.Join(repo, "tools", "flannel", "install-flanneld.sh"), flannelBin)
	install(t, filepath.Join(repo, "tools", "flannel", "install-flannel-kube.sh"), flannelBin)
	install(t, filepath.Join(repo, "tools", "flannel", "install-deps.sh")) // iptables, for flannel's image
	flannel, err := FlannelImages(ctx, flannelBin, work)
	if err != nil {
		t.Fatal(err)
	}
	return prepareNodes(ctx, t, c, repo, work, flannel...)
}

// prepareNodes gives each node the reference CNI plugins and imports the base images, the
// ping pods' and the archives of more, and returns the ping pods' image.
func prepareNodes(ctx context.Context, t *testing.T, c *Cluster, repo, work string, more ...string) string {
	t.Helper()
	cniBin := needCNIPlugins(t, repo)
	images, err := BaseImages(ctx, repo, work)
	if err != nil {
		t.Fatal(err)
	}
	ping, err := BusyBoxArchive(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if err := n.InstallCNIPlugins(cniBin); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ImportImages(ctx, append(append(images, more...), ping)...); err != nil {
		t.Fatal(err)
	}
	return BusyBoxImage
}

// migrationManifest writes "your copy of weft.yaml" of README's step 2: dist/kubernetes's,
// with the local image (WeftManifest), its ConfigMap's net-conf.json replaced with flannel's
// and its cni-conf.json with flannel's, "type" changed to weft.
func migrationManifest(t *testing.T, repo, work, netConf, cniConf string) string {
	t.Helper()
	path, err := WeftManifest(repo, work)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal([]byte(cniConf), &list); err != nil {
		t.Fatalf("flannel's cni-conf.json: %v", err)
	}
	plugins, _ := list["plugins"].([]any)
	changed := 0
	for _, p := range plugins {
		if m, ok := p.(map[string]any); ok && m["type"] == "flannel" {
			m["type"] = "weft"
			changed++
		}
	}
	if changed != 1 {
		t.Fatalf("flannel's cni-conf.json has %d plugins of type flannel:\n%s", changed, cniConf)
	}
	weftCNI, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	found := false
	for i, doc := range docs {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil || cm.Kind != "ConfigMap" || cm.Name != "weft-cfg" {
			continue
		}
		cm.Data["net-conf.json"] = netConf
		cm.Data["cni-conf.json"] = string(weftCNI) + "\n"
		out, err := yaml.Marshal(&cm)
		if err != nil {
			t.Fatal(err)
		}
		docs[i] = string(out)
		found = true
	}
	if !found {
		t.Fatal("weft.yaml has no ConfigMap weft-cfg")
	}
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// readme runs the commands of README.md's "Migrating from flanneld" as a user types them
// into a shell, each only if the section has it.
type readme struct {
	t        *testing.T
	c        *Cluster
	commands map[string]bool
}

// newReadme reads the commands of README.md's "Migrating from flanneld": its code lines
// (indented), a line ending in a backslash joined to the next, and the kubectl commands in
// its text (`kubectl ...`).
func newReadme(t *testing.T, c *Cluster, repo string) *readme {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Migrating from flanneld\n")
	if !ok {
		t.Fatal(`README.md has no section "Migrating from flanneld"`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	r := &readme{t: t, c: c, commands: map[string]bool{}}
	// Commands in the text too: `kubectl apply -f weft.yaml`.
	for i, span := range strings.Split(strings.Join(strings.Fields(section), " "), "`") {
		if i%2 == 1 && strings.HasPrefix(span, "kubectl ") {
			r.commands[span] = true
		}
	}
	var cmd string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "    ") || strings.TrimSpace(line) == "" {
			continue
		}
		cmd += strings.TrimSpace(line)
		if strings.HasSuffix(cmd, "\\") {
			cmd = strings.TrimSuffix(cmd, "\\")
			continue
		}
		r.commands[cmd] = true
		cmd = ""
	}
	return r
}

// check fails the test unless the README has the command.
func (r *readme) check(command string) {
	r.t.Helper()
	if !r.commands[command] {
		r.t.Fatalf("README.md's migration has no command %q", command)
	}
}

// run runs a command of the README's in a shell where kubectl is on PATH and talks to the
// cluster as its administrator (in the underlay), with replacements (old, new, ...) made to
// it after it is found in the README (a node's name for node-1, the path of a file), logs
// its output and returns it.
func (r *readme) run(ctx context.Context, command string, replacements ...string) string {
	r.t.Helper()
	r.check(command)
	line := strings.NewReplacer(replacements...).Replace(command)
	argv := append(r.c.net.UnderlayCommand(), "env", "KUBECONFIG="+r.c.adminKubeconfig,
		"PATH="+r.c.opts.KubeBin+":"+strings.TrimPrefix(pathEnv, "PATH="), "sh", "-c", line)
	out, err := runOut(ctx, argv)
	if err != nil {
		r.t.Fatalf("%s: %v", line, err)
	}
	r.t.Logf("$ %s\n%s", line, strings.TrimSpace(out))
	return out
}

// runOn runs a command of the README's as root in a shell on node n.
func (r *readme) runOn(ctx context.Context, n *Node, command string) {
	r.t.Helper()
	r.check(command)
	out, err := runOut(ctx, n.inNode("env", pathEnv, "sh", "-c", command))
	if err != nil {
		r.t.Fatalf("node %s: %s: %v", n.Name, command, err)
	}
	r.t.Logf("node %s $ %s\n%s", n.Name, command, strings.TrimSpace(out))
}

// waitGone waits until nothing is at path.
func waitGone(ctx context.Context, path string) error {
	for {
		_, err := os.Stat(path)
		if os.IsNotExist(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still there (%v): %w", path, err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// kubectl runs kubectl (Cluster.Kubectl), logs its output and fails the test on an error.
func kubectl(ctx context.Context, t *testing.T, c *Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(out); s != "" {
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), s)
	}
	return out
}

// waitDaemonSet waits until the DaemonSet of kube-flannel named name has seen its latest
// spec, and ok accepts the number of pods it wants.
func waitDaemonSet(ctx context.Context, t *testing.T, c *Cluster, name string, ok func(desired int32) error) {
	t.Helper()
	for {
		ds, err := c.Client.AppsV1().DaemonSets("kube-flannel").Get(ctx, name, metav1.GetOptions{})
		if err == nil && ds.Status.ObservedGeneration >= ds.Generation {
			if err = ok(ds.Status.DesiredNumberScheduled); err == nil {
				return
			}
			t.Fatalf("DaemonSet %s: %v", name, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("DaemonSet %s not observed: %v (%v)", name, err, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// agentPods lists the pods of kube-flannel with the label selector, on node if not "".
func agentPods(ctx context.Context, t *testing.T, c *Cluster, selector, node string) []corev1.Pod {
	t.Helper()
	opts := metav1.ListOptions{LabelSelector: selector}
	if node != "" {
		opts.FieldSelector = "spec.nodeName=" + node
	}
	list, err := c.Client.CoreV1().Pods("kube-flannel").List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// podsOn lists agentPods as "name uid" strings, sorted.
func podsOn(ctx context.Context, t *testing.T, c *Cluster, selector, node string) []string {
	t.Helper()
	var out []string
	for _, p := range agentPods(ctx, t, c, selector, node) {
		out = append(out, p.Name+" "+string(p.UID))
	}
	slices.Sort(out)
	return out
}

// waitAgent waits until the node runs one pod of kube-flannel with the label selector
// want, ready, and none with the selector gone, and returns the pod's name.
func waitAgent(ctx context.Context, t *testing.T, c *Cluster, node, want, gone string) string {
	t.Helper()
	for {
		var why string
		left, pods := podsOn(ctx, t, c, gone, node), agentPods(ctx, t, c, want, node)
		switch {
		case len(left) != 0:
			why = fmt.Sprintf("pods %v (%s) still there", left, gone)
		case len(pods) != 1:
			why = fmt.Sprintf("%d pods %s", len(pods), want)
		default:
			p := pods[0]
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return p.Name
				}
			}
			why = fmt.Sprintf("pod %s not ready (%s)", p.Name, p.Status.Phase)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node %s: %s (%v)", node, why, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// agentNetworks describes each node's network as its peers know it: its podCIDR, its lease
// annotations (backend data with the VTEP MAC, public IP) and its VXLAN device's MAC.
func agentNetworks(ctx context.Context, t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range list.Items {
		node := c.node(n.Name)
		if node == nil {
			continue
		}
		link, err := runOut(ctx, []string{"ip", "-n", node.NS, "-br", "link", "show", "flannel.1"})
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		f := strings.Fields(link)
		if len(f) < 3 {
			t.Fatalf("node %s: flannel.1: %q", n.Name, link)
		}
		out[n.Name] = fmt.Sprintf("podCIDR %s, backend-data %s, public-ip %s, flannel.1 MAC %s",
			n.Spec.PodCIDR, n.Annotations["flannel.alpha.coreos.com/backend-data"],
			n.Annotations["flannel.alpha.coreos.com/public-ip"], f[2])
	}
	return out
}

// cniConfs lists the node's /etc/cni/net.d, sorted.
func cniConfs(t *testing.T, n *Node) []string {
	t.Helper()
	entries, err := os.ReadDir(n.hostDir("/etc/cni/net.d"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// checkNoFlannel checks that nothing of flannel is left in the cluster: no object of
// kube-flannel.yml but the namespace weft lives in, no pod, no label of the migration, and
// on the nodes nothing of what README's step 5 removes. What the README says stays and is
// weft's now (flannel.1 with its MAC, the podCIDRs) the test checks apart.
func checkNoFlannel(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	out := kubectl(ctx, t, c, "get", "daemonsets,pods,configmaps,serviceaccounts", "-n", "kube-flannel", "-o", "name")
	for _, line := range strings.Fields(out) {
		if strings.Contains(line, "flannel") {
			t.Errorf("left of flannel: %s", line)
		}
	}
	out, err := c.Kubectl(ctx, "get", "clusterroles,clusterrolebindings", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Fields(out) {
		if strings.HasSuffix(line, "/flannel") {
			t.Errorf("left of flannel: %s", line)
		}
	}
	list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list.Items {
		if v, ok := n.Labels[agentLabel]; ok {
			t.Errorf("node %s still labelled %s=%s", n.Name, agentLabel, v)
		}
	}
	// On the nodes, after step 5: none of flanneld's rules, neither flannel's plugin nor its
	// configuration; weft's configuration alone.
	for _, n := range c.Nodes() {
		for _, save := range []string{"iptables-save", "ip6tables-save"} {
			out, err := runOut(ctx, n.inNode(save))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(strings.ToLower(line), "flannel") {
					t.Errorf("node %s: left of flannel in %s: %s", n.Name, save, line)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(n.hostDir("/opt/cni/bin"), "flannel")); !os.IsNotExist(err) {
			t.Errorf("node %s: /opt/cni/bin/flannel still there (%v)", n.Name, err)
		}
		if got := cniConfs(t, n); !slices.Equal(got, []string{"10-weft.conflist"}) {
			t.Errorf("node %s: /etc/cni/net.d holds %v, want weft's conflist alone", n.Name, got)
		}
	}
}
