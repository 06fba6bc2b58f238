package netpol

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var addrComparer = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// ignoreSource leaves Rule.Source out of the table cases' comparisons (TestRuleSource checks it).
var ignoreSource = cmpopts.IgnoreFields(Rule{}, "Source")

// testCluster is the cluster of the table tests: three namespaces, six pods over two nodes.
// Compile runs for n1, whose pods are a/web1, a/db and b/web.
func testCluster() Cluster {
	ns := func(name, team string) Namespace {
		return Namespace{Name: name, Labels: map[string]string{"team": team, "kubernetes.io/metadata.name": name}}
	}
	pod := func(ns, name, node, app string, ports []NamedPort, ips ...string) Pod {
		p := Pod{Namespace: ns, Name: name, Node: node, Labels: map[string]string{"app": app}, Ports: ports}
		for _, s := range ips {
			p.IPs = append(p.IPs, netip.MustParseAddr(s))
		}
		return p
	}
	return Cluster{
		Namespaces: map[string]Namespace{"a": ns("a", "red"), "b": ns("b", "blue"), "c": ns("c", "red")},
		Pods: []Pod{
			pod("a", "web1", "n1", "web", []NamedPort{{"http", TCP, 8080}, {"dns", UDP, 53}}, "10.0.0.1", "fd00::1"),
			pod("a", "web2", "n2", "web", []NamedPort{{"http", TCP, 8081}}, "10.0.0.2", "fd00::2"),
			pod("a", "db", "n1", "db", nil, "10.0.0.3", "fd00::3"),
			pod("b", "web", "n1", "web", []NamedPort{{"http", "", 9090}}, "10.0.1.2", "fd00:1::2"),
			pod("b", "client", "n2", "client", nil, "10.0.1.1", "fd00:1::1"),
			pod("c", "client", "n2", "client", nil, "10.0.2.1"),
		},
	}
}

// Building policies.

type specOption func(*networkingv1.NetworkPolicySpec)

func newPolicy(ns, name string, podSelector *metav1.LabelSelector, opts ...specOption) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: *podSelector},
	}
	for _, o := range opts {
		o(&np.Spec)
	}
	return np
}

func types(ts ...networkingv1.PolicyType) specOption {
	return func(s *networkingv1.NetworkPolicySpec) { s.PolicyTypes = ts }
}

const (
	ingress = networkingv1.PolicyTypeIngress
	egress  = networkingv1.PolicyTypeEgress
)

// allowIn adds an ingress rule; from nil means from every peer, ports none every port.
func allowIn(from []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) specOption {
	return func(s *networkingv1.NetworkPolicySpec) {
		s.Ingress = append(s.Ingress, networkingv1.NetworkPolicyIngressRule{From: from, Ports: ports})
	}
}

// allowOut adds an egress rule; to nil means to every peer, ports none every port.
func allowOut(to []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) specOption {
	return func(s *networkingv1.NetworkPolicySpec) {
		s.Egress = append(s.Egress, networkingv1.NetworkPolicyEgressRule{To: to, Ports: ports})
	}
}

func peers(ps ...networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer { return ps }

func podPeer(sel *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: sel}
}

func nsPeer(sel *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: sel}
}

func bothPeer(ns, pods *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pods}
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

// match selects by labels, given as key, value, key, value...
func match(kv ...string) *metav1.LabelSelector {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		sel.MatchLabels[kv[i]] = kv[i+1]
	}
	return sel
}

func expr(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func everything() *metav1.LabelSelector { return &metav1.LabelSelector{} }

func npPort(protocol corev1.Protocol, port int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &protocol, Port: new(intstr.FromInt32(port))}
}

func npRange(protocol corev1.Protocol, port, end int32) networkingv1.NetworkPolicyPort {
	p := npPort(protocol, port)
	p.EndPort = &end
	return p
}

func npNamed(protocol corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &protocol, Port: new(intstr.FromString(name))}
}

func npAll(protocol corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &protocol}
}

// Expected rules.

func host(s string) Range {
	a := netip.MustParseAddr(s)
	return Range{a, a}
}

func span(from, to string) Range {
	return Range{netip.MustParseAddr(from), netip.MustParseAddr(to)}
}

func allow(rules ...Rule) *Direction { return &Direction{Allow: rules} }

func deny() *Direction { return &Direction{} }

func TestCompile(t *testing.T) {
	n1Pods := map[string][]netip.Addr{}
	for _, p := range testCluster().Pods {
		if p.Node == "n1" {
			n1Pods[p.Namespace+"/"+p.Name] = p.IPs
		}
	}
	if len(n1Pods) != 3 {
		t.Fatalf("test cluster has %d pods on n1, want 3", len(n1Pods))
	}
	webPeers := []Range{span("10.0.0.1", "10.0.0.2"), span("fd00::1", "fd00::2")}
	dbPeers := []Range{host("10.0.0.3"), host("fd00::3")}

	for _, tc := range []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		sctp     bool
		want     map[string]PodRules // the pods of n1 that policies select; IPs filled in
		refused  map[string][]string // by policy, what its reason must say
	}{
		{name: "no policies: nothing isolated"},
		{
			name:     "default deny ingress",
			policies: []*networkingv1.NetworkPolicy{newPolicy("a", "deny", everything(), types(ingress))},
			want: map[string]PodRules{
				"a/web1": {Ingress: deny(), Policies: []string{"a/deny"}},
				"a/db":   {Ingress: deny(), Policies: []string{"a/deny"}},
			},
		},
		{
			name:     "default deny egress",
			policies: []*networkingv1.NetworkPolicy{newPolicy("a", "deny", everything(), types(egress))},
			want: map[string]PodRules{
				"a/web1": {Egress: deny(), Policies: []string{"a/deny"}},
				"a/db":   {Egress: deny(), Policies: []string{"a/deny"}},
			},
		},
		{
			name:     "default deny both ways",
			policies: []*networkingv1.NetworkPolicy{newPolicy("b", "deny", everything(), types(ingress, egress))},
			want:     map[string]PodRules{"b/web": {Ingress: deny(), Egress: deny(), Policies: []string{"b/deny"}}},
		},
		{
			name:     "allow all ingress: one empty rule",
			policies: []*networkingv1.NetworkPolicy{newPolicy("b", "all", everything(), types(ingress), allowIn(nil))},
			want:     map[string]PodRules{"b/web": {Ingress: allow(Rule{Any: true}), Policies: []string{"b/all"}}},
		},
		{
			name:     "allow all egress: one empty rule",
			policies: []*networkingv1.NetworkPolicy{newPolicy("b", "all", everything(), types(egress), allowOut(nil))},
			want:     map[string]PodRules{"b/web": {Egress: allow(Rule{Any: true}), Policies: []string{"b/all"}}},
		},
		{
			name:     "no policyTypes, no egress rules: ingress isolated only",
			policies: []*networkingv1.NetworkPolicy{newPolicy("a", "web", match("app", "web"), allowIn(nil))},
			want:     map[string]PodRules{"a/web1": {Ingress: allow(Rule{Any: true}), Policies: []string{"a/web"}}},
		},
		{
			name:     "no policyTypes, egress rules: both ways isolated",
			policies: []*networkingv1.NetworkPolicy{newPolicy("a", "web", match("app", "web"), allowOut(nil, npPort("TCP", 443)))},
			want: map[string]PodRules{"a/web1": {
				Ingress:  deny(),
				Egress:   allow(Rule{Any: true, Ports: []Port{{TCP, 443, 443}}}),
				Policies: []string{"a/web"},
			}},
		},
		{
			name:     "policyTypes Ingress: egress rules ignored",
			policies: []*networkingv1.NetworkPolicy{newPolicy("a", "web", match("app", "web"), types(ingress), allowOut(nil))},
			want:     map[string]PodRules{"a/web1": {Ingress: deny(), Policies: []string{"a/web"}}},
		},
		{
			name: "podSelector peer: pods of the policy's namespace",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowIn(peers(podPeer(match("app", "web"))))),
			},
			want: map[string]PodRules{"a/db": {Ingress: allow(Rule{Peers: webPeers}), Policies: []string{"a/db"}}},
		},
		{
			name: "namespaceSelector peer: every pod of the namespaces",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowIn(peers(nsPeer(match("team", "red"))))),
			},
			want: map[string]PodRules{"a/db": {
				Ingress: allow(Rule{Peers: []Range{
					span("10.0.0.1", "10.0.0.3"), host("10.0.2.1"), span("fd00::1", "fd00::3"),
				}}),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "empty namespaceSelector: every namespace",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowIn(peers(nsPeer(everything())))),
			},
			want: map[string]PodRules{"a/db": {
				Ingress: allow(Rule{Peers: []Range{
					span("10.0.0.1", "10.0.0.3"), span("10.0.1.1", "10.0.1.2"), host("10.0.2.1"),
					span("fd00::1", "fd00::3"), span("fd00:1::1", "fd00:1::2"),
				}}),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "podSelector and namespaceSelector in one peer: both must match",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowIn(peers(bothPeer(match("team", "blue"), match("app", "web"))))),
			},
			want: map[string]PodRules{"a/db": {
				Ingress:  allow(Rule{Peers: []Range{host("10.0.1.2"), host("fd00:1::2")}}),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "matchExpressions, in the policy's podSelector and in peers",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "not-web", expr("app", metav1.LabelSelectorOpNotIn, "web"), allowIn(peers(bothPeer(
					expr("kubernetes.io/metadata.name", metav1.LabelSelectorOpNotIn, "a"),
					expr("app", metav1.LabelSelectorOpIn, "web", "client"),
				)))),
			},
			want: map[string]PodRules{"a/db": {
				Ingress: allow(Rule{Peers: []Range{
					span("10.0.1.1", "10.0.1.2"), host("10.0.2.1"), span("fd00:1::1", "fd00:1::2"),
				}}),
				Policies: []string{"a/not-web"},
			}},
		},
		{
			name: "ipBlock IPv4 less its excepts; an except outside it or of the other family takes nothing",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"),
					allowIn(peers(blockPeer("10.0.0.0/16", "10.0.1.0/24", "10.1.0.0/24", "fd00::/64")))),
			},
			want: map[string]PodRules{"a/db": {
				Ingress:  allow(Rule{Peers: []Range{span("10.0.0.0", "10.0.0.255"), span("10.0.2.0", "10.0.255.255")}}),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "ipBlock IPv6 less its excepts, IPv4 blocks sorted first",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowOut(peers(
					blockPeer("fd00::/120", "fd00::80/121", "fd00::10/124"),
					blockPeer("192.168.0.1/24"), // host bits set: the network is meant
				))),
			},
			want: map[string]PodRules{"a/db": {
				Ingress: deny(),
				Egress: allow(Rule{Peers: []Range{
					span("192.168.0.0", "192.168.0.255"), span("fd00::", "fd00::f"), span("fd00::20", "fd00::7f"),
				}}),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "peers normalized: sorted, overlapping and neighbouring ranges merged",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowIn(peers(
					blockPeer("10.0.0.4/31"),
					podPeer(match("app", "web")),
					blockPeer("fd00::3/128"),
					blockPeer("10.0.0.0/30"),
				))),
			},
			want: map[string]PodRules{"a/db": {
				Ingress:  allow(Rule{Peers: []Range{span("10.0.0.0", "10.0.0.5"), span("fd00::1", "fd00::3")}}),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "ports: protocols, endPort ranges, merged and sorted",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowIn(nil,
					npPort("TCP", 80), npPort("UDP", 53), npRange("TCP", 8000, 8080), npRange("TCP", 8080, 9000),
					npAll("UDP"), npPort("TCP", 81), networkingv1.NetworkPolicyPort{Port: new(intstr.FromInt32(443))},
				)),
			},
			want: map[string]PodRules{"a/db": {
				Ingress:  allow(Rule{Any: true, Ports: []Port{{TCP, 80, 81}, {TCP, 443, 443}, {TCP, 8000, 9000}, {UDP, 0, 0}}}),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "named port, ingress: resolved on the local pod, endPort ignored, nothing where it has no such port",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "http", everything(), allowIn(nil, func() networkingv1.NetworkPolicyPort {
					p := npNamed("TCP", "http")
					p.EndPort = new(int32(9000))
					return p
				}())),
			},
			want: map[string]PodRules{
				"a/web1": {Ingress: allow(Rule{Any: true, Ports: []Port{{TCP, 8080, 8080}}}), Policies: []string{"a/http"}},
				"a/db":   {Ingress: deny(), Policies: []string{"a/http"}},
			},
		},
		{
			name: "named port, ingress: the protocol must match too",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "dns", everything(), allowIn(nil, npNamed("TCP", "dns"), npNamed("UDP", "dns"))),
			},
			want: map[string]PodRules{
				"a/web1": {Ingress: allow(Rule{Any: true, Ports: []Port{{UDP, 53, 53}}}), Policies: []string{"a/dns"}},
				"a/db":   {Ingress: deny(), Policies: []string{"a/dns"}},
			},
		},
		{
			name: "named and numbered ports in one ingress rule",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "web", everything(), allowIn(peers(podPeer(match("app", "db"))), npNamed("TCP", "http"), npPort("TCP", 443))),
			},
			want: map[string]PodRules{
				"a/web1": {Ingress: allow(Rule{Peers: dbPeers, Ports: []Port{{TCP, 443, 443}, {TCP, 8080, 8080}}}), Policies: []string{"a/web"}},
				"a/db":   {Ingress: allow(Rule{Peers: dbPeers, Ports: []Port{{TCP, 443, 443}}}), Policies: []string{"a/web"}},
			},
		},
		{
			name: "named port, egress: resolved on each peer pod, one rule per port number",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), types(egress),
					allowOut(peers(podPeer(match("app", "web"))), npNamed("TCP", "http"), npPort("TCP", 443))),
			},
			want: map[string]PodRules{"a/db": {
				Egress: allow(
					Rule{Peers: webPeers, Ports: []Port{{TCP, 443, 443}}},
					Rule{Peers: []Range{host("10.0.0.1"), host("fd00::1")}, Ports: []Port{{TCP, 8080, 8080}}},
					Rule{Peers: []Range{host("10.0.0.2"), host("fd00::2")}, Ports: []Port{{TCP, 8081, 8081}}},
				),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "named port, egress to every peer: the pods of the cluster that have it",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), types(egress), allowOut(nil, npNamed("TCP", "http"))),
			},
			want: map[string]PodRules{"a/db": {
				Egress: allow(
					Rule{Peers: []Range{host("10.0.0.1"), host("fd00::1")}, Ports: []Port{{TCP, 8080, 8080}}},
					Rule{Peers: []Range{host("10.0.0.2"), host("fd00::2")}, Ports: []Port{{TCP, 8081, 8081}}},
					Rule{Peers: []Range{host("10.0.1.2"), host("fd00:1::2")}, Ports: []Port{{TCP, 9090, 9090}}},
				),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "named port, egress to an ipBlock: the pods' addresses in the block, nothing outside the cluster",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), types(egress),
					allowOut(peers(blockPeer("10.0.0.0/24", "10.0.0.2/32"), blockPeer("10.0.1.0/24")), npNamed("TCP", "http")),
					allowOut(peers(blockPeer("192.168.0.0/16")), npNamed("TCP", "http")),
				),
			},
			want: map[string]PodRules{"a/db": {
				Egress: allow(
					Rule{Peers: []Range{host("10.0.0.1")}, Ports: []Port{{TCP, 8080, 8080}}},
					Rule{Peers: []Range{host("10.0.1.2")}, Ports: []Port{{TCP, 9090, 9090}}},
				),
				Policies: []string{"a/db"},
			}},
		},
		{
			name: "a named port no peer has: the rule is dropped",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), types(egress), allowOut(peers(podPeer(match("app", "web"))), npNamed("TCP", "nope"))),
			},
			want: map[string]PodRules{"a/db": {Egress: deny(), Policies: []string{"a/db"}}},
		},
		{
			name: "a rule whose peers match no pod is dropped",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "db", match("app", "db"), allowIn(peers(podPeer(match("app", "nothing"))))),
			},
			want: map[string]PodRules{"a/db": {Ingress: deny(), Policies: []string{"a/db"}}},
		},
		{
			name: "policies selecting a pod are unioned, in order of namespace/name",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("b", "all", everything(), allowIn(nil)),
				newPolicy("a", "p2", everything(), types(ingress, egress), allowIn(nil, npPort("TCP", 80))),
				newPolicy("a", "p1", match("app", "web"), allowIn(peers(podPeer(match("app", "db"))))),
			},
			want: map[string]PodRules{
				"a/web1": {
					Ingress:  allow(Rule{Peers: dbPeers}, Rule{Any: true, Ports: []Port{{TCP, 80, 80}}}),
					Egress:   deny(),
					Policies: []string{"a/p1", "a/p2"},
				},
				"a/db":  {Ingress: allow(Rule{Any: true, Ports: []Port{{TCP, 80, 80}}}), Egress: deny(), Policies: []string{"a/p2"}},
				"b/web": {Ingress: allow(Rule{Any: true}), Policies: []string{"b/all"}},
			},
		},
		{
			name: "SCTP without data plane support: refused, its pods denied, other policies still allow",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "sctp", match("app", "web"), allowIn(peers(podPeer(match("app", "db")))), allowIn(nil, npPort("SCTP", 9))),
				newPolicy("a", "tcp", match("app", "web"), allowIn(nil, npPort("TCP", 80))),
				newPolicy("b", "sctp", everything(), types(ingress, egress), allowIn(nil), allowOut(nil, npAll("SCTP"))),
			},
			want: map[string]PodRules{
				"a/web1": {Ingress: allow(Rule{Any: true, Ports: []Port{{TCP, 80, 80}}}), Policies: []string{"a/sctp", "a/tcp"}},
				"b/web":  {Ingress: deny(), Egress: deny(), Policies: []string{"b/sctp"}},
			},
			refused: map[string][]string{
				"a/sctp": {"spec.ingress[1].ports[0].protocol", "SCTP"},
				"b/sctp": {"spec.egress[0].ports[0].protocol", "SCTP"},
			},
		},
		{
			name: "SCTP with data plane support",
			sctp: true,
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "sctp", match("app", "web"), allowIn(peers(podPeer(match("app", "db")))), allowIn(nil, npPort("SCTP", 9))),
			},
			want: map[string]PodRules{"a/web1": {
				Ingress:  allow(Rule{Peers: dbPeers}, Rule{Any: true, Ports: []Port{{SCTP, 9, 9}}}),
				Policies: []string{"a/sctp"},
			}},
		},
		{
			name: "SCTP in a direction the policy does not isolate: not refused",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("b", "in", everything(), types(ingress), allowIn(nil), allowOut(nil, npPort("SCTP", 9))),
			},
			want: map[string]PodRules{"b/web": {Ingress: allow(Rule{Any: true}), Policies: []string{"b/in"}}},
		},
		{
			name: "malformed podSelector: refused, every pod of its namespace denied",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("a", "bad", expr("app", "Matches", "web"), types(ingress), allowIn(nil)),
			},
			want: map[string]PodRules{
				"a/web1": {Ingress: deny(), Policies: []string{"a/bad"}},
				"a/db":   {Ingress: deny(), Policies: []string{"a/bad"}},
			},
			refused: map[string][]string{"a/bad": {"spec.podSelector", `"Matches"`}},
		},
		{
			name: "malformed peer selectors: refused, its pods denied",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("b", "bad", everything(), types(ingress, egress),
					allowIn(peers(podPeer(match("app", "-bad-")))),
					allowOut(peers(nsPeer(expr("team", metav1.LabelSelectorOpIn)))),
				),
			},
			want: map[string]PodRules{"b/web": {Ingress: deny(), Egress: deny(), Policies: []string{"b/bad"}}},
			refused: map[string][]string{"b/bad": {
				"spec.ingress[0].from[0].podSelector", `"-bad-"`, "spec.egress[0].to[0].namespaceSelector",
			}},
		},
		{
			name: "malformed ipBlocks and peers: refused",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("b", "cidr", everything(), allowIn(peers(blockPeer("10.0.0.0/33")))),
				newPolicy("b", "except", everything(), allowIn(peers(blockPeer("10.0.0.0/8", "nonsense")))),
				newPolicy("b", "mixed", everything(), allowIn(peers(networkingv1.NetworkPolicyPeer{
					PodSelector: everything(), IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"},
				}))),
				newPolicy("b", "mapped", everything(), allowIn(peers(blockPeer("::ffff:10.0.0.0/104")))),
				newPolicy("b", "empty", everything(), allowIn(peers(networkingv1.NetworkPolicyPeer{}))),
			},
			want: map[string]PodRules{"b/web": {
				Ingress:  deny(),
				Policies: []string{"b/cidr", "b/empty", "b/except", "b/mapped", "b/mixed"},
			}},
			refused: map[string][]string{
				"b/cidr":   {"spec.ingress[0].from[0].ipBlock.cidr", `"10.0.0.0/33"`},
				"b/except": {"spec.ingress[0].from[0].ipBlock.except[0]", `"nonsense"`},
				"b/mixed":  {"spec.ingress[0].from[0]", "ipBlock may not be given with podSelector"},
				"b/mapped": {"spec.ingress[0].from[0].ipBlock.cidr", `"::ffff:10.0.0.0/104"`},
				"b/empty":  {"spec.ingress[0].from[0]", "no podSelector, namespaceSelector or ipBlock"},
			},
		},
		{
			name: "malformed ports: refused",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("b", "ports", everything(), types(egress), allowOut(nil,
					npPort("TCP", 80), npPort("ICMP", 1), npPort("TCP", 0), npRange("UDP", 80, 70), npNamed("TCP", "no_such!"),
					networkingv1.NetworkPolicyPort{EndPort: new(int32(90))},
				)),
			},
			want: map[string]PodRules{"b/web": {Egress: deny(), Policies: []string{"b/ports"}}},
			refused: map[string][]string{"b/ports": {
				`spec.egress[0].ports[1].protocol: unsupported value "ICMP"`,
				"spec.egress[0].ports[2].port: 0",
				"spec.egress[0].ports[3].endPort: 70",
				`spec.egress[0].ports[4].port: invalid port name "no_such!"`,
				"spec.egress[0].ports[5].endPort: 90 given without port",
			}},
		},
		{
			name: "unknown policyType: refused, both ways denied",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("b", "sideways", everything(), types("Sideways"), allowIn(nil)),
			},
			want:    map[string]PodRules{"b/web": {Ingress: deny(), Egress: deny(), Policies: []string{"b/sideways"}}},
			refused: map[string][]string{"b/sideways": {"spec.policyTypes[0]", `"Sideways"`}},
		},
		{
			name: "three policyTypes: refused",
			policies: []*networkingv1.NetworkPolicy{
				newPolicy("b", "three", everything(), types(ingress, ingress, egress), allowIn(nil), allowOut(nil)),
			},
			want:    map[string]PodRules{"b/web": {Ingress: deny(), Egress: deny(), Policies: []string{"b/three"}}},
			refused: map[string][]string{"b/three": {"spec.policyTypes: 3 values"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCluster()
			c.Policies = tc.policies
			got := Compile(c, "n1", Options{SCTP: tc.sctp})

			want := map[string]PodRules{}
			for k, ips := range n1Pods {
				want[k] = PodRules{IPs: ips}
			}
			for k, pr := range tc.want {
				if _, ok := n1Pods[k]; !ok {
					t.Fatalf("bad test: %s is not on n1", k)
				}
				pr.IPs = n1Pods[k]
				want[k] = pr
			}
			if diff := cmp.Diff(want, got.Pods, addrComparer, ignoreSource); diff != "" {
				t.Errorf("Pods (-want +got):\n%s", diff)
			}

			var gotRefused, wantRefused []string
			for _, r := range got.Refused {
				gotRefused = append(gotRefused, r.Policy)
				for _, s := range tc.refused[r.Policy] {
					if !strings.Contains(r.Reason, s) {
						t.Errorf("refusal of %s says %q, without %q", r.Policy, r.Reason, s)
					}
				}
			}
			for k := range tc.refused {
				wantRefused = append(wantRefused, k)
			}
			slices.Sort(wantRefused)
			if diff := cmp.Diff(wantRefused, gotRefused); diff != "" {
				t.Errorf("refused policies (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCompileLocalPods: Rules has an entry for every pod of the node, selected or not, and for
// no other.
func TestCompileLocalPods(t *testing.T) {
	c := testCluster()
	c.Policies = []*networkingv1.NetworkPolicy{newPolicy("a", "web", match("app", "web"), types(ingress))}
	for _, tc := range []struct {
		node string
		want []string
	}{
		{"n1", []string{"a/db", "a/web1", "b/web"}},
		{"n2", []string{"a/web2", "b/client", "c/client"}},
		{"n3", nil},
	} {
		got := Compile(c, tc.node, Options{})
		var keys []string
		for k, pr := range got.Pods {
			keys = append(keys, k)
			if isWeb := k == "a/web1" || k == "a/web2"; isWeb != (pr.Ingress != nil) {
				t.Errorf("%s on %s: ingress isolated is %v", k, tc.node, pr.Ingress != nil)
			}
		}
		slices.Sort(keys)
		if diff := cmp.Diff(tc.want, keys); diff != "" {
			t.Errorf("pods of %s (-want +got):\n%s", tc.node, diff)
		}
		if got.Pods == nil {
			t.Errorf("Pods of %s is nil", tc.node)
		}
	}
}

// TestRuleSource: every rule names the policy rule it comes from; rules of one source have
// the same peers whichever local pod they apply to, and the sources stay when a peer pod
// changes (so that a data plane keeps one set per source, rewritten element by element).
func TestRuleSource(t *testing.T) {
	c := benchCluster(120, 4, 6, 20)
	sources := func(r Rules) map[string][]Range {
		t.Helper()
		out := map[string][]Range{}
		for key, pr := range r.Pods {
			for _, d := range []*Direction{pr.Ingress, pr.Egress} {
				if d == nil {
					continue
				}
				for _, rule := range d.Allow {
					if !strings.Contains(rule.Source, " spec.ingress[") && !strings.Contains(rule.Source, " spec.egress[") {
						t.Fatalf("pod %s: a rule of source %q", key, rule.Source)
					}
					if have, ok := out[rule.Source]; ok && !cmp.Equal(have, rule.Peers, addrComparer) {
						t.Errorf("source %q: peers %v for one pod, %v for %s", rule.Source, have, rule.Peers, key)
					}
					out[rule.Source] = rule.Peers
				}
			}
		}
		return out
	}
	before := sources(Compile(c, "node-1", Options{}))
	named := 0
	for src := range before {
		if strings.Contains(src, " port TCP/") {
			named++
		}
	}
	if len(before) < 10 || named == 0 {
		t.Fatalf("%d sources, %d of egress named ports: the test would prove little", len(before), named)
	}
	for i := range c.Pods {
		if c.Pods[i].Node != "node-1" {
			c.Pods[i].Labels = map[string]string{"app": c.Pods[i].Labels["app"], "role": "role-1"}
		}
	}
	after := sources(Compile(c, "node-1", Options{}))
	for src := range before {
		if _, ok := after[src]; !ok {
			t.Errorf("source %q gone after peers changed roles", src)
		}
	}
}

// TestCompileDeterministic: the order of pods and policies in the cluster does not change the
// rules.
func TestCompileDeterministic(t *testing.T) {
	c := benchCluster(120, 4, 6, 20)
	want := Compile(c, "node-1", Options{})
	if len(want.Pods) == 0 {
		t.Fatal("no pods on node-1")
	}
	isolated := 0
	for _, pr := range want.Pods {
		if pr.Ingress != nil && len(pr.Ingress.Allow) > 0 {
			isolated++
		}
	}
	if isolated == 0 {
		t.Fatal("no pod with ingress rules: the test would prove nothing")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		r.Shuffle(len(c.Pods), func(i, j int) { c.Pods[i], c.Pods[j] = c.Pods[j], c.Pods[i] })
		r.Shuffle(len(c.Policies), func(i, j int) { c.Policies[i], c.Policies[j] = c.Policies[j], c.Policies[i] })
		if diff := cmp.Diff(want, Compile(c, "node-1", Options{}), addrComparer); diff != "" {
			t.Fatalf("after shuffling (-first +now):\n%s", diff)
		}
	}
}

func TestNormalizeRanges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want []Range
	}{
		{"empty", nil, nil},
		{"disjoint, sorted", []Range{host("10.0.0.5"), host("10.0.0.1")}, []Range{host("10.0.0.1"), host("10.0.0.5")}},
		{"neighbours merged", []Range{host("10.0.0.2"), host("10.0.0.1"), span("10.0.0.3", "10.0.0.9")}, []Range{span("10.0.0.1", "10.0.0.9")}},
		{"contained", []Range{span("10.0.0.0", "10.0.0.255"), host("10.0.0.7")}, []Range{span("10.0.0.0", "10.0.0.255")}},
		{"overlapping", []Range{span("10.0.0.5", "10.0.0.20"), span("10.0.0.0", "10.0.0.10")}, []Range{span("10.0.0.0", "10.0.0.20")}},
		{"IPv4 first", []Range{host("::1"), host("255.255.255.255")}, []Range{host("255.255.255.255"), host("::1")}},
		{
			"families never merge, even where their ends meet",
			[]Range{span("::", "::5"), span("0.0.0.0", "255.255.255.255")},
			[]Range{span("0.0.0.0", "255.255.255.255"), span("::", "::5")},
		},
		{
			"last address of a family",
			[]Range{span("255.255.255.0", "255.255.255.255"), host("255.255.255.255"), span("ffff::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), host("ffff::1")},
			[]Range{span("255.255.255.0", "255.255.255.255"), span("ffff::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")},
		},
	} {
		if diff := cmp.Diff(tc.want, normalizeRanges(slices.Clone(tc.in)), addrComparer); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestSubtract(t *testing.T) {
	for _, tc := range []struct {
		cidr   string
		except []string
		want   []Range
	}{
		{"10.0.0.0/24", nil, []Range{span("10.0.0.0", "10.0.0.255")}},
		{"10.0.0.0/24", []string{"10.0.0.0/24"}, nil},
		{"10.0.0.0/24", []string{"10.0.0.0/8"}, nil},
		{"10.0.0.0/24", []string{"10.0.0.0/25"}, []Range{span("10.0.0.128", "10.0.0.255")}},
		{"10.0.0.0/24", []string{"10.0.0.128/25"}, []Range{span("10.0.0.0", "10.0.0.127")}},
		{"10.0.0.0/24", []string{"10.0.0.7/32", "10.0.0.8/32", "11.0.0.0/8"}, []Range{span("10.0.0.0", "10.0.0.6"), span("10.0.0.9", "10.0.0.255")}},
		{"0.0.0.0/0", []string{"128.0.0.0/1", "::/0"}, []Range{span("0.0.0.0", "127.255.255.255")}},
		{"0.0.0.0/0", []string{"255.255.255.255/32"}, []Range{span("0.0.0.0", "255.255.255.254")}},
		{"::/0", []string{"0.0.0.0/0", "::/1"}, []Range{span("8000::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
		{"fd00::/64", []string{"fd00::/65"}, []Range{span("fd00::8000:0:0:0", "fd00::ffff:ffff:ffff:ffff")}},
	} {
		var cuts []Range
		for _, e := range tc.except {
			cuts = append(cuts, prefixRange(netip.MustParsePrefix(e)))
		}
		got := subtract(prefixRange(netip.MustParsePrefix(tc.cidr)), normalizeRanges(cuts))
		if diff := cmp.Diff(tc.want, got, addrComparer); diff != "" {
			t.Errorf("%s except %v (-want +got):\n%s", tc.cidr, tc.except, diff)
		}
	}
}

func TestNormalizePorts(t *testing.T) {
	in := []Port{{UDP, 53, 53}, {TCP, 90, 100}, {SCTP, 9, 9}, {TCP, 80, 89}, {UDP, 0, 0}, {TCP, 101, 101}, {TCP, 200, 300}, {TCP, 250, 260}}
	want := []Port{{SCTP, 9, 9}, {TCP, 80, 101}, {TCP, 200, 300}, {UDP, 0, 0}}
	orig := slices.Clone(in)
	if diff := cmp.Diff(want, normalizePorts(in)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !slices.Equal(in, orig) {
		t.Errorf("normalizePorts changed its argument: %v", in)
	}
}

// benchCluster builds a cluster of pods over nodes and namespaces, with policies spread over
// the namespaces: each selects an app, allows ingress from that app's clients in the
// namespaces of a team and on a named port, and egress to DNS, to an ipBlock, and to the pods
// of the namespace by named port.
func benchCluster(pods, nodes, namespaces, policies int) Cluster {
	c := Cluster{Namespaces: map[string]Namespace{}}
	for i := range namespaces {
		name := fmt.Sprintf("ns-%d", i)
		c.Namespaces[name] = Namespace{Name: name, Labels: map[string]string{
			"kubernetes.io/metadata.name": name, "team": fmt.Sprintf("team-%d", i%5),
		}}
	}
	for i := range pods {
		c.Pods = append(c.Pods, Pod{
			Namespace: fmt.Sprintf("ns-%d", i%namespaces),
			Name:      fmt.Sprintf("pod-%d", i),
			Node:      fmt.Sprintf("node-%d", i%nodes),
			Labels:    map[string]string{"app": fmt.Sprintf("app-%d", i%7), "role": fmt.Sprintf("role-%d", i%3)},
			IPs: []netip.Addr{
				netip.AddrFrom4([4]byte{10, 244, byte(i / 200), byte(i%200 + 1)}),
				netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 8), byte(i)}),
			},
			Ports: []NamedPort{{"http", TCP, uint16(8080 + i%3)}, {"metrics", TCP, 9090}},
		})
	}
	for i := range policies {
		app := fmt.Sprintf("app-%d", i%7)
		c.Policies = append(c.Policies, newPolicy(fmt.Sprintf("ns-%d", i%namespaces), fmt.Sprintf("policy-%d", i), match("app", app),
			types(ingress, egress),
			allowIn(peers(
				bothPeer(match("team", fmt.Sprintf("team-%d", i%5)), match("role", "role-1")),
				podPeer(expr("app", metav1.LabelSelectorOpIn, app, "app-0")),
			), npNamed("TCP", "http"), npPort("TCP", 443)),
			allowIn(peers(blockPeer("192.168.0.0/16", "192.168.1.0/24"))),
			allowOut(peers(nsPeer(match("kubernetes.io/metadata.name", "ns-0"))), npPort("UDP", 53), npPort("TCP", 53)),
			allowOut(peers(podPeer(everything()), blockPeer("10.0.0.0/8", "10.244.0.0/16")), npNamed("TCP", "metrics")),
		))
	}
	return c
}

func BenchmarkCompile(b *testing.B) {
	c := benchCluster(1000, 10, 50, 100)
	b.ReportAllocs()
	for b.Loop() {
		Compile(c, "node-3", Options{})
	}
}

// FuzzCompile builds a small cluster from the fuzzer's bytes and checks Compile against the
// API's semantics evaluated packet by packet (fuzzOracle), which shares no code with it: for
// every local pod, every address of the cluster and some outside it, and a few ports of each
// protocol, both must allow or deny alike, each way. It also checks the shape of the Rules:
// an entry for every local pod and no other, peers normalized, the policies refused exactly
// those built invalid.
func FuzzCompile(f *testing.F) {
	f.Add([]byte{})
	// Random seeds, the same every run, so that plain go test covers some ground.
	r := rand.New(rand.NewPCG(3, 4))
	for range 64 {
		seed := make([]byte, 100+r.IntN(200))
		for i := range seed {
			seed[i] = byte(r.Uint32())
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &fuzzGen{data: data}
		c, opts, invalid := g.cluster()
		for _, node := range []string{"n1", "n2"} {
			checkCompile(t, c, node, opts, invalid)
		}
	})
}

// fuzzGen turns bytes into choices; once they run out, every choice is the first.
type fuzzGen struct{ data []byte }

func (g *fuzzGen) pick(n int) int {
	if len(g.data) == 0 {
		return 0
	}
	b := g.data[0]
	g.data = g.data[1:]
	return int(b) % n
}

// choose picks one of good or, now and then, one of bad, and says which.
func choose[T any](g *fuzzGen, good, bad []T) (T, bool) {
	if g.pick(64) == 63 {
		return bad[g.pick(len(bad))], true
	}
	return good[g.pick(len(good))], false
}

// cluster returns a cluster of up to 8 pods (unique addresses, some adjacent) in 3 namespaces
// over 2 nodes, and up to 4 policies, some invalid; and which policies Compile must refuse.
func (g *fuzzGen) cluster() (Cluster, Options, map[string]bool) {
	opts := Options{SCTP: g.pick(4) != 0}
	c := Cluster{Namespaces: map[string]Namespace{}}
	nsNames := []string{"x", "y", "z"}
	for _, ns := range nsNames {
		labels := map[string]string{"kubernetes.io/metadata.name": ns}
		switch g.pick(4) {
		case 0:
			continue // not (yet) known: it has no labels
		case 1:
			labels["env"] = "prod"
		case 2:
			labels["env"] = "dev"
		}
		c.Namespaces[ns] = Namespace{Name: ns, Labels: labels}
	}
	namedPorts := []NamedPort{{"http", TCP, 80}, {"http", TCP, 8080}, {"dns", UDP, 53}, {"dns", "", 53}, {"s", SCTP, 9}}
	for i := range g.pick(9) {
		p := Pod{
			Namespace: nsNames[g.pick(3)],
			Name:      fmt.Sprintf("p%d", i),
			Node:      []string{"n1", "n2"}[g.pick(2)],
			Labels:    map[string]string{},
		}
		if app := []string{"", "a", "b"}[g.pick(3)]; app != "" {
			p.Labels["app"] = app
		}
		n := byte(2*i + 1 + g.pick(2))
		family := g.pick(3)
		if family != 1 {
			p.IPs = append(p.IPs, netip.AddrFrom4([4]byte{10, 0, 0, n}))
		}
		if family != 0 {
			p.IPs = append(p.IPs, netip.AddrFrom16([16]byte{0xfd, 15: n}))
		}
		for range g.pick(3) {
			p.Ports = append(p.Ports, namedPorts[g.pick(len(namedPorts))])
		}
		c.Pods = append(c.Pods, p)
	}

	podSelectors := []*metav1.LabelSelector{
		everything(), match("app", "a"), match("app", "b"),
		expr("app", metav1.LabelSelectorOpIn, "a", "b"), expr("app", metav1.LabelSelectorOpDoesNotExist),
	}
	badPodSelectors := []*metav1.LabelSelector{expr("app", "Bogus", "a"), match("app", "-x-")}
	nsSelectors := []*metav1.LabelSelector{
		everything(), match("env", "prod"), expr("kubernetes.io/metadata.name", metav1.LabelSelectorOpIn, "x"),
	}
	badNSSelectors := []*metav1.LabelSelector{expr("env", metav1.LabelSelectorOpIn)}
	blocks := []networkingv1.NetworkPolicyPeer{
		blockPeer("10.0.0.0/29"), blockPeer("10.0.0.0/28", "10.0.0.4/30"),
		blockPeer("0.0.0.0/0", "10.0.0.0/30", "10.0.0.8/31"), blockPeer("fd00::/124"),
		blockPeer("fd00::/120", "fd00::8/125"), blockPeer("::/0"), blockPeer("10.0.0.3/32"),
	}
	badBlocks := []networkingv1.NetworkPolicyPeer{blockPeer("10.0.0.0/40"), blockPeer("10.0.0.0/24", "x")}
	namedWithEnd := npNamed("TCP", "http")
	namedWithEnd.EndPort = new(int32(90))
	ports := []networkingv1.NetworkPolicyPort{
		{}, npPort("TCP", 80), npPort("UDP", 53), npRange("TCP", 8000, 8080), npNamed("TCP", "http"),
		npNamed("UDP", "dns"), npNamed("TCP", "dns"), npAll("UDP"), namedWithEnd,
		npPort("SCTP", 9), npNamed("SCTP", "s"), npAll("SCTP"),
	}
	badPorts := []networkingv1.NetworkPolicyPort{npPort("TCP", 0), npRange("UDP", 53, 52)}

	invalid := map[string]bool{}
	for i := range g.pick(5) {
		sel, bad := choose(g, podSelectors, badPodSelectors)
		np := newPolicy(nsNames[g.pick(3)], fmt.Sprintf("np%d", i), sel)
		np.Spec.PolicyTypes = [][]networkingv1.PolicyType{nil, {ingress}, {egress}, {ingress, egress}}[g.pick(4)]
		rule := func() (ps []networkingv1.NetworkPolicyPeer, pps []networkingv1.NetworkPolicyPort, sctp bool) {
			for range g.pick(3) {
				switch g.pick(4) {
				case 0:
					s, b := choose(g, podSelectors, badPodSelectors)
					ps, bad = append(ps, podPeer(s)), bad || b
				case 1:
					n, b := choose(g, nsSelectors, badNSSelectors)
					ps, bad = append(ps, nsPeer(n)), bad || b
				case 2:
					s, b1 := choose(g, podSelectors, badPodSelectors)
					n, b2 := choose(g, nsSelectors, badNSSelectors)
					ps, bad = append(ps, bothPeer(n, s)), bad || b1 || b2
				default:
					p, b := choose(g, blocks, badBlocks)
					ps, bad = append(ps, p), bad || b
				}
			}
			for range g.pick(3) {
				p, b := choose(g, ports, badPorts)
				pps, bad = append(pps, p), bad || b
				sctp = sctp || p.Protocol != nil && *p.Protocol == corev1.ProtocolSCTP
			}
			return ps, pps, sctp
		}
		var sctpIn, sctpOut bool
		for range g.pick(4) {
			from, ps, sctp := rule()
			np.Spec.Ingress, sctpIn = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: from, Ports: ps}), sctpIn || sctp
		}
		for range g.pick(4) {
			to, ps, sctp := rule()
			np.Spec.Egress, sctpOut = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: to, Ports: ps}), sctpOut || sctp
		}
		in, out := fuzzTypes(np)
		if bad || !opts.SCTP && (in && sctpIn || out && sctpOut) {
			invalid[np.Namespace+"/"+np.Name] = true
		}
		c.Policies = append(c.Policies, np)
	}
	return c, opts, invalid
}

// fuzzTypes returns the directions np isolates, as the API reference defines them.
func fuzzTypes(np *networkingv1.NetworkPolicy) (in, out bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	return slices.Contains(np.Spec.PolicyTypes, ingress), slices.Contains(np.Spec.PolicyTypes, egress)
}

func checkCompile(t *testing.T, c Cluster, node string, opts Options, invalid map[string]bool) {
	t.Helper()
	got := Compile(c, node, opts)

	refused := map[string]bool{}
	for _, r := range got.Refused {
		refused[r.Policy] = true
		if r.Reason == "" {
			t.Errorf("%s refused without a reason", r.Policy)
		}
	}
	if diff := cmp.Diff(invalid, refused); diff != "" {
		t.Errorf("refused policies (-want +got):\n%s", diff)
	}

	o := fuzzOracle{c: c, refused: refused, selectors: map[*metav1.LabelSelector]labels.Selector{}}
	var remotes []netip.Addr
	for _, p := range c.Pods {
		remotes = append(remotes, p.IPs...)
	}
	// Every address from the blocks' edges to the pods' and a little beyond, and some far off.
	for n := range 20 {
		remotes = append(remotes, netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}), netip.AddrFrom16([16]byte{0xfd, 15: byte(n)}))
	}
	for _, s := range []string{"0.0.0.0", "9.255.255.255", "10.0.0.255", "10.0.1.0", "192.168.1.1", "255.255.255.255",
		"::", "fd00::ff", "fd00::100", "2001:db8::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"} {
		remotes = append(remotes, netip.MustParseAddr(s))
	}

	local := 0
	for i := range c.Pods {
		pod := &c.Pods[i]
		key := pod.Namespace + "/" + pod.Name
		pr, ok := got.Pods[key]
		if pod.Node != node {
			if ok {
				t.Errorf("%s is on %s, not %s, but has rules", key, pod.Node, node)
			}
			continue
		}
		local++
		if !ok {
			t.Errorf("%s is on %s but has no entry", key, node)
			continue
		}
		if !slices.Equal(pr.IPs, pod.IPs) {
			t.Errorf("%s: IPs %v, want %v", key, pr.IPs, pod.IPs)
		}
		var wantPolicies []string
		for _, np := range o.selecting(pod) {
			wantPolicies = append(wantPolicies, np.Namespace+"/"+np.Name)
		}
		slices.Sort(wantPolicies)
		if diff := cmp.Diff(wantPolicies, pr.Policies); diff != "" {
			t.Errorf("%s: policies (-want +got):\n%s", key, diff)
		}
		for _, dir := range []struct {
			name string
			d    *Direction
			in   bool
		}{{"ingress", pr.Ingress, true}, {"egress", pr.Egress, false}} {
			if isolated := o.isolated(pod, dir.in); isolated != (dir.d != nil) {
				t.Errorf("%s: %s isolated is %v, want %v", key, dir.name, dir.d != nil, isolated)
				continue
			}
			if dir.d != nil {
				for _, r := range dir.d.Allow {
					if err := checkRule(r); err != nil {
						t.Errorf("%s: %s rule %+v: %v", key, dir.name, r, err)
					}
				}
			}
			for _, remote := range remotes {
				for _, proto := range []Protocol{TCP, UDP, SCTP} {
					for _, port := range []uint16{9, 53, 80, 443, 8000, 8080, 8081} {
						want := o.allowed(pod, dir.in, remote, port, proto)
						if got := directionAllows(dir.d, remote, port, proto); got != want {
							t.Fatalf("%s: %s with %s on %s/%d: allowed %v, want %v\nrules: %+v", key, dir.name, remote, proto, port, got, want, dir.d)
						}
					}
				}
			}
		}
	}
	if len(got.Pods) != local {
		t.Errorf("%d entries for %d pods on %s", len(got.Pods), local, node)
	}
}

// directionAllows is how a data plane reads a Direction: nil allows everything.
func directionAllows(d *Direction, remote netip.Addr, port uint16, proto Protocol) bool {
	if d == nil {
		return true
	}
	for _, r := range d.Allow {
		peerOK := r.Any
		for _, p := range r.Peers {
			peerOK = peerOK || !remote.Less(p.From) && !p.To.Less(remote)
		}
		portOK := len(r.Ports) == 0
		for _, p := range r.Ports {
			portOK = portOK || p.Protocol == proto && (p.From == 0 || p.From <= port && port <= p.To)
		}
		if peerOK && portOK {
			return true
		}
	}
	return false
}

// checkRule reports what is wrong with the shape of r: peers with Any, none without it, or
// peers not normalized.
func checkRule(r Rule) error {
	if r.Any != (len(r.Peers) == 0) {
		return fmt.Errorf("Any is %v with %d peers", r.Any, len(r.Peers))
	}
	for i, p := range r.Peers {
		if !p.From.IsValid() || p.From.BitLen() != p.To.BitLen() || p.To.Less(p.From) {
			return fmt.Errorf("peer %d is not a range", i)
		}
		if i == 0 {
			continue
		}
		prev := r.Peers[i-1]
		switch {
		case prev.To.BitLen() > p.From.BitLen():
			return fmt.Errorf("peer %d: IPv6 before IPv4", i)
		case prev.To.BitLen() < p.From.BitLen():
		case !prev.To.Next().IsValid() || !prev.To.Next().Less(p.From):
			return fmt.Errorf("peers %d and %d overlap, touch or are out of order", i-1, i)
		}
	}
	for i, p := range r.Ports {
		if p.From == 0 && p.To != 0 || p.To < p.From {
			return fmt.Errorf("port %d is not a range", i)
		}
	}
	return nil
}

// fuzzOracle answers, for one packet, what the API reference says of it, the way an
// implementation that evaluates each packet would (kube-network-policies does). Refused
// policies, as Compile says them, isolate and allow nothing.
type fuzzOracle struct {
	c         Cluster
	refused   map[string]bool
	selectors map[*metav1.LabelSelector]labels.Selector // parsed, nil when invalid
}

func (o fuzzOracle) selector(s *metav1.LabelSelector) labels.Selector {
	sel, ok := o.selectors[s]
	if !ok {
		sel, _ = metav1.LabelSelectorAsSelector(s)
		o.selectors[s] = sel
	}
	return sel
}

// selecting returns the policies that select pod; one whose podSelector cannot be parsed
// selects every pod of its namespace.
func (o fuzzOracle) selecting(pod *Pod) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, np := range o.c.Policies {
		if np.Namespace != pod.Namespace {
			continue
		}
		if sel := o.selector(&np.Spec.PodSelector); sel == nil || sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, np)
		}
	}
	return out
}

func (o fuzzOracle) isolated(pod *Pod, in bool) bool {
	for _, np := range o.selecting(pod) {
		if i, e := fuzzTypes(np); in && i || !in && e {
			return true
		}
	}
	return false
}

// allowed says whether pod may receive (in) from, or send to, remote on port and proto; the
// port is pod's for ingress, the remote's for egress.
func (o fuzzOracle) allowed(pod *Pod, in bool, remote netip.Addr, port uint16, proto Protocol) bool {
	if !o.isolated(pod, in) {
		return true
	}
	remotePod := o.podOf(remote)
	for _, np := range o.selecting(pod) {
		if o.refused[np.Namespace+"/"+np.Name] {
			continue
		}
		i, e := fuzzTypes(np)
		if in && i {
			for _, r := range np.Spec.Ingress {
				if o.portsMatch(r.Ports, pod, port, proto) && o.peersMatch(np.Namespace, r.From, remote, remotePod) {
					return true
				}
			}
		}
		if !in && e {
			for _, r := range np.Spec.Egress {
				if o.portsMatch(r.Ports, remotePod, port, proto) && o.peersMatch(np.Namespace, r.To, remote, remotePod) {
					return true
				}
			}
		}
	}
	return false
}

func (o fuzzOracle) podOf(a netip.Addr) *Pod {
	for i := range o.c.Pods {
		if slices.Contains(o.c.Pods[i].IPs, a) {
			return &o.c.Pods[i]
		}
	}
	return nil
}

func (o fuzzOracle) portsMatch(ports []networkingv1.NetworkPolicyPort, target *Pod, port uint16, proto Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		want := Protocol("TCP")
		if p.Protocol != nil {
			want = Protocol(*p.Protocol)
		}
		switch {
		case want != proto:
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.Int:
			end := p.Port.IntVal
			if p.EndPort != nil {
				end = *p.EndPort
			}
			if int32(port) >= p.Port.IntVal && int32(port) <= end {
				return true
			}
		case target != nil:
			for _, np := range target.Ports {
				npProto := np.Protocol
				if npProto == "" {
					npProto = TCP
				}
				if np.Name == p.Port.StrVal && npProto == proto && np.Port == port {
					return true
				}
			}
		}
	}
	return false
}

func (o fuzzOracle) peersMatch(policyNS string, peers []networkingv1.NetworkPolicyPeer, remote netip.Addr, remotePod *Pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			cidr := netip.MustParsePrefix(p.IPBlock.CIDR)
			in := cidr.Contains(remote)
			for _, e := range p.IPBlock.Except {
				in = in && !netip.MustParsePrefix(e).Contains(remote)
			}
			if in {
				return true
			}
			continue
		}
		if remotePod == nil {
			continue
		}
		podsOK := true
		if p.PodSelector != nil {
			podsOK = o.selector(p.PodSelector).Matches(labels.Set(remotePod.Labels))
		}
		nsOK := remotePod.Namespace == policyNS
		if p.NamespaceSelector != nil {
			nsOK = o.selector(p.NamespaceSelector).Matches(labels.Set(o.c.Namespaces[remotePod.Namespace].Labels))
		}
		if podsOK && nsOK {
			return true
		}
	}
	return false
}

// TestRangePrefixes: the prefixes of a range cover exactly its addresses, in order, each
// aligned, and are the fewest (no two neighbours could merge into one prefix), for random
// ranges of both families, single addresses and whole spaces.
func TestRangePrefixes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	v4 := func() netip.Addr {
		return netip.AddrFrom4([4]byte{byte(r.IntN(3)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
	}
	v6 := func() netip.Addr {
		var b [16]byte
		b[0] = 0xfd
		for i := 12; i < 16; i++ {
			b[i] = byte(r.IntN(256))
		}
		return netip.AddrFrom16(b)
	}
	cases := []Range{
		host("10.0.0.1"),
		{addr4("0.0.0.0"), addr4("255.255.255.255")},
		{netip.MustParseAddr("::"), netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")},
		{addr4("10.0.0.0"), addr4("10.0.0.255")},
		{addr4("10.0.0.1"), addr4("10.0.1.0")},
	}
	for range 300 {
		gen := v4
		if r.IntN(2) == 0 {
			gen = v6
		}
		a, b := gen(), gen()
		if b.Less(a) {
			a, b = b, a
		}
		cases = append(cases, Range{a, b})
	}
	for _, c := range cases {
		ps := c.Prefixes()
		if len(ps) == 0 || ps[0].Addr() != c.From || prefixRange(ps[len(ps)-1]).To != c.To {
			t.Fatalf("%v: prefixes %v do not start and end with the range", c, ps)
		}
		for i, p := range ps {
			if p.Masked() != p {
				t.Fatalf("%v: prefix %v is not aligned", c, p)
			}
			if i > 0 && prefixRange(ps[i-1]).To.Next() != p.Addr() {
				t.Fatalf("%v: a gap or an overlap between %v and %v", c, ps[i-1], p)
			}
			if i > 0 && ps[i-1].Bits() == p.Bits() && p.Bits() > 0 {
				if parent := netip.PrefixFrom(ps[i-1].Addr(), p.Bits()-1).Masked(); parent.Addr() == ps[i-1].Addr() {
					t.Fatalf("%v: %v and %v make one prefix %v", c, ps[i-1], p, parent)
				}
			}
		}
	}
}

func addr4(s string) netip.Addr { return netip.MustParseAddr(s) }
