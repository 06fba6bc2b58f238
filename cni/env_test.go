package cni

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/windows"
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

func TestReadHNSNetwork(t *testing.T) {
	dir := tempDir(t)
	subnetFile := filepath.Join(dir, "subnet.env")
	n, err := ReadHNSNetwork(subnetFile)
	if err != nil || n != (HNSNetwork{}) {
		t.Errorf("no files: %+v, %v; want zero, nil", n, err)
	}
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if content == "" {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		hns, vip string // file contents, "" for no file
		want     string // the error, or the network read as "name type vip"
	}{
		// What windows.WriteSourceVIP writes.
		{"", `{"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.254/24"}}` + "\n", "  10.244.1.254"},
		{"", `{"ip":"10.244.1.253"}`, "  10.244.1.253"},
		{`{"name":"flannel.4096","type":"Overlay"}`, `{"ip4":{"ip":"10.244.1.254/24"}}`, "flannel.4096 Overlay 10.244.1.254"},
		{`{"name":"cbr0","type":"L2Bridge"}`, "", "cbr0 L2Bridge invalid IP"},
		{`{"name":"x","type":"Transparent"}`, "", `hns.json: type "Transparent": want Overlay or L2Bridge`},
		{`{"type":"Overlay"}`, "", "hns.json: no name"},
		{`{"name":`, "", "hns.json is malformed"},
		{"", `{"ip4":{"ip":"10.1"}}`, `sourceVip.json: ip4.ip "10.1"`},
		{"", `{"ip4":{}}`, `sourceVip.json: ip4.ip ""`},
		{"", `[`, "sourceVip.json is malformed"},
	} {
		write(HNSFile, tc.hns)
		write(SourceVIPFile, tc.vip)
		n, err := ReadHNSNetwork(subnetFile)
		got := fmt.Sprintf("%s %s %s", n.Name, n.Type, n.SourceVIP)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s and %s: %s; want %s", tc.hns, tc.vip, got, tc.want)
		}
	}
}

// TestReadsWhatWeftdWrites: the files weftd on Windows writes next to subnet.env are what the
// plugin reads.
func TestReadsWhatWeftdWrites(t *testing.T) {
	dir := t.TempDir()
	subnetFile := filepath.Join(dir, "subnet.env")
	sn := netip.MustParsePrefix("10.244.1.0/24")
	if err := windows.WriteNetworkFile(filepath.Join(dir, HNSFile), "flannel.4096", windows.NetworkOverlay); err != nil {
		t.Fatal(err)
	}
	if err := windows.WriteSourceVIP(filepath.Join(dir, SourceVIPFile), sn); err != nil {
		t.Fatal(err)
	}
	n, err := ReadHNSNetwork(subnetFile)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != "flannel.4096" || n.Type != HNSOverlay || n.SourceVIP != windows.SourceVIP(sn) {
		t.Errorf("read %+v, want flannel.4096, %s, source VIP %s", n, HNSOverlay, windows.SourceVIP(sn))
	}
}
