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
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16"}`))
	if err != nil {
		f.Fatal(err)
	}
	ann, err := newAnnotations(DefaultAnnotationPrefix)
	if err != nil {
		f.Fatal(err)
	}
	m := &Manager{ann: ann}
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
