package subnet

import (
	"net/netip"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		key     string
		sn, sn6 netip.Prefix
	}{
		{"10.5.52.0-24", p("10.5.52.0/24"), netip.Prefix{}},
		{"10.12.13.0-24&fd00:12:13::-56", p("10.12.13.0/24"), p("fd00:12:13::/56")},
		{"0.0.0.0-0&fd00:12:13::-56", netip.Prefix{}, p("fd00:12:13::/56")},
		{"10.0.0.4-30", p("10.0.0.4/30"), netip.Prefix{}},
	} {
		if got := Key(tc.sn, tc.sn6); got != tc.key {
			t.Errorf("Key(%s, %s) = %q, want %q", tc.sn, tc.sn6, got, tc.key)
		}
		sn, sn6, err := ParseKey(tc.key)
		if err != nil || sn != tc.sn || sn6 != tc.sn6 {
			t.Errorf("ParseKey(%q) = %s, %s, %v", tc.key, sn, sn6, err)
		}
	}
}

func TestParseKeyRejects(t *testing.T) {
	for _, key := range []string{
		"", "10.5.52.0", "10.5.52.0-", "10.5.52.0-33", "10.5.52.0-0", "10.5.52.1-24", "10.5.52.0-024",
		"10.5.52.0-+24", "010.5.52.0-24", "fd00::-64", "0.0.0.0-0", "10.5.52.0-24&", "10.5.52.0-24&10.1.0.0-16",
		"10.5.52.0-24&fd00::1-64", "10.5.52.0-24&FD00::-64", "10.5.52.0-24&fd00::-129", "x10.5.52.0-24",
		"10.5.52.0-24&fd00::-64&fd01::-64", "::ffff:10.5.52.0-120", "10.5.52.0-24 ",
	} {
		if sn, sn6, err := ParseKey(key); err == nil {
			t.Errorf("ParseKey(%q) = %s, %s; want an error", key, sn, sn6)
		}
	}
}
