package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
)

// wireguardNet is a wireguard network with flanneld's defaults (separate mode, ports 51820
// and 51821) and keepalives.
var wireguardNet = backend{"wireguard", `{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":25}}`}

// TestWireGuardPodToPod: three weftd nodes on the wireguard backend (the user-space device
// where the kernel has no WireGuard, as here): each publishes its public key and port in
// flannel's format, its flannel-wg has MTU 1420 (1500 less 80) and one peer per other node;
// every pod pings every other and TCP streams pass, through the tunnels; /status says which
// WireGuard runs and that the probes through the tunnels are answered, and /metrics that
// every peer shook hands.
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
	wgPingAll(t, pods, false)
	stream(t, pods[0], pods[1])
	stream(t, pods[1], pods[2])
	stream(t, pods[2], pods[0])
	for _, n := range nodes {
		if !strings.Contains(n.LogTail(200), "user-space WireGuard device") && !strings.Contains(n.LogTail(200), "kernel's WireGuard device") {
			t.Errorf("node %s: the log does not say which WireGuard runs", n.Name)
		}
		code, body, err := n.Get("/status")
		var st status.Node
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &st) != nil {
			t.Fatalf("node %s: /status: %d %v %s", n.Name, code, err, body)
		}
		// The probes go through the tunnels to each peer's flannel-wg.
		for deadline := time.Now().Add(convergeTimeout); st.Overlay == nil || st.Overlay.Answered != len(nodes)-1; {
			if time.Now().After(deadline) {
				t.Fatalf("node %s: /status overlay %+v, want every peer answering through the tunnel", n.Name, st.Overlay)
			}
			time.Sleep(200 * time.Millisecond)
			if _, body, err = n.Get("/status"); err != nil || json.Unmarshal([]byte(body), &st) != nil {
				t.Fatalf("node %s: /status: %v %s", n.Name, err, body)
			}
		}
		// The pings made every pair shake hands; the device says so, and /metrics with it.
		if line := `weft_wireguard_peers{device="flannel-wg",handshake="recent"} 2`; !hasMetric(t, n, line) {
			t.Errorf("node %s: /metrics lacks %s", n.Name, line)
		}
		if len(st.WireGuard) != 1 || st.WireGuard[0].Device != "flannel-wg" || keys[st.WireGuard[0].PublicKey] != n.Name ||
			(st.WireGuard[0].Implementation != "kernel" && st.WireGuard[0].Implementation != "user space") {
			t.Errorf("node %s: /status wireguard: %+v", n.Name, st.WireGuard)
		} else {
			t.Logf("node %s: %s runs in %s", n.Name, st.WireGuard[0].Device, st.WireGuard[0].Implementation)
		}
	}
}

// TestWireGuardRestartAndDrift: weftd restarted under a 10 ms ping on the user-space device,
// which dies with weftd: the loss is logged (the stop, the start and a new handshake), and
// traffic flows again with the same key; then flannel-wg deleted by hand comes back, with
// its peers, and so does its route deleted by hand; traffic flows again.
func TestWireGuardRestartAndDrift(t *testing.T) {
	bins := needBinaries(t)
	c := newCluster(t, bins, wireguardNet)
	nodes := startNodes(t, c, "n1", "n2", "n3")
	pods := onePodEach(t, c, nodes)
	wgPingAll(t, pods, false)
	keyBefore := leaseOf(t, c, mustSubnet(t, nodes[0])).Attrs.BackendData

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		// About 62 pings a second here: 600 outlast the restart and a handshake's retry.
		sent, recv := restartUnderPing(t, nodes[0], pods[1], pods[0].IP, sig, 600, 10*time.Millisecond)
		t.Logf("user-space WireGuard, weftd restarted with %v: %d of %d pings lost",
			sig, sent-recv, sent)
		if recv == 0 {
			t.Errorf("no ping answered across the restart")
		}
		wgPingAll(t, pods, false)
	}
	if after := leaseOf(t, c, mustSubnet(t, nodes[0])).Attrs.BackendData; string(after) != string(keyBefore) {
		t.Errorf("the restarts changed the node's lease data: %s, then %s", keyBefore, after)
	}

	nodeExec(t, nodes[1], "ip", "link", "del", "flannel-wg")
	wgPingAll(t, pods, false)
	nodeExec(t, nodes[2], "ip", "route", "del", "10.244.0.0/16")
	wgPingAll(t, pods, false)
	if route := nodeExec(t, nodes[1], "ip", "route", "show", "10.244.0.0/16"); !strings.Contains(route, "dev flannel-wg") {
		t.Errorf("node %s: route of the network after the device came back: %q", nodes[1].Name, route)
	}
}

// TestWireGuardHostileLeases: wireguard leases with a key that is none, a port out of range,
// or a node's public key are skipped and counted by reason on every node, and the pods keep
// reaching each other.
func TestWireGuardHostileLeases(t *testing.T) {
	bins := needBinaries(t)
	c := newCluster(t, bins, wireguardNet)
	nodes := startNodes(t, c, "n1", "n2")
	pods := onePodEach(t, c, nodes)
	wgPingAll(t, pods, false)
	var data struct{ PublicKey string }
	if err := json.Unmarshal(leaseOf(t, c, mustSubnet(t, nodes[0])).Attrs.BackendData, &data); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// On subnets no node holds: the allocator picks at random, and a hostile write over a
	// node's own lease would be a test of something else.
	free := freeSubnets(t, nodes)
	for i, v := range []string{
		`{"PublicIP":"192.0.2.50","BackendType":"wireguard","BackendData":{"PublicKey":"not a key","Port":51820}}`,
		`{"PublicIP":"192.0.2.51","BackendType":"wireguard","BackendData":{"PublicKey":"HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=","Port":70000}}`,
		`{"PublicIP":"192.0.2.52","BackendType":"wireguard","BackendData":{"PublicKey":"` + data.PublicKey + `","Port":51820}}`,
	} {
		sn := free[len(free)-1-i]
		key := c.EtcdPrefix() + "/subnets/" + subnet.Lease{Subnet: sn}.Key()
		if _, err := c.Etcd().Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{"bad_backend_data": 2, "duplicate_wireguard_key": 1}
	for _, n := range nodes {
		deadline := time.Now().Add(convergeTimeout)
		for {
			got := map[string]int{}
			for line := range strings.Lines(mustGet(t, n, "/metrics")) {
				for code := range want {
					if strings.HasPrefix(line, `weft_peer_leases_skipped_total{reason="`+code+`"}`) {
						f := strings.Fields(line)
						got[code], _ = strconv.Atoi(f[len(f)-1])
					}
				}
			}
			// n1 sees its own key in the third lease; n2 sees a key of another node's:
			// either way a key already claimed, by an older lease.
			if maps.Equal(got, want) {
				t.Logf("node %s skipped %v", n.Name, got)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: skipped %v, want %v", n.Name, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wgPingAll(t, pods, false)
	stream(t, pods[0], pods[1])
}

// wgData is a wireguard lease half's backend data, as flannel writes it.
type wgData struct {
	PublicKey string
	Port      int
}

// wgHalves reads both halves' backend data of a dual-stack wireguard lease.
func wgHalves(l subnet.Lease) (d4, d6 wgData, err error) {
	if err := json.Unmarshal(l.Attrs.BackendData, &d4); err != nil {
		return d4, d6, fmt.Errorf("BackendData: %w", err)
	}
	if err := json.Unmarshal(l.Attrs.BackendV6Data, &d6); err != nil {
		return d4, d6, fmt.Errorf("BackendV6Data: %w", err)
	}
	return d4, d6, nil
}

// TestWireGuardDualStack: three weftd nodes in a dual-stack wireguard network (separate mode):
// each lease carries the same public key in BackendData (port 51820) and BackendV6Data (port
// 51821), flannel-wg-v6 carries the pods' IPv6 over the IPv6 underlay, and every pod reaches
// every other over both families.
func TestWireGuardDualStack(t *testing.T) {
	bins := needBinaries(t)
	c := newCluster(t, bins, backend{"wireguard", `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"` + ipv6Network + `","Backend":{"Type":"wireguard"}}`})
	nodes := startNodes(t, c, "n1", "n2", "n3")
	for _, n := range nodes {
		l := leaseOf(t, c, mustSubnet(t, n))
		if d4, d6, err := wgHalves(l); err != nil || d4.PublicKey == "" || d4.PublicKey != d6.PublicKey || d4.Port != 51820 || d6.Port != 51821 || l.Attrs.PublicIPv6 != n.IP6 {
			t.Errorf("node %s lease %s: %s %s %s", n.Name, l.Key(), l.Attrs.BackendData, l.Attrs.BackendV6Data, l.Attrs.PublicIPv6)
		}
		if route := nodeExec(t, n, "ip", "-6", "route", "show", ipv6Network); !strings.Contains(route, "dev flannel-wg-v6") {
			t.Errorf("node %s: route of the IPv6 network: %q, want it through flannel-wg-v6", n.Name, route)
		}
	}
	pods := onePodEach(t, c, nodes)
	wgPingAll(t, pods, false)
	wgPingAll(t, pods, true)
	stream(t, pods[0], pods[1])
}

// TestWireGuardModes: in an IPv4 network flanneld's single-tunnel modes, auto and ipv4, make
// the one device flannel-wg on ListenPort, as separate mode does, and publish that port:
// pods on two nodes of each mode reach each other through it. (With IPv6 on, weft refuses
// them: see backend.WireGuardCapabilities.SingleTunnelDualStack.)
func TestWireGuardModes(t *testing.T) {
	bins := needBinaries(t)
	for _, mode := range []string{"auto", "ipv4"} {
		t.Run(mode, func(t *testing.T) {
			c := newCluster(t, bins, backend{"wireguard", `{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","Mode":"` + mode + `","ListenPort":51830}}`})
			nodes := startNodes(t, c, "n1", "n2")
			for _, n := range nodes {
				var data struct{ Port int }
				if l := leaseOf(t, c, mustSubnet(t, n)); json.Unmarshal(l.Attrs.BackendData, &data) != nil || data.Port != 51830 {
					t.Errorf("node %s lease %s: %s, want port 51830", n.Name, l.Key(), l.Attrs.BackendData)
				}
				if links := nodeExec(t, n, "ip", "-br", "link", "show"); !strings.Contains(links, "flannel-wg ") || strings.Contains(links, "flannel-wg-v6") {
					t.Errorf("node %s: WireGuard devices %q, want flannel-wg alone", n.Name, links)
				}
			}
			pods := onePodEach(t, c, nodes)
			wgPingAll(t, pods, false)
			stream(t, pods[0], pods[1])
		})
	}
}

// wgCounter reads a counter of TestWireGuardSingleTunnelDualStack's table as nft lists it.
var wgCounter = regexp.MustCompile(`meta nfproto (ipv4|ipv6) udp dport (\{ [0-9, ]+ \}|[0-9]+) counter packets ([0-9]+)`)

// TestWireGuardSingleTunnelDualStack: flanneld's single-tunnel modes in a dual-stack network.
// Each node has one flannel-wg on ListenPort for both families, publishes that port in both
// halves of its lease (flanneld would publish ListenPortV6, where nothing listens), and dials
// every peer at one address on that port: IPv4 in modes ipv4 and auto (the underlay's IPv4
// addresses are no RFC 1918 ones, so auto keeps IPv4), IPv6 in mode ipv6 — counted by an
// nftables counter of the tunnels' datagrams per family on each node. Pods reach each other
// over both families through the one device.
func TestWireGuardSingleTunnelDualStack(t *testing.T) {
	bins := needBinaries(t)
	for _, mode := range []string{"auto", "ipv4", "ipv6"} {
		t.Run(mode, func(t *testing.T) {
			c := newCluster(t, bins, backend{"wireguard", `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"` + ipv6Network +
				`","Backend":{"Type":"wireguard","Mode":"` + mode + `"}}`})
			nodes := startNodes(t, c, "n1", "n2", "n3")
			for _, n := range nodes {
				l := leaseOf(t, c, mustSubnet(t, n))
				if d4, d6, err := wgHalves(l); err != nil || d4.PublicKey == "" || d4 != d6 || d4.Port != 51820 {
					t.Errorf("node %s lease %s: %s %s, want one key and port 51820 in both", n.Name, l.Key(), l.Attrs.BackendData, l.Attrs.BackendV6Data)
				}
				if links := nodeExec(t, n, "ip", "-br", "link", "show"); !strings.Contains(links, "flannel-wg ") || strings.Contains(links, "flannel-wg-v6") {
					t.Errorf("node %s: WireGuard devices %q, want flannel-wg alone", n.Name, links)
				}
				if route := nodeExec(t, n, "ip", "-6", "route", "show", ipv6Network); !strings.Contains(route, "dev flannel-wg ") {
					t.Errorf("node %s: route of the IPv6 network: %q, want it through flannel-wg", n.Name, route)
				}
				nodeExec(t, n, "sh", "-c", `nft -f - <<'EOF'
table inet weft_e2e_wg {
	chain out {
		type filter hook output priority 0;
		meta nfproto ipv4 udp dport { 51820, 51821 } counter
		meta nfproto ipv6 udp dport { 51820, 51821 } counter
		meta nfproto ipv4 udp dport 51820 counter
		meta nfproto ipv6 udp dport 51820 counter
	}
}
EOF`)
			}
			pods := onePodEach(t, c, nodes)
			wgPingAll(t, pods, false)
			wgPingAll(t, pods, true)
			stream(t, pods[0], pods[1])
			want := "ipv4"
			if mode == "ipv6" {
				want = "ipv6"
			}
			for _, n := range nodes {
				counts := map[string]int{} // by family and port set: "ipv4 any", "ipv4 51820", ...
				for _, m := range wgCounter.FindAllStringSubmatch(nodeExec(t, n, "nft", "list", "table", "inet", "weft_e2e_wg"), -1) {
					port := "any"
					if !strings.HasPrefix(m[2], "{") {
						port = m[2]
					}
					counts[m[1]+" "+port], _ = strconv.Atoi(m[3])
				}
				other := map[string]string{"ipv4": "ipv6", "ipv6": "ipv4"}[want]
				if counts[want+" any"] == 0 || counts[want+" 51820"] != counts[want+" any"] || counts[other+" any"] != 0 {
					t.Errorf("node %s: tunnel datagrams sent %v, want all over %s to port 51820", n.Name, counts, want)
				} else {
					t.Logf("node %s: %d tunnel datagrams sent, all over %s to port 51820", n.Name, counts[want+" any"], want)
				}
			}
		})
	}
}

// TestWireGuardFromFlanneld: a node whose lease and key file are as flanneld's wireguard
// backend leaves them (its own key, written as flanneld writes it; the lease as flanneld
// publishes it; no subnet.env) starts weftd with the same subnet and the same key, and its
// pods reach the others': the peers need nothing new.
func TestWireGuardFromFlanneld(t *testing.T) {
	bins := needBinaries(t)
	c := newCluster(t, bins, wireguardNet)
	nodes := startNodes(t, c, "n1", "n2")
	n := nodes[0]
	sn := mustSubnet(t, n)
	if _, err := n.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// flanneld's key: the private key in base64 alone, readable by root alone.
	const priv = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk="
	const pub = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
	keyFile := filepath.Join(n.Dir, "wgkey")
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(priv), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(n.SubnetFile); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease := `{"PublicIP":"` + n.IP.String() + `","PublicIPv6":null,"BackendType":"wireguard","BackendData":{"PublicKey":"` + pub + `","Port":51820}}`
	if _, err := c.Etcd().Put(ctx, c.EtcdPrefix()+"/subnets/"+subnet.Lease{Subnet: sn}.Key(), lease); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
	if got := mustSubnet(t, n); got != sn {
		t.Errorf("weftd took subnet %s; flanneld's lease is %s", got, sn)
	}
	var data struct{ PublicKey string }
	if err := json.Unmarshal(leaseOf(t, c, sn).Attrs.BackendData, &data); err != nil || data.PublicKey != pub {
		t.Errorf("lease key %q (%v), want flanneld's %s", data.PublicKey, err, pub)
	}
	pods := onePodEach(t, c, nodes)
	wgPingAll(t, pods, false)
	stream(t, pods[0], pods[1])
}

// wgReach bounds how long a pod may take to reach another over WireGuard: the peer programmed
// (convergeTimeout), then WireGuard's own handshake. Two nodes whose pods ping each other at
// once both initiate; when the initiations cross, a side can be left without a session
// (wireguard-go logs "handshakeZeroed") and retries after REKEY_TIMEOUT, 5 s plus up to
// 333 ms of jitter (the WireGuard paper, section 6.1). Two crossings are allowed for.
const wgReach = convergeTimeout + 2*(5*time.Second+333*time.Millisecond)

// wgPingAll is pingAll (pingAll6 if six) over WireGuard, within wgReach.
func wgPingAll(t *testing.T, pods []*cluster.Pod, six bool) {
	t.Helper()
	addr := func(p *cluster.Pod) netip.Addr { return p.IP }
	if six {
		addr = func(p *cluster.Pod) netip.Addr { return p.IP6 }
	}
	pingAllAt(t, pods, addr, wgReach)
}
