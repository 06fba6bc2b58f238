package linux

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux/masq"
	"github.com/weftnet/weft/subnet"
)

// dualFixture is a namespace whose underlay ul0 has an IPv4 and an IPv6 address, with one
// Plane per family, as weftd opens them.
func dualFixture(t *testing.T) (*fixture, *Plane) {
	f := newFixture(t, testLog(t))
	f.must(netlink.AddrAdd(f.link("ul0"), &netlink.Addr{IPNet: ipNet(pfx("fd77:77::1/64")), Flags: unix.IFA_F_NODAD}))
	p6, err := New(testLog(t).With("family", "IPv6"))
	f.must(err)
	t.Cleanup(func() { p6.Close() })
	return f, p6
}

// dualStates are the States of both families for the backend conf, the node holding
// 10.244.1.0/24 and fd00:10:244:1::/64, with peers.
func dualStates(t *testing.T, conf string, peers ...subnet.Lease) (*backend.State, *backend.State) {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	node := backend.Node{Underlay: "ul0", MTU: 1500, Addr: ip("192.168.50.1"), PublicIP: ip("192.168.50.1"),
		Addr6: ip("fd77:77::1"), PublicIPv6: ip("fd77:77::1"), Connected: []netip.Prefix{pfx("192.168.50.0/24"), pfx("fd77:77::/64")}}
	own := subnet.Lease{Subnet: pfx("10.244.1.0/24"), IPv6Subnet: pfx("fd00:10:244:1::/64"),
		Attrs: subnet.LeaseAttrs{PublicIP: node.PublicIP, PublicIPv6: node.PublicIPv6, BackendType: cfg.Backend.Type}}
	var sts [2]*backend.State
	for i, fam := range []backend.Family{backend.IPv4, backend.IPv6} {
		b, err := backend.NewFor(cfg, node, Capabilities(), fam)
		if err != nil {
			t.Fatal(err)
		}
		var skipped []backend.Skipped
		sts[i], skipped = backend.Desired(b, own, peers, true)
		if len(skipped) > 0 {
			t.Fatalf("%s skipped %v", fam, skipped)
		}
	}
	return sts[0], sts[1]
}

func dualPeer(n int, vxlan bool) subnet.Lease {
	l := subnet.Lease{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(n), 0}), 24),
		IPv6Subnet: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0x02, 0x44, 0, byte(n)}), 64),
		Attrs: subnet.LeaseAttrs{PublicIP: netip.AddrFrom4([4]byte{192, 168, 50, byte(n)}),
			PublicIPv6: netip.AddrFrom16([16]byte{0xfd, 0x77, 0, 0x77, 15: byte(n)}), BackendType: subnet.BackendHostGW}}
	if vxlan {
		l.Attrs.BackendType = subnet.BackendVXLAN
		l.Attrs.BackendData = json.RawMessage(`{"VNI":1,"VtepMAC":"0e:00:00:00:04:0` + string(rune('0'+n)) + `"}`)
		l.Attrs.BackendV6Data = json.RawMessage(`{"VNI":1,"VtepMAC":"0e:00:00:00:06:0` + string(rune('0'+n)) + `"}`)
	}
	return l
}

// TestDualStackVXLANPlanes: the two families' planes side by side in one namespace, as weftd
// runs them: flannel.1 over IPv4 and flannel-v6.1 over IPv6, each with its routes, neighbours,
// FDB entries and masquerade; neither's full Apply touches the other's entries, and an
// incremental IPv6 change writes IPv6 entries only.
func TestDualStackVXLANPlanes(t *testing.T) {
	f, p6 := dualFixture(t)
	conf := `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`
	st4, st6 := dualStates(t, conf, dualPeer(2, true), dualPeer(3, true))
	ctx := t.Context()
	if _, err := f.p.Prepare(ctx, st4); err != nil {
		t.Fatal(err)
	}
	mac6, err := p6.Prepare(ctx, st6)
	if err != nil {
		t.Fatal(err)
	}
	dev6, ok := f.link("flannel-v6.1").(*netlink.Vxlan)
	if !ok || dev6.VxlanId != 1 || dev6.SrcAddr.String() != "fd77:77::1" || dev6.MTU != 1430 || macOf(dev6.HardwareAddr) != mac6 {
		t.Fatalf("flannel-v6.1: %+v", f.link("flannel-v6.1"))
	}
	for _, c := range []struct {
		p  *Plane
		st *backend.State
	}{{f.p, st4}, {p6, st6}} {
		ch, err := c.p.Apply(ctx, c.st, backend.Update{Full: true})
		if err != nil {
			t.Fatalf("%s: %v", c.st.Family, err)
		}
		if ch["masquerade"] != 1 {
			t.Errorf("%s: first full Apply changed %v, want the masquerade rules among them", c.st.Family, ch)
		}
		declaredKinds(t, ch)
	}
	check := func(when string) {
		t.Helper()
		checkList(t, when+": routes", f.routes(),
			"10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink",
			"10.244.3.0/24 via 10.244.3.0 dev flannel.1 onlink",
			"fd00:10:244:1::/128 dev flannel-v6.1 proto kernel metric 256",
			"fd00:10:244:2::/64 via fd00:10:244:2:: dev flannel-v6.1 onlink",
			"fd00:10:244:3::/64 via fd00:10:244:3:: dev flannel-v6.1 onlink")
		checkList(t, when+": IPv6 neighbours", f.neighbors("flannel-v6.1"), "fd00:10:244:2:: lladdr 0e:00:00:00:06:02", "fd00:10:244:3:: lladdr 0e:00:00:00:06:03")
		checkList(t, when+": IPv6 FDB", f.fdb("flannel-v6.1"), "0e:00:00:00:06:02 dst fd77:77::2 permanent self", "0e:00:00:00:06:03 dst fd77:77::3 permanent self")
		checkList(t, when+": IPv4 neighbours", f.neighbors("flannel.1"), "10.244.2.0 lladdr 0e:00:00:00:04:02", "10.244.3.0 lladdr 0e:00:00:00:04:03")
		checkList(t, when+": IPv6 device addresses", f.addrs("flannel-v6.1"), "fd00:10:244:1::/128")
		checkList(t, when+": IPv4 device addresses", f.addrs("flannel.1"), "10.244.1.0/32")
	}
	check("after both applied")
	routes6 := func() int {
		rs, err := netlink.RouteList(nil, netlink.FAMILY_V6)
		f.must(err)
		n := 0
		for _, r := range rs {
			if r.Dst != nil && pfx("fd00:10:244::/56").Contains(addrOf(r.Dst.IP)) && r.Gw != nil {
				n++
			}
		}
		return n
	}
	if n := routes6(); n != 2 {
		t.Errorf("%d IPv6 routes to peers, want 2", n)
	}

	// Each family's full Apply again: nothing to write, and nothing of the other's removed.
	for _, c := range []struct {
		p  *Plane
		st *backend.State
	}{{f.p, st4}, {p6, st6}} {
		if ch, err := c.p.Apply(ctx, c.st, backend.Update{Full: true}); err != nil || ch.Total() != 0 {
			t.Errorf("%s: second full Apply changed %v (%v)", c.st.Family, ch, err)
		}
	}
	check("after a second full Apply of each")

	// Masquerade: each family's table holds its own network's rules.
	m, err := masq.NewInNetNS(testLog(t), int(f.p.ns))
	f.must(err)
	if ch, err := m.EnsureFamily(masq.Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.1.0/24")}, false); err != nil || ch {
		t.Errorf("IPv4 masquerade not as the IPv4 plane left it: changed %t, %v", ch, err)
	}
	if ch, err := m.EnsureFamily(masq.Rules{IPv6Network: pfx("fd00:10:244::/56"), IPv6Subnet: pfx("fd00:10:244:1::/64")}, true); err != nil || ch {
		t.Errorf("IPv6 masquerade not as the IPv6 plane left it: changed %t, %v", ch, err)
	}

	// A peer leaves: the IPv6 plane's incremental Apply removes its IPv6 entries only.
	st4b, st6b := dualStates(t, conf, dualPeer(2, true))
	var gone backend.Peer
	for _, p := range st6.Peers.All() {
		if p.Subnet == pfx("fd00:10:244:3::/64") {
			gone = p
		}
	}
	ch, err := p6.Apply(ctx, st6b, backend.Update{Peers: []backend.PeerChange{{Key: "3", Old: gone}}})
	if err != nil || ch["route"] != 1 || ch["neighbor"] != 1 || ch["fdb"] != 1 {
		t.Errorf("removing an IPv6 peer changed %v (%v)", ch, err)
	}
	checkList(t, "IPv6 neighbours after the peer left", f.neighbors("flannel-v6.1"), "fd00:10:244:2:: lladdr 0e:00:00:00:06:02")
	checkList(t, "IPv4 neighbours after the IPv6 half left", f.neighbors("flannel.1"), "10.244.2.0 lladdr 0e:00:00:00:04:02", "10.244.3.0 lladdr 0e:00:00:00:04:03")
	if n := routes6(); n != 1 {
		t.Errorf("%d IPv6 routes to peers, want 1", n)
	}
	if ch, err := f.p.Apply(ctx, st4b, backend.Update{Full: true}); err != nil || ch["route"] != 1 {
		t.Errorf("IPv4 full Apply without the peer changed %v (%v)", ch, err)
	}
	if n := routes6(); n != 1 {
		t.Errorf("the IPv4 plane's Apply left %d IPv6 routes, want 1", n)
	}
}

// TestDualStackHostGWPlanes: host-gw routes each family's subnets via the peers' public
// addresses of that family on the underlay.
func TestDualStackHostGWPlanes(t *testing.T) {
	f, p6 := dualFixture(t)
	conf := `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}`
	st4, st6 := dualStates(t, conf, dualPeer(2, false), dualPeer(3, false))
	for _, c := range []struct {
		p  *Plane
		st *backend.State
	}{{f.p, st4}, {p6, st6}} {
		if ch, err := c.p.Apply(t.Context(), c.st, backend.Update{Full: true}); err != nil || ch["route"] != 2 {
			t.Fatalf("%s: changed %v (%v)", c.st.Family, ch, err)
		}
	}
	checkList(t, "routes", f.routes(),
		"10.244.2.0/24 via 192.168.50.2 dev ul0",
		"10.244.3.0/24 via 192.168.50.3 dev ul0",
		"fd00:10:244:2::/64 via fd77:77::2 dev ul0",
		"fd00:10:244:3::/64 via fd77:77::3 dev ul0")
}

// TestDualStackForwardRules: with SetForwardRules each family's plane keeps its forward chain
// in weft's table of its family (without --ip-masq too), and removes it once told not to.
func TestDualStackForwardRules(t *testing.T) {
	f, p6 := dualFixture(t)
	conf := `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}`
	st4, st6 := dualStates(t, conf, dualPeer(2, false))
	st4.Masquerade, st6.Masquerade = false, false
	conn, err := nftables.New()
	f.must(err)
	chains := func() []string {
		t.Helper()
		cs, err := conn.ListChains()
		f.must(err)
		var out []string
		for _, c := range cs {
			if c.Table.Name == masq.TableName {
				out = append(out, fmt.Sprintf("%d %s", c.Table.Family, c.Name))
			}
		}
		slices.Sort(out)
		return out
	}
	apply := func(on bool, want int) {
		t.Helper()
		for _, c := range []struct {
			p  *Plane
			st *backend.State
		}{{f.p, st4}, {p6, st6}} {
			c.p.SetForwardRules(on)
			ch, err := c.p.Apply(t.Context(), c.st, backend.Update{Full: true})
			f.must(err)
			declaredKinds(t, ch)
			if ch["forward"] != want {
				t.Errorf("%s, forward rules %t: %d forward changes, want %d", c.st.Family, on, ch["forward"], want)
			}
		}
	}
	apply(true, 1)
	checkList(t, "chains", chains(), fmt.Sprintf("%d forward", nftables.TableFamilyIPv4), fmt.Sprintf("%d forward", nftables.TableFamilyIPv6))
	apply(true, 0)
	apply(false, 1)
	checkList(t, "chains once off", chains())
	apply(false, 0)
}
