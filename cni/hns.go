package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Files next to subnet.env that weftd on Windows may write for the plugin: flannel's
// subnet.env has no room for what they say. Both are optional.
const (
	// SourceVIPFile holds kube-proxy's source VIP on overlay, as host-local's 0.2.0 result
	// that kube-proxy's start-up scripts for flannel read:
	// {"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.254/24"}}. {"ip":"10.244.1.254"} is
	// read too.
	SourceVIPFile = "sourceVip.json"
	// HNSFile names the HNS network and its type: {"name":"flannel.4096","type":"Overlay"}.
	HNSFile = "hns.json"
)

// HNS network types, as HNS spells them.
const (
	HNSOverlay  = "Overlay"  // the vxlan backend; pods through win-overlay
	HNSL2Bridge = "L2Bridge" // the host-gw backend; pods through win-bridge
)

// HNSNetwork is what weftd on Windows tells the plugin about the pods' HNS network.
type HNSNetwork struct {
	// Name is the HNS network's name (flannel.<VNI>, or the backend's Name, cbr0 by default
	// for host-gw). win-overlay and win-bridge look the network up by the CNI network name,
	// so it becomes the delegate's name. "" if unknown: the configuration's name must be it.
	Name string `json:"name"`
	// Type is HNSOverlay or HNSL2Bridge; it picks the delegate when the configuration names
	// none. "" if unknown.
	Type string `json:"type"`
	// SourceVIP is the address of the node subnet kept for kube-proxy on overlay, which
	// the pods must not get. Zero if there is none.
	SourceVIP netip.Addr `json:"-"`
}

// ReadHNSNetwork reads HNSFile and SourceVIPFile from the directory of subnetFile. Missing
// files are no error: the node runs flanneld, or host-gw, and the delegate is then flannel's.
// Errors are *Error naming the file.
func ReadHNSNetwork(subnetFile string) (HNSNetwork, error) {
	dir := filepath.Dir(subnetFile)
	var n HNSNetwork
	path := filepath.Join(dir, HNSFile)
	found, err := readJSON(path, &n)
	if err != nil {
		return HNSNetwork{}, err
	}
	if found && n.Name == "" {
		return HNSNetwork{}, &Error{Code: types.ErrDecodingFailure, Msg: fmt.Sprintf("%s: no name", path)}
	}
	if n.Type != "" && !strings.EqualFold(n.Type, HNSOverlay) && !strings.EqualFold(n.Type, HNSL2Bridge) {
		return HNSNetwork{}, &Error{Code: types.ErrDecodingFailure,
			Msg: fmt.Sprintf("%s: type %q: want %s or %s", path, n.Type, HNSOverlay, HNSL2Bridge)}
	}
	if n.SourceVIP, err = readSourceVIP(filepath.Join(dir, SourceVIPFile)); err != nil {
		return HNSNetwork{}, err
	}
	return n, nil
}

// readSourceVIP reads SourceVIPFile: the zero Addr if it does not exist.
func readSourceVIP(path string) (netip.Addr, error) {
	var f struct {
		IP  string `json:"ip"`
		IP4 struct {
			IP string `json:"ip"`
		} `json:"ip4"`
	}
	found, err := readJSON(path, &f)
	if !found || err != nil {
		return netip.Addr{}, err
	}
	s := f.IP4.IP
	if s == "" {
		s = f.IP
	}
	// host-local's result has the prefix length; the plain form may not.
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, &Error{Code: types.ErrDecodingFailure, Msg: fmt.Sprintf("%s: ip4.ip %q", path, s), Err: err}
	}
	return a, nil
}

// readJSON decodes the JSON file at path into v; found is false if there is no such file.
func readJSON(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, &Error{Code: types.ErrIOFailure, Msg: "reading " + path, Err: err}
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, &Error{Code: types.ErrDecodingFailure, Msg: fmt.Sprintf("%s is malformed", path), Err: err}
	}
	return true, nil
}

// delegateType is the delegate plugin for the HNS network, "" if unknown. Without HNSFile a
// source VIP says overlay: weftd writes one only for an overlay network.
func (n HNSNetwork) delegateType() string {
	switch {
	case strings.EqualFold(n.Type, HNSOverlay):
		return "win-overlay"
	case strings.EqualFold(n.Type, HNSL2Bridge):
		return "win-bridge"
	case n.Type == "" && n.SourceVIP.IsValid():
		return "win-overlay"
	}
	return ""
}

// isNamespaceGUID reports whether CNI_NETNS is an HNS namespace's GUID
// (8-4-4-4-12 hex digits), as containerd passes it on Windows, where dockershim passed "none"
// for a pod's sandbox and "container:<id>" for its other containers.
func isNamespaceGUID(netns string) bool {
	if len(netns) != 36 {
		return false
	}
	for i, c := range netns {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}

// checkAPIVersion refuses to hand a pod in an HNS namespace (containerd's) to win-overlay or
// win-bridge on their HNS v1 path, which they take without "apiVersion": 2: there
// (containernetworking/plugins pkg/hns, AddHnsEndpoint) an endpoint is made only for
// dockershim's sandbox ("none"), and for any other namespace one made beforehand is looked
// for, so the pod would fail with "failed to find HNSEndpoint", which names neither the
// configuration nor the fix. Other delegates (sdnoverlay, sdnbridge) have no such key.
func checkAPIVersion(d Delegate, netns string) error {
	if (d.Type != "win-overlay" && d.Type != "win-bridge") || !isNamespaceGUID(netns) {
		return nil
	}
	var c struct {
		APIVersion json.RawMessage `json:"apiVersion"`
	}
	if err := json.Unmarshal(d.Config, &c); err != nil {
		return fmt.Errorf("reading the %s delegate config: %w", d.Type, err)
	}
	if string(c.APIVersion) == "2" {
		return nil
	}
	got := "none"
	if c.APIVersion != nil {
		got = string(c.APIVersion)
	}
	return configError("delegate.apiVersion",
		`%s needs "apiVersion": 2 (and HNS v2 policies) for the namespace %s that the runtime (containerd) made; got %s, its HNS v1 path, which takes only dockershim's "none"`,
		d.Type, netns, got)
}
