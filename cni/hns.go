package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/windows/hnsfile"
)

// ReadHNSNetwork reads what weftd on Windows says of the pods' HNS network next to
// subnetFile (hnsfile.Read). Its errors are *Error: a file that says nothing usable is a
// decoding failure, one that cannot be read an I/O failure.
func ReadHNSNetwork(subnetFile string) (hnsfile.Network, error) {
	n, err := hnsfile.Read(subnetFile)
	if err == nil {
		return n, nil
	}
	code := types.ErrIOFailure
	if _, ok := errors.AsType[*hnsfile.FormatError](err); ok {
		code = types.ErrDecodingFailure
	}
	return hnsfile.Network{}, &Error{Code: code, Msg: "the HNS network weftd describes", Err: err}
}

// delegateType is the delegate plugin for the HNS network n, "" if unknown. Without
// hnsfile.NetworkFile a source VIP says overlay: weftd writes one only for an overlay network.
func delegateType(n hnsfile.Network) string {
	switch {
	case strings.EqualFold(n.Type, hnsfile.Overlay):
		return "win-overlay"
	case strings.EqualFold(n.Type, hnsfile.L2Bridge):
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
