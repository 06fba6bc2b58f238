package subnet

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func mustConfig(t testing.TB, s string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAllocatePrefersPrevious(t *testing.T) {
	r := mustConfig(t, `{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan"}}`).IPv4Range()
	p := netip.MustParsePrefix
	rnd := rand.New(rand.NewPCG(1, 2)).Uint64N
	if got, err := Allocate(r, nil, p("10.0.77.0/24"), rnd); err != nil || got != p("10.0.77.0/24") {
		t.Errorf("free previous: %s, %v", got, err)
	}
	got, err := Allocate(r, []netip.Prefix{p("10.0.77.0/24")}, p("10.0.77.0/24"), rnd)
	if err != nil || got == p("10.0.77.0/24") {
		t.Errorf("taken previous: %s, %v", got, err)
	}
	// A previous subnet outside the range (the first one, or another network) is not used.
	for _, prev := range []string{"10.0.0.0/24", "10.1.5.0/24", "10.0.5.0/25", "10.0.5.128/25"} {
		if got, err := Allocate(r, nil, p(prev), rnd); err != nil || got == p(prev) || !r.Contains(got) {
			t.Errorf("previous %s: got %s, %v", prev, got, err)
		}
	}
}

// TestAllocateAgainstBruteForce compares Allocate with the obvious slow algorithm: over many
// random taken sets, the pick is always free and in range, out of subnets exactly when the
// slow one finds nothing free, and every free subnet gets picked at some point.
func TestAllocateAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, conf := range []string{
		`{"Network":"10.0.0.0/24","SubnetLen":28,"Backend":{"Type":"vxlan"}}`,
		`{"Network":"10.0.0.0/22","SubnetLen":26,"SubnetMin":"10.0.0.64","SubnetMax":"10.0.2.0","Backend":{"Type":"vxlan"}}`,
		`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/60","Backend":{"Type":"vxlan"}}`,
	} {
		c := mustConfig(t, conf)
		r := c.IPv4Range()
		network := c.Network
		if c.EnableIPv6 {
			r, network = c.IPv6Range(), c.IPv6Network
		}
		all := make([]netip.Prefix, r.Size())
		for i := range all {
			all[i] = r.Nth(uint64(i))
		}
		picked := map[netip.Prefix]bool{}
		for round := 0; round < 400; round++ {
			var taken []netip.Prefix
			density := rng.Float64()
			for _, s := range all {
				if rng.Float64() < density {
					taken = append(taken, s)
				}
			}
			// Noise: overlapping bigger blocks, other families, prefixes outside the network.
			if rng.IntN(4) == 0 {
				taken = append(taken, netip.PrefixFrom(all[rng.IntN(len(all))].Addr(), r.Len-1).Masked())
			}
			taken = append(taken, netip.MustParsePrefix("192.168.0.0/24"), netip.MustParsePrefix("fe80::/64"), netip.Prefix{})
			free := map[netip.Prefix]bool{}
			for _, s := range all {
				overlapped := false
				for _, tk := range taken {
					if tk.IsValid() && tk.Overlaps(s) {
						overlapped = true
					}
				}
				if !overlapped {
					free[s] = true
				}
			}
			got, err := Allocate(r, taken, netip.Prefix{}, rng.Uint64N)
			switch {
			case len(free) == 0 && !errors.Is(err, ErrOutOfSubnets):
				t.Fatalf("%s: nothing free, got %s, %v", conf, got, err)
			case len(free) > 0 && err != nil:
				t.Fatalf("%s: %d free, got error %v", conf, len(free), err)
			case len(free) > 0 && !free[got]:
				t.Fatalf("%s: picked %s, which is not free (taken %v)", conf, got, taken)
			case len(free) > 0 && (!network.Contains(got.Addr()) || !r.Contains(got)):
				t.Fatalf("%s: picked %s outside the range", conf, got)
			}
			if err == nil {
				picked[got] = true
			}
		}
		if len(picked) < len(all)*3/4 {
			t.Errorf("%s: only %d of %d subnets were ever picked: not uniform", conf, len(picked), len(all))
		}
	}
}

func TestAllocateHugeIPv6Range(t *testing.T) {
	c := mustConfig(t, `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/8","IPv6SubnetLen":64,"Backend":{"Type":"vxlan"}}`)
	r := c.IPv6Range()
	if r.Size() != 1<<56-1 {
		t.Errorf("size %d, want saturated", r.Size())
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 100 {
		got, err := Allocate(r, []netip.Prefix{netip.MustParsePrefix("fd00::/9")}, netip.Prefix{}, rng.Uint64N)
		if err != nil || !c.IPv6Network.Contains(got.Addr()) || got.Bits() != 64 || netip.MustParsePrefix("fd00::/9").Overlaps(got) {
			t.Fatalf("got %s, %v", got, err)
		}
	}
}

func TestAllocateFullRange(t *testing.T) {
	r := mustConfig(t, `{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan"}}`).IPv4Range()
	_, err := Allocate(r, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}, netip.Prefix{}, rand.Uint64N)
	if !errors.Is(err, ErrOutOfSubnets) {
		t.Errorf("err = %v, want ErrOutOfSubnets", err)
	}
}

func BenchmarkAllocate(b *testing.B) {
	r := mustConfig(b, `{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}`).IPv4Range()
	taken := make([]netip.Prefix, 0, 5000)
	for i := range 5000 {
		taken = append(taken, r.Nth(uint64(i*7%int(r.Size()))))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Allocate(r, taken, netip.Prefix{}, rng.Uint64N); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRangeLeased: how many of a range's subnets taken prefixes cover: each once, whatever
// their length, family or overlap; nothing outside the range.
func TestRangeLeased(t *testing.T) {
	r := Range{Min: netip.MustParseAddr("10.1.1.0"), Max: netip.MustParseAddr("10.1.8.0"), Len: 24} // 8 subnets
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, tc := range []struct {
		taken []netip.Prefix
		want  uint64
	}{
		{nil, 0},
		{pfx("10.1.1.0/24", "10.1.8.0/24"), 2},
		{pfx("10.1.1.0/24", "10.1.1.0/24"), 1},              // the same twice
		{pfx("10.1.0.0/24", "10.1.9.0/24", "fd00::/64"), 0}, // outside, other family
		{pfx("10.1.4.0/22"), 4},                             // 10.1.4.0 to 10.1.7.0
		{pfx("10.1.4.0/22", "10.1.5.0/24", "10.1.6.128/25"), 4},
		{pfx("10.1.0.0/16"), 8},
	} {
		if got := r.Leased(tc.taken); got != tc.want {
			t.Errorf("Leased(%v) = %d, want %d", tc.taken, got, tc.want)
		}
	}
	if got := (Range{}).Leased(pfx("10.1.1.0/24")); got != 0 {
		t.Errorf("the empty range: Leased = %d", got)
	}
}

func TestLastAddr(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.0/24": "10.244.1.255",
		"10.244.0.0/16": "10.244.255.255",
		"10.0.0.0/9":    "10.127.255.255",
		"10.1.2.3/32":   "10.1.2.3",
		"fd00::/64":     "fd00::ffff:ffff:ffff:ffff",
		"fd00::/61":     "fd00:0:0:7:ffff:ffff:ffff:ffff",
	} {
		if got := LastAddr(netip.MustParsePrefix(in)); got != netip.MustParseAddr(want) {
			t.Errorf("LastAddr(%s) = %s; want %s", in, got, want)
		}
	}
}
