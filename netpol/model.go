package netpol

import "net/netip"

// Pod is what policy needs of a Pod: its namespace, name and labels, its addresses (both
// families, status.podIPs), its node, and the named ports of its containers. A pod on the
// host network, or with no address yet, is not a Pod here.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	IPs             []netip.Addr
	Node            string
	Ports           []NamedPort
}

// NamedPort is a container port that has a name.
type NamedPort struct {
	Name     string
	Protocol Protocol
	Port     uint16
}

// Namespace is what policy needs of a Namespace: its name and labels (the API server sets
// kubernetes.io/metadata.name on every one).
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Protocol is a port's protocol as the API names it: TCP, UDP or SCTP.
type Protocol string

// The protocols of the API (the empty protocol of a NetworkPolicyPort means TCP).
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Rules is what one node enforces: the rules of each of its pods, by the pod's
// "namespace/name", and the policies refused.
type Rules struct {
	Pods    map[string]PodRules
	Refused []Refusal
}

// PodRules is one local pod's: its addresses and, per direction, nil when that direction is
// not isolated (everything allowed), else what it allows (nothing, when Allow is empty).
type PodRules struct {
	IPs      []netip.Addr
	Ingress  *Direction
	Egress   *Direction
	Policies []string // the "namespace/name" of every policy that selects the pod, sorted
}

// Direction is an isolated direction: a packet passes when any Allow rule matches it.
type Direction struct {
	Allow []Rule
}

// Rule allows traffic with any of Peers (every peer when Any) on any of Ports (every port
// and protocol when Ports is empty). Peers is normalized: sorted, with no range overlapping
// or adjacent to another of its family. A Rule that can match nothing (no peers, not Any) is
// dropped by Compile.
type Rule struct {
	Any   bool
	Peers []Range
	Ports []Port
	// Source names the policy rule it comes from ("namespace/name spec.ingress[0]", and the
	// port of an egress named port's): the same for every pod the rule applies to, with the
	// same Peers, and from one Compile to the next, so that a data plane can keep one set of
	// its peers, rewritten element by element as they change.
	Source string
}

// Range is the addresses from From to To, both included, of one family.
type Range struct {
	From, To netip.Addr
}

// Prefixes are the fewest prefixes that hold exactly the addresses of r, in order.
func (r Range) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for from := r.From; ; {
		p := netip.PrefixFrom(from, from.BitLen())
		for bits := from.BitLen() - 1; bits >= 0; bits-- {
			q := netip.PrefixFrom(from, bits).Masked()
			if q.Addr() != from || prefixRange(q).To.Compare(r.To) > 0 {
				break
			}
			p = q
		}
		out = append(out, p)
		last := prefixRange(p).To
		if last.Compare(r.To) >= 0 {
			return out
		}
		from = last.Next()
	}
}

// Port is the ports From to To, both included, of one protocol; From 0 means every port of
// that protocol.
type Port struct {
	Protocol Protocol
	From, To uint16
}

// Refusal is a policy weft cannot enforce as written, and why. The pods it selects are
// denied in the directions of its policyTypes, as though it allowed nothing.
type Refusal struct {
	Policy string // "namespace/name"
	Reason string
}
