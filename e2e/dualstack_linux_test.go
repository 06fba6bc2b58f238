package e2e

import (
	"encoding/json"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/subnet"
)

const (
	ipv6Network  = "fd00:10:244::/56"
	vxlan6Device = "flannel-v6.1" // flannel's name for the IPv6 device of VNI 1
)

// dualBackends are the backends with IPv6 on beside IPv4.
func dualBackends() []backend {
	return []backend{
		{"vxlan", `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"` + ipv6Network + `","Backend":{"Type":"vxlan"}}`},
		{"host-gw", `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"` + ipv6Network + `","Backend":{"Type":"host-gw"}}`},
	}
}

// waitReachable6 is waitReachable over IPv6.
func waitReachable6(t *testing.T, from, to *cluster.Pod, timeout time.Duration) {
	t.Helper()
	waitReachableAt(t, from, to, to.IP6, timeout)
}

// pingAll6 checks that every pod reaches every other pod over IPv6.
func pingAll6(t *testing.T, pods []*cluster.Pod) {
	t.Helper()
	pingAllAt(t, pods, func(p *cluster.Pod) netip.Addr { return p.IP6 }, convergeTimeout)
}

// vtepMAC6 is the VtepMAC of a vxlan lease's IPv6 half.
func vtepMAC6(t *testing.T, l subnet.Lease) string {
	t.Helper()
	var data struct{ VtepMAC string }
	if err := json.Unmarshal(l.Attrs.BackendV6Data, &data); err != nil || data.VtepMAC == "" {
		t.Fatalf("lease %s: BackendV6Data %s: want {\"VNI\":..,\"VtepMAC\":..} (%v)", l.Key(), l.Attrs.BackendV6Data, err)
	}
	return strings.ToLower(data.VtepMAC)
}

// link6 is flannel-v6.1 as `ip -d -j link` shows it.
type link6 struct {
	Address  string `json:"address"`
	MTU      int    `json:"mtu"`
	LinkInfo struct {
		InfoData struct {
			ID    int    `json:"id"`
			Local string `json:"local6"`
			Port  int    `json:"port"`
		} `json:"info_data"`
	} `json:"linkinfo"`
}

func readLink6(t *testing.T, n *cluster.Node) link6 {
	t.Helper()
	var links []link6
	out := nodeExec(t, n, "ip", "-d", "-j", "link", "show", vxlan6Device)
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("node %s: ip -d -j link show %s: %q (%v)", n.Name, vxlan6Device, out, err)
	}
	return links[0]
}

// TestDualStack: three weftd nodes in a dual-stack network, a dual-stack pod on each made by
// the real bridge and host-local plugins through weft's: each node's lease carries both
// subnets and both public addresses (vxlan: flannel-v6.1's MAC in BackendV6Data), every pod
// reaches every other over IPv4 and over IPv6; IPv6 entries deleted by hand come back; and a
// restart of weftd (SIGTERM, SIGKILL) loses no IPv6 packet.
func TestDualStack(t *testing.T) {
	bins := needBinaries(t)
	for _, b := range dualBackends() {
		t.Run(b.name, func(t *testing.T) {
			c := newCluster(t, bins, b)
			nodes := startNodes(t, c, "n1", "n2", "n3")
			wantMTU := 1500
			if b.vxlan() {
				wantMTU = 1430 // the IPv6 underlay's 1500 less 70
			}
			for _, n := range nodes {
				env, err := n.SubnetEnv()
				if err != nil {
					t.Fatal(err)
				}
				sn6 := env.IPv6Subnet.Masked()
				if env.IPv6Network != netip.MustParsePrefix(ipv6Network) || sn6.Bits() != 64 || !env.IPv6Network.Contains(sn6.Addr()) ||
					!env.Subnet.IsValid() || env.MTU != wantMTU {
					t.Errorf("node %s subnet.env: %+v; want both families, a /64 of %s, MTU %d", n.Name, env, ipv6Network, wantMTU)
				}
				l := leaseOf(t, c, sn6)
				if l.Subnet != env.Subnet.Masked() || l.Attrs.PublicIP != n.IP || l.Attrs.PublicIPv6 != n.IP6 {
					t.Errorf("node %s lease %s: PublicIP %s PublicIPv6 %s; want %s %s", n.Name, l.Key(), l.Attrs.PublicIP, l.Attrs.PublicIPv6, n.IP, n.IP6)
				}
				if b.vxlan() {
					dev := readLink6(t, n)
					if dev.Address != vtepMAC6(t, l) || dev.MTU != wantMTU || dev.LinkInfo.InfoData.ID != 1 || dev.LinkInfo.InfoData.Local != n.IP6.String() {
						t.Errorf("node %s: %s is %+v; want MAC %s (BackendV6Data), MTU %d, VNI 1, local %s", n.Name, vxlan6Device, dev, vtepMAC6(t, l), wantMTU, n.IP6)
					}
					if vtepMAC(t, l) == vtepMAC6(t, l) {
						t.Errorf("node %s: one MAC for both devices", n.Name)
					}
				}
			}
			pods := onePodEach(t, c, nodes)
			for i, p := range pods {
				sn6, err := nodes[i].Subnet6()
				if err != nil || !p.IP.IsValid() || !sn6.Contains(p.IP6) {
					t.Fatalf("pod %s: IPv4 %s IPv6 %s; want one of each, the IPv6 in %s (%v)", p.Name, p.IP, p.IP6, sn6, err)
				}
			}
			pingAll(t, pods)
			pingAll6(t, pods)

			t.Run("drift", func(t *testing.T) { dualDrift(t, c, b, nodes, pods) })
			t.Run("restart", func(t *testing.T) { dualRestart(t, nodes, pods) })
		})
	}
}

// dualDrift deletes node n1's IPv6 entries for n2's subnet by hand, one at a time: each comes
// back, and IPv6 traffic flows again.
func dualDrift(t *testing.T, c *cluster.Cluster, b backend, nodes []*cluster.Node, pods []*cluster.Pod) {
	n, peer := nodes[0], nodes[1]
	sn6, err := peer.Subnet6()
	if err != nil {
		t.Fatal(err)
	}
	mac := ""
	if b.vxlan() {
		mac = vtepMAC6(t, leaseOf(t, c, sn6))
	}
	want := peerStateOn(t, n, sn6, mac, vxlan6Device)
	if want.route == "" || (b.vxlan() && (want.neigh == "" || want.fdb == "")) {
		t.Fatalf("node %s before any change: %v; want all present", n.Name, want)
	}
	dels := [][]string{{"ip", "-6", "route", "del", sn6.String()}}
	if b.vxlan() {
		dels = append(dels,
			[]string{"ip", "-6", "neigh", "del", sn6.Addr().String(), "dev", vxlan6Device},
			[]string{"bridge", "fdb", "del", mac, "dev", vxlan6Device, "dst", peer.IP6.String(), "self"})
	}
	for _, del := range dels {
		nodeExec(t, n, del...)
		start := time.Now()
		for peerStateOn(t, n, sn6, mac, vxlan6Device) != want {
			if time.Since(start) > repairTimeout {
				t.Fatalf("node %s: after %q, not repaired in %v: %v; want %v", n.Name, strings.Join(del, " "), repairTimeout,
					peerStateOn(t, n, sn6, mac, vxlan6Device), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("node %s: %q repaired after %v", n.Name, strings.Join(del, " "), time.Since(start).Round(time.Millisecond))
		waitReachable6(t, pods[0], pods[1], convergeTimeout)
	}
	if !b.vxlan() {
		return
	}
	// The IPv6 device itself deleted: weftd makes it again with the MAC its lease publishes
	// in BackendV6Data, so that the peers, which know it, reach it again at once: the lease
	// stays as it was, both halves.
	sn1, err := n.Subnet6()
	if err != nil {
		t.Fatal(err)
	}
	before := leaseOf(t, c, sn1)
	nodeExec(t, n, "ip", "link", "del", vxlan6Device)
	start := time.Now()
	for {
		if out, err := n.Exec("ip", "link", "show", vxlan6Device); err == nil && strings.Contains(out, "UP") {
			if dev := readLink6(t, n); dev.Address != vtepMAC6(t, before) {
				t.Fatalf("node %s: %s made again with MAC %s; its lease says %s", n.Name, vxlan6Device, dev.Address, vtepMAC6(t, before))
			}
			break
		}
		if time.Since(start) > repairTimeout {
			t.Fatalf("node %s: %s deleted by hand is not back after %v", n.Name, vxlan6Device, repairTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := leaseOf(t, c, sn1); !l.Attrs.Equal(before.Attrs) {
		t.Errorf("node %s: its lease changed with the IPv6 device made again: %+v, was %+v", n.Name, l.Attrs, before.Attrs)
	}
	t.Logf("node %s: %s made again after %v", n.Name, vxlan6Device, time.Since(start).Round(time.Millisecond))
	waitReachable6(t, pods[1], pods[0], convergeTimeout)
	waitReachable6(t, pods[2], pods[0], convergeTimeout)
	waitReachable(t, pods[1], pods[0], convergeTimeout)
}

// dualRestart restarts n1's weftd (SIGTERM, then SIGKILL) while a pod on n2 pings n1's pod
// over IPv6 every 10 ms: not one packet may be lost.
func dualRestart(t *testing.T, nodes []*cluster.Node, pods []*cluster.Pod) {
	const count, interval = 250, 10 * time.Millisecond
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		sent, recv := restartUnderPing(t, nodes[0], pods[1], pods[0].IP6, sig, count, interval)
		if sent != count || recv != sent {
			t.Errorf("%v: %d of %d IPv6 pings lost across the restart", sig, sent-recv, sent)
		}
	}
}

// TestIPv6Only: a network with IPv4 off: leases, subnet.env and pods have IPv6 only, and
// pods on different nodes reach each other over flannel-v6.1.
func TestIPv6Only(t *testing.T) {
	bins := needBinaries(t)
	b := backend{"vxlan", `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"` + ipv6Network + `","Backend":{"Type":"vxlan"}}`}
	c := newCluster(t, bins, b)
	nodes := startNodes(t, c, "n1", "n2")
	for _, n := range nodes {
		env, err := n.SubnetEnv()
		if err != nil {
			t.Fatal(err)
		}
		if env.Network.IsValid() || env.Subnet.IsValid() || !env.IPv6Subnet.IsValid() {
			t.Errorf("node %s subnet.env %+v: want IPv6 only", n.Name, env)
		}
		l := leaseOf(t, c, env.IPv6Subnet.Masked())
		if l.Subnet.IsValid() || l.Attrs.PublicIPv6 != n.IP6 || len(l.Attrs.BackendData) != 0 {
			t.Errorf("node %s lease %s %+v: want an IPv6 subnet only, published at %s", n.Name, l.Key(), l.Attrs, n.IP6)
		}
		if out, err := n.Exec("ip", "link", "show", vxlanDevice); err == nil {
			t.Errorf("node %s has an IPv4 device: %s", n.Name, out)
		}
	}
	pods := onePodEach(t, c, nodes)
	for _, p := range pods {
		if p.IP.IsValid() || !p.IP6.IsValid() {
			t.Fatalf("pod %s: IPv4 %s IPv6 %s; want IPv6 only", p.Name, p.IP, p.IP6)
		}
	}
	pingAll6(t, pods)
	stream(t, pods[0], pods[1])
}

// TestDemoDualStack: `make demo DEMOFLAGS=--dual-stack` prints each node's lease with both
// halves and a ping table per family, every ping answered.
func TestDemoDualStack(t *testing.T) {
	bins := needBinaries(t)
	tt := buildTools(t)
	cmd := exec.Command(tt.demo, "--weftd="+bins.weftd, "--cni-bin="+bins.cniBin, "--dual-stack", "--nodes=2", "--pods=1", "--dir="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("weft-demo --dual-stack: %v\n%s", err, out)
	}
	for _, want := range []string{"IPv4 pings", "IPv6 pings", "every pod reaches every other pod over IPv4",
		"every pod reaches every other pod over IPv6", "fd77:77::11", "cluster torn down"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "FAIL") {
		t.Errorf("the demo's output has failed pings:\n%s", out)
	}
}

// TestFlannelDualStack: a real flanneld node, dual-stack, beside two weftd nodes in one etcd:
// each daemon programs the others' IPv4 and IPv6 halves (weftd skips none), every pod reaches
// every other over both families, and TCP streams over IPv6 pass between weft's and
// flannel's pods both ways.
func TestFlannelDualStack(t *testing.T) {
	bins := needBinaries(t)
	flanneld := needFlanneld(t)
	for _, b := range dualBackends() {
		t.Run(b.name, func(t *testing.T) {
			f := startFlannelNodes(t, bins, flanneld, flannelCase{backend: b, typ: b.name})
			pods := []*cluster.Pod{f.p1, f.p2, f.p3}
			pingAll6(t, pods)
			for _, n := range []*cluster.Node{f.n1, f.n2} {
				for _, p := range weftStatus(t, n).Peers {
					if p.State != "programmed" {
						t.Errorf("weftd on %s: peer %s (%s %s) %s: %s", n.Name, p.Key, p.Family, p.Subnet, p.State, p.Reason)
					}
				}
			}
			sn6, err := f.n3.Subnet6()
			if err != nil {
				t.Fatal(err)
			}
			l := leaseOf(t, f.m.Cluster, sn6)
			if l.Attrs.PublicIPv6 != f.n3.IP6 || (b.vxlan() && len(l.Attrs.BackendV6Data) == 0) {
				t.Errorf("flanneld's lease %s: %+v; want PublicIPv6 %s and (vxlan) BackendV6Data", l.Key(), l.Attrs, f.n3.IP6)
			}
			for _, pair := range [][2]*cluster.Pod{{f.p1, f.p3}, {f.p3, f.p2}} {
				res, err := cluster.StreamTo(pair[0], pair[1], pair[1].IP6, streamBytes)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("TCP over IPv6 %s (node %s) -> %s (node %s): %.0f Mbit/s", pair[0].Name, pair[0].Node.Name, pair[1].Name, pair[1].Node.Name, res.Mbps())
			}
			checkFlanneldLog(t, f.n3)
		})
	}
}

// TestKubeModeDualStack: Kubernetes mode on the real kube-apiserver with Nodes whose podCIDRs
// have both families: each weftd leases both, publishes public-ipv6 and (vxlan)
// backend-v6-data as flanneld does, and every pod reaches every other over both families.
func TestKubeModeDualStack(t *testing.T) {
	bins := needBinaries(t)
	needKubeAPIServer(t)
	for _, b := range dualBackends() {
		t.Run(b.name, func(t *testing.T) {
			kc := newKubeCluster(t, bins, b, bins.weftd)
			names := []string{"n1", "n2", "n3"}
			cidr6 := cluster.PodCIDR6
			for i, name := range names {
				kc.createNode(t, name, podCIDR(i+1), cidr6(i+1))
			}
			nodes := startNodes(t, kc.Cluster, names...)
			for i, n := range nodes {
				env, err := n.SubnetEnv()
				if err != nil {
					t.Fatal(err)
				}
				if env.Subnet.Masked() != podCIDR(i+1) || env.IPv6Subnet.Masked() != cidr6(i+1) {
					t.Errorf("node %s subnet.env %+v; want %s and %s", n.Name, env, podCIDR(i+1), cidr6(i+1))
				}
				node, err := kc.getNode(n.Name)
				if err != nil {
					t.Fatal(err)
				}
				ann := node.Annotations
				if ann[annotation("public-ip")] != n.IP.String() || ann[annotation("public-ipv6")] != n.IP6.String() {
					t.Errorf("Node %s annotations %v; want public-ip %s, public-ipv6 %s", n.Name, ann, n.IP, n.IP6)
				}
				if b.vxlan() {
					var data struct{ VtepMAC string }
					if err := json.Unmarshal([]byte(ann[annotation("backend-v6-data")]), &data); err != nil || data.VtepMAC != readLink6(t, n).Address {
						t.Errorf("Node %s backend-v6-data %q; want the MAC of its %s, %s", n.Name, ann[annotation("backend-v6-data")], vxlan6Device, readLink6(t, n).Address)
					}
				}
			}
			pods := onePodEach(t, kc.Cluster, nodes)
			pingAll(t, pods)
			pingAll6(t, pods)
		})
	}
}
