package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/weftnet/weft/netpol"
)

// TableName is the name of weft's policy table, "table inet weft_policy".
const TableName = "weft_policy"

// The names of the table's fixed parts.
const (
	baseChain = "forward"
	podsSet   = "pods"    // + "4" or "6"
	ingress   = "ingress" // map, + "4" or "6"
	egress    = "egress"  // map, + "4" or "6"
)

// Table is the table as wanted: what Build makes of a node's Rules, and what the Linux
// side writes and compares with the kernel's.
type Table struct {
	// Subnets are the node's pod subnets: an address of one that is no known pod's gets
	// nothing forwarded.
	Subnets []netip.Prefix
	// Sets are the table's address sets by name: the local pods' and each rule's peers.
	Sets map[string]Set
	// Maps are the verdict maps by name: a pod address to the name of its chain.
	Maps map[string]VMap
	// Chains are the chains jumped to from the maps, by name, with their rules in order.
	Chains map[string][]Rule
}

// Set is an address set of one family; Interval sets hold ranges, the others single
// addresses (From == To).
type Set struct {
	V6       bool
	Interval bool
	Elems    []netpol.Range
}

// VMap is a verdict map of one family from an address to the chain it jumps to.
type VMap struct {
	V6    bool
	Elems map[netip.Addr]string
}

// Rule is one rule of a pod's chain: the peer set it matches the other end's address
// against (none: any address of family V6's), on a port (none: any), then Verdict. A "drop"
// rule matches everything: it ends every chain.
type Rule struct {
	V6      bool   // the family of the addresses it matches
	Dir     string // "in": the peer is the source; "out": the destination
	PeerSet string // the set of peers; "" for any peer
	Port    *netpol.Port
	Verdict string // "return" (allowed) or "drop"
}

// String is the rule as nft would show it, roughly; it is kept in the rule's user data so that
// a rule read from the kernel is compared with the wanted one by it.
func (r Rule) String() string {
	if r.Verdict == "drop" {
		return "counter drop"
	}
	var b strings.Builder
	fam := "ip"
	if r.V6 {
		fam = "ip6"
	}
	peer := "saddr"
	if r.Dir == "out" {
		peer = "daddr"
	}
	if r.PeerSet != "" {
		fmt.Fprintf(&b, "%s %s @%s ", fam, peer, r.PeerSet)
	} else {
		fmt.Fprintf(&b, "meta nfproto %s ", map[bool]string{false: "ipv4", true: "ipv6"}[r.V6])
	}
	if p := r.Port; p != nil {
		fmt.Fprintf(&b, "meta l4proto %s ", strings.ToLower(string(p.Protocol)))
		switch {
		case p.From == 0:
		case p.From == p.To:
			fmt.Fprintf(&b, "th dport %d ", p.From)
		default:
			fmt.Fprintf(&b, "th dport %d-%d ", p.From, p.To)
		}
	}
	b.WriteString(r.Verdict)
	return b.String()
}

// Build is the table that enforces rules on a node whose pod subnets are subnets.
func Build(rules netpol.Rules, subnets []netip.Prefix) Table {
	t := Table{Subnets: subnets, Sets: map[string]Set{}, Maps: map[string]VMap{}, Chains: map[string][]Rule{}}
	for _, v6 := range []bool{false, true} {
		f := famSuffix(v6)
		t.Sets[podsSet+f] = Set{V6: v6}
		t.Maps[ingress+f] = VMap{V6: v6, Elems: map[netip.Addr]string{}}
		t.Maps[egress+f] = VMap{V6: v6, Elems: map[netip.Addr]string{}}
	}
	bySource := map[string]sourceSets{}
	for _, key := range slices.Sorted(maps.Keys(rules.Pods)) {
		pr := rules.Pods[key]
		id := shortID(key)
		for _, ip := range pr.IPs {
			f := famSuffix(ip.Is6())
			s := t.Sets[podsSet+f]
			s.Elems = append(s.Elems, netpol.Range{From: ip, To: ip})
			t.Sets[podsSet+f] = s
		}
		for _, d := range []struct {
			dir, vmap string
			rules     *netpol.Direction
		}{{"in", ingress, pr.Ingress}, {"out", egress, pr.Egress}} {
			if d.rules == nil {
				continue
			}
			chain := d.dir + "-" + id
			t.Chains[chain] = t.chainFor(chain, d.dir, *d.rules, bySource)
			for _, ip := range pr.IPs {
				t.Maps[d.vmap+famSuffix(ip.Is6())].Elems[ip] = chain
			}
		}
	}
	for name, s := range t.Sets {
		slices.SortFunc(s.Elems, func(a, b netpol.Range) int { return a.From.Compare(b.From) })
		t.Sets[name] = s
	}
	return t
}

// chainFor is the rules of the chain named chain for one direction of a pod, adding the
// sets of their peers to t: per allowed rule and family, one rule for each port (or one
// for any port), then a drop. A rule's peers are one set per policy rule it comes from
// (netpol.Rule.Source), which every pod the rule applies to shares: the table grows with the
// policies' peers, not with peers times selected pods, and a peer that changes is an element
// of one set.
func (t *Table) chainFor(chain, dir string, d netpol.Direction, bySource map[string]sourceSets) []Rule {
	var out []Rule
	for i, r := range d.Allow {
		names := [2]string{}
		if !r.Any {
			names = t.peerSets(chain, i, r, bySource)
		}
		for f, v6 := range []bool{false, true} {
			if len(r.Ports) == 0 {
				out = append(out, Rule{V6: v6, Dir: dir, PeerSet: names[f], Verdict: "return"})
			}
			for _, p := range r.Ports {
				out = append(out, Rule{V6: v6, Dir: dir, PeerSet: names[f], Port: &p, Verdict: "return"})
			}
		}
	}
	return append(out, Rule{Dir: dir, Verdict: "drop"})
}

// sourceSets are the peer sets (IPv4's, IPv6's) made for a policy rule, and its peers.
type sourceSets struct {
	peers []netpol.Range
	names [2]string
}

// peerSets names the sets of r's peers, IPv4's and IPv6's, adding them to t. A rule's peers
// are one pair of sets per policy rule it comes from (netpol.Rule.Source), which every pod the
// rule applies to shares: the table grows with the policies' peers, not with peers times
// selected pods, and a peer that changes is an element of one set. Compile shares a source's
// Peers between pods, so a source seen before costs a comparison of slice headers.
func (t *Table) peerSets(chain string, i int, r netpol.Rule, bySource map[string]sourceSets) [2]string {
	if seen, ok := bySource[r.Source]; ok && r.Source != "" && sameRanges(seen.peers, r.Peers) {
		return seen.names
	}
	var names [2]string
	for f, v6 := range []bool{false, true} {
		var elems []netpol.Range
		for _, p := range r.Peers {
			if p.From.Is6() == v6 {
				elems = append(elems, p)
			}
		}
		names[f] = "p-" + shortID(r.Source) + "-" + famSuffix(v6)
		if _, taken := t.Sets[names[f]]; r.Source == "" || taken {
			// No source, or a source whose peers differ (rules not from Compile): the chain's own.
			names[f] = fmt.Sprintf("%s-%d-%s", chain, i, famSuffix(v6))
		}
		t.Sets[names[f]] = Set{V6: v6, Interval: true, Elems: elems}
	}
	if _, ok := bySource[r.Source]; !ok && r.Source != "" {
		bySource[r.Source] = sourceSets{peers: r.Peers, names: names}
	}
	return names
}

// sameRanges reports whether a and b hold the same ranges: at once when they are one slice.
func sameRanges(a, b []netpol.Range) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.Equal(a, b)
}

// shortID names a pod's chains, and a policy rule's peer sets: short, as set names must be (32
// bytes on older kernels), and the same on every run for the same pod or rule.
func shortID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

func famSuffix(v6 bool) string {
	if v6 {
		return "6"
	}
	return "4"
}

// BaseRule is a rule of the forward chain, which sends each packet to the chains of the
// pods at its two ends.
type BaseRule struct {
	Kind   string       // one of the Base* kinds
	V6     bool         // the family of Subnet and of the maps
	Subnet netip.Prefix // BaseUnknownDst, BaseUnknownSrc: the node's pod subnet
}

// The kinds of BaseRule.
const (
	BaseEstablished = "established" // ct state established,related accept
	BaseUnknownDst  = "unknown-dst" // to an address of Subnet that is no known pod: drop
	BaseUnknownSrc  = "unknown-src" // from one: drop
	BaseIngress     = "ingress"     // the destination's ingress chain, if it is isolated
	BaseEgress      = "egress"      // the source's egress chain, if it is isolated
)

// BaseRules is the forward chain's rules.
func (t Table) BaseRules() []BaseRule {
	out := []BaseRule{{Kind: BaseEstablished}}
	for _, v6 := range []bool{false, true} {
		for _, sn := range t.Subnets {
			if sn.Addr().Is6() == v6 {
				out = append(out, BaseRule{Kind: BaseUnknownDst, V6: v6, Subnet: sn.Masked()},
					BaseRule{Kind: BaseUnknownSrc, V6: v6, Subnet: sn.Masked()})
			}
		}
		out = append(out, BaseRule{Kind: BaseIngress, V6: v6}, BaseRule{Kind: BaseEgress, V6: v6})
	}
	return out
}

// String is the rule as nft would show it, roughly (see Rule.String).
func (r BaseRule) String() string {
	fam, f := "ip", famSuffix(r.V6)
	if r.V6 {
		fam = "ip6"
	}
	switch r.Kind {
	case BaseEstablished:
		return "ct state established,related accept"
	case BaseUnknownDst:
		return fmt.Sprintf("%s daddr %s %s daddr != @%s counter drop", fam, r.Subnet, fam, podsSet+f)
	case BaseUnknownSrc:
		return fmt.Sprintf("%s saddr %s %s saddr != @%s counter drop", fam, r.Subnet, fam, podsSet+f)
	case BaseIngress:
		return fmt.Sprintf("%s daddr vmap @%s", fam, ingress+f)
	case BaseEgress:
		return fmt.Sprintf("%s saddr vmap @%s", fam, egress+f)
	}
	return "unknown rule kind " + r.Kind
}
