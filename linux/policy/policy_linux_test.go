package policy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/weftnet/weft/netpol"
)

// testNet is a node (the "node" namespace, which runs the policy table) with two local
// pods, pod1 (10.244.1.2) and pod3 (10.244.1.3), each on a veth of its own, and a peer
// namespace that holds two remote pod addresses, 10.244.2.2 and 10.244.2.3, routed through
// 198.51.100.2. Every namespace is named and deleted with the test.
type testNet struct {
	t      testing.TB
	prefix string
	m      *Manager
}

func newTestNet(t testing.TB) *testNet {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	n := &testNet{t: t, prefix: fmt.Sprintf("wpol%d", os.Getpid()%100000)}
	for _, ns := range []string{"node", "pod1", "pod3", "peer"} {
		n.sh("", "ip netns add "+n.ns(ns))
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.ns(ns)).Run() })
		n.sh(ns, "ip link set lo up")
	}
	for _, l := range []struct{ ns, peer, addr string }{{"pod1", "p1", "10.244.1.2"}, {"pod3", "p3", "10.244.1.3"}} {
		n.sh("", fmt.Sprintf("ip link add %s netns %s type veth peer name eth0 netns %s", l.peer, n.ns("node"), n.ns(l.ns)))
		n.sh(l.ns, "ip addr add "+l.addr+"/24 dev eth0 && ip link set eth0 up && ip route replace default via 10.244.1.1 dev eth0 onlink")
		n.sh("node", fmt.Sprintf("ip addr add 10.244.1.1/32 dev %s && ip link set %s up && ip route add %s/32 dev %s", l.peer, l.peer, l.addr, l.peer))
	}
	n.sh("", fmt.Sprintf("ip link add uplink netns %s type veth peer name eth0 netns %s", n.ns("node"), n.ns("peer")))
	n.sh("node", "ip addr add 198.51.100.1/24 dev uplink && ip link set uplink up && ip route add 10.244.2.0/24 via 198.51.100.2")
	n.sh("node", "sysctl -qw net.ipv4.ip_forward=1")
	n.sh("peer", "ip addr add 198.51.100.2/24 dev eth0 && ip link set eth0 up && ip addr add 10.244.2.2/32 dev lo && ip addr add 10.244.2.3/32 dev lo && ip route add default via 198.51.100.1")

	fd, err := netns.GetFromName(n.ns("node"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fd.Close() })
	conn, err := NewConn(nftables.WithNetNSFd(int(fd)))
	if err != nil {
		t.Fatal(err)
	}
	n.m = New(slog.New(slog.NewTextHandler(os.Stderr, nil)), conn)
	return n
}

func (n *testNet) ns(name string) string { return n.prefix + "-" + name }

// sh runs a shell command in namespace ns ("" for the test's own).
func (n *testNet) sh(ns, cmd string) string {
	n.t.Helper()
	args := []string{"-c", cmd}
	name := "sh"
	if ns != "" {
		name, args = "ip", append([]string{"netns", "exec", n.ns(ns), "sh"}, args...)
	}
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s: %s: %v\n%s", ns, cmd, err, out)
	}
	return string(out)
}

// inNS runs fn on a thread in namespace ns.
func (n *testNet) inNS(ns string, fn func()) {
	n.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		h, err := netns.GetFromName(n.ns(ns))
		if err != nil {
			n.t.Error(err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			n.t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

// listener listens on TCP addr:port in namespace ns until the test ends.
func (n *testNet) listener(ns, addr string, port int) net.Listener {
	var l net.Listener
	n.inNS(ns, func() {
		var err error
		if l, err = net.Listen("tcp", net.JoinHostPort(addr, fmt.Sprint(port))); err != nil {
			n.t.Error(err)
		}
	})
	if l == nil {
		n.t.FailNow()
	}
	n.t.Cleanup(func() { l.Close() })
	return l
}

// listen serves TCP on addr:port in namespace ns until the test ends, answering "ok".
func (n *testNet) listen(ns, addr string, port int) {
	l := n.listener(ns, addr, port)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
}

// connects reports whether a TCP connection from namespace ns, bound to src, reaches dst:port.
func (n *testNet) connects(ns, src, dst string, port int) bool {
	var ok bool
	n.inNS(ns, func() {
		d := net.Dialer{Timeout: 700 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(dst, fmt.Sprint(port)))
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 2)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		k, _ := c.Read(buf)
		ok = string(buf[:k]) == "ok"
	})
	return ok
}

type flowCheck struct {
	name         string
	ns, src, dst string
	port         int
	want         bool
}

func (n *testNet) check(step string, flows []flowCheck) {
	n.t.Helper()
	for _, f := range flows {
		if got := n.connects(f.ns, f.src, f.dst, f.port); got != f.want {
			n.t.Errorf("%s: %s (%s -> %s:%d): connected %t, want %t\n%s", step, f.name, f.src, f.dst, f.port, got, f.want,
				n.sh("node", "nft list table inet "+TableName))
		}
	}
}

func (n *testNet) ensure(want Table) Changes {
	n.t.Helper()
	ch, err := n.m.Ensure(want)
	if err != nil {
		n.t.Fatalf("Ensure: %v", err)
	}
	return ch
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func one(s string) netpol.Range { return netpol.Range{From: addr(s), To: addr(s)} }

// TestPolicyTraffic programs policies into the node's table and checks real TCP connections
// through it: what an isolated pod allows passes, the rest is dropped, replies pass, an
// address of the node's pod subnet that is no known pod gets nothing; a peer that joins a
// rule's peers is a set element written, not a chain; the table converges and is repaired
// after hand edits.
func TestPolicyTraffic(t *testing.T) {
	n := newTestNet(t)
	n.listen("pod1", "10.244.1.2", 80)
	n.listen("pod1", "10.244.1.2", 81)
	n.listen("pod3", "10.244.1.3", 80)
	n.listen("peer", "0.0.0.0", 80)

	n.check("no policy table", []flowCheck{
		{"peer to pod1", "peer", "10.244.2.3", "10.244.1.2", 81, true},
		{"peer to pod3", "peer", "10.244.2.2", "10.244.1.3", 80, true},
	})

	pod1 := func(ingress, egress *netpol.Direction) netpol.Rules {
		return netpol.Rules{Pods: map[string]netpol.PodRules{
			"default/pod1": {IPs: []netip.Addr{addr("10.244.1.2"), addr("fd00:10:244:1::2")}, Ingress: ingress, Egress: egress},
		}}
	}
	web := func(peers ...netpol.Range) *netpol.Direction {
		return &netpol.Direction{Allow: []netpol.Rule{{Peers: peers, Ports: []netpol.Port{{Protocol: netpol.TCP, From: 80, To: 80}}}}}
	}
	ch := n.ensure(Build(pod1(web(one("10.244.2.2")), nil), subnets))
	if ch.Table != 1 || ch.Chains == 0 {
		t.Errorf("first Ensure: %s, want the table and its chains made", ch)
	}
	n.check("pod1 isolated for ingress, 10.244.2.2 on TCP 80", []flowCheck{
		{"allowed peer on the allowed port", "peer", "10.244.2.2", "10.244.1.2", 80, true},
		{"allowed peer on another port", "peer", "10.244.2.2", "10.244.1.2", 81, false},
		{"another peer", "peer", "10.244.2.3", "10.244.1.2", 80, false},
		{"pod1's egress is not isolated; its replies come back", "pod1", "10.244.1.2", "10.244.2.3", 80, true},
		{"pod3 is no known pod: nothing reaches it", "peer", "10.244.2.2", "10.244.1.3", 80, false},
		{"nor leaves it", "pod3", "10.244.1.3", "10.244.2.2", 80, false},
	})
	if ch := n.ensure(Build(pod1(web(one("10.244.2.2")), nil), subnets)); ch.Any() {
		t.Errorf("the same table again: wrote %s, want nothing", ch)
	}

	ch = n.ensure(Build(pod1(web(netpol.Range{From: addr("10.244.2.2"), To: addr("10.244.2.3")}), nil), subnets))
	if ch.Chains != 0 || ch.Rules != 0 || ch.Elements == 0 {
		t.Errorf("a peer added to the rule: wrote %s, want set elements only", ch)
	}
	rules := pod1(web(netpol.Range{From: addr("10.244.2.2"), To: addr("10.244.2.3")}), &netpol.Direction{})
	rules.Pods["default/pod3"] = netpol.PodRules{IPs: []netip.Addr{addr("10.244.1.3")}}
	n.ensure(Build(rules, subnets))
	n.check("pod1 also isolated for egress with no rule; pod3 known, not isolated", []flowCheck{
		{"the peer it now allows", "peer", "10.244.2.3", "10.244.1.2", 80, true},
		{"pod1 to a peer", "pod1", "10.244.1.2", "10.244.2.3", 80, false},
		{"pod3 reached", "peer", "10.244.2.2", "10.244.1.3", 80, true},
		{"pod3 to pod1 (ingress allows 10.244.2.x only)", "pod3", "10.244.1.3", "10.244.1.2", 80, false},
	})

	want := Build(rules, subnets)
	for _, drift := range []string{
		"nft delete element inet " + TableName + " pods4 '{ 10.244.1.3 }'",
		"nft flush chain inet " + TableName + " " + baseChain,
		"nft flush table inet " + TableName,
		"nft delete table inet " + TableName,
	} {
		n.sh("node", drift)
		t.Logf("drift: %s", drift)
		if ch := n.ensure(want); !ch.Any() {
			t.Errorf("after %q: Ensure wrote nothing", drift)
		}
		if ch := n.ensure(want); ch.Any() {
			t.Errorf("after %q and a repair: Ensure wrote %s again", drift, ch)
		}
		n.check("repaired after "+drift, []flowCheck{
			{"allowed peer", "peer", "10.244.2.3", "10.244.1.2", 80, true},
			{"denied port", "peer", "10.244.2.3", "10.244.1.2", 81, false},
			{"pod3 reached", "peer", "10.244.2.2", "10.244.1.3", 80, true},
		})
	}
	if out := n.sh("node", "nft list table inet "+TableName); !strings.Contains(out, "fd00:10:244:1::2") {
		t.Errorf("the table lacks pod1's IPv6 address:\n%s", out)
	}
}

// TestUpdateMatchesEnsure: Update, which diffs from the Manager's last write without reading
// the kernel, leaves the kernel holding exactly what it is given: after each of a series of
// changes (peers relabelled, pods gone and back, policies gone and added, both families), an
// Ensure, which reads the kernel, finds nothing to write. It also shows what Update leaves to
// Ensure: drift.
func TestUpdateMatchesEnsure(t *testing.T) {
	n := newTestNet(t)
	sns := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	c := convergeCluster(400, 40)
	for i := range c.Pods {
		ip := c.Pods[i].IPs[0].As4()
		c.Pods[i].IPs = append(c.Pods[i].IPs, netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ip[0], ip[1], ip[2], ip[3]}))
	}
	compile := func() Table { return Build(netpol.Compile(c, "node-0", netpol.Options{SCTP: true}), sns) }
	if ch := n.ensure(compile()); ch.Chains == 0 || ch.Elements == 0 {
		t.Fatalf("the first Ensure wrote %s: the test would prove little", ch)
	}
	allPolicies, allPods := c.Policies, c.Pods
	steps := []struct {
		name   string
		change func()
	}{
		{"peers relabelled", func() {
			for i := 1; i < len(c.Pods); i += 3 {
				c.Pods[i].Labels = map[string]string{"app": c.Pods[i].Labels["app"], "role": "2"}
			}
		}},
		{"half the pods gone", func() { c.Pods = slices.Clone(allPods[:len(allPods)/2]) }},
		{"pods back", func() { c.Pods = allPods }},
		{"policies gone", func() { c.Policies = allPolicies[:5] }},
		{"policies back", func() { c.Policies = allPolicies }},
		{"no policy", func() { c.Policies = nil }},
		{"all back", func() { c.Policies = allPolicies }},
	}
	updated := 0
	for _, s := range steps {
		s.change()
		want := compile()
		ch, err := n.m.Update(want)
		if err != nil {
			t.Fatalf("%s: Update: %v", s.name, err)
		}
		if ch.Any() {
			updated++
		}
		if again := n.ensure(want); again.Any() {
			t.Errorf("%s: after Update wrote %s, Ensure found %s still to write", s.name, ch, again)
		}
	}
	if updated < len(steps)-1 {
		t.Errorf("only %d of %d changes wrote anything: the test would prove little", updated, len(steps))
	}

	want := compile()
	n.sh("node", "nft flush table inet "+TableName)
	if ch, err := n.m.Update(want); err != nil || ch.Any() {
		t.Errorf("Update after drift: wrote %s (%v); want nothing (it does not read the kernel)", ch, err)
	}
	if ch := n.ensure(want); !ch.Any() {
		t.Error("Ensure after drift wrote nothing")
	}
}
