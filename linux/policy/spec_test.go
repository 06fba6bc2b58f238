package policy

import (
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/netpol"
)

// subnets are the test node's pod subnets.
var subnets = []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}

// TestBuild: the table Build makes of a node's rules: the known pods in the pods sets, an
// isolated direction's chain in its map for each of the pod's addresses, a rule per family and
// port ending "return", a drop last; a direction that is not isolated has no chain. Peers live
// in sets only: rules whose peers differ make the same chains.
func TestBuild(t *testing.T) {
	a := netip.MustParseAddr
	web := []netip.Addr{a("10.244.1.2"), a("fd00:10:244:1::2")}
	rules := func(peers ...netpol.Range) netpol.Rules {
		return netpol.Rules{Pods: map[string]netpol.PodRules{
			"prod/web": {IPs: web, Ingress: &netpol.Direction{Allow: []netpol.Rule{{Peers: peers,
				Ports: []netpol.Port{{Protocol: netpol.TCP, From: 8080, To: 8080}, {Protocol: netpol.UDP, From: 53, To: 60}}}}}},
			"prod/db": {IPs: []netip.Addr{a("10.244.1.3")}, Egress: &netpol.Direction{}},
			"dev/api": {IPs: []netip.Addr{a("10.244.1.4")}},
		}}
	}
	one := rules(netpol.Range{From: a("10.244.2.5"), To: a("10.244.2.5")}, netpol.Range{From: a("fd00:10:244:2::5"), To: a("fd00:10:244:2::5")})
	tb := Build(one, subnets)

	if got := tb.Sets["pods4"].Elems; len(got) != 3 || got[0].From != a("10.244.1.2") || got[2].From != a("10.244.1.4") {
		t.Errorf("pods4: %v, want the three pods' IPv4 addresses in order", got)
	}
	in, out := "in-"+shortID("prod/web"), "out-"+shortID("prod/db")
	if tb.Maps["ingress4"].Elems[a("10.244.1.2")] != in || tb.Maps["ingress6"].Elems[a("fd00:10:244:1::2")] != in {
		t.Errorf("ingress maps: %v %v, want web's addresses to jump to %s", tb.Maps["ingress4"], tb.Maps["ingress6"], in)
	}
	if len(tb.Maps["egress4"].Elems) != 1 || tb.Maps["egress4"].Elems[a("10.244.1.3")] != out || len(tb.Chains) != 2 {
		t.Errorf("egress: map %v, chains %v; want db's chain alone beside web's", tb.Maps["egress4"], slices.Collect(maps.Keys(tb.Chains)))
	}
	var got []string
	for _, r := range tb.Chains[in] {
		got = append(got, r.String())
	}
	want := []string{
		"ip saddr @" + in + "-0-4 meta l4proto tcp th dport 8080 return",
		"ip saddr @" + in + "-0-4 meta l4proto udp th dport 53-60 return",
		"ip6 saddr @" + in + "-0-6 meta l4proto tcp th dport 8080 return",
		"ip6 saddr @" + in + "-0-6 meta l4proto udp th dport 53-60 return",
		"counter drop",
	}
	if !slices.Equal(got, want) {
		t.Errorf("web's ingress chain:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := tb.Chains[out]; len(r) != 1 || r[0].Verdict != "drop" {
		t.Errorf("db's egress chain (isolated, nothing allowed): %v, want a drop alone", r)
	}
	if s := tb.Sets[in+"-0-6"]; !s.V6 || !s.Interval || len(s.Elems) != 1 || s.Elems[0].From != a("fd00:10:244:2::5") {
		t.Errorf("web's IPv6 peers: %+v", s)
	}

	two := Build(rules(netpol.Range{From: a("10.244.3.0"), To: a("10.244.3.255")}), subnets)
	if !reflect.DeepEqual(two.Chains, tb.Chains) || reflect.DeepEqual(two.Sets, tb.Sets) {
		t.Error("other peers changed the chains, or did not change the sets")
	}

	base := tb.BaseRules()
	var bs []string
	for _, r := range base {
		bs = append(bs, r.String())
	}
	wantBase := []string{
		"ct state established,related accept",
		"ip daddr 10.244.1.0/24 ip daddr != @pods4 counter drop",
		"ip saddr 10.244.1.0/24 ip saddr != @pods4 counter drop",
		"ip daddr vmap @ingress4", "ip saddr vmap @egress4",
		"ip6 daddr fd00:10:244:1::/64 ip6 daddr != @pods6 counter drop",
		"ip6 saddr fd00:10:244:1::/64 ip6 saddr != @pods6 counter drop",
		"ip6 daddr vmap @ingress6", "ip6 saddr vmap @egress6",
	}
	if !slices.Equal(bs, wantBase) {
		t.Errorf("forward chain:\n%s\nwant\n%s", strings.Join(bs, "\n"), strings.Join(wantBase, "\n"))
	}
}
