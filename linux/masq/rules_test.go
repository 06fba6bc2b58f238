package masq

import (
	"net/netip"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix {
	if s == "" {
		return netip.Prefix{}
	}
	return netip.MustParsePrefix(s)
}

func ruleStrings(rs []ruleSpec) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

func TestFamilyRulesIPv4(t *testing.T) {
	got := ruleStrings(familyRules(pfx("10.244.0.0/16"), pfx("10.244.1.0/24"), actMasquerade))
	want := []string{
		`meta mark & 0x4000 == 0x4000 return comment "` + commentKubeProxy + `"`,
		`ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return comment "` + commentWithin + `"`,
		`ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random comment "` + commentToOutside + `"`,
		`ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return comment "` + commentToOwnPods + `"`,
		`ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random comment "` + commentToOtherPods + `"`,
	}
	assertLines(t, got, want)
}

func TestFamilyRulesIPv6(t *testing.T) {
	got := ruleStrings(familyRules(pfx("fd00:10:244::/56"), pfx("fd00:10:244:1::/64"), actMasquerade))
	want := []string{
		`meta mark & 0x4000 == 0x4000 return comment "` + commentKubeProxy + `"`,
		`ip6 saddr fd00:10:244::/56 ip6 daddr fd00:10:244::/56 return comment "` + commentWithin + `"`,
		`ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade fully-random comment "` + commentToOutside + `"`,
		`ip6 saddr != fd00:10:244::/56 ip6 daddr fd00:10:244:1::/64 return comment "` + commentToOwnPods + `"`,
		`ip6 saddr != fd00:10:244::/56 ip6 daddr fd00:10:244::/56 masquerade fully-random comment "` + commentToOtherPods + `"`,
	}
	assertLines(t, got, want)
}

func assertLines(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d rules, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rule %d:\n got %s\nwant %s", i+1, got[i], want[i])
		}
	}
}

// Comments are what a human reading `nft list ruleset` relies on: they must
// name weft and fit nft's comment limit (128 bytes with the NUL).
func TestCommentsNameWeft(t *testing.T) {
	for _, r := range familyRules(pfx("10.244.0.0/16"), pfx("10.244.1.0/24"), actMasquerade) {
		if !strings.HasPrefix(r.comment, "weft") {
			t.Errorf("comment %q does not name weft", r.comment)
		}
		if len(r.comment) >= 128 {
			t.Errorf("comment %q is %d bytes, nft keeps at most 127", r.comment, len(r.comment))
		}
	}
}

func TestBuildPlan(t *testing.T) {
	tests := []struct {
		name                 string
		r                    Rules
		wantErr              string // substring; "" = valid
		wantV4, wantV6       bool
		wantSubnet, wantNet6 string
	}{
		{name: "both disabled", r: Rules{}},
		{name: "ipv4", r: Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.1.0/24")}, wantV4: true, wantSubnet: "10.244.1.0/24"},
		{
			name:   "subnet given as its gateway address is masked",
			r:      Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.1.1/24")},
			wantV4: true, wantSubnet: "10.244.1.0/24",
		},
		{
			name:   "dual stack",
			r:      Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.1.0/24"), IPv6Network: pfx("fd00:10:244::1/56"), IPv6Subnet: pfx("fd00:10:244:1::/64")},
			wantV4: true, wantV6: true, wantSubnet: "10.244.1.0/24", wantNet6: "fd00:10:244::/56",
		},
		{
			name:   "ipv6 only",
			r:      Rules{IPv6Network: pfx("fd00:10:244::/56"), IPv6Subnet: pfx("fd00:10:244:1::/64")},
			wantV6: true, wantNet6: "fd00:10:244::/56",
		},
		{name: "subnet without network", r: Rules{Subnet: pfx("10.244.1.0/24")}, wantErr: "Subnet 10.244.1.0/24 is set but Network is not"},
		{name: "network without subnet", r: Rules{Network: pfx("10.244.0.0/16")}, wantErr: "Network 10.244.0.0/16 is set but Subnet is not"},
		{name: "subnet outside network", r: Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.245.1.0/24")}, wantErr: "Subnet 10.245.1.0/24 is not inside Network"},
		{name: "subnet larger than network", r: Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.0.0.0/8")}, wantErr: "is not inside Network"},
		{name: "ipv6 in the ipv4 slot", r: Rules{Network: pfx("fd00::/56"), Subnet: pfx("fd00::/64")}, wantErr: "Network fd00::/56 is not an IPv4 prefix"},
		{name: "ipv4 subnet of wrong family", r: Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("fd00::/64")}, wantErr: "Subnet fd00::/64 is not an IPv4 prefix"},
		{name: "ipv4 in the ipv6 slot", r: Rules{IPv6Network: pfx("10.244.0.0/16"), IPv6Subnet: pfx("10.244.1.0/24")}, wantErr: "IPv6Network 10.244.0.0/16 is not an IPv6 prefix"},
		{name: "ipv4-mapped ipv6 network", r: Rules{IPv6Network: pfx("::ffff:10.244.0.0/112"), IPv6Subnet: pfx("::ffff:10.244.1.0/120")}, wantErr: "is not an IPv6 prefix"},
		{name: "network covering everything", r: Rules{Network: pfx("0.0.0.0/0"), Subnet: pfx("10.244.1.0/24")}, wantErr: "covers every address"},
		{name: "ipv6 subnet outside", r: Rules{IPv6Network: pfx("fd00:10:244::/56"), IPv6Subnet: pfx("fd00:10:245:1::/64")}, wantErr: "IPv6Subnet fd00:10:245:1::/64 is not inside IPv6Network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := buildPlan(tt.r)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if (p.v4.rules != nil) != tt.wantV4 || (p.v6.rules != nil) != tt.wantV6 {
				t.Fatalf("families enabled v4=%v v6=%v, want v4=%v v6=%v", p.v4.rules != nil, p.v6.rules != nil, tt.wantV4, tt.wantV6)
			}
			if tt.wantV4 && p.v4.subnet.String() != tt.wantSubnet {
				t.Errorf("subnet %s, want %s", p.v4.subnet, tt.wantSubnet)
			}
			if tt.wantV6 && p.v6.network.String() != tt.wantNet6 {
				t.Errorf("ipv6 network %s, want %s", p.v6.network, tt.wantNet6)
			}
		})
	}
}

func TestRuleSpecEqual(t *testing.T) {
	a := familyRules(pfx("10.244.0.0/16"), pfx("10.244.1.0/24"), actMasquerade)
	b := familyRules(pfx("10.244.0.0/16"), pfx("10.244.2.0/24"), actMasquerade)
	for i := range a {
		if !a[i].equal(a[i]) {
			t.Errorf("rule %d not equal to itself", i+1)
		}
	}
	if a[3].equal(b[3]) {
		t.Error("rules with different subnets compare equal")
	}
	c := a[2]
	c.comment = "edited by hand"
	if c.equal(a[2]) {
		t.Error("rules with different comments compare equal")
	}
}

func TestRulesNotFullyRandom(t *testing.T) {
	p, err := buildPlan(Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.1.0/24"), NotFullyRandom: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range p.v4.rules {
		switch r.action {
		case actMasqueradePlain:
			n++
			if s := r.String(); strings.Contains(s, "fully-random") {
				t.Errorf("%s: rendered fully-random", s)
			}
		case actMasquerade:
			t.Errorf("%s: fully-random with NotFullyRandom", r)
		}
	}
	if n != 2 {
		t.Errorf("%d masquerade rules, want 2", n)
	}
}

func TestForwardRules(t *testing.T) {
	assertLines(t, ruleStrings(forwardRules(pfx("10.244.0.0/16"))), []string{
		`ip saddr 10.244.0.0/16 accept comment "` + commentFromPods + `"`,
		`ip daddr 10.244.0.0/16 accept comment "` + commentToPods + `"`,
	})
}
