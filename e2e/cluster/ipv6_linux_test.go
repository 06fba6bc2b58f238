package cluster

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Hand-written subnet.env files in the format weftd writes (subnet.Env.Marshal): a
// dual-stack node and an IPv6-only one.
const (
	dualStackEnv = "FLANNEL_NETWORK=10.244.0.0/16\n" +
		"FLANNEL_SUBNET=10.244.1.1/24\n" +
		"FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n" +
		"FLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n" +
		"FLANNEL_MTU=1430\n" +
		"FLANNEL_IPMASQ=false\n"
	ipv6OnlyEnv = "FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n" +
		"FLANNEL_IPV6_SUBNET=fd00:10:244:2::1/64\n" +
		"FLANNEL_MTU=1430\n" +
		"FLANNEL_IPMASQ=false\n"
)

// weftCNIPlugin returns the weft CNI plugin for AddWeftPod: $WEFT_CNI_PLUGIN if set (as for
// the e2e tests), else ./cmd/weft built into the test's directory.
func weftCNIPlugin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WEFT_CNI_PLUGIN"); bin != "" {
		return bin
	}
	return goBuild(t, "./cmd/weft")
}

// goBuild builds the repository's package pkg into the test's directory and returns the
// binary.
func goBuild(t *testing.T, pkg string) string {
	t.Helper()
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// mustPing requires count of count echo replies, at once: no retry, so that an address still
// tentative (duplicate address detection) or a neighbour not answering fails it.
func mustPing(t *testing.T, what string, ping func(netip.Addr, int, time.Duration) (int, int, error), to netip.Addr) {
	t.Helper()
	const count = 3
	sent, recv, err := ping(to, count, 20*time.Millisecond)
	if err != nil || sent != count || recv != count {
		t.Fatalf("ping %s (%s): %d/%d replies, %v", what, to, recv, sent, err)
	}
}

// podPing adapts Ping from a pod to mustPing.
func podPing(p *Pod) func(netip.Addr, int, time.Duration) (int, int, error) {
	return func(to netip.Addr, count int, interval time.Duration) (int, int, error) {
		return Ping(p, to, count, interval)
	}
}

// noTentative fails if any IPv6 address of dev in namespace ns is tentative, or has failed
// duplicate address detection.
func noTentative(t *testing.T, ns, dev string) {
	t.Helper()
	out, err := run("ip", "-n", ns, "-6", "addr", "show", "dev", dev)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "tentative") || strings.Contains(out, "dadfailed") {
		t.Errorf("IPv6 addresses of %s in %s not usable yet:\n%s", dev, ns, out)
	}
}

// sysctlIs fails unless the /proc/sys value key (with slashes) in namespace ns is want.
func sysctlIs(t *testing.T, ns, key, want string) {
	t.Helper()
	out, err := run("ip", netnsExecArgs(ns, "cat", "/proc/sys/"+key)...)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out); got != want {
		t.Errorf("%s in %s = %q, want %q", key, ns, got, want)
	}
}

// TestHarnessIPv6WithoutWeftd checks the harness's IPv6 underlay and IPv6 pods, with what
// weftd would do done by hand: every node reaches every other and the gateway over IPv6, and
// etcd at EtcdURL6; two pods made through the weft CNI plugin on a dual-stack node (and one by
// the bridge plugin directly) get an address of each family in the node's subnets and reach
// each other over both at once; a pod on an IPv6-only node gets only an IPv6 address, and
// reaches a pod on the dual-stack node through host-gw style routes over the IPv6 underlay.
func TestHarnessIPv6WithoutWeftd(t *testing.T) {
	cni := needRoot(t)
	c, err := New(t, Options{NetConf: testNetConf, CNIBin: cni, WeftCNI: weftCNIPlugin(t)})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*Node
	for i, name := range []string{"n1", "n2", "n3"} {
		n, err := c.AddNode(name)
		if err != nil {
			t.Fatal(err)
		}
		want := netip.MustParseAddr([]string{"fd77:77::11", "fd77:77::12", "fd77:77::13"}[i])
		if n.IP6 != want || !netip.MustParsePrefix(Underlay6).Contains(n.IP6) {
			t.Fatalf("node %s: IP6 %s, want %s in %s", name, n.IP6, want, Underlay6)
		}
		nodes = append(nodes, n)
	}
	n1, n2 := nodes[0], nodes[1]

	// The underlay, node to node and to the gateway, over IPv6.
	gw6 := netip.MustParseAddr(UnderlayGateway6)
	for _, from := range nodes {
		noTentative(t, from.NS, "eth0")
		sysctlIs(t, from.NS, "net/ipv6/conf/all/forwarding", "1")
		sysctlIs(t, from.NS, "net/ipv6/conf/eth0/disable_ipv6", "0")
		if r, err := from.Exec("ip", "-6", "route", "show", "default"); err != nil || !strings.Contains(r, "via "+UnderlayGateway6+" dev eth0") {
			t.Errorf("node %s's default IPv6 route: %q %v, want via %s dev eth0", from.Name, r, err, UnderlayGateway6)
		}
		mustPing(t, "node "+from.Name+" -> underlay gateway", from.Ping, gw6)
		for _, to := range nodes {
			if to != from {
				mustPing(t, "node "+from.Name+" -> node "+to.Name+" over IPv6", from.Ping, to.IP6)
			}
		}
		// The gateway's fixed MAC holds for IPv6 too.
		out, err := from.Exec("ip", "-6", "neigh", "show", UnderlayGateway6, "dev", "eth0")
		if err != nil || !strings.Contains(out, "lladdr "+underlayBridgeMAC) {
			t.Errorf("node %s's neighbour entry of %s: %q %v, want lladdr %s", from.Name, UnderlayGateway6, out, err, underlayBridgeMAC)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dialIn(ctx, n2.NS, "tcp", net.JoinHostPort(UnderlayGateway6, "2379"))
	if err != nil {
		t.Fatalf("etcd at %s from node n2: %v", EtcdURL6, err)
	}
	conn.Close()

	// A dual-stack node: pods through the weft plugin, and one by the bridge plugin itself.
	if err := os.WriteFile(n1.SubnetFile, []byte(dualStackEnv), 0o644); err != nil {
		t.Fatal(err)
	}
	sn4, sn6 := netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")
	if got, err := n1.Subnet6(); err != nil || got != sn6 {
		t.Fatalf("n1.Subnet6() = %s, %v; want %s", got, err, sn6)
	}
	var pods []*Pod
	for _, name := range []string{"a", "b", "c"} {
		add := c.AddWeftPod
		if name == "c" {
			add = c.AddPod
		}
		p, err := add(n1, name)
		if err != nil {
			t.Fatal(err)
		}
		if !sn4.Contains(p.IP) || !sn6.Contains(p.IP6) || len(p.Addrs()) != 2 {
			t.Fatalf("pod %s: addresses %s %s, want one in %s and one in %s", name, p.IP, p.IP6, sn4, sn6)
		}
		if p.Gateway != sn4.Addr().Next() || p.Gateway6 != sn6.Addr().Next() {
			t.Errorf("pod %s: gateways %s %s, want %s %s", name, p.Gateway, p.Gateway6, sn4.Addr().Next(), sn6.Addr().Next())
		}
		noTentative(t, p.NS, podIfName)
		pods = append(pods, p)
	}
	a, b, pc := pods[0], pods[1], pods[2]
	if a.IP == b.IP || a.IP6 == b.IP6 || a.IP6 == pc.IP6 || b.IP6 == pc.IP6 {
		t.Fatalf("pods share addresses: a %v, b %v, c %v", a.Addrs(), b.Addrs(), pc.Addrs())
	}
	noTentative(t, n1.NS, PodBridge)

	// At once, with no retry: nothing may be tentative.
	for _, to := range []*Pod{b, pc} {
		for _, addr := range to.Addrs() {
			mustPing(t, "pod a -> pod "+to.Name, podPing(a), addr)
		}
	}
	mustPing(t, "pod b -> its IPv6 gateway (cni0)", podPing(b), b.Gateway6)
	mustPing(t, "node n1 -> pod a", n1.Ping, a.IP6)
	res, err := StreamTo(a, b, b.IP6, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stream a -> b over IPv6 on one node: %d bytes in %v (%.0f Mbit/s)", res.Bytes, res.Elapsed, res.Mbps())
	if _, err := StreamTo(a, b, n1.IP6, 1); err == nil {
		t.Error("StreamTo an address that is not the pod's: no error")
	}

	// An IPv6-only node: its pod has no IPv4 address at all.
	if err := os.WriteFile(n2.SubnetFile, []byte(ipv6OnlyEnv), 0o644); err != nil {
		t.Fatal(err)
	}
	sn6b := netip.MustParsePrefix("fd00:10:244:2::/64")
	e, err := c.AddWeftPod(n2, "e")
	if err != nil {
		t.Fatal(err)
	}
	if e.IP.IsValid() || e.Gateway.IsValid() || !sn6b.Contains(e.IP6) || e.Gateway6 != sn6b.Addr().Next() {
		t.Fatalf("IPv6-only pod e: IP %s gateway %s, IP6 %s gateway %s; want no IPv4, IPv6 in %s via %s",
			e.IP, e.Gateway, e.IP6, e.Gateway6, sn6b, sn6b.Addr().Next())
	}
	if out, err := run("ip", "-n", e.NS, "-4", "addr", "show", "dev", podIfName); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("IPv6-only pod e's eth0 has IPv4: %q %v", out, err)
	}
	if _, _, err := Ping(a, e.IP, 1, 10*time.Millisecond); err == nil {
		t.Error("ping to the IPv4 address of an IPv6-only pod (the zero Addr): no error")
	}

	// Across nodes nothing routes until someone programs it: host-gw style, over the IPv6
	// underlay, by hand.
	if sent, recv, err := Ping(a, e.IP6, 2, 20*time.Millisecond); err != nil || recv != 0 || sent != 2 {
		t.Fatalf("ping a -> e with no routes: %d/%d, %v; want 0/2", recv, sent, err)
	}
	if _, err := n1.Exec("ip", "-6", "route", "add", sn6b.String(), "via", n2.IP6.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Exec("ip", "-6", "route", "add", sn6.String(), "via", n1.IP6.String()); err != nil {
		t.Fatal(err)
	}
	if r, err := n1.RouteTo(sn6b); err != nil || !strings.Contains(r, "via "+n2.IP6.String()) {
		t.Fatalf("RouteTo(%s) on n1 = %q, %v", sn6b, r, err)
	}
	mustPing(t, "pod a -> pod e across nodes", podPing(a), e.IP6)
	mustPing(t, "pod e -> pod b across nodes", podPing(e), b.IP6)
	// Stream to an IPv6-only pod goes to its IPv6 address.
	if res, err = Stream(a, e, 4<<20); err != nil {
		t.Fatal(err)
	}
	t.Logf("stream a -> e over IPv6 across nodes: %d bytes in %v (%.0f Mbit/s)", res.Bytes, res.Elapsed, res.Mbps())
}
