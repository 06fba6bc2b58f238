package linux

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
)

// TestRouteMessageRoundTrip: what routeSet writes, parseRoute reads back as the same route.
func TestRouteMessageRoundTrip(t *testing.T) {
	names := map[int]string{7: "flannel.1"}
	for _, r := range []Route{
		{Dst: pfx("10.244.2.0/24"), Gw: ip("10.244.2.0"), Dev: "flannel.1", Onlink: true},
		{Dst: pfx("10.244.3.0/24"), NH: nexthopID(pfx("10.244.3.0/24"), pfx("10.244.0.0/16"))},
		{Dst: pfx("fd00:10:244:2::/64"), Gw: ip("fd00:10:244:2::"), Dev: "flannel.1", Onlink: true},
	} {
		m := routeSet(r, 7)
		k, ok := parseRoute(m.body, names)
		if !ok {
			t.Fatalf("%v: not parsed", r)
		}
		if k.Route != r || k.Metric != 0 || k.ProtoKernel {
			t.Errorf("wrote %+v, read back %+v", r, k)
		}
	}
}

// TestNeighMessageRoundTrip: what neighSet and fdbSet write, parseNeigh reads back.
func TestNeighMessageRoundTrip(t *testing.T) {
	m := mac("0a:58:0a:f4:02:00")
	n, ok := parseNeigh(neighSet(Neighbor{IP: ip("10.244.2.0"), MAC: m}, 7).body)
	want := dumpedNeigh{family: unix.AF_INET, link: 7, state: unix.NUD_PERMANENT, ip: ip("10.244.2.0"), mac: m}
	if !ok || n != want {
		t.Errorf("neighbour: read back %+v (%v), want %+v", n, ok, want)
	}
	f, ok := parseNeigh(fdbSet(FDBEntry{MAC: m, Dst: ip("fd77::12")}, 9).body)
	want = dumpedNeigh{family: unix.AF_BRIDGE, link: 9, state: unix.NUD_PERMANENT, ip: ip("fd77::12"), mac: m}
	if !ok || f != want {
		t.Errorf("FDB entry: read back %+v (%v), want %+v", f, ok, want)
	}
	if _, ok := parseNeigh(make([]byte, unix.SizeofNdMsg-1)); ok {
		t.Error("a body shorter than ndmsg was read")
	}
}

func TestNexthopID(t *testing.T) {
	net16 := pfx("10.244.0.0/16")
	for _, c := range []struct {
		sn   string
		net  string
		want uint32
	}{
		{"10.244.0.0/24", "10.244.0.0/16", nexthopTag},
		{"10.244.3.0/24", "10.244.0.0/16", nexthopTag | 3},
		{"10.255.255.252/30", "10.0.0.0/8", nexthopTag | 0x3fffff},
		{"10.0.0.0/30", "0.0.0.0/0", 0}, // more than 2^24 subnets
		{"fd00::/64", "fd00::/48", 0},   // IPv6: none
	} {
		if got := nexthopID(pfx(c.sn), pfx(c.net)); got != c.want {
			t.Errorf("nexthopID(%s, %s) = %#x, want %#x", c.sn, c.net, got, c.want)
		}
	}
	if !ownsNexthop(nexthopID(pfx("10.244.9.0/24"), net16)) || ownsNexthop(42) {
		t.Error("ownsNexthop does not tell weft's IDs from others'")
	}
}

// FuzzParseRoute: the parsers of the kernel's answers take any bytes without panicking.
func FuzzParseRoute(f *testing.F) {
	f.Add(routeSet(Route{Dst: pfx("10.244.2.0/24"), Gw: ip("10.244.2.0"), Dev: "x", Onlink: true}, 3).body)
	f.Add(routeSet(Route{Dst: pfx("10.244.3.0/24"), NH: nexthopTag | 3}, 0).body)
	f.Add(nexthopSet(Nexthop{ID: 9, Gw: ip("10.244.2.0"), Dev: "x", Onlink: true}, 3).body)
	f.Add([]byte{unix.AF_INET, 24, 0, 0, unix.RT_TABLE_MAIN, 0, 0, unix.RTN_UNICAST, 0, 0, 0, 0, 4, 0})
	f.Add(neighSet(Neighbor{IP: ip("10.244.2.0"), MAC: backend.MAC{2}}, 3).body)
	f.Add(fdbSet(FDBEntry{MAC: backend.MAC{2}, Dst: ip("192.0.2.12")}, 3).body)
	f.Fuzz(func(t *testing.T, b []byte) {
		names := map[int]string{3: "x"}
		if k, ok := parseRoute(b, names); ok && k.Dst.IsValid() && k.Dst.Bits() > k.Dst.Addr().BitLen() {
			t.Fatalf("route with an impossible prefix %v", k.Dst)
		}
		parseNexthop(b, names)
		parseNeigh(b)
	})
}
