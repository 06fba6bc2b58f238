package backend

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/subnet"
)

const dualConf = `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`

// dualNode is a node with both families on eth0.
var dualNode = Node{Underlay: "eth0", MTU: 1500,
	Addr: netip.MustParseAddr("192.0.2.10"), PublicIP: netip.MustParseAddr("192.0.2.10"),
	Addr6: netip.MustParseAddr("fd77:77::10"), PublicIPv6: netip.MustParseAddr("fd77:77::10"),
	Connected: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("fd77:77::/64")}}

func newFamilies(t testing.TB, conf string, node Node) (*Backend, *Backend) {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	var bs [2]*Backend
	for i, f := range []Family{IPv4, IPv6} {
		if bs[i], err = NewFor(cfg, node, fullCaps(), f); err != nil {
			t.Fatal(err)
		}
	}
	return bs[0], bs[1]
}

// dualLease is a dual-stack vxlan lease as flannel writes it.
func dualLease(sn, sn6, ip, ip6, mac, mac6 string) subnet.Lease {
	l := subnet.Lease{Subnet: netip.MustParsePrefix(sn), IPv6Subnet: netip.MustParsePrefix(sn6),
		Attrs: subnet.LeaseAttrs{BackendType: subnet.BackendVXLAN, BackendData: json.RawMessage(vxData(mac)),
			BackendV6Data: json.RawMessage(vxData(mac6))}}
	l.Attrs.PublicIP, _ = netip.ParseAddr(ip)
	l.Attrs.PublicIPv6, _ = netip.ParseAddr(ip6)
	return l
}

// TestDesiredDualStackVXLAN: each family's backend programs its half of the leases: the IPv6
// one through flannel-v6.1 (local address the node's IPv6, MTU less 70), to the VTEP
// <subnet>:: with the MAC of BackendV6Data at PublicIPv6.
func TestDesiredDualStackVXLAN(t *testing.T) {
	b4, b6 := newFamilies(t, dualConf, dualNode)
	own := dualLease("10.244.1.0/24", "fd00:10:244:1::/64", "192.0.2.10", "fd77:77::10", "0e:00:00:00:00:01", "0e:00:00:00:06:01")
	peers := []subnet.Lease{own,
		dualLease("10.244.2.0/24", "fd00:10:244:2::/64", "192.0.2.12", "fd77:77::12", "0e:00:00:00:00:02", "0e:00:00:00:06:02"),
		dualLease("10.244.3.0/24", "fd00:10:244:3::/64", "198.51.100.3", "2001:db8::3", "0e:00:00:00:00:03", "0e:00:00:00:06:03"),
	}
	st4, skipped4 := Desired(b4, own, peers, false)
	st6, skipped6 := Desired(b6, own, peers, false)
	if len(skipped4)+len(skipped6) != 0 {
		t.Errorf("skipped %v %v", skipped4, skipped6)
	}
	want4 := `device flannel.1 vni 1 mtu 1450 local 192.0.2.10 addrs [10.244.1.0/32]
10.244.2.0/24 via vtep 10.244.2.0 mac 0e:00:00:00:00:02 at 192.0.2.12
10.244.3.0/24 via vtep 10.244.3.0 mac 0e:00:00:00:00:03 at 198.51.100.3
`
	want6 := `device flannel-v6.1 vni 1 mtu 1430 local fd77:77::10 addrs [fd00:10:244:1::/128]
fd00:10:244:2::/64 via vtep fd00:10:244:2:: mac 0e:00:00:00:06:02 at fd77:77::12
fd00:10:244:3::/64 via vtep fd00:10:244:3:: mac 0e:00:00:00:06:03 at 2001:db8::3
`
	if got := render(st4); got != want4 {
		t.Errorf("IPv4 state:\n%s\nwant:\n%s", got, want4)
	}
	if got := render(st6); got != want6 {
		t.Errorf("IPv6 state:\n%s\nwant:\n%s", got, want6)
	}
	if st6.Network() != netip.MustParsePrefix("fd00:10:244::/56") || st6.SubnetLen() != 64 || st6.Family != IPv6 {
		t.Errorf("IPv6 state's network %s /%d family %s", st6.Network(), st6.SubnetLen(), st6.Family)
	}

	// The attributes the node publishes: each family's address and device MAC in its half.
	var a subnet.LeaseAttrs
	b4.AddAttrs(&a, MAC{0x0e, 0, 0, 0, 0, 1})
	b6.AddAttrs(&a, MAC{0x0e, 0, 0, 0, 6, 1})
	if !a.Equal(own.Attrs) {
		t.Errorf("attributes %+v, want %+v", a, own.Attrs)
	}

	// DirectRouting: the IPv6 peer on the connected IPv6 network is routed straight to its
	// PublicIPv6; the one beyond stays on the overlay.
	_, b6 = newFamilies(t, `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","DirectRouting":true}}`, dualNode)
	st6, _ = Desired(b6, own, peers, false)
	want6 = `device flannel-v6.1 vni 1 mtu 1430 local fd77:77::10 addrs [fd00:10:244:1::/128]
fd00:10:244:2::/64 via fd77:77::12
fd00:10:244:3::/64 via vtep fd00:10:244:3:: mac 0e:00:00:00:06:03 at 2001:db8::3
`
	if got := render(st6); got != want6 {
		t.Errorf("direct routing IPv6 state:\n%s\nwant:\n%s", got, want6)
	}
}

// TestDesiredDualStackHostGW: host-gw routes each family's subnet via the peer's public
// address of that family, and only for peers on a connected network of that family.
func TestDesiredDualStackHostGW(t *testing.T) {
	b4, b6 := newFamilies(t, `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}`, dualNode)
	l := func(sn, sn6, ip, ip6 string) subnet.Lease {
		return subnet.Lease{Subnet: netip.MustParsePrefix(sn), IPv6Subnet: netip.MustParsePrefix(sn6),
			Attrs: subnet.LeaseAttrs{PublicIP: netip.MustParseAddr(ip), PublicIPv6: netip.MustParseAddr(ip6), BackendType: subnet.BackendHostGW}}
	}
	own := l("10.244.1.0/24", "fd00:10:244:1::/64", "192.0.2.10", "fd77:77::10")
	peers := []subnet.Lease{own,
		l("10.244.2.0/24", "fd00:10:244:2::/64", "192.0.2.12", "fd77:77::12"),
		l("10.244.3.0/24", "fd00:10:244:3::/64", "192.0.2.13", "2001:db8::13"), // IPv6 off-link
	}
	st4, skipped4 := Desired(b4, own, peers, false)
	st6, skipped6 := Desired(b6, own, peers, false)
	if got, want := render(st4), "10.244.2.0/24 via 192.0.2.12\n10.244.3.0/24 via 192.0.2.13\n"; got != want || len(skipped4) != 0 {
		t.Errorf("IPv4 state:\n%s\nwant:\n%s (skipped %v)", got, want, skipped4)
	}
	if got, want := render(st6), "fd00:10:244:2::/64 via fd77:77::12\n"; got != want || st6.Device != nil {
		t.Errorf("IPv6 state:\n%s\nwant:\n%s", got, want)
	}
	if len(skipped6) != 1 || skipped6[0].Code != SkipNotOnLink || skipped6[0].Family != IPv6 {
		t.Errorf("IPv6 skipped %+v, want the off-link peer", skipped6)
	}
}

// TestBadIPv6Half: a lease whose IPv6 half is malformed or out of the network is skipped in
// the IPv6 family only, with a reason; its IPv4 half is programmed.
func TestBadIPv6Half(t *testing.T) {
	b4, b6 := newFamilies(t, dualConf, dualNode)
	own := dualLease("10.244.1.0/24", "fd00:10:244:1::/64", "192.0.2.10", "fd77:77::10", "0e:00:00:00:00:01", "0e:00:00:00:06:01")
	good := func() subnet.Lease {
		return dualLease("10.244.2.0/24", "fd00:10:244:2::/64", "192.0.2.12", "fd77:77::12", "0e:00:00:00:00:02", "0e:00:00:00:06:02")
	}
	for _, c := range []struct {
		name, code string
		spoil      func(*subnet.Lease)
	}{
		{"no IPv6 subnet", SkipNoSubnet, func(l *subnet.Lease) { l.IPv6Subnet = netip.Prefix{} }},
		{"IPv6 subnet outside the network", SkipOutside, func(l *subnet.Lease) { l.IPv6Subnet = netip.MustParsePrefix("fd99::/64") }},
		{"IPv6 subnet of another length", SkipOutside, func(l *subnet.Lease) { l.IPv6Subnet = netip.MustParsePrefix("fd00:10:244:2::/80") }},
		{"PublicIPv6 not an address", SkipBadPublicIP, func(l *subnet.Lease) { l.Attrs.PublicIPv6, l.Attrs.BadPublicIPv6 = netip.Addr{}, "1.2.3.4" }},
		{"PublicIPv6 missing", SkipBadPublicIP, func(l *subnet.Lease) { l.Attrs.PublicIPv6 = netip.Addr{} }},
		{"PublicIPv6 link-local", SkipBadPublicIP, func(l *subnet.Lease) { l.Attrs.PublicIPv6 = netip.MustParseAddr("fe80::12") }},
		{"PublicIPv6 multicast", SkipBadPublicIP, func(l *subnet.Lease) { l.Attrs.PublicIPv6 = netip.MustParseAddr("ff02::1") }},
		{"BackendV6Data missing", SkipBadData, func(l *subnet.Lease) { l.Attrs.BackendV6Data = nil }},
		{"BackendV6Data without a MAC", SkipBadData, func(l *subnet.Lease) { l.Attrs.BackendV6Data = json.RawMessage(`{"VNI":1}`) }},
		{"BackendV6Data of another VNI", SkipVNI, func(l *subnet.Lease) {
			l.Attrs.BackendV6Data = json.RawMessage(`{"VNI":2,"VtepMAC":"0e:00:00:00:06:02"}`)
		}},
		{"IPv6 VtepMAC this node's", SkipDuplicateMAC, func(l *subnet.Lease) { l.Attrs.BackendV6Data = json.RawMessage(vxData("0e:00:00:00:06:01")) }},
		{"PublicIPv6 this node's", SkipDuplicateIP, func(l *subnet.Lease) { l.Attrs.PublicIPv6 = netip.MustParseAddr("fd77:77::10") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := good()
			c.spoil(&l)
			st4, skipped4 := Desired(b4, own, []subnet.Lease{own, l}, false)
			st6, skipped6 := Desired(b6, own, []subnet.Lease{own, l}, false)
			if st4.Peers.Len() != 1 || len(skipped4) != 0 {
				t.Errorf("IPv4 half: %d peers, skipped %v; want it programmed", st4.Peers.Len(), skipped4)
			}
			if st6.Peers.Len() != 0 || len(skipped6) != 1 || skipped6[0].Code != c.code || skipped6[0].Family != IPv6 || skipped6[0].Reason == "" {
				t.Errorf("IPv6 half: %d peers, skipped %+v; want it skipped with %s", st6.Peers.Len(), skipped6, c.code)
			}
		})
	}
}

// TestIPv6OnlyBackend: with IPv4 off the node has no IPv4 address; the IPv6 backend needs none.
func TestIPv6OnlyBackend(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":4}}`))
	if err != nil {
		t.Fatal(err)
	}
	if fams := Families(cfg); len(fams) != 1 || fams[0] != IPv6 {
		t.Fatalf("families %v", fams)
	}
	node := dualNode
	node.Addr, node.PublicIP = netip.Addr{}, netip.Addr{}
	b, err := NewFor(cfg, node, fullCaps(), IPv6)
	if err != nil {
		t.Fatal(err)
	}
	a := b.Attrs(MAC{0x0e, 0, 0, 0, 6, 1})
	if a.PublicIP.IsValid() || a.PublicIPv6 != node.PublicIPv6 || a.BackendData != nil || string(a.BackendV6Data) != `{"VNI":4,"VtepMAC":"0e:00:00:00:06:01"}` {
		t.Errorf("attributes %+v (%s)", a, a.BackendV6Data)
	}
	st := b.State(netip.MustParsePrefix("fd00:10:244:1::/64"), true)
	if st.Device.Name != "flannel-v6.4" || st.Network() != cfg.IPv6Network {
		t.Errorf("state: device %+v network %s", st.Device, st.Network())
	}
}

// TestIPv6MTU: an IPv6 underlay costs 70 bytes, and a link must carry at least 1280.
func TestIPv6MTU(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(dualConf))
	if err != nil {
		t.Fatal(err)
	}
	node := dualNode
	node.MTU = 9000
	if b, err := NewFor(cfg, node, fullCaps(), IPv6); err != nil || b.MTU() != 8930 {
		t.Errorf("MTU 9000: %v, %v", b, err)
	}
	node.MTU = 1340
	if _, err := NewFor(cfg, node, fullCaps(), IPv6); err == nil {
		t.Error("an underlay of 1340 bytes leaves 1270 for IPv6 pods, below 1280: accepted")
	}
}

// FuzzLeaseHalves: whatever a peer writes in the IPv6 half of its lease, the IPv4 half is
// judged the same as without it, and nothing panics.
func FuzzLeaseHalves(f *testing.F) {
	f.Add(`{"PublicIP":"192.0.2.12","PublicIPv6":"fd77:77::12","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"},"BackendV6Data":{"VNI":1,"VtepMAC":"0e:00:00:00:06:02"}}`, "fd00:10:244:2::/64")
	f.Add(`{"PublicIP":"192.0.2.12","PublicIPv6":"1.2.3.4","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"},"BackendV6Data":[]}`, "fd99::/64")
	f.Add(`{"PublicIP":"192.0.2.12","PublicIPv6":"fe80::1%eth0","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"},"BackendV6Data":{"VNI":1,"VtepMAC":"0e:00:00:00:00:01"}}`, "")
	b4, b6 := newFamilies(f, dualConf, dualNode)
	own := dualLease("10.244.1.0/24", "fd00:10:244:1::/64", "192.0.2.10", "fd77:77::10", "0e:00:00:00:00:01", "0e:00:00:00:06:01")
	f.Fuzz(func(t *testing.T, value, sn6 string) {
		var a subnet.LeaseAttrs
		if json.Unmarshal([]byte(value), &a) != nil {
			return
		}
		l := subnet.Lease{Subnet: netip.MustParsePrefix("10.244.2.0/24"), Attrs: a}
		l.IPv6Subnet, _ = netip.ParsePrefix(sn6)
		st6, _ := Desired(b6, own, []subnet.Lease{l}, false)
		for _, p := range st6.Peers.All() {
			if !p.Subnet.Addr().Is6() || !p.PublicIP.Is6() {
				t.Errorf("IPv6 state programs %+v", p)
			}
		}
		v4only := l
		v4only.IPv6Subnet, v4only.Attrs.PublicIPv6, v4only.Attrs.BadPublicIPv6, v4only.Attrs.BackendV6Data = netip.Prefix{}, netip.Addr{}, "", nil
		st4, s4 := Desired(b4, own, []subnet.Lease{l}, false)
		st4b, s4b := Desired(b4, own, []subnet.Lease{v4only}, false)
		if render(st4) != render(st4b) || len(s4) != len(s4b) {
			t.Errorf("the IPv6 half changed the IPv4 one: %s%v / %s%v", render(st4), s4, render(st4b), s4b)
		}
	})
}
