package kubecluster

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/status"
)

// TestWireGuardCluster deploys dist/kubernetes with the wireguard backend, as a user whose
// kernel lacks WireGuard must (this machine's): net-conf.json's Backend set to wireguard, and
// weftd's container given what WireGuard in user space needs (privileged, for /dev/net/tun;
// /run/wireguard for the device's UAPI socket). Every node turns Ready with its lease's
// public key in its annotations, pods on different nodes reach each other through the
// tunnels, and `weftctl status` in a weft pod says which WireGuard runs.
func TestWireGuardCluster(t *testing.T) {
	needLong(t)
	c := newCluster(t, 3)
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	work := t.TempDir()
	pingImage := prepareNodes(ctx, t, c, repo, work)
	manifest := wireguardManifest(t, repo, work)
	for _, f := range []string{filepath.Join(repo, "dist", "kubernetes", "rbac.yaml"), manifest} {
		kubectl(ctx, t, c, "apply", "-f", f)
	}
	nodes, err := c.waitNetworkReady(ctx, "the apply (wireguard)")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, n := range nodes {
		var data struct{ PublicKey string }
		raw := n.Annotations["flannel.alpha.coreos.com/backend-data"]
		if n.Annotations["flannel.alpha.coreos.com/backend-type"] != "wireguard" || json.Unmarshal([]byte(raw), &data) != nil || data.PublicKey == "" {
			t.Errorf("node %s: backend %q data %q, want wireguard with a public key", n.Name, n.Annotations["flannel.alpha.coreos.com/backend-type"], raw)
		}
		if other, dup := keys[data.PublicKey]; dup {
			t.Errorf("nodes %s and %s publish one key", other, n.Name)
		}
		keys[data.PublicKey] = n.Name
	}

	var pods []*corev1.Pod
	for _, n := range c.Nodes() {
		pods = append(pods, PingPod("wg-ping-"+n.Name, n.Name, pingImage))
	}
	states, err := c.RunPods(ctx, pods...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		for _, o := range states {
			if s.Node == o.Node {
				continue
			}
			out := kubectl(ctx, t, c, "exec", s.Name, "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", o.IP.String())
			r, err := parsePing(out)
			if err != nil || r.Lost > 0 {
				t.Errorf("%s (on %s) -> %s (on %s): %+v %v", s.Name, s.Node, o.IP, o.Node, r, err)
			}
		}
	}

	weftPod := strings.TrimSpace(kubectl(ctx, t, c, "-n", "kube-flannel", "get", "pods", "-l", "app.kubernetes.io/component=node-linux",
		"--field-selector", "spec.nodeName="+c.Nodes()[1].Name, "-o", "jsonpath={.items[0].metadata.name}"))
	out := kubectl(ctx, t, c, "-n", "kube-flannel", "exec", weftPod, "-c", "weftd", "--", "weftctl", "status", "-o", "json")
	var st status.Node
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("weftctl status --json: %v\n%s", err, out)
	}
	if len(st.WireGuard) != 1 || st.WireGuard[0].Device != "flannel-wg" || st.WireGuard[0].Implementation == "" {
		t.Errorf("weftctl status: wireguard %+v", st.WireGuard)
	} else {
		t.Logf("node %s: %s runs in %s, port %d", c.Nodes()[1].Name, st.WireGuard[0].Device, st.WireGuard[0].Implementation, st.WireGuard[0].ListenPort)
	}
}

// wireguardManifest writes dist/kubernetes's weft.yaml (WeftManifest's copy, with the local
// image) with net-conf.json's backend set to wireguard and the Linux DaemonSet's weftd given
// what WireGuard in user space needs.
func wireguardManifest(t *testing.T, repo, work string) string {
	t.Helper()
	path, err := WeftManifest(repo, work)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(data), "\n---\n")
	changed := 0
	for i, doc := range docs {
		var head struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if yaml.Unmarshal([]byte(doc), &head) != nil {
			continue
		}
		var out any
		switch {
		case head.Kind == "ConfigMap" && head.Metadata.Name == "weft-cfg":
			var cm corev1.ConfigMap
			if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatal(err)
			}
			var conf map[string]any
			if err := json.Unmarshal([]byte(cm.Data["net-conf.json"]), &conf); err != nil {
				t.Fatalf("net-conf.json: %v", err)
			}
			conf["Backend"] = map[string]any{"Type": "wireguard", "PersistentKeepaliveInterval": 25}
			b, err := json.MarshalIndent(conf, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			cm.Data["net-conf.json"] = string(b) + "\n"
			out = &cm
		case head.Kind == "DaemonSet" && head.Metadata.Name == "weft":
			var ds appsv1.DaemonSet
			if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
			spec := &ds.Spec.Template.Spec
			tun := corev1.HostPathCharDev
			spec.Volumes = append(spec.Volumes,
				corev1.Volume{Name: "tun", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/net/tun", Type: &tun}}},
				corev1.Volume{Name: "wireguard", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			for j := range spec.Containers {
				ct := &spec.Containers[j]
				if ct.Name != "weftd" {
					continue
				}
				yes, no := true, false
				ct.SecurityContext.Privileged, ct.SecurityContext.AllowPrivilegeEscalation = &yes, &yes
				ct.SecurityContext.ReadOnlyRootFilesystem = &no
				ct.VolumeMounts = append(ct.VolumeMounts,
					corev1.VolumeMount{Name: "tun", MountPath: "/dev/net/tun"},
					corev1.VolumeMount{Name: "wireguard", MountPath: "/run/wireguard"})
				changed++
			}
			out = &ds
		default:
			continue
		}
		b, err := yaml.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		docs[i] = string(b)
		changed++
	}
	if changed != 3 {
		t.Fatalf("weft.yaml: %d changes, want the ConfigMap, the Linux DaemonSet and its weftd container", changed)
	}
	if err := os.WriteFile(path, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
