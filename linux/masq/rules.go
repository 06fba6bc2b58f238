package masq

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Rules is what the masquerade is built from. A zero Network (or IPv6Network)
// disables that family: weft then keeps no masquerade rules for it.
type Rules struct {
	Network, Subnet         netip.Prefix // IPv4 cluster network and this node's subnet in it
	IPv6Network, IPv6Subnet netip.Prefix // IPv6 cluster network and this node's subnet in it
	// NotFullyRandom masquerades keeping source ports where it can, without fully-random
	// (flanneld's --ip-masq-fully-random-disable): for kernels or middleboxes that want it.
	NotFullyRandom bool
}

// KubeProxyMark is the bit kube-proxy sets on packets it wants masqueraded;
// it masquerades them itself, so weft must not do it a second time.
const KubeProxyMark uint32 = 0x4000

// Comments carried as userdata by each rule. They are what a human reading
// `nft list ruleset` sees, and they are also compared with the kernel's so that
// a rule edited by hand is noticed even if its expressions still parse.
const (
	commentKubeProxy   = "weft masq: kube-proxy marked (0x4000), kube-proxy masquerades it"
	commentWithin      = "weft masq: within the cluster network, never masqueraded"
	commentToOutside   = "weft masq: pods to outside the cluster network"
	commentToOwnPods   = "weft masq: outside to this node's pods, keep the client address"
	commentToOtherPods = "weft masq: outside to other nodes' pods, so replies return via this node"
	commentFromPods    = "weft forward: from the pod network (--iptables-forward-rules)"
	commentToPods      = "weft forward: to the pod network (--iptables-forward-rules)"
)

// multicast returns the family's multicast range. Multicast is never
// masqueraded, as flannel does: it is not routed out of the cluster the way
// unicast is, and receivers key on its source. A function rather than a
// package variable so the package holds no mutable state.
func multicast(v6 bool) netip.Prefix {
	if v6 {
		return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xff}), 8)
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{224}), 4)
}

// addrField says which address of the IP header a match looks at.
type addrField uint8

const (
	srcAddr addrField = iota + 1
	dstAddr
)

// addrMatch is "ip saddr [!=] prefix" or "ip daddr [!=] prefix".
type addrMatch struct {
	field  addrField
	not    bool
	prefix netip.Prefix
}

// action is what a rule does with a packet it matches.
type action uint8

const (
	actReturn          action = iota + 1
	actMasquerade             // fully-random
	actMasqueradePlain        // without fully-random (Rules.NotFullyRandom)
	actAccept                 // the forward chain's
)

// ruleSpec is one rule of the chain, independent of how nftables encodes it,
// so that building, decoding from the kernel and comparing stay separate and
// the building can be tested on any OS.
type ruleSpec struct {
	markMask uint32 // when non-zero: meta mark & markMask == markMask
	addrs    []addrMatch
	action   action
	comment  string
}

// equal reports whether two rules mean the same and carry the same comment.
func (s ruleSpec) equal(o ruleSpec) bool {
	return s.markMask == o.markMask && s.action == o.action && s.comment == o.comment &&
		slices.Equal(s.addrs, o.addrs)
}

// String renders the rule in nft's syntax, for logs and test failures.
func (s ruleSpec) String() string {
	var b strings.Builder
	if s.markMask != 0 {
		fmt.Fprintf(&b, "meta mark & %#x == %#x ", s.markMask, s.markMask)
	}
	for _, m := range s.addrs {
		proto := "ip"
		if m.prefix.Addr().Is6() {
			proto = "ip6"
		}
		field := "saddr"
		if m.field == dstAddr {
			field = "daddr"
		}
		op := ""
		if m.not {
			op = "!= "
		}
		fmt.Fprintf(&b, "%s %s %s%s ", proto, field, op, m.prefix)
	}
	switch s.action {
	case actReturn:
		b.WriteString("return")
	case actMasquerade:
		b.WriteString("masquerade fully-random")
	case actMasqueradePlain:
		b.WriteString("masquerade")
	case actAccept:
		b.WriteString("accept")
	default:
		fmt.Fprintf(&b, "<action %d>", s.action)
	}
	if s.comment != "" {
		fmt.Fprintf(&b, " comment %q", s.comment)
	}
	return b.String()
}

// familyRules returns the chain's rules, in order, for one family with cluster
// network n and node subnet s (both already validated and masked), masquerading with
// masq (actMasquerade or actMasqueradePlain).
func familyRules(n, s netip.Prefix, masq action) []ruleSpec {
	mcast := multicast(n.Addr().Is6())
	return []ruleSpec{
		{markMask: KubeProxyMark, action: actReturn, comment: commentKubeProxy},
		{
			addrs:   []addrMatch{{field: srcAddr, prefix: n}, {field: dstAddr, prefix: n}},
			action:  actReturn,
			comment: commentWithin,
		},
		{
			addrs:   []addrMatch{{field: srcAddr, prefix: n}, {field: dstAddr, not: true, prefix: mcast}},
			action:  masq,
			comment: commentToOutside,
		},
		// Without this return the next rule would also hide the client's
		// address from this node's own pods (s lies inside n).
		{
			addrs:   []addrMatch{{field: srcAddr, not: true, prefix: n}, {field: dstAddr, prefix: s}},
			action:  actReturn,
			comment: commentToOwnPods,
		},
		{
			addrs:   []addrMatch{{field: srcAddr, not: true, prefix: n}, {field: dstAddr, prefix: n}},
			action:  masq,
			comment: commentToOtherPods,
		},
	}
}

// forwardRules returns the forward chain's rules for cluster network n (validated and
// masked): flanneld's, which accept what comes from the pod network and what goes to it.
func forwardRules(n netip.Prefix) []ruleSpec {
	return []ruleSpec{
		{addrs: []addrMatch{{field: srcAddr, prefix: n}}, action: actAccept, comment: commentFromPods},
		{addrs: []addrMatch{{field: dstAddr, prefix: n}}, action: actAccept, comment: commentToPods},
	}
}

// familyPlan is the validated content of Rules for one family; rules is nil
// when the family is disabled.
type familyPlan struct {
	network, subnet netip.Prefix
	rules           []ruleSpec
}

// plan is the validated content of Rules.
type plan struct {
	v4, v6 familyPlan
}

// buildPlan validates r and turns it into the rules of each family. Prefixes
// are masked first because callers often hold the node subnet as its gateway
// address with the prefix length (FLANNEL_SUBNET=10.244.1.1/24).
func buildPlan(r Rules) (plan, error) {
	var p plan
	masq := actMasquerade
	if r.NotFullyRandom {
		masq = actMasqueradePlain
	}
	n4, s4, err := checkFamily("Network", "Subnet", r.Network, r.Subnet, false)
	if err != nil {
		return plan{}, err
	}
	if n4.IsValid() {
		p.v4 = familyPlan{network: n4, subnet: s4, rules: familyRules(n4, s4, masq)}
	}
	n6, s6, err := checkFamily("IPv6Network", "IPv6Subnet", r.IPv6Network, r.IPv6Subnet, true)
	if err != nil {
		return plan{}, err
	}
	if n6.IsValid() {
		p.v6 = familyPlan{network: n6, subnet: s6, rules: familyRules(n6, s6, masq)}
	}
	return p, nil
}

// checkFamily validates one family's pair of prefixes; it returns zero
// prefixes when the family is disabled.
func checkFamily(netName, subName string, n, s netip.Prefix, v6 bool) (netip.Prefix, netip.Prefix, error) {
	if !n.IsValid() {
		if s.IsValid() {
			return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("masq: %s %s is set but %s is not", subName, s, netName)
		}
		return netip.Prefix{}, netip.Prefix{}, nil
	}
	n, err := checkNetwork(netName, n, v6)
	if err != nil {
		return netip.Prefix{}, netip.Prefix{}, err
	}
	if !s.IsValid() {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("masq: %s %s is set but %s is not", netName, n, subName)
	}
	if !isFamily(s, v6) {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("masq: %s %s is not an %s prefix", subName, s, familyName(v6))
	}
	s = s.Masked()
	if s.Bits() < n.Bits() || !n.Contains(s.Addr()) {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("masq: %s %s is not inside %s %s", subName, s, netName, n)
	}
	return n, s, nil
}

// checkNetwork validates a cluster network of the family v6 says and masks it.
func checkNetwork(name string, n netip.Prefix, v6 bool) (netip.Prefix, error) {
	if !isFamily(n, v6) {
		return netip.Prefix{}, fmt.Errorf("masq: %s %s is not an %s prefix", name, n, familyName(v6))
	}
	if n.Bits() == 0 {
		// With everything inside the cluster network nothing would ever be
		// masqueraded, and everything forwarded accepted; that is a configuration
		// mistake, not a wish.
		return netip.Prefix{}, fmt.Errorf("masq: %s %s covers every address", name, n)
	}
	return n.Masked(), nil
}

func isFamily(p netip.Prefix, v6 bool) bool {
	a := p.Addr()
	if v6 {
		return a.Is6() && !a.Is4In6()
	}
	return a.Is4()
}

func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}
