package backend

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/subnet"
)

func lease(sn, ip, data string) subnet.Lease {
	l := subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{BackendType: subnet.BackendVXLAN, BackendData: json.RawMessage(data)}}
	l.Attrs.PublicIP, _ = netip.ParseAddr(ip)
	return l
}

func vxData(mac string) string { return `{"VNI":1,"VtepMAC":"` + mac + `"}` }

// agedLease is a vxlan lease of VTEP MAC mac, of age created (subnet.Lease.Created).
func agedLease(sn, ip, mac string, created int64) subnet.Lease {
	l := lease(sn, ip, vxData(mac))
	l.Created = created
	return l
}

func newBackend(t testing.TB, conf string) *Backend {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewFor(cfg, Node{Underlay: "eth0", Addr: netip.MustParseAddr("192.0.2.10"), MTU: 1500,
		Connected: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, PublicIP: netip.MustParseAddr("192.0.2.10")}, fullCaps(), IPv4)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// render writes a State as text, one line per peer in subnet order.
func render(st *State) string {
	var b strings.Builder
	if st.Device != nil {
		fmt.Fprintf(&b, "device %s vni %d mtu %d local %s addrs %v\n", st.Device.Name, st.Device.VNI, st.Device.MTU, st.Device.Local, st.DeviceAddresses())
	}
	peers := maps.Collect(st.Peers.All())
	keys := slices.SortedFunc(maps.Keys(peers), func(a, b string) int {
		return peers[a].Subnet.Addr().Compare(peers[b].Subnet.Addr())
	})
	for _, k := range keys {
		p := peers[k]
		if p.Overlay() {
			fmt.Fprintf(&b, "%s via vtep %s mac %s at %s\n", p.Subnet, p.VTEP(), p.VTEPMAC, p.PublicIP)
		} else {
			fmt.Fprintf(&b, "%s via %s\n", p.Subnet, p.PublicIP)
		}
	}
	return b.String()
}

func TestDesiredVXLAN(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := lease("10.244.1.0/24", "192.0.2.10", vxData("0e:00:00:00:00:01"))
	peers := []subnet.Lease{
		own,
		lease("10.244.3.0/24", "198.51.100.3", vxData("0e:00:00:00:00:03")),
		lease("10.244.2.0/24", "192.0.2.12", vxData("0e:00:00:00:00:02")),
	}
	st, skipped := Desired(b, own, peers, false)
	if len(skipped) != 0 {
		t.Errorf("skipped %v", skipped)
	}
	want := `device flannel.1 vni 1 mtu 1450 local 192.0.2.10 addrs [10.244.1.0/32]
10.244.2.0/24 via vtep 10.244.2.0 mac 0e:00:00:00:00:02 at 192.0.2.12
10.244.3.0/24 via vtep 10.244.3.0 mac 0e:00:00:00:00:03 at 198.51.100.3
`
	if got := render(st); got != want {
		t.Errorf("state:\n%s\nwant:\n%s", got, want)
	}

	// DirectRouting: the peer on the connected network gets a plain route, the other stays on the overlay.
	b = newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","DirectRouting":true}}`)
	st, _ = Desired(b, own, peers, false)
	want = `device flannel.1 vni 1 mtu 1450 local 192.0.2.10 addrs [10.244.1.0/32]
10.244.2.0/24 via 192.0.2.12
10.244.3.0/24 via vtep 10.244.3.0 mac 0e:00:00:00:00:03 at 198.51.100.3
`
	if got := render(st); got != want {
		t.Errorf("direct routing state:\n%s\nwant:\n%s", got, want)
	}
}

func TestDesiredHostGW(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`)
	l := func(sn, ip string) subnet.Lease {
		return subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{PublicIP: netip.MustParseAddr(ip), BackendType: subnet.BackendHostGW}}
	}
	own := l("10.244.1.0/24", "192.0.2.10")
	far := l("10.244.3.0/24", "198.51.100.3") // not on the same layer-2 network
	st, skipped := Desired(b, own, []subnet.Lease{own, l("10.244.2.0/24", "192.0.2.12"), far}, true)
	if got, want := render(st), "10.244.2.0/24 via 192.0.2.12\n"; got != want || st.Device != nil || !st.Masquerade {
		t.Errorf("state %q (device %v, masquerade %t), want %q", got, st.Device, st.Masquerade, want)
	}
	if len(skipped) != 1 || skipped[0].Key != far.Key() || skipped[0].Code != SkipNotOnLink {
		t.Errorf("skipped %v", skipped)
	}
}

// TestDesiredSkipsBadPeers: each bad lease is skipped with a reason, the good one stays.
func TestDesiredSkipsBadPeers(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := lease("10.244.1.0/24", "192.0.2.10", vxData("0e:00:00:00:00:01"))
	good := lease("10.244.2.0/24", "192.0.2.12", vxData("0e:00:00:00:00:02"))
	hostgw := lease("10.244.9.0/24", "192.0.2.19", `null`)
	hostgw.Attrs.BackendType = "host-gw"
	bad := map[string]struct {
		l    subnet.Lease
		code string
	}{
		"outside":      {lease("10.245.3.0/24", "192.0.2.13", vxData("0e:00:00:00:00:03")), SkipOutside},
		"length":       {lease("10.244.4.0/25", "192.0.2.14", vxData("0e:00:00:00:00:04")), SkipOutside},
		"zero mac":     {lease("10.244.6.0/24", "192.0.2.16", vxData("00:00:00:00:00:00")), SkipBadData},
		"multicast":    {lease("10.244.7.0/24", "192.0.2.17", vxData("01:00:5e:00:00:01")), SkipBadData},
		"bad mac":      {lease("10.244.8.0/24", "192.0.2.18", vxData("zz")), SkipBadData},
		"host-gw":      {hostgw, SkipBackendType},
		"no ip":        {lease("10.244.10.0/24", "", vxData("0e:00:00:00:00:0a")), SkipBadPublicIP},
		"loopback":     {lease("10.244.11.0/24", "127.0.0.1", vxData("0e:00:00:00:00:0b")), SkipBadPublicIP},
		"own ip":       {lease("10.244.12.0/24", "192.0.2.10", vxData("0e:00:00:00:00:0c")), SkipDuplicateIP},
		"dup ip":       {lease("10.244.13.0/24", "192.0.2.12", vxData("0e:00:00:00:00:0d")), SkipDuplicateIP},
		"dup mac":      {lease("10.244.14.0/24", "192.0.2.24", vxData("0e:00:00:00:00:02")), SkipDuplicateMAC},
		"own mac":      {lease("10.244.18.0/24", "192.0.2.28", vxData("0e:00:00:00:00:01")), SkipDuplicateMAC},
		"vni":          {lease("10.244.15.0/24", "192.0.2.25", `{"VNI":4096,"VtepMAC":"0e:00:00:00:00:0f"}`), SkipVNI},
		"no data":      {lease("10.244.16.0/24", "192.0.2.26", ``), SkipBadData},
		"data array":   {lease("10.244.17.0/24", "192.0.2.27", `[1]`), SkipBadData},
		"no subnet":    {subnet.Lease{Attrs: good.Attrs}, SkipNoSubnet},
		"overlaps own": {lease("10.244.1.0/24", "192.0.2.29", vxData("0e:00:00:00:00:1d")), SkipOverlapsOwn},
	}
	// "overlaps own" has the own lease's key: it is the own lease, not a peer. Give it a
	// dual-stack key so that it is a peer claiming the own subnet.
	ov := bad["overlaps own"]
	ov.l.IPv6Subnet = netip.MustParsePrefix("fd00::/64")
	bad["overlaps own"] = ov
	peers := []subnet.Lease{good}
	for _, c := range bad {
		peers = append(peers, c.l)
	}
	st, skipped := Desired(b, own, peers, false)
	if peers := maps.Collect(st.Peers.All()); len(peers) != 1 || st.Peers.Len() != 1 || peers[good.Key()].Subnet != good.Subnet {
		t.Errorf("state:\n%s", render(st))
	}
	codes := map[string]string{}
	for _, s := range skipped {
		if s.Reason == "" {
			t.Errorf("skip without a reason: %+v", s)
		}
		codes[s.Key] = s.Code
	}
	for name, c := range bad {
		if got := codes[c.l.Key()]; got != c.code {
			t.Errorf("%s: skipped as %q, want %q", name, got, c.code)
		}
	}
}

// TestClaims: of two leases claiming one public IP or VTEP MAC, the older is programmed,
// whatever their subnets (of leases of unknown age, the first in subnet order); when it goes,
// the other takes its place.
func TestClaims(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := lease("10.244.1.0/24", "192.0.2.10", vxData("0e:00:00:00:00:01"))
	aged := func(l subnet.Lease, created int64) subnet.Lease { l.Created = created; return l }
	for _, c := range []struct {
		name           string
		live, newcomer subnet.Lease
		code           string
	}{
		// Unknown ages: subnet order.
		{"unknown ages", lease("10.244.2.0/24", "192.0.2.12", vxData("0e:00:00:00:00:02")),
			lease("10.244.9.0/24", "192.0.2.12", vxData("0e:00:00:00:00:09")), SkipDuplicateIP},
		// A newcomer on a lower subnet copying a live node's public IP (a cloned VM) does not
		// displace it.
		{"a copied public IP", aged(lease("10.244.9.0/24", "192.0.2.12", vxData("0e:00:00:00:00:09")), 100),
			aged(lease("10.244.2.0/24", "192.0.2.12", vxData("0e:00:00:00:00:02")), 200), SkipDuplicateIP},
		// Nor one copying its VTEP MAC.
		{"a copied VTEP MAC", aged(lease("10.244.9.0/24", "192.0.2.19", vxData("0e:00:00:00:00:09")), 100),
			aged(lease("10.244.2.0/24", "192.0.2.12", vxData("0e:00:00:00:00:09")), 200), SkipDuplicateMAC},
		// A lease of known age beats one of unknown age.
		{"known against unknown", aged(lease("10.244.9.0/24", "192.0.2.12", vxData("0e:00:00:00:00:09")), 100),
			lease("10.244.2.0/24", "192.0.2.12", vxData("0e:00:00:00:00:02")), SkipDuplicateIP},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, order := range [][2]subnet.Lease{{c.live, c.newcomer}, {c.newcomer, c.live}} {
				s := NewSet(b, own, false)
				var r Result
				for _, l := range order {
					s.Put(l, &r)
				}
				if _, ok := maps.Collect(s.State().Peers.All())[c.live.Key()]; !ok || s.State().Peers.Len() != 1 {
					t.Fatalf("put %s then %s: %s; want the live lease programmed", order[0].Key(), order[1].Key(), render(s.State()))
				}
				if len(r.Skipped) != 1 || r.Skipped[0].Key != c.newcomer.Key() || r.Skipped[0].Code != c.code ||
					!strings.Contains(r.Skipped[0].Reason, c.live.Key()) || r.Skipped[0].ClashesWith != c.live.Key() {
					t.Errorf("skipped %+v; want the newcomer, %s, clashing with %s", r.Skipped, c.code, c.live.Key())
				}
				r = Result{}
				s.Remove(c.live.Key(), &r)
				if _, ok := maps.Collect(s.State().Peers.All())[c.newcomer.Key()]; !ok || len(r.Changes) != 2 || len(r.Skipped) != 0 {
					t.Errorf("after the live lease went: %s, result %+v", render(s.State()), r)
				}
			}
		})
	}
}

// TestContests: a peer lease older than the own one that claims its public IP or VTEP MAC is
// skipped (the node keeps its claim) and marked as contesting it, loudly; a younger one is
// merely skipped. The count follows puts, removes and own-lease changes.
func TestContests(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := agedLease("10.244.1.0/24", "192.0.2.10", "0e:00:00:00:00:01", 50)
	s := NewSet(b, own, false)
	var r Result
	older := agedLease("10.244.7.0/24", "192.0.2.10", "0e:00:00:00:00:07", 10)   // this node's IP
	younger := agedLease("10.244.8.0/24", "192.0.2.18", "0e:00:00:00:00:01", 90) // this node's MAC
	s.Put(older, &r)
	s.Put(younger, &r)
	if s.Contesting() != 1 || s.State().Peers.Len() != 0 || len(r.Skipped) != 2 {
		t.Fatalf("contesting %d, %d programmed, skipped %+v", s.Contesting(), s.State().Peers.Len(), r.Skipped)
	}
	for _, sk := range r.Skipped {
		if sk.Contests != (sk.Key == older.Key()) {
			t.Errorf("skip %+v: Contests should be set for the older lease only", sk)
		}
		if sk.ClashesWith != own.Key() {
			t.Errorf("skip %+v: it clashes with the own lease %s", sk, own.Key())
		}
	}
	// The own lease re-created (younger still): still contested. Then the older lease goes.
	own.Created = 60
	s.SetOwn(own, &r)
	if s.Contesting() != 1 {
		t.Errorf("after SetOwn: contesting %d", s.Contesting())
	}
	s.Remove(older.Key(), &r)
	if s.Contesting() != 0 {
		t.Errorf("after the older lease went: contesting %d", s.Contesting())
	}
	// An own lease of unknown age is contested by nobody.
	s.Put(older, &r)
	own.Created = 0
	s.SetOwn(own, &r)
	if s.Contesting() != 0 {
		t.Errorf("own lease of unknown age: contesting %d", s.Contesting())
	}
	if s.MACContested() {
		t.Error("MACContested with no lease older than the own one")
	}
}

// TestContestsOfTheSameAge: leases of one age (a Node's creation time has whole seconds:
// nodes registered together) are ordered by subnet, then key, as the peers order them: one of
// a lower subnet that claims the own VTEP MAC contests it, one of a higher subnet does not.
func TestContestsOfTheSameAge(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := agedLease("10.244.3.0/24", "192.0.2.13", "0e:00:00:00:00:01", 50)
	s := NewSet(b, own, false)
	var r Result
	higher := agedLease("10.244.4.0/24", "192.0.2.14", "0e:00:00:00:00:01", 50)
	s.Put(higher, &r)
	if s.Contesting() != 0 || s.MACContested() {
		t.Errorf("a lease as old, of a higher subnet: contesting %d, MACContested %t; want neither", s.Contesting(), s.MACContested())
	}
	lower := agedLease("10.244.1.0/24", "192.0.2.11", "0e:00:00:00:00:01", 50)
	r = Result{}
	s.Put(lower, &r)
	if s.Contesting() != 1 || !s.MACContested() {
		t.Errorf("a lease as old, of a lower subnet: contesting %d, MACContested %t; want 1, true", s.Contesting(), s.MACContested())
	}
	if len(r.Skipped) != 1 || !r.Skipped[0].Contests || !strings.Contains(r.Skipped[0].Reason, "as old") {
		t.Errorf("skipped %+v; want the lower one, contesting, saying it is as old", r.Skipped)
	}
}

// TestMACContested: an older peer lease that claims the own VTEP MAC, and nothing else of the
// own lease, contests the MAC: the node can end that by taking another MAC. A contest of the
// public IP does not; a new own MAC, or the older lease's going, ends it.
func TestMACContested(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := agedLease("10.244.1.0/24", "192.0.2.10", "0e:00:00:00:00:01", 50)
	s := NewSet(b, own, false)
	var r Result
	ip := agedLease("10.244.7.0/24", "192.0.2.10", "0e:00:00:00:00:07", 10) // this node's IP
	s.Put(ip, &r)
	if s.Contesting() != 1 || s.MACContested() {
		t.Fatalf("an older lease with the own public IP: contesting %d, MACContested %t; want 1, false", s.Contesting(), s.MACContested())
	}
	mac := agedLease("10.244.8.0/24", "192.0.2.18", "0e:00:00:00:00:01", 20) // this node's MAC
	s.Put(mac, &r)
	if !s.MACContested() {
		t.Fatal("an older lease with the own VTEP MAC: not MACContested")
	}
	if _, ok := maps.Collect(s.State().Peers.All())[mac.Key()]; ok {
		t.Fatalf("the older lease with the own VTEP MAC is programmed: %s", render(s.State()))
	}
	// The node takes another MAC: the older lease is programmed, nothing contests the MAC.
	own.Attrs.BackendData = json.RawMessage(vxData("0e:00:00:00:00:99"))
	r = Result{}
	s.SetOwn(own, &r)
	if s.MACContested() || s.Contesting() != 1 {
		t.Errorf("after a new own MAC: MACContested %t, contesting %d; want false, 1", s.MACContested(), s.Contesting())
	}
	if _, ok := maps.Collect(s.State().Peers.All())[mac.Key()]; !ok {
		t.Errorf("after a new own MAC, the older lease is not programmed: %s", render(s.State()))
	}
	// Back to the contested MAC, then the older lease goes.
	own.Attrs.BackendData = json.RawMessage(vxData("0e:00:00:00:00:01"))
	s.SetOwn(own, &r)
	if !s.MACContested() {
		t.Error("the own MAC claimed again by the older lease: not MACContested")
	}
	s.Remove(mac.Key(), &r)
	if s.MACContested() {
		t.Error("MACContested after the older lease went")
	}
}

// TestSetIncremental is a differential test: any sequence of puts, removes and own-lease
// changes, applied one at a time, leaves the Set with the State that a Set built from scratch
// from the final leases has, and the Changes it reported, applied in order to the first
// State, lead exactly to it.
func TestSetIncremental(t *testing.T) {
	for _, conf := range []string{
		`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`,
		`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","DirectRouting":true}}`,
		`{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`,
	} {
		b := newBackend(t, conf)
		for seed := range uint64(50) {
			rng := rand.New(rand.NewPCG(seed, 7))
			// A small space, so that claims clash often.
			gen := func() subnet.Lease {
				sn := fmt.Sprintf("10.244.%d.0/24", rng.IntN(12))
				if rng.IntN(20) == 0 {
					sn = "10.245.0.0/24"
				}
				ip := fmt.Sprintf("192.0.2.%d", 10+rng.IntN(8))
				if rng.IntN(4) == 0 {
					ip = fmt.Sprintf("198.51.100.%d", 10+rng.IntN(8))
				}
				l := lease(sn, ip, vxData(fmt.Sprintf("0e:00:00:00:00:%02x", 1+rng.IntN(8))))
				if rng.IntN(3) == 0 {
					l.IPv6Subnet = netip.MustParsePrefix(fmt.Sprintf("fd00:%d::/64", rng.IntN(2)))
				}
				if b.Type() == subnet.BackendHostGW {
					l.Attrs.BackendType, l.Attrs.BackendData = subnet.BackendHostGW, nil
				}
				if rng.IntN(15) == 0 {
					l.Attrs.BackendData = json.RawMessage(`{"VNI":1}`)
				}
				if rng.IntN(4) != 0 { // ages, with ties and unknowns, so that claims are settled by them
					l.Created = int64(rng.IntN(30))
				}
				return l
			}
			own := gen()
			s := NewSet(b, own, false)
			leases := map[string]subnet.Lease{}
			programmed := map[string]Peer{}
			for range 200 {
				var r Result
				switch k := rng.IntN(10); {
				case k < 6:
					l := gen()
					_, on := programmed[l.Key()]
					skip := b.translate(l.Key(), l).skip
					keep := on && skip != nil && unreadable(skip.Code)
					s.Put(l, &r)
					if l.Key() != own.Key() && !keep { // an unreadable value keeps the programmed one
						leases[l.Key()] = l
					}
				case k < 9 && len(leases) > 0:
					key := slices.Sorted(maps.Keys(leases))[rng.IntN(len(leases))]
					s.Remove(key, &r)
					delete(leases, key)
				default:
					own = gen()
					delete(leases, own.Key())
					s.SetOwn(own, &r)
				}
				for _, c := range r.Changes {
					if programmed[c.Key] != c.Old {
						t.Fatalf("seed %d: change of %s says it had %+v, it had %+v", seed, c.Key, c.Old, programmed[c.Key])
					}
					if c.New.IsValid() {
						programmed[c.Key] = c.New
					} else {
						delete(programmed, c.Key)
					}
				}
				want, _ := Desired(b, own, slices.Collect(maps.Values(leases)), false)
				if got := render(s.State()); got != render(want) {
					t.Fatalf("seed %d: incremental state:\n%s\nfrom scratch:\n%s", seed, got, render(want))
				}
				if got := s.State(); got.Own != want.Own || got.Sibling != want.Sibling {
					// SetOwn moves them; the daemon's next Apply is full when they moved.
					t.Fatalf("seed %d: own subnet %s, sibling %s; from scratch %s, %s", seed, got.Own, got.Sibling, want.Own, want.Sibling)
				}
				if state := maps.Collect(s.State().Peers.All()); !maps.Equal(programmed, state) || s.State().Peers.Len() != len(state) {
					t.Fatalf("seed %d: the changes lead to\n%v\nthe state is\n%v (Len %d)", seed, programmed, state, s.State().Peers.Len())
				}
				contesting, macs := 0, 0
				for _, p := range s.Peers() {
					if p.Skipped != nil && p.Skipped.Contests {
						contesting++
						if p.Skipped.Code == SkipDuplicateMAC {
							macs++
						}
					}
				}
				if s.Contesting() != contesting || s.MACContested() != (macs > 0) {
					t.Fatalf("seed %d: Contesting() %d, MACContested() %t; the peers say %d, %d of them for the MAC",
						seed, s.Contesting(), s.MACContested(), contesting, macs)
				}
			}
		}
	}
}

// TestSetKeepsLastGood: a programmed peer whose new value cannot be read (flanneld.exe's lease
// without a VtepMAC while it starts) stays programmed as it was, the skip said once; a peer
// never programmed is skipped as before; a good value then changes it as usual.
func TestSetKeepsLastGood(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	s := NewSet(b, lease("10.244.1.0/24", "192.0.2.10", vxData("0e:00:00:00:00:01")), false)
	var r Result
	s.Put(lease("10.244.2.0/24", "192.0.2.11", vxData("0e:00:00:00:00:02")), &r)
	before := render(s.State())
	for i, bad := range []subnet.Lease{
		lease("10.244.2.0/24", "192.0.2.11", `{"VNI":1,"VtepMAC":""}`),
		lease("10.244.2.0/24", "192.0.2.11", `{"VNI":1,"VtepMAC":""}`),
		lease("10.244.2.0/24", "0.0.0.0", vxData("0e:00:00:00:00:02")),
	} {
		var r Result
		s.Put(bad, &r)
		if len(r.Changes) != 0 || render(s.State()) != before {
			t.Fatalf("bad value %d: changes %+v, state\n%s\nwant\n%s", i, r.Changes, render(s.State()), before)
		}
		wantSkips := 1
		if i == 1 { // the same skip again is not said again
			wantSkips = 0
		}
		if len(r.Skipped) != wantSkips || wantSkips == 1 && !strings.Contains(r.Skipped[0].Reason, "last good value stays programmed") {
			t.Fatalf("bad value %d: skipped %+v, want %d saying the last good value stays", i, r.Skipped, wantSkips)
		}
	}
	s.Put(lease("10.244.2.0/24", "192.0.2.11", vxData("0e:00:00:00:00:22")), &r)
	if got := render(s.State()); !strings.Contains(got, "mac 0e:00:00:00:00:22") {
		t.Fatalf("a good value after the bad ones: state\n%s", got)
	}
	r = Result{}
	s.Put(lease("10.244.3.0/24", "192.0.2.12", `{"VNI":1,"VtepMAC":""}`), &r)
	if len(r.Skipped) != 1 || r.Skipped[0].Code != SkipBadData || strings.Contains(render(s.State()), "10.244.3.0") {
		t.Fatalf("a new peer with no VtepMAC: skipped %+v, state\n%s", r.Skipped, render(s.State()))
	}
}

// TestSnapshot: a Snapshot shows the peers as they were when taken, while the Set goes on
// changing (a value replaced, a lease removed, a lease newly skipped, a skipped lease put
// again), and can be read on another goroutine meanwhile (go test -race holds that part).
func TestSnapshot(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	s := NewSet(b, lease("10.244.1.0/24", "192.0.2.10", vxData("0e:00:00:00:00:01")), false)
	var r Result
	s.Put(lease("10.244.2.0/24", "192.0.2.11", vxData("0e:00:00:00:00:02")), &r)
	s.Put(lease("10.244.3.0/24", "192.0.2.12", vxData("0e:00:00:00:00:03")), &r)
	s.Put(lease("10.244.4.0/24", "192.0.2.13", `{"VNI":1,"VtepMAC":""}`), &r) // skipped
	show := func(peers []PeerInfo) string {
		var b strings.Builder
		for _, p := range peers {
			fmt.Fprintf(&b, "%s %s %s %s", p.Key, p.PublicIP, p.VTEPMAC, p.BackendType)
			if p.Skipped != nil {
				fmt.Fprintf(&b, " skipped %s", p.Skipped.Code)
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	snap := s.Snapshot()
	want := show(s.Peers())
	if got := show(snap.Peers()); got != want || snap.Len() != 3 {
		t.Fatalf("snapshot of %d:\n%s\nwant the Set's\n%s", snap.Len(), got, want)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			n := 0
			for range snap.All() {
				n++
			}
			if n != 3 {
				t.Errorf("a reader saw %d peers in the snapshot, want 3", n)
				return
			}
		}
	}()
	for i := range 50 {
		s.Put(lease("10.244.4.0/24", "192.0.2.13", `{"VNI":1,"VtepMAC":""}`), &r) // the skipped one put again
		s.Put(lease("10.244.2.0/24", fmt.Sprintf("192.0.2.%d", 100+i), vxData("0e:00:00:00:00:22")), &r)
		s.Remove("10.244.3.0-24", &r)
		s.Put(lease("10.244.3.0/24", "192.0.2.12", vxData("0e:00:00:00:00:03")), &r)
		s.Put(lease("10.244.5.0/24", "192.0.2.12", vxData("0e:00:00:00:00:05")), &r) // skipped: 10.244.3.0's public IP
		s.Remove("10.244.5.0-24", &r)
	}
	<-done
	s.Remove("10.244.3.0-24", &r)
	s.Put(lease("10.244.6.0/24", "192.0.2.16", vxData("0e:00:00:00:00:06")), &r)
	if show(s.Peers()) == want {
		t.Fatal("the Set did not change")
	}
	if got := show(snap.Peers()); got != want {
		t.Errorf("snapshot after the Set changed:\n%s\nwant what it was\n%s", got, want)
	}
}

func TestDataRoundTrip(t *testing.T) {
	d := VXLANData{VNI: 4096, VtepMAC: MAC{0xc6, 0xd2, 0x32, 0x6f, 0x8f, 0x44}}
	if got := string(d.Encode()); got != `{"VNI":4096,"VtepMAC":"c6:d2:32:6f:8f:44"}` {
		t.Errorf("encode %s", got)
	}
	back, err := DecodeVXLANData(d.Encode())
	if err != nil || back != d {
		t.Errorf("decode %+v %v", back, err)
	}
	// HNS writes MACs with dashes; flannel's Windows nodes publish them in colon form, but
	// accept both.
	if d, err := DecodeVXLANData(json.RawMessage(`{"VNI":4096,"VtepMAC":"00-15-5D-01-02-03"}`)); err != nil || d.VtepMAC.String() != "00:15:5d:01:02:03" {
		t.Errorf("dash form: %+v %v", d, err)
	}
}

func FuzzDecodeVXLANData(f *testing.F) {
	f.Add([]byte(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`))
	f.Add([]byte(`{"VNI":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeVXLANData(b)
		if err != nil {
			return
		}
		if !d.VtepMAC.IsUsable() {
			t.Fatalf("accepted unusable MAC %s", d.VtepMAC)
		}
		back, err := DecodeVXLANData(d.Encode())
		if err != nil || back != d {
			t.Fatalf("round trip %+v -> %+v %v", d, back, err)
		}
	})
}

// FuzzScanVXLANData: wherever scanVXLANData reads backend data, encoding/json reads it too,
// the same.
func FuzzScanVXLANData(f *testing.F) {
	for _, s := range []string{
		`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`, `{"VNI":4294967295,"VtepMAC":"x"}`, `{"VNI":4294967296,"VtepMAC":"x"}`,
		`{"VNI":01,"VtepMAC":"x"}`, `{"VNI":1e3,"VtepMAC":"x"}`, `{"VNI":1,"VtepMAC":"a\"b"}`, `{"VtepMAC":"x","VNI":1}`,
		`{"VNI":1,"VtepMAC":"x"} `, `{"vni":1,"VtepMAC":"x"}`, "{\"VNI\":1,\"VtepMAC\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast wireVXLANData
		if !scanVXLANData(raw, &fast) {
			return
		}
		var slow wireVXLANData
		if err := json.Unmarshal(raw, &slow); err != nil || slow != fast {
			t.Fatalf("%q: scanVXLANData read %+v, encoding/json %+v (%v)", raw, fast, slow, err)
		}
	})
}

// TestScanVXLANData: the backend data nodes write is read by scanVXLANData; what it leaves
// to encoding/json (other key orders and cases, whitespace, a VNI too large) is read as
// before.
func TestScanVXLANData(t *testing.T) {
	mac := MAC{0xc6, 0xd2, 0x32, 0x6f, 0x8f, 0x44}
	for _, d := range []VXLANData{{VNI: 1, VtepMAC: mac}, {VNI: 4096, VtepMAC: mac}, {VNI: 1<<32 - 1, VtepMAC: mac}} {
		var w wireVXLANData
		if raw := d.Encode(); !scanVXLANData(raw, &w) || w != (wireVXLANData{VNI: d.VNI, VtepMAC: mac.String()}) {
			t.Errorf("%s: scanVXLANData read %+v", raw, w)
		}
	}
	for _, tc := range []struct {
		raw  string
		want VXLANData
		err  bool
	}{
		{raw: `{"VtepMAC":"c6:d2:32:6f:8f:44","VNI":7}`, want: VXLANData{VNI: 7, VtepMAC: mac}},
		{raw: `{ "vni": 7, "vtepmac": "c6:d2:32:6f:8f:44" }`, want: VXLANData{VNI: 7, VtepMAC: mac}},
		{raw: `{"VNI":4294967296,"VtepMAC":"c6:d2:32:6f:8f:44"}`, err: true},
		{raw: `{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"`, err: true},
	} {
		var w wireVXLANData
		if scanVXLANData([]byte(tc.raw), &w) {
			t.Errorf("%s: read by scanVXLANData, want it left to encoding/json", tc.raw)
		}
		got, err := DecodeVXLANData(json.RawMessage(tc.raw))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v, error %t", tc.raw, got, err, tc.want, tc.err)
		}
	}
}

// BenchmarkDecodeVXLANData is one peer's backend data, read.
func BenchmarkDecodeVXLANData(b *testing.B) {
	raw := VXLANData{VNI: 1, VtepMAC: MAC{2, 0x57, 0x46, 0, 3, 0x1b}}.Encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeVXLANData(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMTU: Backend.MTU is the underlay MTU, as flanneld reads it; the overlay gets 50 less.
func TestMTU(t *testing.T) {
	if got := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`).MTU(); got != 1450 {
		t.Errorf("interface MTU 1500: overlay MTU %d, want 1450", got)
	}
	if got := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","MTU":1400}}`).MTU(); got != 1350 {
		t.Errorf("Backend.MTU 1400: overlay MTU %d, want 1350 (flanneld's)", got)
	}
	if got := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`).MTU(); got != 1500 {
		t.Errorf("host-gw: MTU %d, want the interface's 1500", got)
	}
}

// peerLeases makes n vxlan leases of distinct subnets, public IPs and MACs in 10.0.0.0/8.
func peerLeases(n int) []subnet.Lease {
	out := make([]subnet.Lease, n)
	for i := range n {
		sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
		ip := netip.AddrFrom4([4]byte{172, 16 + byte(i>>16), byte(i >> 8), byte(i)})
		mac := MAC{0x0e, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)}
		out[i] = subnet.Lease{Subnet: sn, Attrs: subnet.LeaseAttrs{PublicIP: ip, BackendType: subnet.BackendVXLAN,
			BackendData: VXLANData{VNI: 1, VtepMAC: mac}.Encode()}}
	}
	return out
}

const benchConf = `{"Network":"10.0.0.0/8","SubnetMin":"10.0.0.0","Backend":{"Type":"vxlan"}}`

// BenchmarkDesired20k: the whole State of 20k peers from scratch (start-up).
func BenchmarkDesired20k(b *testing.B) {
	be := newBackend(b, benchConf)
	leases := peerLeases(20001)
	b.ReportAllocs()
	for b.Loop() {
		Desired(be, leases[0], leases, false)
	}
}

// BenchmarkPut20k: one lease changing among 20k (an event).
func BenchmarkPut20k(b *testing.B) {
	be := newBackend(b, benchConf)
	leases := peerLeases(20001)
	s := NewSet(be, leases[0], false)
	var r Result
	for _, l := range leases {
		s.Put(l, &r)
	}
	moved := leases[100]
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		moved.Attrs.BackendData = VXLANData{VNI: 1, VtepMAC: MAC{0x0e, 1, 0, 0, byte(i >> 8), byte(i)}}.Encode()
		r = Result{}
		s.Put(moved, &r)
	}
}

// BenchmarkSetHeap20k reports the live heap a Set holds per peer at 20k peers.
func BenchmarkSetHeap20k(b *testing.B) {
	be := newBackend(b, benchConf)
	for b.Loop() {
		leases := peerLeases(20001)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := NewSet(be, leases[0], false)
		var r Result
		for _, l := range leases {
			s.Put(l, &r)
		}
		r = Result{}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(s.Len()), "heapB/peer")
		runtime.KeepAlive(s)
		runtime.KeepAlive(leases)
	}
}

// TestResultFull: a Result for a full Apply records no changes, still the skips, and the
// State is what it is with changes recorded.
func TestResultFull(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := lease("10.244.1.0/24", "192.0.2.10", vxData("0e:00:00:00:00:01"))
	full, counted := NewSet(b, own, false), NewSet(b, own, false)
	r, rc := Result{Full: true}, Result{}
	for _, l := range []subnet.Lease{
		lease("10.244.2.0/24", "192.0.2.11", vxData("0e:00:00:00:00:02")),
		lease("10.244.3.0/24", "192.0.2.12", `{"VNI":1,"VtepMAC":""}`), // skipped
	} {
		full.Put(l, &r)
		counted.Put(l, &rc)
	}
	full.Remove("10.244.2.0-24", &r)
	counted.Remove("10.244.2.0-24", &rc)
	if len(r.Changes) != 0 || len(rc.Changes) != 1 {
		t.Errorf("changes: %+v with Full, %+v without: want none and one", r.Changes, rc.Changes)
	}
	if len(r.Skipped) != 1 || len(rc.Skipped) != 1 {
		t.Errorf("skipped: %+v with Full, %+v without: want one each", r.Skipped, rc.Skipped)
	}
	if got, want := render(full.State()), render(counted.State()); got != want {
		t.Errorf("state with Full\n%s\nwant\n%s", got, want)
	}
}

// TestPeersBackendType: /status shows every lease's backend type as published, though a Set
// keeps it only of the leases skipped for it.
func TestPeersBackendType(t *testing.T) {
	b := newBackend(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	s := NewSet(b, lease("10.244.1.0/24", "192.0.2.10", vxData("0e:00:00:00:00:01")), false)
	hostgw := lease("10.244.9.0/24", "192.0.2.19", `null`)
	hostgw.Attrs.BackendType = "host-gw"
	none := lease("10.244.8.0/24", "192.0.2.18", `null`)
	none.Attrs.BackendType = ""
	var r Result
	for _, l := range []subnet.Lease{lease("10.244.2.0/24", "192.0.2.12", vxData("0e:00:00:00:00:02")), hostgw, none,
		lease("10.244.3.0/24", "192.0.2.12", vxData("0e:00:00:00:00:03"))} {
		s.Put(l, &r)
	}
	got := map[string]string{}
	for _, p := range s.Peers() {
		got[p.Key] = p.BackendType
	}
	want := map[string]string{"10.244.2.0-24": "vxlan", "10.244.9.0-24": "host-gw", "10.244.8.0-24": "", "10.244.3.0-24": "vxlan"}
	if !maps.Equal(got, want) {
		t.Errorf("backend types %v, want %v", got, want)
	}
}
