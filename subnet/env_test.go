package subnet

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var (
	network4 = netip.MustParsePrefix("10.244.0.0/16")
	lease4   = netip.MustParsePrefix("10.244.1.0/24")
	network6 = netip.MustParsePrefix("fd00:10:244::/56")
	lease6   = netip.MustParsePrefix("fd00:10:244:1::/64")
)

func TestEnvMarshal(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  Env
		want string
	}{
		{
			name: "ipv4 only",
			env:  NewEnv(network4, lease4, netip.Prefix{}, netip.Prefix{}, 1450, true),
			want: "FLANNEL_NETWORK=10.244.0.0/16\n" +
				"FLANNEL_SUBNET=10.244.1.1/24\n" +
				"FLANNEL_MTU=1450\n" +
				"FLANNEL_IPMASQ=true\n",
		},
		{
			name: "dual stack",
			env:  NewEnv(network4, lease4, network6, lease6, 1450, true),
			want: "FLANNEL_NETWORK=10.244.0.0/16\n" +
				"FLANNEL_SUBNET=10.244.1.1/24\n" +
				"FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n" +
				"FLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n" +
				"FLANNEL_MTU=1450\n" +
				"FLANNEL_IPMASQ=true\n",
		},
		{
			name: "ipv6 only",
			env:  NewEnv(netip.Prefix{}, netip.Prefix{}, network6, lease6, 1400, false),
			want: "FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n" +
				"FLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n" +
				"FLANNEL_MTU=1400\n" +
				"FLANNEL_IPMASQ=false\n",
		},
		{
			name: "zero env still has mtu and ipmasq",
			env:  Env{},
			want: "FLANNEL_MTU=0\nFLANNEL_IPMASQ=false\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(tc.env.Marshal()); got != tc.want {
				t.Errorf("Marshal() =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestNewEnv(t *testing.T) {
	e := NewEnv(network4, lease4, network6, lease6, 8951, true)
	want := Env{
		Network:     network4,
		Subnet:      netip.MustParsePrefix("10.244.1.1/24"),
		IPv6Network: network6,
		IPv6Subnet:  netip.MustParsePrefix("fd00:10:244:1::1/64"),
		MTU:         8951,
		IPMasq:      true,
	}
	if e != want {
		t.Fatalf("NewEnv = %+v, want %+v", e, want)
	}

	sn, sn6 := e.LeaseSubnets()
	if sn != lease4 || sn6 != lease6 {
		t.Errorf("LeaseSubnets() = %v, %v, want %v, %v", sn, sn6, lease4, lease6)
	}

	// Disabled families stay zero both ways.
	e = NewEnv(network4, lease4, netip.Prefix{}, netip.Prefix{}, 1450, false)
	if e.IPv6Network.IsValid() || e.IPv6Subnet.IsValid() {
		t.Errorf("ipv6 disabled: got %v, %v", e.IPv6Network, e.IPv6Subnet)
	}
	if sn, sn6 := e.LeaseSubnets(); sn != lease4 || sn6.IsValid() {
		t.Errorf("LeaseSubnets() = %v, %v, want %v, zero", sn, sn6, lease4)
	}
	e = NewEnv(netip.Prefix{}, netip.Prefix{}, network6, lease6, 1450, false)
	if sn, sn6 := e.LeaseSubnets(); sn.IsValid() || sn6 != lease6 {
		t.Errorf("LeaseSubnets() = %v, %v, want zero, %v", sn, sn6, lease6)
	}
}

func TestEnvRoundTrip(t *testing.T) {
	for _, e := range []Env{
		{},
		NewEnv(network4, lease4, netip.Prefix{}, netip.Prefix{}, 1450, true),
		NewEnv(network4, lease4, network6, lease6, 1450, true),
		NewEnv(netip.Prefix{}, netip.Prefix{}, network6, lease6, 65535, false),
		NewEnv(netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("192.168.0.0/30"),
			netip.MustParsePrefix("::/0"), netip.MustParsePrefix("2001:db8::/128"), 0, true),
	} {
		got, err := ParseEnv(e.Marshal())
		if err != nil {
			t.Errorf("ParseEnv(Marshal(%+v)): %v", e, err)
			continue
		}
		if got != e {
			t.Errorf("ParseEnv(Marshal(e)) = %+v, want %+v", got, e)
		}
	}
}

func TestParseEnv(t *testing.T) {
	dual := NewEnv(network4, lease4, network6, lease6, 1450, true)
	for _, tc := range []struct {
		name string
		in   string
		want Env
	}{
		{"empty", "", Env{}},
		{"flannel output", string(dual.Marshal()), dual},
		{
			name: "comments blank lines spaces and crlf",
			in: "# written by weft\r\n\r\n" +
				"  FLANNEL_NETWORK=10.244.0.0/16  \r\n" +
				"\tFLANNEL_SUBNET = 10.244.1.1/24\r\n" +
				"   # indented comment\n" +
				"FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n" +
				"FLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\n" +
				"FLANNEL_MTU=1450\n" +
				"FLANNEL_IPMASQ=true",
			want: dual,
		},
		{
			name: "unknown keys ignored",
			in: "FLANNEL_NETWORK=10.244.0.0/16\n" +
				"FLANNEL_FUTURE=whatever=it is\n" +
				"OTHER=1\n" +
				"flannel_mtu=not a number\n" +
				"=\n" +
				"FLANNEL_MTU=1450\n",
			want: Env{Network: network4, MTU: 1450},
		},
		{
			name: "last key wins",
			in:   "FLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
			want: Env{MTU: 1450},
		},
		{
			name: "missing keys leave zero values",
			in:   "FLANNEL_SUBNET=10.244.1.1/24\n",
			want: Env{Subnet: netip.MustParsePrefix("10.244.1.1/24")},
		},
		{
			name: "parse bool forms",
			in:   "FLANNEL_IPMASQ=1\n",
			want: Env{IPMasq: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEnv([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseEnv: %v", err)
			}
			if got != tc.want {
				t.Errorf("ParseEnv = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // substrings of the error
	}{
		{"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.1.1.1/33\n", []string{"line 2", "FLANNEL_SUBNET", `"10.1.1.1/33"`}},
		{"FLANNEL_NETWORK=10.244.0.0\n", []string{"line 1", "FLANNEL_NETWORK", "10.244.0.0"}},
		{"FLANNEL_NETWORK=fd00::/56\n", []string{"FLANNEL_NETWORK", "not an IPv4 prefix"}},
		{"FLANNEL_NETWORK=::ffff:10.0.0.0/104\n", []string{"FLANNEL_NETWORK", "not an IPv4 prefix"}},
		{"FLANNEL_SUBNET=\n", []string{"FLANNEL_SUBNET"}},
		{"FLANNEL_SUBNET=fd00:10:244:1::1/64\n", []string{"FLANNEL_SUBNET", "not an IPv4 prefix"}},
		{"FLANNEL_IPV6_NETWORK=10.244.0.0/16\n", []string{"FLANNEL_IPV6_NETWORK", "not an IPv6 prefix"}},
		{"FLANNEL_IPV6_SUBNET=fd00::1%eth0/64\n", []string{"FLANNEL_IPV6_SUBNET"}},
		{"FLANNEL_IPV6_SUBNET=fd00::1/129\n", []string{"FLANNEL_IPV6_SUBNET"}},
		{"FLANNEL_IPV6_SUBNET=10.244.1.1/24\n", []string{"FLANNEL_IPV6_SUBNET", "not an IPv6 prefix"}},
		{"FLANNEL_MTU=\n", []string{"FLANNEL_MTU"}},
		{"FLANNEL_MTU=-1\n", []string{"FLANNEL_MTU", `"-1"`}},
		{"FLANNEL_MTU=+1450\n", []string{"FLANNEL_MTU"}},
		{"FLANNEL_MTU=65536\n", []string{"FLANNEL_MTU", "65536"}},
		{"FLANNEL_MTU=0x5aa\n", []string{"FLANNEL_MTU"}},
		{"FLANNEL_MTU=1_450\n", []string{"FLANNEL_MTU"}},
		{"FLANNEL_MTU=1450.0\n", []string{"FLANNEL_MTU"}},
		{"FLANNEL_IPMASQ=yes\n", []string{"FLANNEL_IPMASQ", `"yes"`}},
		{"FLANNEL_IPMASQ=\n", []string{"FLANNEL_IPMASQ"}},
		{"FLANNEL_MTU=1450\ngarbage\n", []string{"line 2", "garbage", "missing '='"}},
	} {
		_, err := ParseEnv([]byte(tc.in))
		if err == nil {
			t.Errorf("ParseEnv(%q) succeeded", tc.in)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("ParseEnv(%q) error %q does not mention %q", tc.in, err, s)
			}
		}
	}
}

func TestWriteReadEnv(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run", "flannel", "subnet.env")

	if _, err := ReadEnv(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadEnv of a missing file: err = %v, want fs.ErrNotExist", err)
	}

	for _, e := range []Env{
		NewEnv(network4, lease4, network6, lease6, 1450, true),
		NewEnv(network4, lease4, netip.Prefix{}, netip.Prefix{}, 1500, false),
	} {
		if err := WriteEnv(path, e); err != nil {
			t.Fatalf("WriteEnv: %v", err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != string(e.Marshal()) {
			t.Errorf("file content = %q, want %q", data, e.Marshal())
		}
		got, err := ReadEnv(path)
		if err != nil {
			t.Fatalf("ReadEnv: %v", err)
		}
		if got != e {
			t.Errorf("ReadEnv = %+v, want %+v", got, e)
		}
		if runtime.GOOS != "windows" {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("mode = %v, want 0644", fi.Mode().Perm())
			}
		}
	}

	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only subnet.env", names)
	}
}

func TestReadEnvBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "subnet.env")
	if err := os.WriteFile(path, []byte("FLANNEL_MTU=huge\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadEnv(path)
	if err == nil {
		t.Fatal("ReadEnv of a bad file succeeded")
	}
	for _, s := range []string{path, "line 1", "FLANNEL_MTU"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func TestWriteEnvRejectsUnparsable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "subnet.env")
	for _, e := range []Env{
		{Network: network6, MTU: 1450},
		{Subnet: lease6, MTU: 1450},
		{IPv6Network: network4, MTU: 1450},
		{IPv6Subnet: lease4, MTU: 1450},
		{MTU: -1},
		{MTU: 65536},
	} {
		if err := WriteEnv(path, e); err == nil {
			t.Errorf("WriteEnv(%+v) succeeded", e)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rejected env was written: stat err = %v", err)
	}
}
