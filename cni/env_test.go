package cni

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
)

const fullEnv = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"

func TestReadEnv(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, "subnet.env")

	_, err := ReadEnv(path)
	if ce := ToCNI(err); ce == nil || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, path) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %#v; want code 11 naming %s", ce, path)
	}

	for _, tc := range []struct {
		name, content string
		code          uint
		want          string
	}{
		{"full", fullEnv, 0, ""},
		{"IPv6 only", "FLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\nFLANNEL_MTU=0\nFLANNEL_IPMASQ=false\n", 0, ""},
		{"empty", "", types.ErrDecodingFailure,
			"incomplete (half-written?): no FLANNEL_NETWORK or FLANNEL_IPV6_NETWORK, FLANNEL_SUBNET or FLANNEL_IPV6_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ"},
		{"cut after a line", fullEnv[:strings.Index(fullEnv, "FLANNEL_IPMASQ")], types.ErrDecodingFailure, "no FLANNEL_IPMASQ"},
		{"cut in a key", fullEnv[:strings.Index(fullEnv, "FLANNEL_MTU")+8], types.ErrDecodingFailure, `"FLANNEL_": missing '='`},
		{"cut in a value", fullEnv[:strings.Index(fullEnv, "FLANNEL_SUBNET")+20], types.ErrDecodingFailure, "FLANNEL_SUBNET"},
		{"no subnet", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", types.ErrDecodingFailure,
			"no FLANNEL_SUBNET or FLANNEL_IPV6_SUBNET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadEnv(path)
			ce := ToCNI(err)
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if ce == nil || ce.Code != tc.code || !strings.Contains(ce.Msg, tc.want) || !strings.Contains(ce.Msg, path) {
				t.Errorf("ReadEnv of %q: %#v; want code %d with %q and the path", tc.content, ce, tc.code, tc.want)
			}
		})
	}

	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = ReadEnv(filepath.Join(dir, "d"))
	if ce := ToCNI(err); ce == nil || ce.Code != types.ErrIOFailure {
		t.Errorf("a directory: %#v; want code %d", ce, types.ErrIOFailure)
	}
}

// TestReadHNSNetwork: the plugin reads what weftd describes of the HNS network, and reports a
// file that says nothing usable as a decoding failure, one it cannot read as an I/O failure.
func TestReadHNSNetwork(t *testing.T) {
	dir := tempDir(t)
	subnetFile := filepath.Join(dir, "subnet.env")
	netFile, vipFile := hnsfile.Paths(subnetFile)
	if n, err := ReadHNSNetwork(subnetFile); err != nil || n != (hnsfile.Network{}) {
		t.Errorf("no files: %+v, %v; want zero, nil", n, err)
	}
	sn := netip.MustParsePrefix("10.244.1.0/24")
	if err := hnsfile.WriteNetwork(netFile, hnsfile.Network{Name: "flannel.4096", Type: hnsfile.Overlay}); err != nil {
		t.Fatal(err)
	}
	if err := hnsfile.WriteSourceVIP(vipFile, netip.PrefixFrom(windows.SourceVIP(sn), sn.Bits())); err != nil {
		t.Fatal(err)
	}
	if n, err := ReadHNSNetwork(subnetFile); err != nil || n.Name != "flannel.4096" || delegateType(n) != "win-overlay" || n.SourceVIP != windows.SourceVIP(sn) {
		t.Errorf("read %+v, %v; want flannel.4096, win-overlay, source VIP %s", n, err, windows.SourceVIP(sn))
	}

	if err := os.WriteFile(vipFile, []byte("["), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadHNSNetwork(subnetFile)
	if ce := ToCNI(err); ce == nil || ce.Code != types.ErrDecodingFailure || !strings.Contains(ce.Msg, vipFile) {
		t.Errorf("a malformed %s: %#v; want code %d naming it", hnsfile.SourceVIPFile, ce, types.ErrDecodingFailure)
	}
	if err := os.Remove(vipFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(vipFile, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = ReadHNSNetwork(subnetFile)
	if ce := ToCNI(err); ce == nil || ce.Code != types.ErrIOFailure || !strings.Contains(ce.Msg, vipFile) {
		t.Errorf("a %s that is a directory: %#v; want code %d naming it", hnsfile.SourceVIPFile, ce, types.ErrIOFailure)
	}
}
