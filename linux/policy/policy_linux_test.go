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
	t      *testing.T
	prefix string
	m      *Manager
}

func newTestNet(t *testing.T) *testNet {
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
	conn, err := nftables.New(nftables.WithNetNSFd(int(fd)))
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

// listen serves TCP on addr:port in namespace ns until the test ends, answering "ok".
func (n *testNet) listen(ns, addr string, port int) {
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
