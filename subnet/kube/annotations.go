package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/weftnet/weft/subnet"
)

// annotations are the keys of flannel's node annotations under one prefix.
type annotations struct {
	managed       string // "true" on every node whose daemon publishes here
	backendType   string
	backendData   string
	backendV6Data string
	publicIP      string
	publicIPv6    string

	// Set by administrators.
	publicIPOverwrite   string // published instead of the node's own address
	publicIPv6Overwrite string
	nodePublicIP        string // used as --public-ip
	nodePublicIPv6      string
}

// newAnnotations makes the keys as flannel does: "example.com" becomes "example.com/<name>",
// "example.com/weft" becomes "example.com/weft-<name>". Each key must be one the API server
// accepts.
func newAnnotations(prefix string) (annotations, error) {
	switch strings.Count(prefix, "/") {
	case 0:
		prefix += "/"
	case 1:
		if !strings.HasSuffix(prefix, "/") && !strings.HasSuffix(prefix, "-") {
			prefix += "-"
		}
	default:
		return annotations{}, fmt.Errorf("kube: annotation prefix %q: more than one '/'", prefix)
	}
	a := annotations{
		managed:             prefix + "kube-subnet-manager",
		backendType:         prefix + "backend-type",
		backendData:         prefix + "backend-data",
		backendV6Data:       prefix + "backend-v6-data",
		publicIP:            prefix + "public-ip",
		publicIPv6:          prefix + "public-ipv6",
		publicIPOverwrite:   prefix + "public-ip-overwrite",
		publicIPv6Overwrite: prefix + "public-ipv6-overwrite",
		nodePublicIP:        prefix + "node-public-ip",
		nodePublicIPv6:      prefix + "node-public-ipv6",
	}
	for _, k := range []string{a.managed, a.publicIPv6Overwrite} { // the shortest and the longest
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return annotations{}, fmt.Errorf("kube: annotation prefix %q: key %q: %s", prefix, k, strings.Join(errs, "; "))
		}
	}
	return a, nil
}

// watched are the keys a peer's lease is read from; the watch's cache keeps only these
// (peerNode).
func (a annotations) watched() [numWatched]string {
	return [numWatched]string{a.managed, a.backendType, a.backendData, a.backendV6Data, a.publicIP, a.publicIPv6}
}

// numWatched is the number of watched annotations.
const numWatched = 6

// lookup reads one annotation: from a Node's map (mapLookup) or from the watch's cache
// (peerNode.lookup).
type lookup func(key string) (string, bool)

func mapLookup(ann map[string]string) lookup {
	return func(key string) (string, bool) {
		v, ok := ann[key]
		return v, ok
	}
}

// values are the annotations that publish attrs under cfg; nil means the key must go (a
// family that is off). Backend data is written compact, "null" when there is none, as
// flannel writes it.
func (a annotations) values(cfg *subnet.Config, attrs subnet.LeaseAttrs) map[string]*string {
	str := func(s string) *string { return &s }
	data := func(d json.RawMessage) *string {
		var b bytes.Buffer
		if len(d) == 0 || json.Compact(&b, d) != nil {
			return str("null")
		}
		return str(b.String())
	}
	v := map[string]*string{
		a.managed:       str("true"),
		a.backendType:   str(attrs.BackendType),
		a.backendData:   nil,
		a.publicIP:      nil,
		a.backendV6Data: nil,
		a.publicIPv6:    nil,
	}
	if cfg.EnableIPv4 {
		v[a.backendData], v[a.publicIP] = data(attrs.BackendData), str(attrs.PublicIP.String())
	}
	if cfg.EnableIPv6 {
		v[a.backendV6Data], v[a.publicIPv6] = data(attrs.BackendV6Data), str(attrs.PublicIPv6.String())
	}
	return v
}

// changes returns the part of want that differs from the annotations the node has, as the
// annotations of a JSON merge patch (nil deletes); empty when nothing is to be written.
func changes(have map[string]string, want map[string]*string) map[string]*string {
	out := map[string]*string{}
	for k, v := range want {
		old, ok := have[k]
		if v == nil && ok || v != nil && (!ok || old != *v) {
			out[k] = v
		}
	}
	return out
}

// attrs reads the lease attributes a peer published. It is what another node wrote, so
// every value is checked; the error names the annotation.
func (a annotations) attrs(cfg *subnet.Config, ann lookup) (subnet.LeaseAttrs, error) {
	var out subnet.LeaseAttrs
	out.BackendType, _ = ann(a.backendType)
	if out.BackendType == "" {
		return subnet.LeaseAttrs{}, fmt.Errorf("annotation %s missing", a.backendType)
	}
	var err error
	if cfg.EnableIPv4 {
		if out.PublicIP, err = addr(ann, a.publicIP, false, true); err != nil {
			return subnet.LeaseAttrs{}, err
		}
		if out.BackendData, err = jsonValue(ann, a.backendData); err != nil {
			return subnet.LeaseAttrs{}, err
		}
	}
	if cfg.EnableIPv6 {
		// In a dual-stack network a bad IPv6 half is left for the backend to skip: the IPv4
		// half may serve. IPv6 alone, it spoils the lease.
		half := cfg.EnableIPv4
		if out.PublicIPv6, err = addr(ann, a.publicIPv6, true, true); err != nil {
			if !half {
				return subnet.LeaseAttrs{}, err
			}
			out.BadPublicIPv6, _ = ann(a.publicIPv6)
		}
		if out.BackendV6Data, err = jsonValue(ann, a.backendV6Data); err != nil && !half {
			return subnet.LeaseAttrs{}, err
		}
	}
	return out, nil
}

// addr parses the address in annotation key, of the family asked for; zero when the
// annotation is absent and not required.
func addr(ann lookup, key string, v6, required bool) (netip.Addr, error) {
	s, ok := ann(key)
	if !ok {
		if required {
			return netip.Addr{}, fmt.Errorf("annotation %s missing", key)
		}
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(s)
	switch {
	case err != nil || ip.Zone() != "" || ip.IsUnspecified():
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: not an IP address", key, s)
	case !v6 && !ip.Is4():
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: not an IPv4 address", key, s)
	case v6 && (!ip.Is6() || ip.Is4In6()):
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: not an IPv6 address", key, s)
	}
	return ip, nil
}

// jsonValue reads backend data: absent and "null" are none, anything else must be JSON.
func jsonValue(ann lookup, key string) (json.RawMessage, error) {
	s, ok := ann(key)
	if !ok || strings.TrimSpace(s) == "null" {
		return nil, nil
	}
	if len(s) > subnet.MaxAttrsSize {
		return nil, fmt.Errorf("annotation %s: over the %d-byte limit", key, subnet.MaxAttrsSize)
	}
	if !json.Valid([]byte(s)) {
		return nil, fmt.Errorf("annotation %s=%q: not JSON", key, s)
	}
	return json.RawMessage(s), nil
}

// nodeCIDRs returns a Node's podCIDRs. Nodes written before dual-stack have only
// spec.podCIDR.
func nodeCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return n.Spec.PodCIDRs
}

// podCIDRs returns the pod subnets of a node's podCIDRs (nodeCIDRs), one per family at most.
func podCIDRs(cidrs []string) (v4, v6 netip.Prefix, err error) {
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Masked() != p {
			return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("podCIDR %q is not a subnet", s)
		}
		slot := &v4
		if p.Addr().Is6() {
			slot = &v6
		}
		if slot.IsValid() {
			return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("podCIDRs %v: two of one family", cidrs)
		}
		*slot = p
	}
	return v4, v6, nil
}
