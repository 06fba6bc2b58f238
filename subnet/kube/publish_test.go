package kube

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/subnet"
)

// TestAnnotationsRoundTrip: what Annotations publishes is what a peer's watcher reads back.
func TestAnnotationsRoundTrip(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	attrs := subnet.LeaseAttrs{
		PublicIP:    netip.MustParseAddr("198.18.0.7"),
		BackendType: "vxlan",
		BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"02:00:00:00:00:07"}`),
	}
	for _, prefix := range []string{"", "example.com/weft"} {
		ann, err := Annotations(prefix, cfg, attrs)
		if err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		want := prefix
		if want == "" {
			want = DefaultAnnotationPrefix
		}
		a, err := newAnnotations(want)
		if err != nil {
			t.Fatal(err)
		}
		if ann[a.managed] != "true" {
			t.Errorf("prefix %q: %s = %q, want true", prefix, a.managed, ann[a.managed])
		}
		got, err := a.attrs(cfg, mapLookup(ann))
		if err != nil {
			t.Fatalf("prefix %q: reading back %v: %v", prefix, ann, err)
		}
		if !got.Equal(attrs) {
			t.Errorf("prefix %q: read back %+v, want %+v", prefix, got, attrs)
		}
	}
	if _, err := Annotations("a/b/c", cfg, attrs); err == nil {
		t.Error("a prefix with two '/' was accepted")
	}
}

// TestPeerLeaseAge: a peer's lease is as old as its Node, so that every node settles clashing
// claims alike; a Node of unknown creation time gives a lease of unknown age.
func TestPeerLeaseAge(t *testing.T) {
	cfg, m := fuzzManagerT(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	created := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want int64
	}{{created, created.UnixNano()}, {time.Time{}, 0}} {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "peer", CreationTimestamp: metav1.NewTime(c.at), Annotations: map[string]string{
				m.ann.managed: "true", m.ann.publicIP: "192.0.2.12", m.ann.backendType: "host-gw", m.ann.backendData: "null"}},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.2.0/24"},
		}
		l, peer, err := m.peerLease(cfg, n)
		if err != nil || !peer || l.Created != c.want {
			t.Errorf("Node created %v: lease %+v (%v), want Created %d", c.at, l, err, c.want)
		}
	}
}

// TestOversizedAnnotation: a backend-data annotation over subnet.MaxAttrsSize is cut to just
// over the limit in the watch's cache (which does not keep the original string alive),
// and the peer is refused naming the limit; one at the limit is read.
func TestOversizedAnnotation(t *testing.T) {
	cfg, m := fuzzManagerT(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	node := func(data string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "peer", Annotations: map[string]string{
				m.ann.managed: "true", m.ann.publicIP: "192.0.2.10", m.ann.backendType: "vxlan", m.ann.backendData: data,
			}},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24"},
		}
	}
	padded := func(size int) string {
		const head, tail = `{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44","Pad":"`, `"}`
		return head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	}
	big := padded(1 << 20)
	rec := m.ann.record(node(big))
	kept, _ := rec.lookup(m.ann)(m.ann.backendData)
	if len(kept) != subnet.MaxAttrsSize+1 || unsafe.StringData(kept) == unsafe.StringData(big) {
		t.Errorf("the cache keeps %d bytes of the 1 MiB annotation (shared with it: %v); want %d of its own",
			len(kept), unsafe.StringData(kept) == unsafe.StringData(big), subnet.MaxAttrsSize+1)
	}
	if _, _, err := m.peerLease(cfg, node(big)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized backend data: %v, want an error naming the limit", err)
	}
	if _, _, err := m.recordLease(cfg, rec); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized backend data, as cached: %v, want an error naming the limit", err)
	}
	l, peer, err := m.peerLease(cfg, node(padded(subnet.MaxAttrsSize)))
	if err != nil || !peer || len(l.Attrs.BackendData) != subnet.MaxAttrsSize {
		t.Errorf("backend data at the limit: %v, %v, %d bytes", err, peer, len(l.Attrs.BackendData))
	}
}
