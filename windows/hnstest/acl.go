package hnstest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/weftnet/weft/windows"
)

// An endpoint's ACL policies, as the simulator takes and judges them. Sources:
//   - The settings are hcsshim's AclPolicySetting (hcn/hcnpolicy.go): Protocols, Action,
//     Direction, Local/RemoteAddresses, Local/RemotePorts, RuleType, Priority (and v1's
//     single-valued fields, aclSettings); Action Allow or Block, Direction In or Out, RuleType Host or Switch (its
//     constants; a request with another value is refused, with HCN_E_INVALID_POLICY:
//     unverified). Lists are comma-separated, as hcsshim's tests write them
//     (hcn/hcnutils_test.go: "192.168.100.0/24,10.0.0.21", "80,8080"); port ranges
//     "from-to" are taken (unverified), protocols are numbers 0–255 (hcsshim's comment: 6
//     TCP, 17 UDP, 1 ICMPv4, 58 ICMPv6; 256, HNS v1's "any" in hcsshim issue 1059, is taken
//     too).
//   - Evaluation (ACLAllows): an endpoint without an ACL policy passes everything; with
//     any, it denies by default whatever no rule allows (microsoft/Windows-Containers
//     issue 616, Microsoft's answer of 2026-05: "When any ACL policy is applied on an HNS
//     endpoint, HNS switches the endpoint to a default-deny posture"). Rules are taken in
//     order of Priority, lower numbers first (hcsshim issue 1059: a Block of priority 500
//     beats an Allow-all of 1000), and the first that matches decides. At equal priority
//     Block comes first (unverified). A rule without a protocol, an address list or a port
//     list matches every value of it. The ACLs are stateful: what answers an allowed flow
//     passes (Calico for Windows relies on it; unverified here), so ACLAllows judges the
//     first packet of a flow only.
//   - Not simulated: RuleType Host (WFP) is judged as Switch; a packet's source port.

// checkACL refuses ACL settings HNS would not take (see above).
func checkACL(call string, p windows.Policy) error {
	if _, err := parseACL(p.Settings); err != nil {
		return hnsError(call, windows.HCNInvalidPolicy, "ACL policy %s: %v", p.Settings, err)
	}
	return nil
}

// aclSettings are an ACL's settings as either API writes them: v2's (windows.ACLSettings,
// hcsshim's AclPolicySetting) and the single-valued fields of v1's (hcsshim's ACLPolicy:
// Protocol, 256 for every protocol; LocalPort, RemotePort), which arrive here unchanged from
// a v1 endpoint (internal/hnssim). Other fields of v1's (Id, InternalPort, ServiceName) are
// not judged.
type aclSettings struct {
	windows.ACLSettings
	Protocol              uint16 `json:",omitempty"`
	LocalPort, RemotePort uint16 `json:",omitempty"`
}

// acl is one parsed ACL rule.
type acl struct {
	aclSettings
	protocols   []int // empty: every protocol
	local       []netip.Prefix
	remote      []netip.Prefix
	localPorts  [][2]uint16
	remotePorts [][2]uint16
	blocks, ins bool
}

func parseACL(settings json.RawMessage) (acl, error) {
	var a acl
	if err := json.Unmarshal(settings, &a.aclSettings); err != nil {
		return a, err
	}
	s := a.aclSettings
	switch s.Action {
	case windows.ACLAllow, windows.ACLBlock:
	default:
		return a, fmt.Errorf("action %q: want Allow or Block", s.Action)
	}
	switch s.Direction {
	case windows.ACLIn, windows.ACLOut:
	default:
		return a, fmt.Errorf("direction %q: want In or Out", s.Direction)
	}
	switch s.RuleType {
	case "", "Host", "Switch":
	default:
		return a, fmt.Errorf("rule type %q: want Host or Switch", s.RuleType)
	}
	a.blocks, a.ins = s.Action == windows.ACLBlock, s.Direction == windows.ACLIn
	var err error
	for _, f := range list(s.Protocols) {
		n, perr := strconv.Atoi(f)
		if perr != nil || n < 0 || n > 256 {
			return a, fmt.Errorf("protocol %q: want a number from 0 to 255", f)
		}
		if n != 256 {
			a.protocols = append(a.protocols, n)
		}
	}
	if s.Protocol != 0 && s.Protocol != 256 {
		a.protocols = append(a.protocols, int(s.Protocol))
	}
	if a.local, err = prefixes(s.LocalAddresses); err != nil {
		return a, err
	}
	if a.remote, err = prefixes(s.RemoteAddresses); err != nil {
		return a, err
	}
	if a.localPorts, err = portRanges(s.LocalPorts); err != nil {
		return a, err
	}
	if a.remotePorts, err = portRanges(s.RemotePorts); err != nil {
		return a, err
	}
	if s.LocalPort != 0 {
		a.localPorts = append(a.localPorts, [2]uint16{s.LocalPort, s.LocalPort})
	}
	if s.RemotePort != 0 {
		a.remotePorts = append(a.remotePorts, [2]uint16{s.RemotePort, s.RemotePort})
	}
	return a, nil
}

// list splits a comma-separated list; "" is the empty list.
func list(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	fs := strings.Split(s, ",")
	for i := range fs {
		fs[i] = strings.TrimSpace(fs[i])
	}
	return fs
}

func prefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range list(s) {
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("address %q: want an address or a prefix", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

func portRanges(s string) ([][2]uint16, error) {
	var out [][2]uint16
	for _, f := range list(s) {
		lo, hi, isRange := strings.Cut(f, "-")
		if !isRange {
			hi = lo
		}
		from, err1 := strconv.ParseUint(lo, 10, 16)
		to, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || from > to {
			return nil, fmt.Errorf("port %q: want a port or a range from-to", f)
		}
		out = append(out, [2]uint16{uint16(from), uint16(to)})
	}
	return out, nil
}

// Flow is the first packet of a flow as an endpoint's ACLs see it: In (to the endpoint)
// or out (from it), its IP protocol number, the other end's address, and the destination
// port (the endpoint's own for In, the other end's for out; 0 for protocols without ports).
type Flow struct {
	In       bool
	Protocol int
	Remote   netip.Addr
	Port     uint16
}

// The protocol numbers of Flow.Protocol.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// ACLAllows says whether the ACLs of the endpoint with address ip let f through, and the
// rule that decided ("" when the endpoint has no ACL, "default deny" when no rule matched).
func (h *HNS) ACLAllows(ip netip.Addr, f Flow) (bool, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ep *windows.HostComputeEndpoint
	for _, e := range h.endpoints {
		if e.Flags&windows.EndpointRemote == 0 && slices.Contains(e.IPs(), ip) {
			ep = e
		}
	}
	if ep == nil {
		return false, "", fmt.Errorf("no local endpoint has address %s", ip)
	}
	var rules []acl
	for _, p := range ep.Policies {
		if p.Type != windows.PolicyACL {
			continue
		}
		a, err := parseACL(p.Settings)
		if err != nil {
			return false, "", fmt.Errorf("endpoint %s holds an ACL it should have refused: %v", ep.Name, err)
		}
		rules = append(rules, a)
	}
	if len(rules) == 0 {
		return true, "", nil
	}
	slices.SortStableFunc(rules, func(a, b acl) int {
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		switch {
		case a.blocks && !b.blocks:
			return -1
		case b.blocks && !a.blocks:
			return 1
		}
		return 0
	})
	for _, r := range rules {
		if r.matches(ip, f) {
			b, _ := json.Marshal(r.aclSettings)
			return !r.blocks, string(b), nil
		}
	}
	return false, "default deny", nil
}

func (a acl) matches(local netip.Addr, f Flow) bool {
	if a.ins != f.In {
		return false
	}
	if len(a.protocols) > 0 && !slices.Contains(a.protocols, f.Protocol) {
		return false
	}
	if !inPrefixes(a.local, local) || !inPrefixes(a.remote, f.Remote) {
		return false
	}
	// The destination port: the endpoint's own for In, the other end's for Out. A port
	// list of the other end (the source port for In) is not judged.
	ports := a.remotePorts
	if f.In {
		ports = a.localPorts
	}
	if len(ports) == 0 {
		return true
	}
	return slices.ContainsFunc(ports, func(r [2]uint16) bool { return f.Port >= r[0] && f.Port <= r[1] })
}

func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	return len(ps) == 0 || slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}
