package windows

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/weftnet/weft/internal/atomicfile"
	"github.com/weftnet/weft/subnet"
)

// SourceVIP is the address of the node subnet kept for kube-proxy's source VIP on overlay
// (kube-proxy makes the endpoint itself when given the address): the last address before
// the broadcast address. Pods must not get it: the CNI's IPAM range has to end before it
// (host-local "rangeEnd"); peers' remote endpoints cover it like any pod address.
func SourceVIP(sn netip.Prefix) netip.Addr { return subnet.LastAddr(sn).Prev() }

// sourceVIPFile is host-local's CNI 0.2.0 result: the file kube-proxy start-up scripts for
// flannel overlay already read ($(Get-Content sourceVip.json | ConvertFrom-Json).ip4.ip).
type sourceVIPFile struct {
	CNIVersion string `json:"cniVersion"`
	IP4        struct {
		IP string `json:"ip"`
	} `json:"ip4"`
}

// NetworkFile is what the weft CNI plugin reads of the pods' HNS network (hns.json next to
// subnet.env): its name, which win-overlay and win-bridge look the network up by, and its
// type, which picks the delegate.
type NetworkFile struct {
	Name string      `json:"name"`
	Type NetworkType `json:"type"`
}

// WriteNetworkFile writes a NetworkFile to path, atomically: a pod may start at any moment.
func WriteNetworkFile(path, name string, typ NetworkType) error {
	b, err := json.Marshal(NetworkFile{Name: name, Type: typ})
	if err != nil {
		return fmt.Errorf("HNS network file: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("HNS network file: %w", err)
	}
	return nil
}

// WriteSourceVIP writes the source VIP of sn, with the subnet's prefix length, to path,
// atomically: kube-proxy's start-up may read it at any moment.
func WriteSourceVIP(path string, sn netip.Prefix) error {
	var f sourceVIPFile
	f.CNIVersion = "0.2.0"
	f.IP4.IP = netip.PrefixFrom(SourceVIP(sn), sn.Bits()).String()
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("source VIP file: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("source VIP file: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("source VIP file: %w", err)
	}
	return nil
}
