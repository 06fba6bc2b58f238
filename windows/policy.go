package windows

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/weftnet/weft/netpol"
	"github.com/weftnet/weft/windows/hnsfile"
)

// NetworkPolicy on Windows: ACL policies on the pods' endpoints (HcnModifyEndpoint), which
// HNS programs into the vSwitch (VFP). What HNS does with them, and where each rule comes
// from, is in windows/hnstest's acl.go; what weft writes:
//   - A pod that no policy isolates gets no ACL: HNS lets an endpoint without one pass
//     everything. A pod isolated in a direction gets, for that direction, one Allow rule per
//     rule, family and port of its netpol.Rules (priority aclAllow), and a Block of
//     everything (aclLast); for a direction it is not isolated in, an Allow of everything
//     (aclLast), since HNS denies by default what an endpoint with any ACL does not allow.
//   - Ingress from the node itself passes, as Kubernetes has it ("traffic to and from the
//     node where a Pod is running is always allowed"): the node's addresses on the pod
//     network (the gateway, and host-gw's host endpoint) are allowed in.
//   - Fail closed: a local endpoint of the network with an address of the node's pod
//     subnets that is no known pod's, and not the node's own (gateway, host endpoint,
//     source VIP), is blocked both ways until its pod is known.
//   - ACLs of other priorities (a CNI config's, an operator's) are left in place: an
//     update writes them back beside weft's.
//
// What only a real Windows node can show: that VFP enforces these as the simulator judges
// them (stateful, lower priority first, default deny), which source address the host's own
// traffic to a pod carries on an Overlay network, and how long HNS takes to apply an update.

// The priorities of weft's ACL rules: its allow rules first, then the last rule of each
// direction. An ACL of another priority is not weft's. A lower number is evaluated first,
// so an operator's rule below 4100 overrides weft's.
const (
	aclAllow uint16 = 4100
	aclLast  uint16 = hnsfile.ClosedPriority
)

// NetworkPolicy enforces NetworkPolicy with ACLs on the endpoints of the plane's network
// (daemon.PolicyPlane). Enforce and Remove are called from one goroutine.
type NetworkPolicy struct{ p *Plane }

// NetworkPolicy returns the plane's NetworkPolicy enforcement.
func (p *Plane) NetworkPolicy() *NetworkPolicy { return &NetworkPolicy{p: p} }

// Options implements daemon.PolicyPlane: HNS ACLs name protocols by number, but whether VFP
// matches SCTP ports is unknown, so a policy with SCTP ports is refused (and fails closed).
func (pp *NetworkPolicy) Options() netpol.Options { return netpol.Options{SCTP: false} }

// errNoNetwork: Enforce before the plane made or adopted its network.
var errNoNetwork = errors.New("the HNS network is not made yet")

// Enforce implements daemon.PolicyPlane: every local endpoint of the network on subnets
// gets the ACLs rules want for it, written only where they differ from what it holds. It
// always lists the network's endpoints (a node's few), so full changes nothing.
func (pp *NetworkPolicy) Enforce(rules netpol.Rules, subnets []netip.Prefix, _ bool) (string, error) {
	id, overlay := pp.p.network()
	if id == "" {
		return "", errNoNetwork
	}
	eps, err := pp.p.hns.NetworkEndpoints(id)
	if err != nil {
		return "", err
	}
	pods := map[netip.Addr]string{}
	for key, pr := range rules.Pods {
		for _, ip := range pr.IPs {
			pods[ip] = key
		}
	}
	host := nodeAddresses(subnets, overlay)
	var written []string
	for _, ep := range eps {
		if !podEndpoint(&ep, subnets, append(host, sourceVIPs(subnets, overlay)...)) {
			continue
		}
		want, pod := unknownEndpointACLs(), ""
		for _, ip := range ep.IPs() {
			if key, ok := pods[ip]; ok {
				want, pod = podACLs(rules.Pods[key], host), key
				break
			}
		}
		changed, err := pp.p.setACLs(&ep, want)
		if err != nil {
			return strings.Join(written, ", "), err
		}
		if changed {
			written = append(written, cmp.Or(pod, "unknown endpoint "+ep.Name)+": "+strconv.Itoa(len(want))+" ACLs")
		}
	}
	slices.Sort(written)
	return strings.Join(written, ", "), nil
}

// Remove implements daemon.PolicyPlane: weft's ACLs leave every endpoint of the network.
// Before the plane has its network, they leave when it adopts it (at its Prepare).
func (pp *NetworkPolicy) Remove() error {
	pp.p.mu.Lock()
	id := pp.p.networkID
	if id == "" {
		pp.p.clearACLs = true
	}
	pp.p.mu.Unlock()
	if id == "" {
		return nil
	}
	return pp.p.removeACLs(id)
}

// network is the network's ID, "" before the plane made or adopted it, and whether it is
// an Overlay network.
func (p *Plane) network() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.networkID, p.networkOverlay
}

// removeACLs takes weft's ACLs off every endpoint of the network id.
func (p *Plane) removeACLs(id string) error {
	eps, err := p.hns.NetworkEndpoints(id)
	if err != nil {
		return err
	}
	var errs []error
	for _, ep := range eps {
		if ep.Flags&EndpointRemote == 0 {
			if _, err := p.setACLs(&ep, nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// setACLs makes weft's ACLs on ep want, keeping the ACLs that are not weft's, and reports
// whether it wrote.
func (p *Plane) setACLs(ep *HostComputeEndpoint, want []Policy) (bool, error) {
	var mine, others []Policy
	for _, pol := range ep.Policies {
		if pol.Type != PolicyACL {
			continue
		}
		var s ACLSettings
		if err := pol.Decode(&s); err == nil && (s.Priority == aclAllow || s.Priority == aclLast) {
			mine = append(mine, pol)
		} else {
			others = append(others, pol)
		}
	}
	if sameACLs(mine, want) {
		return false, nil
	}
	req := EndpointPolicyRequest(RequestUpdate, append(others, want...)...)
	if len(others) == 0 && len(want) == 0 {
		req = EndpointPolicyRequest(RequestRemove, mine...) // an Update of nothing changes nothing
	}
	if err := p.hns.ModifyEndpointSettings(ep.ID, req); err != nil {
		return false, fmt.Errorf("ACLs of HNS endpoint %s (%s): %w", ep.Name, ep.ID, err)
	}
	return true, nil
}

// sameACLs says whether a and b hold the same ACL rules, in any order.
func sameACLs(a, b []Policy) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(ps []Policy) []string {
		out := make([]string, 0, len(ps))
		for _, p := range ps {
			var s ACLSettings
			_ = p.Decode(&s) // one that does not decode compares as the zero rule, and differs
			out = append(out, fmt.Sprintf("%+v", s))
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// nodeAddresses are the node's own addresses on its pod subnets, which a pod's ingress always
// allows: the gateway, and an L2Bridge network's host endpoint (.2; on Overlay .2 is a pod's).
func nodeAddresses(subnets []netip.Prefix, overlay bool) []netip.Addr {
	var out []netip.Addr
	for _, sn := range subnets {
		out = append(out, gateway(sn))
		if !overlay {
			out = append(out, hostEndpointIP(sn))
		}
	}
	return out
}

// sourceVIPs are the Overlay's source VIPs: kube-proxy's endpoint, no pod's. Not allowed in:
// what kube-proxy sources from it comes from anywhere.
func sourceVIPs(subnets []netip.Prefix, overlay bool) []netip.Addr {
	var out []netip.Addr
	for _, sn := range subnets {
		if overlay {
			out = append(out, SourceVIP(sn))
		}
	}
	return out
}

// podEndpoint says whether ep may be a pod's: local, with an address of subnets that is not
// one of the node's own (host).
func podEndpoint(ep *HostComputeEndpoint, subnets []netip.Prefix, host []netip.Addr) bool {
	if ep.Flags&EndpointRemote != 0 {
		return false
	}
	ips := ep.IPs()
	if slices.ContainsFunc(ips, func(a netip.Addr) bool { return slices.Contains(host, a) }) {
		return false
	}
	return slices.ContainsFunc(ips, func(a netip.Addr) bool {
		return slices.ContainsFunc(subnets, func(sn netip.Prefix) bool { return sn.Contains(a) })
	})
}

// unknownEndpointACLs block an endpoint both ways: the ACLs of an endpoint whose pod weftd
// does not know yet, the same the CNI plugin gives every new pod's endpoint when NetworkPolicy
// is on (hnsfile.ClosedEndpointACLs).
func unknownEndpointACLs() []Policy {
	var out []Policy
	for _, raw := range hnsfile.ClosedEndpointACLs() {
		var p Policy
		if err := json.Unmarshal(raw, &p); err != nil {
			panic(fmt.Sprintf("windows: hnsfile's closed ACL %s: %v", raw, err)) // a constant
		}
		out = append(out, p)
	}
	return out
}

// podACLs are the ACL policies that enforce pr on the pod's endpoint, on a node whose own
// addresses on the pod network are host (allowed in); none when pr isolates neither
// direction.
func podACLs(pr netpol.PodRules, host []netip.Addr) []Policy {
	if pr.Ingress == nil && pr.Egress == nil {
		return nil
	}
	out := directionACLs(ACLIn, pr.Ingress, host)
	return append(out, directionACLs(ACLOut, pr.Egress, nil)...)
}

// directionACLs are one direction's ACLs: d's allow rules and a block of the rest, or an
// allow of everything when d is nil (not isolated). Peers are the remote end, ports the
// destination's: the pod's own for In.
func directionACLs(dir string, d *netpol.Direction, allowed []netip.Addr) []Policy {
	rule := func(remote, protocol, ports string, action string, prio uint16) Policy {
		s := ACLSettings{Action: action, Direction: dir, RemoteAddresses: remote, Protocols: protocol, RuleType: "Switch", Priority: prio}
		if dir == ACLIn {
			s.LocalPorts = ports
		} else {
			s.RemotePorts = ports
		}
		return ACLPolicy(s)
	}
	if d == nil {
		return []Policy{rule("", "", "", ACLAllow, aclLast)}
	}
	var out []Policy
	if len(allowed) > 0 {
		var as []string
		for _, a := range allowed {
			as = append(as, a.String())
		}
		out = append(out, rule(strings.Join(as, ","), "", "", ACLAllow, aclAllow))
	}
	for _, r := range d.Allow {
		remotes := []string{""}
		if !r.Any {
			remotes = remoteLists(r.Peers)
		}
		for _, remote := range remotes {
			if len(r.Ports) == 0 {
				out = append(out, rule(remote, "", "", ACLAllow, aclAllow))
			}
			for _, p := range r.Ports {
				out = append(out, rule(remote, protocolNumber(p.Protocol), portList(p), ACLAllow, aclAllow))
			}
		}
	}
	return append(out, rule("", "", "", ACLBlock, aclLast))
}

// remoteLists are the address lists of peers, one per family that has any: the prefixes
// that cover each range exactly.
func remoteLists(peers []netpol.Range) []string {
	var v4, v6 []string
	for _, r := range peers {
		for _, p := range r.Prefixes() {
			if p.Addr().Is4() {
				v4 = append(v4, p.String())
			} else {
				v6 = append(v6, p.String())
			}
		}
	}
	var out []string
	for _, l := range [][]string{v4, v6} {
		if len(l) > 0 {
			out = append(out, strings.Join(l, ","))
		}
	}
	return out
}

// protocolNumber is a protocol's IP protocol number, as ACLs name it.
func protocolNumber(p netpol.Protocol) string {
	switch p {
	case netpol.UDP:
		return "17"
	case netpol.SCTP:
		return "132"
	}
	return "6"
}

// portList is a port's list in an ACL: "" for every port, "80", or "8000-8080".
func portList(p netpol.Port) string {
	switch {
	case p.From == 0:
		return ""
	case p.From == p.To:
		return strconv.Itoa(int(p.From))
	}
	return fmt.Sprintf("%d-%d", p.From, p.To)
}
