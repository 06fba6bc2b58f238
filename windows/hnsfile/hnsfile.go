// Package hnsfile is the format of the files weftd on Windows writes next to subnet.env for
// the weft CNI plugin, which flannel's subnet.env has no room for: hns.json names the pods'
// HNS network and its type, sourceVip.json holds kube-proxy's source VIP on overlay, which the
// pods must not get. Both sides use it, the Windows plane to write, the plugin to read, as
// both use package subnet's for subnet.env. Both files are optional: a node that runs
// flanneld has neither.
package hnsfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/weftnet/weft/internal/atomicfile"
)

// The files' names, in the directory of subnet.env.
const (
	// NetworkFile names the HNS network and its type: {"name":"flannel.4096","type":"Overlay"}.
	NetworkFile = "hns.json"
	// SourceVIPFile holds kube-proxy's source VIP on overlay, as host-local's CNI 0.2.0 result
	// that kube-proxy's start-up scripts for flannel read ($(Get-Content sourceVip.json |
	// ConvertFrom-Json).ip4.ip): {"cniVersion":"0.2.0","ip4":{"ip":"10.244.1.254/24"}}.
	// {"ip":"10.244.1.254"} is read too.
	SourceVIPFile = "sourceVip.json"
)

// HNS network types, as HNS spells them (the file's reader takes any case).
const (
	Overlay  = "Overlay"  // the vxlan backend; pods through win-overlay
	L2Bridge = "L2Bridge" // the host-gw backend; pods through win-bridge
)

// Network is what the files say of the pods' HNS network.
type Network struct {
	// Name is the HNS network's name (flannel.<VNI>, or the backend's Name, cbr0 by default
	// for host-gw), which win-overlay and win-bridge look the network up by. "" if unknown.
	Name string `json:"name"`
	// Type is Overlay or L2Bridge. "" if unknown.
	Type string `json:"type"`
	// NetworkPolicy: weftd enforces NetworkPolicy on the pods' endpoints (--network-policy),
	// so the plugin makes each endpoint closed (ACLs that block it both ways), which weftd
	// opens as its pod's policies say once it knows the pod.
	NetworkPolicy bool `json:"networkPolicy,omitempty"`
	// SourceVIP is the address of the node subnet kept for kube-proxy on overlay. Zero if
	// there is none.
	SourceVIP netip.Addr `json:"-"`
}

// Paths are the paths of NetworkFile and SourceVIPFile next to subnetFile.
func Paths(subnetFile string) (network, sourceVIP string) {
	dir := filepath.Dir(subnetFile)
	return filepath.Join(dir, NetworkFile), filepath.Join(dir, SourceVIPFile)
}

// ClosedPriority is the priority of the ACLs that keep a new endpoint closed
// (ClosedEndpointACLs): one of the priorities of weftd's ACLs, which weftd takes for its own.
const ClosedPriority = 4200

// ClosedEndpointACLs are the HNS v2 endpoint policies that block an endpoint both ways, which
// the plugin gives each new pod's endpoint when NetworkPolicy says so, and which weftd
// replaces with what the pod's policies allow once it knows the pod.
func ClosedEndpointACLs() []json.RawMessage {
	var out []json.RawMessage
	for _, dir := range []string{"In", "Out"} {
		out = append(out, json.RawMessage(fmt.Sprintf(
			`{"Type":"ACL","Settings":{"Action":"Block","Direction":%q,"RuleType":"Switch","Priority":%d}}`, dir, ClosedPriority)))
	}
	return out
}

// WriteNetwork writes NetworkFile's content for the network n (its name, type and
// NetworkPolicy) to path, atomically: a pod may start at any moment.
func WriteNetwork(path string, n Network) error {
	b, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("HNS network file %s: %w", path, err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("HNS network file: %w", err)
	}
	return nil
}

// sourceVIP is SourceVIPFile's content, as written and as read.
type sourceVIP struct {
	CNIVersion string `json:"cniVersion,omitempty"`
	IP         string `json:"ip,omitempty"` // the plain form, read only
	IP4        struct {
		IP string `json:"ip"`
	} `json:"ip4"`
}

// WriteSourceVIP writes the source VIP vip, with the node subnet's prefix length, to path,
// making its directory, atomically: kube-proxy's start-up may read it at any moment.
func WriteSourceVIP(path string, vip netip.Prefix) error {
	f := sourceVIP{CNIVersion: "0.2.0"}
	f.IP4.IP = vip.String()
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("source VIP file %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("source VIP file: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("source VIP file: %w", err)
	}
	return nil
}

// FormatError is a file that was read but says nothing usable. Other errors of Read are the
// file system's.
type FormatError struct {
	Path   string
	Reason string
	Err    error // the cause, if any
}

func (e *FormatError) Error() string {
	if e.Err == nil {
		return e.Path + ": " + e.Reason
	}
	return e.Path + ": " + e.Reason + ": " + e.Err.Error()
}

func (e *FormatError) Unwrap() error { return e.Err }

// Read reads NetworkFile and SourceVIPFile from the directory of subnetFile. Missing files are
// no error: the node runs flanneld, or host-gw has no source VIP.
func Read(subnetFile string) (Network, error) {
	netPath, vipPath := Paths(subnetFile)
	var n Network
	found, err := readJSON(netPath, &n)
	if err != nil {
		return Network{}, err
	}
	if found && n.Name == "" {
		return Network{}, &FormatError{Path: netPath, Reason: "no name"}
	}
	if n.Type != "" && !strings.EqualFold(n.Type, Overlay) && !strings.EqualFold(n.Type, L2Bridge) {
		return Network{}, &FormatError{Path: netPath, Reason: fmt.Sprintf("type %q: want %s or %s", n.Type, Overlay, L2Bridge)}
	}
	var f sourceVIP
	if found, err = readJSON(vipPath, &f); !found || err != nil {
		return n, err
	}
	s := f.IP4.IP
	if s == "" {
		s = f.IP
	}
	// host-local's result has the prefix length; the plain form may not.
	if p, err := netip.ParsePrefix(s); err == nil {
		n.SourceVIP = p.Addr()
		return n, nil
	}
	if n.SourceVIP, err = netip.ParseAddr(s); err != nil {
		return Network{}, &FormatError{Path: vipPath, Reason: fmt.Sprintf("ip4.ip %q", s), Err: err}
	}
	return n, nil
}

// readJSON decodes the JSON file at path into v; found is false if there is no such file.
func readJSON(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, &FormatError{Path: path, Reason: "malformed", Err: err}
	}
	return true, nil
}
