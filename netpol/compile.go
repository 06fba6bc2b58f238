package netpol

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Cluster is the cluster as policy sees it.
type Cluster struct {
	Pods       []Pod                         // every pod of the cluster with an address (both families), any node
	Namespaces map[string]Namespace          // by name
	Policies   []*networkingv1.NetworkPolicy // k8s.io/api/networking/v1
}

// Options is what the data plane can express.
type Options struct {
	SCTP bool // the kernel (or HNS) can match SCTP ports
}

// Compile returns the Rules that node enforces: an entry in Rules.Pods for every pod of c on
// node (keyed "namespace/name"), isolated or not, and a Refusal for every policy of c that
// weft cannot enforce as written, whatever its node.
//
// The Rules share slices (Peers, Ports) between pods and rules: treat them as read-only.
func Compile(c Cluster, node string, opts Options) Rules {
	x := newCompiler(c)
	policies := make([]*policy, 0, len(c.Policies))
	for _, np := range c.Policies {
		if np != nil {
			policies = append(policies, parsePolicy(np, opts))
		}
	}
	slices.SortStableFunc(policies, func(a, b *policy) int { return strings.Compare(a.key, b.key) })

	out := Rules{Pods: map[string]PodRules{}}
	for _, p := range policies {
		if len(p.problems) > 0 {
			out.Refused = append(out.Refused, Refusal{Policy: p.key, Reason: strings.Join(p.problems, "; ")})
		}
	}

	var local []int
	localByNamespace := map[string][]int{} // positions in local
	for i := range c.Pods {
		if c.Pods[i].Node == node {
			localByNamespace[c.Pods[i].Namespace] = append(localByNamespace[c.Pods[i].Namespace], len(local))
			local = append(local, i)
		}
	}
	selecting := make([][]*policy, len(local)) // by position in local, in policy order
	for _, p := range policies {
		for _, l := range localByNamespace[p.namespace] {
			if p.selects(c.Pods[local[l]].Labels) {
				selecting[l] = append(selecting[l], p)
			}
		}
	}

	for l, i := range local {
		pod := &c.Pods[i]
		pr := PodRules{IPs: slices.Clone(pod.IPs)}
		for _, p := range selecting[l] {
			pr.Policies = append(pr.Policies, p.key)
			if p.ingress {
				if pr.Ingress == nil {
					pr.Ingress = &Direction{}
				}
				pr.Ingress.Allow = x.appendIngress(pr.Ingress.Allow, p, pod)
			}
			if p.egress {
				if pr.Egress == nil {
					pr.Egress = &Direction{}
				}
				pr.Egress.Allow = append(pr.Egress.Allow, x.egressRules(p)...)
			}
		}
		out.Pods[pod.Namespace+"/"+pod.Name] = pr
	}
	return out
}

// policy is a NetworkPolicy parsed and checked, its peers not yet resolved to addresses.
type policy struct {
	key, namespace  string
	selector        labels.Selector // nil when spec.podSelector is invalid
	ingress, egress bool            // the directions it isolates
	problems        []string        // why it is refused; a refused policy allows nothing
	ingressSpecs    []ruleSpec      // of the directions it isolates only
	egressSpecs     []ruleSpec

	// Filled by the compiler the first time a local pod needs them.
	resolved      bool
	ingressRules  []ingressRule
	egressResults []Rule
}

// selects reports whether the policy applies to a pod of its namespace with these labels. A
// policy whose podSelector cannot be parsed selects every pod of its namespace: it is refused,
// and refusal fails closed.
func (p *policy) selects(podLabels map[string]string) bool {
	return p.selector == nil || p.selector.Matches(labels.Set(podLabels))
}

func (p *policy) refuse(format string, args ...any) {
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

// ruleSpec is one ingress or egress rule, parsed.
type ruleSpec struct {
	any      bool // no peers: every peer
	peers    []peerSpec
	ports    []Port      // the numeric and whole-protocol entries
	named    []namedPort // the named entries
	hasPorts bool        // ports were given, so a rule none of whose ports resolves allows nothing
	source   string      // Rule.Source
}

// peerSpec is one NetworkPolicyPeer: pods chosen by selectors, or addresses (block).
type peerSpec struct {
	isBlock bool
	block   []Range // ipBlock.cidr less its excepts, normalized

	pods       labels.Selector // every pod when only namespaceSelector was given
	namespaces labels.Selector // nil: the policy's own namespace
}

// namedPort is a NetworkPolicyPort given by name, to be resolved on the pod receiving traffic.
type namedPort struct {
	name     string
	protocol Protocol
}

// parsePolicy checks np as the API server would and parses what Compile needs of it.
func parsePolicy(np *networkingv1.NetworkPolicy, opts Options) *policy {
	p := &policy{key: np.Namespace + "/" + np.Name, namespace: np.Namespace}
	spec := &np.Spec
	if sel, err := metav1.LabelSelectorAsSelector(&spec.PodSelector); err != nil {
		p.refuse("spec.podSelector: %v", err)
	} else {
		p.selector = sel
	}

	switch {
	case len(spec.PolicyTypes) == 0:
		// The API server defaults it so; an object that skipped defaulting gets the same.
		p.ingress, p.egress = true, len(spec.Egress) > 0
	case len(spec.PolicyTypes) > 2:
		p.refuse("spec.policyTypes: %d values, more than Ingress and Egress", len(spec.PolicyTypes))
	}
	for i, t := range spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			p.ingress = true
		case networkingv1.PolicyTypeEgress:
			p.egress = true
		default:
			// Not knowing what was meant, isolate both ways.
			p.refuse("spec.policyTypes[%d]: unsupported value %q (want Ingress or Egress)", i, t)
			p.ingress, p.egress = true, true
		}
	}

	// Rules of a direction the policy does not isolate are checked (the API server would
	// reject them) but not kept, and what the data plane lacks matters only where enforced.
	for i, r := range spec.Ingress {
		s := p.parseRule(rulePath{"ingress", "from", i}, r.Ports, r.From, p.ingress && !opts.SCTP)
		if p.ingress {
			s.source = p.key + " spec.ingress[" + strconv.Itoa(i) + "]"
			p.ingressSpecs = append(p.ingressSpecs, s)
		}
	}
	for i, r := range spec.Egress {
		s := p.parseRule(rulePath{"egress", "to", i}, r.Ports, r.To, p.egress && !opts.SCTP)
		if p.egress {
			s.source = p.key + " spec.egress[" + strconv.Itoa(i) + "]"
			p.egressSpecs = append(p.egressSpecs, s)
		}
	}
	return p
}

// rulePath names a rule of a policy, and its ports and peers, in refusals; formatting waits
// until something is refused.
type rulePath struct {
	direction, peers string // "ingress", "from"
	index            int
}

func (r rulePath) port(i int) string {
	return fmt.Sprintf("spec.%s[%d].ports[%d]", r.direction, r.index, i)
}

func (r rulePath) peer(i int) string {
	return fmt.Sprintf("spec.%s[%d].%s[%d]", r.direction, r.index, r.peers, i)
}

func (p *policy) parseRule(path rulePath, ports []networkingv1.NetworkPolicyPort, peers []networkingv1.NetworkPolicyPeer, refuseSCTP bool) ruleSpec {
	s := ruleSpec{any: len(peers) == 0, hasPorts: len(ports) > 0}
	for i, pp := range ports {
		protocol := TCP
		if pp.Protocol != nil {
			protocol = Protocol(*pp.Protocol)
		}
		switch protocol {
		case TCP, UDP:
		case SCTP:
			if refuseSCTP {
				p.refuse("%s.protocol: SCTP, which this node's data plane cannot match", path.port(i))
			}
		default:
			p.refuse("%s.protocol: unsupported value %q (want TCP, UDP or SCTP)", path.port(i), protocol)
		}
		switch {
		case pp.Port == nil && pp.EndPort != nil:
			p.refuse("%s.endPort: %d given without port", path.port(i), *pp.EndPort)
		case pp.Port == nil:
			s.ports = append(s.ports, Port{Protocol: protocol})
		case pp.Port.Type == intstr.String:
			// endPort with a named port is rejected by the API server; ignored here.
			if errs := validation.IsValidPortName(pp.Port.StrVal); len(errs) > 0 {
				p.refuse("%s.port: invalid port name %q: %s", path.port(i), pp.Port.StrVal, strings.Join(errs, ", "))
			}
			s.named = append(s.named, namedPort{name: pp.Port.StrVal, protocol: protocol})
		default:
			from := pp.Port.IntVal
			to := from
			if pp.EndPort != nil {
				to = *pp.EndPort
			}
			switch {
			case from < 1 || from > 65535:
				p.refuse("%s.port: %d is not a port number (1 to 65535)", path.port(i), from)
			case to < from || to > 65535:
				p.refuse("%s.endPort: %d is not a port number from port (%d) to 65535", path.port(i), to, from)
			default:
				s.ports = append(s.ports, Port{Protocol: protocol, From: uint16(from), To: uint16(to)})
			}
		}
	}
	for i, peer := range peers {
		s.peers = append(s.peers, p.parsePeer(path, i, peer))
	}
	return s
}

// parsePeer parses peer i of the rule at path.
func (p *policy) parsePeer(path rulePath, i int, peer networkingv1.NetworkPolicyPeer) peerSpec {
	if peer.IPBlock != nil {
		if peer.PodSelector != nil || peer.NamespaceSelector != nil {
			p.refuse("%s: ipBlock may not be given with podSelector or namespaceSelector", path.peer(i))
		}
		return peerSpec{isBlock: true, block: p.parseBlock(path, i, peer.IPBlock)}
	}
	if peer.PodSelector == nil && peer.NamespaceSelector == nil {
		p.refuse("%s: no podSelector, namespaceSelector or ipBlock", path.peer(i))
		return peerSpec{isBlock: true} // matches nothing
	}
	s := peerSpec{pods: labels.Everything()}
	if peer.PodSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		if err != nil {
			p.refuse("%s.podSelector: %v", path.peer(i), err)
		} else {
			s.pods = sel
		}
	}
	if peer.NamespaceSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
		if err != nil {
			p.refuse("%s.namespaceSelector: %v", path.peer(i), err)
		} else {
			s.namespaces = sel
		}
	}
	return s
}

// parseBlock returns the addresses of b: its CIDR less its excepts. An except that does not
// overlap the CIDR (the API server rejects it) takes nothing away. b is peer i of the rule at
// path.
func (p *policy) parseBlock(path rulePath, i int, b *networkingv1.IPBlock) []Range {
	cidr, err := parseCIDR(b.CIDR)
	if err != nil {
		p.refuse("%s.ipBlock.cidr: %v", path.peer(i), err)
		return nil
	}
	var cuts []Range
	for j, e := range b.Except {
		ex, err := parseCIDR(e)
		if err != nil {
			p.refuse("%s.ipBlock.except[%d]: %v", path.peer(i), j, err)
			continue
		}
		cuts = append(cuts, prefixRange(ex))
	}
	return subtract(prefixRange(cidr), normalizeRanges(cuts))
}

// parseCIDR parses a CIDR of an ipBlock. Host bits may be set, as the API server's legacy
// validation lets them be: the network is meant. IPv4 octets with leading zeros (net/netip
// refuses them) and IPv4-mapped IPv6 prefixes (no packet carries such an address) are errors.
func parseCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a valid CIDR: %w", s, err)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is not a valid CIDR: IPv4-mapped IPv6 address", s)
	}
	return p.Masked(), nil
}

// ingressRule is an ingress ruleSpec with its peers resolved. Its named ports depend on the
// local pod, so the final Rule is made per pod.
type ingressRule struct {
	rule  Rule // Ports holds the numeric and whole-protocol entries
	named []namedPort
}

// compiler holds what one Compile call learns of the cluster, so that each selector is
// matched once against each namespace, whatever the number of policies and rules using it.
type compiler struct {
	pods       []Pod
	namespaces map[string]Namespace
	podsByNS   map[string][]int // indices in pods
	nsNames    []string         // the namespaces with pods, sorted
	nsMatches  map[string][]string
	podMatches map[podsKey][]int
	peers      map[string]peerPods
	portIndex  map[string][]int // pods by the names of their ports, built when first needed
}

type podsKey struct{ namespace, selector string }

// peerPods is what a selector peer matches: pods (indices in compiler.pods) and their addresses.
type peerPods struct {
	pods   []int
	ranges []Range
}

func newCompiler(c Cluster) *compiler {
	x := &compiler{
		pods:       c.Pods,
		namespaces: c.Namespaces,
		podsByNS:   map[string][]int{},
		nsMatches:  map[string][]string{},
		podMatches: map[podsKey][]int{},
		peers:      map[string]peerPods{},
	}
	for i := range c.Pods {
		ns := c.Pods[i].Namespace
		if _, ok := x.podsByNS[ns]; !ok {
			x.nsNames = append(x.nsNames, ns)
		}
		x.podsByNS[ns] = append(x.podsByNS[ns], i)
	}
	slices.Sort(x.nsNames)
	return x
}

// selectNamespaces returns the namespaces with pods that sel matches.
func (x *compiler) selectNamespaces(sel labels.Selector) []string {
	key := sel.String()
	if names, ok := x.nsMatches[key]; ok {
		return names
	}
	var names []string
	for _, ns := range x.nsNames {
		if sel.Matches(labels.Set(x.namespaces[ns].Labels)) {
			names = append(names, ns)
		}
	}
	x.nsMatches[key] = names
	return names
}

// selectPods returns the pods of namespace ns that sel matches.
func (x *compiler) selectPods(ns string, sel labels.Selector) []int {
	key := podsKey{ns, sel.String()}
	if pods, ok := x.podMatches[key]; ok {
		return pods
	}
	var pods []int
	for _, i := range x.podsByNS[ns] {
		if sel.Matches(labels.Set(x.pods[i].Labels)) {
			pods = append(pods, i)
		}
	}
	x.podMatches[key] = pods
	return pods
}

// peerPods returns what a selector peer of a policy of namespace policyNS matches.
func (x *compiler) peerPods(policyNS string, s peerSpec) peerPods {
	var key string
	if s.namespaces == nil {
		key = "in\x00" + policyNS + "\x00" + s.pods.String()
	} else {
		key = "across\x00" + s.namespaces.String() + "\x00" + s.pods.String()
	}
	if pp, ok := x.peers[key]; ok {
		return pp
	}
	var pp peerPods
	if s.namespaces == nil {
		pp.pods = x.selectPods(policyNS, s.pods)
	} else {
		for _, ns := range x.selectNamespaces(s.namespaces) {
			pp.pods = append(pp.pods, x.selectPods(ns, s.pods)...)
		}
	}
	for _, i := range pp.pods {
		for _, a := range x.pods[i].IPs {
			if a = plainAddr(a); a.IsValid() {
				pp.ranges = append(pp.ranges, Range{a, a})
			}
		}
	}
	pp.ranges = normalizeRanges(pp.ranges)
	x.peers[key] = pp
	return pp
}

// rulePeers returns the addresses of a rule's peers, normalized.
func (x *compiler) rulePeers(policyNS string, s ruleSpec) []Range {
	var sets [][]Range
	for _, peer := range s.peers {
		if peer.isBlock {
			sets = append(sets, peer.block)
		} else {
			sets = append(sets, x.peerPods(policyNS, peer).ranges)
		}
	}
	if len(sets) == 1 {
		return sets[0] // already normalized, and shared read-only
	}
	return normalizeRanges(slices.Concat(sets...))
}

// resolve turns the rule specs of a policy into rules, once per Compile.
func (x *compiler) resolve(p *policy) {
	if p.resolved {
		return
	}
	p.resolved = true
	if len(p.problems) > 0 {
		return // refused: it isolates, but allows nothing
	}
	for _, s := range p.ingressSpecs {
		r := Rule{Any: s.any, Source: s.source}
		if !s.any {
			if r.Peers = x.rulePeers(p.namespace, s); len(r.Peers) == 0 {
				continue
			}
		}
		r.Ports = normalizePorts(s.ports)
		p.ingressRules = append(p.ingressRules, ingressRule{rule: r, named: s.named})
	}
	for _, s := range p.egressSpecs {
		p.egressResults = x.appendEgress(p.egressResults, p.namespace, s)
	}
}

// appendIngress appends the ingress rules of p for the local pod.
func (x *compiler) appendIngress(allow []Rule, p *policy, pod *Pod) []Rule {
	x.resolve(p)
	for _, ir := range p.ingressRules {
		if len(ir.named) == 0 {
			allow = append(allow, ir.rule)
			continue
		}
		ports := slices.Clone(ir.rule.Ports)
		for _, n := range ir.named {
			for _, np := range pod.Ports {
				if np.Name == n.name && containerProtocol(np) == n.protocol && np.Port != 0 {
					ports = append(ports, Port{Protocol: n.protocol, From: np.Port, To: np.Port})
				}
			}
		}
		if len(ports) == 0 {
			continue // every port entry was a name the pod does not have
		}
		r := ir.rule
		r.Ports = normalizePorts(ports)
		allow = append(allow, r)
	}
	return allow
}

// egressRules returns the egress rules of p, the same for every local pod.
func (x *compiler) egressRules(p *policy) []Rule {
	x.resolve(p)
	return p.egressResults
}

// appendEgress appends the rules of one egress rule spec: one for its numeric ports (or all
// ports), then one per port number its named ports resolve to.
//
// A named port is resolved on the destination, which must then be a pod of the cluster with a
// container port of that name and protocol, whatever the kind of peer; kube-network-policies
// does the same, looking the name up on the pod that owns the destination address before it
// looks at the peers. So the destinations of a named port are, for selector peers, the pods
// selected; for ipBlock peers, the pods of the cluster with an address in the block (those
// addresses only); with no peers, every pod of the cluster. An address that is no pod's never
// matches a named port.
func (x *compiler) appendEgress(out []Rule, policyNS string, s ruleSpec) []Rule {
	var peers []Range
	if !s.any {
		if peers = x.rulePeers(policyNS, s); len(peers) == 0 {
			return out
		}
	}
	if !s.hasPorts || len(s.ports) > 0 {
		out = append(out, Rule{Any: s.any, Peers: peers, Ports: normalizePorts(s.ports), Source: s.source})
	}
	if len(s.named) == 0 {
		return out
	}

	byPort := map[Port][]Range{}
	resolveOn := func(i int, n namedPort, inBlock []Range) {
		pod := &x.pods[i]
		for _, np := range pod.Ports {
			if np.Name != n.name || containerProtocol(np) != n.protocol || np.Port == 0 {
				continue
			}
			key := Port{Protocol: n.protocol, From: np.Port, To: np.Port}
			for _, a := range pod.IPs {
				a = plainAddr(a)
				if a.IsValid() && (inBlock == nil || contains(inBlock, a)) {
					byPort[key] = append(byPort[key], Range{a, a})
				}
			}
		}
	}
	for _, n := range s.named {
		if s.any {
			for _, i := range x.podsWithPort(n.name) {
				resolveOn(i, n, nil)
			}
		}
		for _, peer := range s.peers {
			switch {
			case !peer.isBlock:
				for _, i := range x.peerPods(policyNS, peer).pods {
					resolveOn(i, n, nil)
				}
			case len(peer.block) > 0:
				for _, i := range x.podsWithPort(n.name) {
					resolveOn(i, n, peer.block)
				}
			}
		}
	}
	keys := make([]Port, 0, len(byPort))
	for k := range byPort {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, comparePorts)
	for _, k := range keys {
		out = append(out, Rule{Peers: normalizeRanges(byPort[k]), Ports: []Port{k},
			Source: fmt.Sprintf("%s port %s/%d", s.source, k.Protocol, k.From)})
	}
	return out
}

// podsWithPort returns the pods (indices in pods) with a container port named name.
func (x *compiler) podsWithPort(name string) []int {
	if x.portIndex == nil {
		x.portIndex = map[string][]int{}
		for i := range x.pods {
			for j, np := range x.pods[i].Ports {
				if !slices.ContainsFunc(x.pods[i].Ports[:j], func(p NamedPort) bool { return p.Name == np.Name }) {
					x.portIndex[np.Name] = append(x.portIndex[np.Name], i)
				}
			}
		}
	}
	return x.portIndex[name]
}

// containerProtocol is a container port's protocol, TCP when unset as the API server defaults it.
func containerProtocol(np NamedPort) Protocol {
	if np.Protocol == "" {
		return TCP
	}
	return np.Protocol
}

// plainAddr is a as packets carry it: IPv4-mapped IPv6 as IPv4, no zone.
func plainAddr(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// prefixRange returns the addresses of p, which must be masked.
func prefixRange(p netip.Prefix) Range {
	from := p.Addr()
	if from.Is4() {
		b := from.As4()
		setHostBits(b[:], p.Bits())
		return Range{from, netip.AddrFrom4(b)}
	}
	b := from.As16()
	setHostBits(b[:], p.Bits())
	return Range{from, netip.AddrFrom16(b)}
}

// setHostBits sets every bit of b after the first bits.
func setHostBits(b []byte, bits int) {
	for i := range b {
		switch {
		case bits >= 8:
			bits -= 8
		case bits > 0:
			b[i] |= 0xff >> bits
			bits = 0
		default:
			b[i] = 0xff
		}
	}
}

// subtract returns the addresses of r not in cuts, which must be normalized.
func subtract(r Range, cuts []Range) []Range {
	var out []Range
	from := r.From
	for _, c := range cuts {
		if c.To.Less(from) {
			continue
		}
		if r.To.Less(c.From) {
			break
		}
		if from.Less(c.From) {
			out = append(out, Range{from, c.From.Prev()})
		}
		next := c.To.Next()
		if !next.IsValid() || r.To.Less(next) {
			return out
		}
		from = next
	}
	return append(out, Range{from, r.To})
}

// normalizeRanges sorts rs (IPv4 first, then by From) and merges the ranges of a family that
// overlap or touch, in place.
func normalizeRanges(rs []Range) []Range {
	slices.SortFunc(rs, func(a, b Range) int {
		return cmp.Or(a.From.Compare(b.From), a.To.Compare(b.To))
	})
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].To.BitLen() == r.From.BitLen() {
			next := out[n-1].To.Next()
			if !next.IsValid() || !next.Less(r.From) {
				if out[n-1].To.Less(r.To) {
					out[n-1].To = r.To
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// contains reports whether a is in rs, which must be normalized.
func contains(rs []Range, a netip.Addr) bool {
	i, found := slices.BinarySearchFunc(rs, a, func(r Range, a netip.Addr) int { return r.From.Compare(a) })
	return found || i > 0 && !rs[i-1].To.Less(a)
}

// normalizePorts returns ports sorted by protocol and From, those of a protocol merged where
// they overlap or touch, and every port of a protocol alone when one entry allows them all. It
// returns a new slice (nil for none).
func normalizePorts(ports []Port) []Port {
	if len(ports) == 0 {
		return nil
	}
	sorted := slices.Clone(ports)
	slices.SortFunc(sorted, comparePorts)
	out := sorted[:0]
	for _, p := range sorted {
		n := len(out)
		if n == 0 || out[n-1].Protocol != p.Protocol {
			out = append(out, p)
			continue
		}
		last := &out[n-1]
		switch {
		case last.From == 0: // every port already
		case int(p.From) <= int(last.To)+1:
			last.To = max(last.To, p.To)
		default:
			out = append(out, p)
		}
	}
	return out
}

func comparePorts(a, b Port) int {
	return cmp.Or(strings.Compare(string(a.Protocol), string(b.Protocol)), cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
}
