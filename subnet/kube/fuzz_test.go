package kube

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/subnet"
)

// FuzzPeerLease feeds hostile node annotations and podCIDRs to the parser of peers: it must
// never panic, and whatever it accepts must be a lease the rest of weft can use: the node's
// subnet, a public IPv4 address, and backend data that is valid JSON.
func FuzzPeerLease(f *testing.F) {
	f.Add("10.244.1.0/24", "192.0.2.10", "vxlan", `{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`)
	f.Add("10.244.2.0/24", "192.0.2.11", "host-gw", "null")
	f.Add("10.244.2.1/24", "::1", "", "{")
	f.Add("fd00::/64", "0.0.0.0", "vxlan", `[]`)
	cfg, m := fuzzManager(f, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	ann := m.ann
	f.Fuzz(func(t *testing.T, cidr, ip, backendType, data string) {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "peer", Annotations: map[string]string{
				ann.managed: "true", ann.publicIP: ip, ann.backendType: backendType, ann.backendData: data,
			}},
			Spec: corev1.NodeSpec{PodCIDR: cidr},
		}
		l, peer, err := m.peerLease(cfg, n)
		if err != nil || !peer {
			return
		}
		if l.Subnet.String() != cidr || !l.Attrs.PublicIP.Is4() || l.Attrs.BackendType != backendType {
			t.Fatalf("accepted %q %q %q as %+v", cidr, ip, backendType, l)
		}
		if l.Attrs.BackendData != nil && !json.Valid(l.Attrs.BackendData) {
			t.Fatalf("accepted backend data %q", l.Attrs.BackendData)
		}
	})
}

// FuzzDualStackPeerLease: a dual-stack peer's IPv6 annotations, however hostile, never spoil
// its IPv4 half: whatever the IPv6 values, the lease is accepted or refused as without them,
// its IPv4 half is the same, and what it carries of IPv6 is an IPv6 address (or the bad value
// kept aside) and valid JSON.
func FuzzDualStackPeerLease(f *testing.F) {
	f.Add("fd00:10:244:2::/64", "fd77:77::12", `{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:45"}`)
	f.Add("fd00:10:244:2::/64", "192.0.2.12", `{`)
	f.Add("10.244.9.0/24", "fe80::1%eth0", `null`)
	f.Add("fd99::/64", "", `[]`)
	cfg, m := fuzzManager(f, `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`)
	ann := m.ann
	node := func(cidr6, ip6, data6 string, v6 bool) *corev1.Node {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "peer", Annotations: map[string]string{ann.managed: "true",
				ann.publicIP: "192.0.2.12", ann.backendType: "vxlan", ann.backendData: `{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`}},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.2.0/24", PodCIDRs: []string{"10.244.2.0/24"}},
		}
		if v6 {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, cidr6)
			n.Annotations[ann.publicIPv6], n.Annotations[ann.backendV6Data] = ip6, data6
		}
		return n
	}
	f.Fuzz(func(t *testing.T, cidr6, ip6, data6 string) {
		l, peer, err := m.peerLease(cfg, node(cidr6, ip6, data6, true))
		base, _, baseErr := m.peerLease(cfg, node("", "", "", false))
		if baseErr != nil {
			t.Fatalf("the IPv4 half alone is refused: %v", baseErr)
		}
		if err != nil || !peer {
			// Only the podCIDRs may spoil the whole lease (two of one family, not a CIDR).
			return
		}
		if l.Subnet != base.Subnet || l.Attrs.PublicIP != base.Attrs.PublicIP || string(l.Attrs.BackendData) != string(base.Attrs.BackendData) {
			t.Fatalf("the IPv6 annotations changed the IPv4 half: %+v, alone %+v", l, base)
		}
		if a := l.Attrs.PublicIPv6; a.IsValid() && (!a.Is6() || a.Is4In6() || a.Zone() != "") {
			t.Fatalf("accepted PublicIPv6 %s", a)
		}
		if l.Attrs.BackendV6Data != nil && !json.Valid(l.Attrs.BackendV6Data) {
			t.Fatalf("accepted IPv6 backend data %q", l.Attrs.BackendV6Data)
		}
	})
}

// fuzzManager is the network config conf and a Manager that reads peers' annotations with
// the default prefix.
func fuzzManager(f *testing.F, conf string) (*subnet.Config, *Manager) { return fuzzManagerT(f, conf) }

// fuzzManagerT is fuzzManager for any test.
func fuzzManagerT(f testing.TB, conf string) (*subnet.Config, *Manager) {
	cfg, err := subnet.ParseConfig([]byte(conf))
	if err != nil {
		f.Fatal(err)
	}
	ann, err := newAnnotations(DefaultAnnotationPrefix)
	if err != nil {
		f.Fatal(err)
	}
	return cfg, &Manager{ann: ann}
}
