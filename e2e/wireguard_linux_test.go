package e2e

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
)

// wireguardNet is a wireguard network with flanneld's defaults (separate mode, ports 51820
// and 51821) and keepalives.
var wireguardNet = backend{"wireguard", `{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":25}}`}

// TestWireGuardPodToPod: three weftd nodes on the wireguard backend (the user-space device
// where the kernel has no WireGuard, as here): each publishes its public key and port in
// flannel's format, its flannel-wg has MTU 1420 (1500 less 80) and one peer per other node;
// every pod pings every other and TCP streams pass, through the tunnels.
func TestWireGuardPodToPod(t *testing.T) {
	bins := needBinaries(t)
	c := newCluster(t, bins, wireguardNet)
	nodes := startNodes(t, c, "n1", "n2", "n3")
	keys := map[string]string{}
	for _, n := range nodes {
		env, err := n.SubnetEnv()
		if err != nil {
			t.Fatal(err)
		}
		if env.MTU != 1420 {
			t.Errorf("node %s: subnet.env MTU %d, want 1420", n.Name, env.MTU)
		}
		l := leaseOf(t, c, env.Subnet.Masked())
		var data struct {
			PublicKey string
			Port      int
		}
		if err := json.Unmarshal(l.Attrs.BackendData, &data); err != nil || l.Attrs.BackendType != "wireguard" || data.Port != 51820 {
			t.Fatalf("node %s lease %s: %s %s (%v)", n.Name, l.Key(), l.Attrs.BackendType, l.Attrs.BackendData, err)
		}
		if k, err := base64.StdEncoding.DecodeString(data.PublicKey); err != nil || len(k) != 32 {
			t.Errorf("node %s: PublicKey %q is no WireGuard key", n.Name, data.PublicKey)
		}
		if other, dup := keys[data.PublicKey]; dup {
			t.Errorf("nodes %s and %s publish one key", other, n.Name)
		}
		keys[data.PublicKey] = n.Name
		var links []struct {
			MTU int `json:"mtu"`
		}
		out := nodeExec(t, n, "ip", "-j", "link", "show", "flannel-wg")
		if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 || links[0].MTU != 1420 {
			t.Errorf("node %s: flannel-wg: %s (%v)", n.Name, out, err)
		}
		if route := nodeExec(t, n, "ip", "route", "show", "10.244.0.0/16"); !strings.Contains(route, "dev flannel-wg") {
			t.Errorf("node %s: route of the network: %q, want it through flannel-wg", n.Name, route)
		}
	}
	pods := onePodEach(t, c, nodes)
	pingAll(t, pods)
	stream(t, pods[0], pods[1])
	stream(t, pods[1], pods[2])
	stream(t, pods[2], pods[0])
	for _, n := range nodes {
		if !strings.Contains(n.LogTail(200), "user-space WireGuard device") && !strings.Contains(n.LogTail(200), "kernel's WireGuard device") {
			t.Errorf("node %s: the log does not say which WireGuard runs", n.Name)
		}
	}
}
