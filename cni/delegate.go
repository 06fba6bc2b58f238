package cni

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows/hnsfile"
)

// OS picks the delegate's flavour: flannel's plugin builds a different one on each system.
type OS string

// The flavours. Any other OS gets Linux's.
const (
	Linux   OS = "linux"
	Windows OS = "windows"
)

// windowsCNIVersion is the cniVersion flannel gives a Windows delegate when the
// configuration has none.
const windowsCNIVersion = "0.2.0"

// Delegate is a delegate plugin and the network configuration it is run with.
type Delegate struct {
	Type   string
	Config []byte
}

// BuildDelegate makes the delegate configuration for a pod from the plugin's configuration
// and the node's subnet.env, as flannel's plugin does; on Windows, what hns knows (see
// ReadHNSNetwork) adds the network name, the delegate type and the source VIP.
func BuildDelegate(goos OS, conf Config, env subnet.Env, hns hnsfile.Network) (Delegate, error) {
	d := maps.Clone(conf.Delegate)
	if d == nil {
		d = map[string]json.RawMessage{}
	}
	var err error
	if goos == Windows {
		err = windowsDelegate(d, conf, env, hns)
	} else {
		err = linuxDelegate(d, conf, env)
	}
	if err != nil {
		return Delegate{}, err
	}
	// The runtime filled it for this plugin's capabilities; the delegate is the one to act
	// on them (port mappings, DNS, bandwidth...).
	if conf.RuntimeConfig != nil {
		d["runtimeConfig"] = conf.RuntimeConfig
	}
	typ := stringValue(d, "type")
	if typ == "" {
		return Delegate{}, configError("delegate.type", "want a plugin name, got %s", d["type"])
	}
	data, err := json.Marshal(d)
	if err != nil {
		return Delegate{}, fmt.Errorf("encoding the %s delegate config: %w", typ, err)
	}
	return Delegate{Type: typ, Config: data}, nil
}

// linuxDelegate: bridge by default, as the cluster network's gateway; ipMasq only when weftd
// does not masquerade; the node subnet(s) from host-local, with routes to the cluster
// network(s) added to the configuration's.
func linuxDelegate(d map[string]json.RawMessage, conf Config, env subnet.Env) error {
	d["name"] = mustJSON(conf.Name)
	setDefault(d, "type", "bridge")
	setDefault(d, "ipMasq", !env.IPMasq)
	setDefault(d, "mtu", env.MTU)
	if stringValue(d, "type") == "bridge" {
		setDefault(d, "isGateway", true)
	}
	if conf.CNIVersion != "" {
		d["cniVersion"] = mustJSON(conf.CNIVersion)
	}

	ipam := maps.Clone(conf.IPAM)
	if ipam == nil {
		ipam = map[string]json.RawMessage{}
	}
	setDefault(ipam, "type", "host-local")
	var ranges [][]ipRange
	for _, sn := range []netip.Prefix{env.Subnet, env.IPv6Subnet} {
		if sn.IsValid() {
			ranges = append(ranges, []ipRange{{Subnet: sn.Masked().String()}})
		}
	}
	ipam["ranges"] = mustJSON(ranges)
	routes, err := ipamRoutes(conf.IPAM)
	if err != nil {
		return err
	}
	for _, nw := range []netip.Prefix{env.Network, env.IPv6Network} {
		if nw.IsValid() {
			routes = append(routes, mustJSON(map[string]string{"dst": nw.Masked().String()}))
		}
	}
	ipam["routes"] = mustJSON(routes)
	d["ipam"] = mustJSON(ipam)
	return nil
}

// windowsDelegate: ipMasq is the delegate's job on Windows (outbound NAT of the pod
// network), so it follows FLANNEL_IPMASQ itself; the IPAM is flannel's plain host-local over
// the node subnet, less the addresses that are not the pods' to have.
func windowsDelegate(d map[string]json.RawMessage, conf Config, env subnet.Env, hns hnsfile.Network) error {
	name := conf.Name
	if hns.Name != "" {
		name = hns.Name
	}
	d["name"] = mustJSON(name)
	typ := delegateType(hns)
	if typ == "" {
		typ = "win-bridge"
	}
	setDefault(d, "type", typ)
	d["ipMasq"] = mustJSON(env.IPMasq)
	nw, sn := env.Network, env.Subnet
	if !sn.IsValid() {
		nw, sn = env.IPv6Network, env.IPv6Subnet
	}
	if nw.IsValid() {
		d["ipMasqNetwork"] = mustJSON(nw.Masked().String())
	}
	version := conf.CNIVersion
	if version == "" {
		version = windowsCNIVersion
	}
	d["cniVersion"] = mustJSON(version)

	sn = sn.Masked()
	var reserved []netip.Addr
	if hns.SourceVIP.IsValid() {
		if !sn.Contains(hns.SourceVIP) {
			// weftd rewrites both files when the subnet changes; until it has, no pod can be
			// given an address that is sure to be right.
			return &Error{Code: types.ErrTryAgainLater,
				Msg: fmt.Sprintf("the source VIP %s of %s is not in the node subnet %s of subnet.env %s",
					hns.SourceVIP, hnsfile.SourceVIPFile, sn, conf.SubnetFile)}
		}
		reserved = append(reserved, hns.SourceVIP)
	}
	if stringValue(d, "type") == "win-bridge" {
		// The L2Bridge network's host endpoint, which win-bridge makes the pods' gateway.
		reserved = append(reserved, sn.Addr().Next().Next())
	}
	ipam := map[string]any{"type": "host-local"}
	if len(reserved) == 0 {
		ipam["subnet"] = sn.String()
	} else {
		ipam["ranges"] = [][]ipRange{excludeFromRange(sn, reserved)}
	}
	d["ipam"] = mustJSON(ipam)
	if hns.NetworkPolicy {
		return closeEndpoint(d)
	}
	return nil
}

// closeEndpoint adds to a win-overlay or win-bridge delegate's policies the ACLs that make the
// pod's endpoint closed both ways from its creation (hnsfile.ClosedEndpointACLs), which weftd
// replaces with what the pod's policies allow once it knows the pod: a new pod is never
// reachable before its policies are in. They are HNS v2 endpoint policies ("apiVersion": 2,
// which containerd's pods need anyway); the delegate's own policies are kept.
func closeEndpoint(d map[string]json.RawMessage) error {
	var policies []json.RawMessage
	if raw, ok := d["policies"]; ok {
		if err := json.Unmarshal(raw, &policies); err != nil {
			return configError("delegate.policies", "not a list of policies: %v", err)
		}
	}
	if string(d["apiVersion"]) != "2" {
		return configError("delegate.apiVersion", `weftd enforces NetworkPolicy (hns.json), which needs "apiVersion": 2 to close each new endpoint with HNS v2 ACLs; got %s`, cmp.Or(string(d["apiVersion"]), "none"))
	}
	for _, p := range hnsfile.ClosedEndpointACLs() {
		policies = append(policies, mustJSON(map[string]any{"name": "EndpointPolicy", "value": p}))
	}
	d["policies"] = mustJSON(policies)
	return nil
}

// ipRange is one range of a host-local range set; empty bounds are host-local's defaults.
type ipRange struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
}

// excludeFromRange splits the host addresses of sn (host-local's default range: from
// network+1 to the broadcast address-1 in IPv4, the last address in IPv6) into the ranges
// that cover all of them but the reserved ones and the gateway (network+1, which host-local
// skips anyway). Bounds equal to host-local's defaults are left out.
func excludeFromRange(sn netip.Prefix, reserved []netip.Addr) []ipRange {
	sn = sn.Masked()
	first, last := sn.Addr().Next(), subnet.LastAddr(sn)
	if sn.Addr().Is4() {
		last = last.Prev()
	}
	skip := append([]netip.Addr{first}, reserved...)
	slices.SortFunc(skip, netip.Addr.Compare)
	skip = slices.Compact(skip)

	var out []ipRange
	add := func(from, to netip.Addr) {
		if !from.IsValid() || !to.IsValid() || from.Compare(to) > 0 {
			return
		}
		r := ipRange{Subnet: sn.String()}
		if from != first {
			r.RangeStart = from.String()
		}
		if to != last {
			r.RangeEnd = to.String()
		}
		out = append(out, r)
	}
	from := first
	for _, a := range skip {
		if !sn.Contains(a) || a.Compare(from) < 0 || a.Compare(last) > 0 {
			continue
		}
		add(from, a.Prev())
		from = a.Next()
	}
	add(from, last)
	return out
}

// stringValue is the string at m[key], "" if there is none.
func stringValue(m map[string]json.RawMessage, key string) string {
	var s string
	if json.Unmarshal(m[key], &s) != nil {
		return ""
	}
	return s
}

// setDefault sets m[key] to v unless the key is present (even if null: flannel's test is
// the key's presence).
func setDefault(m map[string]json.RawMessage, key string, v any) {
	if _, ok := m[key]; !ok {
		m[key] = mustJSON(v)
	}
}

// mustJSON encodes values that always encode: strings, numbers, booleans, and maps and
// slices of them.
func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("cni: encoding %#v: %v", v, err))
	}
	return data
}
