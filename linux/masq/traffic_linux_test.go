package masq

import (
	"context"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestMasqueradeTraffic sends real packets through a router namespace that
// runs the masquerade, and checks which source address each receiver sees:
//
//	pod ns (10.244.1.2, fd00:10:244:1::2)        this node's pod
//	   | pods
//	router ns (the node: runs Ensure)
//	   | out                          | peer
//	outside ns (192.0.2.2,          remote ns (198.51.100.2; its pod
//	  2001:db8:1::2)                  10.244.2.2 is routed host-gw style)
//
// Every address lives only in these namespaces.
func TestMasqueradeTraffic(t *testing.T) {
	needRoot(t)
	pod, router, outside, remote := newNetNS(t), newNetNS(t), newNetNS(t), newNetNS(t)

	vethPair(t, router, "pods", pod, "eth0")
	vethPair(t, router, "out", outside, "eth0")
	vethPair(t, router, "peer", remote, "eth0")
	setUp(t, pod, "eth0", "10.244.1.2/24", "fd00:10:244:1::2/64")
	setUp(t, router, "pods", "10.244.1.1/24", "fd00:10:244:1::1/64")
	setUp(t, router, "out", "192.0.2.1/24", "2001:db8:1::1/64")
	setUp(t, router, "peer", "198.51.100.1/24")
	setUp(t, outside, "eth0", "192.0.2.2/24", "2001:db8:1::2/64")
	setUp(t, remote, "eth0", "198.51.100.2/24")
	setUp(t, remote, "lo", "10.244.2.2/32")
	addRoute(t, pod, "0.0.0.0/0", "10.244.1.1")
	addRoute(t, pod, "::/0", "fd00:10:244:1::1")
	addRoute(t, router, "10.244.2.0/24", "198.51.100.2")
	addRoute(t, outside, "10.244.0.0/16", "192.0.2.1")
	addRoute(t, outside, "fd00:10:244::/56", "2001:db8:1::1")
	addRoute(t, remote, "0.0.0.0/0", "198.51.100.1")
	writeSysctls(t, router, "/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding", "1")

	a := netip.MustParseAddr
	podToOutside := flow{from: pod, src: a("10.244.1.2"), to: outside, dst: a("192.0.2.2")}
	if seen := podToOutside.exchange(t); seen != podToOutside.src {
		t.Fatalf("before Ensure the outside saw %s, want the pod's own %s: the namespaces are not set up as assumed", seen, podToOutside.src)
	}

	m, err := NewInNetNS(testLogger(t), int(router))
	if err != nil {
		t.Fatal(err)
	}
	ensure(t, m, rulesDual())

	for _, c := range []struct {
		name string
		flow flow
		want netip.Addr
	}{
		{"pod to outside is masqueraded", podToOutside, a("192.0.2.1")},
		{"pod to a pod of another node keeps its address",
			flow{from: pod, src: a("10.244.1.2"), to: remote, dst: a("10.244.2.2")}, a("10.244.1.2")},
		{"outside to this node's pod keeps the client address",
			flow{from: outside, src: a("192.0.2.2"), to: pod, dst: a("10.244.1.2")}, a("192.0.2.2")},
		{"outside to another node's pod is masqueraded",
			flow{from: outside, src: a("192.0.2.2"), to: remote, dst: a("10.244.2.2")}, a("198.51.100.1")},
		{"kube-proxy marked traffic from the pod network is left alone",
			flow{from: router, src: a("10.244.1.1"), mark: KubeProxyMark, to: outside, dst: a("192.0.2.2")}, a("10.244.1.1")},
		{"the same traffic unmarked is masqueraded",
			flow{from: router, src: a("10.244.1.1"), to: outside, dst: a("192.0.2.2")}, a("192.0.2.1")},
		{"ipv6 pod to outside is masqueraded",
			flow{from: pod, src: a("fd00:10:244:1::2"), to: outside, dst: a("2001:db8:1::2")}, a("2001:db8:1::1")},
		{"ipv6 outside to this node's pod keeps the client address",
			flow{from: outside, src: a("2001:db8:1::2"), to: pod, dst: a("fd00:10:244:1::2")}, a("2001:db8:1::2")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if seen := c.flow.exchange(t); seen != c.want {
				t.Errorf("%s -> %s was seen from %s, want %s", c.flow.src, c.flow.dst, seen, c.want)
			}
		})
	}

	// Replacing the rules must not disturb a flow in progress: conntrack
	// keeps its translation, so it goes on from the same address and port.
	live := podToOutside.open(t)
	defer live.close()
	before := live.roundTrip(t)
	if before.Addr() != a("192.0.2.1") {
		t.Fatalf("live flow seen from %s, want it masqueraded to 192.0.2.1", before)
	}
	moved := rulesDual()
	moved.Subnet = pfx("10.244.7.0/24")
	if !ensure(t, m, moved) {
		t.Fatal("Ensure with a new subnet reported no change")
	}
	if after := live.roundTrip(t); after != before {
		t.Errorf("a flow seen from %s before the rules were replaced is seen from %s after", before, after)
	}

	if err := m.Remove(); err != nil {
		t.Fatal(err)
	}
	if seen := podToOutside.exchange(t); seen != podToOutside.src {
		t.Errorf("after Remove the outside saw %s, want the pod's own %s", seen, podToOutside.src)
	}
}

// flow is one UDP request and its reply between two namespaces.
type flow struct {
	from netns.NsHandle
	src  netip.Addr
	mark uint32 // SO_MARK of the sending socket, 0 for none
	to   netns.NsHandle
	dst  netip.Addr
}

// exchange sends a datagram from src to dst on a flow of its own and returns
// the source address the receiver saw.
func (f flow) exchange(t *testing.T) netip.Addr {
	t.Helper()
	s := f.open(t)
	defer s.close()
	return s.roundTrip(t).Addr().Unmap()
}

// udpSockets are the two ends of one flow: every round trip on them is the
// same conntrack entry.
type udpSockets struct {
	ln  *net.UDPConn // receiver, in the flow's destination namespace
	c   net.Conn     // sender, in the flow's source namespace
	dst netip.AddrPort
}

func (f flow) open(t *testing.T) *udpSockets {
	t.Helper()
	var s udpSockets
	if err := inNetNS(f.to, func() error {
		var err error
		s.ln, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(f.dst, 0)))
		return err
	}); err != nil {
		t.Fatalf("listening on %s: %v", f.dst, err)
	}
	s.dst = netip.AddrPortFrom(f.dst, s.ln.LocalAddr().(*net.UDPAddr).AddrPort().Port())
	if err := inNetNS(f.from, func() error {
		d := net.Dialer{
			LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(f.src, 0)),
			Control: func(_, _ string, rc syscall.RawConn) error {
				if f.mark == 0 {
					return nil
				}
				var serr error
				if err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(f.mark))
				}); err != nil {
					return err
				}
				return serr
			},
		}
		var err error
		s.c, err = d.DialContext(context.Background(), "udp", s.dst.String())
		return err
	}); err != nil {
		s.ln.Close()
		t.Fatalf("dialing %s from %s: %v", s.dst, f.src, err)
	}
	return &s
}

func (s *udpSockets) close() {
	s.c.Close()
	s.ln.Close()
}

// roundTrip sends a datagram, returns the address and port the receiver saw
// it from, and checks that the receiver's reply makes it back (so the
// translation is undone on the way back, too).
func (s *udpSockets) roundTrip(t *testing.T) netip.AddrPort {
	t.Helper()
	src := s.c.LocalAddr()
	// Resend until one arrives: on a link just brought up, the first IPv6
	// neighbour solicitation is lost and the next comes a second later, per
	// hop. Every resend reuses the socket, so it is still one conntrack entry
	// and one translation.
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 16)
	var from netip.AddrPort
	for {
		if _, err := s.c.Write([]byte("ping")); err != nil {
			t.Fatalf("sending %s -> %s: %v", src, s.dst, err)
		}
		s.ln.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		n, addr, err := s.ln.ReadFromUDPAddrPort(buf)
		if err == nil && string(buf[:n]) == "ping" {
			from = addr
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s -> %s never arrived: %v", src, s.dst, err)
		}
	}
	if _, err := s.ln.WriteToUDPAddrPort([]byte("pong"), from); err != nil {
		t.Fatalf("replying to %s: %v", from, err)
	}
	s.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := s.c.Read(buf)
	if err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("reply to %s -> %s (seen from %s) never came back: %v", src, s.dst, from, err)
	}
	return from
}

// writeSysctls writes value to two sysctls of a namespace (/proc/sys/net
// shows the namespace of the thread that opens it).
func writeSysctls(t *testing.T, ns netns.NsHandle, a, b, value string) {
	t.Helper()
	if err := inNetNS(ns, func() error {
		for _, path := range []string{a, b} {
			if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("writing sysctls: %v", err)
	}
}

// vethPair creates a veth pair with one end in each namespace.
func vethPair(t *testing.T, aNS netns.NsHandle, aName string, bNS netns.NsHandle, bName string) {
	t.Helper()
	h, err := netlink.NewHandleAt(aNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: aName}, PeerName: bName, PeerNamespace: netlink.NsFd(int(bNS))}
	if err := h.LinkAdd(veth); err != nil {
		t.Fatalf("creating veth %s/%s: %v", aName, bName, err)
	}
}

// setUp gives a link its addresses and brings it (and the namespace's
// loopback) up. IPv6 addresses skip duplicate address detection, which would
// otherwise keep them unusable for the first second or two.
func setUp(t *testing.T, ns netns.NsHandle, name string, addrs ...string) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links := []string{"lo", name}
	if name == "lo" {
		links = links[:1]
	}
	for _, n := range links {
		l, err := h.LinkByName(n)
		if err != nil {
			t.Fatalf("link %s: %v", n, err)
		}
		if n == name {
			for _, s := range addrs {
				a, err := netlink.ParseAddr(s)
				if err != nil {
					t.Fatal(err)
				}
				if a.IP.To4() == nil {
					a.Flags = unix.IFA_F_NODAD
				}
				if err := h.AddrAdd(l, a); err != nil {
					t.Fatalf("adding %s to %s: %v", s, n, err)
				}
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("setting %s up: %v", n, err)
		}
	}
}

func addRoute(t *testing.T, ns netns.NsHandle, dst, gw string) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, d, err := net.ParseCIDR(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{Dst: d, Gw: net.ParseIP(gw)}); err != nil {
		t.Fatalf("route %s via %s: %v", dst, gw, err)
	}
}
